"""A layer stack on one device: per-layer roofline, totals that add up, and the memory check.

MODEL.md section 6. Each layer is bound on its own (`t_lower_s` = max(t_compute, t_memory) per
layer), so the stack's lower bound is the sum of the per-layer maxima, which is at least
max(sum t_compute, sum t_memory). Memory: weights `params*s_w`; activations; KV cache
`2*L*n_kv*d_head*S*B*s_kv`; training adds gradients and Adam state (fp32 master weights and two
moments: 12 B per parameter, so 16 B per parameter with bf16 weights and gradients; fp32 weights are
their own master copy: 4 + 4 + 8 = 16 B).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from math import ceil
from typing import Any

from shardline.cost import roofline_times
from shardline.dtypes import dtype_bits
from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip
from shardline.roofline import evaluate_einsum
from shardline.serialize import jsonable
from shardline.workload import Layer, Workload

__all__ = [
    "OPTIMIZER_BYTES_PER_PARAM",
    "optimizer_bytes_per_param",
    "LayerCost",
    "LayerRow",
    "StackTotals",
    "MemoryCheck",
    "StackResult",
    "layer_cost",
    "local_dims",
    "memory_check",
    "stack",
    "apply_overrides",
]

# Mixed-precision Adam keeps an fp32 master copy of each weight plus two fp32 moments:
# 4 + 4 + 4 = 12 B per parameter (ZeRO, Rajbhandari et al. 2020, section 3.1: "K = 12"). With bf16
# weights (2 B) and bf16 gradients (2 B) that is the 16 B per parameter of MODEL.md section 6.
# Weights already stored in fp32 (or wider) are their own master copy: only the two moments,
# 8 B, so fp32 training is 4 + 4 + 8 = 16 B per parameter too (ZeRO, section 3.1).
ADAM_MOMENTS_BYTES_PER_PARAM = 8
FP32_MASTER_BYTES_PER_PARAM = 4
OPTIMIZER_BYTES_PER_PARAM = ADAM_MOMENTS_BYTES_PER_PARAM + FP32_MASTER_BYTES_PER_PARAM


def optimizer_bytes_per_param(weight_dtype: str) -> int:
    """Adam state per parameter: two fp32 moments, plus an fp32 master copy when the weight is
    stored narrower than fp32."""
    master = FP32_MASTER_BYTES_PER_PARAM if dtype_bits(weight_dtype) < 32 else 0
    return ADAM_MOMENTS_BYTES_PER_PARAM + master


@dataclass(frozen=True)
class LayerCost:
    """One einsum instance on one device at given (possibly sharded) sizes."""

    flops: int
    bytes: int  # HBM bytes: every operand not kept on chip, read or written once
    t_compute_s: float
    t_memory_s: float
    t_lower_s: float
    t_upper_s: float
    bound: str
    flops_per_s: float


def local_dims(
    layer: Layer, *, tp: int = 1, batch_dim: str | None = None, batch_split: int = 1
) -> dict[str, int]:
    """A layer's per-device sizes: the batch dim divided by `batch_split` (data parallel replicas
    times microbatches) and the tensor-parallel dims divided by `tp` in order (the degree fills the
    first dim up to its size, the rest goes to the next). Uneven splits round up: the slowest device
    sets the pace."""
    dims = dict(layer.dims)
    if batch_dim is not None and batch_split > 1 and batch_dim in dims:
        dims[batch_dim] = ceil(dims[batch_dim] / batch_split)
    remaining = tp
    for dim in layer.tp_dims:
        if remaining <= 1:
            break
        factor = min(remaining, dims[dim])
        dims[dim] = ceil(dims[dim] / factor)
        remaining = ceil(remaining / factor)
    return dims


def tp_split_dims(layer: Layer, tp: int) -> tuple[str, ...]:
    """The dims that a tensor-parallel degree `tp` actually splits (factor > 1)."""
    out: list[str] = []
    remaining = tp
    for dim in layer.tp_dims:
        if remaining <= 1:
            break
        factor = min(remaining, layer.dims[dim])
        if factor > 1:
            out.append(dim)
        remaining = ceil(remaining / factor)
    return tuple(out)


def layer_cost(layer: Layer, chip: Chip, dims: Mapping[str, int] | None = None) -> LayerCost:
    """Roofline of one layer instance (shardline.roofline.evaluate_einsum), less the bytes of
    operands kept on chip (flash-attention scores)."""
    sizes = dict(layer.dims if dims is None else dims)
    result = evaluate_einsum(layer.parsed, sizes, chip, dict(layer.dtypes), layer.compute_dtype)
    hbm = int(result.bytes["total"]) - sum(int(result.bytes[name]) for name in layer.onchip)
    peak = float(result.hardware.flops_per_s)
    times = roofline_times(int(result.flops), hbm, peak, chip.mem_bytes_per_s)
    return LayerCost(
        flops=int(result.flops),
        bytes=hbm,
        t_compute_s=float(times.t_compute_s),
        t_memory_s=float(times.t_memory_s),
        t_lower_s=float(times.t_lower_s),
        t_upper_s=float(times.t_upper_s),
        bound=str(times.bound),
        flops_per_s=peak,
    )


@dataclass(frozen=True)
class LayerRow:
    """One line of the breakdown: one einsum, `count` instances in the whole stack. FLOPs, bytes and
    times are per instance; the totals multiply by `count`."""

    name: str
    phase: str
    spec: str
    dims: dict[str, int]
    count: int
    flops: int
    bytes: int
    intensity_flop_per_byte: float
    bound: str
    t_compute_s: float
    t_memory_s: float
    t_lower_s: float
    t_upper_s: float
    weight_bytes: int
    working_set_bytes: int  # one instance's inputs + output + weights (on-chip operands excluded)


@dataclass(frozen=True)
class StackTotals:
    flops: int
    bytes: int
    t_compute_s: float  # sum of count x t_compute
    t_memory_s: float  # sum of count x t_memory (HBM data transfer)
    t_lower_s: float  # sum of count x max(t_compute, t_memory): each layer overlaps on its own
    t_upper_s: float  # sum of count x (t_compute + t_memory): no overlap
    forward_flops: int
    backward_flops: int
    layer_instances: int


@dataclass(frozen=True)
class MemoryCheck:
    """Bytes held on one device. `activations_bytes`: for a forward pass, the largest live set of
    one layer (its activation inputs and output); for training, every activation input saved for the
    backward pass (per microbatch in flight) plus the largest output."""

    params: float
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    kv_cache_bytes: float
    total_bytes: float
    capacity_bytes: float
    fits: bool
    headroom_bytes: float
    working_set_bytes: float  # the seed 003 question: one input + one output + the layer's weight
    working_set_layer: str
    working_set_fits: bool


def _activation_bytes(layer: Layer, dims: Mapping[str, int], which: Iterable[str]) -> int:
    return sum(
        layer.operand_bytes(name, dims) for name in which if layer.role(name) == "activation"
    )


def memory_check(
    workload: Workload,
    capacity_bytes: float,
    *,
    layers: Sequence[tuple[Layer, int]] | None = None,
    tp: int = 1,
    batch_split: int = 1,
    in_flight: int = 1,
    fsdp: int = 1,
) -> MemoryCheck:
    """Memory on one device holding `layers` [(layer, instances)] (default: the whole stack) with
    the batch split `batch_split` ways (replicas x microbatches), tensor parallel degree `tp`,
    `in_flight` microbatches whose activations are kept, and weights, gradients and optimizer state
    sharded `fsdp` ways (ZeRO-3)."""
    if layers is None:
        layers = [(layer, layer.count * workload.repeat) for layer in workload.layers]
    params = weights = kv = saved = adam = 0.0
    live = biggest_out = 0
    working, working_layer = 0, layers[0][0].name if layers else ""
    for layer, n in layers:
        dims = local_dims(layer, tp=tp, batch_dim=workload.batch_dim, batch_split=batch_split)
        weights_one = sum(layer.operand_bytes(w, dims) for w in layer.weights)
        params_one = sum(_elements(layer, w, dims) for w in layer.weights)
        params += n * params_one
        adam += n * sum(
            _elements(layer, w, dims) * optimizer_bytes_per_param(layer.dtypes[w])
            for w in layer.weights
        )
        weights += n * weights_one
        kv += n * sum(layer.operand_bytes(c, dims) for c in layer.cache)
        ins = _activation_bytes(layer, dims, (op.name for op in layer.inputs))
        out = _activation_bytes(layer, dims, (layer.output.name,))
        saved += n * ins
        live = max(live, ins + out)
        biggest_out = max(biggest_out, out)
        if ins + out + weights_one > working:
            working, working_layer = ins + out + weights_one, layer.name
    weights_dev = weights / fsdp
    if workload.training:
        gradients = weights_dev  # gradients in the weights' dtype
        optimizer = adam / fsdp
        activations = in_flight * saved + biggest_out
    else:
        gradients = optimizer = 0.0
        activations = float(live)
    total = weights_dev + gradients + optimizer + activations + kv
    return MemoryCheck(
        params=params,
        weights_bytes=weights_dev,
        gradients_bytes=gradients,
        optimizer_bytes=optimizer,
        activations_bytes=activations,
        kv_cache_bytes=kv,
        total_bytes=total,
        capacity_bytes=capacity_bytes,
        fits=total <= capacity_bytes,
        headroom_bytes=capacity_bytes - total,
        working_set_bytes=float(working),
        working_set_layer=working_layer,
        working_set_fits=working <= capacity_bytes,
    )


def _elements(layer: Layer, name: str, dims: Mapping[str, int]) -> int:
    total = 1
    for d in layer.operand(name).dims:
        total *= dims[d]
    return total


@dataclass(frozen=True)
class StackResult:
    workload: Workload
    chip: Chip
    layers: list[LayerRow]
    totals: StackTotals
    memory: MemoryCheck
    subtotals: dict[str, dict[str, float]]  # "forward", "backward" (training), "one_block"

    def to_dict(self) -> dict[str, Any]:
        w = self.workload
        return jsonable(
            {
                "workload": {
                    **w.identity(),
                    "repeat": w.repeat,
                    "batch": w.batch,
                    "params": w.params(),
                    "layer_instances": w.layer_count,
                },
                "hardware": {
                    "name": self.chip.name,
                    "mem_bytes_per_s": self.chip.mem_bytes_per_s,
                    "capacity_bytes": self.chip.capacity_bytes,
                },
                "layers": [row.__dict__ for row in self.layers],
                "subtotals": self.subtotals,
                "totals": self.totals.__dict__,
                "memory": self.memory.__dict__,
            }
        )


def apply_overrides(
    chip: Chip, workload: Workload, flops_per_s: float | None, mem_bytes_per_s: float | None
) -> Chip:
    """The user's peak FLOP/s for every compute dtype the workload uses, and HBM bandwidth."""
    if flops_per_s is not None:
        for dtype in sorted({layer.compute_dtype or "bf16" for layer in workload.layers}):
            chip = chip.with_overrides(compute_dtype=dtype, flops_per_s=flops_per_s)
    if mem_bytes_per_s is not None:
        chip = chip.with_overrides(mem_bytes_per_s=mem_bytes_per_s)
    return chip


