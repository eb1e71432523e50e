"""The rules that decide the collectives of one sharded einsum, before the network is priced.

For one choice of which dim each mesh axis splits during the local multiply (see
`legal_choices`), `layout_work` returns the local counts (FLOPs, HBM bytes per operand, local
shapes) and the table of collectives the choice needs, each as (kind, operand, axes, V bytes,
dtype, reason); the steps that need no network (free slices) come as words. The sharding chapter
of "How to Scale Your Model" is the source of the four cases:

- case 1/3: the same axis splits the same dim of both inputs: keep it (a contracting dim leaves
  partial sums);
- case 2: an axis splits a dim of one input that the other also has: all-gather that input, or
  slice the other one for free and keep the split;
- case 4: an axis splits different dims of the two inputs: all-gather one of them;
- an axis only the output names: slice the inputs to match (free).

The output spec then decides the rest: partial sums over an axis the output splits a dim over are
reduce-scattered, others all-reduced (unless asked to stay unreduced); output splits that are not
asked for are moved with an all-to-all (asked on another dim) or all-gathered; asked-for splits
that are missing are free slices.

Sizes (dims and mesh axis sizes) may be Python ints or numpy arrays that broadcast: one row per
layout of the same spec (what `shardline.sharding.compare` evaluates at once). Pricing the table is
`shardline.sharding.layout`'s job.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardline.basics.kinds import CollectiveKind
from shardline.basics.values import Scalar
from shardline.ops.einsum import EinsumSpec, Operand
from shardline.ops.roofline import operand_bytes

__all__ = [
    "CollectiveCall",
    "LayoutSetup",
    "LayoutWork",
    "legal_choices",
    "choices",
    "resident_gathers",
    "layout_work",
    "shard_counts",
    "fmt_axes",
]


@dataclass(frozen=True)
class CollectiveCall:
    """One row of the table: a collective a layout needs, not yet priced."""

    kind: CollectiveKind  # all_gather, reduce_scatter, all_reduce, all_to_all
    operand: str
    axes: tuple[str, ...]  # mesh order
    bytes: Any  # V: the whole array over the axes' group
    dtype: str
    reason: str

    def label(self) -> str:
        """`all_gather A over XY`."""
        return f"{self.kind} {self.operand} over {fmt_axes(self.axes)}"


@dataclass(frozen=True)
class LayoutSetup:
    """One einsum on one mesh; sizes are numbers or numpy arrays (one row per layout)."""

    spec: EinsumSpec
    dims: Mapping[str, Any]  # every dim's (padded) size
    names: tuple[str, ...]  # mesh axes, outer first
    sizes: Mapping[str, Any]  # mesh axis -> devices along it
    bits: Mapping[str, int]  # operand -> bits per element
    dtypes: Mapping[str, str]  # operand -> dtype name
    reduce_bits: int  # partial sums cross the network in this width
    reduce_dtype: str
    resident: frozenset[str]  # inputs already laid out as the spec says
    unreduced: tuple[str, ...] = ()  # axes whose partial sums the output keeps ({U_X})
    accumulate: bool = False  # the output is read and written (C += A·B)


@dataclass(frozen=True)
class LayoutWork:
    """What one choice needs: local counts, the collectives, the free steps in words."""

    choice: Mapping[str, str | None]  # mesh axis -> the dim it splits while multiplying
    rank: int  # 0 for the book's default choice on every axis; ties go to the lowest
    calls: tuple[CollectiveCall, ...]
    steps: tuple[str, ...]
    flops: Scalar
    hbm: Mapping[str, Any]  # bytes per operand and "total"
    shapes: Mapping[str, list[Any]]  # local shapes at compute time


def fmt_axes(axes: Sequence[str]) -> str:
    return "".join(axes)


def _shards(s: LayoutSetup, axes: Iterable[str]) -> Any:
    return math.prod((s.sizes[a] for a in axes), start=1)


def _nbytes(elements: Scalar, bits: int) -> Any:
    if isinstance(elements, int):
        return int(operand_bytes(elements, int(bits)))
    return operand_bytes(elements, int(bits))


def _layout(op: Operand) -> dict[str, tuple[str, ...]]:
    return {d: tuple(a) for d, a in zip(op.dims, op.shards, strict=True)}


def _block_elements(s: LayoutSetup, op: Operand, layout: Mapping[str, Sequence[str]]) -> Any:
    return math.prod((s.dims[d] // _shards(s, layout.get(d, ())) for d in op.dims), start=1)


def _uneven(size: Scalar, shards: Scalar) -> bool:
    return bool(np.any(np.asarray(size) % shards))


def _dim_of(op: Operand, axis: str) -> str | None:
    for d, axes in zip(op.dims, op.shards, strict=True):
        if axis in axes:
            return d
    return None


@functools.lru_cache(maxsize=1024)
def legal_choices(spec: EinsumSpec, names: tuple[str, ...]) -> tuple[tuple[str | None, ...], ...]:
    """The dims each mesh axis may split during the local multiply, the book's default first."""
    lhs, rhs, out = spec.lhs, spec.rhs, spec.out
    options: list[tuple[str | None, ...]] = []
    for axis in names:
        d_l, d_r, d_o = _dim_of(lhs, axis), _dim_of(rhs, axis), _dim_of(out, axis)
        if d_l and d_r:
            options.append((d_l,) if d_l == d_r else (d_l, d_r))  # case 3 / case 4
        elif d_l or d_r:
            d = d_l or d_r
            other = rhs if d_l else lhs
            # case 2: gather this input (book default), or slice the other one for free
            options.append((None, d) if d in other.dims else (d,))
        elif d_o and (d_o in lhs.dims or d_o in rhs.dims):
            options.append((d_o,))  # only the output names it: slice the inputs, free
        else:
            options.append((None,))
    return tuple(options)


