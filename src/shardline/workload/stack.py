"""A layer stack on one device: per-layer roofline, totals that add up, and the memory check.

docs/stack-and-plans.md. Each layer is bound on its own (`t_lower_s` = max(t_compute, t_memory) per
layer), so the stack's lower bound is the sum of the per-layer maxima, which is at least
max(sum t_compute, sum t_memory). Memory (`shardline.workload.device_memory`): weights
`params*s_w`; activations; KV cache `2*L*n_kv*d_head*S*B*s_kv`; training adds gradients and Adam
state (16 B per parameter with bf16 weights and gradients).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields, replace
from functools import cached_property, reduce
from operator import add, attrgetter, mul

from shardline.basics.dtypes import dtype_bits
from shardline.basics.serialize import jsonable
from shardline.basics.units import check_rate
from shardline.basics.values import JSONDict, as_number
from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip
from shardline.ops.cost import ZERO_COST, Cost
from shardline.ops.roofline import evaluate_einsum
from shardline.workload.device_memory import (
    ADAM_MOMENTS_BYTES_PER_PARAM,
    OPTIMIZER_BYTES_PER_PARAM,
    DeviceShare,
    MemoryCheck,
    memory_check,
    optimizer_bytes_per_param,
)
from shardline.workload.workload import Layer, Workload

__all__ = [
    "ADAM_MOMENTS_BYTES_PER_PARAM",
    "OPTIMIZER_BYTES_PER_PARAM",
    "optimizer_bytes_per_param",
    "LayerCost",
    "LayerRow",
    "StackTotals",
    "MemoryCheck",
    "StackResult",
    "layer_cost",
    "layer_dicts",
    "DeviceShare",
    "memory_check",
    "stack",
    "apply_overrides",
]


class _ScalarCost:
    """Scalar views of a record's `cost` (one layer's numbers are plain ints and floats)."""

    cost: Cost

    @property
    def flops(self) -> int:
        return int(self.cost.flops)

    @property
    def bytes(self) -> int:
        return int(self.cost.hbm_bytes)

    @property
    def t_compute_s(self) -> float:
        return float(self.cost.t_compute_s)

    @property
    def t_memory_s(self) -> float:
        return float(self.cost.t_memory_s)

    @property
    def t_lower_s(self) -> float:
        return float(self.cost.t_lower_s)

    @property
    def t_upper_s(self) -> float:
        return float(self.cost.t_upper_s)

    @property
    def bound(self) -> str:
        return str(self.cost.bound)

    @property
    def predicted_s(self) -> float:
        """The realistic time (shardline.realistic.kernels.einsum_time_s; summed over a stack)."""
        return float(self.cost.predicted_s)


@dataclass(frozen=True)
class LayerCost(_ScalarCost):
    """One einsum instance on one device at given (possibly sharded) sizes: its Cost (FLOPs, HBM
    bytes: every operand not kept on chip, read or written once; roofline times) and peak rate."""

    cost: Cost
    flops_per_s: float


def layer_cost(layer: Layer, chip: Chip, dims: Mapping[str, int] | None = None) -> LayerCost:
    """Roofline of one layer instance (shardline.ops.roofline.evaluate_einsum), less the bytes of
    operands kept on chip (flash-attention scores)."""
    sizes = dict(layer.dims if dims is None else dims)
    result = evaluate_einsum(
        layer.parsed, sizes, chip, dict(layer.dtypes), str(layer.compute_dtype)
    )
    hbm = int(result.bytes["total"]) - sum(int(result.bytes[name]) for name in layer.onchip)
    peak = float(result.hardware.flops_per_s)
    return LayerCost(Cost.roofline(int(result.flops), hbm, peak, chip.mem_bytes_per_s), peak)


@dataclass(frozen=True)
class LayerRow(_ScalarCost):
    """One line of the breakdown: one einsum, `count` instances in the whole stack. Its Cost
    (FLOPs, bytes, times) is per instance; the totals multiply by `count`."""

    name: str
    phase: str
    spec: str
    dims: dict[str, int]
    count: int
    cost: Cost
    weight_bytes: int
    working_set_bytes: int  # one instance's inputs + output + weights (on-chip operands excluded)
    # the share of `flops` its kernel runs: a causal fused attention kernel skips the masked
    # half of the scores (`causal_lower_bound`); `flops` keeps the full count (MFU convention)
    run_fraction: float = 1.0

    @cached_property
    def content_key(self) -> tuple[object, ...]:
        """Every field but the name and the count: rows of the same key read the same but for
        those two (`renamed` rows, one pricing)."""
        return (
            self.phase,
            self.spec,
            tuple(self.dims.items()),
            _COST_FIELDS(self.cost),
            self.weight_bytes,
            self.working_set_bytes,
            self.run_fraction,
        )

    def renamed(self, name: str, count: int) -> LayerRow:
        """This row (its per-instance cost) for another layer of the same content."""
        self.content_key  # worked out once, then shared  # noqa: B018
        out = object.__new__(LayerRow)
        out.__dict__.update(self.__dict__)
        object.__setattr__(out, "name", name)
        object.__setattr__(out, "count", count)
        return out

    @property
    def intensity_flop_per_byte(self) -> float:
        """FLOPs the kernel runs per HBM byte: the intensity its bound follows (the causal
        kernel's half of the scores, not the full count)."""
        return self.flops * self.run_fraction / self.bytes if self.bytes else float("nan")

    def to_dict(self) -> JSONDict:
        keys = ("name", "phase", "spec", "dims", "count", "flops", "bytes")
        times = ("t_compute_s", "t_memory_s", "t_lower_s", "t_upper_s", "predicted_s")
        return {
            **{k: getattr(self, k) for k in keys},
            "intensity_flop_per_byte": self.intensity_flop_per_byte,
            "bound": self.bound,
            **{k: getattr(self, k) for k in times},
            "weight_bytes": self.weight_bytes,
            "working_set_bytes": self.working_set_bytes,
        }


@dataclass(frozen=True)
class StackTotals(_ScalarCost):
    """The whole stack: the Cost summed over count x rows (each layer overlaps on its own, so
    t_lower_s is the sum of per-layer maxima, t_upper_s the sum of per-layer sums), and the FLOPs
    of each pass."""

    cost: Cost
    forward_flops: int
    backward_flops: int
    layer_instances: int

    def to_dict(self) -> JSONDict:
        times = ("t_compute_s", "t_memory_s", "t_lower_s", "t_upper_s", "predicted_s")
        return {
            "flops": self.flops,
            "bytes": self.bytes,
            **{k: getattr(self, k) for k in times},
            "forward_flops": self.forward_flops,
            "backward_flops": self.backward_flops,
            "layer_instances": self.layer_instances,
        }


@dataclass(frozen=True)
class StackResult:
    workload: Workload
    chip: Chip
    layers: list[LayerRow]
    totals: StackTotals
    memory: MemoryCheck
    subtotals: dict[str, dict[str, float]]  # "forward", "backward" (training), "one_block"

    def to_dict(self, *, layers: bool = True) -> JSONDict:
        """The result as JSON-ready data; `layers=False` leaves the per-layer list empty."""
        w = self.workload
        summary = jsonable(
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
                "layers": [],
                "subtotals": self.subtotals,
                "totals": self.totals.to_dict(),
                "memory": self.memory.__dict__,
            }
        )
        return summary | {"layers": layer_dicts(self.layers)} if layers else summary


