"""`shardline search` as text: the count and rate, the recommended layout, why the next-best
lose, the Pareto front and the vectorized model's gap to the plan engine."""

from __future__ import annotations

from typing import Any

__all__ = ["render_training", "layout_words"]


def layout_words(lay: dict[str, Any]) -> str:
    """tp8-pp16-dp128 m16 V2 sp selective zero1 on 16,384 x h100-sxm."""
    deg = "-".join(f"{k}{v}" for k, v in lay["degrees"].items() if v > 1) or "single"
    knobs = [f"m{lay['microbatches']}"]
    if lay.get("interleave", 1) > 1:
        knobs.append(f"V{lay['interleave']}")
    if lay.get("sequence_parallel"):
        knobs.append("sp")
    if lay.get("tp_overlap"):
        knobs.append("tp-overlap")
    if lay.get("recompute", "none") != "none":
        knobs.append(f"recompute={lay['recompute']}")
    if lay.get("zero"):
        knobs.append(f"zero{lay['zero']}")
    where = f" on {lay['devices']:,} x {lay['hardware']}" if "devices" in lay else ""
    return f"{deg} {' '.join(knobs)}{where}"


def _numbers(lay: dict[str, Any]) -> str:
    parts = [
        f"step {lay['predicted_step_s']:.3f} s",
        f"MFU {lay['mfu']:.1%}",
        f"{lay['memory_per_device_bytes'] / 1e9:.1f} GB/device",
    ]
    if "days_to_train" in lay:
        parts.append(f"{lay['days_to_train']:.1f} days")
    if "usd" in lay:
        parts.append(f"${lay['usd'] / 1e6:,.1f}M")
    elif "gpu_hours" in lay:
        parts.append(f"{lay['gpu_hours'] / 1e6:,.2f}M GPU-hours")
    if "energy_mwh" in lay:
        parts.append(f"{lay['energy_mwh']:,.0f} MWh")
    return ", ".join(parts)


def render_training(r: dict[str, Any]) -> str:
    w = r["workload"]
    lines = [
        f"{w['name']} training, {w['sequences_per_step']:,} x {w['seq_len']:,} tokens per step",
        f"evaluated {r['evaluated']:,} layouts in {r['vector_s']:.2f} s "
        f"({r['rate_layouts_per_s']:,.0f} layouts/s; {r['elapsed_s']:.2f} s with the re-ranking)",
    ]
    best = r.get("best")
    if best is None:
        lines.append(r.get("why_none", "no layout fits"))
        return "\n".join(lines) + "\n"
    lines += ["", f"best: {layout_words(best)}", f"      {_numbers(best)}", "", "next best:"]
    for alt in r["alternatives"]:
        lines.append(f"  {layout_words(alt)}: {alt['why']}")
    lines += ["", "Pareto front (faster vs cheaper):"]
    for p in r["pareto"]:
        lines.append(f"  {layout_words(p)}: {_numbers(p)}")
    ag = r.get("agreement") or {}
    if ag:
        lines.append(
            f"\nvectorized model vs plan engine on {ag['layouts_compared']} layouts: step time "
            f"within {ag['step_time_rel_gap_max']:.1%} (median {ag['step_time_rel_gap_median']:.2%}"
            f"), memory within {ag['memory_rel_gap_max']:.1%}"
        )
    notes = {p.get("cost_note") for p in [best, *r["pareto"]] if p.get("cost_note")}
    lines += [f"note: {n}" for n in sorted(notes)]
    return "\n".join(lines) + "\n"
