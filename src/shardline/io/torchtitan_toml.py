"""torchtitan's job TOML (pytorch/torchtitan torchtitan/config/job_config.py): read one into the
plan it describes, and write a plan back as one.

The model is `[model] name` and `flavor` (torchtitan's flavors are Python tables; the ones read
are in framework_models.toml). torchtitan's rules used here (job_config.py, parallel_dims.py):
- devices = data_parallel_replicate x data_parallel_shard x context x tensor x pipeline; a shard
  degree of -1 takes the rest;
- experts split the shard (FSDP) ranks (expert_parallel_degree divides them), so the plan's fsdp
  is the shard degree over ep; the replicate degree is the plan's dp;
- global_batch_size (default -1: local_batch_size x data-parallel ranks) over local_batch_size x
  data-parallel ranks is the gradient accumulation; with pipelining each local batch is split into
  microbatches of pipeline_parallel_microbatch_size;
- activation_checkpoint defaults: mode "selective", selective_ac_option "2" (every second layer).
"""

from __future__ import annotations

import tomllib
from typing import Any

from shardline.errors import InputError
from shardline.io.framework_config import (
    Imported,
    LaunchLayout,
    fill_rest,
    model_name_of,
    named_model,
    plain_model,
    unfolded,
)

__all__ = ["read_torchtitan", "emit_torchtitan"]

# sections read key by key; any other key in them is listed as unknown
KNOWN: dict[str, tuple[str, ...]] = {
    "model": (
        "name",
        "flavor",
        "converters",
        "tokenizer_path",
        "hf_assets_path",
        "print_after_conversion",
    ),
    "training": (
        "local_batch_size",
        "batch_size",
        "global_batch_size",
        "seq_len",
        "mixed_precision_param",
        "mixed_precision_reduce",
        "compile",
        "gradient_accumulation_steps",
        "max_norm",
        "steps",
        "dataset",
        "dataset_path",
        "warmup_steps",
        "seed",
        "deterministic",
        "enable_cpu_offload",
    ),
    "parallelism": (
        "data_parallel_replicate_degree",
        "data_parallel_shard_degree",
        "tensor_parallel_degree",
        "pipeline_parallel_degree",
        "context_parallel_degree",
        "expert_parallel_degree",
        "expert_tensor_parallel_degree",
        "enable_async_tensor_parallel",
        "pipeline_parallel_microbatch_size",
        "pipeline_parallel_schedule",
        "pipeline_parallel_layers_per_stage",
        "pipeline_parallel_split_points",
        "context_parallel_rotate_method",
        "fsdp_reshard_after_forward",
        "disable_loss_parallel",
        "enable_compiled_autograd",
    ),
    "activation_checkpoint": (
        "mode",
        "selective_ac_option",
        "per_op_sac_force_recompute_mm_shapes_by_fqns",
    ),
    "optimizer": ("name", "lr", "eps", "beta1", "beta2", "weight_decay", "implementation"),
    "compile": ("enable", "components", "backend"),
}
# sections that do not change the step time (logging, checkpoints, schedules)
IGNORED = (
    "job",
    "profiling",
    "metrics",
    "lr_scheduler",
    "checkpoint",
    "comm",
    "memory_estimation",
    "validation",
    "fault_tolerance",
    "experimental",
    "float8",
    "quantize",
    "mx",
)


class _Toml:
    def __init__(self, data: dict[str, object], origin: str) -> None:
        self.data = data
        self.origin = origin
        self.read: list[str] = []

    def get(self, section: str, key: str, default: object = None) -> Any:
        table = self.data.get(section, {})
        if not isinstance(table, dict) or key not in table:
            return default
        self.read.append(f"{section}.{key}")
        return table[key]

    def whole(self, section: str, key: str, default: int) -> int:
        value = self.get(section, key, default)
        if isinstance(value, bool) or not isinstance(value, int):
            raise InputError(
                f"{self.origin}: {section}.{key} must be a whole number, got {value!r}"
            )
        return value

    def count(self, section: str, key: str, default: int) -> int:
        value = self.whole(section, key, default)
        if value < 1:
            raise InputError(f"{self.origin}: {section}.{key} must be a positive whole number")
        return value


