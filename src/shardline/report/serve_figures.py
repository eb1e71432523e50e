"""The figures of `serve --plot/--html` and `search --plot/--html` (matplotlib imported inside
the functions, through shardline.report.plots and serving_plots):

- `render_serve_plot`: one file of five panels: the TTFT and TPOT CDFs of the simulation, the KV
  cache's occupancy over time, and TTFT and TPOT against throughput over a sweep of rates up to
  saturation; `serve_figures`: the same as inline SVG figures for the HTML page;
- `search_points`: cost and latency of every point of a search answer (serving: $ per million
  output tokens against p99 TPOT; training: USD, GPU-hours or devices against days to train or
  step time); `render_search_plot` and `search_figures` draw its Pareto front.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from shardline.errors import InputError
from shardline.report.figures import Figure
from shardline.report.plots import render_figure
from shardline.report.serving_plots import (
    cdf_panel,
    figure_for,
    render_cdfs,
    render_kv_occupancy,
    render_latency_throughput,
    render_pareto,
)

if TYPE_CHECKING:
    from shardline.serving.plotdata import ServePlotData

__all__ = [
    "render_serve_plot",
    "serve_figures",
    "search_points",
    "render_search_plot",
    "search_figures",
    "serve_summary",
]


def _cdf_panel(ax: Any, name: str, x: np.ndarray) -> None:
    if len(x) == 0:
        ax.text(0.5, 0.5, "no finished requests", ha="center", transform=ax.transAxes)
        return
    cdf_panel(ax, name, np.sort(x))


def _sweep_panel(ax: Any, sweep: dict[str, np.ndarray], what: str) -> None:
    x = sweep.get("throughput_tokens_per_s", np.zeros(0))
    if len(x) == 0:
        ax.text(0.5, 0.5, "no unsaturated rate", ha="center", transform=ax.transAxes)
        return
    for q in (50, 99):
        ax.plot(x, sweep[f"{what}_p{q}_s"], marker="o", markersize=3, label=f"{what.upper()} p{q}")
    ax.set_xlabel("throughput (output tokens/s)")
    ax.set_ylabel(f"{what.upper()} (s)")
    ax.set_yscale("log")
    ax.legend(fontsize=7)


def render_serve_plot(data: ServePlotData, path: str | Path) -> None:
    """The five panels of a ServePlotData in one PNG or SVG."""

    def draw() -> Any:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure as MplFigure

        fig = MplFigure(figsize=(13, 7.5))
        FigureCanvasAgg(fig)
        axes = [fig.add_subplot(2, 3, k + 1) for k in range(6)]
        _cdf_panel(axes[0], "TTFT", data.ttft_s)
        _cdf_panel(axes[1], "TPOT", data.tpot_s)
        ax = axes[2]
        ax.plot(data.kv_time_s, data.kv_fraction, linewidth=1)
        ax.axhline(1.0, color="tab:red", linestyle="--", linewidth=0.8, label="KV budget")
        ax.set_xlabel("time (s)")
        ax.set_ylabel("KV cache occupied")
        ax.legend(fontsize=7)
        _sweep_panel(axes[3], data.sweep, "ttft")
        _sweep_panel(axes[4], data.sweep, "tpot")
        axes[5].axis("off")
        for a in axes[:5]:
            a.grid(True, linewidth=0.3)
        fig.suptitle(data.title, fontsize=9)
        fig.tight_layout()
        return fig

    render_figure(path, draw)


def serve_figures(data: ServePlotData) -> list[Figure]:
    """The HTML page's figures of a ServePlotData (each as inline SVG)."""
    figs = []
    samples = {k: v for k, v in (("TTFT", data.ttft_s), ("TPOT", data.tpot_s)) if len(v)}
    if samples:
        figs.append(
            figure_for(
                render_cdfs,
                samples,
                title="TTFT and TPOT (simulation)",
                caption="Empirical CDFs over the simulated requests.",
            )
        )
    if len(data.kv_time_s):
        figs.append(
            figure_for(
                render_kv_occupancy,
                data.kv_time_s,
                data.kv_fraction,
                title="KV cache occupancy (simulation, first replica)",
            )
        )
    sweep = data.sweep
    x = sweep.get("throughput_tokens_per_s", np.zeros(0))
    for what in ("ttft", "tpot") if len(x) else ():
        curves = [
            (f"{what.upper()} p{q}", np.column_stack((x, sweep[f"{what}_p{q}_s"])))
            for q in (50, 99)
        ]
        figs.append(
            figure_for(
                render_latency_throughput,
                curves,
                title=f"{what.upper()} against throughput (analytic)",
                caption="Rates from 5% to 98% of the capacity.",
                latency_label=f"{what.upper()} (s)",
            )
        )
    return figs


