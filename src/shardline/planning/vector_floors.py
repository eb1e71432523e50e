"""The training search's floors of one block: for each inner assignment (tp, cp, ep, ...) and
microbatch size, the plan engine's own realistic time of every einsum of the block and of its
gradients at their local sizes, at the sizes `Context.cost` prices them (a matmul from its merged
shape, the batch folded into a token or an expert's capacity); and the block's critical
communication, its layers' terms as the engine's stage adds them (`critical_comm_s`).
`vector_bound` bounds a layout's step from below with them; `vector_tables.probe_blocks` asks for
the einsums once per pair (`pair_floor`), sharing pairs whose einsums have the same local sizes.
"""

from __future__ import annotations

from collections.abc import Sequence
from math import prod
from typing import Any, Protocol

from shardline.planning.evaluate import Context, communicating, layer_degrees
from shardline.strategies import CommTerm, Degrees, LayerView, folded_from, strategies
from shardline.workload.workload import Layer, Workload


class FloorTable(Protocol):
    """What pair_floor reads of the search's tables (`vector_tables.Tables`)."""

    names: tuple[str, ...]
    inner_keys: Any
    seq_b: Any
    floors: dict[tuple[Any, ...], tuple[float, float]]


__all__ = [
    "FOLD_NAME",
    "batch_splits",
    "critical_comm_s",
    "einsum_floor",
    "fold_key",
    "inner_degrees",
    "pair_floor",
    "pair_floors",
    "probe_degrees",
]


def batch_splits(name: str) -> tuple[str, ...]:
    return next(s.splits for s in strategies() if s.name == name)


# a probe key's last entry (`vector_tables.probe_key`): a folded layout's etp (its experts run
# on etp x ep x tp / etp of the attention's tp x ep ranks: `Degrees.experts`), 0 for one whose
# experts run on tp
FOLD_NAME = "etp"


def fold_key(deg: Degrees) -> int:
    """`FOLD_NAME`'s entry of an assignment's probe key: its etp when folded to another than
    tp, else 0."""
    return deg.etp if deg.folded and deg.etp != deg["tp"] else 0


def inner_degrees(inner: dict[str, int]) -> Degrees:
    """A probe key's degrees (`vector_tables.probe_key`): the strategies' as given, folded to
    the experts' etp where its "etp" entry is not 0 (`folded_from`)."""
    plain = {k: v for k, v in inner.items() if k != FOLD_NAME}
    return folded_from(plain, inner.get(FOLD_NAME, 0))


