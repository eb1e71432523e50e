"""The vectorized training-step model: every layout of a chunk of degree assignments at once.

A layout = an assignment of degrees (one per registered strategy) x the execution knobs: the
microbatch size b (so m = batch / (replicas b) microbatches), interleave V, sequence parallelism,
recompute and the ZeRO stage. The step mirrors the plan engine (`planning.evaluate` and
`planning.step`), from the tables the engine priced (`vector_tables`):

    phase    = compute + critical comm + max(0, overlapped comm + gathers - compute), each
               summed over the stage's k blocks (and the ends: embedding, LM head, loss)
    t_stage  = forward + backward + pipeline sends of the slower of a fullest middle stage and
               the last stage (which runs the ends)
    step     = (m + (P - 1) / V) t_stage + max(last bucket, k grad_block - backward) + optimizer
    memory   = first stage: k_first params (weights, gradients, optimizer state sharded by FSDP
               and ZeRO) + activations of min(m, P) (1 + (P - 1)/(P V)) microbatches + gathered
               buffers; the last stage the same with one microbatch and the logits.

What it leaves out (the re-ranking with the full engine puts it back): the gradient traffic of
the LM head and embedding (the engine leaves it out too); the first stage's embedding kernels
count with the ends of the last stage; the critical stage is taken as a fullest middle stage or
the last (the first stage's embedding is left out).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from itertools import product
from typing import Any

import numpy as np

from shardline.hardware import Chip
from shardline.planning.vector_tables import ZERO_STAGES, Tables, price_assignments
from shardline.strategies import Degrees
from shardline.workload import Workload

__all__ = ["Chunk", "INTERLEAVES", "KNOBS", "layouts", "evaluate_chunk"]

INTERLEAVES = (1, 2, 4, 8)
RECOMPUTE = (0, 1, 2)  # none, selective, full (shardline.options.RECOMPUTE_MODES)
# a layout's columns: assignment, microbatch size index, interleave, sequence parallelism,
# recompute, ZeRO stage, tensor-parallel overlap
KNOBS = ("a", "j", "v", "sp", "rc", "z", "ov")


@dataclass(frozen=True)
class Chunk:
    """A slice of the assignments, numbered from `start` (picklable: the shared tables, the
    workload, the chip and the degrees)."""

    tables: Tables
    workload: Workload
    chip: Chip
    assignments: tuple[Degrees, ...]
    start: int


def _knobs(t: Tables, a: int) -> np.ndarray:
    """Rows (`KNOBS`) of assignment a: b divides the batch per replica; interleave V > 1 needs a
    pipeline and, as Megatron-LM's interleaved schedule asserts, a microbatch count that is a
    multiple of the stages."""
    A = t.assign
    replicas, pp, tp, dp = (int(A[k][a]) for k in ("replicas", "pp", "tp", "dp"))
    vmax = int(A["v_max"][a])
    sps = (0, 1) if tp > 1 else (0,)  # sequence parallelism, and tp overlap, need tp
    zs = ZERO_STAGES if dp > 1 else (0,)
    combos: list[tuple[int, ...]] = []
    for j, b in enumerate(t.seq_b):
        if t.batch % (replicas * int(b)):
            continue
        m = t.batch // (replicas * int(b))
        vs = [v for v in INTERLEAVES if v == 1 or (v <= vmax and m % pp == 0)]
        combos.extend(product([a], [j], vs, sps, RECOMPUTE, zs, sps))
    return np.array(combos, dtype=np.int64).reshape(-1, len(KNOBS))


def layouts(t: Tables) -> np.ndarray:
    """Every layout of the priced assignments (`t.assign`), one row each."""
    parts = [_knobs(t, a) for a in range(len(t.assign.get("tp", ())))]
    return np.concatenate(parts) if parts else np.zeros((0, len(KNOBS)), dtype=np.int64)


def _memory(t: Tables, r: dict[str, Any], held_first: Any) -> Any:
    """Bytes per device of the first and the last stage; the larger."""
    A, x = t.assign, t.extra
    a, j, sp, rc, z = r["a"], r["j"], r["sp"], r["rc"], r["z"]
    dp, ways, pp = A["dp"][a], A["weight_ways"][a], A["pp"][a]
    w_ways = ways * np.where(z == 3, dp, 1)
    g_ways = ways * np.where(z >= 2, dp, 1)
    o_ways = ways * np.where(z >= 1, dp, 1)
    per_param = x["bytes_per_param"] / w_ways + x["bytes_per_param"] / g_ways
    per_param = per_param + x["state_bytes"] / o_ways
    end = x["end_params"] / A["tp"][a]
    act = t.act_bytes[A["inner"][a].astype(np.int64), j, sp, rc]
    gathers = (ways > 1) | ((z == 3) & (dp > 1))
    buffers = np.where(gathers, 2 * A["wbytes_block"][a], 0.0)
    logits = t.logits_bytes[A["inner"][a].astype(np.int64), j]
    first_params = A["k_first"][a] * A["params_block"][a] + end * np.where(
        pp == 1, x["tables_one_stage"], 1
    )
    first = first_params * per_param + A["k_first"][a] * act * held_first + buffers
    first = first + np.where(pp == 1, logits, 0.0)
    last_params = A["k_last"][a] * A["params_block"][a] + end
    last = last_params * per_param + A["k_last"][a] * act + buffers + logits
    return np.where(pp == 1, first, np.maximum(first, last))


def _stage(P: dict[str, Any], k: Any, ends: Any, gathers: tuple[Any, Any]) -> tuple[Any, Any]:
    """(forward, backward) seconds of a stage of k blocks (with the ends where `ends`), one
    microbatch: per phase compute + critical + max(0, overlapped + gathers - compute)."""
    out = []
    for phase, g in zip(("fwd", "bwd"), gathers, strict=True):
        e = np.where(ends, 1.0, 0.0)
        c = k * P[f"{phase}_compute_s"] + e * P[f"ends_{phase}_compute_s"]
        crit = k * P[f"{phase}_crit_s"] + e * P[f"ends_{phase}_crit_s"]
        ov = k * (P[f"{phase}_ov_s"] + g) + e * P[f"ends_{phase}_ov_s"]
        out.append(c + crit + np.maximum(0.0, ov - c))
    return out[0], out[1]


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
    mid_sends = np.where(pp > 2, 2 * v, 2 * v - 1) * send
    first = _stage(P, A["k_first"][a], pp == 1, gathers)
    last = _stage(P, A["k_last"][a], np.ones_like(pp, dtype=bool), gathers)
    t_first = first[0] + first[1] + np.where(pp > 1, mid_sends, 0.0)
    t_last = last[0] + last[1] + (2 * v - 1) * send
    crit_last = (pp > 1) & (t_last > t_first)
    bwd_s = np.where(crit_last, last[1], first[1])
    t_stage = np.where(crit_last, t_last, t_first)
    k = np.where(crit_last, A["k_last"][a], A["k_first"][a])
    grad = k * A["grad_s"][a, z]
    exposed = np.where(dp > 1, np.maximum(A["bucket_s"][a], grad - bwd_s), 0.0)
    n = m + (pp - 1) / v
    bubble = (n - m) * t_stage
    predicted = n * t_stage + exposed + A["opt_s"][a, z]
    held = np.minimum(m, pp) * np.where((v > 1) & (pp > 1), 1 + (pp - 1) / (pp * v), 1.0)
    return {
        "m": m,
        "predicted_s": predicted,
        "bubble_s": bubble,
        "exposed_dp_s": exposed,
        "memory_per_device_bytes": _memory(t, r, held),
    }


def evaluate_chunk(chunk: Chunk) -> dict[str, np.ndarray]:
    """Every layout of the chunk: its knobs and its step time, bubble and memory (arrays)."""
    t = replace(
        chunk.tables,
        assign=price_assignments(chunk.tables, chunk.workload, chunk.chip, list(chunk.assignments)),
    )
    rows = layouts(t)
    r = {k: rows[:, i] for i, k in enumerate(KNOBS)}
    out = _step(t, r)
    out["fits"] = out["memory_per_device_bytes"] <= t.capacity_bytes
    return {**r, **out, "a": r["a"] + chunk.start}
