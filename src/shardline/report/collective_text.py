"""The library's part of a priced collective in words: which (algorithm, protocol) NCCL or RCCL
would run, every pair it weighed with its latency and bandwidth, and the tiers it crossed."""

from __future__ import annotations

from shardline.basics.units import fmt_rate, fmt_time
from shardline.collectives import CollectiveCost

__all__ = ["realistic_line", "library_lines"]


def realistic_line(cost: CollectiveCost, indent: str) -> str:
    """The last line of a collective's arithmetic: how the prediction was made."""
    bound = f"{indent}t = {fmt_time(float(cost.t_s))} (lower bound)"
    if cost.choice is None:
        how = "t_latency + t_bandwidth/eff"
        if cost.library == "xla":  # an end-to-end efficiency (collectives.records.bus_curve_s)
            how = "max(t_latency + t_bandwidth, t_bandwidth/eff)"
        return (
            f"{bound}; realistic {how} = "
            f"{fmt_time(float(cost.predicted_s))} (eff = eff_max·V/(V + V_half) = "
            f"{float(cost.bus_efficiency):.3g})"
        )
    return (
        f"{bound}; {cost.library} runs {cost.algorithm} / {cost.protocol}: "
        f"{fmt_time(float(cost.predicted_s))}"
    )


def library_lines(cost: CollectiveCost) -> list[str]:
    """The library's weighing (a table of every pair it could run) and the tiers."""
    choice = cost.choice
    if choice is None or not isinstance(choice.t_s, float):
        return []
    header = (
        "t = latency + V / (algbw × ramp) for each algorithm and protocol, the fastest runs\n"
        "  ramp: the share of algbw reached at this V (the size ramp: the network's "
        "V/(V + V_half), NCCL's tree correction)"
    )
    if cost.kind == "all_to_all":
        header = (
            "grouped sends to every peer, t = latency + max(network, scale-up) part; "
            "LL for messages V/n^2 of at most 16 KiB, Simple above"
        )
    out = [
        f"LIBRARY ({cost.library}): {header}",
        f"  {'algorithm':<15}{'protocol':<9}{'latency':>10}{'busbw':>13}{'algbw':>13}"
        f"{'ramp':>9}{'t':>11}",
    ]
    v = float(cost.bytes)
    for pair, t in choice.candidates:
        mark = (
            "  <- runs"
            if (pair.algorithm, pair.protocol)
            == (
                cost.algorithm,
                cost.protocol,
            )
            else ""
        )
        out.append(
            f"  {pair.algorithm:<15}{pair.protocol:<9}{fmt_time(float(pair.latency_at(v))):>10}"
            f"{fmt_rate(pair.bus_bytes_per_s, 'B/s'):>13}"
            f"{fmt_rate(pair.alg_bytes_per_s, 'B/s'):>13}{float(pair.ramp(v)):>9.3g}"
            f"{fmt_time(float(t)):>11}{mark}"
        )
    group = choice.group
    tiers = f"  group: {group.ranks} ranks on {group.nodes} node(s)"
    parts = []
    if group.ppn > 1:  # one rank per node: nothing rides the scale-up links
        parts.append(f"inside a node {fmt_rate(group.intra_bus_bytes_per_s, 'B/s')}")
    if group.inter_bus_bytes_per_s is not None:
        parts.append(f"between nodes {fmt_rate(group.inter_bus_bytes_per_s, 'B/s')}")
    if parts:
        tiers += "; bus bandwidth " + ", ".join(parts)
    if group.floor_s > 0:
        tiers += f"; no collective under {fmt_time(group.floor_s)}"
    return [*out, tiers]