def choices(
    spec: EinsumSpec, names: tuple[str, ...]
) -> Iterator[tuple[dict[str, str | None], int]]:
    """Every legal choice (mesh axis -> dim) with its rank (0: the book's default everywhere)."""
    per_axis = legal_choices(spec, names)
    for combo in itertools.product(*[range(len(o)) for o in per_axis]):
        yield (
            {a: per_axis[i][j] for i, (a, j) in enumerate(zip(names, combo, strict=True))},
            sum(combo),
        )


@functools.lru_cache(maxsize=4096)
def _dim_order(spec: EinsumSpec, names: tuple[str, ...], d: str) -> tuple[str, ...]:
    """The axes that may split `d`, in the order the operands name them, then mesh order."""
    order: list[str] = []
    for op in spec.operands:
        for axis in op.shard_of(d):
            if axis not in order:
                order.append(axis)
    order += [a for a in names if a not in order]
    return tuple(order)


def _split(s: LayoutSetup, choice: Mapping[str, str | None], d: str) -> tuple[str, ...]:
    return tuple(a for a in _dim_order(s.spec, s.names, d) if choice[a] == d)


def shard_counts(spec: EinsumSpec, sizes: Mapping[str, int]) -> dict[str, int]:
    """Each dim's least common multiple of its shard counts over the operands: the multiple its
    size must be (else `--pad` rounds it up to one)."""
    need: dict[str, int] = {}
    for d in spec.all_dims:
        need[d] = 1
        for op in spec.operands:
            axes = op.shard_of(d)
            if axes:
                need[d] = math.lcm(need[d], math.prod(sizes[a] for a in axes))
    return need


# --- the collectives of one choice ----------------------------------------------------------


def resident_gathers(s: LayoutSetup) -> tuple[list[CollectiveCall], list[str]]:
    """Inputs that are not resident start 1/D per device: gather them to the spec's layout."""
    calls: list[CollectiveCall] = []
    steps: list[str] = []
    devices = _shards(s, s.names)
    for op in (s.spec.lhs, s.spec.rhs):
        if op.name in s.resident:
            continue
        missing = tuple(a for a in s.names if a not in op.axes())
        if not missing:
            steps.append(
                f"{op.name} is not resident but the spec already splits it over "
                "every mesh axis: nothing to gather"
            )
            continue
        v = _nbytes(_block_elements(s, op, _layout(op)), s.bits[op.name])
        reason = (
            f"{op.name} is not resident (stored 1/{devices} per device): gather it over "
            f"{fmt_axes(missing)} to the layout {op.text()}"
        )
        calls.append(CollectiveCall("all_gather", op.name, missing, v, s.dtypes[op.name], reason))
    return calls, steps


