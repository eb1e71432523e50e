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
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardline.hardware import Chip
from shardline.io.sheets import json_cell
from shardline.units import fmt_bytes, fmt_flops, fmt_rate, fmt_time

__all__ = ["ReportData", "report_from_sheet", "report_from_stack", "render_html", "json_for_script"]

MAX_CURVES = 6  # achieved-FLOP/s-versus-M curves for the costliest (K, N, dtype) shapes
CURVE_POINTS = 160


@dataclass(frozen=True)
class ReportData:
    title: str
    subtitle: str
    chip: Chip
    columns: list[dict[str, str]]  # key, label, kind
    rows: list[list[Any]]
    points: list[list[Any]]  # [row index, intensity FLOP/B, attained FLOP/s, bound]
    summary: list[tuple[str, str]]
    roofs: list[dict[str, Any]] = field(default_factory=list)
    curves: list[dict[str, Any]] = field(default_factory=list)
    curve_peak_flops_per_s: float | None = None
    notes: list[str] = field(default_factory=list)


def _clean(value: Any) -> Any:
    value = json_cell(value)
    if value is None or isinstance(value, bool | int | float | str):
        return value
    return str(value)


def json_for_script(payload: Any) -> str:
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


def _roofs(chip: Chip, dtypes: Sequence[str]) -> list[dict[str, Any]]:
    from shardline.report.plots import roofline_data

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


def report_from_sheet(result: Any, source: str) -> ReportData:
    """A SheetResult (shardline.io.sheet_results) as report data: one point per computed row."""
    from shardline.report.plots import batch_curves

    table, cols, summary, chip = result.table, result.columns, result.summary, result.chip
    labels = table.labels()
    keys: list[tuple[str, str, str]] = [
        ("row", "row", "int"),
        ("name", "name", "text"),
        ("M", "M", "int"),
        ("K", "K", "int"),
        ("N", "N", "int"),
        ("count", "count", "int"),
        ("dtype", "dtype", "text"),
    ]
    results = [
        ("flops", "FLOPs", "flops"),
        ("bytes", "bytes", "bytes"),
        ("intensity_flop_per_byte", "FLOP/B", "float"),
        ("bound", "bound", "bound"),
        ("t_compute_s", "t_compute", "time"),
        ("t_memory_s", "t_memory", "time"),
        ("t_lower_s", "t_lower", "time"),
        ("t_upper_s", "t_upper", "time"),
    ]
    if result.has_prediction:
        results.append(("predicted_s", "predicted", "time"))
    results.append(("error", "error", "text"))
    errors: dict[int, str] = {}
    for p in result.problems:
        errors[p.row] = (errors[p.row] + "; " if p.row in errors else "") + p.text()
    dtypes = table.dtype if table.dtype is not None else np.full(len(table), "", dtype=object)
    default = summary["dtype"]
    rows: list[list[Any]] = []
    raw = {role: table.columns[table.roles[role]] for role in ("m", "k", "n")}
    for i in range(len(table)):
        ok = bool(result.ok[i])
        dims = (
            [int(table.m[i]), int(table.k[i]), int(table.n[i])]
            if ok
            else [_clean(raw[r][i]) for r in ("m", "k", "n")]
        )
        row = [
            int(table.row_numbers[i]),
            labels[i],
            *dims,
            int(table.count[i]),
            str(dtypes[i]) or default,
        ]
        for key, _, _ in results:
            if key == "error":
                row.append(errors.get(int(table.row_numbers[i]), ""))
            else:
                row.append(_clean(cols[key][i]) if ok else None)
        rows.append(row)
    columns = [{"key": k, "label": lab, "kind": kind} for k, lab, kind in (*keys, *results)]
    points: list[list[Any]] = []
    attained = cols["flops"] / np.where(result.ok, cols["t_lower_s"], 1.0)
    for i in np.flatnonzero(result.ok).tolist():
        points.append(
            [
                i,
                float(cols["intensity_flop_per_byte"][i]),
                float(attained[i]),
                str(cols["bound"][i]),
            ]
        )
    # achieved FLOP/s versus M for the costliest (K, N, dtype) shapes (one vectorized call each)
    curves: list[dict[str, Any]] = []
    weight = np.where(result.ok, table.count, 0) * np.nan_to_num(cols["t_lower_s"])
    seen: dict[tuple[int, int, str], list[int]] = {}
    for i in np.argsort(-weight, kind="stable").tolist():
        if not result.ok[i]:
            continue
        shape = (int(table.k[i]), int(table.n[i]), str(dtypes[i]) or default)
        seen.setdefault(shape, []).append(i)
    choice = result.choice
    for (k, n, dt), members in list(seen.items())[:MAX_CURVES]:
        top_m = max(int(table.m[j]) for j in members)
        crit = cols["critical_m"][members[0]]
        hi = max(2 * top_m, 4 * int(crit) if math.isfinite(crit) else 0, 16)
        m = np.unique(np.geomspace(1, hi, CURVE_POINTS).round().astype(np.int64))
        plot = batch_curves(
            [(k, n)],
            m,
            chip,
            dt,
            a_dtype=choice.a_dtype,
            b_dtype=choice.b_dtype,
            out_dtype=choice.out_dtype,
            compute_dtype=choice.compute_dtype,
            flops_per_s=result.flops_per_s,
            mem_bytes_per_s=result.mem_bytes_per_s,
        )
        marks = [[int(table.m[j]), float(attained[j]), labels[j]] for j in members[:20]]
        curves.append(
            {
                "label": f"K={k:,} N={n:,} {dt}",
                "x": m.tolist(),
                "y": plot.curves[0].y.tolist(),
                "marks": marks,
                "critical_m": None
                if plot.curves[0].critical_x is None
                else int(plot.curves[0].critical_x),
            }
        )
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
    used = sorted({str(d) or default for d in dtypes.tolist()}) or [default]
    return ReportData(
        title=f"Roofline of {source}",
        subtitle=f"on {chip.display_name}",
        chip=chip,
        columns=columns,
        rows=rows,
        points=points,
        summary=lines,
        roofs=_roofs(chip, used),
        curves=curves,
        curve_peak_flops_per_s=None,
    )


