"""The page, style and script of `shardline report` (templates as data: no Python logic here).

`{{TITLE}}`, `{{SUBTITLE}}`, `{{STYLE}}`, `{{SCRIPT}}` and `{{DATA}}` are filled by
`shardline.report.html.render_html`.
"""

PAGE = """<!DOCTYPE html>
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
{{FIGURES}}<section><h2>Table</h2>
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

STYLE = """
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
SCRIPT = r"""
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
  var taken = [];  // boxes of the names placed so far: a name goes where it overlaps none
  D.points.forEach(function (p) {
    var c = svgEl("circle", {"class": "pt " + p[3], cx: lx(p[1]).toFixed(1),
      cy: ly(p[2]).toFixed(1),
      r: 4.5, "data-row": p[0]}, g);
    svgEl("title", {}, c).textContent = String(D.rows[p[0]][nameCol]);
    if (D.points.length <= MAX_LABELS) {
      placeLabel(g, taken, lx(p[1]), ly(p[2]), String(D.rows[p[0]][nameCol]).slice(0, 40),
                 [x0, y1, x1, y0]);
    }
    c.addEventListener("mousemove", function (ev) { showTip(ev, rowLines(p[0])); });
    c.addEventListener("mouseleave", hideTip);
    c.addEventListener("click", function () { select(p[0]); });
  });
  return D.points.length;
}

// a point's name: the first offset where its box (measured: getBBox) stays in the frame and
// overlaps no name placed before; left out (hover shows it) where none is free
var LABEL_OFFSETS = [[6, -6, "start"], [6, 14, "start"], [-6, -6, "end"], [-6, 14, "end"],
                     [6, -18, "start"], [-6, -18, "end"], [6, 26, "start"], [-6, 26, "end"]];
function overlap(a, b) {
  return a[2] > b[0] && a[0] < b[2] && a[3] > b[1] && a[1] < b[3];
}
function boxOf(t) {
  var b = t.getBBox();
  return [b.x, b.y, b.x + b.width, b.y + b.height];
}
function placeLabel(g, taken, x, y, s, frame) {
  for (var k = 0; k < LABEL_OFFSETS.length; k++) {
    var o = LABEL_OFFSETS[k];
    var t = text(g, x + o[0], y + o[1], s, {"class": "ptlabel", "text-anchor": o[2]});
    var box = boxOf(t);
    var inside = box[0] >= frame[0] && box[1] >= frame[1] && box[2] <= frame[2] &&
                 box[3] <= frame[3];
    if (inside && taken.every(function (b) { return !overlap(box, b); })) {
      taken.push(box);
      return t;
    }
    g.removeChild(t);
  }
  return null;
}
// how many pairs of the page's point names overlap (0: every name readable), for the tests
function labelOverlaps() {
  var boxes = Array.prototype.map.call(document.querySelectorAll("text.ptlabel"), boxOf);
  var n = 0;
  for (var i = 0; i < boxes.length; i++) {
    for (var j = i + 1; j < boxes.length; j++) { if (overlap(boxes[i], boxes[j])) { n++; } }
  }
  return n;
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
    // the legend: a key of the curve's colour and dot beside its name
    var ky = y1 + 10 + 16 * i;
    svgEl("line", {x1: x1 + 8, x2: x1 + 28, y1: ky, y2: ky, stroke: color, "stroke-width": 2,
                   "class": "key"}, svg);
    svgEl("circle", {cx: x1 + 18, cy: ky, r: 3, fill: color, "class": "key"}, svg);
    text(svg, x1 + 34, ky + 4, c.label, {fill: color});
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
document.body.setAttribute("data-label-overlaps", String(labelOverlaps()));
document.body.setAttribute("data-ready", "1");
})();
"""