def _gather_reason(op: Operand, axis: str, choice: Mapping[str, str | None]) -> str:
    d_from = _dim_of(op, axis)
    if choice[axis] is None:
        return (
            f"{op.name}'s {d_from} is split over {axis} but the other input "
            f"is not split that way (case 2): gather it"
        )
    return (
        f"{axis} splits {d_from} of {op.name} but {choice[axis]} of the other "
        f"input (case 4): gather {op.name} along {axis}"
    )


def _input_to_choice(
    s: LayoutSetup, op: Operand, choice: Mapping[str, str | None]
) -> tuple[list[CollectiveCall], list[str]] | None:
    """Case 2/4 gathers and free slices that bring one input to the choice (None: uneven)."""
    target = {d: _split(s, choice, d) for d in op.dims}
    if any(_uneven(s.dims[d], _shards(s, axes)) for d, axes in target.items()):
        return None  # this choice would split a dim unevenly
    current = _layout(op)
    calls: list[CollectiveCall] = []
    removed = [a for d in op.dims for a in current[d] if choice[a] != d]
    if removed:
        kept = {d: tuple(a for a in current[d] if choice[a] == d) for d in op.dims}
        v = _nbytes(_block_elements(s, op, kept), s.bits[op.name])
        why = "; ".join(_gather_reason(op, a, choice) for a in removed)
        axes = tuple(a for a in s.names if a in removed)
        calls.append(CollectiveCall("all_gather", op.name, axes, v, s.dtypes[op.name], why))
    steps = [
        f"slice {op.name} along {d} over {a} (free: every device holds the whole {d})"
        for d in op.dims
        for a in target[d]
        if a not in current[d]
    ]
    return calls, steps


