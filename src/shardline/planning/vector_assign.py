"""The per-assignment columns of the vectorized training search (`vector_eval`).

- `assignment_shapes`: what an assignment of degrees fixes without any network (blocks per
  stage, parameters and weight bytes of one block on one device, the ways the weights are
  sharded, the optimizer step per ZeRO stage): cheap, for every assignment, before any probe;
- `price_traffic`: its collectives on its mesh, as the strategies price them (FSDP and ZeRO-3
  gathers per block, the data-parallel gradient traffic per ZeRO stage, the last gradient bucket,
  the pipeline send per microbatch size): the costly part, only for the assignments that can win
  (`vector_bound`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod
from typing import Any

import numpy as np

from shardline.basics.options import Execution
from shardline.hardware import Chip
from shardline.planning.memory import (
    Candidates,
    StageLayers,
    candidate_held,
    candidate_stages,
    undominated,
)
from shardline.planning.network import MeshNetwork
from shardline.planning.vector_floors import fold_key, inner_degrees
from shardline.planning.vector_stages import (
    finish_contents,
    floor_counts,
    floor_pieces,
    stage_candidates,
)
from shardline.planning.vector_tables import (
    ZERO_STAGES,
    Tables,
    inner_names,
    probe_key,
)
from shardline.planning.vector_weights import BlockWeights, block_weights
from shardline.strategies import Degrees, folded_from, strategies
from shardline.workload.device_memory import TermsMemo
from shardline.workload.workload import Workload

__all__ = ["Priced", "SHAPE_KEYS", "TRAFFIC_KEYS", "assignment_shapes", "price_traffic"]

SHAPE_KEYS = (
    "tp",
    "pp",
    "dp",
    "replicas",
    "weight_ways",
    "inner",
    "params_block",
    "wbytes_block",
    "v_max",
)
TRAFFIC_KEYS = (
    "fsdp_fwd_s",
    "fsdp_bwd_s",
    "z3_fwd_s",
    "z3_bwd_s",
    "bucket_s",
    "send_s",
    "grad_s",
    "gather_s",
    "copy_fwd_s",
    "copy_bwd_s",
)


class Priced:
    """Collective times shared by the assignments (and the chunks of one process). An axis's
    network depends on its own degree and the degrees inside it on the mesh; assignments whose
    axis lands on the same stages (the same `AxisNetwork`) share its prices."""

    def __init__(self, chip: Chip) -> None:
        from shardline.strategies import by_mesh

        self.chip = chip
        self.mesh = tuple(s.name for s in by_mesh())
        self.memo: dict[tuple[Any, ...], float] = {}
        self.nets: dict[tuple[Any, ...], tuple[MeshNetwork, int]] = {}
        self.same: dict[Any, int] = {}  # AxisNetwork -> its number

    def __call__(self, deg: Degrees, kind: str, nbytes: float, axis: str) -> float:
        upto = (axis, *(deg[n] for n in self.mesh[: self.mesh.index(axis) + 1]))
        found = self.nets.get(upto)
        if found is None:
            net = MeshNetwork(self.chip, deg)
            found = self.nets[upto] = (
                net,
                self.same.setdefault(net.nets.get(axis), len(self.same)),
            )
        key = (found[1], axis, kind, float(nbytes))
        price = self.memo.get(key)
        if price is None:
            price = self.memo[key] = found[0].predicted(kind, nbytes, axis)
        return price


def _grad_s(
    price: Priced, deg: Degrees, bw: BlockWeights, ways: float, kind: str, bucket: float | None
) -> float:
    """One kind of the data-parallel gradient traffic of one block (once per step), as
    dp.layer_comm: each weight gradient over the ways it is sharded and over cp
    (reduce-scattered over cp first); in the framework's buckets when it states a rule
    (planning.step._dp_grad_s)."""
    from shardline.planning.step import bucketed_s

    ways = ways * deg.get("cp", 1)
    calls = [(kind, gbytes / ways, count) for count, _, g in bw.layers for _, gbytes in g if gbytes]
    if bucket is not None:
        return bucketed_s(lambda k, b: price(deg, k, b, "dp"), calls, bucket)
    return sum(count * price(deg, k, nbytes, "dp") for k, nbytes, count in calls)


def _fsdp_s(price: Priced, deg: Degrees, bw: BlockWeights, axis: str) -> tuple[float, float]:
    """One block's FSDP (or ZeRO-3) traffic per microbatch, forward and backward (overlapped):
    all-gather each weight before its forward and its input-gradient matmul, reduce-scatter each
    weight gradient (the reduce-scatter only for fsdp, as the strategies price them)."""
    fwd = bwd = 0.0
    for count, wbytes, grads in bw.layers:
        fwd += count * price(deg, "all_gather", wbytes, axis)
        for has_weights, gbytes in grads:
            if has_weights:
                bwd += count * price(deg, "all_gather", wbytes, axis)
            if gbytes and axis == "fsdp":
                bwd += count * price(deg, "reduce_scatter", gbytes, axis)
    return fwd, bwd


@dataclass(frozen=True)
class Probe:
    """What one search prices once: the workload, chip, microbatch sizes and the collectives."""

    w: Workload
    chip: Chip
    seq_b: list[int]
    price: Priced
    base: Execution | None = None  # the search's execution (its framework's gradient buckets)


def _weight_ways(deg: Degrees) -> int:
    return prod(deg[s.name] for s in strategies() if s.memory.weights == "sharded")


def _piece_traffic(
    pr: Probe, deg: Degrees, bw: BlockWeights, terms: list[Any], rule: float | None
) -> np.ndarray:
    """One piece's traffic on this assignment's mesh: FSDP's gathers (forward, backward),
    ZeRO-3's, the data-parallel gradient traffic (all-reduce, reduce-scatter, all-gather), its
    once-per-step bytes (all-reduce), and the inner axes' once-per-step seconds and bytes (the
    probe's terms at this assignment's gradient ways: `vector_tables.inner_grad_terms`)."""
    from shardline.strategies import device_share

    weight_ways, dp = _weight_ways(deg), deg.get("dp", 1)
    fs = _fsdp_s(pr.price, deg, bw, "fsdp") if deg.get("fsdp", 1) > 1 else (0.0, 0.0)
    z3 = _fsdp_s(pr.price, deg, bw, "dp") if dp > 1 else (0.0, 0.0)
    # ZeRO 1 to 3 send the same gradient traffic: a reduce-scatter, and an all-gather of the
    # updated parameters after the optimizer step (gather_s)
    kinds = ("all_reduce", "reduce_scatter", "all_gather")
    grads = [_grad_s(pr.price, deg, bw, weight_ways, k, rule) if dp > 1 else 0.0 for k in kinds]
    ways = weight_ways * deg.get("cp", 1)
    dp_bytes = sum(count * g / ways for count, _, gs in bw.layers for _, g in gs if g)
    gways = device_share(pr.w, deg).gradients_ways
    inner_s = inner_bytes = 0.0
    for axis, kind, nbytes, probe_ways, calls in terms:
        at = nbytes if probe_ways == gways else nbytes * probe_ways / gways
        inner_s += calls * pr.price(deg, kind, at, axis)
        inner_bytes += calls * at
    return np.array([*fs, *z3, *grads, dp_bytes if dp > 1 else 0.0, inner_s, inner_bytes])


def _traffic(pr: Probe, deg: Degrees, t: Tables, inner: int) -> dict[str, Any]:
    """Each candidate stage's (`vector_stages.stage_candidates`) FSDP and ZeRO-3 gathers, last
    gradient bucket, pipeline sends per b and gradient traffic per ZeRO stage: the sums of its
    pieces' (`_piece_traffic`)."""
    from shardline.planning.step import DP_BUCKET_BYTES, dp_bucket_bytes

    plan = t.plans[deg.stages]
    width = t.assign["cand_content"].shape[1]
    rule = dp_bucket_bytes(pr.w, pr.base, deg.get("dp", 1)) if pr.base is not None else None
    coef = t.contents[[c.content for c in plan]]
    pieces = np.zeros((len(t.pieces), 15))
    key = t.inner_keys[inner]
    for k in np.flatnonzero(coef.any(axis=0)):
        bw = _weights(t, pr.w, key, int(k))
        pieces[k, :10] = _piece_traffic(pr, deg, bw, t.grad_terms[(inner, int(k))], rule)
        pieces[k, 10:] = _piece_copies(pr, deg, bw, t.pieces[k])
    st = coef @ pieces  # [candidate, quantity]
    copies = _copies_s(pr, st)
    grad = np.array([st[:, 4 + min(z, 1)] + st[:, 8] for z in ZERO_STAGES]).T
    gather = np.array([st[:, 6] * (z > 0) for z in ZERO_STAGES]).T
    bucket = _last_bucket_s(pr, deg, st, rule or DP_BUCKET_BYTES)
    per_seq = [_send_bytes(pr.w, deg, c.boundary) for c in plan]
    sends = [[pr.price(deg, "send", b * v, "pp") for b in pr.seq_b] for v in per_seq]

    def pad(x: Any) -> np.ndarray:
        x = np.asarray(x, dtype=float)
        out = np.zeros((width, *x.shape[1:]))
        out[: len(x)] = x
        return out

    return {
        "fsdp_fwd_s": pad(st[:, 0]),
        "fsdp_bwd_s": pad(st[:, 1]),
        "z3_fwd_s": pad(st[:, 2]),
        "z3_bwd_s": pad(st[:, 3]),
        "bucket_s": pad(bucket),
        "send_s": pad(sends),
        "grad_s": pad(grad),
        "gather_s": pad(gather),
        "copy_fwd_s": pad(copies[0]),
        "copy_bwd_s": pad(copies[1]),
    }