def serve_summary(result: dict[str, Any]) -> list[tuple[str, str]]:
    """The numbers beside the figures: a `serve` answer's headline values."""

    def fmt(v: Any, scale: float = 1.0, unit: str = "") -> str:
        return "-" if v is None else f"{v * scale:,.4g}{unit}"

    c = result["config"]
    rows = [
        ("model", str(result.get("model"))),
        (
            "hardware",
            f"{c['devices']} x {result.get('hw')}, tp {c['tp']}"
            + (f", pp {c['pp']}" if c.get("pp", 1) > 1 else ""),
        ),
        ("engine", str(result.get("engine"))),
        ("dtype", str(result.get("dtype"))),
        (
            "offered load",
            f"{c['rate_per_s']:,.4g} requests/s, {c['input_tokens']} in / "
            f"{c['output_tokens']} out tokens",
        ),
    ]
    slo = result.get("slo")
    if slo:
        bounds = [
            f"{name} {v * 1e3:,.4g} ms"
            for name, v in (("TTFT", slo["ttft_s"]), ("TPOT", slo["tpot_s"]))
            if v is not None
        ]
        word = "met" if result.get("meets_slo") else "missed"
        rows.append(("SLO", f"{', '.join(bounds)} at p{slo['percentile']}: {word}"))
    rows += [
        ("throughput", fmt(result.get("throughput_tokens_per_s"), unit=" tokens/s")),
        ("capacity", fmt(result.get("capacity_requests_per_s"), unit=" requests/s")),
    ]
    for key, name in (("ttft_s", "TTFT"), ("tpot_s", "TPOT")):
        for q, v in (result.get(key) or {}).items():
            rows.append((f"{name} {q}", fmt(v, 1e3, " ms")))
    for key, unit in (
        ("max_rate_meeting_slo", " requests/s"),
        ("usd_per_million_tokens", " USD"),
        ("joules_per_token", " J"),
    ):
        if key in result:
            rows.append((key.replace("_", " "), fmt(result[key], unit=unit)))
    return rows


def search_points(result: dict[str, Any]) -> dict[str, Any]:
    """Cost, latency and a label of every point of a search answer, with the axes' names."""
    if "workload" not in result and result.get("phase") != "training":
        pts = list(result.get("pareto") or [])
        return {
            "costs": [p["usd_per_million_tokens"] for p in pts],
            "latencies": [p["tpot_p99_s"] for p in pts],
            "labels": [f"{p['devices']}x{p['chip']} tp{p['tp']} b{p['max_batch']}" for p in pts],
            "cost_label": "USD per million output tokens",
            "latency_label": "TPOT p99 (s)",
        }
    front = list(result.get("pareto") or [])
    time_key = "days_to_train" if all(p.get("days_to_train") for p in front) else "predicted_step_s"
    cost_key = next((k for k in ("usd", "gpu_hours") if all(k in p for p in front)), "devices")
    pts = [
        p
        for p in [*front, *(result.get("alternatives") or [])]
        if p.get(time_key) is not None and p.get(cost_key) is not None
    ]
    return {
        "costs": [p[cost_key] for p in pts],
        "latencies": [p[time_key] for p in pts],
        "labels": [
            f"{p['devices']}x{p['hardware']} "
            + ",".join(f"{k}{v}" for k, v in p["degrees"].items() if v > 1)
            for p in pts
        ],
        "cost_label": {"usd": "USD", "gpu_hours": "GPU-hours", "devices": "devices"}[cost_key],
        "latency_label": "days to train" if time_key == "days_to_train" else "step time (s)",
    }


def render_search_plot(result: dict[str, object], path: str | Path, title: str = "") -> None:
    """The Pareto front (cost against latency) of a search answer."""
    p = search_points(result)
    if not p["costs"]:
        raise InputError("the search found no option to plot")
    render_pareto(
        p["costs"],
        p["latencies"],
        path,
        labels=p["labels"],
        title=title,
        cost_label=p["cost_label"],
        latency_label=p["latency_label"],
    )


def search_figures(result: dict[str, object], title: str = "") -> list[Figure]:
    if not search_points(result)["costs"]:
        return []
    return [
        figure_for(
            render_search_plot, result, title="Pareto front: cost against latency", caption=title
        )
    ]
