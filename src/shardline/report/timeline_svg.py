"""A plan's step timeline (shardline.planning.timeline) as one SVG string: a row per pipeline
stage, forward and backward passes as blocks labelled with their microbatch, the exposed
communication in a thin lane under them, bubbles hatched grey, the gradient all-reduce and the
optimizer at the end. Pure string building (no matplotlib), for the offline HTML report."""

from __future__ import annotations

from html import escape

from shardline.basics.units import fmt_time
from shardline.planning.timeline import Timeline

__all__ = ["timeline_svg", "COLORS"]

COLORS = {
    "forward": "#4e79a7",
    "backward": "#f28e2b",
    "exposed_comm": "#e15759",
    "dp_comm": "#b07aa1",
    "optimizer": "#59a14f",
    "bubble": "#d9d9d9",
}
_LABELS = {
    "forward": "forward",
    "backward": "backward",
    "exposed_comm": "exposed communication",
    "dp_comm": "gradient all-reduce (exposed)",
    "optimizer": "optimizer",
    "bubble": "bubble (idle)",
}
_ROW_H, _LANE_H, _GAP, _LEFT, _TOP = 26, 7, 10, 70, 28
_NS = ' xmlns="http://www.w3.org/2000/svg"'
MAX_LABELLED = 400  # label blocks with their microbatch only when there are few


def _rect(x: float, y: float, w: float, h: float, kind: str, title: str) -> str:
    return (
        f'<rect x="{x:.2f}" y="{y:.1f}" width="{max(w, 0.3):.2f}" height="{h}" '
        f'fill="{COLORS[kind]}" stroke="#fff" stroke-width="0.3">'
        f"<title>{escape(title)}</title></rect>"
    )


def _ticks(step_s: float, x0: float, width: float, y: float) -> list[str]:
    out = []
    for i in range(6):
        t = step_s * i / 5
        x = x0 + width * i / 5
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{_TOP - 4}" y2="{y}" stroke="#eee"/>')
        out.append(
            f'<text x="{x:.1f}" y="{y + 14}" text-anchor="{"end" if i == 5 else "middle"}" '
            f'font-size="10">'
            f"{escape(fmt_time(t))}</text>"
        )
    return out


def _legend(y: float) -> list[str]:
    out, x = [], _LEFT
    for kind, label in _LABELS.items():
        out.append(f'<rect x="{x}" y="{y}" width="10" height="10" fill="{COLORS[kind]}"/>')
        out.append(f'<text x="{x + 14}" y="{y + 9}" font-size="10">{escape(label)}</text>')
        x += 22 + 6 * len(label)
    return out


def timeline_svg(timeline: Timeline, width: int = 860, *, standalone: bool = True) -> str:
    """The SVG markup of `timeline`: a file's (with the SVG namespace) or, `standalone` False,
    an element to inline in an HTML page (which needs no namespace, and the report page holds
    no URL at all)."""
    plot_w = width - _LEFT - 10
    scale = plot_w / timeline.step_s if timeline.step_s > 0 else 0.0
    height = _TOP + timeline.stages * (_ROW_H + _LANE_H + _GAP) + 40
    label = len(timeline.events) <= MAX_LABELLED
    body: list[str] = []
    for e in timeline.events:
        y = _TOP + e.stage * (_ROW_H + _LANE_H + _GAP)
        h = _ROW_H
        if e.stream == "communication":
            y, h = y + _ROW_H, _LANE_H
        x, w = _LEFT + e.start_s * scale, e.dur_s * scale
        title = f"stage {e.stage}: {e.name} ({_LABELS[e.kind]}), {fmt_time(e.dur_s)}"
        body.append(_rect(x, y, w, h, e.kind, title))
        if label and e.kind in ("forward", "backward") and w > 14:
            body.append(
                f'<text x="{x + w / 2:.1f}" y="{y + 16}" text-anchor="middle" font-size="9" '
                f'fill="#fff">{escape(e.name)}</text>'
            )
    rows = [
        f'<text x="4" y="{_TOP + s * (_ROW_H + _LANE_H + _GAP) + 17}" font-size="11">'
        f"stage {s}</text>"
        for s in range(timeline.stages)
    ]
    axis_y = height - 40
    head = (
        f"{timeline.plan}: {timeline.schedule}, {timeline.stages} stage(s) x "
        f"{timeline.microbatches} microbatch(es), step {fmt_time(timeline.step_s)}"
    )
    return "".join(
        [
            f'<svg{_NS if standalone else ""} width="{width}" height="{height}" '
            f'viewBox="0 0 {width} {height}" role="img" aria-label="step timeline">',
            f'<text x="4" y="14" font-size="12">{escape(head)}</text>',
            *_ticks(timeline.step_s, _LEFT, plot_w, axis_y),
            *rows,
            *body,
            *_legend(height - 14),
            "</svg>",
        ]
    )