def _piece_copies(pr: Probe, deg: Degrees, bw: BlockWeights, piece: Any) -> list[float]:
    """A piece's FSDP copies on the compute stream (`fsdp_copies.block_copy_parts`) and its
    blocks (`Workload.blocks_in`), which add over a stage's pieces; none without FSDP."""
    from shardline.planning.fsdp_copies import block_copy_parts

    if deg.get("fsdp", 1) <= 1:
        return [0.0] * 5
    ex = pr.base if pr.base is not None else Execution()
    parts = block_copy_parts(ex, pr.w.model, bw.layers)
    return [*map(float, parts), pr.w.blocks_in(piece)]


def _copies_s(pr: Probe, st: np.ndarray) -> tuple[Any, Any]:
    """Each candidate stage's FSDP copies, (forward, backward) seconds per microbatch, from its
    pieces' sums (`fsdp_copies.copies_s`, as the engine prices the stage)."""
    from shardline.planning.fsdp_copies import copies_s

    ex = pr.base if pr.base is not None else Execution()
    return copies_s(pr.chip, ex, (st[:, 10], st[:, 11], st[:, 12], st[:, 13]), st[:, 14])


def _last_bucket_s(pr: Probe, deg: Degrees, st: np.ndarray, bucket: float) -> np.ndarray:
    """The last gradient bucket's all-reduce, [candidate stage, ZeRO stage], as
    `planning.step._dp_exposed_s` sizes it: the framework's bucket, or all of the stage's
    once-per-step gradient bytes when they are fewer (each weight gradient over the ways it is
    sharded and over cp, once all-reduced, or reduce-scattered and all-gathered under ZeRO
    >= 1; and the inner axes' (cp, ep) once-per-step bytes)."""
    out = np.zeros((len(st), len(ZERO_STAGES)))
    if deg.get("dp", 1) <= 1:
        return out
    for c, row in enumerate(st):
        for z in ZERO_STAGES:
            size = min(bucket, row[7] * (2 if z else 1) + row[9])
            out[c, z] = pr.price(deg, "all_reduce", size, "dp")
    return out


