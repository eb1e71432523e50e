"""Plots of serving and search results (PNG or SVG by the file's suffix; matplotlib imported
inside the functions, drawn as shardline.report.plots draws: default style, deterministic SVG):

- `render_latency_throughput`: latency versus throughput, one curve per configuration;
- `render_pareto`: cost versus latency of every option, the Pareto front highlighted;
- `render_cdfs`: the empirical CDF of each sample set (TTFT, TPOT), p50/p90/p99 marked;
- `render_kv_occupancy`: the KV cache's occupied fraction over time.

Inputs are plain lists, arrays and dicts, so that any serving or search output can be drawn;
`pareto_front` (numpy) says which points are on the front; `figure_for` renders one of these
to an inline SVG Figure for the offline HTML report.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from shardline.basics.units import fmt_usd
from shardline.errors import InputError
from shardline.report.figure_text import distinct_formatter, place_labels, readable_ticks
from shardline.report.figures import Figure, inline_svg
from shardline.report.plots import new_figure, render_figure

__all__ = [
    "pareto_front",
    "render_latency_throughput",
    "render_pareto",
    "render_cdfs",
    "render_kv_occupancy",
    "figure_for",
    "PERCENTILES",
]

PERCENTILES = (50, 90, 99)
Point = tuple[float, float]


def _finite(values: object, what: str) -> np.ndarray:
    arr = np.asarray(values, dtype=float)
    if arr.size == 0:
        raise InputError(f"{what}: no values to plot")
    if not np.all(np.isfinite(arr)):
        raise InputError(f"{what}: every value must be a finite number")
    return arr


def pareto_front(
    costs: Sequence[float] | np.ndarray, latencies: Sequence[float] | np.ndarray
) -> list[int]:
    """Indices of the points no other point beats on both cost and latency (lower is better),
    sorted by latency: a point is on the front when every faster-or-equal point costs more."""
    c, t = _finite(costs, "costs"), _finite(latencies, "latencies")
    if c.shape != t.shape:
        raise InputError("costs and latencies must have the same length")
    order = np.lexsort((c, t))  # by latency, then by cost
    front, best = [], np.inf
    for i in order.tolist():
        if c[i] < best:
            front.append(i)
            best = c[i]
    return front


def _finish(fig: Any, ax: Any, labels: tuple[str, str], title: str) -> object:
    """Axis labels (x, y), the title, a light grid and the legend; the figure laid out."""
    ax.set_xlabel(labels[0])
    ax.set_ylabel(labels[1])
    ax.set_title(title, fontsize=9, parse_math=False)
    ax.grid(True, linewidth=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def render_latency_throughput(
    curves: Sequence[tuple[str, Sequence[Point]]],
    path: str | Path,
    *,
    title: str = "",
    throughput_label: str = "throughput (tokens/s)",
    latency_label: str = "latency (s)",
) -> None:
    """One line per configuration through its (throughput, latency) points."""
    data = [(label, _finite(points, f"curve {label!r}").reshape(-1, 2)) for label, points in curves]
    if not data:
        raise InputError("no curves to plot")

    def draw() -> object:
        fig, ax = new_figure(7, 4.5)
        for i, (label, xy) in enumerate(data):
            xy = xy[np.argsort(xy[:, 0])]
            (line,) = ax.plot(xy[:, 0], xy[:, 1], marker="o", markersize=3, label=label)
            line.set_gid(f"curve-{i}")
        return _finish(fig, ax, (throughput_label, latency_label), title)

    render_figure(path, draw)


def render_pareto(
    costs: Sequence[float],
    latencies: Sequence[float],
    path: str | Path,
    *,
    labels: Sequence[str] | None = None,
    title: str = "",
    cost_label: str = "USD per million tokens",
    latency_label: str = "latency (s)",
) -> None:
    """Every option as a grey point; the Pareto front as a highlighted step line, labelled."""
    c, t = _finite(costs, "costs"), _finite(latencies, "latencies")
    front = pareto_front(c, t)
    names = list(labels) if labels is not None else [""] * len(c)
    if len(names) != len(c):
        raise InputError("labels must have one entry per point")

    def draw() -> object:
        fig, ax = new_figure(7, 4.5)
        ax.scatter(t, c, s=10, color="0.7", label="options").set_gid("options")
        ax.step(t[front], c[front], where="post", color="tab:red", linewidth=1.2)
        ax.scatter(t[front], c[front], s=24, color="tab:red", label="Pareto front").set_gid("front")
        if cost_label.startswith("USD"):  # dollars read as dollars, never with an offset
            ax.yaxis.set_major_formatter(distinct_formatter(fmt_usd))
        readable_ticks(fig)
        ax.margins(x=0.08, y=0.12)  # room for the outermost points' labels
        _finish(fig, ax, (latency_label, cost_label), title)
        place_labels(fig, ax, [(names[i], t[i], c[i]) for i in front[:20] if names[i]])
        return fig

    render_figure(path, draw)


def cdf_panel(ax: Any, name: str, x: np.ndarray, unit: str = "s") -> Any:
    """The empirical CDF of the sorted samples `x` on `ax`, with p50, p90 and p99 marked;
    returns the step line."""
    (line,) = ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post")
    for q in PERCENTILES:
        v = float(np.percentile(x, q))
        ax.axvline(v, color="0.5", linestyle=":", linewidth=0.8)
        ax.text(v, q / 100, f" p{q}", fontsize=7, parse_math=False)
    ax.set_xlabel(f"{name} ({unit})", parse_math=False)
    ax.set_ylabel("fraction of requests")
    ax.set_ylim(0, 1.02)
    return line


def render_cdfs(
    samples: Mapping[str, Sequence[float]], path: str | Path, *, title: str = "", unit: str = "s"
) -> None:
    """One panel per sample set (e.g. {"TTFT": [...], "TPOT": [...]}): its empirical CDF with
    the p50, p90 and p99 marked."""
    sets = [(name, np.sort(_finite(v, name).ravel())) for name, v in samples.items()]
    if not sets:
        raise InputError("no samples to plot")

    def draw() -> object:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure as MplFigure

        fig = MplFigure(figsize=(4.2 * len(sets), 3.8))
        FigureCanvasAgg(fig)
        for k, (name, x) in enumerate(sets):
            ax = fig.add_subplot(1, len(sets), k + 1)
            cdf_panel(ax, name, x, unit).set_gid(f"cdf-{k}")
            ax.grid(True, linewidth=0.3)
        if title:
            fig.suptitle(title, fontsize=9)
        fig.tight_layout()
        return fig

    render_figure(path, draw)


def render_kv_occupancy(
    t_s: Sequence[float], fraction: Sequence[float], path: str | Path, *, title: str = ""
) -> None:
    """The KV cache's occupied fraction (0..1) over time, with the budget at 1."""
    t, f = _finite(t_s, "times"), _finite(fraction, "fractions")
    if t.shape != f.shape:
        raise InputError("times and fractions must have the same length")

    def draw() -> object:
        fig, ax = new_figure(7, 3.5)
        ax.plot(t, f, linewidth=1)[0].set_gid("occupancy")
        ax.axhline(1.0, color="tab:red", linestyle="--", linewidth=0.8, label="KV budget")
        ax.set_ylim(0, max(1.05, float(f.max()) * 1.05))
        return _finish(fig, ax, ("time (s)", "KV cache occupied"), title)

    render_figure(path, draw)


def figure_for(
    render: Callable[..., None], *args: object, title: str, caption: str = "", **kwargs: object
) -> Figure:
    """`render(*args, path, **kwargs)` drawn to SVG and returned as an inline Figure for the
    HTML report, e.g. `figure_for(render_cdfs, {"TTFT": ttft}, title="TTFT")`."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "figure.svg"
        render(*args, path, **kwargs)
        return Figure(title, inline_svg(path.read_text(encoding="utf-8")), caption)
