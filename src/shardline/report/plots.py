"""Plots (PNG and SVG via matplotlib, imported inside the functions): the roofline with the user's
operations, achieved FLOP/s versus batch (seed 001 Question 3), and time per sharding strategy.

The data of each plot is computed first (`shardline.answers.curves.batch_curves` in the core, and
here `roofline_data`, `strategy_bars`: numpy, no matplotlib) so that tests and the HTML report use
the same numbers.
Rendering is deterministic: matplotlib's default style whatever the user's matplotlibrc, no dates
or versions in the metadata, a fixed SVG hash salt, and text drawn as paths.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from shardline.answers.curves import BatchPlot
from shardline.basics.units import fmt_rate
from shardline.errors import InputError
from shardline.hardware import Chip
from shardline.ops.einsum import parse_einsum
from shardline.report.figure_text import place_labels, readable_ticks

if TYPE_CHECKING:
    from shardline.sharding.compare import Comparison

__all__ = [
    "RoofLine",
    "RoofPoint",
    "RooflinePlot",
    "roofline_data",
    "StrategyBar",
    "strategy_bars",
    "strategy_label",
    "render_batch",
    "render_roofline",
    "render_strategies",
    "render_precision",
    "PLOT_SUFFIXES",
    "new_figure",
    "render_figure",
    "draw_roofs",
]

PLOT_SUFFIXES = (".png", ".svg")
SVG_HASH_SALT = "shardline"  # fixed ids in the SVG (matplotlib otherwise salts them randomly)
PNG_DPI = 100
MAX_LABELED_POINTS = 30  # beyond this the points stay, their text labels go
MAX_SEPARATE_POINTS = 500  # beyond this the points are drawn as one scatter per regime


# ------------------------------------------------------------------------------------------------
# Data


@dataclass(frozen=True)
class RoofLine:
    """A roof: min(peak, intensity x bandwidth)."""

    label: str
    flops_per_s: float
    bytes_per_s: float
    style: str = "-"


@dataclass(frozen=True)
class RoofPoint:
    label: str
    intensity_flop_per_byte: float
    flops_per_s: float  # attained on the roofline: F / max(t_compute, t_memory)
    bound: str


@dataclass(frozen=True)
class RooflinePlot:
    chip_name: str
    roofs: list[RoofLine]
    points: list[RoofPoint] = field(default_factory=list)


def roofline_data(
    chip: Chip,
    points: Sequence[RoofPoint] = (),
    *,
    levels: bool = True,
    dtypes: Sequence[str] | None = None,
    level_dtype: str | None = None,
) -> RooflinePlot:
    """One roof per compute dtype (dtypes with equal peaks share one) under the HBM slope, plus the
    on-chip levels' slopes under `level_dtype`'s peak when the chip file gives their bandwidth (a
    hierarchical roofline, docs/prediction.md)."""
    names = list(dtypes) if dtypes else list(chip.peak_flops_per_s)
    by_peak: dict[float, list[str]] = {}
    for d in names:
        by_peak.setdefault(chip.peak(d), []).append(d)
    roofs = [
        RoofLine(f"{'/'.join(ds)} peak, HBM", peak, chip.mem_bytes_per_s)
        for peak, ds in sorted(by_peak.items(), reverse=True)
    ]
    if levels:
        top = chip.peak(level_dtype) if level_dtype else max(by_peak)
        name = f" ({level_dtype})" if level_dtype else ""
        if chip.on_chip.l2_bytes_per_s:
            roofs.append(RoofLine(f"L2{name}", top, chip.on_chip.l2_bytes_per_s, "--"))
        if chip.on_chip.shared_bytes_per_s:
            roofs.append(
                RoofLine(
                    f"{chip.on_chip.core_name} shared memory{name}",
                    top,
                    chip.on_chip.shared_bytes_per_s,
                    ":",
                )
            )
    return RooflinePlot(chip.name, roofs, list(points))


@dataclass(frozen=True)
class StrategyBar:
    label: str
    t_compute_s: float
    t_memory_s: float
    t_network_s: float
    t_lower_s: float
    bound: str


def strategy_label(spec: str, mesh: dict[str, int]) -> str:
    """'M/X=2, N/Y=4' from the strategy's spec and mesh: which dim each mesh axis splits."""
    parsed = parse_einsum(spec)
    splits: dict[str, str] = {}
    for op in parsed.operands:
        for dim, axes in zip(op.dims, op.shards, strict=True):
            if axes and dim not in splits:
                splits[dim] = "".join(axes)
    if not splits:
        return "replicated"
    parts = []
    for dim, names in splits.items():
        sizes = "x".join(f"{a}={mesh.get(a, '?')}" for a in names)
        parts.append(f"{dim}/{sizes}")
    return ", ".join(parts)