def _send_bytes(w: Workload, deg: Degrees, last: Any) -> float:
    """What a stage boundary sends per sequence, as pp.stage_comm prices it: the output of the
    stage's boundary layer (`Context.stages`: a MoE block hands on its combined hidden state,
    not its experts' top-k slots, `workload.moe.boundary_layer`) at one sequence's local sizes
    (S / cp tokens under cp)."""
    dims = dict(last.dims)
    if w.batch_dim in dims:
        dims[w.batch_dim] = 1
    for s in strategies():
        if s.name in inner_names() and deg[s.name] > 1:
            dims = s.split_dims(last, dims, deg[s.name], None)
    return float(last.operand_bytes(last.output.name, dims))


def _optimizer_stage_s(
    t: Tables, w: Workload, chip: Chip, deg: Degrees, found: tuple[Candidates, list[Any]]
) -> np.ndarray:
    """The optimizer step (`planning.step.optimizer_step_s`) of each candidate stage of the
    step (`found`: those stages' sums, `memory.candidate_stages` with them picked, and each's
    `StageStates` per ZeRO stage), per ZeRO stage [candidate, ZeRO stage]."""
    from shardline.planning.step import optimizer_step_s

    c, states = found
    n = len(states[0])
    out = np.zeros((n, len(ZERO_STAGES)))
    runs = t.extra.get("zero_runs")
    if runs is None:  # the base execution under each ZeRO stage, made once
        runs = t.extra["zero_runs"] = [replace(t.base, zero=z) for z in ZERO_STAGES]
    for z in ZERO_STAGES:
        ex = runs[z]
        for s in range(n):
            st = states[z][s]
            out[s, z] = optimizer_step_s(w, chip, ex, deg, (st.params, st.optimizer_bytes))
    return out


