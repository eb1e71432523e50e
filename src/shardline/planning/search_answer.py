"""The training search's answer (JSON-ready, SI units): the count and rate, the Pareto front of
days to train against cost, the recommended layout, why the next-best lose, and how far the
vectorized model is from the full engine on the layouts both evaluated."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardline.basics.serialize import jsonable
from shardline.hardware import Chip
from shardline.planning.results import PlanResult
from shardline.planning.vector_tables import Tables
from shardline.strategies import Degrees
from shardline.workload.workload import Workload

__all__ = ["Group", "layout_of", "answer", "why_not"]

SECONDS_PER_DAY = 86400.0
SECONDS_PER_HOUR = 3600.0
JOULES_PER_MWH = 3.6e9
WHY_NOT = 4  # alternatives explained
PARTS = {
    "gemm_s": "slower matmuls (smaller or less efficient GEMMs per device)",
    "attention_s": "slower attention",
    "other_ops_s": "more memory-bound ops",
    "recompute_s": "recompute",
    "exposed_comm_s": "exposed communication",
    "bubble_s": "pipeline bubble",
    "optimizer_s": "optimizer step",
}


@dataclass
class Group:
    chip: Chip
    devices: int
    assignments: list[Degrees]
    tables: Tables
    rows: dict[str, np.ndarray] | None = None


def layout_of(group: Group, rows: dict[str, np.ndarray], i: int) -> dict[str, object]:
    """Row i as plan() keywords: degrees, microbatches and the Execution fields."""
    deg = group.assignments[int(rows["a"][i])]
    return {
        "degrees": deg.as_dict(),
        "microbatches": int(round(float(rows["m"][i]))),
        "interleave": int(rows["v"][i]),
        "sequence_parallel": bool(rows["sp"][i]),
        "recompute": group.tables.recomputes[int(rows["rc"][i])],
        "zero": int(rows["z"][i]),
        "tp_overlap": bool(rows["ov"][i]),
    }


def _cost(chip: Chip, devices: int, train_s: float, plan: PlanResult) -> dict[str, object]:
    """GPU-hours, and USD and MWh where shardline.costing is installed and prices the chip."""
    out: dict[str, Any] = {"gpu_hours": devices * train_s / SECONDS_PER_HOUR}
    try:
        from shardline.costing import board_power_w, busy_fraction, usd_per_hour
    except ImportError:
        out["cost_note"] = "USD and MWh need shardline.costing (not installed in this build)"
        return out
    from shardline.errors import InputError

    try:
        out["usd"] = out["gpu_hours"] * usd_per_hour(chip)
        power = board_power_w(chip, busy_fraction(plan))
        out["energy_mwh"] = devices * power * train_s / JOULES_PER_MWH
    except InputError as exc:
        out["cost_note"] = str(exc)
    return out


def _layout(entry: dict[str, Any], group: Any, w: Workload, tokens: float | None) -> dict[str, Any]:
    res: PlanResult = entry["engine"]
    step_tokens = w.batch * w.tokens_per_item
    out = {
        "hardware": group.chip.name,
        "devices": group.devices,
        **entry["layout"],
        "microbatch_size": res.microbatch_size,
        "predicted_step_s": res.predicted_s,
        "mfu": res.mfu,
        "memory_per_device_bytes": res.memory_per_device_bytes,
        "fits": res.fits,
        "tokens_per_s": step_tokens / res.predicted_s,
        "predicted_breakdown_s": res.predicted_breakdown_s,
    }
    if tokens is not None:
        train_s = tokens / step_tokens * res.predicted_s
        out["days_to_train"] = train_s / SECONDS_PER_DAY
        out.update(_cost(group.chip, group.devices, train_s, res))
    return out


def why_not(best: dict[str, Any], other: dict[str, Any]) -> str:
    """One line: which part of the step the alternative loses on."""
    if not other["fits"]:
        return (
            f"needs {other['memory_per_device_bytes'] / 1e9:.1f} GB per device, more than the "
            "chip holds"
        )
    a, b = best["predicted_breakdown_s"], other["predicted_breakdown_s"]
    worse = {k: b.get(k, 0.0) - a.get(k, 0.0) for k in PARTS}
    part = max(worse, key=lambda k: worse[k])
    slower = other["predicted_step_s"] - best["predicted_step_s"]
    return f"{slower:+.3f} s per step, mostly {PARTS[part]} ({worse[part]:+.3f} s)"


Engine = Callable[[Workload, Chip, dict[str, object], "float | None"], PlanResult]


def _memory_losers(
    w: Workload, group: Any, best: dict[str, Any], screen_s: float, run: tuple[Engine, Any]
) -> list[dict[str, object]]:
    """The fastest layouts that would beat the best on the screening model (`screen_s`: the
    best's step there) but do not fit, each with the plan engine's answer (`run` = the engine,
    the tokens to train)."""
    engine, tokens = run
    rows = group.rows
    over = np.flatnonzero(~rows["fits"] & (rows["predicted_s"] < screen_s))
    out = []
    for i in over[np.argsort(rows["predicted_s"][over])][:2]:
        layout = layout_of(group, rows, int(i))
        entry = {"layout": layout, "engine": engine(w, group.chip, layout, tokens)}
        lay = _layout(entry, group, w, tokens)
        out.append({**lay, "why": why_not(best, lay)})
    return out


def _agreement(ranked: list[list[dict[str, Any]]]) -> dict[str, Any]:
    """Relative gap of the vectorized model to the engine over every re-ranked layout."""
    priced = [e for g in ranked for e in g]
    t = [abs(e["vector_predicted_s"] / e["engine"].predicted_s - 1) for e in priced]
    m = [abs(e["vector_memory_bytes"] / e["engine"].memory_per_device_bytes - 1) for e in priced]
    if not t:
        return {}
    return {
        "layouts_compared": len(t),
        "step_time_rel_gap_median": float(np.median(t)),
        "step_time_rel_gap_max": float(np.max(t)),
        "memory_rel_gap_median": float(np.median(m)),
        "memory_rel_gap_max": float(np.max(m)),
    }


def _pareto(points: list[dict[str, object]]) -> list[dict[str, Any]]:
    """The points no other beats on both days (or step time) and cost (USD, else GPU-hours,
    else devices); fastest first."""
    time_key = "days_to_train" if all("days_to_train" in p for p in points) else "predicted_step_s"
    cost_key = next((k for k in ("usd", "gpu_hours") if all(k in p for p in points)), "devices")

    def beats(q: dict[str, object], p: dict[str, Any]) -> bool:
        no_worse = q[time_key] <= p[time_key] and q[cost_key] <= p[cost_key]
        better = q[time_key] < p[time_key] or q[cost_key] < p[cost_key]
        return q is not p and no_worse and better

    front = [p for p in points if not any(beats(q, p) for q in points)]
    return sorted(front, key=lambda p: p[time_key])


def _why_none(stats: dict[str, object], sequences: int) -> str:
    """Why the search has no best: no layout of the device counts exists at all (0 evaluated:
    no product of degrees that divide the model and the batch is the count), or none fits."""
    if stats["evaluated"]:
        return "no layout fits in memory; add devices or shrink --global-batch"
    return (
        f"no layout exists on {stats['devices']:,} devices (or the smaller counts tried): the "
        "degrees must multiply to the device count, each dividing what it splits (the heads, "
        f"the layers, the {sequences:,} sequences of a step); give a count with small factors, "
        "such as a power of two"
    )


def answer(
    w: Workload,
    groups: list[Any],
    ranked: list[list[dict[str, Any]]],
    run: tuple[Engine, float | None],
    stats: dict[str, Any],
) -> dict[str, Any]:
    """The JSON-ready answer; `run` = (the plan engine for one layout, the tokens to train)."""
    engine, tokens = run
    layouts = [[_layout(e, g, w, tokens) for e in r] for g, r in zip(groups, ranked, strict=True)]
    bests = [(g, ls[0]) for g, ls in zip(groups, layouts, strict=True) if ls and ls[0]["fits"]]
    full = [(g, b) for g, b in bests if g.devices == stats["devices"]] or bests
    out: dict[str, Any] = {
        "workload": {**w.identity(), "sequences_per_step": w.batch, "seq_len": w.tokens_per_item},
        "phase": "training",
        "evaluated": stats["evaluated"],
        # how far each layout was taken (planning.vector_bound): memory for all; the full step
        # for `timed_in_full`; a lower bound above the re-ranked set for `bounded`
        "search_counts": stats["counts"],
        "vector_s": stats["vector_s"],
        "vector_cpu_s": stats["vector_cpu_s"],  # this process's CPU (workers not counted)
        "elapsed_s": stats["elapsed_s"],
        "rate_layouts_per_s": stats["evaluated"] / stats["vector_s"],
        "tokens": tokens,
        "pareto": _pareto([b for _, b in bests]),
        "best": None,
        "alternatives": [],
        "agreement": _agreement(ranked),
    }
    if not full:
        out["why_none"] = _why_none(stats, w.batch)
        return jsonable(out)
    group, best = min(full, key=lambda gb: gb[1]["predicted_step_s"])
    out["best"] = best
    others = layouts[groups.index(group)][1 : 1 + WHY_NOT]
    out["alternatives"] = [{**o, "why": why_not(best, o)} for o in others]
    # the best's step on the screening model (the vectorized model's)
    screen_s = ranked[groups.index(group)][0]["vector_predicted_s"]
    out["alternatives"] += _memory_losers(w, group, best, screen_s, run)
    return jsonable(out)