def _unknown(data: dict[str, object]) -> list[str]:
    out = []
    for section, table in data.items():
        if section in IGNORED:
            continue
        if section not in KNOWN or not isinstance(table, dict):
            out.append(f"[{section}]")
            continue
        out += [f"{section}.{k}" for k in table if k not in KNOWN[section]]
    return out


def _dtype(t: _Toml, notes: list[str]) -> str:
    converters = t.get("model", "converters", []) or []
    if isinstance(converters, str):
        converters = [converters]
    if any("float8" in str(c) for c in converters):
        return "fp8"
    if any("mx" in str(c) for c in converters):
        notes.append(f"model.converters {converters}: MX formats are priced in bf16")
    param = t.get("training", "mixed_precision_param", "bfloat16")
    names = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}
    if param not in names:
        raise InputError(f"{t.origin}: training.mixed_precision_param {param!r} is not read")
    return names[param]


def _recompute(t: _Toml) -> str:
    mode = t.get("activation_checkpoint", "mode", "selective")
    option = str(t.get("activation_checkpoint", "selective_ac_option", "2"))
    if mode in ("none", "full"):
        return str(mode)
    if mode != "selective":
        raise InputError(f"{t.origin}: activation_checkpoint.mode {mode!r} is not read")
    if option == "op":
        return "op"
    if not (option.isascii() and option.isdigit()) or int(option) < 1:
        raise InputError(
            f"{t.origin}: activation_checkpoint.selective_ac_option must be 'op' or a positive "
            f"whole number, got {option!r}"
        )
    return f"layer-{int(option)}"


def _execution(t: _Toml, notes: list[str], layers: int, pp: int) -> dict[str, object]:
    ex: dict[str, object] = {"framework": "torchtitan", "recompute": _recompute(t)}
    if t.get("parallelism", "enable_async_tensor_parallel", False):
        ex["tp_overlap"] = True
    reduce = t.get("training", "mixed_precision_reduce")
    if reduce is not None:
        ex["grad_reduce_dtype"] = {"float32": "fp32", "bfloat16": "bf16"}.get(reduce, reduce)
    rotate = t.get("parallelism", "context_parallel_rotate_method")
    if rotate is not None:
        ex["cp_kind"] = "all-gather" if rotate == "allgather" else "ring"
    name = t.get("optimizer", "name")
    if name is not None:
        if str(name).lower() in ("adamw", "adam"):
            ex["optimizer"] = "adam"
        else:
            notes.append(f"optimizer.name {name}: priced as AdamW's state")
    if t.get("training", "compile", False) or t.get("compile", "enable", False):
        notes.append(
            "torch.compile: its fusions are not modelled; kernels are priced as launched eagerly"
        )
    schedule = str(t.get("parallelism", "pipeline_parallel_schedule", "1F1B"))
    per_stage = t.get("parallelism", "pipeline_parallel_layers_per_stage")
    if pp > 1 and schedule.lower() in ("interleaved1f1b", "interleavedzerobubble", "looped"):
        if not isinstance(per_stage, int) or layers % (pp * per_stage):
            raise InputError(
                f"{t.origin}: an interleaved pipeline schedule needs "
                "parallelism.pipeline_parallel_layers_per_stage dividing the layers over the stages"
            )
        ex["interleave"] = layers // (pp * per_stage)
        if schedule.lower() != "interleaved1f1b":
            notes.append(f"pipeline schedule {schedule}: priced as interleaved 1F1B")
    elif pp > 1 and schedule.lower() not in ("1f1b", "gpipe"):
        notes.append(f"pipeline schedule {schedule}: priced as 1F1B")
    return ex