def _shape_row(w: Workload, deg: Degrees, inner_index: int, bw: BlockWeights) -> dict[str, Any]:
    """Everything of one assignment that neither the knobs nor the network change."""
    tp, dp = deg.get("tp", 1), deg.get("dp", 1)
    weight_ways = _weight_ways(deg)
    fit = [v for v in (1, 2, 4, 8) if deg.stages > 1 and w.chunks_fit(deg.stages, v)]
    return {
        "tp": tp,
        "pp": deg.stages,
        "dp": dp,
        "replicas": deg.replicas,
        "weight_ways": weight_ways,
        "inner": inner_index,
        "params_block": bw.params,
        "wbytes_block": bw.nbytes,
        "v_max": max(fit, default=1),
    }


def _memory_columns(
    t: Tables, w: Workload, chip: Chip, assignments: list[Degrees]
) -> tuple[np.ndarray, ...]:
    """Each assignment's candidate stages for the memory (`memory.candidate_stages`), padded:
    index [a, c] (-1 past the last), states [a, zero stage, c], blocks [a, c]; and the
    optimizer step of each candidate stage of its step [a, candidate, zero stage]
    (`_optimizer_stage_s`, 0 past the last). The stages' sums depend on the degrees only
    through the weights' local sizes (the strategies that split the weights' dims: tp, ep; a
    folded layout's etp, `fold_key`), the ways each sequence's tokens split (cp: the KV cache)
    and the stage count, so assignments that share them share the sums."""
    names = tuple(s.name for s in strategies() if s.memory.weights == "dims" or "seq" in s.splits)
    stages: dict[int, list[list[tuple[Any, int]]]] = {}
    memo: dict[tuple[Any, ...], Candidates] = {}
    # the layers' memory terms (`memory_check`) by those degrees alone: pp splits no layer's dims
    terms: dict[tuple[tuple[int, ...], int], TermsMemo] = {}
    found, opt = [], []
    for deg in assignments:
        P = deg.stages
        if P not in stages:
            stages[P] = [layers for layers, _ in w.pipeline_stages(P)]
        key = (tuple(deg[n] for n in names), P, fold_key(deg))
        inner = folded_from({**dict(zip(names, key[0], strict=True)), "pp": P}, key[2])
        if key not in memo:
            known = terms.setdefault((key[0], key[2]), {})  # a fold splits the experts' dims
            memo[key] = candidate_stages(w, stages[P], inner, t.base, memo=known)
            memo[(*key, "step")] = _on_step(w, memo[key], (stages[P], known), inner, t)
        c, on_step = memo[key], memo[(*key, "step")]
        held = [candidate_held(w, c, deg, z) for z in ZERO_STAGES]
        if on_step is c:  # the step's stages are the memory's first ones
            step_held = [hz[: len(t.plans[P])] for hz in held]
        else:
            step_held = [candidate_held(w, on_step, deg, z) for z in ZERO_STAGES]
        opt.append(_optimizer_stage_s(t, w, chip, deg, (on_step, step_held)))
        states = np.array([[h.total_bytes for h in hz] for hz in held])
        keep = undominated(c.index, states, c.blocks, P)
        picked = [i for i, k in zip(c.index, keep, strict=True) if k]
        found.append((picked, states[:, keep], np.asarray(c.blocks)[keep]))
    width = max((len(f[0]) for f in found), default=1)
    index = np.full((len(found), width), -1, dtype=np.int64)
    states_out = np.zeros((len(found), len(ZERO_STAGES), width))
    blocks = np.zeros((len(found), width))
    for a, (picked, st, bl) in enumerate(found):
        index[a, : len(picked)] = picked
        states_out[a, :, : len(picked)] = st
        blocks[a, : len(picked)] = bl
    steps = np.zeros((len(found), _width(t), len(ZERO_STAGES)))
    for a, o in enumerate(opt):
        steps[a, : len(o)] = o
    return index, states_out, blocks, steps


