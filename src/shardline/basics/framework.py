"""Training frameworks as data: what each one does when a run does not say otherwise.

A framework file (`shardline/basics/frameworks/NAME.toml`) names the defaults of the execution
fields (`shardline.basics.options.Execution`) as that framework's own configuration sets them,
each with its source: the recompute policy, the ZeRO stage, whether kernels are launched one by
one from the host or run as one compiled program (`cuda_graphs`), whether the ops between the
matmuls run fused or op by op (`op_fusion`), the dtype gradients are reduced in, sequence
parallelism and tensor-parallel overlap, the optimizer. A plan made with `framework=NAME` starts
from those defaults; every field the user gives wins over them. The default framework is
Megatron-Core, whose defaults are the Execution defaults.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from typing import Any

from shardline.errors import InputError

__all__ = [
    "ATTENTION_KERNELS",
    "DEFAULT_FRAMEWORK",
    "SETTABLE",
    "Framework",
    "attention_kernel_of",
    "dp_bucket_params",
    "framework_names",
    "fsdp_copies",
    "load_framework",
    "optimizer_step_tensors",
]

DEFAULT_FRAMEWORK = "megatron"
# the fused attention kernels chip files give figures for (achievable.attention_kernels)
ATTENTION_KERNELS = ("fa2", "cudnn", "fa3")


@dataclass(frozen=True)
class Framework:
    """A framework's execution defaults (field -> value) and the source of each; `buckets`:
    its data-parallel gradient bucket rule (params_min, params_per_dp_rank), None if it states
    none; `optimizer_step`: the fp32 tensors its optimizer step reads and writes per parameter
    element (reads, writes), None if it runs a fused multi-tensor Adam (one pass);
    `fsdp_copies`: whether its FSDP copies each all-gathered weight out of the gather buffer
    and each weight gradient into the reduce-scatter buffer on the compute stream (PyTorch
    FSDP2), (copy-out, copy-in)."""

    name: str
    display_name: str
    defaults: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)
    buckets: tuple[float, float] | None = None
    optimizer_step: tuple[float, float] | None = None
    fsdp_copies: tuple[bool, bool] = (False, False)


def _files() -> dict[str, Any]:
    folder = resources.files("shardline.basics") / "frameworks"
    return {e.name[: -len(".toml")]: e for e in folder.iterdir() if e.name.endswith(".toml")}


def framework_names() -> tuple[str, ...]:
    """The shipped frameworks, sorted."""
    return tuple(sorted(_files()))


# the Execution fields (shardline.basics.options) a framework may set; tokens and the framework
# itself are the run's, never a default
SETTABLE = (
    "interleave",
    "recompute",
    "sequence_parallel",
    "tp_overlap",
    "zero",
    "overlap_param_gather",
    "optimizer",
    "cuda_graphs",
    "cp_kind",
    "ep_overlap",
    "ep_dispatch",
    "grad_reduce_dtype",
    "ep_comm_sms",
    "attention_kernel",
    "op_fusion",
)


def load_framework(name: str) -> Framework:
    """The framework `name` (case-insensitive); an unknown name is an input error that lists
    the known ones."""
    if not isinstance(name, str):
        raise InputError(f"a framework is a name, got {type(name).__name__}")
    return _load(name.strip().lower())


@cache
def _load(key: str) -> Framework:
    files = _files()
    if key not in files:
        raise InputError(f"unknown framework {key[:60]!r}; known: {', '.join(sorted(files))}")
    data = tomllib.loads(files[key].read_text(encoding="utf-8"))
    defaults: dict[str, object] = {}
    sources: dict[str, str] = {}
    for knob, entry in data.get("defaults", {}).items():
        if knob not in SETTABLE or not isinstance(entry, dict) or not entry.get("source"):
            raise InputError(f"framework {key}: default {knob!r} is not a sourced Execution field")
        defaults[knob], sources[knob] = entry["value"], entry["source"]
    name = data["name"]
    buckets = _bucket_rule(key, data.get("gradient_buckets"))
    step = _optimizer_step(key, data.get("optimizer_step"))
    copies = _fsdp_copies(key, data.get("fsdp_copies"))
    display = data.get("display_name", name)
    return Framework(name, display, defaults, sources, buckets, step, copies)


def attention_kernel_of(named: str | None, training: bool) -> str | None:
    """The attention kernel a run uses: the one it names, else the default framework's in
    training; None (the chip's generic figures) for inference, whose engines are not training
    frameworks."""
    if named is not None or not training:
        return named
    return load_framework(DEFAULT_FRAMEWORK).defaults.get("attention_kernel")


def _bucket_rule(key: str, table: Any) -> tuple[float, float] | None:
    """(params_min, params_per_dp_rank) of the framework file's [gradient_buckets], each
    sourced; None when the file states no bucket rule."""
    if not table:
        return None
    for name in ("params_min", "params_per_dp_rank"):
        entry = table.get(name)
        if not isinstance(entry, dict) or not entry.get("source"):
            raise InputError(f"framework {key}: gradient_buckets.{name} is not a sourced number")
    return float(table["params_min"]["value"]), float(table["params_per_dp_rank"]["value"])


def _optimizer_step(key: str, table: Any) -> tuple[float, float] | None:
    """(reads, writes) summed over the kernels of the framework file's [optimizer_step]
    (`[[optimizer_step.kernel]]`: fp32 tensors each kernel reads and writes per parameter
    element, each with its source; the gradient clipping's kernels among them); None when the
    file states none."""
    if not table:
        return None
    kernels = table.get("kernel")
    if not isinstance(kernels, list) or not kernels:
        raise InputError(f"framework {key}: optimizer_step has no [[optimizer_step.kernel]]")
    reads = writes = 0.0
    for k in kernels:
        ok = isinstance(k, dict) and k.get("source") and k.get("name")
        if not ok or not all(isinstance(k.get(n), int) and k[n] >= 0 for n in ("reads", "writes")):
            raise InputError(f"framework {key}: optimizer_step kernel {k!r} is not sourced counts")
        reads += k["reads"]
        writes += k["writes"]
    return reads, writes


def _fsdp_copies(key: str, table: Any) -> tuple[bool, bool]:
    """(all_gather_copy_out, reduce_scatter_copy_in) of the framework file's [fsdp_copies], each
    a sourced boolean; (False, False) when the file states none."""
    if not table:
        return False, False
    out = []
    for name in ("all_gather_copy_out", "reduce_scatter_copy_in"):
        entry = table.get(name)
        if not isinstance(entry, dict) or not entry.get("source"):
            raise InputError(f"framework {key}: fsdp_copies.{name} is not a sourced boolean")
        if not isinstance(entry.get("value"), bool):
            raise InputError(f"framework {key}: fsdp_copies.{name} must be true or false")
        out.append(entry["value"])
    return out[0], out[1]


def fsdp_copies(framework: str) -> tuple[bool, bool]:
    """Whether `framework`'s FSDP copies each gathered weight out of the all-gather buffer and
    each weight gradient into the reduce-scatter buffer on the compute stream (frameworks/*.toml
    [fsdp_copies]): (copy-out, copy-in)."""
    return load_framework(framework).fsdp_copies


def optimizer_step_tensors(framework: str) -> tuple[float, float] | None:
    """The fp32 tensors `framework`'s optimizer step reads and writes per parameter element
    (frameworks/*.toml [optimizer_step]); None for a fused multi-tensor Adam, one pass
    (shardline.realistic.block.optimizer_bytes)."""
    return load_framework(framework).optimizer_step


def dp_bucket_params(framework: str, dp: int) -> float | None:
    """Parameters per data-parallel gradient bucket under `framework` over `dp` replicas:
    Megatron-Core's `max(40e6, 1e6 x dp)` (frameworks/megatron.toml); None when the framework
    states no rule (each weight gradient is then its own collective)."""
    rule = load_framework(framework).buckets
    if rule is None:
        return None
    return max(rule[0], rule[1] * dp)