def _local_multiply(
    s: LayoutSetup, choice: Mapping[str, str | None]
) -> tuple[dict[str, object], Scalar, dict[str, object], dict[str, list[object]]]:
    """Local dim sizes, FLOPs (2 per multiply-add when a dim is contracted), HBM bytes."""
    spec = s.spec
    local = {d: s.dims[d] // _shards(s, _split(s, choice, d)) for d in spec.all_dims}
    count = math.prod(local.values(), start=1)
    flops = 2 * count if spec.contracted else count
    shapes = {op.name: [local[d] for d in op.dims] for op in spec.operands}
    # a device that contracts a split dim writes its output as partial sums, in the dtype they
    # are reduced in (fp32 by default), not in the output's storage dtype
    # (the compare's vectorized sizes make `split` an array: one answer per layout)
    split = _shards(s, [a for a in s.names if choice[a] in spec.contracted])
    per_operand = {
        op.name: _nbytes(math.prod((local[d] for d in op.dims), start=1), s.bits[op.name])
        for op in spec.operands
    }
    out = spec.out.name
    if s.reduce_bits != s.bits[out]:
        partials = _nbytes(math.prod((local[d] for d in spec.out.dims), start=1), s.reduce_bits)
        if np.ndim(split) == 0:
            per_operand[out] = partials if split > 1 else per_operand[out]
        else:
            per_operand[out] = np.where(split > 1, partials, per_operand[out])
    if s.accumulate:
        per_operand[spec.out.name] *= 2  # C is read and written
    hbm = {**per_operand, "total": sum(per_operand.values())}
    return local, flops, hbm, shapes


@dataclass
class _Output:
    """The local output block as the reduction and moves reshape it."""

    held: dict[str, tuple[str, ...]]  # which axes split each output dim now
    block: Scalar  # elements of the local output block
    wanted: dict[str, str]  # mesh axis -> the output dim the spec asks it to split


def _reduce_output(
    s: LayoutSetup, choice: Mapping[str, str | None], local: Mapping[str, Any], steps: list[str]
) -> tuple[list[CollectiveCall], _Output]:
    """Partial sums: reduce-scatter onto an asked-for split, all-reduce, or keep unreduced."""
    out = s.spec.out
    requested = _layout(out)
    o = _Output(
        held={d: _split(s, choice, d) for d in out.dims},
        block=math.prod((local[d] for d in out.dims), start=1),
        wanted={a: d for d, axes in requested.items() for a in axes},
    )
    unreduced = [a for a in s.names if choice[a] in s.spec.contracted]
    if unreduced:
        steps.append(
            f"local partial sums: {out.name} is unreduced over "
            f"{', '.join(unreduced)} ({{U_{fmt_axes(unreduced)}}})"
        )
    scatter = tuple(a for a in unreduced if a in o.wanted)
    keep = [a for a in unreduced if a in s.unreduced and a not in o.wanted]
    reduce_all = tuple(a for a in unreduced if a not in scatter and a not in keep)
    calls: list[CollectiveCall] = []
    if scatter:
        onto = ", ".join(f"{o.wanted[a]} over {a}" for a in scatter)
        why = (
            f"sum the partial products over {fmt_axes(scatter)}; the output asks for "
            f"{onto} (case 3, reduce-scatter)"
        )
        v = _nbytes(o.block, s.reduce_bits)
        calls.append(CollectiveCall("reduce_scatter", out.name, scatter, v, s.reduce_dtype, why))
        o.block = o.block // _shards(s, scatter)
        for a in scatter:
            o.held[o.wanted[a]] = o.held[o.wanted[a]] + (a,)
    if reduce_all:
        why = (
            f"sum the partial products over {fmt_axes(reduce_all)}; the output is replicated "
            "over it (case 3, all-reduce)"
        )
        v = _nbytes(o.block, s.reduce_bits)
        calls.append(CollectiveCall("all_reduce", out.name, reduce_all, v, s.reduce_dtype, why))
    if keep:
        steps.append(f"{out.name} stays unreduced over {', '.join(keep)} as asked (--unreduced)")
    return calls, o


def _reshape_output(s: LayoutSetup, o: _Output, steps: list[str]) -> list[CollectiveCall]:
    """Output splits held but not asked for: all-to-all onto the asked dim, or all-gather; asked
    splits that are missing: free slices."""
    out = s.spec.out
    requested = _layout(out)
    bits, dtype = s.bits[out.name], s.dtypes[out.name]
    calls: list[CollectiveCall] = []
    moves = [(a, d) for d in out.dims for a in o.held[d] if a not in requested[d] and a in o.wanted]
    for a, d in moves:
        v = _nbytes(o.block * s.sizes[a], bits)
        why = f"the output holds {d} split over {a} but asks for {o.wanted[a]} over {a}"
        calls.append(CollectiveCall("all_to_all", out.name, (a,), v, dtype, why))
        o.held[d] = tuple(x for x in o.held[d] if x != a)
        o.held[o.wanted[a]] = o.held[o.wanted[a]] + (a,)
    gather = [a for d in out.dims for a in o.held[d] if a not in requested[d]]
    if gather:
        v = _nbytes(o.block * _shards(s, gather), bits)
        axes = tuple(a for a in s.names if a in gather)
        why = f"the output asks to be whole over {fmt_axes(gather)}"
        calls.append(CollectiveCall("all_gather", out.name, axes, v, dtype, why))
        for d in out.dims:
            o.held[d] = tuple(a for a in o.held[d] if a not in gather)
    for d in out.dims:
        for a in requested[d]:
            if a not in o.held[d]:
                steps.append(f"slice {out.name} along {d} over {a} (free)")
    return calls


def layout_work(
    s: LayoutSetup,
    choice: Mapping[str, str | None],
    rank: int = 0,
    base: tuple[list[CollectiveCall], list[str]] | None = None,
) -> LayoutWork | None:
    """The local work and the collectives of one choice; None when it splits a dim unevenly.
    `base`: the gathers of inputs that are not resident (`resident_gathers`), computed once."""
    calls, steps = base if base is not None else resident_gathers(s)
    calls, steps = list(calls), list(steps)
    for op in (s.spec.lhs, s.spec.rhs):
        moved = _input_to_choice(s, op, choice)
        if moved is None:
            return None
        calls += moved[0]
        steps += moved[1]
    local, flops, hbm, shapes = _local_multiply(s, choice)
    reduced, o = _reduce_output(s, choice, local, steps)
    calls += reduced
    calls += _reshape_output(s, o, steps)
    return LayoutWork(dict(choice), rank, tuple(calls), tuple(steps), flops, hbm, shapes)