def _on_step(
    w: Workload,
    c: Candidates,
    stages: tuple[list[StageLayers], TermsMemo],
    inner: Degrees,
    t: Tables,
) -> Candidates:
    """The sums of the step's candidate stages (`Tables.plans`): the memory's where it has
    them all (a stage whose time differs from the one before it differs in its layers or
    ends, so its memory candidate is there too), else summed for them (`stages`: the stages'
    layers and the layers' memory terms, `candidate_stages`)."""
    timed = [s.index for s in t.plans[inner.stages]]
    if c.index[: len(timed)] == timed:
        return c
    if all(i in c.index for i in timed):
        at = [c.index.index(i) for i in timed]
        sums, blocks = [c.sums[k] for k in at], [c.blocks[k] for k in at]
        return Candidates(timed, sums, blocks, c.block_weights_bytes)
    return candidate_stages(w, stages[0], inner, t.base, timed, stages[1])


def _width(t: Tables) -> int:
    """The most candidate stages of any assignment's step."""
    return max((len(p) for p in t.plans.values()), default=1)


def _weights(
    t: Tables, w: Workload, key: tuple[int, ...], piece: int | None = None
) -> BlockWeights:
    """One block's (or, `piece`, one of `Tables.pieces`') weights under the inner degrees."""
    memo = t.extra.setdefault("block_weights", {})
    if (key, piece) not in memo:
        grads = t.extra.setdefault("backward_layers", {})
        layers = None if piece is None else t.pieces[piece]
        inner = inner_degrees(dict(zip(t.names, key, strict=True)))  # folded where keyed so
        memo[(key, piece)] = block_weights(w, inner, grads, layers, t.base.grad_reduce_dtype)
    return memo[(key, piece)]


