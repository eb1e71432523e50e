"""Terminal rendering for `tile`, `calibrate` and `validate`: the answer first, then the numbers."""

from __future__ import annotations

from typing import Any

from shardline.basics.dtypes import dtype_bytes
from shardline.basics.units import fmt_bytes, fmt_int, fmt_num, fmt_rate, fmt_time
from shardline.ops.tiling import TileReport

__all__ = ["render_tile", "render_calibration", "render_validation", "render_plot", "noise_text"]


def _yes(flag: bool | None) -> str:
    return "unknown" if flag is None else ("yes" if flag else "no")


def _level_lines(r: TileReport) -> list[str]:
    """Each memory level's traffic and ridge, and whether it binds."""
    out: list[str] = []
    for level in r.levels:
        formula = (
            "s_a·M·K·ceil(N/BN) + s_b·K·N·ceil(M/BM) + s_c·M·N"
            if level.name != "HBM" or r.feeding_level == "HBM"
            else "same formula with L2-resident groups of tiles"
        )
        out.append(
            f"  {level.name:<4} traffic   {formula} = {fmt_int(level.bytes)} B "
            f"({fmt_bytes(level.bytes)}); minimum {fmt_bytes(r.minimum_bytes)}"
        )
        out.append(
            f"       ridge     {fmt_rate(r.flops_per_s)} / "
            f"{fmt_rate(level.bytes_per_s, 'B/s')} = "
            f"{level.ridge_flop_per_byte:,.4g} FLOP/B;"
            f" F/traffic = {level.intensity_flop_per_byte:,.4g} FLOP/B "
            f"({'compute' if level.compute_bound else 'memory'}-bound at this level)"
        )
    return out


def render_tile(r: TileReport) -> str:
    t = r.tile
    ridge = next(level for level in r.levels if level.name == r.feeding_level).ridge_flop_per_byte
    verdict = "COMPUTE-BOUND" if r.compute_bound else "MEMORY-BOUND"
    fit = (
        "working set " + ("fits in" if r.fits else "does NOT fit in") + " the per-core memory"
        if r.fits is not None
        else "per-core memory size unknown"
    )
    out = [
        f"{verdict}: tile intensity {r.tile_intensity_flop_per_byte:,.4g} FLOP/B "
        f"{'>=' if r.compute_bound else '<'} {r.feeding_level} ridge {ridge:,.4g} FLOP/B; {fit}",
        f"tile {t.text()} ({r.chosen_by}) for C[{r.m},{r.n}] = A[{r.m},{r.k}] . B[{r.k},{r.n}] "
        f"on {r.hardware}; "
        f"dtypes a {r.dtypes['a']}, b {r.dtypes['b']}, out {r.dtypes['out']}",
        "",
        f"  tile intensity  2·BM·BN / (s_a·BM + s_b·BN) = 2·{t.bm}·{t.bn} / "
        f"({fmt_num(_s(r, 'a'))}·{t.bm} + {fmt_num(_s(r, 'b'))}·{t.bn}) = "
        f"{r.tile_intensity_flop_per_byte:,.4g} FLOP/B",
        f"  rate            {fmt_rate(r.flops_per_s)} "
        f"({r.flops_per_s_source} {r.dtypes['compute']})",
    ]
    out += _level_lines(r)
    limit = (
        "unknown" if r.shared_bytes_per_core is None else f"{fmt_int(r.shared_bytes_per_core)} B"
    )
    out.append(
        f"  working set     {r.stages}·(s_a·BM·BK + s_b·BK·BN) + 4·BM·BN = "
        f"{fmt_int(r.working_set_bytes)} B of {limit} per core: {_yes(r.fits)}"
    )
    q = r.quantization
    out.append(
        f"  quantization    {fmt_int(q['tiles'])} tiles, {fmt_int(q['waves'])} waves on "
        f"{r.cores or 1} cores: wave efficiency {q['wave_efficiency']:.3f}, "
        f"tile efficiency {q['tile_efficiency']:.3f}"
    )
    if r.smallest is None:
        out.append(
            f"  smallest tile that is compute-bound and fits: none (no tile up to 4096x4096 "
            f"reaches {ridge:,.4g} FLOP/B within {limit})"
        )
    else:
        out.append(
            f"  smallest tile that is compute-bound and fits: {r.smallest.text()} "
            f"(intensity {r.smallest_intensity_flop_per_byte:,.4g} FLOP/B, working set "
            f"{fmt_int(r.smallest_working_set_bytes or 0)} B)"
        )
    return "\n".join(out) + "\n"


def _s(r: TileReport, role: str) -> float:
    return dtype_bytes(r.dtypes[role])


