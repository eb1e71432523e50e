"""A layer stack on one device: per-layer roofline, totals that add up, and the memory check.

docs/stack-and-plans.md. Each layer is bound on its own (`t_lower_s` = max(t_compute, t_memory) per
layer), so the stack's lower bound is the sum of the per-layer maxima, which is at least
max(sum t_compute, sum t_memory). Memory: weights `params*s_w`; activations; KV cache
`2*L*n_kv*d_head*S*B*s_kv`; training adds gradients and Adam state (fp32 master weights and two
moments: 12 B per parameter, so 16 B per parameter with bf16 weights and gradients; fp32 weights are
their own master copy: 4 + 4 + 8 = 16 B).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, fields, replace
from functools import cached_property, reduce
from operator import add, attrgetter, mul
from typing import Any

from shardline.basics.dtypes import dtype_bits
from shardline.basics.serialize import jsonable
from shardline.basics.units import check_rate
from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip
from shardline.ops.cost import ZERO_COST, Cost
from shardline.ops.roofline import evaluate_einsum
from shardline.workload.workload import Layer, Workload

__all__ = [
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

# Mixed-precision Adam keeps an fp32 master copy of each weight plus two fp32 moments:
# 4 + 4 + 4 = 12 B per parameter (ZeRO, Rajbhandari et al. 2020, section 3.1: "K = 12"). With bf16
# weights (2 B) and bf16 gradients (2 B) that is the 16 B per parameter of docs/stack-and-plans.md.
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


def _own_dims(layer: Layer) -> Mapping[str, int]:
    return layer.dims


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


@dataclass(frozen=True)
class DeviceShare:
    """How one device's share of a stack is cut (the parallel strategies produce it:
    `shardline.strategies.device_share`): each layer's local sizes, and the ways weights, gradients
    and optimizer state are sharded (ZeRO-3). The default: the whole stack on one device."""

    dims: Callable[[Layer], Mapping[str, int]] = _own_dims
    weights_ways: int = 1
    gradients_ways: int = 1
    optimizer_ways: int = 1
    # sizes of the resident state (the KV cache): every sequence's cache stays on the device
    # whatever the microbatching, so only the batch splits between devices apply
    cache_dims: Callable[[Layer], Mapping[str, int]] | None = None
    # optimizer state in bytes per parameter, by the weight's dtype (default: mixed-precision Adam)
    state_bytes: Callable[[str], float] = optimizer_bytes_per_param


def layer_cost(layer: Layer, chip: Chip, dims: Mapping[str, int] | None = None) -> LayerCost:
    """Roofline of one layer instance (shardline.ops.roofline.evaluate_einsum), less the bytes of
    operands kept on chip (flash-attention scores)."""
    sizes = dict(layer.dims if dims is None else dims)
    result = evaluate_einsum(layer.parsed, sizes, chip, dict(layer.dtypes), layer.compute_dtype)
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
    def content_key(self) -> tuple[Any, ...]:
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

    def to_dict(self) -> dict[str, Any]:
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

    def to_dict(self) -> dict[str, Any]:
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
    buffers_bytes: float = 0.0  # gathered weights under FSDP (the layer in use and the next)

    def with_total(self, total_bytes: float, **changes: Any) -> MemoryCheck:
        """A copy with some terms changed and their new total, whether it fits and the headroom
        worked out again from it."""
        return replace(
            self,
            total_bytes=total_bytes,
            fits=total_bytes <= self.capacity_bytes,
            headroom_bytes=self.capacity_bytes - total_bytes,
            **changes,
        )


def _activation_bytes(layer: Layer, dims: Mapping[str, int], which: Iterable[str]) -> int:
    return sum(
        layer.operand_bytes(name, dims) for name in which if layer.role(name) == "activation"
    )


def memory_check(
    workload: Workload,
    capacity_bytes: float,
    *,
    layers: Sequence[tuple[Layer, int]] | None = None,
    share: DeviceShare | None = None,
    in_flight: float = 1,
) -> MemoryCheck:
    """Memory on one device holding `layers` [(layer, instances)] (default: the whole stack) cut
    as `share` says (local sizes per layer; weights, gradients and optimizer state sharded so
    many ways), with `in_flight` microbatches whose activations are kept."""
    share = share or DeviceShare()
    if layers is None:
        from shardline.workload.dense_first import stack_layers

        layers = stack_layers(workload)
    params = weights = kv = saved = adam = 0.0
    live = biggest_out = 0
    working, working_layer = 0, layers[0][0].name if layers else ""
    terms: dict[tuple[Any, ...], _MemoryTerms] = {}
    for layer, n in layers:
        one = terms.get(layer.content_key)
        if one is None:
            one = terms[layer.content_key] = _memory_terms(layer, share)
        params_one, weights_one, adam_one, kv_one, ins, out = one
        params += n * params_one
        adam += n * adam_one
        weights += n * weights_one
        kv += n * kv_one
        saved += n * ins
        live = max(live, ins + out)
        biggest_out = max(biggest_out, out)
        if ins + out + weights_one > working:
            working, working_layer = ins + out + weights_one, layer.name
    weights_dev = weights / share.weights_ways
    if workload.training:
        gradients = weights / share.gradients_ways  # gradients in the weights' dtype
        optimizer = adam / share.optimizer_ways
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


# one instance's parameters, weight bytes, optimizer-state bytes, KV-cache bytes, activation
# input bytes and activation output bytes
_MemoryTerms = tuple[int, int, float, int, int, int]


def _memory_terms(layer: Layer, share: DeviceShare) -> _MemoryTerms:
    """What one instance of `layer` holds on the device `share` cuts (the share cuts a layer by
    its content, never its name: layers of the same content hold the same)."""
    dims = share.dims(layer)
    cache_dims = share.cache_dims(layer) if share.cache_dims is not None else dims
    return (
        sum(_elements(layer, w, dims) for w in layer.weights),
        sum(layer.operand_bytes(w, dims) for w in layer.weights),
        sum(_elements(layer, w, dims) * share.state_bytes(layer.dtypes[w]) for w in layer.weights),
        sum(layer.operand_bytes(c, cache_dims) for c in layer.cache),
        _activation_bytes(layer, dims, (op.name for op in layer.inputs)),
        _activation_bytes(layer, dims, (layer.output.name,)),
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

    def to_dict(self, *, layers: bool = True) -> dict[str, Any]:
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


def layer_dicts(rows: Sequence[LayerRow]) -> list[dict[str, Any]]:
    """`jsonable(row.to_dict())` of each row, worked out once per content (`content_key`) and
    copied with each row's name and count."""
    done: dict[tuple[Any, ...], dict[str, Any]] = {}
    out: list[dict[str, Any]] = []
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

    priced: dict[tuple[Any, ...], LayerRow] = {}
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
        run_fraction=cost.t_compute_s / full.t_compute_s if full.t_compute_s else 1.0,
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
        "t_compute_s": c.t_compute_s / per,
        "t_memory_s": c.t_memory_s / per,
        "t_lower_s": c.t_lower_s / per,
        "predicted_s": c.predicted_s / per,
    }
