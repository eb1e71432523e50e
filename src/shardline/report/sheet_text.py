"""Terminal rendering of a sheet's roofline: the verdict first, then totals, then the rows."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from shardline.answers.sheet_model import SheetResult
from shardline.basics.units import fmt_bytes, fmt_flops, fmt_int, fmt_time

__all__ = ["render_sheet", "MAX_TEXT_ROWS"]

# Beyond this many rows the terminal shows the costliest ones; the output file has them all.
MAX_TEXT_ROWS = 40


def _pct(part: float, whole: float) -> str:
    return f"{100 * part / whole:.0f}%" if whole else "0%"


def _table(header: list[str], rows: list[list[str]], right: set[int]) -> list[str]:
    widths = [
        max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(header)
    ]

    def line(cells: list[str]) -> str:
        return (
            "  "
            + "  ".join(
                c.rjust(w) if i in right else c.ljust(w)
                for i, (c, w) in enumerate(zip(cells, widths, strict=True))
            ).rstrip()
        )

    return [line(header), *(line(r) for r in rows)]


def _verdict(result: SheetResult, source: str) -> list[str]:
    """The call (how many rows memory-bound, where the time goes) and the totals."""
    cols, summary, chip = result.columns, result.summary, result.chip
    totals: dict[str, Any] = summary["totals"]
    computed = summary["rows_computed"]
    out = [
        f"{source}: {summary['rows']:,} rows on {chip.display_name} ({chip.name}), "
        f"default dtype {summary['dtype']}"
    ]
    n_mem, n_comp = summary["rows_memory_bound"], summary["rows_compute_bound"]
    t_lower = totals.get("t_lower_s", 0.0)
    mem_time = summary["memory_bound_time_fraction"] * t_lower
    ridges = np.unique(cols["ridge_flop_per_byte"][result.ok]) if computed else np.array([])
    ridge = f"the ridge {ridges[0]:,.4g} FLOP/B" if len(ridges) == 1 else "their ridge"
    out.append(
        f"{n_mem:,} of {computed:,} rows MEMORY-BOUND (intensity below {ridge}), {n_comp:,} "
        f"COMPUTE-BOUND; the total time is {_pct(t_lower - mem_time, t_lower)} in compute-bound "
        f"rows, {_pct(mem_time, t_lower)} in memory-bound rows"
    )
    if computed:
        out.append(
            f"total over count: lower bound {fmt_time(t_lower)} (perfect overlap), upper bound "
            f"{fmt_time(totals['t_upper_s'])} (no overlap)"
            + (f", predicted {fmt_time(totals['predicted_s'])}" if "predicted_s" in totals else "")
        )
        out.append(
            f"  FLOPs {fmt_flops(totals['flops'])}, bytes {fmt_bytes(totals['bytes'])}, "
            f"t_compute {fmt_time(totals['t_compute_s'])}, "
            f"t_memory {fmt_time(totals['t_memory_s'])}"
        )
    if summary["rows_bad"]:
        out.append(f"  {summary['rows_bad']:,} rows not computed (see the error column)")
    return out


def _row_cells(result: SheetResult, i: int, labels: list[str], share: str) -> list[str]:
    """One row of the terminal table (a bad row: its cells as read and "error")."""
    table, cols = result.table, result.columns
    cells = [str(table.row_numbers[i]), labels[i]]
    if not result.ok[i]:
        cells += [str(table.columns[table.roles[r]][i]) for r in ("m", "k", "n")]
        cells += [fmt_int(table.count[i]), "", "error", "", ""]
        if result.has_prediction:
            cells.append("")
        return cells + [""]
    cells += [
        fmt_int(table.m[i]),
        fmt_int(table.k[i]),
        fmt_int(table.n[i]),
        fmt_int(table.count[i]),
        f"{cols['intensity_flop_per_byte'][i]:,.4g}",
        str(cols["bound"][i]),
        fmt_time(cols["t_lower_s"][i]),
        share,
    ]
    if result.has_prediction:
        cells.append(fmt_time(cols["predicted_s"][i]))
    crit = cols["critical_m"][i]
    return cells + ["none" if math.isnan(crit) else fmt_int(crit)]


def render_sheet(result: SheetResult, source: str) -> str:
    table, cols = result.table, result.columns
    t_lower = result.summary["totals"].get("t_lower_s", 0.0)
    out = _verdict(result, source)
    out.append("")
    labels = table.labels()
    weight = np.where(result.ok, table.count, 0) * np.nan_to_num(cols["t_lower_s"])
    order = np.arange(len(table))
    note = ""
    if len(table) > MAX_TEXT_ROWS:
        order = np.sort(np.argsort(-weight, kind="stable")[:MAX_TEXT_ROWS])
        note = (
            f"  ({len(table) - MAX_TEXT_ROWS:,} more rows; the {MAX_TEXT_ROWS} costliest "
            "(count x lower bound) are shown; -o writes them all)"
        )
    header = ["row", "name", "M", "K", "N", "count", "FLOP/B", "bound", "t_lower", "share"]
    if result.has_prediction:
        header.append("predicted")
    header.append("critical M")
    rows = [_row_cells(result, i, labels, _pct(weight[i], t_lower)) for i in order.tolist()]
    out += _table(header, rows, right={0, 2, 3, 4, 5, 6, 8, 9, 10, 11})
    if note:
        out.append(note)
    return "\n".join(out) + "\n"
