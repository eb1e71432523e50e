"""`shardline search --phase training`: every layout of the registered strategies and the execution
knobs over a cluster, vectorized (`vector_eval`), its best re-ranked by the full plan engine.

1. Enumerate: for each chip and device count (D, D/2, ... `scales` of them), every assignment of
   degrees the plan search allows (`planning.search._assignments`: one per registered strategy,
   so a new strategy joins without edits here), times microbatch size, interleave, sequence
   parallelism, recompute and ZeRO stage.
2. Evaluate every layout with the vectorized model, in chunks (`shardline.executors.map_chunks`:
   here, on local processes or on a Dask cluster; the same answer on each).
3. Re-rank each group's fastest fitting layouts with the full engine (`evaluate_plan`): the
   answer (best, Pareto front) is the engine's, and the gap between the two models is reported.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip
from shardline.options import Execution
from shardline.planning.evaluate import Context, evaluate_plan
from shardline.planning.results import PlanResult
from shardline.planning.search import MAX_DEVICES, _assignments
from shardline.planning.search_answer import Group, answer, layout_of
from shardline.planning.vector_eval import Chunk, evaluate_chunk
from shardline.planning.vector_tables import build_tables
from shardline.strategies import Degrees, names
from shardline.workload import Workload

__all__ = [
    "RunOptions",
    "Group",
    "layout_of",
    "training_search",
    "engine_result",
    "CHUNK_ASSIGNMENTS",
]

CHUNK_ASSIGNMENTS = 24  # assignments of degrees per chunk (a few thousand layouts)
SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True)
class RunOptions:
    """How the chunks run (shardline.executors.map_chunks) and how much is re-ranked."""

    workers: int = 1
    executor: str = "local"
    scheduler: Any = None
    progress: Callable[[int, int], None] | None = None
    rerank: int = 12  # fastest fitting layouts per group re-evaluated by the full engine
    scales: int = 4  # device counts D, D/2, ..., D/2**(scales-1)
    fixed: tuple[tuple[str, int], ...] = ()  # degrees held fixed, e.g. (("tp", 8),)


def _check(workload: Workload, devices: int, tokens: float | None, run: RunOptions) -> None:
    if not isinstance(workload, Workload) or workload.model is None or not workload.training:
        raise InputError("the training search needs a --model transformer in --phase training")
    if isinstance(devices, bool) or not isinstance(devices, int) or not 1 <= devices <= MAX_DEVICES:
        raise InputError(f"devices must be an integer from 1 to {MAX_DEVICES:,}, got {devices!r}")
    if tokens is not None and not 0 < tokens < 1e30:
        raise InputError(f"tokens must be a positive number below 1e30, got {tokens!r}")
    if not isinstance(run.rerank, int) or not 1 <= run.rerank <= 1000:
        raise InputError(f"rerank must be an integer from 1 to 1000, got {run.rerank!r}")
    if not isinstance(run.scales, int) or not 1 <= run.scales <= 16:
        raise InputError(f"scales must be an integer from 1 to 16, got {run.scales!r}")
    known = names()
    for name, degree in run.fixed:
        if name not in known:
            raise InputError(f"--fix: unknown strategy {name!r}; known: {', '.join(known)}")
        if isinstance(degree, bool) or not isinstance(degree, int) or degree < 1:
            raise InputError(f"--fix {name}={degree!r}: a degree is a positive integer")


def _groups(
    workload: Workload, chips: Sequence[Chip], devices: int, run: RunOptions
) -> list[Group]:
    counts = [devices >> k for k in range(run.scales) if devices % (1 << k) == 0 and devices >> k]
    fixed = dict(run.fixed)
    out: list[Group] = []
    for chip in chips:
        found = {d: list(_assignments(workload, d, fixed, every=True)) for d in counts}
        every = [a for d in counts for a in found[d]]
        if not every:
            continue
        tables = build_tables(workload, chip, every, devices)
        out.extend(Group(chip, d, found[d], tables) for d in counts if found[d])
    if not out:
        raise InputError(
            f"no layout over {devices:,} devices: the batch ({workload.batch:,} sequences) and "
            "the model's tensor-parallel and layer counts (and any --fix) allow none; change "
            "--devices, --global-batch or --fix"
        )
    return out


def _evaluate(workload: Workload, groups: list[Group], run: RunOptions) -> int:
    from shardline.executors import map_chunks

    chunks: list[Chunk] = []
    owner: list[int] = []
    for g, group in enumerate(groups):
        for s in range(0, len(group.assignments), CHUNK_ASSIGNMENTS):
            part = tuple(group.assignments[s : s + CHUNK_ASSIGNMENTS])
            chunks.append(Chunk(group.tables, workload, group.chip, part, s))
            owner.append(g)
    results = map_chunks(
        evaluate_chunk, chunks, workers=run.workers, executor=run.executor,
        scheduler=run.scheduler, progress=run.progress,
    )  # fmt: skip
    for g, group in enumerate(groups):
        mine = [r for r, o in zip(results, owner, strict=True) if o == g]
        group.rows = {k: np.concatenate([r[k] for r in mine]) for k in mine[0]}
    return sum(len(g.rows["a"]) for g in groups if g.rows is not None)


def engine_result(
    workload: Workload, chip: Chip, layout: dict[str, Any], tokens: float | None
) -> PlanResult:
    """The full plan engine's answer for one layout (as `layout_of` writes it)."""
    ex = Execution(
        interleave=layout["interleave"], recompute=layout["recompute"],
        sequence_parallel=layout["sequence_parallel"], zero=layout["zero"], tokens=tokens,
        tp_overlap=layout["tp_overlap"],
    )  # fmt: skip
    ctx = Context(workload, chip, ex)
    return evaluate_plan(ctx, Degrees(layout["degrees"]), layout["microbatches"])


