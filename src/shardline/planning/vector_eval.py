"""The vectorized training-step model: every layout of a chunk of degree assignments at once.

A layout = an assignment of degrees (one per registered strategy) x the execution knobs: the
microbatch size b (so m = batch / (replicas b) microbatches), interleave V, sequence parallelism,
recompute and the ZeRO stage. The step mirrors the plan engine (`planning.evaluate` and
`planning.step`), from the tables the engine priced (`vector_tables`):

    phase    = compute + critical comm (its pipeline sends too) + max(contention, overlapped
               comm + gathers - compute), each the sum of the stage's pieces (whole blocks,
               dense blocks, single layers: `vector_stages.stage_candidates`) and its ends (the
               embedding on the first stage, LM head and loss on the last)
    t_stage  = forward + backward of the slowest of the stages whose times can differ (the
               earliest on a tie, `combine.slowest_stage`, which the engine calls too)
    step     = (m + (P - 1) / V) t_stage + max(last bucket, grad - backward)
               + max(0, gather - forward) + that stage's optimizer step
               + (under --ep-overlap) its unpaired passes' exposed all-to-alls, its gradient traffic
               the data-parallel and the inner axes' (cp, ep) of its pieces on the
               assignment's mesh
    memory   = the engine's stage memory over arrays (`planning.memory.layouts_bytes`).

Equal to the engine's `predicted_s` and `memory_per_device_bytes` to 1e-9 on every layout
(tests/test_search_engine.py: seeded random layouts of five models, a pipeline that cuts the
blocks and DeepSeek-V3's dense first blocks among them).
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from typing import Any

import numpy as np

from shardline.basics.values import Scalar
from shardline.hardware import Chip
from shardline.planning.combine import (
    cycles,
    exposed_gather_s,
    exposed_gradient_s,
    phase_s,
    slowest_stage,
)
from shardline.planning.memory import layouts_bytes
from shardline.planning.step import ep_unpaired_passes, unpaired_extra_s
from shardline.planning.vector_assign import price_traffic
from shardline.planning.vector_tables import ENDS_FIELDS as ENDS
from shardline.planning.vector_tables import PIECE_FIELDS as PIECES
from shardline.planning.vector_tables import ZERO_STAGES, Tables, piece_at
from shardline.strategies import Degrees
from shardline.workload.workload import Workload

__all__ = [
    "Chunk",
    "INTERLEAVES",
    "KNOBS",
    "layouts",
    "price_chunk",
    "memory_of",
    "step_of",
]

INTERLEAVES = (1, 2, 4, 8)
# a layout's columns: assignment, microbatch size index, interleave, sequence parallelism,
# recompute, ZeRO stage, tensor-parallel overlap
KNOBS = ("a", "j", "v", "sp", "rc", "z", "ov")


@dataclass(frozen=True)
class Chunk:
    """A slice of the assignments whose collectives are priced together (picklable: the shared
    tables, the workload, the chip and the degrees)."""

    tables: Tables
    workload: Workload
    chip: Chip
    assignments: tuple[Degrees, ...]


def _grids(recomputes: int, tp_needs_sp: bool = False) -> list[np.ndarray]:
    """The (sp, recompute, ZeRO, tp overlap) combinations of each class 2 (tp > 1) + (dp > 1):
    sequence parallelism and tp overlap need tp (`tp_needs_sp`: tp only with sequence
    parallelism, `Tables.tp_needs_sp`), a ZeRO stage needs dp; recompute indexes the
    `recomputes` policies searched (`Tables.recomputes`)."""
    out = []
    RECOMPUTE = range(recomputes)
    for tp_on, dp_on in product((False, True), (False, True)):
        ovs = (0, 1) if tp_on else (0,)
        sps = (1,) if tp_on and tp_needs_sp else ovs
        zs = ZERO_STAGES if dp_on else (0,)
        out.append(np.array(list(product(sps, RECOMPUTE, zs, ovs)), dtype=np.int64))
    return out


def layouts(t: Tables) -> dict[str, np.ndarray]:
    """Every layout of the assignments (`t.assign`), one row each, as columns (`KNOBS`, int32),
    ordered by assignment, b, V, then the knobs: b divides the batch per replica; interleave
    V > 1 needs a pipeline and, as Megatron-LM's interleaved schedule asserts, a microbatch
    count that is a multiple of the stages."""
    A = t.assign
    if not len(A.get("tp", ())):
        return {k: np.zeros(0, dtype=np.int32) for k in KNOBS}
    b = t.seq_b.astype(np.int64)
    replicas, pp = A["replicas"].astype(np.int64), A["pp"].astype(np.int64)
    ok = t.batch % (replicas[:, None] * b[None, :]) == 0
    ai, ji = np.nonzero(ok)
    m = t.batch // (replicas[ai] * b[ji])
    vs = np.array(INTERLEAVES)
    v_ok = (vs[None, :] == 1) | (
        (vs[None, :] <= A["v_max"][ai, None]) & (m[:, None] % pp[ai, None] == 0)
    )
    bi, vi = np.nonzero(v_ok)
    base = (ai[bi], ji[bi], vs[vi])
    cls = 2 * (A["tp"][base[0]] > 1) + (A["dp"][base[0]] > 1)
    grids = _grids(len(t.recomputes), t.tp_needs_sp)
    counts = np.array([len(g) for g in grids])[cls]
    start = np.cumsum(counts) - counts  # each (a, b, V)'s first row: its knobs follow in order
    out = {k: np.empty(int(counts.sum()), dtype=np.int32) for k in KNOBS}
    for c, grid in enumerate(grids):
        own = np.flatnonzero(cls == c)
        at = (start[own][:, None] + np.arange(len(grid))[None, :]).ravel()
        for k, col in zip(KNOBS[:3], base, strict=True):
            out[k][at] = np.repeat(col[own], len(grid))
        for k, col in zip(KNOBS[3:], grid.T, strict=True):
            out[k][at] = np.tile(col, len(own))
    return out


def _stage(
    P: dict[str, Any],
    ends: Any,
    gathers: tuple[Any, Any],
    sends: tuple[Any, Any],
    share: float,
    copies: tuple[Any, Any],
    unpaired: bool,
) -> list[tuple[Scalar, Scalar]]:
    """Per phase (forward, backward) of a stage, one microbatch: its seconds, compute +
    critical + max(contention, overlapped + gathers - compute), the gathers holding `share` of
    the SMs beside the compute (planning.combine.phase_s), and what an unpaired pass of the
    overlapped expert-parallel all-to-alls adds (`step.unpaired_extra_s`; 0 unless `unpaired`:
    under --ep-overlap). `P` the stage's content's sums (`Tables.contents`) and the ends';
    `ends` per layout: 0 none (a middle stage), 1 the embedding (the first), 2 the LM head and
    loss (the last), 3 both (pp = 1); `gathers` the stage's FSDP and ZeRO-3 gathers, `sends`
    the phases' pipeline sends (critical); `copies` the stage's FSDP copies on the compute
    stream (`vector_assign._copies_s`)."""
    out: list[tuple[Scalar, Scalar]] = []
    head = np.where(ends >= 2, 1.0, 0.0)
    emb = np.where(ends % 2 == 1, 1.0, 0.0) - head  # the ends' probe holds the embedding
    for phase, g, sent, copy in zip(("fwd", "bwd"), gathers, sends, copies, strict=True):
        c = P[f"{phase}_compute_s"] + copy + head * P[f"ends_{phase}_compute_s"]
        c = c + emb * P[f"emb_{phase}_compute_s"]
        crit = P[f"{phase}_crit_s"] + head * P[f"ends_{phase}_crit_s"] + sent
        ov = P[f"{phase}_ov_s"] + g + head * P[f"ends_{phase}_ov_s"]
        held = P[f"{phase}_held_s"] + g * share + head * P[f"ends_{phase}_held_s"]
        extra: Scalar = 0.0
        if unpaired:
            moved = (P[f"{phase}_ep_s"], P[f"{phase}_ep_held_s"])
            extra = unpaired_extra_s((c, crit, ov, held), *moved)
        out.append((phase_s(c, crit, ov, held), extra))
    return out


def _sends(v: Any, send: Any, ends: Any, one: Any) -> tuple[Any, Any]:
    """A stage's pipeline sends per microbatch, (forward, backward): V each way from a middle
    stage; an end stage sends one way V times and the interleave wrap V - 1 times the other way
    (planning.stage_extras); none without a pipeline."""
    on, wrap = np.where(one, 0.0, v * send), np.where(one, 0.0, (v - 1) * send)
    fwd = np.where(ends == 2, wrap, on)
    bwd = np.where(ends == 1, wrap, on)
    return fwd, bwd


def _step(t: Tables, r: dict[str, Any]) -> dict[str, Any]:
    A = t.assign
    a, j, v, z = r["a"], r["j"], r["v"], r["z"]
    inner = A["inner"][a].astype(np.int64)
    key = (inner, j, r["sp"], r["rc"], r["ov"])
    at = np.ravel_multi_index(key, t.probed[ENDS[0]].shape)
    at_pieces = piece_at(t, key)
    pp, dp = A["pp"][a], A["dp"][a]
    m = t.batch / (A["replicas"][a] * t.seq_b[j])
    E = {k: t.probed[k].ravel()[at] for k in ENDS}
    z3 = (z == 3) & (dp > 1)
    share = float(t.extra.get("gather_sm_share", 0.0))
    one = pp == 1
    contents = A["cand_content"][a]
    S = len(t.contents)
    times, phases, extras = [], [], []
    unpaired = t.base.ep_overlap
    keys = [k for k in PIECES if unpaired or "_ep_" not in k]  # the all-to-alls: --ep-overlap's
    for c in range(contents.shape[1]):
        s = contents[:, c]
        P = {k: t.probed[k].ravel()[at_pieces * S + np.maximum(s, 0)] for k in keys}
        gathers = (
            A["fsdp_fwd_s"][a, c] + np.where(z3, A["z3_fwd_s"][a, c], 0.0),
            A["fsdp_bwd_s"][a, c] + np.where(z3, A["z3_bwd_s"][a, c], 0.0),
        )
        ends = A["cand_ends"][a, c]
        sends = _sends(v, A["send_s"][a, c, j], ends, one)
        copies = (A["copy_fwd_s"][a, c], A["copy_bwd_s"][a, c])
        (fwd, fwd_extra), (bwd, bwd_extra) = _stage(
            {**P, **E}, ends, gathers, sends, share, copies, unpaired
        )
        phases.append((fwd, bwd))
        extras.append(fwd_extra + bwd_extra)
        times.append(np.where(s >= 0, fwd + bwd, -np.inf))
    crit = slowest_stage(np.array(times))
    pick = lambda xs: np.choose(crit, xs)  # noqa: E731
    t_stage = pick(times)
    hidden = t.extra.get("grad_reduce_hidden", 1.0) > 0  # planning.step.grad_reduce_hidden
    bwd_s = pick([ph[1] for ph in phases]) if hidden else 0.0
    fwd_s = pick([ph[0] for ph in phases]) if t.base.overlap_param_gather else 0.0
    # the gradient traffic once per step: dp's and the inner axes' (cp, ep), of the stage
    exposed = exposed_gradient_s(A["grad_s"][a, crit, z], A["bucket_s"][a, crit, z], bwd_s)
    # ZeRO's all-gather of the updated parameters: behind the next step's first forward
    exposed = exposed + exposed_gather_s(A["gather_s"][a, crit, z], fwd_s)
    n = cycles(True, False, m, pp, v)
    bubble = (n - m) * t_stage
    opt = A["opt_stage_s"][a, crit, z]
    predicted = n * t_stage + exposed + opt + _ep_unpaired_s(t, pick(extras), pp, v, m)
    return {
        "m": m,
        "predicted_s": predicted,
        # with the assignment's traffic at zero, a lower bound of the step (vector_bound): the
        # least optimizer step of the stages (the slowest one may change with the traffic)
        "lower_s": n * t_stage + A["opt_s"][a, z],
        "bubble_s": bubble,
        "exposed_dp_s": exposed,
    }


def _ep_unpaired_s(t: Tables, extra: Scalar, pp: Scalar, v: Scalar, m: Scalar) -> Scalar:
    """Under `--ep-overlap`, the slowest stage's overlapped expert-parallel all-to-alls of the
    chunk passes that have no partner, exposed (`step.ep_unpaired_s`): passes x (forward's and
    backward's extra) / V."""
    if not t.base.ep_overlap:
        return 0.0
    return ep_unpaired_passes(pp, v, m) * extra / v


def price_chunk(chunk: Chunk) -> dict[str, np.ndarray]:
    """The chunk's assignments' collectives (`vector_assign.price_traffic`)."""
    return price_traffic(chunk.tables, chunk.workload, chunk.chip, list(chunk.assignments))


MEMORY_ROWS = 1 << 16  # layouts sized per slice: their temporaries stay a few MB, reused


def memory_of(t: Tables, r: dict[str, np.ndarray]) -> np.ndarray:
    """Bytes per device of each layout (no probe, no network needed): the plan engine's stage
    memory (`planning.memory`) over arrays, the largest of each layout's candidate stages; in
    slices of `MEMORY_ROWS` layouts."""
    n = len(r["a"])
    out = np.empty(n)
    for lo in range(0, n, MEMORY_ROWS):
        part = {k: v[lo : lo + MEMORY_ROWS] for k, v in r.items()}
        out[lo : lo + MEMORY_ROWS] = _memory_slice(t, part)
    return out


def _memory_slice(t: Tables, r: dict[str, np.ndarray]) -> np.ndarray:
    A = t.assign
    a, j, z = r["a"], r["j"], r["z"]
    inner = A["inner"][a].astype(np.int64)
    layout = {
        "stages": A["pp"][a],
        "microbatches": t.batch / (A["replicas"][a] * t.seq_b[j]),
        "interleave": r["v"],
        "per_block": t.act_bytes[inner, j, r["sp"], r["rc"]],
        "logits": t.logits_bytes[inner, j],
    }
    states = A["mem_states"][a, z]
    return layouts_bytes(states, A["mem_blocks"][a], A["mem_index"][a], layout)


def step_of(t: Tables, r: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Step time, microbatches, bubble, exposed gradient traffic and the lower bound."""
    return _step(t, r)
