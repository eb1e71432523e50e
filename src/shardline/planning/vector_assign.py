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
    candidate_held,
    candidate_stages,
    undominated,
)
from shardline.planning.network import MeshNetwork
from shardline.planning.vector_tables import (
    ZERO_STAGES,
    BlockWeights,
    Tables,
    block_weights,
    inner_names,
    probe_key,
    stage_blocks,
)
from shardline.strategies import Degrees, strategies
from shardline.workload.workload import Workload

__all__ = ["Priced", "SHAPE_KEYS", "TRAFFIC_KEYS", "assignment_shapes", "price_traffic"]

SHAPE_KEYS = (
    "tp",
    "pp",
    "dp",
    "replicas",
    "weight_ways",
    "inner",
    "k_first",
    "k_mid",
    "k_last",
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


def _traffic(pr: Probe, deg: Degrees, bw: BlockWeights) -> dict[str, Any]:
    """FSDP and ZeRO-3 gathers per block, the last gradient bucket, pipeline sends per b and the
    gradient traffic per ZeRO stage."""
    from shardline.planning.step import DP_BUCKET_BYTES, dp_bucket_bytes

    weight_ways = _weight_ways(deg)
    dp = deg.get("dp", 1)
    rule = dp_bucket_bytes(pr.w, pr.base, dp) if pr.base is not None else None
    fs = _fsdp_s(pr.price, deg, bw, "fsdp") if deg.get("fsdp", 1) > 1 else (0.0, 0.0)
    z3 = _fsdp_s(pr.price, deg, bw, "dp") if dp > 1 else (0.0, 0.0)
    model = pr.w.model
    assert model is not None
    per_seq = _send_bytes(pr.w, deg)
    # ZeRO 1 to 3 send the same gradient traffic: a reduce-scatter, and an all-gather of the
    # updated parameters after the optimizer step (gather_s)
    kinds = ("all_reduce", "reduce_scatter", "all_gather")
    grads = [_grad_s(pr.price, deg, bw, weight_ways, k, rule) if dp > 1 else 0.0 for k in kinds]
    return {
        "fsdp_fwd_s": fs[0],
        "fsdp_bwd_s": fs[1],
        "z3_fwd_s": z3[0],
        "z3_bwd_s": z3[1],
        "bucket_s": _last_bucket_s(pr, deg, bw, weight_ways, rule or DP_BUCKET_BYTES),
        "send_s": [pr.price(deg, "send", b * per_seq, "pp") for b in pr.seq_b],
        "grad_s": [grads[min(z, 1)] for z in ZERO_STAGES],
        "gather_s": [grads[2] if z else 0.0 for z in ZERO_STAGES],
        **_fsdp_copies_s(pr, bw, deg),
    }


def _fsdp_copies_s(pr: Probe, bw: BlockWeights, deg: Degrees) -> dict[str, float]:
    """One block's FSDP copies on the compute stream per microbatch (planning.fsdp_copies)."""
    from shardline.planning.fsdp_copies import block_copies_s

    if deg.get("fsdp", 1) <= 1:
        return {"copy_fwd_s": 0.0, "copy_bwd_s": 0.0}
    ex = pr.base if pr.base is not None else Execution()
    fwd, bwd = block_copies_s(pr.chip, ex, pr.w.model, bw.layers)
    return {"copy_fwd_s": fwd, "copy_bwd_s": bwd}


def _last_bucket_s(
    pr: Probe, deg: Degrees, bw: BlockWeights, ways: float, bucket: float
) -> list[list[float]]:
    """The last gradient bucket's all-reduce, [first, middle, last stage][ZeRO stage], as
    `planning.step._dp_exposed_s` sizes it: the framework's bucket, or all of the stage's
    once-per-step gradient bytes when they are fewer (k blocks of each weight gradient over the
    ways it is sharded and over cp, once all-reduced, or reduce-scattered and all-gathered under
    ZeRO >= 1). The inner axes' (cp, ep) once-per-step bytes are left out."""
    if deg.get("dp", 1) <= 1:
        return [[0.0] * len(ZERO_STAGES)] * 3
    ways = ways * deg.get("cp", 1)
    block = sum(count * gbytes / ways for count, _, g in bw.layers for _, gbytes in g if gbytes)
    ks = stage_blocks(pr.w, deg.stages)
    return [
        [
            pr.price(deg, "all_reduce", min(bucket, k * block * (2 if z else 1)), "dp")
            for z in ZERO_STAGES
        ]
        for k in ks
    ]


def _send_bytes(w: Workload, deg: Degrees) -> float:
    """What a stage boundary sends per sequence, as pp.stage_comm prices it: the block's last
    layer's output at one sequence's local sizes (S / cp tokens under cp): a MoE block hands on
    its combined hidden state, not its experts' top-k slots (`workload.moe.boundary_layer`)."""
    from shardline.workload.moe import boundary_layer

    last = boundary_layer(w.layers, w.layers[-1])
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
    """The optimizer step (`planning.step.optimizer_step_s`) of the first, a fullest middle
    (stage 1 when pp > 2: the first stages hold the extra blocks) and the last stage, per ZeRO
    stage, from the candidate stages' states (`found`: each's `StageStates` per ZeRO stage)."""
    from shardline.planning.step import optimizer_step_s

    c, states = found
    P = deg.stages
    at = [c.index.index(i) if i in c.index else 0 for i in (0, 1 if P > 2 else 0, P - 1)]
    out = np.zeros((3, len(ZERO_STAGES)))
    for z in ZERO_STAGES:
        ex = replace(t.base, zero=z)
        for s, i in enumerate(at):
            st = states[z][i]
            out[s, z] = optimizer_step_s(w, chip, ex, deg, (st.params, st.optimizer_bytes))
    return out


def _shape_row(w: Workload, deg: Degrees, inner_index: int, bw: BlockWeights) -> dict[str, Any]:
    """Everything of one assignment that neither the knobs nor the network change."""
    tp, dp = deg.get("tp", 1), deg.get("dp", 1)
    weight_ways = _weight_ways(deg)
    k_first, k_mid, k_last = stage_blocks(w, deg.stages)
    fit = [v for v in (1, 2, 4, 8) if deg.stages > 1 and w.chunks_fit(deg.stages, v)]
    return {
        "tp": tp,
        "pp": deg.stages,
        "dp": dp,
        "replicas": deg.replicas,
        "weight_ways": weight_ways,
        "inner": inner_index,
        "k_first": k_first,
        "k_mid": k_mid,
        "k_last": k_last,
        "params_block": bw.params,
        "wbytes_block": bw.nbytes,
        "v_max": max(fit, default=1),
    }


def _memory_columns(
    t: Tables, w: Workload, chip: Chip, assignments: list[Degrees]
) -> tuple[np.ndarray, ...]:
    """Each assignment's candidate stages for the memory (`memory.candidate_stages`), padded:
    index [a, c] (-1 past the last), states [a, zero stage, c], blocks [a, c]; and its
    optimizer step [a, stage, zero stage] (`_optimizer_stage_s`). The stages' sums
    depend on the degrees only through the weights' local sizes (the strategies that split the
    weights' dims: tp, ep), the ways each sequence's tokens split (cp: the KV cache) and the
    stage count, so assignments that share them share the sums."""
    names = tuple(s.name for s in strategies() if s.memory.weights == "dims" or "seq" in s.splits)
    stages: dict[int, list[list[tuple[Any, int]]]] = {}
    memo: dict[tuple[tuple[int, ...], int], Candidates] = {}
    found, opt = [], []
    for deg in assignments:
        P = deg.stages
        if P not in stages:
            stages[P] = [layers for layers, _ in w.pipeline_stages(P)]
        key = (tuple(deg[n] for n in names), P)
        if key not in memo:
            inner = Degrees({**dict(zip(names, key[0], strict=True)), "pp": P})
            memo[key] = candidate_stages(w, stages[P], inner, t.base)
        c = memo[key]
        held = [candidate_held(w, c, deg, z) for z in ZERO_STAGES]
        opt.append(_optimizer_stage_s(t, w, chip, deg, (c, held)))
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
    return index, states_out, blocks, np.array(opt).reshape(len(found), 3, len(ZERO_STAGES))


def _weights(t: Tables, w: Workload, key: tuple[int, ...]) -> BlockWeights:
    memo = t.extra.setdefault("block_weights", {})
    if key not in memo:
        grads = t.extra.setdefault("backward_layers", {})
        memo[key] = block_weights(w, dict(zip(t.names, key, strict=True)), grads)
    return memo[key]


def assignment_shapes(
    t: Tables, w: Workload, chip: Chip, assignments: list[Degrees]
) -> dict[str, np.ndarray]:
    """`SHAPE_KEYS` of every assignment, and its `TRAFFIC_KEYS` at zero (filled by
    `price_traffic` for the assignments that can win)."""
    index = {key: i for i, key in enumerate(t.inner_keys)}
    rows = []
    for d in assignments:
        key = probe_key(d, t.names)
        rows.append(_shape_row(w, d, index[key], _weights(t, w, key)))
    out = {k: np.array([r[k] for r in rows], dtype=float) for k in SHAPE_KEYS}
    memory = _memory_columns(t, w, chip, assignments)
    out["mem_index"], out["mem_states"], out["mem_blocks"], out["opt_stage_s"] = memory
    # the bounds' optimizer step: the least of the stages the pipeline has
    present = np.where((out["pp"] > 2)[:, None], True, np.array([True, False, True]))
    out["opt_s"] = np.where(present[:, :, None], out["opt_stage_s"], np.inf).min(axis=1)
    n = len(assignments)
    for k in (*TRAFFIC_KEYS[:4], "copy_fwd_s", "copy_bwd_s"):
        out[k] = np.zeros(n)
    out["bucket_s"] = np.zeros((n, 3, len(ZERO_STAGES)))
    out["send_s"] = np.zeros((n, len(t.seq_b)))
    out["grad_s"] = np.zeros((n, len(ZERO_STAGES)))
    out["gather_s"] = np.zeros((n, len(ZERO_STAGES)))
    return out


def price_traffic(
    t: Tables, w: Workload, chip: Chip, assignments: list[Degrees]
) -> dict[str, np.ndarray]:
    """`TRAFFIC_KEYS` of these assignments, on their meshes."""
    if t.priced is None:
        t.priced = Priced(chip)
    pr = Probe(w, chip, [int(b) for b in t.seq_b], t.priced, t.base)
    rows = [_traffic(pr, d, _weights(t, w, probe_key(d, t.names))) for d in assignments]
    return {k: np.array([r[k] for r in rows], dtype=float) for k in TRAFFIC_KEYS}