def _top(rows: dict[str, np.ndarray], k: int) -> np.ndarray:
    """The k fastest fitting layouts, one per (degrees, microbatches, interleave): the knobs
    that often tie (sequence parallelism, recompute, ZeRO stage, tp overlap) keep their fastest,
    then least memory, so that the re-ranked alternatives differ in shape."""
    fits = np.flatnonzero(rows["fits"])
    order = fits[np.lexsort((rows["memory_per_device_bytes"][fits], rows["predicted_s"][fits]))]
    shape = np.stack([rows["a"][order], rows["j"][order], rows["v"][order]], axis=1)
    _, first = np.unique(shape, axis=0, return_index=True)
    return order[np.sort(first)[:k]]


def _rerank(workload: Workload, group: Group, k: int, tokens: float | None) -> list[dict[str, Any]]:
    """The group's k fastest fitting layouts (vector model) with the engine's answers, sorted by
    the engine's predicted step (layouts the engine finds too large last)."""
    rows = group.rows
    assert rows is not None
    out: list[dict[str, Any]] = []
    for i in _top(rows, k):
        layout = layout_of(group, rows, int(i))
        res = engine_result(workload, group.chip, layout, tokens)
        out.append(
            {
                "layout": layout,
                "engine": res,
                "vector_predicted_s": float(rows["predicted_s"][i]),
                "vector_memory_bytes": float(rows["memory_per_device_bytes"][i]),
            }
        )
    out.sort(key=lambda e: (not e["engine"].fits, e["engine"].predicted_s))
    return out


def training_search(
    workload: Workload,
    hw: Sequence[str | Chip],
    devices: int,
    *,
    tokens: float | None = None,
    run: RunOptions | None = None,
) -> dict[str, Any]:
    """Search every layout (module docstring); the JSON-ready answer (`search_answer`)."""
    run = run or RunOptions()
    _check(workload, devices, tokens, run)
    chips = [resolve_chip(h) for h in hw]
    start, cpu = time.perf_counter(), time.process_time()
    groups = _groups(workload, chips, devices, run)
    evaluated = _evaluate(workload, groups, run)
    stats = {
        "evaluated": evaluated,
        "vector_s": time.perf_counter() - start,
        "vector_cpu_s": time.process_time() - cpu,
        "devices": devices,
    }
    ranked = [_rerank(workload, g, run.rerank, tokens) for g in groups]
    stats["elapsed_s"] = time.perf_counter() - start
    return answer(workload, groups, ranked, tokens, stats)
