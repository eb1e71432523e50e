"""Text of `plan --from FILE` (what the framework configuration gave the plan) and of
`plan --emit FORMAT -o FILE` (where the launch configuration went)."""

from __future__ import annotations

from typing import Any

from shardline.io.framework_config import Imported

__all__ = ["render_imported", "render_emitted"]


def render_imported(imported: Imported, flags_given: list[str]) -> str:
    d = imported.degrees
    degrees = ", ".join(f"{k} {d[k]}" for k in ("tp", "pp", "dp", "fsdp", "ep", "cp"))
    ex = imported.execution
    lines = [
        f"from {imported.origin} ({imported.format}): model {imported.model.name}, {degrees}",
        f"  batch {imported.batch} in {imported.microbatches} microbatches, sequence "
        f"{imported.seq_len}, dtype {imported.dtype or 'the default'}, recompute "
        f"{ex.get('recompute', 'the framework default')}, interleave {ex.get('interleave', 1)}",
    ]
    if imported.attention_dtype is not None:
        lines.append(f"  attention in {imported.attention_dtype}")
    if imported.etp is not None:
        lines.append(f"  expert tensor parallel {imported.etp}")
    if flags_given:
        lines.append(f"  flags given over the file: {', '.join(flags_given)}")
    if imported.unknown:
        lines.append(f"  unknown keys (not read): {', '.join(imported.unknown)}")
    lines += [f"  not modelled: {note}" for note in imported.not_modelled]
    lines += [f"  not read: {note}" for note in imported.not_read]
    return "\n".join(lines) + "\n\n"


def render_emitted(emitted: dict[str, Any]) -> str:
    """Where --emit wrote; from the search, the layout as the framework runs it (re-priced)."""
    line = f"wrote {emitted['file']} ({emitted['format']} launch configuration)"
    if "predicted_s" in emitted:
        line += f": {emitted['plan']} as {emitted['format']} runs it, predicted "
        line += f"{emitted['predicted_s']:.4g} s"
    changes = "".join(f"  {c}\n" for c in emitted.get("changes", ()))
    return line + "\n" + changes


def _s(value: float | None) -> str:
    if value is None:
        return "-"
    if abs(value) >= 1:
        return f"{value:.3f} s"
    return f"{value * 1e3:.3f} ms"


def render_trace(p: dict[str, Any]) -> str:
    """`validate --trace`: per category measured against predicted, the largest kernels and the
    largest gap."""
    window = f"{p['steps']} step(s)" + (
        f" on {p['devices_in_trace']} devices" if p["devices_in_trace"] > 1 else ""
    )
    lines = [
        f"trace {p['trace']} ({p['format']}): {window}"
        + (f", against plan {p['plan']}" if p["plan"] else ", no model given (measured only)"),
        "",
        f"  {'category':<12} {'measured':>12} {'predicted':>12} {'kernels':>8}",
    ]
    for r in p["categories"]:
        lines.append(
            f"  {r['category']:<12} {_s(r['measured_s']):>12} {_s(r['predicted_s']):>12} "
            f"{r['kernels']:>8}"
        )
    lines.append(f"  {'step':<12} {_s(p['measured_step_s']):>12} {_s(p['predicted_step_s']):>12}")
    lines += ["", "largest kernels:"]
    for k in p["largest_kernels"]:
        shape = f" {k['shape']}" if k["shape"] else ""
        lines.append(
            f"  {_s(k['measured_s']):>12}  {k['kernels']:>5}x  {k['category']:<10} "
            f"{k['name'][:70]}{shape}"
        )
    gap = p["largest_gap"]
    if gap:
        delta = gap["measured_minus_predicted_s"]
        side = "above" if delta > 0 else "below"
        lines += [
            "",
            f"largest gap: {gap['category']}, measured {side} predicted by {_s(abs(delta))}",
        ]
    return "\n".join(lines) + "\n"


def render_trace_html(p: dict[str, Any]) -> str:
    """`validate --trace --html`: one offline page (no script): measured against predicted per
    category as bars, and the largest kernels as a table."""
    from html import escape

    rows = p["categories"]
    top = max(
        [r[k] for r in rows for k in ("measured_s", "predicted_s") if r[k] is not None] or [1.0]
    )
    width, left, bar_h = 520.0, 110.0, 14
    height = len(rows) * (2 * bar_h + 12) + 30
    svg = [
        f'<svg width="{left + width + 120:.0f}" height="{height}" role="img" '
        'aria-label="measured against predicted per category">'
    ]
    y = 10
    for r in rows:
        svg.append(f'<text x="0" y="{y + bar_h + 4}" font-size="13">{escape(r["category"])}</text>')
        for key, color, dy in (("measured_s", "#1f77b4", 0), ("predicted_s", "#ff7f0e", bar_h + 2)):
            value = r[key]
            w = 0.0 if value is None or top <= 0 else width * value / top
            svg.append(
                f'<rect x="{left}" y="{y + dy}" width="{w:.1f}" height="{bar_h}" fill="{color}">'
                f"<title>{escape(key)} {escape(_s(value))}</title></rect>"
                f'<text x="{left + w + 4:.1f}" y="{y + dy + bar_h - 3}" font-size="11">'
                f"{escape(_s(value))}</text>"
            )
        y += 2 * bar_h + 12
    svg.append("</svg>")
    table = ["<table><tr><th>time</th><th>launches</th><th>category</th><th>kernel</th></tr>"]
    for k in p["largest_kernels"]:
        table.append(
            f"<tr><td>{escape(_s(k['measured_s']))}</td><td>{k['kernels']}</td>"
            f"<td>{escape(k['category'])}</td>"
            f"<td>{escape(k['name'])} {escape(k['shape'])}</td></tr>"
        )
    table.append("</table>")
    title = f"shardline validate --trace {p['trace']}"
    against = f"against plan {p['plan']}" if p["plan"] else "measured only"
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{escape(title)}</title>"
        "<style>body{font-family:sans-serif;margin:2em}td,th{padding:2px 8px;text-align:left}"
        "</style></head><body>"
        f"<h1>{escape(title)}</h1><p>{escape(p['format'])}, {p['steps']} step(s), "
        f"{escape(against)}; measured (blue) is the trace's kernel durations summed, predicted "
        "(orange) the plan's</p>"
        + "".join(svg)
        + "<h2>Largest kernels</h2>"
        + "".join(table)
        + "</body></html>\n"
    )
