"""The named-axis sharding algebra: which collectives a sharded einsum needs, and what it costs.

MODEL.md section 5, in the notation of "How to Scale Your Model" (sharding chapter):
`A[M_X, K] * B[K, N_Y] -> C[M_X, N_Y]` on a mesh `X=4, Y=2`. For every mesh axis the planner
decides which dimension it splits during the local multiply:

- the same axis splits the same dim of both inputs: keep it (case 1 for a batch dim; case 3, local
  partial sums, for a contracting dim);
- an axis splits a dim of one input that the other input also has (case 2): either all-gather that
  input along the axis, or slice the other input (free: it holds the whole dim) and keep the split;
- an axis splits different dims of the two inputs (case 4): all-gather one of them;
- an axis only the output names: slice the inputs to match (free).

Where two choices are legal the cheaper one (by time, then by serial time) wins; on a tie, the
book's default (all-gather). The output spec the user asks for then decides the rest: partial sums
over an axis the output splits a dim over are reduce-scattered, others all-reduced (unless asked
to stay unreduced); output splits that are not asked for are all-gathered (or moved with an
all-to-all when asked on another dim); asked-for splits that are missing are free slices.

Per-device FLOPs and HBM bytes come from the local shapes; network time is the sum of the
collectives. Bound = the largest of t_compute, t_memory, t_network; with overlap the time is that
max, without it `max(t_compute, t_memory) + t_network`. So t_lower_s (overlapped) is the max of all
three and t_upper_s (serial: the network step waits for, and is waited on by, the local multiply) is
`max(t_compute, t_memory) + t_network`, exactly the two times `--overlap` and `--no-overlap` give.
"""

from __future__ import annotations

import itertools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from shardline.collectives import (
    AxisNetwork,
    CollectiveCost,
    NetworkOptions,
    collective_over,
    mesh_networks,
)
from shardline.cost import bound_of
from shardline.dtypes import ACCUMULATOR_BYTES, canonical_dtype, dtype_bits
from shardline.einsum import EinsumSpec, Operand, check_dims, check_size, parse_einsum
from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip
from shardline.roofline import operand_bytes, resolve_dtypes
from shardline.serialize import jsonable

__all__ = [
    "Mesh",
    "ShardOptions",
    "PerDevice",
    "PlannedCollective",
    "Threshold",
    "ShardedResult",
    "parse_mesh",
    "shard_einsum",
    "plan_sharded",
    "shard_matmul",
    "matmul_spec",
    "DEFAULT_REDUCE_DTYPE",
]

# Partial sums cross the network in the accumulator dtype unless told (MODEL.md section 5, s_acc).
DEFAULT_REDUCE_DTYPE = "fp32"
assert dtype_bits(DEFAULT_REDUCE_DTYPE) == 8 * ACCUMULATOR_BYTES

_AXIS = re.compile(r"^[A-Z]$")


@dataclass(frozen=True)
class Mesh:
    """Named mesh axes in order (outer first), e.g. X=4, Y=2."""

    axes: tuple[tuple[str, int], ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.axes)

    @property
    def devices(self) -> int:
        return math.prod(size for _, size in self.axes)

    def size(self, axis: str) -> int:
        return dict(self.axes)[axis]

    def text(self) -> str:
        return ",".join(f"{name}={size}" for name, size in self.axes)


def parse_mesh(text: str | Mapping[str, int] | Mesh) -> Mesh:
    """`X=4,Y=2` (or a mapping) -> Mesh. Axis names are single upper-case letters."""
    if isinstance(text, Mesh):
        return text
    items: list[tuple[str, Any]]
    if isinstance(text, Mapping):
        items = list(text.items())
    else:
        items = []
        for part in (p.strip() for p in str(text).split(",")):
            if not part:
                continue
            if "=" not in part:
                raise InputError(f"malformed --mesh entry {part!r}: expected AXIS=SIZE, e.g. X=4")
            name, size = (s.strip() for s in part.split("=", 1))
            items.append((name, size))
    if not items:
        raise InputError("the mesh is empty: give --mesh X=4 (or X=4,Y=2)")
    axes: list[tuple[str, int]] = []
    for name, raw in items:
        if not _AXIS.match(str(name)):
            raise InputError(
                f"mesh axis {name!r} must be a single upper-case letter (X, Y, Z, ...)"
            )
        if name in dict(axes):
            raise InputError(f"mesh axis {name} is declared twice")
        if isinstance(raw, str):
            from shardline.units import parse_count

            value = parse_count(raw, f"mesh axis {name}")
        else:
            value = raw
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"mesh axis {name} must have a positive integer size, got {raw!r}")
        axes.append((name, check_size(value, f"mesh axis {name}")))
    return Mesh(tuple(axes))