def report_from_stack(result: Any, source: str) -> ReportData:
    """A StackResult (shardline.stack) as report data: one point per layer."""
    chip = result.chip
    columns = [
        {"key": k, "label": lab, "kind": kind}
        for k, lab, kind in (
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
    ]
    rows: list[list[Any]] = []
    points: list[list[Any]] = []
    for i, layer in enumerate(result.layers):
        dims = ", ".join(f"{k}={v:,}" for k, v in layer.dims.items())
        rows.append(
            [
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
        )
        if layer.t_lower_s > 0 and layer.bytes > 0:
            points.append(
                [i, layer.intensity_flop_per_byte, layer.flops / layer.t_lower_s, layer.bound]
            )
    t, mem = result.totals, result.memory
    w = result.workload
    summary = [
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
    dtypes = sorted({str(layer.compute_dtype or layer.dtype) for layer in w.layers})
    return ReportData(
        title=f"Roofline of {source}",
        subtitle=f"on {chip.display_name}",
        chip=chip,
        columns=columns,
        rows=rows,
        points=points,
        summary=summary,
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
    title = html.escape(data.title)
    return (
        _PAGE.replace("{{TITLE}}", title)
        .replace("{{SUBTITLE}}", html.escape(data.subtitle))
        .replace("{{STYLE}}", _STYLE)
        .replace("{{SCRIPT}}", _SCRIPT)
        .replace("{{DATA}}", json_for_script(payload))
    )


_PAGE = """<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<meta http-equiv="Content-Security-Policy"
 content="default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; img-src data:">
<title>{{TITLE}}</title>
<style>{{STYLE}}</style>
</head>
<body>
<header><h1>{{TITLE}}</h1><p class="sub">{{SUBTITLE}}</p></header>
<section><h2>Summary</h2><dl id="summary"></dl><p id="status">drawing…</p></section>
<section><h2>Roofline</h2>
<p class="hint">Each point is one row (attainable FLOP/s = F / max(F/P, Q/W) at its intensity).
Hover for details; click to find it in the table; toggle roofs in the legend.</p>
<svg id="roofline" width="860" height="470" viewBox="0 0 860 470" role="img"
 aria-label="roofline"></svg>
<div id="legend" class="legend"></div></section>
<section id="curves-section"><h2>Achieved FLOP/s versus M</h2>
<p class="hint">For the costliest (K, N, dtype) shapes: how far batching more rows (M) would go.
Dots are the sheet's rows.</p>
<svg id="curves" width="860" height="380" viewBox="0 0 860 380" role="img"
 aria-label="achieved FLOP/s versus M"></svg></section>
<section><h2>Where the time goes</h2>
<p class="hint">The costliest rows by count × lower bound: compute time and memory time.</p>
<svg id="breakdown" width="860" height="60" role="img" aria-label="time breakdown"></svg></section>
<section><h2>Table</h2>
<div class="controls"><input id="filter" type="search" placeholder="filter by text">
<select id="bound-filter"><option value="">all bounds</option>
<option value="compute">compute-bound</option>
<option value="memory">memory-bound</option><option value="error">errors</option></select>
<button id="prev">◀</button><span id="page"></span><button id="next">▶</button></div>
<div class="scroll"><table id="table"><thead></thead><tbody></tbody></table></div></section>
<div id="tip" class="tip" hidden></div>
<script type="application/json" id="report-data">{{DATA}}</script>
<script>{{SCRIPT}}</script>
</body>
</html>
"""

_STYLE = """
body{font:14px/1.4 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1100px;
padding:0 16px;color:#222}
h1{font-size:22px;margin:18px 0 0}h2{font-size:17px;margin:22px 0 6px}.sub{margin:2px 0;color:#555}
dl{display:grid;grid-template-columns:max-content auto;gap:2px 14px;margin:0}
dt{font-weight:600}dd{margin:0}
.hint{color:#666;font-size:12px;margin:2px 0 6px}svg{max-width:100%;height:auto;flex-shrink:0}
.legend{font-size:12px;columns:2}.legend label{display:block;cursor:pointer;white-space:nowrap}
.scroll{overflow-x:auto;max-height:70vh}
svg text{font:11px sans-serif;fill:#333}.axis line,.axis path{stroke:#999}
.grid{stroke:#e4e4e4}.roof{fill:none;stroke-width:2}.roof.dash{stroke-dasharray:6 4}
circle.pt{stroke:#fff;stroke-width:.8;cursor:pointer}circle.pt.compute{fill:#2e9e44}
circle.pt.memory{fill:#e8772e}circle.pt.sel{stroke:#000;stroke-width:2.5}
circle.pt.hide{display:none}
text.ptlabel{font-size:10px;fill:#444}.curve{fill:none;stroke-width:1.8}
.tip{position:fixed;background:#fffbe6;border:1px solid #c9b458;
padding:6px 8px;font-size:12px;pointer-events:none;white-space:pre;z-index:10}
table{border-collapse:collapse;font-size:12px;width:100%}th,td{border-bottom:1px solid #ddd;
padding:3px 6px;text-align:right;white-space:nowrap}
th{cursor:pointer;background:#f4f4f4;position:sticky;top:0}
td.text,th.text{text-align:left}
td.bound-compute{background:#c6e0b4}td.bound-memory{background:#f8cbad}
tr.sel td{outline:2px solid #000}.controls{display:flex;gap:8px;align-items:center;margin:4px 0}
"""

# The page's script: plain JavaScript, no libraries. Draws into the SVG elements above.
_SCRIPT = r"""
(function () {
"use strict";
var D = JSON.parse(document.getElementById("report-data").textContent);
// the SVG namespace, read from an inline <svg> so that the page holds no URL at all
var NS = document.getElementById("roofline").namespaceURI;
var COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
              "#7f7f7f",
              "#bcbd22", "#17becf"];
var MAX_LABELS = 40;  // more points than this: names on hover only
var col = {};
D.columns.forEach(function (c, i) { col[c.key] = i; });

function svgEl(tag, attrs, parent) {
  var e = document.createElementNS(NS, tag);
  for (var k in attrs) { e.setAttribute(k, attrs[k]); }
  if (parent) { parent.appendChild(e); }
  return e;
}
function text(parent, x, y, s, attrs) {
  var t = svgEl("text", Object.assign({x: x, y: y}, attrs || {}), parent);
  t.textContent = s;
  return t;
}
function si(v, unit) {
  if (v === null || v === undefined || !isFinite(v)) { return ""; }
  var p = [[1e18, "E"], [1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
  for (var i = 0; i < p.length; i++) {
    if (Math.abs(v) >= p[i][0]) { return (v / p[i][0]).toPrecision(3) + " " + p[i][1] + unit; }
  }
  return (+v.toPrecision(3)) + " " + unit;
}
function time(v) {
  if (v === null || v === undefined || !isFinite(v)) { return ""; }
  var a = Math.abs(v);
  if (a >= 1) { return v.toPrecision(3) + " s"; }
  if (a >= 1e-3) { return (v * 1e3).toPrecision(3) + " ms"; }
  if (a >= 1e-6) { return (v * 1e6).toPrecision(3) + " \u00b5s"; }
  return (v * 1e9).toPrecision(3) + " ns";
}
function fmt(v, kind) {
  if (v === null || v === undefined) { return ""; }
  if (typeof v === "string") { return v; }
  if (kind === "time") { return time(v); }
  if (kind === "flops") { return si(v, "FLOP"); }
  if (kind === "bytes") { return si(v, "B"); }
  if (kind === "float") { return (+v.toPrecision(4)).toLocaleString("en-US"); }
  if (kind === "int") { return v.toLocaleString("en-US"); }
  return String(v);
}
var tip = document.getElementById("tip");
function showTip(ev, lines) {
  tip.textContent = lines.join("\n");
  tip.hidden = false;
  tip.style.left = (ev.clientX + 14) + "px";
  tip.style.top = (ev.clientY + 10) + "px";
}
function hideTip() { tip.hidden = true; }
function rowLines(i) {
  var r = D.rows[i], out = [];
  D.columns.forEach(function (c, j) {
    if (r[j] !== null && r[j] !== "" && c.key !== "error") {
      out.push(c.label + ": " + fmt(r[j], c.kind));
    }
  });
  return out;
}
function logTicks(lo, hi) {
  var t = [];
  for (var e = Math.floor(Math.log10(lo)); e <= Math.ceil(Math.log10(hi)); e++) {
    var v = Math.pow(10, e);
    if (v >= lo && v <= hi) { t.push(v); }
  }
  return t;
}
function axes(svg, x0, x1, y0, y1, xs, ys, xt, yt, xlabel, ylabel, xfmt, yfmt) {
  var g = svgEl("g", {"class": "axis"}, svg);
  xt.forEach(function (v) {
    svgEl("line", {"class": "grid", x1: xs(v), x2: xs(v), y1: y0, y2: y1}, g);
    text(g, xs(v), y0 + 16, xfmt(v), {"text-anchor": "middle"});
  });
  yt.forEach(function (v) {
    svgEl("line", {"class": "grid", x1: x0, x2: x1, y1: ys(v), y2: ys(v)}, g);
    text(g, x0 - 6, ys(v) + 4, yfmt(v), {"text-anchor": "end"});
  });
  svgEl("rect", {x: x0, y: y1, width: x1 - x0, height: y0 - y1, fill: "none", stroke: "#999"}, g);
  text(g, (x0 + x1) / 2, y0 + 36, xlabel, {"text-anchor": "middle"});
  text(g, 12, (y0 + y1) / 2, ylabel, {"text-anchor": "middle",
       transform: "rotate(-90 12 " + ((y0 + y1) / 2) + ")"});
}
function sup(v) { return v >= 1 ? v.toLocaleString("en-US") : String(+v.toPrecision(1)); }
function siTick(v, unit) {
  var p = [[1e18, "E"], [1e15, "P"], [1e12, "T"], [1e9, "G"], [1e6, "M"], [1e3, "k"]];
  for (var i = 0; i < p.length; i++) {
    if (Math.abs(v) >= p[i][0]) { return (+(v / p[i][0]).toPrecision(3)) + " " + p[i][1] + unit; }
  }
  return (+v.toPrecision(3)) + " " + unit;
}

var selected = null;
function select(i) {
  if (selected !== null) {
    var old = document.querySelector("circle.pt[data-row='" + selected + "']");
    if (old) { old.classList.remove("sel"); }
  }
  selected = i;
  var c = document.querySelector("circle.pt[data-row='" + i + "']");
  if (c) { c.classList.add("sel"); }
  table.showRow(i);
}

function drawRoofline() {
  var svg = document.getElementById("roofline");
  var W = +svg.getAttribute("width"), H = +svg.getAttribute("height");
  var x0 = 96, x1 = W - 16, y0 = H - 46, y1 = 12;
  var xs_ = D.points.map(function (p) { return p[1]; });
  var ys_ = D.points.map(function (p) { return p[2]; });
  D.roofs.forEach(function (r) {
    xs_.push(r.flops_per_s / r.bytes_per_s);
    ys_.push(r.flops_per_s);
  });
  var xlo = Math.min.apply(null, xs_.concat([1])) / 4, xhi = Math.max.apply(null, xs_) * 4;
  var slopes = D.roofs.map(function (r) { return xlo * r.bytes_per_s; });
  var ylo = Math.min.apply(null, ys_.concat(slopes));
  var yhi = Math.max.apply(null, ys_) * 2;
  ylo = Math.max(ylo / 2, yhi / 1e9);
  var lx = function (v) {
    return x0 + (Math.log10(v) - Math.log10(xlo)) / (Math.log10(xhi) - Math.log10(xlo)) * (x1 - x0);
  };
  var ly = function (v) {
    var span = Math.log10(yhi) - Math.log10(ylo);
    return y0 - (Math.log10(Math.max(v, ylo)) - Math.log10(ylo)) / span * (y0 - y1);
  };
  axes(svg, x0, x1, y0, y1, lx, ly, logTicks(xlo, xhi), logTicks(ylo, yhi),
       "arithmetic intensity (FLOP/byte)", "attainable FLOP/s", sup,
       function (v) { return siTick(v, "FLOP/s"); });
  var legend = document.getElementById("legend");
  D.roofs.forEach(function (r, i) {
    var ridge = r.flops_per_s / r.bytes_per_s;
    var pts = [[xlo, Math.min(r.flops_per_s, xlo * r.bytes_per_s)]];
    if (ridge > xlo && ridge < xhi) { pts.push([ridge, r.flops_per_s]); }
    pts.push([xhi, Math.min(r.flops_per_s, xhi * r.bytes_per_s)]);
    var line = svgEl("polyline", {"class": "roof" + (r.dash ? " dash" : ""),
      stroke: COLORS[i % COLORS.length],
      points: pts.map(function (p) {
        return lx(p[0]).toFixed(1) + "," + ly(p[1]).toFixed(1);
      }).join(" ")}, svg);
    line.style.display = r.on ? "" : "none";
    var lab = document.createElement("label");
    var box = document.createElement("input");
    box.type = "checkbox"; box.checked = r.on;
    box.addEventListener("change", function () { line.style.display = box.checked ? "" : "none"; });
    var sw = document.createElement("span");
    sw.textContent = "\u25a0 "; sw.style.color = COLORS[i % COLORS.length];
    lab.appendChild(box); lab.appendChild(sw);
    lab.appendChild(document.createTextNode(r.label + ": " + si(r.flops_per_s, "FLOP/s") +
                                            ", ridge " +
                                            Math.round(ridge).toLocaleString("en-US") + " FLOP/B"));
    legend.appendChild(lab);
  });
  var g = svgEl("g", {id: "points"}, svg);
  var nameCol = col.name !== undefined ? col.name : 0;
  D.points.forEach(function (p) {
    var c = svgEl("circle", {"class": "pt " + p[3], cx: lx(p[1]).toFixed(1),
      cy: ly(p[2]).toFixed(1),
      r: 4.5, "data-row": p[0]}, g);
    svgEl("title", {}, c).textContent = String(D.rows[p[0]][nameCol]);
    if (D.points.length <= MAX_LABELS) {
      text(g, lx(p[1]) + 6, ly(p[2]) - 6, String(D.rows[p[0]][nameCol]).slice(0, 40),
           {"class": "ptlabel"});
    }
    c.addEventListener("mousemove", function (ev) { showTip(ev, rowLines(p[0])); });
    c.addEventListener("mouseleave", hideTip);
    c.addEventListener("click", function () { select(p[0]); });
  });
  return D.points.length;
}

function drawCurves() {
  var svg = document.getElementById("curves");
  if (!D.curves.length) { document.getElementById("curves-section").hidden = true; return 0; }
  var W = +svg.getAttribute("width"), H = +svg.getAttribute("height");
  var x0 = 96, x1 = W - 180, y0 = H - 46, y1 = 12;
  var xhi = 1, yhi = 0;
  D.curves.forEach(function (c) {
    xhi = Math.max(xhi, c.x[c.x.length - 1]);
    yhi = Math.max(yhi, Math.max.apply(null, c.y));
  });
  yhi *= 1.08;
  var lx = function (v) { return x0 + Math.log10(v) / Math.log10(xhi) * (x1 - x0); };
  var ly = function (v) { return y0 - v / yhi * (y0 - y1); };
  var yt = [];
  for (var k = 0; k <= 5; k++) { yt.push(yhi / 1.08 * k / 5); }
  axes(svg, x0, x1, y0, y1, lx, ly, logTicks(1, xhi), yt, "M (rows batched against the same K x N)",
       "achieved FLOP/s", function (v) { return v.toLocaleString("en-US"); },
       function (v) { return siTick(v, "FLOP/s"); });
  D.curves.forEach(function (c, i) {
    var color = COLORS[i % COLORS.length];
    svgEl("polyline", {"class": "curve", stroke: color, points: c.x.map(function (x, j) {
      return lx(x).toFixed(1) + "," + ly(c.y[j]).toFixed(1); }).join(" ")}, svg);
    c.marks.forEach(function (m) {
      var d = svgEl("circle", {cx: lx(m[0]).toFixed(1), cy: ly(m[1]).toFixed(1), r: 3.5,
                               fill: color,
                               "class": "mark"}, svg);
      d.addEventListener("mousemove", function (ev) {
        showTip(ev, [m[2], "M = " + m[0].toLocaleString("en-US"), "achieved " + si(m[1], "FLOP/s"),
                     c.critical_m ?
                     "compute-bound from M = " + c.critical_m.toLocaleString("en-US") :
                     "memory-bound at every M"]);
      });
      d.addEventListener("mouseleave", hideTip);
    });
    text(svg, x1 + 8, y1 + 14 + 16 * i, c.label, {fill: color});
  });
  return D.curves.length;
}

function drawBreakdown() {
  var svg = document.getElementById("breakdown");
  if (col.t_lower_s === undefined) { return 0; }
  var items = [];
  D.rows.forEach(function (r, i) {
    if (r[col.t_lower_s] !== null) {
      var n = r[col.count] || 1;
      items.push([i, n * r[col.t_compute_s], n * r[col.t_memory_s], n * r[col.t_lower_s]]);
    }
  });
  items.sort(function (a, b) { return b[3] - a[3]; });
  items = items.slice(0, 25);
  var total = 0;
  D.rows.forEach(function (r) {
    if (r[col.t_lower_s] !== null) { total += (r[col.count] || 1) * r[col.t_lower_s]; }
  });
  var W = +svg.getAttribute("width"), rowH = 18, x0 = 230, x1 = W - 90;
  svg.setAttribute("height", items.length * rowH + 30);
  var hi = 0;
  items.forEach(function (it) { hi = Math.max(hi, it[1], it[2]); });
  items.forEach(function (it, k) {
    var y = 8 + k * rowH, name = D.rows[it[0]][col.name];
    text(svg, x0 - 6, y + 12, String(name).slice(0, 34), {"text-anchor": "end"});
    svgEl("rect", {x: x0, y: y + 1, width: Math.max(1, it[1] / hi * (x1 - x0)), height: 7,
                   fill: "#2e9e44"}, svg);
    svgEl("rect", {x: x0, y: y + 8, width: Math.max(1, it[2] / hi * (x1 - x0)), height: 7,
                   fill: "#e8772e"}, svg);
    text(svg, x1 + 6, y + 12, time(it[3]) + " (" + (100 * it[3] / total).toFixed(0) + "%)");
  });
  text(svg, x0, items.length * rowH + 24,
       "green: count \u00d7 t_compute; orange: count \u00d7 t_memory");
  return items.length;
}

var table = (function () {
  var PAGE = 200, page = 0, sortKey = -1, asc = true;
  var order = D.rows.map(function (_, i) { return i; }), view = order;
  var thead = document.querySelector("#table thead");
  var tbody = document.querySelector("#table tbody");
  var filter = document.getElementById("filter");
  var boundSel = document.getElementById("bound-filter");
  var tr = document.createElement("tr");
  D.columns.forEach(function (c, j) {
    var th = document.createElement("th");
    th.textContent = c.label;
    th.className = c.kind === "text" || c.kind === "bound" ? "text" : "";
    th.addEventListener("click", function () {
      asc = sortKey === j ? !asc : true;
      sortKey = j;
      apply();
    });
    tr.appendChild(th);
  });
  thead.appendChild(tr);
  function apply() {
    var q = filter.value.toLowerCase(), b = boundSel.value, hidden = {};
    view = order.filter(function (i) {
      var r = D.rows[i];
      var bound = col.bound !== undefined ? (r[col.bound] || "error") : "";
      var ok = (!b || bound === b) && (!q || r.some(function (v) {
        return v !== null && String(v).toLowerCase().indexOf(q) >= 0;
      }));
      if (!ok) { hidden[i] = true; }
      return ok;
    });
    if (sortKey >= 0) {
      view.sort(function (x, y) {
        var a = D.rows[x][sortKey], c = D.rows[y][sortKey];
        if (a === c) { return x - y; }
        if (a === null) { return 1; }
        if (c === null) { return -1; }
        return (a < c ? -1 : 1) * (asc ? 1 : -1);
      });
    }
    document.querySelectorAll("circle.pt").forEach(function (c) {
      c.classList.toggle("hide", !!hidden[+c.getAttribute("data-row")]);
    });
    page = Math.min(page, Math.max(0, Math.ceil(view.length / PAGE) - 1));
    render();
  }
  function render() {
    while (tbody.firstChild) { tbody.removeChild(tbody.firstChild); }
    view.slice(page * PAGE, (page + 1) * PAGE).forEach(function (i) {
      var tr = document.createElement("tr");
      tr.setAttribute("data-row", i);
      if (i === selected) { tr.className = "sel"; }
      D.columns.forEach(function (c, j) {
        var td = document.createElement("td"), v = D.rows[i][j];
        td.textContent = fmt(v, c.kind);
        td.className = (c.kind === "text" || c.kind === "bound" ? "text" : "") +
                       (c.kind === "bound" && v ? " bound-" + v : "");
        tr.appendChild(td);
      });
      tr.addEventListener("click", function () { select(i); });
      tbody.appendChild(tr);
    });
    document.getElementById("page").textContent = "rows " +
      (view.length ? page * PAGE + 1 : 0) + "\u2013" +
      Math.min(view.length, (page + 1) * PAGE) + " of " + view.length;
  }
  document.getElementById("prev").addEventListener("click", function () {
    if (page > 0) { page--; render(); }
  });
  document.getElementById("next").addEventListener("click", function () {
    if ((page + 1) * PAGE < view.length) { page++; render(); } });
  filter.addEventListener("input", apply);
  boundSel.addEventListener("change", apply);
  return {
    apply: apply,
    showRow: function (i) {
      var k = view.indexOf(i);
      if (k < 0) { filter.value = ""; boundSel.value = ""; apply(); k = view.indexOf(i); }
      page = Math.floor(k / PAGE); render();
      var row = tbody.querySelector("tr[data-row='" + i + "']");
      if (row && row.scrollIntoView) { row.scrollIntoView({block: "center"}); }
    }
  };
})();

var dl = document.getElementById("summary");
D.summary.forEach(function (kv) {
  var dt = document.createElement("dt"), dd = document.createElement("dd");
  dt.textContent = kv[0]; dd.textContent = kv[1];
  dl.appendChild(dt); dl.appendChild(dd);
});
var nPoints = drawRoofline(), nCurves = drawCurves(), nBars = drawBreakdown();
table.apply();
document.getElementById("status").textContent = nPoints + " points, " + nCurves + " curves, " +
  nBars + " bars, " + D.rows.length + " rows";
document.body.setAttribute("data-points", String(nPoints));
document.body.setAttribute("data-ready", "1");
})();
"""