def stack(
    workload: Workload,
    hw: str | Chip = "h100-sxm",
    *,
    flops_per_s: float | None = None,
    mem_bytes_per_s: float | None = None,
) -> StackResult:
    """Per-layer roofline, totals and memory check of a workload on one device.

    >>> from shardline.workload import matmul_layer, Workload
    >>> w = Workload("two", (matmul_layer("a", 4096, 4096, 4096),), repeat=2)
    >>> r = stack(w, "a100-40gb")
    >>> r.totals.flops == 2 * 2 * 4096**3
    True
    """
    if not isinstance(workload, Workload):
        raise InputError(f"stack() needs a Workload, got {type(workload).__name__}")
    chip = apply_overrides(resolve_chip(hw), workload, flops_per_s, mem_bytes_per_s)
    rows: list[LayerRow] = []
    for layer in workload.step_layers():
        cost = layer_cost(layer, chip)
        names = [op.name for op in layer.parsed.operands]
        working = sum(layer.operand_bytes(n) for n in names if layer.role(n) != "onchip")
        rows.append(
            LayerRow(
                name=layer.name,
                phase=layer.phase,
                spec=layer.spec,
                dims=dict(layer.dims),
                count=layer.count * workload.repeat,
                flops=cost.flops,
                bytes=cost.bytes,
                intensity_flop_per_byte=cost.flops / cost.bytes if cost.bytes else float("nan"),
                bound=cost.bound,
                t_compute_s=cost.t_compute_s,
                t_memory_s=cost.t_memory_s,
                t_lower_s=cost.t_lower_s,
                t_upper_s=cost.t_upper_s,
                weight_bytes=layer.weight_bytes(),
                working_set_bytes=working,
            )
        )

    def subtotal(chosen: Sequence[LayerRow], per: int = 1) -> dict[str, float]:
        """Sums of count x value over `chosen` rows, divided by `per` (one block: per = repeat)."""
        return {
            "flops": sum(r.count * r.flops for r in chosen) // per,
            "bytes": sum(r.count * r.bytes for r in chosen) // per,
            "t_compute_s": sum(r.count * r.t_compute_s for r in chosen) / per,
            "t_memory_s": sum(r.count * r.t_memory_s for r in chosen) / per,
            "t_lower_s": sum(r.count * r.t_lower_s for r in chosen) / per,
        }

    subtotals = {"forward": subtotal([r for r in rows if r.phase == "forward"])}
    if workload.training:
        subtotals["backward"] = subtotal([r for r in rows if r.phase == "backward"])
    subtotals["one_block"] = subtotal(rows, workload.repeat)
    totals = StackTotals(
        flops=sum(r.count * r.flops for r in rows),
        bytes=sum(r.count * r.bytes for r in rows),
        t_compute_s=sum(r.count * r.t_compute_s for r in rows),
        t_memory_s=sum(r.count * r.t_memory_s for r in rows),
        t_lower_s=sum(r.count * r.t_lower_s for r in rows),
        t_upper_s=sum(r.count * r.t_upper_s for r in rows),
        forward_flops=sum(r.count * r.flops for r in rows if r.phase == "forward"),
        backward_flops=sum(r.count * r.flops for r in rows if r.phase == "backward"),
        layer_instances=workload.layer_count,
    )
    memory = memory_check(workload, chip.capacity_bytes)
    return StackResult(workload, chip, rows, totals, memory, subtotals)
