"""Terminal summaries of the plots (`shardline plot batch|strategies`): text only, no plotting."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from shardline.basics.units import fmt_int, fmt_rate, fmt_time

if TYPE_CHECKING:
    import numpy as np

    from shardline.answers.curves import BatchPlot
    from shardline.report.plots import StrategyBar
    from shardline.sharding.compare import Comparison

__all__ = ["batch_summary", "strategies_summary"]


def batch_summary(plot: BatchPlot, batch: np.ndarray, out: Path) -> str:
    """The terminal summary of `plot batch`: where each curve turns compute-bound."""
    lines = []
    for c in plot.curves:
        if c.critical_x is None:
            turn = "memory-bound at every batch (no batch reaches the ridge)"
        elif c.critical_x <= batch[-1]:
            turn = (
                f"compute-bound from B = {fmt_int(c.critical_x)} "
                f"(reaches the {fmt_rate(plot.flops_per_s)} peak)"
            )
        else:
            turn = (
                f"memory-bound up to B = {fmt_int(batch[-1])}; "
                f"compute-bound from B = {fmt_int(c.critical_x)}"
            )
        lines.append(
            f"{c.label}: {turn}; achieved {fmt_rate(c.y[0])} at B = {fmt_int(batch[0])}, "
            f"{fmt_rate(c.y[-1])} at B = {fmt_int(batch[-1])}"
        )
    lines.append(
        f"wrote {out}: {len(plot.curves)} curves of achieved {plot.compute_dtype} FLOP/s = "
        f"F / max(F/P, Q/W), P = {plot.flops_per_s:.3g} FLOP/s, W = {plot.mem_bytes_per_s:.3g} "
        f"B/s, exact bytes Q = s_x·B·D + s_w·D·F + s_y·B·F "
        f"({plot.dtypes['a']}, {plot.dtypes['b']}, {plot.dtypes['out']}), "
        f"B = {fmt_int(batch[0])}..{fmt_int(batch[-1])}"
    )
    return "\n".join(lines) + "\n"


def strategies_summary(bars: list[StrategyBar], comparison: Comparison, out: Path) -> str:
    """The terminal summary of `plot strategies`: the fastest strategy and the rest."""
    best = bars[0]
    lines = [
        f"fastest: {best.label}, {best.bound}-bound, {fmt_time(best.t_lower_s)} "
        f"(compute {fmt_time(best.t_compute_s)}, memory {fmt_time(best.t_memory_s)}, "
        f"network {fmt_time(best.t_network_s)})"
    ]
    for b in bars[1:]:
        lines.append(f"  {b.label}: {b.bound}-bound, {fmt_time(b.t_lower_s)}")
    lines.append(
        f"wrote {out}: {len(bars)} of {len(comparison.strategies)} strategies, compute / "
        "memory / network time per device each"
    )
    return "\n".join(lines) + "\n"
