"""Which layouts of one chip the training search times in full, and why the rest cannot win.

Every layout is enumerated and its memory per device computed (no probe, no network needed).
Then, exactly:
1. **Memory.** The engine probes (`probe_blocks`) run only for the (inner degrees, microbatch
   size, sequence parallelism, recompute) that some layout fitting in memory uses; a layout
   that does not fit and shares none of them is counted, with its memory, but not timed.
2. **Bound.** With every assignment's own collectives (FSDP and ZeRO-3 gathers, pipeline sends,
   data-parallel gradients) at zero, the vectorized step is a lower bound of its step (each
   part only grows with them; the exposed gradient traffic is dropped). Per device count the
   assignments are priced in the order of their best bound: the first chunk gives the time of
   the `rerank`-th fastest distinct (degrees, microbatches, interleave) that fits, U; an
   assignment whose every fitting layout has a bound above U cannot reach the re-ranked set,
   so its collectives are never priced (its layouts keep the bound, flagged `bound`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardline.hardware import Chip
from shardline.planning.vector_assign import TRAFFIC_KEYS, assignment_shapes
from shardline.planning.vector_eval import Chunk, columns, layouts, memory_of, price_chunk, step_of
from shardline.planning.vector_tables import Tables, build_tables, probe_blocks
from shardline.strategies import Degrees
from shardline.workload import Workload

__all__ = ["ChipSpace", "prepare", "pilot", "candidates", "finish"]


@dataclass
class ChipSpace:
    """One chip's layouts over every device count searched: the tables, the layouts (`KNOBS`,
    `a` the index into `every`), their memory, step, bound and which assignments are priced."""

    tables: Tables
    chip: Chip
    every: list[Degrees]
    starts: list[int]  # first assignment of each device count in `every` (and the end)
    r: dict[str, np.ndarray]
    out: dict[str, np.ndarray] = field(default_factory=dict)
    priced: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=bool))
    probes: int = 0


def prepare(w: Workload, chip: Chip, found: list[list[Degrees]], devices: int) -> ChipSpace:
    """Enumerate, size, probe what fits, and bound every layout (module docstring, 1)."""
    every = [d for part in found for d in part]
    starts = list(np.cumsum([0] + [len(p) for p in found]))
    t = build_tables(w, chip, every, devices)
    t.assign = assignment_shapes(t, w, chip, every)
    r = columns(layouts(t))
    memory = memory_of(t, r)
    fits = memory <= t.capacity_bytes
    inner = t.assign["inner"].astype(np.int64)[r["a"]]
    needed = np.zeros((len(t.inner_keys), len(t.seq_b), 2, 3), dtype=bool)
    needed[inner[fits], r["j"][fits], r["sp"][fits], r["rc"][fits]] = True
    space = ChipSpace(t, chip, every, [int(s) for s in starts], r)
    space.probes = probe_blocks(t, w, chip, needed)
    timed = needed[inner, r["j"], r["sp"], r["rc"]]
    n = len(memory)
    space.out = {
        "memory_per_device_bytes": memory,
        "fits": fits,
        "m": t.batch / (t.assign["replicas"][r["a"]] * t.seq_b[r["j"]]),
        "predicted_s": np.full(n, np.inf),
        "lower_s": np.full(n, np.inf),
        "bubble_s": np.full(n, np.nan),
        "exposed_dp_s": np.full(n, np.nan),
        "bound": np.zeros(n, dtype=bool),
    }
    _time(space, np.flatnonzero(timed))
    space.priced = np.zeros(len(every), dtype=bool)
    return space


def _time(space: ChipSpace, rows: np.ndarray) -> None:
    """Evaluate these rows with the tables as they are now."""
    if not len(rows):
        return
    got = step_of(space.tables, {k: v[rows] for k, v in space.r.items()})
    for k in ("predicted_s", "lower_s", "bubble_s", "exposed_dp_s"):
        space.out[k][rows] = got[k]


def _rows_of(space: ChipSpace, assignments: np.ndarray) -> np.ndarray:
    """The rows of these assignments (the rows are ordered by assignment)."""
    a = space.r["a"]
    lo = np.searchsorted(a, assignments, side="left")
    hi = np.searchsorted(a, assignments, side="right")
    parts = [np.arange(x, y) for x, y in zip(lo, hi, strict=True)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)


def _fill(space: ChipSpace, assignments: np.ndarray, traffic: dict[str, np.ndarray]) -> None:
    for k in TRAFFIC_KEYS:
        space.tables.assign[k][assignments] = traffic[k]
    space.priced[assignments] = True
    _time(space, _rows_of(space, assignments))


def _order(space: ChipSpace, g: int) -> np.ndarray:
    """Device count g's assignments (indices into `every`) that have a fitting layout, by their
    best lower bound; and the bounds."""
    lo, hi = space.starts[g], space.starts[g + 1]
    best = np.full(hi - lo, np.inf)
    a, o = space.r["a"], space.out
    sel = np.flatnonzero(o["fits"] & (a >= lo) & (a < hi))
    np.minimum.at(best, a[sel] - lo, o["lower_s"][sel])
    keep = np.flatnonzero(np.isfinite(best))
    order = keep[np.argsort(best[keep], kind="stable")]
    return np.stack([order + lo, best[order]]) if len(order) else np.zeros((2, 0))


def pilot(space: ChipSpace, w: Workload, g: int, size: int) -> np.ndarray:
    """Price device count g's `size` assignments of best bound here; the rest, in bound order."""
    order = _order(space, g)
    first = order[0, :size].astype(np.int64)
    if len(first):
        chunk = Chunk(space.tables, w, space.chip, tuple(space.every[i] for i in first))
        _fill(space, first, price_chunk(chunk))
    return order[:, size:]