def strategy_bars(comparison: Comparison, top: int | None = None) -> list[StrategyBar]:
    """Bars for the strategies of a `shardline.sharding.compare` result, fastest first."""
    strategies = list(comparison.strategies)[: top or None]
    return [
        StrategyBar(
            strategy_label(s.spec, dict(s.mesh)),
            float(s.t_compute_s),
            float(s.t_memory_s),
            float(s.t_network_s),
            float(s.t_s),
            str(s.bound),
        )
        for s in strategies
    ]


# ------------------------------------------------------------------------------------------------
# Rendering


def new_figure(width: float, height: float) -> tuple[Any, Any]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height))
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot(1, 1, 1)


def _save(fig: Any, path: Path) -> None:
    suffix = path.suffix.lower()
    if suffix == ".svg":
        fig.savefig(path, format="svg", metadata={"Date": None, "Creator": "shardline"})
    elif suffix == ".png":
        fig.savefig(path, format="png", dpi=PNG_DPI, metadata={"Software": None})
    else:
        raise InputError(f"plot output {path}: expected .png or .svg, got {suffix or '(none)'!r}")


def render_figure(path: str | Path, draw: Any) -> None:
    """Draw under matplotlib's default style and save deterministically."""
    import matplotlib

    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams.update(
            {"svg.hashsalt": SVG_HASH_SALT, "svg.fonttype": "path", "path.simplify": False}
        )
        fig = draw()
        readable_ticks(fig)
        _save(fig, Path(path))


def _fmt_si(value: float) -> str:
    return fmt_rate(value)


def render_batch(plot: BatchPlot, path: str | Path) -> None:
    def draw() -> object:
        fig, ax = new_figure(8, 4)
        for i, curve in enumerate(plot.curves):
            (line,) = ax.plot(curve.x, curve.y, label=curve.label)
            line.set_gid(f"curve-{i}")
        ax.axhline(
            plot.flops_per_s,
            color="0.5",
            linestyle="--",
            linewidth=0.8,
            label=f"peak {_fmt_si(plot.flops_per_s)}",
        ).set_gid("peak")
        ax.legend()
        ax.set_xlabel("batch size B")
        ax.set_ylabel(f"achieved {plot.compute_dtype} FLOP/s")
        dt = plot.dtypes
        ax.set_title(
            f"X[B,D] {dt.get('a')} · W[D,F] {dt.get('b')} -> {dt.get('out')} on "
            f"{plot.chip_name}: P = {plot.flops_per_s:.3g} FLOP/s, "
            f"W = {plot.mem_bytes_per_s:.3g} B/s",
            fontsize=9,
            parse_math=False,
        )
        ax.grid(True)
        fig.tight_layout()
        return fig

    render_figure(path, draw)


_BOUND_COLORS = {"compute": "tab:green", "memory": "tab:orange", "network": "tab:blue"}


def draw_roofs(ax: Any, plot: RooflinePlot) -> None:
    """Each roof min(P, I·W) over intensities from below the lowest to above the highest."""
    intensities = [p.intensity_flop_per_byte for p in plot.points]
    ridges = [r.flops_per_s / r.bytes_per_s for r in plot.roofs]
    lo = min([*intensities, *ridges, 1.0]) / 4
    hi = max([*intensities, *ridges]) * 4
    x = np.geomspace(lo, hi, 256)
    for i, roof in enumerate(plot.roofs):
        (line,) = ax.plot(
            x,
            np.minimum(roof.flops_per_s, x * roof.bytes_per_s),
            roof.style,
            label=f"{roof.label}: {_fmt_si(roof.flops_per_s)}, ridge "
            f"{roof.flops_per_s / roof.bytes_per_s:,.0f} FLOP/B",
        )
        line.set_gid(f"roof-{i}")


def _draw_points(ax: Any, points: Sequence[RoofPoint]) -> None:
    """One named artist per point (one scatter per regime past MAX_SEPARATE_POINTS); the labels
    come after the layout (`_label_points`)."""
    separate = len(points) <= MAX_SEPARATE_POINTS
    if not separate:  # one scatter per regime: fast for big sheets
        for bound, color in _BOUND_COLORS.items():
            group = [p for p in points if p.bound == bound]
            if group:
                ax.scatter(
                    [p.intensity_flop_per_byte for p in group],
                    [p.flops_per_s for p in group],
                    s=9,
                    color=color,
                    linewidths=0,
                ).set_gid(f"points-{bound}")
    for i, p in enumerate(points):
        if separate:  # one artist each: the SVG names them
            ax.plot(
                [p.intensity_flop_per_byte],
                [p.flops_per_s],
                "o",
                color=_BOUND_COLORS.get(p.bound, "k"),
                markersize=5,
            )[0].set_gid(f"point-{i}")