@dataclass(frozen=True)
class ShardOptions:
    """How to run the step: overlap, which inputs are resident, padding, reduction dtype."""

    overlap: bool = True
    resident: frozenset[str] | None = None  # None: every input is resident
    unreduced: tuple[str, ...] = ()  # axes whose partial sums the output keeps ({U_X})
    pad: bool = False
    reduce_dtype: str = DEFAULT_REDUCE_DTYPE
    accumulate: bool = False


@dataclass(frozen=True)
class PerDevice:
    flops: Any
    bytes: dict[str, Any]  # per operand and "total"
    network_bytes: Any  # bytes each device sends over all collectives
    t_compute_s: Any
    t_memory_s: Any
    shapes: dict[str, list[int]]  # local shapes at compute time


@dataclass(frozen=True)
class PlannedCollective:
    kind: str
    operand: str
    axes: tuple[str, ...]
    bytes: Any  # V: the whole array over the axes' group
    dtype: str
    reason: str
    cost: CollectiveCost

    @property
    def t_s(self) -> Any:
        return self.cost.t_s

    def to_dict(self) -> dict[str, Any]:
        c = self.cost
        return jsonable(
            {
                "kind": self.kind,
                "operand": self.operand,
                "axes": list(self.axes),
                "bytes": self.bytes,
                "dtype": self.dtype,
                "devices": c.devices,
                "topology": c.topology,
                "topology_detail": c.topology_detail,
                "t_s": c.t_s,
                "t_bandwidth_s": c.t_bandwidth_s,
                "t_latency_s": c.t_latency_s,
                "predicted_s": c.predicted_s,
                "bus_efficiency": c.bus_efficiency,
                "formula": c.formula,
                "reason": self.reason,
            }
        )


@dataclass(frozen=True)
class Threshold:
    name: str
    formula: str
    value: float
    dim: str
    current: int
    network_bound: bool


@dataclass(frozen=True)
class ShardedResult:
    """A sharded einsum on a mesh. Field names are the JSON keys (`to_dict`)."""

    spec: str
    dims: dict[str, int]
    mesh: dict[str, int]
    devices: int
    topology: dict[str, str]
    dtypes: dict[str, str]
    per_device: PerDevice
    collectives: tuple[PlannedCollective, ...]
    t_network_s: Any
    t_network_predicted_s: Any
    bound: str
    overlap: bool
    t_s: Any
    t_lower_s: Any
    t_upper_s: Any
    thresholds: tuple[Threshold, ...]
    total_flops: Any
    steps: tuple[str, ...]  # the decisions, in words
    alternatives: tuple[dict[str, Any], ...]
    hardware: dict[str, Any]
    padded: dict[str, list[int]] = field(default_factory=dict)
    resident: tuple[str, ...] = ()
    strategy: str | None = None  # `shard`: "along k, output split"
    chip: Chip | None = field(default=None, repr=False, compare=False)
    networks: dict[str, AxisNetwork] = field(default_factory=dict, repr=False, compare=False)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for name in (
            "spec",
            "strategy",
            "dims",
            "padded",
            "mesh",
            "devices",
            "topology",
            "dtypes",
            "resident",
        ):
            out[name] = getattr(self, name)
        out["per_device"] = self.per_device
        out["collectives"] = [c.to_dict() for c in self.collectives]
        for name in (
            "t_network_s",
            "t_network_predicted_s",
            "bound",
            "overlap",
            "t_s",
            "t_lower_s",
            "t_upper_s",
            "thresholds",
            "total_flops",
            "steps",
            "alternatives",
            "hardware",
        ):
            out[name] = getattr(self, name)
        if out["strategy"] is None:
            out.pop("strategy")
        return jsonable(out)


# --- the planner -----------------------------------------------------------------------------