def threshold(space: ChipSpace, g: int, k: int) -> float:
    """U: the time of the k-th fastest distinct (assignment, b, V) that fits among device count
    g's priced layouts (infinite with fewer than k)."""
    lo, hi = space.starts[g], space.starts[g + 1]
    a, o = space.r["a"], space.out
    sel = np.flatnonzero(o["fits"] & (a >= lo) & (a < hi) & space.priced[a])
    order = sel[np.argsort(o["predicted_s"][sel], kind="stable")]
    shape = np.stack([a[order], space.r["j"][order], space.r["v"][order]], axis=1)
    _, first = np.unique(shape, axis=0, return_index=True)
    if len(first) < k:
        return float("inf")
    return float(o["predicted_s"][order[np.sort(first)[k - 1]]])


def candidates(rest: np.ndarray, bound_s: float) -> np.ndarray:
    """The assignments (of `pilot`'s rest) whose best bound does not exceed U."""
    return rest[0, rest[1] <= bound_s].astype(np.int64)


def finish(space: ChipSpace, priced: list[tuple[np.ndarray, dict[str, np.ndarray]]]) -> None:
    """Fill the priced chunks; every fitting layout left unpriced keeps its bound (`bound`)."""
    for assignments, traffic in priced:
        _fill(space, assignments, traffic)
    o, a = space.out, space.r["a"]
    left = ~space.priced[a] & np.isfinite(o["lower_s"])
    o["bound"] = left & o["fits"]
    o["predicted_s"] = np.where(left, np.where(o["fits"], o["lower_s"], np.inf), o["predicted_s"])
    o["bubble_s"] = np.where(left, np.nan, o["bubble_s"])
    o["exposed_dp_s"] = np.where(left, np.nan, o["exposed_dp_s"])


def group_rows(space: ChipSpace, g: int) -> dict[str, np.ndarray]:
    """Device count g's rows, `a` counted from its first assignment."""
    lo, hi = space.starts[g], space.starts[g + 1]
    a = space.r["a"]
    s, e = np.searchsorted(a, lo), np.searchsorted(a, hi)
    rows = {k: v[s:e] for k, v in space.r.items()}
    rows["a"] = rows["a"] - lo
    return {**rows, **{k: v[s:e] for k, v in space.out.items()}}


def counts(space: ChipSpace) -> dict[str, Any]:
    o = space.out
    return {
        "layouts": len(o["fits"]),
        "fit": int(o["fits"].sum()),
        "timed": int((space.priced[space.r["a"]] & np.isfinite(o["predicted_s"])).sum()),
        "bounded": int(o["bound"].sum()),
        "assignments": len(space.every),
        "assignments_priced": int(space.priced.sum()),
        "probes": space.probes,
    }