def render_calibration(path: str, chip: dict[str, Any], measurements: int) -> str:
    def value(node: Any) -> float:
        return float(node.value) if hasattr(node, "value") else float(node)

    ach = chip["achievable"]
    out = [
        f"wrote {path}: {chip['display_name']} ({measurements} measurements), measured on "
        f"'{chip['measured_on']}'",
        "",
    ]
    for dtype, rate in ach.get("matmul_flops_per_s", {}).items():
        out.append(
            f"  matmul {dtype:<5} achievable {fmt_rate(value(rate))} "
            f"(best seen {fmt_rate(value(chip['peak_flops_per_s'][dtype]))})"
        )
    if "mem_bytes_per_s" in ach:
        out.append(f"  memory read      {fmt_rate(value(ach['mem_bytes_per_s']), 'B/s')}")
    on_chip = chip.get("on_chip", {})
    if "l2_bytes_per_s" in on_chip:
        rate = fmt_rate(value(on_chip["l2_bytes_per_s"]), "B/s")
        out.append(
            f"  cache read       {rate} for the "
            f"first {fmt_bytes(value(on_chip['l2_bytes']))} (effective cache)"
        )
    if "pack_bytes_per_s" in ach:
        out.append(f"  input packing    {fmt_rate(value(ach['pack_bytes_per_s']), 'B/s')}")
    for key, label in (
        ("per_call_overhead_s", "per-call overhead"),
        ("launch_overhead_s", "launch overhead"),
    ):
        if key in ach:
            out.append(f"  {label:<16} {fmt_time(value(ach[key]))}")
    if "unaligned_matmul_efficiency" in ach:
        out.append(
            f"  unaligned K      {value(ach['unaligned_matmul_efficiency']):.3f} of the "
            "aligned rate"
        )
    net = chip.get("interconnect")
    if net:
        out.append(
            f"  collectives      alpha {fmt_time(value(net['hop_latency_s']))}, link "
            f"{fmt_rate(value(net['link_bytes_per_s']), 'B/s')}, bus efficiency "
            f"{value(ach['collective_bus_efficiency']):.3f} at large messages, half of "
            f"it at {fmt_bytes(value(ach['collective_half_efficiency_bytes']))}"
        )
    noise = chip.get("calibration", {}).get("noise")
    if noise:
        out.append(f"  {noise_text(noise)}")
    out.append("")
    out.append(
        f"use it with --hw {path} (every command); check it with `shardline validate --hw {path}`"
    )
    return "\n".join(out) + "\n"


def noise_text(noise: dict[str, object]) -> str:
    """One line: the spread of a run's repeats (and the calibration's, and the reference drift)."""
    if not noise.get("measurements"):
        return "noise: not measured"
    parts = [
        f"noise: repeats spread {noise['repeat_spread']:.1%} (median over "
        f"{noise['measurements']} measurements; 90th percentile {noise['repeat_spread_p90']:.1%})"
    ]
    if noise.get("calibration_repeat_spread") is not None:
        parts.append(f"calibration's {noise['calibration_repeat_spread']:.1%}")
    if noise.get("reference_drift") is not None:
        parts.append(f"reference multiply {noise['reference_drift']:+.1%} since calibration")
    return "; ".join(parts) + f"; limit {noise['limit']:.0%}"


def render_validation(result: Any, files: list[str]) -> str:
    s = result.summary
    verdict = "TARGET MET" if s["target_met"] else "TARGET MISSED"
    noise = s.get("noise", {})
    if noise and not noise.get("conclusive", True):
        verdict += " (NOT CONCLUSIVE: noisy or changed machine)"
    threads = f", {result.threads} thread(s)" if result.threads else ""
    out = [
        f"{verdict}: predicted_s median abs error {s['median_abs_err_predicted']:.1%} (target "
        f"<= 10% and <= half the roofline's {s['median_abs_err_roofline']:.1%}); worst "
        f"{s['max_abs_err_predicted']:.1%}",
        f"{s['cases']} cases on {result.hardware}, measured on '{result.measured_on}' with "
        f"{result.backend}{threads}; median of interleaved repeated samples after warm-up",
        *([noise_text(noise)] if noise else []),
        "",
        f"  {'group':<13} {'dtype':<5} {'M':>6} {'K':>6} {'N':>6} {'measured':>10} "
        f"{'predicted':>10} {'err':>6} {'roofline':>10} {'err':>6}  bound",
    ]
    for c in result.cases:
        out.append(
            f"  {c['group']:<13} {c['dtype']:<5} {c['m']:>6} {c['k']:>6} {c['n']:>6} "
            f"{fmt_time(c['measured_s']):>10} {fmt_time(c['predicted_s']):>10} "
            f"{c['abs_err_predicted']:>6.1%} {fmt_time(c['roofline_s']):>10} "
            f"{c['abs_err_roofline']:>6.1%}  {c['predicted_bound']}"
        )
    out.append("")
    out.append(
        f"  predicted_s: median {s['median_abs_err_predicted']:.1%}, worst "
        f"{s['max_abs_err_predicted']:.1%}, within 10% in {s['predicted_within_10_percent']}"
        f" of {s['cases']}"
    )
    out.append(
        f"  roofline (lower bound): median {s['median_abs_err_roofline']:.1%}, worst "
        f"{s['max_abs_err_roofline']:.1%}"
    )
    if files:
        out.append(f"  wrote {', '.join(files)}")
    return "\n".join(out) + "\n"


def render_plot(path: str, result: Any) -> None:
    """Predicted and roofline time against measured time, log-log, with y = x (matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    measured = [c["measured_s"] for c in result.cases]
    fig, ax = plt.subplots(figsize=(6.5, 6))
    ax.scatter(
        measured,
        [c["roofline_s"] for c in result.cases],
        marker="x",
        color="tab:gray",
        label=f"roofline (median err {result.summary['median_abs_err_roofline']:.1%})",
    )
    ax.scatter(
        measured,
        [c["predicted_s"] for c in result.cases],
        marker="o",
        facecolors="none",
        edgecolors="tab:blue",
        label=f"predicted_s (median err {result.summary['median_abs_err_predicted']:.1%})",
    )
    low, high = min(measured) / 2, max(measured) * 2
    ax.plot([low, high], [low, high], color="black", linewidth=0.8, label="measured = model")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("measured time (s)")
    ax.set_ylabel("model time (s)")
    ax.set_title(f"shardline validate: {result.hardware} ({result.measured_on})", fontsize=9)
    ax.legend(fontsize=8)
    ax.grid(True, which="both", linewidth=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=120, format="png")
    plt.close(fig)