@dataclass
class _Ctx:
    spec: EinsumSpec
    dims: dict[str, int]
    mesh: Mesh
    chip: Chip
    peak: float
    bits: dict[str, int]  # per operand name
    reduce_bits: int
    reduce_dtype: str
    dtypes: dict[str, str]
    nets: dict[str, AxisNetwork]
    options: ShardOptions
    resident: frozenset[str]
    cache: dict[tuple[str, tuple[str, ...], float], CollectiveCost] = field(default_factory=dict)

    def collective(self, kind: str, axes: Sequence[str], nbytes: float) -> CollectiveCost:
        key = (kind, tuple(axes), float(nbytes))
        if key not in self.cache:
            ordered = [a for a in self.mesh.names if a in axes]
            self.cache[key] = collective_over(
                kind, nbytes, [self.nets[a] for a in ordered], self.chip
            )
        return self.cache[key]


def _shards(ctx: _Ctx, axes: Iterable[str]) -> int:
    return math.prod(ctx.mesh.size(a) for a in axes)


def _block_elements(ctx: _Ctx, op: Operand, layout: Mapping[str, Sequence[str]]) -> int:
    return math.prod(ctx.dims[d] // _shards(ctx, layout.get(d, ())) for d in op.dims)


def _nbytes(elements: int, bits: int) -> int:
    return int(operand_bytes(int(elements), int(bits)))


def _layout(op: Operand) -> dict[str, tuple[str, ...]]:
    return {d: tuple(a) for d, a in zip(op.dims, op.shards, strict=True)}


def _fmt_axes(axes: Sequence[str]) -> str:
    return "".join(axes)


def _options_per_axis(ctx: _Ctx) -> list[list[str | None]]:
    """The legal dims each mesh axis may split during the local multiply, default first."""
    lhs, rhs, out = ctx.spec.lhs, ctx.spec.rhs, ctx.spec.out

    def dim_of(op: Operand, axis: str) -> str | None:
        for d, axes in zip(op.dims, op.shards, strict=True):
            if axis in axes:
                return d
        return None

    options: list[list[str | None]] = []
    for axis in ctx.mesh.names:
        d_l, d_r, d_o = dim_of(lhs, axis), dim_of(rhs, axis), dim_of(out, axis)
        if d_l and d_r:
            options.append([d_l] if d_l == d_r else [d_l, d_r])  # case 3 / case 4
        elif d_l or d_r:
            d = d_l or d_r
            other = rhs if d_l else lhs
            # case 2: gather this input (book default), or slice the other one for free
            options.append([None, d] if d in other.dims else [d])
        elif d_o and (d_o in lhs.dims or d_o in rhs.dims):
            options.append([d_o])  # only the output names it: slice the inputs, free
        else:
            options.append([None])
    return options


def _dim_order(ctx: _Ctx, d: str) -> list[str]:
    order: list[str] = []
    for op in ctx.spec.operands:
        for axis in op.shard_of(d):
            if axis not in order:
                order.append(axis)
    order += [a for a in ctx.mesh.names if a not in order]
    return order


@dataclass
class _Plan:
    choice: dict[str, str | None]
    collectives: list[PlannedCollective]
    steps: list[str]
    flops: int
    bytes: dict[str, int]
    shapes: dict[str, list[int]]
    t_compute_s: float
    t_memory_s: float
    t_network_s: float
    t_s: float
    t_upper_s: float
    rank: int


def _evaluate(
    ctx: _Ctx,
    choice: dict[str, str | None],
    rank: int,
    base: list[PlannedCollective],
    base_steps: list[str],
) -> _Plan | None:
    spec, mesh = ctx.spec, ctx.mesh
    collectives = list(base)
    steps = list(base_steps)
    targets: dict[str, dict[str, tuple[str, ...]]] = {}
    for op in (spec.lhs, spec.rhs):
        target = {d: tuple(a for a in _dim_order(ctx, d) if choice[a] == d) for d in op.dims}
        for d, axes in target.items():
            if ctx.dims[d] % _shards(ctx, axes):
                return None  # this choice would split a dim unevenly
        targets[op.name] = target
        current = _layout(op)
        removed = [a for d in op.dims for a in current[d] if choice[a] != d]
        if removed:
            kept = {d: tuple(a for a in current[d] if choice[a] == d) for d in op.dims}
            v = _nbytes(_block_elements(ctx, op, kept), ctx.bits[op.name])
            why = []
            for a in removed:
                d_from = next(d for d in op.dims if a in current[d])
                if choice[a] is None:
                    why.append(
                        f"{op.name}'s {d_from} is split over {a} but the other input "
                        f"is not split that way (case 2): gather it"
                    )
                else:
                    why.append(
                        f"{a} splits {d_from} of {op.name} but {choice[a]} of the other "
                        f"input (case 4): gather {op.name} along {a}"
                    )
            collectives.append(
                PlannedCollective(
                    "all_gather",
                    op.name,
                    tuple(a for a in mesh.names if a in removed),
                    v,
                    ctx.dtypes[op.name],
                    "; ".join(why),
                    ctx.collective("all_gather", removed, v),
                )
            )
        added = [(a, d) for d in op.dims for a in target[d] if a not in current[d]]
        for a, d in added:
            steps.append(
                f"slice {op.name} along {d} over {a} (free: every device holds the whole {d})"
            )
    # the local multiply
    split = {d: tuple(a for a in _dim_order(ctx, d) if choice[a] == d) for d in spec.all_dims}
    local = {d: ctx.dims[d] // _shards(ctx, split[d]) for d in spec.all_dims}
    count = math.prod(local.values())
    flops = 2 * count if spec.contracted else count
    shapes = {op.name: [local[d] for d in op.dims] for op in spec.operands}
    per_operand = {
        op.name: _nbytes(math.prod(local[d] for d in op.dims), ctx.bits[op.name])
        for op in spec.operands
    }
    if ctx.options.accumulate:
        per_operand[spec.out.name] *= 2
    hbm = {**per_operand, "total": sum(per_operand.values())}
    unreduced = [a for a in mesh.names if choice[a] in spec.contracted]
    out = spec.out
    held = {d: split[d] for d in out.dims}  # how the local output block is split
    requested = _layout(out)
    wanted_axis = {a: d for d, axes in requested.items() for a in axes}
    block = math.prod(local[d] for d in out.dims)  # elements of the local output block
    if unreduced:
        steps.append(
            f"local partial sums: {out.name} is unreduced over "
            f"{', '.join(unreduced)} ({{U_{_fmt_axes(unreduced)}}})"
        )
    scatter = [a for a in unreduced if a in wanted_axis]
    keep = [a for a in unreduced if a in ctx.options.unreduced and a not in wanted_axis]
    reduce_all = [a for a in unreduced if a not in scatter and a not in keep]
    if scatter:
        v = _nbytes(block, ctx.reduce_bits)
        targets_txt = ", ".join(f"{wanted_axis[a]} over {a}" for a in scatter)
        collectives.append(
            PlannedCollective(
                "reduce_scatter",
                out.name,
                tuple(scatter),
                v,
                ctx.reduce_dtype,
                f"sum the partial products over {_fmt_axes(scatter)}; the output asks for "
                f"{targets_txt} (case 3, reduce-scatter)",
                ctx.collective("reduce_scatter", scatter, v),
            )
        )
        block //= _shards(ctx, scatter)
        for a in scatter:
            held[wanted_axis[a]] = held[wanted_axis[a]] + (a,)
    if reduce_all:
        v = _nbytes(block, ctx.reduce_bits)
        collectives.append(
            PlannedCollective(
                "all_reduce",
                out.name,
                tuple(reduce_all),
                v,
                ctx.reduce_dtype,
                f"sum the partial products over {_fmt_axes(reduce_all)}; the output is replicated "
                "over it (case 3, all-reduce)",
                ctx.collective("all_reduce", reduce_all, v),
            )
        )
    if keep:
        steps.append(f"{out.name} stays unreduced over {', '.join(keep)} as asked (--unreduced)")
    out_bits = ctx.bits[out.name]
    # output splits held but not wanted there: move (all-to-all) or gather
    moves = [
        (a, d) for d in out.dims for a in held[d] if a not in requested[d] and a in wanted_axis
    ]
    for a, d in moves:
        v = _nbytes(block * mesh.size(a), out_bits)
        collectives.append(
            PlannedCollective(
                "all_to_all",
                out.name,
                (a,),
                v,
                ctx.dtypes[out.name],
                f"the output holds {d} split over {a} but asks for {wanted_axis[a]} over {a}",
                ctx.collective("all_to_all", [a], v),
            )
        )
        held[d] = tuple(x for x in held[d] if x != a)
        held[wanted_axis[a]] = held[wanted_axis[a]] + (a,)
    gather = [a for d in out.dims for a in held[d] if a not in requested[d]]
    if gather:
        v = _nbytes(block * _shards(ctx, gather), out_bits)
        collectives.append(
            PlannedCollective(
                "all_gather",
                out.name,
                tuple(a for a in mesh.names if a in gather),
                v,
                ctx.dtypes[out.name],
                f"the output asks to be whole over {_fmt_axes(gather)}",
                ctx.collective("all_gather", gather, v),
            )
        )
        for d in out.dims:
            held[d] = tuple(a for a in held[d] if a not in gather)
    for d in out.dims:
        for a in requested[d]:
            if a not in held[d]:
                steps.append(f"slice {out.name} along {d} over {a} (free)")
    t_compute = flops / ctx.peak
    t_memory = hbm["total"] / ctx.chip.mem_bytes_per_s
    t_network = sum((float(c.t_s) for c in collectives), 0.0)
    t_s = (
        max(t_compute, t_memory, t_network)
        if ctx.options.overlap
        else max(t_compute, t_memory) + t_network
    )
    return _Plan(
        choice,
        collectives,
        steps,
        flops,
        hbm,
        shapes,
        t_compute,
        t_memory,
        t_network,
        t_s,
        max(t_compute, t_memory) + t_network,
        rank,
    )


def _describe_choice(choice: Mapping[str, str | None]) -> str:
    """`X->K, Y->replicated`: which dim each mesh axis splits during the local multiply."""
    parts = [f"{a}->{d}" if d else f"{a}->replicated" for a, d in choice.items()]
    return ", ".join(parts)


def _network_bytes(c: PlannedCollective) -> float:
    """Bytes one device sends, from the algorithm table (`CollectiveCost.bytes_sent`): (n-1)/n V
    for all-gather and reduce-scatter, twice that for an all-reduce (V with in-switch
    reduction), (n-1)/n^2 V for all-to-all, V for a send."""
    return float(c.cost.bytes_sent)


def _pad_dims(
    spec: EinsumSpec, dims: dict[str, int], mesh: Mesh, pad: bool
) -> tuple[dict[str, int], dict[str, list[int]]]:
    padded: dict[str, list[int]] = {}
    out = dict(dims)
    for d in spec.all_dims:
        need = 1
        for op in spec.operands:
            axes = op.shard_of(d)
            if axes:
                n = math.prod(mesh.size(a) for a in axes)
                need = need * n // math.gcd(need, n)
        if dims[d] % need == 0:
            continue
        if not pad:
            where = [
                f"{op.name}[{d}_{''.join(op.shard_of(d))}]"
                for op in spec.operands
                if op.shard_of(d)
            ]
            raise InputError(
                f"dimension {d} = {dims[d]:,} is not divisible by its {need} shards "
                f"({', '.join(where)}); pass --pad to pad it to {-(-dims[d] // need) * need:,}"
            )
        out[d] = -(-dims[d] // need) * need
        padded[d] = [dims[d], out[d]]
    return out, padded


def plan_sharded(
    spec: EinsumSpec,
    dims: Mapping[str, int],
    mesh: Mesh,
    chip: Chip,
    dtypes: Mapping[str, str],
    compute_dtype: str,
    network: NetworkOptions | None = None,
    options: ShardOptions | None = None,
) -> ShardedResult:
    """The core: choose the collectives for `spec` on `mesh` and cost the step per device."""
    options = options or ShardOptions()
    dims = {d: check_size(int(v), f"dimension {d}") for d, v in dims.items()}
    check_dims(spec, dims)
    for axis in spec.mesh_axes:
        if axis not in mesh.names:
            raise InputError(
                f"mesh axis {axis} is used in the spec but not declared in the mesh "
                f"({mesh.text()}); add it to --mesh"
            )
    for d in spec.all_dims:
        orders = {op.name: op.shard_of(d) for op in (spec.lhs, spec.rhs) if op.shard_of(d)}
        if (
            len(orders) == 2
            and len(set(orders.values())) == 2
            and set(orders[spec.lhs.name]) == set(orders[spec.rhs.name])
        ):
            raise InputError(
                f"{d} is split over {_fmt_axes(orders[spec.lhs.name])} in "
                f"{spec.lhs.name} but {_fmt_axes(orders[spec.rhs.name])} in "
                f"{spec.rhs.name}: the blocks do not line up; write the axes in "
                "the same order"
            )
    for axis in options.unreduced:
        if axis not in mesh.names:
            raise InputError(
                f"--unreduced names mesh axis {axis}, which is not in the mesh ({mesh.text()})"
            )
        if axis in spec.out.axes():
            raise InputError(f"axis {axis} cannot both split the output and leave it unreduced")
    input_names = {spec.lhs.name, spec.rhs.name}
    resident = frozenset(input_names if options.resident is None else options.resident)
    unknown = resident - input_names
    if unknown:
        raise InputError(
            f"--resident names {', '.join(sorted(unknown))}, which is not an input "
            f"(inputs: {spec.lhs.name}, {spec.rhs.name})"
        )
    dims, padded = _pad_dims(spec, dims, mesh, options.pad)
    nets = mesh_networks(chip, mesh.axes, network)
    reduce_dtype = canonical_dtype(options.reduce_dtype)
    ctx = _Ctx(
        spec,
        dims,
        mesh,
        chip,
        chip.peak(compute_dtype),
        {name: dtype_bits(t) for name, t in dtypes.items()},
        dtype_bits(reduce_dtype),
        reduce_dtype,
        dict(dtypes),
        nets,
        options,
        resident,
    )
    # inputs that are not resident start 1/D per device: gather them to the spec's layout
    base: list[PlannedCollective] = []
    base_steps: list[str] = []
    for op in (spec.lhs, spec.rhs):
        if op.name in resident:
            continue
        missing = [a for a in mesh.names if a not in op.axes()]
        if not missing:
            base_steps.append(
                f"{op.name} is not resident but the spec already splits it over "
                "every mesh axis: nothing to gather"
            )
            continue
        v = _nbytes(_block_elements(ctx, op, _layout(op)), ctx.bits[op.name])
        base.append(
            PlannedCollective(
                "all_gather",
                op.name,
                tuple(missing),
                v,
                ctx.dtypes[op.name],
                f"{op.name} is not resident (stored 1/{mesh.devices} per device): gather it over "
                f"{_fmt_axes(missing)} to the layout {op.text()}",
                ctx.collective("all_gather", missing, v),
            )
        )
    per_axis = _options_per_axis(ctx)
    plans: list[_Plan] = []
    for combo in itertools.product(*[range(len(o)) for o in per_axis]):
        choice = {a: per_axis[i][j] for i, (a, j) in enumerate(zip(mesh.names, combo, strict=True))}
        plan = _evaluate(ctx, choice, sum(combo), base, base_steps)
        if plan is not None:
            plans.append(plan)
    if not plans:
        raise InputError("no way to run this sharding with even splits; pass --pad")
    best_t = min(p.t_s for p in plans)
    close = [p for p in plans if p.t_s <= best_t * (1 + 1e-9)]
    best_u = min(p.t_upper_s for p in close)
    best = min((p for p in close if p.t_upper_s <= best_u * (1 + 1e-9)), key=lambda p: p.rank)
    alternatives = (
        tuple(
            {
                "choice": _describe_choice(p.choice),
                "t_s": p.t_s,
                "t_network_s": p.t_network_s,
                "collectives": [
                    f"{c.kind} {c.operand} over {_fmt_axes(c.axes)}" for c in p.collectives
                ],
                "chosen": p is best,
            }
            for p in plans
        )
        if len(plans) > 1
        else ()
    )
    steps = list(best.steps)
    network_bytes = sum((_network_bytes(c) for c in best.collectives), 0.0)
    t_net_pred = sum((float(c.cost.predicted_s) for c in best.collectives), 0.0)
    per_device = PerDevice(
        best.flops, best.bytes, network_bytes, best.t_compute_s, best.t_memory_s, best.shapes
    )
    bound = str(bound_of(best.t_compute_s, best.t_memory_s, best.t_network_s))
    total = spec.flops(dims)
    result = ShardedResult(
        spec=spec.text(),
        dims=dims,
        mesh=dict(mesh.axes),
        devices=mesh.devices,
        topology={a: nets[a].describe() for a in mesh.names},
        dtypes={
            **{k: v for k, v in dtypes.items()},
            "compute": compute_dtype,
            "reduce": reduce_dtype,
        },
        per_device=per_device,
        collectives=tuple(best.collectives),
        t_network_s=best.t_network_s,
        t_network_predicted_s=t_net_pred,
        bound=bound,
        overlap=options.overlap,
        t_s=best.t_s,
        t_lower_s=max(best.t_compute_s, best.t_memory_s, best.t_network_s),
        t_upper_s=best.t_upper_s,
        thresholds=(),
        total_flops=total,
        steps=tuple(steps),
        alternatives=alternatives,
        hardware={
            "name": chip.name,
            "flops_per_s": ctx.peak,
            "mem_bytes_per_s": chip.mem_bytes_per_s,
            "compute_dtype": compute_dtype,
        },
        padded=padded,
        resident=tuple(sorted(resident)),
        chip=chip,
        networks=nets,
    )
    return _with_thresholds(result, spec)


# --- thresholds ------------------------------------------------------------------------------


def _closed_form(
    c: PlannedCollective, net: AxisNetwork, dim: str, size_name: str, others: Sequence[str]
) -> str | None:
    """`dim < s·P·(D-1)/(2W) + ...` for one collective over one single-stage axis, when its array
    is exactly the product of the other dims (the seed's 1D cases)."""
    active = [s for s in net.stages if s.devices > 1]
    if len(active) != 1:
        return None
    topo = active[0].topology
    sharp = c.cost.in_switch
    # t_network = c·V/W + hops·α with V = s·(other dims); t_compute = 2·(all dims)/(D·P), so
    # dim* = D·P·c·s/(2W) + hops·α·D·P/(2·others). D·c/2 per topology and kind, as (num, den):
    w = "W" if topo == "switch" else "W_link"
    table = {
        ("all_gather", "ring"): ("(D-1)", f"4·{w}"),
        ("reduce_scatter", "ring"): ("(D-1)", f"4·{w}"),
        ("all_reduce", "ring"): ("(D-1)", f"2·{w}"),
        ("all_gather", "switch"): ("(D-1)", f"2·{w}"),
        ("reduce_scatter", "switch"): ("(D-1)", f"2·{w}"),
        ("all_reduce", "switch"): ("D", f"2·{w}") if sharp else ("(D-1)", w),
    }
    hops_table = {"ring": "⌊D/2⌋", "switch": "", "line": "(D-1)", "unidirectional-ring": "(D-1)"}
    for t in ("line", "unidirectional-ring"):
        table[("all_gather", t)] = ("(D-1)", f"2·{w}")
        table[("reduce_scatter", t)] = ("(D-1)", f"2·{w}")
        table[("all_reduce", t)] = ("(D-1)", w)
    if (c.kind, topo) not in table:
        return None
    num, den = table[(c.kind, topo)]
    hops = hops_table[topo]
    if c.kind == "all_reduce":
        hops = "2·" + hops if hops else "2"
    lat = f"α·{hops}" if hops else "α"
    den = f"({den})" if "·" in den else den
    return f"{dim} < {size_name}·P·{num}/{den} + {lat}·D·P/(2·{'·'.join(others)})"


def _with_thresholds(result: ShardedResult, spec: EinsumSpec) -> ShardedResult:
    """For each dim that no collective's array depends on, the size below which t_network >
    t_compute: t_compute is proportional to the dim, t_network does not change with it, so
    d* = d * t_network / t_compute = D_c·P·t_network / (2·prod(other dims)), D_c = compute split."""
    import dataclasses

    if not result.collectives or not result.t_network_s > 0 or not spec.contracted:
        return result
    thresholds: list[Threshold] = []
    in_arrays: set[str] = set()
    for c in result.collectives:
        op = next(o for o in spec.operands if o.name == c.operand)
        in_arrays |= set(op.dims)
    pd = result.per_device
    t_bandwidth = sum((float(c.cost.t_bandwidth_s) for c in result.collectives), 0.0)
    for d in spec.all_dims:
        if d in in_arrays:
            continue
        others = [o for o in spec.all_dims if o != d]
        formula = None
        if len(result.collectives) == 1 and len(result.mesh) == 1:
            c = result.collectives[0]
            op = next(o for o in spec.operands if o.name == c.operand)
            if set(op.dims) == set(others) and len(c.axes) == 1:
                size = f"s_{c.dtype}"
                formula = _closed_form(c, result.networks[c.axes[0]], d, size, others)
        if formula is None:
            formula = f"{d} < D·P·t_network/(2·{'·'.join(others)})"
        # First the bandwidth-only form of MODEL.md section 5 (K < s_acc·P·(D-1)/(2W) on a
        # switch), then the same with the per-hop latency, which is what `bound` uses.
        bandwidth_value = result.dims[d] * t_bandwidth / pd.t_compute_s
        value = result.dims[d] * result.t_network_s / pd.t_compute_s
        thresholds.append(
            Threshold(
                name=f"{d}_network_bound_below",
                formula=formula.split(" + α")[0],
                value=bandwidth_value,
                dim=d,
                current=result.dims[d],
                network_bound=result.dims[d] < bandwidth_value,
            )
        )
        if value != bandwidth_value:
            thresholds.append(
                Threshold(
                    name=f"{d}_network_bound_below_with_latency",
                    formula=formula,
                    value=value,
                    dim=d,
                    current=result.dims[d],
                    network_bound=result.dims[d] < value,
                )
            )
    return dataclasses.replace(result, thresholds=tuple(thresholds))


# --- convenience entry points ----------------------------------------------------------------


def shard_einsum(
    spec: str | EinsumSpec,
    dims: Mapping[str, int],
    mesh: str | Mapping[str, int] | Mesh,
    hw: str | Chip = "h100-sxm",
    dtype: str = "bf16",
    *,
    dtypes: Mapping[str, str] | None = None,
    compute_dtype: str | None = None,
    flops_per_s: float | None = None,
    mem_bytes_per_s: float | None = None,
    network: NetworkOptions | None = None,
    options: ShardOptions | None = None,
) -> ShardedResult:
    """A sharded two-operand einsum on a mesh, e.g.
    `shard_einsum("A[M_X,K] * B[K,N_Y] -> C[M_X,N_Y]", {"M": 8192, "K": 8192, "N": 8192},
    "X=4,Y=2", "h100-sxm")`.
    """
    parsed = parse_einsum(spec) if isinstance(spec, str) else spec
    names = (parsed.lhs.name, parsed.rhs.name, parsed.out.name)
    resolved, compute = resolve_dtypes(names, dtype, dict(dtypes or {}), compute_dtype)
    chip = resolve_chip(hw).with_overrides(
        compute_dtype=compute, flops_per_s=flops_per_s, mem_bytes_per_s=mem_bytes_per_s
    )
    return plan_sharded(parsed, dims, parse_mesh(mesh), chip, resolved, compute, network, options)


def matmul_spec(along: str, output: str, n_divisible: bool = True) -> str:
    """The seed's 1D strategies as named-axis specs over one mesh axis X."""
    along, output = along.lower(), output.lower()
    if along not in ("m", "n", "k"):
        raise InputError(f"--along must be m, n or k, got {along!r}")
    if output not in ("split", "replicated"):
        raise InputError(f"--output must be split or replicated, got {output!r}")
    whole = output == "replicated"
    if along == "m":
        return f"A[M_X,K] * B[K,N] -> C[{'M' if whole else 'M_X'},N]"
    if along == "n":
        return f"A[M,K] * B[K,N_X] -> C[M,{'N' if whole else 'N_X'}]"
    if whole:
        return "A[M,K_X] * B[K_X,N] -> C[M,N]"
    return "A[M,K_X] * B[K_X,N] -> C[M,N_X]" if n_divisible else "A[M,K_X] * B[K_X,N] -> C[M_X,N]"


def shard_matmul(
    m: int,
    k: int,
    n: int,
    devices: int,
    along: str,
    hw: str | Chip = "h100-sxm",
    dtype: str = "bf16",
    *,
    output: str = "split",
    compute_dtype: str | None = None,
    flops_per_s: float | None = None,
    mem_bytes_per_s: float | None = None,
    network: NetworkOptions | None = None,
    options: ShardOptions | None = None,
) -> ShardedResult:
    """C[M,N] = A[M,K] B[K,N] split over D devices along M, N or K (seed 000 Part 2).

    Along K with a split output the partial sums are reduce-scattered onto N (onto M when N does
    not divide by D).
    """
    import dataclasses

    devices = check_size(int(devices), "--devices")
    spec = matmul_spec(along, output, n_divisible=n % devices == 0 or m % devices != 0)
    result = shard_einsum(
        spec,
        {"M": m, "K": k, "N": n},
        {"X": devices},
        hw,
        dtype,
        compute_dtype=compute_dtype,
        flops_per_s=flops_per_s,
        mem_bytes_per_s=mem_bytes_per_s,
        network=network,
        options=options,
    )
    return dataclasses.replace(result, strategy=f"along {along.lower()}, output {output.lower()}")
