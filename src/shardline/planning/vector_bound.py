"""Which layouts of one chip the training search times in full, and the proof that the rest
cannot change its answer (the best, the re-ranked set, the Pareto front).

Every layout is enumerated and its memory per device computed (no probe, no network needed).
Then, per device count, two lower bounds of the vectorized step, each exact:

1. **Einsums and critical communication.** A probed block phase is its einsums' realistic time
   plus communication, memory-bound ops and recompute, never less; so `(m + (P - 1)/V) x
   (forward + backward einsums of the stage of most, + forward again under full recompute) +
   optimizer` bounds the step from below without a probe (`einsum_floor`: the engine's own
   einsum costs). A stage's einsums: its k blocks times the block's, plus, where the first
   blocks are dense, its dense blocks times the einsums they share with the block; a pipeline
   that cuts the blocks holds the same share of them on every stage. Before a block is probed
   its layers' critical communication (`critical_comm_s`: the all-to-alls of ep, tp's
   collectives without overlap, cp's ring) is added for the same stage's k blocks, inside the
   same product (the expert layers' all-to-alls first, tp's collectives last): the layouts
   still at most U are probed. The layers' parts it prices for tp are the probe's own
   (cached), and it spares the probes of the many blocks whose communication alone puts them
   above U.
2. **No own collectives.** With a probe but the assignment's FSDP and ZeRO-3 gathers, pipeline
   sends and gradient traffic at zero, `(m + (P - 1)/V) t_stage + optimizer` bounds it again
   (every part only grows with them; the exposed gradient traffic is dropped).

The assignments whose best fitting bound is lowest are priced first (a chunk); U is then the
time of the `rerank`-th fastest distinct (degrees, b, V) that fits among those priced. Probes run
only for the fitting layouts whose first bound (with the communication) is at most U,
collectives are priced only for the assignments whose second bound is at most U (in rounds, U
falling as they come in). A layout above U cannot enter the re-ranked set; it keeps its bound
(`bound`). A layout that does not fit is counted with its memory, and timed only where its
assignment is priced and its block probed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardline.basics.options import RECOMPUTE_MODES, Execution
from shardline.hardware import Chip
from shardline.planning.vector_assign import TRAFFIC_KEYS, assignment_shapes
from shardline.planning.vector_eval import Chunk, layouts, memory_of, price_chunk, step_of
from shardline.planning.vector_floors import critical_comm_s, pair_floor, pair_floors
from shardline.planning.vector_stages import floor_pieces
from shardline.planning.vector_tables import (
    Tables,
    build_tables,
    contexts,
    empty_probes,
    probe_blocks,
)
from shardline.strategies import Degrees
from shardline.workload.moe import EXPERT_AXIS
from shardline.workload.workload import Workload

__all__ = [
    "ChipSpace",
    "prepare",
    "search_group",
    "finish",
    "group_rows",
    "counts",
    "exhaustive",
]

Pricer = Callable[["ChipSpace", np.ndarray], None]
PILOT = 24  # assignments priced first, here, to set U (each needs its blocks probed)


@dataclass
class ChipSpace:
    """One chip's layouts over every device count searched: the tables, the layouts (`KNOBS`,
    `a` the index into `every`, ordered by it), their memory, bounds and steps."""

    tables: Tables
    chip: Chip
    every: list[Degrees]
    starts: list[int]  # first assignment of each device count in `every` (and the end)
    r: dict[str, np.ndarray]
    ctx: dict[Any, Any]
    out: dict[str, np.ndarray] = field(default_factory=dict)
    priced: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    probes: int = 0
    row_start: np.ndarray = field(default_factory=lambda: np.zeros(1, dtype=np.int64))
    # per row: the blocks of the block on the stage its first bound prices (`_floor`)
    floor_k: np.ndarray = field(default_factory=lambda: np.zeros(0))


def prepare(
    w: Workload,
    chip: Chip,
    found: list[list[Degrees]],
    devices: int,
    recomputes: tuple[str, ...] = RECOMPUTE_MODES,
    base: Execution | None = None,
) -> ChipSpace:
    """Enumerate, size and give every fitting layout its first bound (the recompute policies
    `recomputes`: Megatron's three, or one that --recompute pins)."""
    every = [d for part in found for d in part]
    starts = [int(s) for s in np.cumsum([0] + [len(p) for p in found])]
    t = build_tables(w, chip, every, devices, recomputes, base)
    t.assign = assignment_shapes(t, w, chip, every)
    empty_probes(t)
    r = layouts(t)
    memory = memory_of(t, r)
    fits = memory <= t.capacity_bytes
    space = ChipSpace(t, chip, every, starts, r, contexts(w, chip, recomputes, t.base))
    space.row_start = np.searchsorted(r["a"], np.arange(len(every) + 1, dtype=r["a"].dtype))
    space.priced = np.zeros(len(every), dtype=bool)
    A, n = t.assign, len(memory)
    m = t.batch / (A["replicas"][r["a"]] * t.seq_b[r["j"]])
    space.out = {
        "memory_per_device_bytes": memory,
        "fits": fits,
        "m": m,
        "floor_s": np.full(n, np.inf),
        "lower_s": np.full(n, np.inf),
        "predicted_s": np.full(n, np.inf),
        "bubble_s": np.full(n, np.nan),
        "exposed_dp_s": np.full(n, np.nan),
        "bound": np.zeros(n, dtype=bool),
    }
    _floor(space, w, fits, m)
    return space


def _floor(space: ChipSpace, w: Workload, fits: np.ndarray, m: np.ndarray) -> None:
    """The first bound of the fitting rows: `(m + (P - 1)/V)` x the einsum floor of the stage
    of most (its counts of `floor_pieces` times their floors) + the least optimizer step; that
    stage's blocks of the block kept (`floor_k`) for its communication (`_with_comm`)."""
    t, r = space.tables, space.r
    A = t.assign
    inner = A["inner"].astype(np.int64)[r["a"]]
    pairs = np.zeros((len(t.inner_keys), len(t.seq_b)), dtype=bool)
    pairs[inner[fits], r["j"][fits]] = True
    pieces = floor_pieces(w)
    fwd, bwd = (np.full((*pairs.shape, len(pieces)), np.inf) for _ in range(2))
    probe_ctx = space.ctx[(0, 0, 0)]
    pair_floors(t, probe_ctx, list(zip(*np.nonzero(pairs), strict=True)), pieces)
    for i, j in zip(*np.nonzero(pairs), strict=True):
        for p, layers in enumerate(pieces):
            fwd[i, j, p], bwd[i, j, p] = pair_floor(t, probe_ctx, int(i), int(j), layers)
    f = np.flatnonzero(fits)
    a, rc = r["a"][f], r["rc"][f]
    pp = A["pp"][a]
    again = np.array([2.0 if name == "full" else 1.0 for name in t.recomputes])  # full: fwd twice
    block = fwd[inner[f], r["j"][f]] * again[rc][:, None] + bwd[inner[f], r["j"][f]]
    each = np.einsum("rcp,rp->rc", A["floor_k"][a], block)
    most = np.argmax(each, axis=1)
    sched = m[f] + (pp - 1) / r["v"][f]
    space.out["floor_s"][f] = sched * each[np.arange(len(f)), most] + A["opt_s"][a, r["z"][f]]
    space.floor_k = np.zeros(len(m))
    space.floor_k[f] = A["floor_k"][a, most, 0]


def _span(space: ChipSpace, g: int) -> tuple[int, int]:
    """Device count g's rows (a slice: the rows are ordered by assignment)."""
    return int(space.row_start[space.starts[g]]), int(space.row_start[space.starts[g + 1]])


def _rows_of(space: ChipSpace, assignments: np.ndarray) -> np.ndarray:
    lo, hi = space.row_start[assignments], space.row_start[assignments + 1]
    parts = [np.arange(x, y) for x, y in zip(lo, hi, strict=True)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _probed(space: ChipSpace, rows: np.ndarray) -> np.ndarray:
    """Which of these rows have their block probed."""
    r, t = space.r, space.tables
    inner = t.assign["inner"].astype(np.int64)[r["a"][rows]]
    at = (inner, r["j"][rows], r["sp"][rows], r["rc"][rows], r["ov"][rows])
    return np.isfinite(t.probed["ends_fwd_compute_s"][at])


def _probe_and_time(space: ChipSpace, rows: np.ndarray) -> None:
    """Probe the blocks these rows use, then give them their step (or second bound)."""
    r, t = space.r, space.tables
    inner = t.assign["inner"].astype(np.int64)[r["a"][rows]]
    needed = np.zeros((len(t.inner_keys), len(t.seq_b), 2, len(t.recomputes)), dtype=bool)
    needed[inner, r["j"][rows], r["sp"][rows], r["rc"][rows]] = True
    space.probes += probe_blocks(t, space.ctx, needed)
    _time(space, rows[_probed(space, rows)])


def _time(space: ChipSpace, rows: np.ndarray) -> None:
    if not len(rows):
        return
    got = step_of(space.tables, {k: v[rows] for k, v in space.r.items()})
    for k in ("predicted_s", "lower_s", "bubble_s", "exposed_dp_s"):
        space.out[k][rows] = got[k]


def fill(space: ChipSpace, assignments: np.ndarray, traffic: dict[str, np.ndarray]) -> None:
    """An assignment's priced collectives: its probed fitting rows get their step."""
    for k in TRAFFIC_KEYS:
        space.tables.assign[k][assignments] = traffic[k]
    space.priced[assignments] = True
    rows = _rows_of(space, assignments)
    rows = rows[space.out["fits"][rows]]
    _time(space, rows[_probed(space, rows)])


def _by_bound(space: ChipSpace, g: int, key: str) -> tuple[np.ndarray, np.ndarray]:
    """Device count g's unpriced assignments with a fitting layout, by their best fitting `key`
    bound (lowest first), and those bounds."""
    lo, hi = _span(space, g)
    o, a = space.out, space.r["a"]
    sel = np.flatnonzero(o["fits"][lo:hi]) + lo
    if not len(sel):
        return np.zeros(0, dtype=np.int64), np.zeros(0)
    owners = a[sel]
    starts = np.flatnonzero(np.r_[True, owners[1:] != owners[:-1]])
    best = np.minimum.reduceat(o[key][sel], starts)
    who = owners[starts].astype(np.int64)
    keep = ~space.priced[who] & np.isfinite(best)
    order = np.argsort(best[keep], kind="stable")
    return who[keep][order], best[keep][order]


def threshold(space: ChipSpace, rows: np.ndarray, k: int) -> tuple[float, np.ndarray]:
    """U: the step of the k-th fastest distinct (assignment, b, V) among these (priced,
    fitting) rows (infinite with fewer than k); and the rows at most U (U only falls, so the
    others never count again)."""
    o, r = space.out, space.r
    rows = rows[np.isfinite(o["predicted_s"][rows])]
    order = rows[np.argsort(o["predicted_s"][rows], kind="stable")]
    shape = np.stack([r["a"][order], r["j"][order], r["v"][order]], axis=1)
    _, first = np.unique(shape, axis=0, return_index=True)
    if len(first) < k:
        return float("inf"), rows
    limit = float(o["predicted_s"][order[np.sort(first)[k - 1]]])
    return limit, rows[o["predicted_s"][rows] <= limit]


# the comm floor is held this much under its sum: the probed block's critical seconds are a
# difference of two stages' sums (float rounding, ~1e-16 relative), never a true ceiling
COMM_SLACK = 1e-9


def _with_comm(space: ChipSpace, w: Workload, rows: np.ndarray, limit: float) -> np.ndarray:
    """The rows (their first bound at most `limit`) whose first bound with their block's
    critical communication added (`critical_comm_s`, times the same (m + (P - 1)/V) k) stays at
    most `limit`; their `floor_s` raised to it. In three disjoint parts, each for the rows the
    ones before leave: the expert layers' terms but tp's (ep's all-to-alls rule most rows out),
    the other layers' terms but tp's, then tp's of every layer (its collectives priced last)."""
    r, o, A = space.r, space.out, space.tables.assign
    experts = tuple(x for x in w.layers if x.axis_dims(EXPERT_AXIS))
    others = tuple(x for x in w.layers if not x.axis_dims(EXPERT_AXIS))
    for part, (tp, layers) in enumerate(((False, experts), (False, others), (True, w.layers))):
        if not len(rows) or not layers:
            continue
        keys = _probe_keys(space, rows)
        unique, where = np.unique(keys, return_inverse=True)
        shape = space.tables.probed["ends_fwd_compute_s"].shape
        seconds = np.array(
            [_comm_s(space, (part, tp, layers), np.unravel_index(k, shape)) for k in unique]
        )
        rerun = _rerun_comm_s(space, (part, tp, layers), rows, (keys, unique, where))
        a = r["a"][rows]
        k = space.floor_k[rows]
        sched = o["m"][rows] + (A["pp"][a] - 1) / r["v"][rows]
        o["floor_s"][rows] += sched * k * (seconds[where.ravel()] + rerun) * (1 - COMM_SLACK)
        rows = rows[o["floor_s"][rows] <= limit]
    return rows


def _rerun_comm_s(
    space: ChipSpace, which: tuple[int, bool, Any], rows: np.ndarray, keyed: tuple[Any, ...]
) -> np.ndarray | float:
    """The critical forward terms of a part that a full recompute runs again in the backward
    (`stage_extras._rerun_terms`), per row: 0 but on the rows under "full" (`keyed`: their
    probe keys, the distinct ones and where each row's is, as `_with_comm` has them)."""
    recomputes = space.tables.recomputes
    if "full" not in recomputes:
        return 0.0
    full = space.r["rc"][rows] == recomputes.index("full")
    if not full.any():
        return 0.0
    keys, unique, where = keyed
    shape = space.tables.probed["ends_fwd_compute_s"].shape
    used = np.isin(unique, keys[full])
    again = np.array(
        [
            _comm_s(space, which, np.unravel_index(k, shape), True) if u else 0.0
            for k, u in zip(unique, used, strict=True)
        ]
    )
    return again[where.ravel()] * full


def _probe_keys(space: ChipSpace, rows: np.ndarray) -> np.ndarray:
    """Each row's (inner, b, sp, recompute, overlap) as one flat index into `Tables.probed`."""
    r, t = space.r, space.tables
    inner = t.assign["inner"].astype(np.int64)[r["a"][rows]]
    at = (inner, r["j"][rows], r["sp"][rows], r["rc"][rows], r["ov"][rows])
    return np.ravel_multi_index(at, t.probed["ends_fwd_compute_s"].shape)


def _comm_s(
    space: ChipSpace, which: tuple[int, bool, Any], key: tuple[Any, ...], rerun: bool = False
) -> float:
    """`critical_comm_s` of one (inner, b, sp, recompute, overlap) and one part (`which`: its
    index, tp's terms or the others', the layers), once per search. What it reads of the
    execution: tp's terms run as sequence parallelism and overlap have them (overlap as
    `block_times` derives it, from the context without); the other strategies' as the knobs the
    search does not try have them (`tp_variants`: ep overlap, interleave), the same in every
    probe context; recompute in neither (`rerun`: the forward terms a full recompute runs
    again, `critical_comm_s`)."""
    part, tp, layers = which
    i, j, sp, _, ov = (int(x) for x in key)
    short = (part, i, j, sp, ov) if tp else (part, i, j)
    memo = space.tables.comm_floors
    found = memo.get(short)
    if found is None:  # the total and its rerun share one pass
        t = space.tables
        inner = dict(zip(t.names, t.inner_keys[i], strict=True))
        ctx = space.ctx[(sp if tp else 0, 0, 0)]
        b = int(t.seq_b[j])
        found = memo[short] = critical_comm_s(ctx, inner, b, bool(ov), tp, layers)
    return found[1] if rerun else found[0]


def _fitting(space: ChipSpace, assignments: np.ndarray) -> np.ndarray:
    rows = _rows_of(space, assignments)
    return rows[space.out["fits"][rows]]


def search_group(space: ChipSpace, w: Workload, g: int, k: int, rounds: tuple[int, Pricer]) -> None:
    """Device count g: the pilot (`PILOT` assignments of lowest einsum bound), the probes under
    U, then the pricing rounds (module docstring). `rounds` = (assignments per round, the
    function that prices and `fill`s)."""
    size, price = rounds
    first = _by_bound(space, g, "floor_s")[0][:PILOT]
    lo, hi = _span(space, g)
    fits = np.flatnonzero(space.out["fits"][lo:hi]) + lo
    done = _fitting(space, first)
    _probe_and_time(space, done)
    if len(first):
        chunk = Chunk(space.tables, w, space.chip, tuple(space.every[i] for i in first))
        fill(space, first, price_chunk(chunk))
    limit, done = threshold(space, done, k)
    near = fits[space.out["floor_s"][fits] <= limit]
    _probe_and_time(space, _with_comm(space, w, near, limit))
    todo, bound = _by_bound(space, g, "lower_s")
    cut = np.searchsorted(bound, limit, side="right")
    todo, bound = todo[:cut], bound[:cut]
    while len(todo):
        price(space, todo[:size])
        done = np.concatenate([done, _fitting(space, todo[:size])])
        limit, done = threshold(space, done, k)
        todo, bound = todo[size:], bound[size:]
        cut = np.searchsorted(bound, limit, side="right")
        todo, bound = todo[:cut], bound[:cut]


def finish(space: ChipSpace) -> None:
    """Priced assignments: every probed row timed (fitting or not); every other fitting row
    keeps its best bound, flagged `bound`; the rest stay untimed (infinite)."""
    o, a = space.out, space.r["a"]
    rows = np.flatnonzero(space.priced[a])
    _time(space, rows[_probed(space, rows)])
    done = space.priced[a] & np.isfinite(o["predicted_s"])
    o["bound"] = o["fits"] & ~done
    best_bound = np.where(
        np.isfinite(o["lower_s"]), np.maximum(o["lower_s"], o["floor_s"]), o["floor_s"]
    )
    o["predicted_s"] = np.where(o["bound"], best_bound, np.where(done, o["predicted_s"], np.inf))


def group_rows(space: ChipSpace, g: int) -> dict[str, np.ndarray]:
    """Device count g's rows, `a` counted from its first assignment."""
    lo, hi = _span(space, g)
    rows = {k: v[lo:hi] for k, v in space.r.items()}
    rows["a"] = rows["a"] - space.starts[g]
    return {**rows, **{k: v[lo:hi] for k, v in space.out.items()}}


def counts(space: ChipSpace) -> dict[str, int]:
    """Layouts (each with its memory), those that fit, those timed in full, the fitting ones
    left with a bound above U; assignments and those whose collectives were priced; probes."""
    o = space.out
    timed = space.priced[space.r["a"]] & np.isfinite(o["predicted_s"]) & ~o["bound"]
    return {
        "layouts": len(o["fits"]),
        "fit_in_memory": int(o["fits"].sum()),
        "timed_in_full": int(timed.sum()),
        "bounded": int(o["bound"].sum()),
        "assignments": len(space.every),
        "assignments_priced": int(space.priced.sum()),
        "engine_probes": space.probes,
    }


def exhaustive(space: ChipSpace, w: Workload) -> None:
    """No bound: probe every layout's block and price every assignment (tests, and a check of
    the bounds: the re-ranked set comes out the same)."""
    rows = np.arange(len(space.out["fits"]))
    _probe_and_time(space, rows)
    every = np.arange(len(space.every))
    fill(space, every, price_chunk(Chunk(space.tables, w, space.chip, tuple(space.every))))
    finish(space)
