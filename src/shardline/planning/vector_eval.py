"""The vectorized training-step model: every layout of a chunk of degree assignments at once.

A layout = an assignment of degrees (one per registered strategy) x the execution knobs: the
microbatch size b (so m = batch / (replicas b) microbatches), interleave V, sequence parallelism,
recompute and the ZeRO stage. The step mirrors the plan engine (`planning.evaluate` and
`planning.step`), from the tables the engine priced (`vector_tables`):

    phase    = compute + critical comm (its pipeline sends too) + max(contention, overlapped
               comm + gathers - compute), each summed over the stage's k blocks (and its ends:
               the embedding on the first stage, LM head and loss on the last)
    t_stage  = forward + backward of the slowest of the first, a fullest middle and the last
               stage (the earliest on a tie, `combine.slowest_stage`)
    step     = (m + (P - 1) / V) t_stage + max(last bucket, k grad_block - backward)
               + max(0, k gather_block - forward) + that stage's optimizer step
    memory   = first stage: k_first params (weights, gradients, optimizer state sharded by FSDP
               and ZeRO) + activations of min(m, P) (1 + (P - 1)/(P V)) microbatches + gathered
               buffers; the last stage the same with one microbatch and the logits.

Equal to the engine's `predicted_s` to 1e-9 (tests/test_search_engine.py) but for: a pipeline
that cuts the blocks ("layers" splits: partial blocks priced as a fraction of the block); cp or
ep beside dp or FSDP (their once-per-step gradient traffic is probed without FSDP and scaled by
its ways, and left out of the last bucket's size); models whose blocks differ (DeepSeek-V3's
dense first layers: one block probed for all). The re-ranking with the full engine puts them
back.
"""

from __future__ import annotations

from dataclasses import dataclass
from itertools import product
from typing import Any

import numpy as np

from shardline.hardware import Chip
from shardline.planning.combine import (
    TIE,
    cycles,
    exposed_gather_s,
    exposed_gradient_s,
    phase_s,
)
from shardline.planning.memory import layouts_bytes
from shardline.planning.vector_assign import price_traffic
from shardline.planning.vector_tables import ZERO_STAGES, Tables
from shardline.strategies import Degrees
from shardline.workload.workload import Workload

