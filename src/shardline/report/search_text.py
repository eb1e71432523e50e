"""`shardline search` as text: the count and rate, the recommended layout, why the next-best
lose, the Pareto front and the vectorized model's gap to the plan engine."""

from __future__ import annotations

from typing import Any

from shardline.basics.units import fmt_short, fmt_usd

__all__ = ["render_training", "render_serving", "layout_words"]


def layout_words(lay: dict[str, Any]) -> str:
    """tp8-pp16-dp128 m16 V2 sp selective zero1 on 16,384 x h100-sxm."""
    # a folded layout (parallel folding) names its etp, even 1; edp follows from the rest
    shown = [(k, v) for k, v in lay["degrees"].items() if k != "edp" and (v > 1 or k == "etp")]
    deg = "-".join(f"{k}{v}" for k, v in shown) or "single"
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


def _training_assumed(assumed: dict[str, object]) -> str:
    """The dtype and the execution every layout runs with: "dtype fp8, ep_overlap on, ..."."""

    def word(v: object) -> str:
        if isinstance(v, list | tuple):  # offload: the tensors held in host memory
            return ",".join(map(str, v)) or "none"
        return (
            {True: "on", False: "off", None: "default"}.get(v, str(v))
            if isinstance(v, bool | None)
            else str(v)
        )

    return ", ".join(f"{k} {word(v)}" for k, v in assumed.items())


def _numbers(lay: dict[str, Any]) -> str:
    parts = [
        f"step {lay['predicted_step_s']:.3f} s",
        f"MFU {lay['mfu']:.1%}",
        f"{lay['memory_per_device_bytes'] / 1e9:.1f} GB/device",
    ]
    if "days_to_train" in lay:
        parts.append(f"{lay['days_to_train']:.1f} days")
    if "usd" in lay:
        parts.append(fmt_usd(lay["usd"]))
    elif "gpu_hours" in lay:
        parts.append(f"{fmt_short(lay['gpu_hours'])} GPU-hours")
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
    if r.get("assumed"):
        lines.append(f"assumed: {_training_assumed(r['assumed'])}")
    c = r.get("search_counts")
    if c:
        lines.append(
            f"  {c['fit_in_memory']:,} fit in memory; {c['timed_in_full']:,} timed in full, "
            f"{c['bounded']:,} bounded above the re-ranked set (not timed); "
            f"{c['engine_probes']:,} engine probes, {c['assignments_priced']:,} of "
            f"{c['assignments']:,} degree assignments priced"
        )
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


def _serving_row(row: dict[str, Any]) -> str:
    pp = row.get("pp", 1)
    replicas = row["devices"] // (row["tp"] * pp)
    cost = row.get("usd_per_million_tokens")
    price = f"${cost:.3f} per million output tokens" if cost is not None else "no price"
    layout = f"tp{row['tp']}{_pp_word(row)}"
    if row.get("attention_dp", 1) > 1:
        layout += f" ep{row['ep']} attention-dp{row['attention_dp']}"
    if row.get("pools"):
        pools = row["pools"]
        layout += f", pools {pools['prefill_devices']} prefill : {pools['decode_devices']} decode"
    else:
        layout += f" x {replicas} replica{'s' if replicas > 1 else ''}"
    return (
        f"{row['devices']} x {row['chip']} ({layout}, batch <= {row['max_batch']}): {price}, "
        f"TTFT p99 {1e3 * row['ttft_p99_s']:.0f} ms, TPOT p99 {1e3 * row['tpot_p99_s']:.1f} ms, "
        f"{row['throughput_tokens_per_s']:,.0f} tokens/s"
    )


def _serving_assumed(a: dict[str, object]) -> str:
    """What every serving system was priced with, in one line."""
    dtypes = ", ".join(f"{k} {a[k]}" for k in ("dtype", "weight_dtype", "kv_dtype") if a.get(k))
    chunk = f"chunks of {a['chunk_tokens']:,} prompt tokens" if a["chunk_tokens"] else "no chunks"
    kv = "the whole output" if a["kv_reservation"] == "full_output" else "blocks on demand"
    pools = ", colocated and disaggregated pools" if a.get("disaggregated_pools") else ""
    return (
        f"assumed: {a['engine']} ({dtypes or 'the default dtypes'}), {chunk}, KV reserved for "
        f"{kv}, {a['arrivals']} arrivals{pools}"
    )


def render_serving(r: dict[str, Any]) -> str:
    """The serving search: count and rate, the cheapest system meeting the SLO, the Pareto front
    (cost against latency) with why each faster or cheaper one fails."""
    lines = [
        f"evaluated {r['evaluated']:,} serving systems (chip x devices x tp x batch limit) in "
        f"{r['elapsed_s']:.2f} s ({r['rate_systems_per_s']:,.0f} per second)"
    ]
    if r.get("assumed"):
        lines.append(_serving_assumed(r["assumed"]))
    best = r.get("best")
    if best is None:
        lines.append("no system meets the SLO within the devices searched")
    else:
        lines += ["", f"cheapest meeting the SLO: {_serving_row(best)}"]
    lines += ["", "Pareto front (cost against latency):"]
    for row in r["pareto"]:
        mark = "meets the SLO" if row["meets_slo"] else f"fails: {row['why_not']}"
        lines.append(f"  {_serving_row(row)}; {mark}")
    if r.get("failures"):
        lines += ["", "cheaper systems that fail:"]
        lines += [
            f"  {f['devices']} x {f['chip']} (tp{f['tp']}{_pp_word(f)}, batch <= "
            f"{f['max_batch']}): {f['why']}"
            for f in r["failures"][:8]
        ]
    return "\n".join(lines) + "\n"


def _pp_word(row: dict[str, Any]) -> str:
    """` ppN` for a layout with pipeline stages, else nothing."""
    return f" pp{row['pp']}" if row.get("pp", 1) > 1 else ""