def probe_degrees(w: Workload, inner: dict[str, int], sequences: int) -> Degrees:
    """The probe's degrees: `sequences` per device per microbatch, dp taking the rest (the
    unfolded dp of a folded layout: `inner_degrees`)."""
    split = prod(
        v for k, v in inner.items() if k != FOLD_NAME and "batch" in batch_splits(k)
    )  # ep (and fsdp inside)
    return inner_degrees({**inner, "dp": max(1, w.batch // (sequences * split))})


def _merged(layer: Any, dims: dict[str, int], batch_dim: str | None) -> dict[str, int] | None:
    """A matmul's sizes with the batch folded into another dim that sits in the same operands
    (the query tokens where the layer has them: B x S tokens as one dim; else the first such dim
    that ends no operand, e.g. an expert's capacity C): the matmul is the same (its M, N or K
    and batch the same integer products, every operand's row length the same), so that the
    shapes of every (b, cp, ep) with the same work per device share one prediction; None if
    there is no such dim."""
    if layer.kernel == "attention" or batch_dim is None or batch_dim not in dims:
        return None
    into = _merge_target(layer, batch_dim)
    if into is None or into not in dims:
        return None
    return {**dims, batch_dim: 1, into: dims[batch_dim] * dims[into]}


def _merge_target(layer: Any, batch_dim: str) -> str | None:
    """The dim `_merged` folds the batch into, or None (memo by the layer's content)."""
    key = (layer.content_key, batch_dim)
    if key not in _TARGETS:
        _TARGETS[key] = _find_target(layer, batch_dim)
    return _TARGETS[key]


_TARGETS: dict[tuple[Any, str], str | None] = {}


def _find_target(layer: Any, batch_dim: str) -> str | None:
    from shardline.strategies.cp import QUERY_DIM

    ops = (*layer.inputs, layer.output)

    def same(d: str) -> bool:
        return all((batch_dim in op.dims) == (d in op.dims) for op in ops)

    if QUERY_DIM in layer.dims:
        return QUERY_DIM if same(QUERY_DIM) else None
    ends = {op.dims[-1] for op in ops if op.dims}
    if batch_dim in ends:
        return None
    return next((d for d in layer.dims if d != batch_dim and d not in ends and same(d)), None)


Piece = Sequence[tuple[Layer, int]]  # a block's layers (or a dense block's), with instances
# one einsum of a floor: the layer, its local sizes, its key in the caches, its merged sizes
# (None: priced as the engine's Cost, `Context.cost`)
Key = tuple[object, ...]
Einsum = tuple[Layer, dict[str, int], Key, dict[str, int] | None]
# (instances, einsum) of a block's forward and of its backward
Plan = tuple[list[tuple[int, Einsum]], list[tuple[int, Einsum]]]


def _einsum(ctx: Context, layer: Layer, deg: Degrees) -> Einsum:
    dims = dict(ctx.local(layer, deg, 1))
    key = (layer.content_key, tuple(dims.items()))
    return layer, dims, key, _merged(layer, dims, ctx.workload.batch_dim)


def _einsums(ctx: Context, deg: Degrees, layers: Piece | None) -> Plan:
    """The einsums of one block (or of `layers`, [(layer, instances)]) at the sizes of `deg`,
    forward and backward, each with its instances."""
    w = ctx.workload
    fwd: list[tuple[int, Einsum]] = []
    bwd: list[tuple[int, Einsum]] = []
    for layer, n in layers or [(x, x.count) for x in w.layers]:  # as `Context.view` sizes them
        fwd.append((n, _einsum(ctx, layer, deg)))
        for grad in ctx.backward(layer) if w.training else ():
            bwd.append((n, _einsum(ctx, grad, deg)))
    return fwd, bwd


def _einsum_s(ctx: Context, einsum: Einsum) -> float:
    """The engine's realistic time of one einsum (`Context.cost`), a matmul's from its merged
    shape: the same number, shared by more shapes. Left in `Context.einsum_times`, where
    `Context.cost` takes it when a probe asks for the einsum's Cost."""
    from shardline.realistic.kernels import einsum_time_s

    layer, dims, key, merged = einsum
    if merged is None or key in ctx._costs:
        return float(ctx.cost(layer, dims).cost.predicted_s)
    found = ctx.einsum_times.get(key)
    if found is None:
        model, graphs = ctx.workload.model, ctx.execution.cuda_graphs
        found = ctx.einsum_times[key] = einsum_time_s(layer, ctx.kernel_chip, merged, model, graphs)
    return found


def _floor_of(ctx: Context, plan: Plan) -> tuple[float, float]:
    fwd = bwd = 0.0
    for n, einsum in plan[0]:
        fwd += n * _einsum_s(ctx, einsum)
    for n, einsum in plan[1]:
        bwd += n * _einsum_s(ctx, einsum)
    return fwd, bwd


def einsum_floor(
    ctx: Context, inner: dict[str, int], sequences: int, layers: Sequence[Any] | None = None
) -> tuple[float, float]:
    """(forward, backward) realistic seconds of one block's einsums alone (or of `layers`,
    [(layer, instances)]: the dense block of a model whose first blocks are dense), as the
    engine prices them: each probed phase adds communication, memory-bound ops and recompute to
    these, never less (`vector_bound`'s first bound)."""
    return _floor_of(ctx, _einsums(ctx, probe_degrees(ctx.workload, inner, sequences), layers))


def _piece(layers: Piece | None) -> tuple[tuple[str, int], ...] | None:
    return None if layers is None else tuple((x.name, n) for x, n in layers)


def pair_floors(
    t: FloorTable, ctx: Context, pairs: Sequence[tuple[int, int]], pieces: Sequence[Piece | None]
) -> None:
    """`pair_floor` of each of these (inner index, b index) pairs and `pieces`
    (`floor_pieces`), their merged matmuls priced first, each einsum's at once over its sizes
    (`_price`: the same numbers as one by one)."""
    w = ctx.workload
    plans: dict[Key, Plan] = {}
    shared: list[tuple[Key, Key]] = []
    for i, j in pairs:
        inner = dict(zip(t.names, t.inner_keys[i], strict=True))
        deg = probe_degrees(w, inner, int(t.seq_b[j]))
        sizes = ctx.sizes_key(deg)
        for layers in pieces:
            piece = _piece(layers)
            if (i, j, piece) in t.floors:
                continue
            whole: Key = ("sizes", sizes, piece)
            if whole not in t.floors and whole not in plans:
                plans[whole] = _einsums(ctx, deg, layers)
            shared.append(((i, j, piece), whole))
    _price(ctx, [e for plan in plans.values() for part in plan for _, e in part])
    for key, plan in plans.items():
        t.floors[key] = _floor_of(ctx, plan)
    for at, key in shared:
        t.floors[at] = t.floors[key]


def _price(ctx: Context, einsums: list[Einsum]) -> None:
    """Leave in `Context.einsum_times` the merged matmuls of these einsums that `_einsum_s`
    would price, each einsum's shapes at once (`kernels.einsum_times_s`)."""
    from shardline.realistic.kernels import einsum_times_s, shape_key

    w = ctx.workload
    # by einsum (its name and content): the einsum, and each merged shape's sizes and keys
    want: dict[Key, tuple[Layer, dict[Key, tuple[dict[str, int], list[Key]]]]] = {}
    for layer, _, key, merged in einsums:
        if merged is None or key in ctx._costs or key in ctx.einsum_times:
            continue
        shapes = want.setdefault((layer.name, layer.content_key), (layer, {}))[1]
        shapes.setdefault(shape_key(layer, merged, w.model), (merged, []))[1].append(key)
    model, graphs = w.model, ctx.execution.cuda_graphs
    for layer, shapes in want.values():
        sizes = [m for m, _ in shapes.values()]
        found = einsum_times_s(layer, ctx.kernel_chip, sizes, model, graphs)
        for (_, keys), seconds in zip(shapes.values(), found, strict=True):
            for key in keys:
                ctx.einsum_times[key] = seconds


def pair_floor(
    t: FloorTable, ctx: Context, i: int, j: int, layers: Sequence[Any] | None = None
) -> tuple[float, float]:
    """`einsum_floor` of inner key i and microbatch size j (of the block, or of `layers`), once
    per search: the contexts share their cost cache (`contexts`), so its first call also leaves
    the merged matmul shapes there for every probe of the pair. Pairs whose probe degrees give
    the same local sizes by `Context.sizes_key` (an fsdp inside ep that splits only the batch,
    as dp would) share one."""
    piece = _piece(layers)
    found = t.floors.get((i, j, piece))
    if found is None:
        inner = dict(zip(t.names, t.inner_keys[i], strict=True))
        b = int(t.seq_b[j])
        sizes = ("sizes", ctx.sizes_key(probe_degrees(ctx.workload, inner, b)), piece)
        found = t.floors.get(sizes)
        if found is None:
            found = t.floors[sizes] = einsum_floor(ctx, inner, b, layers)
        t.floors[(i, j, piece)] = found
    return found


def layer_terms(
    ctx: Context, view: LayerView, deg: Degrees, leave: frozenset[str] = frozenset()
) -> tuple[CommTerm, ...]:
    """Each strategy's communication terms for the layer of `view` on its degrees `deg`
    (`layer_degrees`), innermost strategy first, in the order they run, as `evaluate`'s layer
    parts have them: those of the strategies on (degree > 1) but the ones the context prices
    apart and `leave` (`communicating`)."""
    active = communicating(ctx, deg, leave)
    if not active:
        return ()
    net = ctx.network(deg)
    terms = [t for s in active for t in s.layer_comm(view, deg[s.name], net)]
    return tuple(sorted(terms, key=lambda t: t.step))


NOT_TP = frozenset(("tp",))


def critical_comm_s(
    ctx: Context,
    inner: dict[str, int],
    sequences: int,
    overlap: bool,
    tp: bool,
    layers: Sequence[Layer] | None = None,
) -> tuple[float, float]:
    """Realistic seconds of one block's critical, per-microbatch communication in one
    microbatch's forward and backward, its layers' terms as the probe's stage adds them (run
    under `ctx`'s execution: `tp_variants`); `tp`: the tensor-parallel terms alone (none with
    `overlap`, which moves them off the critical path as `block_times` does), from the layers'
    parts (`Context.part`, cached for the probe), else every other strategy's (without pricing
    tp's). The probed block (its stage less the stage of no blocks) holds these terms and more
    (tp's recomputed forward, none of them negative); its phases take compute + critical +
    max(contention, overlapped - compute), at least compute + critical: so both add to
    `einsum_floor` in a lower bound of the block (`vector_bound`). `layers`: those of the block
    whose terms count (default all; disjoint sets add up). Returned beside the total, from the
    same pass: its forward terms a full recompute runs again in the backward
    (`stage_extras._rerun_terms`: tp's, ep's)."""
    from shardline.planning.stage_extras import rerun_by_recompute, tp_variants

    if tp and overlap:
        return 0.0, 0.0
    deg = probe_degrees(ctx.workload, inner, sequences)
    total = rerun = 0.0
    for layer in ctx.workload.layers if layers is None else layers:
        on = layer_degrees(deg, layer)
        if tp and on["tp"] > 1:
            terms = ctx.part(layer, layer.count, deg, 1).run(ctx, on)
        elif not tp and communicating(ctx, on, NOT_TP):
            view = ctx.view(layer, layer.count, on, 1)
            found = layer_terms(ctx, view, on, NOT_TP)
            terms = tuple(v for term in found for v in tp_variants(term, ctx, on))
        else:  # no strategy of the part on: no terms
            continue
        for term in terms:
            if term.critical and not term.once_per_step and (term.purpose == "tp") == tp:
                total += term.calls * term.t_pred_s
                if rerun_by_recompute(term):
                    rerun += term.calls * term.t_pred_s
    return total, rerun