def _label_points(fig: object, ax: object, points: Sequence[RoofPoint]) -> None:
    """The first MAX_LABELED_POINTS names, each where it overlaps no other text (a name with no
    free place is left out: the JSON and the sheet have every one)."""
    labels = [(p.label, p.intensity_flop_per_byte, p.flops_per_s) for p in points]
    place_labels(fig, ax, labels[:MAX_LABELED_POINTS])


def render_roofline(plot: RooflinePlot, path: str | Path) -> None:
    def draw() -> object:
        fig, ax = new_figure(8, 5)
        draw_roofs(ax, plot)
        _draw_points(ax, plot.points)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (FLOP/byte)")
        ax.set_ylabel("attainable FLOP/s")
        ax.set_title(
            f"roofline of {plot.chip_name}"
            + (
                f" ({len(plot.points)} operations; green compute-bound, orange memory-bound)"
                if plot.points
                else ""
            ),
            fontsize=9,
            parse_math=False,
        )
        ax.grid(True, which="both", linewidth=0.3)
        ax.legend(fontsize=7, loc="lower right")
        fig.tight_layout()
        _label_points(fig, ax, plot.points)
        return fig

    render_figure(path, draw)


def render_strategies(bars: Sequence[StrategyBar], path: str | Path, title: str = "") -> None:
    """Per strategy, three bars (compute, memory, network time) and a marker at the lower bound."""

    def draw() -> object:
        fig, ax = new_figure(max(6.0, 1.2 * len(bars) + 2), 4.5)
        x = np.arange(len(bars))
        width = 0.26
        top = max(
            [max(b.t_compute_s, b.t_memory_s, b.t_network_s, b.t_lower_s) for b in bars] + [0.0]
        )
        scale, unit = next(
            ((f, u) for f, u in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")) if top >= f), (1e-9, "ns")
        )
        parts = (
            ("t_compute_s", "compute", "tab:green"),
            ("t_memory_s", "memory", "tab:orange"),
            ("t_network_s", "network", "tab:blue"),
        )
        for j, (attr, label, color) in enumerate(parts):
            values = [getattr(b, attr) / scale for b in bars]
            container = ax.bar(x + (j - 1) * width, values, width, label=label, color=color)
            for i, patch in enumerate(container.patches):
                patch.set_gid(f"bar-{i}-{label}")
        ax.hlines(
            [b.t_lower_s / scale for b in bars],
            x - 1.5 * width,
            x + 1.5 * width,
            colors="k",
            linewidth=2,
            label="step time",
        ).set_gid("step")
        ax.set_xticks(x)
        ax.set_xticklabels(
            [b.label for b in bars], rotation=20, ha="right", fontsize=8, parse_math=False
        )
        ax.set_ylabel(f"time per step per device ({unit})")
        ax.set_title(title, fontsize=9, parse_math=False)
        ax.legend(fontsize=8)
        ax.grid(True, axis="y", linewidth=0.3)
        fig.tight_layout()
        return fig

    render_figure(path, draw)


def render_precision(
    rows: Sequence[tuple[str, dict[str, float | None]]], path: str | Path, title: str = ""
) -> None:
    """`what-if precision`: per dtype (or mix), bars for its times (compute, memory, network
    where given); a row whose times are None (the chip has no such compute) is labelled so."""
    parts = [
        (key, label, color)
        for key, label, color in (
            ("t_compute_s", "compute", "tab:green"),
            ("t_memory_s", "memory", "tab:orange"),
            ("t_network_s", "network", "tab:blue"),
        )
        if any(key in times for _, times in rows)
    ]

    def draw() -> object:
        fig, ax = new_figure(max(6.0, 1.2 * len(rows) + 2), 4.5)
        x = np.arange(len(rows))
        width = 0.8 / len(parts)
        values = [t.get(k) or 0.0 for _, t in rows for k, _, _ in parts]
        top = max(values + [0.0])
        scale, unit = next(
            ((f, u) for f, u in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs")) if top >= f), (1e-9, "ns")
        )
        for j, (key, label, color) in enumerate(parts):
            heights = [(t.get(key) or 0.0) / scale for _, t in rows]
            offset = (j - (len(parts) - 1) / 2) * width
            container = ax.bar(x + offset, heights, width, label=label, color=color)
            for i, patch in enumerate(container.patches):
                patch.set_gid(f"bar-{i}-{label}")
        names = [
            name if t.get("t_compute_s") is not None else f"{name}\n(no hw support)"
            for name, t in rows
        ]
        ax.set_xticks(x)
        ax.set_xticklabels(names, fontsize=8, parse_math=False)
        ax.set_ylabel(f"time ({unit})")
        ax.set_title(title, fontsize=9, parse_math=False)
        ax.legend(fontsize=8)
        ax.grid(True, axis="y", linewidth=0.3)
        fig.tight_layout()
        return fig

    render_figure(path, draw)