def _degrees(t: _Toml, devices: int, notes: list[str]) -> tuple[dict[str, int], int, int | None]:
    raw = {
        "dp": t.whole("parallelism", "data_parallel_replicate_degree", 1),
        "shard": t.whole("parallelism", "data_parallel_shard_degree", -1),
        "cp": t.whole("parallelism", "context_parallel_degree", 1),
        "tp": t.whole("parallelism", "tensor_parallel_degree", 1),
        "pp": t.whole("parallelism", "pipeline_parallel_degree", 1),
    }
    mesh = fill_rest(raw, devices, t.origin)
    ep = t.count("parallelism", "expert_parallel_degree", 1)
    etp = t.get("parallelism", "expert_tensor_parallel_degree")
    if mesh["shard"] % ep:
        raise InputError(
            f"{t.origin}: expert_parallel_degree {ep} does not divide the FSDP shard degree "
            f"{mesh['shard']}; torchtitan's borrowing of experts from context or tensor ranks "
            "is not modelled"
        )
    if etp is not None and etp != mesh["tp"] and ep > 1:
        notes.append(
            f"expert_tensor_parallel_degree {etp}: the plan splits the experts over tp {mesh['tp']}"
        )
    degrees = {"tp": mesh["tp"], "pp": mesh["pp"], "dp": mesh["dp"], "fsdp": mesh["shard"] // ep}
    # torchtitan's experts borrow the shard (and context) ranks, not Megatron's folding of the
    # plan's --etp: the layout is priced unfolded, the degree said in the note above
    return degrees | {"ep": ep, "cp": mesh["cp"]}, mesh["dp"] * mesh["shard"], None


def read_torchtitan(text: str, origin: str, devices: int) -> Imported:
    """The plan of one torchtitan job TOML over `devices` GPUs."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{origin}: not valid TOML ({exc})") from None
    t = _Toml(data, origin)
    name, flavor = t.get("model", "name"), t.get("model", "flavor")
    if name is None or flavor is None:
        raise InputError(f"{origin}: [model] needs name and flavor (the model is never guessed)")
    spec, _source = named_model(("torchtitan", str(name)), str(flavor), origin, f"{name} flavor")
    notes: list[str] = []
    degrees, data_ranks, etp = _degrees(t, devices, notes)
    if "local_batch_size" in data.get("training", {}):
        local = t.count("training", "local_batch_size", 8)
    else:
        local = t.count("training", "batch_size", 8)
    global_batch = t.whole("training", "global_batch_size", -1)
    if global_batch != -1 and global_batch < 1:
        raise InputError(f"{origin}: training.global_batch_size must be positive (or -1)")
    if global_batch == -1:
        global_batch = local * data_ranks * t.count("training", "gradient_accumulation_steps", 1)
    if global_batch % (local * data_ranks):
        raise InputError(
            f"{origin}: training.global_batch_size {global_batch} is not a multiple of the local "
            f"batch {local} x {data_ranks} data-parallel ranks"
        )
    accumulation = global_batch // (local * data_ranks)
    microbatches = accumulation
    if degrees["pp"] > 1:
        pp_mbs = t.count("parallelism", "pipeline_parallel_microbatch_size", 1)
        if local % pp_mbs:
            raise InputError(
                f"{origin}: pipeline_parallel_microbatch_size {pp_mbs} does not divide the local "
                f"batch {local}"
            )
        microbatches = accumulation * (local // pp_mbs)
    execution = _execution(t, notes, spec.layers, degrees["pp"])
    return Imported(
        format="torchtitan",
        origin=origin,
        model=spec,
        degrees=degrees,
        batch=global_batch,
        microbatches=microbatches,
        seq_len=t.count("training", "seq_len", 2048),
        dtype=_dtype(t, notes),
        execution=execution,
        etp=etp,
        read=tuple(dict.fromkeys(t.read)),
        unknown=tuple(_unknown(data)),
        not_modelled=tuple(notes),
    )


# --- writing ---------------------------------------------------------------------------------


def _recompute_keys(policy: str) -> dict[str, str]:
    if policy in ("none", "full"):
        return {"mode": policy}
    if policy == "op":
        return {"mode": "selective", "selective_ac_option": "op"}
    if policy.startswith("layer-"):
        return {"mode": "selective", "selective_ac_option": policy.removeprefix("layer-")}
    raise InputError(f"--emit torchtitan: recompute policy {policy!r} has no torchtitan setting")


def _check_expressible(layout: LaunchLayout) -> None:
    ex, d = layout.execution, layout.degrees
    if d.get("tp", 1) > 1 and not ex.sequence_parallel:
        raise InputError("--emit torchtitan: torchtitan always runs sequence parallel with tp")
    if ex.zero:
        raise InputError("--emit torchtitan: torchtitan shards with FSDP (--fsdp), not --zero")
    if ex.cuda_graphs:
        raise InputError("--emit torchtitan: torchtitan has no CUDA-graph setting")
    if ex.optimizer != "adam":
        raise InputError(f"--emit torchtitan: optimizer {ex.optimizer!r} is not written")
    if layout.dtype not in ("bf16", "fp32", "fp8"):
        raise InputError(f"--emit torchtitan: dtype {layout.dtype} has no torchtitan setting")


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


def _parallelism(layout: LaunchLayout) -> dict[str, object]:
    """[parallelism]: the shard degree is fsdp x ep (experts split the shard ranks)."""
    d, ex = layout.degrees, layout.execution
    pp = d.get("pp", 1)
    mbs = layout.microbatch_size
    parallelism: dict[str, object] = {
        "data_parallel_replicate_degree": d.get("dp", 1),
        "data_parallel_shard_degree": d.get("fsdp", 1) * d.get("ep", 1),
        "tensor_parallel_degree": d.get("tp", 1),
        "enable_async_tensor_parallel": bool(ex.tp_overlap),
        "pipeline_parallel_degree": pp,
        "pipeline_parallel_microbatch_size": mbs,
        "context_parallel_degree": d.get("cp", 1),
        "expert_parallel_degree": d.get("ep", 1),
    }
    if d.get("cp", 1) > 1:
        parallelism["context_parallel_rotate_method"] = (
            "allgather" if ex.cp_kind == "all-gather" else "alltoall"
        )
    if pp > 1 and ex.interleave > 1:
        parallelism["pipeline_parallel_schedule"] = "Interleaved1F1B"
        parallelism["pipeline_parallel_layers_per_stage"] = layout.model.layers // (
            pp * ex.interleave
        )
    elif pp > 1:
        parallelism["pipeline_parallel_schedule"] = "1F1B"
    return parallelism


def emit_torchtitan(layout: LaunchLayout) -> str:
    """A torchtitan job TOML of the layout (its model must be a torchtitan flavor)."""
    plain_model(layout.model, "torchtitan")
    unfolded(layout, "torchtitan")
    _check_expressible(layout)
    named = model_name_of(layout.model, ("torchtitan",))
    if named is None:
        raise InputError(
            f"--emit torchtitan: torchtitan has no flavor of {layout.model.name}'s shape "
            "(framework_models.toml lists the flavors read)"
        )
    d, ex = layout.degrees, layout.execution
    data_ranks = d.get("dp", 1) * d.get("fsdp", 1) * d.get("ep", 1)
    pp = d.get("pp", 1)
    accumulation = 1 if pp > 1 else layout.microbatches
    local = layout.batch // (data_ranks * accumulation)
    model: dict[str, Any] = {"name": named[0], "flavor": named[1]}
    if layout.dtype == "fp8":
        model["converters"] = ["float8"]
    training = {
        "local_batch_size": local,
        "global_batch_size": layout.batch,
        "seq_len": layout.seq_len,
        "mixed_precision_param": "float32" if layout.dtype == "fp32" else "bfloat16",
        "mixed_precision_reduce": "bfloat16" if ex.grad_reduce_dtype == "bf16" else "float32",
    }
    parallelism = _parallelism(layout)
    sections = {
        "model": model,
        "training": training,
        "parallelism": parallelism,
        "activation_checkpoint": _recompute_keys(ex.recompute),
        "optimizer": {"name": "AdamW"},
    }
    lines = [
        f"# torchtitan job config for {layout.model.name} on {layout.devices} GPUs, written by "
        "`shardline plan|search --emit torchtitan`",
        "# (add [job], [checkpoint], [lr_scheduler] and the dataset to train)",
    ]
    for section, table in sections.items():
        lines += ["", f"[{section}]"] + [f"{k} = {_toml_value(v)}" for k, v in table.items()]
    return "\n".join(lines) + "\n"