def layer_dicts(rows: Sequence[LayerRow]) -> list[dict[str, object]]:
    """`jsonable(row.to_dict())` of each row, worked out once per content (`content_key`) and
    copied with each row's name and count."""
    done: dict[tuple[object, ...], dict[str, object]] = {}
    out: list[dict[str, object]] = []
    for row in rows:
        first = done.get(row.content_key)
        if first is None:
            out.append(done.setdefault(row.content_key, jsonable(row.to_dict())))
        else:
            out.append(first | {"name": row.name, "count": row.count})
    return out


def apply_overrides(
    chip: Chip, workload: Workload, flops_per_s: float | None, mem_bytes_per_s: float | None
) -> Chip:
    """The user's peak FLOP/s for every compute dtype the workload uses, and HBM bandwidth (each a
    rate of at least 1 per second: `shardline.basics.units.check_rate`)."""
    if flops_per_s is not None:
        flops_per_s = check_rate(flops_per_s, "flops_per_s", "FLOP/s")
        for dtype in sorted({layer.compute_dtype or "bf16" for layer in workload.layers}):
            chip = chip.with_overrides(compute_dtype=dtype, flops_per_s=flops_per_s)
    if mem_bytes_per_s is not None:
        mem_bytes_per_s = check_rate(mem_bytes_per_s, "mem_bytes_per_s", "B/s")
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

    >>> from shardline.workload.workload import matmul_layer, Workload
    >>> w = Workload("two", (matmul_layer("a", 4096, 4096, 4096),), repeat=2)
    >>> r = stack(w, "a100-40gb")
    >>> r.totals.flops == 2 * 2 * 4096**3
    True
    """
    if not isinstance(workload, Workload):
        raise InputError(f"stack() needs a Workload, got {type(workload).__name__}")
    chip = apply_overrides(resolve_chip(hw), workload, flops_per_s, mem_bytes_per_s)
    rows = _rows(workload, chip)  # the forward rows, then the backward rows
    backward_rows = [r for r in rows if r.phase == "backward"]
    forward = _sum(rows[: len(rows) - len(backward_rows)])
    backward = _sum(backward_rows)
    whole = _sum(backward_rows, start=forward)
    subtotals = {"forward": _subtotal(forward)}
    if workload.training:
        subtotals["backward"] = _subtotal(backward)
    subtotals["one_block"] = _subtotal(whole, workload.repeat)
    totals = StackTotals(
        cost=whole,
        forward_flops=int(forward.flops),
        backward_flops=int(backward.flops),
        layer_instances=workload.layer_count,
    )
    memory = _with_model_activations(memory_check(workload, chip.usable_capacity_bytes), workload)
    return StackResult(workload, chip, rows, totals, memory, subtotals)


def _with_model_activations(mc: MemoryCheck, workload: Workload) -> MemoryCheck:
    """A transformer template's training activations by Korthikanti et al. 2022 (no tensor
    parallelism, no recompute on one device: `shardline.realistic.activations`), as `plan`
    counts them."""
    model = workload.model
    if model is not None and model.idle_expert_params:  # MoE decode: untouched experts held
        moe_blocks = model.layers - model.dense_layers_first
        idle = moe_blocks * model.idle_expert_params * dtype_bits(model.dtype) / 8
        mc = mc.with_total(mc.total_bytes + idle, weights_bytes=mc.weights_bytes + idle)
    if model is None or not workload.training:
        return mc
    from shardline.realistic.activations import layer_activation_bytes

    per_layer = layer_activation_bytes(model, model.batch, tp=1, sp=False, recompute="none")
    activations = model.layers * per_layer
    total = mc.total_bytes - mc.activations_bytes + activations
    return mc.with_total(total, activations_bytes=activations)


def _rows(workload: Workload, chip: Chip) -> list[LayerRow]:
    """A row for each einsum of the step; layers of the same content (all but the name) are
    priced once and their rows share that cost (200,000 layers of one shape: one pricing)."""
    from shardline.workload.dense_first import layer_repeats

    priced: dict[tuple[object, ...], LayerRow] = {}
    rows: list[LayerRow] = []
    for layer in workload.step_layers():
        first = priced.get(layer.content_key)
        if first is None:
            row = priced[layer.content_key] = _row(layer, chip, workload)
        else:
            row = first.renamed(layer.name, layer.count * layer_repeats(workload, layer))
        rows.append(row)
    return rows


def _row(layer: Layer, chip: Chip, workload: Workload) -> LayerRow:
    from shardline.realistic.kernels import causal_lower_bound, einsum_time_s

    names = [op.name for op in layer.parsed.operands]
    from shardline.workload.dense_first import layer_repeats

    predicted = einsum_time_s(layer, chip, layer.dims, workload.model, cuda_graphs=False)
    full = layer_cost(layer, chip).cost
    cost = causal_lower_bound(full, layer, workload.model)
    return LayerRow(
        name=layer.name,
        phase=layer.phase,
        spec=layer.spec,
        dims=dict(layer.dims),
        count=layer.count * layer_repeats(workload, layer),
        cost=replace(cost, predicted_s=predicted),
        weight_bytes=layer.weight_bytes(),
        working_set_bytes=sum(layer.operand_bytes(n) for n in names if layer.role(n) != "onchip"),
        run_fraction=as_number(cost.t_compute_s / full.t_compute_s) if full.t_compute_s else 1.0,
    )


def _sum(rows: Sequence[LayerRow], start: Cost = ZERO_COST) -> Cost:
    """count x Cost summed over the rows (a stack is the sum of its layers) after `start`: field
    by field, in row order, the additions of start + r1.cost * r1.count + ..., in C loops."""
    costs = [r.cost for r in rows]
    counts = [r.count for r in rows]
    return Cost(
        *(
            reduce(add, map(mul, map(attrgetter(f.name), costs), counts), getattr(start, f.name))
            for f in fields(Cost)
        )
    )


_COST_FIELDS = attrgetter(*(f.name for f in fields(Cost)))


def _subtotal(c: Cost, per: int = 1) -> dict[str, float]:
    """A summed Cost divided by `per` (one block: per = repeat), as the JSON keys."""
    return {
        "flops": int(c.flops) // per,
        "bytes": int(c.hbm_bytes) // per,
        "t_compute_s": as_number(c.t_compute_s) / per,
        "t_memory_s": as_number(c.t_memory_s) / per,
        "t_lower_s": as_number(c.t_lower_s) / per,
        "predicted_s": as_number(c.predicted_s) / per,
    }