__all__ = [
    "Chunk",
    "INTERLEAVES",
    "KNOBS",
    "layouts",
    "columns",
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


def _grids(recomputes: int) -> list[np.ndarray]:
    """The (sp, recompute, ZeRO, tp overlap) combinations of each class 2 (tp > 1) + (dp > 1):
    sequence parallelism and tp overlap need tp, a ZeRO stage needs dp; recompute indexes the
    `recomputes` policies searched (`Tables.recomputes`)."""
    out = []
    RECOMPUTE = range(recomputes)
    for tp_on, dp_on in product((False, True), (False, True)):
        sps = (0, 1) if tp_on else (0,)
        zs = ZERO_STAGES if dp_on else (0,)
        out.append(np.array(list(product(sps, RECOMPUTE, zs, sps)), dtype=np.int64))
    return out


def layouts(t: Tables) -> np.ndarray:
    """Every layout of the assignments (`t.assign`), one row each (`KNOBS`), ordered by
    assignment, b, V, then the knobs: b divides the batch per replica; interleave V > 1 needs a
    pipeline and, as Megatron-LM's interleaved schedule asserts, a microbatch count that is a
    multiple of the stages."""
    A = t.assign
    if not len(A.get("tp", ())):
        return np.zeros((0, len(KNOBS)), dtype=np.int64)
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
    base = np.stack([ai[bi], ji[bi], vs[vi]], axis=1)
    cls = 2 * (A["tp"][base[:, 0]] > 1) + (A["dp"][base[:, 0]] > 1)
    grids = _grids(len(t.recomputes))
    counts = np.array([len(g) for g in grids])[cls]
    owner = np.repeat(np.arange(len(base)), counts)
    offset = np.arange(len(owner)) - np.repeat(np.cumsum(counts) - counts, counts)
    knobs = np.empty((len(owner), 4), dtype=np.int64)
    for c, grid in enumerate(grids):
        sel = cls[owner] == c
        knobs[sel] = grid[offset[sel]]
    return np.concatenate([base[owner], knobs], axis=1)


def columns(rows: np.ndarray) -> dict[str, np.ndarray]:
    return {k: rows[:, i] for i, k in enumerate(KNOBS)}


def _stage(
    P: dict[str, Any],
    k: Any,
    ends: Any,
    gathers: tuple[Any, Any],
    sends: tuple[Any, Any],
    share: float,
    copies: tuple[Any, Any],
) -> tuple[Any, Any]:
    """(forward, backward) seconds of a stage of k blocks, one microbatch: per phase compute +
    critical + max(contention, overlapped + gathers - compute), the gathers holding `share` of
    the SMs beside the compute (planning.combine.phase_s); `copies` the blocks' FSDP copies on
    the compute stream (vector_assign._fsdp_copies_s). `ends` per layout: 0 none (a middle
    stage), 1 the embedding (the first), 2 the LM head and loss (the last), 3 both (pp = 1);
    `sends` the phases' pipeline sends (critical)."""
    out = []
    for phase, g, sent, copy in zip(("fwd", "bwd"), gathers, sends, copies, strict=True):
        head = np.where(ends >= 2, 1.0, 0.0)
        emb = np.where(ends % 2 == 1, 1.0, 0.0) - head  # the ends' probe holds the embedding
        c = k * (P[f"{phase}_compute_s"] + copy) + head * P[f"ends_{phase}_compute_s"]
        c = c + emb * P[f"emb_{phase}_compute_s"]
        crit = k * P[f"{phase}_crit_s"] + head * P[f"ends_{phase}_crit_s"] + sent
        ov = k * (P[f"{phase}_ov_s"] + g) + head * P[f"ends_{phase}_ov_s"]
        out.append(phase_s(c, crit, ov, k * g * share))
    return out[0], out[1]


def _critical(t_first: Any, t_mid: Any, t_last: Any) -> Any:
    """Which stage is the slowest: 0 the first, 1 a fullest middle one, 2 the last; the
    earliest within `TIE` of the slowest, as the engine picks (`combine.slowest_stage`)."""

    def at_least(x: Any, y: Any) -> Any:
        return x >= y * (1 - TIE)

    first = at_least(t_first, t_mid) & at_least(t_first, t_last)
    return np.where(first, 0, np.where(at_least(t_mid, t_last), 1, 2))


def _step(t: Tables, r: dict[str, Any]) -> dict[str, Any]:
    A = t.assign
    a, j, v, z = r["a"], r["j"], r["v"], r["z"]
    inner = A["inner"][a].astype(np.int64)
    at = (inner, j, r["sp"], r["rc"], r["ov"])
    pp, dp = A["pp"][a], A["dp"][a]
    m = t.batch / (A["replicas"][a] * t.seq_b[j])
    P = {k: col[at] for k, col in t.probed.items()}
    z3 = (z == 3) & (dp > 1)
    gathers = (
        A["fsdp_fwd_s"][a] + np.where(z3, A["z3_fwd_s"][a], 0.0),
        A["fsdp_bwd_s"][a] + np.where(z3, A["z3_bwd_s"][a], 0.0),
    )
    # sends per microbatch: V each way from a middle stage; an end stage sends one way V times
    # and the interleave wrap V - 1 times the other way (planning.stage_extras)
    send = A["send_s"][a, j]
    share = float(t.extra.get("gather_sm_share", 0.0))
    one = pp == 1
    ks = (A["k_first"][a], A["k_mid"][a], A["k_last"][a])
    ends = (np.where(one, 3, 1), np.zeros_like(pp), np.full_like(pp, 2))
    on, wrap = np.where(one, 0.0, v * send), np.where(one, 0.0, (v - 1) * send)
    sends = ((on, wrap), (on, on), (wrap, on))  # (forward, backward) of each stage
    copies = (A["copy_fwd_s"][a], A["copy_bwd_s"][a])
    phases = [
        _stage(P, k, e, gathers, s, share, copies) for k, e, s in zip(ks, ends, sends, strict=True)
    ]
    t_first = phases[0][0] + phases[0][1]
    t_mid = np.where(pp > 2, phases[1][0] + phases[1][1], -np.inf)
    t_last = np.where(one, -np.inf, phases[2][0] + phases[2][1])
    c = _critical(t_first, t_mid, t_last)
    pick = lambda xs: np.choose(c, xs)  # noqa: E731
    t_stage = pick((t_first, t_mid, t_last))
    bwd_s = pick(tuple(ph[1] for ph in phases))
    fwd_s = pick(tuple(ph[0] for ph in phases)) if t.base.overlap_param_gather else 0.0
    k = pick(ks)
    # the gradient traffic once per step: dp's (per assignment) and the inner axes' (cp, ep:
    # probed unsharded, so divided by the ways FSDP shards the gradients, as their bytes are)
    grad = k * (A["grad_s"][a, z] + P["grad_s"] / A["weight_ways"][a])
    exposed = exposed_gradient_s(grad, A["bucket_s"][a, c, z], bwd_s)
    # ZeRO's all-gather of the updated parameters: behind the next step's first forward
    exposed = exposed + exposed_gather_s(k * A["gather_s"][a, z], fwd_s)
    n = cycles(True, False, m, pp, v)
    bubble = (n - m) * t_stage
    opt = A["opt_stage_s"][a, c, z]
    predicted = n * t_stage + exposed + opt
    return {
        "m": m,
        "predicted_s": predicted,
        # with the assignment's traffic at zero, a lower bound of the step (vector_bound): the
        # least optimizer step of the stages (the slowest one may change with the traffic)
        "lower_s": n * t_stage + A["opt_s"][a, z],
        "bubble_s": bubble,
        "exposed_dp_s": exposed,
    }


def price_chunk(chunk: Chunk) -> dict[str, np.ndarray]:
    """The chunk's assignments' collectives (`vector_assign.price_traffic`)."""
    return price_traffic(chunk.tables, chunk.workload, chunk.chip, list(chunk.assignments))


MEMORY_ROWS = 1 << 20  # layouts sized per slice: their temporaries stay a few hundred MB


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
