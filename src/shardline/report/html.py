"""`shardline report`: one self-contained, offline HTML page (no network, no CDN, no other file).

The page holds its data as JSON in a `<script type="application/json">` block and draws everything
with the inline script below (plain JavaScript and SVG written here): an interactive roofline with
every row as a named point, achieved FLOP/s versus M for the costliest shapes, the time breakdown,
and a sortable, filterable table. User text (names, headers, file names) reaches the page only as
JSON data written into the DOM with `textContent`, or through `html.escape`: never as markup.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardline.answers.curves import SheetCurve
from shardline.answers.sheet_model import SheetResult
from shardline.basics.units import fmt_bytes, fmt_flops, fmt_rate, fmt_time
from shardline.hardware import Chip
from shardline.io.tables import json_cell
from shardline.report.figures import Figure, figures_html
from shardline.report.html_page import PAGE, SCRIPT, STYLE
from shardline.report.plots import roofline_data

__all__ = ["ReportData", "report_from_sheet", "report_from_stack", "render_html", "json_for_script"]


@dataclass(frozen=True)
class ReportData:
    title: str
    subtitle: str
    chip: Chip
    columns: list[dict[str, str]]  # key, label, kind
    rows: list[list[object]]
    points: list[list[object]]  # [row index, intensity FLOP/B, attained FLOP/s, bound]
    summary: list[tuple[str, str]]
    roofs: list[dict[str, object]] = field(default_factory=list)
    curves: list[dict[str, object]] = field(default_factory=list)
    curve_peak_flops_per_s: float | None = None
    notes: list[str] = field(default_factory=list)
    figures: list[Figure] = field(default_factory=list)  # inline SVGs (shardline.report.figures)


def _clean(value: object) -> object:
    value = json_cell(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def json_for_script(payload: object) -> str:
    """JSON safe inside <script>: no '<', '>' or '&' can close the element or open a comment, and
    '/' is written '\\/' so that a URL in the user's text does not appear as one in the page."""
    text = json.dumps(payload, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return (
        text.replace("/", "\\/")
        .replace("<", "\\u003c")
        .replace(">", "\\u003e")
        .replace("&", "\\u0026")
        .replace("\u2028", "\\u2028")
        .replace("\u2029", "\\u2029")
    )


def _roofs(chip: Chip, dtypes: Sequence[str]) -> list[dict[str, object]]:
    plot = roofline_data(chip, levels=True, level_dtype=dtypes[0] if dtypes else None)
    used = set(dtypes)
    roofs = []
    for roof in plot.roofs:
        names = roof.label.split(" peak")[0].split("/")
        roofs.append(
            {
                "label": roof.label,
                "flops_per_s": roof.flops_per_s,
                "bytes_per_s": roof.bytes_per_s,
                "dash": roof.style != "-",
                "on": roof.style != "-" or bool(used & set(names)) or not used,
            }
        )
    return roofs


# The table of a sheet report: (key, label, kind) of the input columns, then of the results.
_SHEET_INPUTS: tuple[tuple[str, str, str], ...] = (
    ("row", "row", "int"),
    ("name", "name", "text"),
    ("M", "M", "int"),
    ("K", "K", "int"),
    ("N", "N", "int"),
    ("count", "count", "int"),
    ("dtype", "dtype", "text"),
)
_SHEET_RESULTS: tuple[tuple[str, str, str], ...] = (
    ("flops", "FLOPs", "flops"),
    ("bytes", "bytes", "bytes"),
    ("intensity_flop_per_byte", "FLOP/B", "float"),
    ("bound", "bound", "bound"),
    ("t_compute_s", "t_compute", "time"),
    ("t_memory_s", "t_memory", "time"),
    ("t_lower_s", "t_lower", "time"),
    ("t_upper_s", "t_upper", "time"),
)


def _sheet_result_keys(result: SheetResult) -> list[tuple[str, str, str]]:
    results = list(_SHEET_RESULTS)
    if result.has_prediction:
        results.append(("predicted_s", "predicted", "time"))
    results.append(("error", "error", "text"))
    return results


def _sheet_dtypes(result: SheetResult) -> list[str]:
    """Each row's dtype: its cell, else the sheet's default."""
    table, default = result.table, result.summary["dtype"]
    dtypes = table.dtype if table.dtype is not None else np.full(len(table), "", dtype=object)
    return [str(d) or default for d in dtypes.tolist()]


def _sheet_rows(result: SheetResult, results: Sequence[tuple[str, str, str]]) -> list[list[object]]:
    """A table row per sheet row: the inputs (as read where the row is bad), results or error."""
    table, cols = result.table, result.columns
    labels, dtypes = table.labels(), _sheet_dtypes(result)
    errors: dict[int, str] = {}
    for p in result.problems:
        errors[p.row] = (errors[p.row] + "; " if p.row in errors else "") + p.text()
    raw = {role: table.columns[table.roles[role]] for role in ("m", "k", "n")}
    rows: list[list[object]] = []
    for i in range(len(table)):
        ok = bool(result.ok[i])
        dims = (
            [int(table.m[i]), int(table.k[i]), int(table.n[i])]
            if ok
            else [_clean(raw[r][i]) for r in ("m", "k", "n")]
        )
        row = [int(table.row_numbers[i]), labels[i], *dims, int(table.count[i]), dtypes[i]]
        for key, _, _ in results:
            if key == "error":
                row.append(errors.get(int(table.row_numbers[i]), ""))
            else:
                row.append(_clean(cols[key][i]) if ok else None)
        rows.append(row)
    return rows


def _attained(result: SheetResult) -> np.ndarray:
    """Attainable FLOP/s of each row on the roofline: F / max(t_compute, t_memory)."""
    cols = result.columns
    attained: np.ndarray = cols["flops"] / np.where(result.ok, cols["t_lower_s"], 1.0)
    return attained


def _sheet_points(result: SheetResult) -> list[list[object]]:
    cols, attained = result.columns, _attained(result)
    return [
        [
            i,
            float(cols["intensity_flop_per_byte"][i]),
            float(attained[i]),
            str(cols["bound"][i]),
        ]
        for i in np.flatnonzero(result.ok).tolist()
    ]


def _sheet_curves(result: SheetResult, curves: Sequence[SheetCurve]) -> list[dict[str, object]]:
    """The curves as page data, each with (up to 20 of) the sheet's rows of its shape as marks."""
    table, attained, labels = result.table, _attained(result), result.table.labels()
    out: list[dict[str, object]] = []
    for c in curves:
        marks = [[int(table.m[j]), float(attained[j]), labels[j]] for j in c.members[:20]]
        out.append(
            {
                "label": f"K={c.k:,} N={c.n:,} {c.dtype}",
                "x": c.m.tolist(),
                "y": c.curve.y.tolist(),
                "marks": marks,
                "critical_m": None if c.curve.critical_x is None else int(c.curve.critical_x),
            }
        )
    return out


def _sheet_summary(result: SheetResult) -> list[tuple[str, str]]:
    summary, chip = result.summary, result.chip
    totals = summary["totals"]
    lines = [
        ("chip", f"{chip.display_name} ({chip.name})"),
        (
            "rows",
            f"{summary['rows']:,} ({summary['rows_computed']:,} computed, "
            f"{summary['rows_bad']:,} bad)",
        ),
        (
            "bound",
            f"{summary['rows_memory_bound']:,} memory-bound, "
            f"{summary['rows_compute_bound']:,} compute-bound; memory-bound rows take "
            f"{100 * summary['memory_bound_time_fraction']:.0f}% of the time",
        ),
    ]
    if totals:
        lines += [
            (
                "total time over count",
                f"{fmt_time(totals['t_lower_s'])} lower bound (overlap), "
                f"{fmt_time(totals['t_upper_s'])} upper bound",
            ),
            ("total FLOPs / bytes", f"{fmt_flops(totals['flops'])} / {fmt_bytes(totals['bytes'])}"),
        ]
        if "predicted_s" in totals:
            lines.append(("predicted", fmt_time(totals["predicted_s"])))
    lines.append(
        (
            "hardware",
            f"HBM {fmt_rate(summary['mem_bytes_per_s'], 'B/s', digits=4)}; "
            + ", ".join(f"{d} {fmt_rate(p)}" for d, p in chip.peak_flops_per_s.items()),
        )
    )
    return lines


def report_from_sheet(
    result: SheetResult, source: str, curves: Sequence[SheetCurve] = ()
) -> ReportData:
    """A sheet's results as report data: one point per computed row, and the achieved-FLOP/s
    curves the caller computed (`shardline.answers.curves.sheet_curves`)."""
    chip = result.chip
    results = _sheet_result_keys(result)
    default = result.summary["dtype"]
    used = sorted(set(_sheet_dtypes(result))) or [default]
    return ReportData(
        title=f"Roofline of {source}",
        subtitle=f"on {chip.display_name}",
        chip=chip,
        columns=[
            {"key": k, "label": lab, "kind": kind} for k, lab, kind in (*_SHEET_INPUTS, *results)
        ],
        rows=_sheet_rows(result, results),
        points=_sheet_points(result),
        summary=_sheet_summary(result),
        roofs=_roofs(chip, used),
        curves=_sheet_curves(result, curves),
        curve_peak_flops_per_s=None,
    )


_STACK_COLUMNS: tuple[tuple[str, str, str], ...] = (
    ("name", "layer", "text"),
    ("phase", "phase", "text"),
    ("spec", "einsum", "text"),
    ("dims", "dims", "text"),
    ("count", "count", "int"),
    ("flops", "FLOPs", "flops"),
    ("bytes", "bytes", "bytes"),
    ("intensity_flop_per_byte", "FLOP/B", "float"),
    ("bound", "bound", "bound"),
    ("t_compute_s", "t_compute", "time"),
    ("t_memory_s", "t_memory", "time"),
    ("t_lower_s", "t_lower", "time"),
    ("t_upper_s", "t_upper", "time"),
)


def _stack_row(layer: Any) -> list[object]:
    dims = ", ".join(f"{k}={v:,}" for k, v in layer.dims.items())
    return [
        layer.name,
        layer.phase,
        layer.spec,
        dims,
        layer.count,
        layer.flops,
        layer.bytes,
        _clean(layer.intensity_flop_per_byte),
        layer.bound,
        layer.t_compute_s,
        layer.t_memory_s,
        layer.t_lower_s,
        layer.t_upper_s,
    ]


def _stack_summary(result: Any) -> list[tuple[str, str]]:
    chip, t, mem, w = result.chip, result.totals, result.memory, result.workload
    return [
        ("chip", f"{chip.display_name} ({chip.name})"),
        (
            "workload",
            f"{w.name}: {len(result.layers)} einsums, {t.layer_instances:,} layer instances",
        ),
        (
            "total time",
            f"{fmt_time(t.t_lower_s)} lower bound (each layer overlapped), "
            f"{fmt_time(t.t_upper_s)} upper bound",
        ),
        ("total FLOPs / bytes", f"{fmt_flops(t.flops)} / {fmt_bytes(t.bytes)}"),
        (
            "memory",
            f"{fmt_bytes(mem.total_bytes)} of {fmt_bytes(mem.capacity_bytes)}: "
            + ("fits" if mem.fits else "DOES NOT FIT"),
        ),
    ]


def report_from_stack(result: Any, source: str) -> ReportData:
    """A StackResult (shardline.stack) as report data: one point per layer."""
    chip = result.chip
    points = [
        [i, layer.intensity_flop_per_byte, layer.flops / layer.t_lower_s, layer.bound]
        for i, layer in enumerate(result.layers)
        if layer.t_lower_s > 0 and layer.bytes > 0
    ]
    dtypes = sorted({str(layer.compute_dtype or layer.dtype) for layer in result.workload.layers})
    return ReportData(
        title=f"Roofline of {source}",
        subtitle=f"on {chip.display_name}",
        chip=chip,
        columns=[{"key": k, "label": lab, "kind": kind} for k, lab, kind in _STACK_COLUMNS],
        rows=[_stack_row(layer) for layer in result.layers],
        points=points,
        summary=_stack_summary(result),
        roofs=_roofs(chip, dtypes),
    )


def render_html(data: ReportData) -> str:
    payload = {
        "title": data.title,
        "subtitle": data.subtitle,
        "columns": data.columns,
        "rows": data.rows,
        "points": data.points,
        "summary": data.summary,
        "roofs": data.roofs,
        "curves": data.curves,
        "notes": data.notes,
    }
    fills = {
        "TITLE": html.escape(data.title),
        "SUBTITLE": html.escape(data.subtitle),
        "STYLE": STYLE,
        "SCRIPT": SCRIPT,
        "FIGURES": figures_html(data.figures),
        "DATA": json_for_script(payload),
    }
    # one pass, so that a value holding "{{...}}" (a user's title) is never filled in again
    return re.sub(r"\{\{([A-Z]+)\}\}", lambda m: fills.get(m.group(1), m.group(0)), PAGE)