def _step_candidates(t: Tables, w: Workload, chip: Chip, assignments: list[Degrees]) -> None:
    """Each pipeline's candidate stages of the step (`stage_candidates`), and the pieces each
    inner key needs (`Tables.piece_need`)."""
    from shardline.planning.evaluate import Context

    ctx = Context(w, chip, t.base)
    index = {key: i for i, key in enumerate(t.inner_keys)}
    used: dict[int, set[int]] = {}
    for d in assignments:
        plan = stage_candidates(t, ctx, d.stages)
        used.setdefault(index[probe_key(d, t.names)], set()).update(c.content for c in plan)
    finish_contents(t)
    t.piece_need = np.zeros((len(t.inner_keys), len(t.pieces)), dtype=bool)
    for i, contents in used.items():
        t.piece_need[i] = t.contents[sorted(contents)].any(axis=0)


def assignment_shapes(
    t: Tables, w: Workload, chip: Chip, assignments: list[Degrees]
) -> dict[str, np.ndarray]:
    """`SHAPE_KEYS` of every assignment, its candidate stages of the step (their contents and
    ends, -1 and 0 past the last; their counts of the floors' pieces, `floor_k`), and its
    `TRAFFIC_KEYS` at zero (filled by `price_traffic`
    for the assignments that can win)."""
    _step_candidates(t, w, chip, assignments)
    index = {key: i for i, key in enumerate(t.inner_keys)}
    rows = []
    for d in assignments:
        key = probe_key(d, t.names)
        rows.append(_shape_row(w, d, index[key], _weights(t, w, key)))
    out = {k: np.array([r[k] for r in rows], dtype=float) for k in SHAPE_KEYS}
    n, C, Z = len(assignments), _width(t), len(ZERO_STAGES)
    out["cand_content"] = np.full((n, C), -1, dtype=np.int64)
    out["cand_ends"] = np.zeros((n, C), dtype=np.int64)
    out["floor_k"] = np.zeros((n, C, len(floor_pieces(w))))
    counts = {P: floor_counts(w, P, plan) for P, plan in t.plans.items()}
    for a, d in enumerate(assignments):
        plan = t.plans[d.stages]
        out["cand_content"][a, : len(plan)] = [c.content for c in plan]
        out["cand_ends"][a, : len(plan)] = [c.ends for c in plan]
        out["floor_k"][a, : len(plan)] = counts[d.stages]
    memory = _memory_columns(t, w, chip, assignments)
    out["mem_index"], out["mem_states"], out["mem_blocks"], out["opt_stage_s"] = memory
    # the bounds' optimizer step: the least of the stages the pipeline has
    present = out["cand_content"] >= 0
    out["opt_s"] = np.where(present[:, :, None], out["opt_stage_s"], np.inf).min(axis=1)
    for k in (*TRAFFIC_KEYS[:4], "copy_fwd_s", "copy_bwd_s"):
        out[k] = np.zeros((n, C))
    out["bucket_s"] = np.zeros((n, C, Z))
    out["send_s"] = np.zeros((n, C, len(t.seq_b)))
    out["grad_s"] = np.zeros((n, C, Z))
    out["gather_s"] = np.zeros((n, C, Z))
    return out


def price_traffic(
    t: Tables, w: Workload, chip: Chip, assignments: list[Degrees]
) -> dict[str, np.ndarray]:
    """`TRAFFIC_KEYS` of these assignments, on their meshes."""
    if t.priced is None:
        t.priced = Priced(chip)
    pr = Probe(w, chip, [int(b) for b in t.seq_b], t.priced, t.base)
    index = {key: i for i, key in enumerate(t.inner_keys)}
    rows = [_traffic(pr, d, t, index[probe_key(d, t.names)]) for d in assignments]
    return {k: np.array([r[k] for r in rows], dtype=float) for k in TRAFFIC_KEYS}
