"""Text in figures that reads at a glance: point labels placed where they overlap no other text
(and dropped where no place is free: the table or the JSON has every name), and linear axes that
never show an offset ("+1.0216e5") and carry as many digits as their ticks need to differ.
matplotlib is imported by the callers (shardline.report.plots)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from shardline.basics.units import fmt_rate

__all__ = ["place_labels", "readable_ticks", "distinct_formatter"]

# where a label may go, in points from its point (x, y, horizontal alignment), tried in order
_OFFSETS = (
    (4, 4, "left"),
    (4, -11, "left"),
    (-4, 4, "right"),
    (-4, -11, "right"),
    (4, 13, "left"),
    (-4, 13, "right"),
    (4, -20, "left"),
    (-4, -20, "right"),
)


def _overlaps(a: Any, b: Any) -> bool:
    return min(a.x1, b.x1) > max(a.x0, b.x0) and min(a.y1, b.y1) > max(a.y0, b.y0)


def _inside(box: Any, frame: Any) -> bool:
    return box.x0 >= frame.x0 and box.y0 >= frame.y0 and box.x1 <= frame.x1 and box.y1 <= frame.y1


def _taken(fig: Any, renderer: Any) -> list[Any]:
    """The boxes of the text already drawn: titles, axis labels, tick labels and legends."""
    from matplotlib.text import Text

    fig.draw(renderer)
    boxes = []
    for artist in fig.findobj(Text):
        if artist.get_visible() and artist.get_text().strip():
            boxes.append(artist.get_window_extent(renderer))
    for ax in fig.axes:
        legend = ax.get_legend()
        if legend is not None:
            boxes.append(legend.get_window_extent(renderer))
    return boxes


def place_labels(
    fig: Any, ax: Any, labels: Sequence[tuple[str, float, float]], fontsize: float = 7
) -> int:
    """Annotate each (text, x, y) at the first offset where its box stays inside the axes and
    overlaps no text placed or drawn before; a label with no free place is left out. Call it
    after the layout (tight_layout, legend) is final. Returns the count placed."""
    renderer = fig.canvas.get_renderer()
    taken = _taken(fig, renderer)
    frame = ax.get_window_extent(renderer)
    placed = 0
    for text, x, y in labels:
        for dx, dy, ha in _OFFSETS:
            note = ax.annotate(
                text,
                (x, y),
                fontsize=fontsize,
                xytext=(dx, dy),
                textcoords="offset points",
                ha=ha,
                parse_math=False,  # a name is text: "$5" must not start mathtext
            )
            box = note.get_window_extent(renderer)
            if _inside(box, frame) and not any(_overlaps(box, other) for other in taken):
                taken.append(box)
                placed += 1
                break
            note.remove()
    return placed


def distinct_formatter(fmt: Callable[[float, int], str]) -> object:
    """A tick formatter that writes each tick with `fmt(value, digits)`, digits the fewest from 3
    up that tell the ticks apart (no offset, no multiplier above the axis)."""
    from matplotlib.ticker import Formatter

    class Distinct(Formatter):
        def __call__(self, x: float, pos: int | None = None) -> str:
            return fmt(x, 3)

        def format_ticks(self, values: Sequence[float]) -> list[str]:
            labels = [fmt(v, 3) for v in values]
            for digits in range(3, 16):
                labels = [fmt(v, digits) for v in values]
                if len(set(labels)) == len(labels):
                    break
            return labels

    return Distinct()


def _si(value: float, digits: int) -> str:
    """1.5e14 -> '150T', 0.25 -> '0.25' (SI prefixes, no unit)."""
    return fmt_rate(value, "", digits).replace(" ", "")


def readable_ticks(fig: Any) -> None:
    """Every linear axis still on matplotlib's default formatter: SI numbers, as many digits as
    the ticks need, never an offset or a multiplier."""
    from matplotlib.ticker import ScalarFormatter

    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            linear = axis.get_scale() == "linear"
            if linear and type(axis.get_major_formatter()) is ScalarFormatter:
                axis.set_major_formatter(distinct_formatter(_si))
