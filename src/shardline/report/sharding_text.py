"""Terminal rendering of sharded results, single collectives and strategy comparisons.

The call first (which resource binds, and why), then every count and collective with its formula
and the numbers put in.
"""

from __future__ import annotations

from typing import Any

from shardline.basics.dtypes import dtype_bytes
from shardline.basics.units import fmt_bytes, fmt_flops, fmt_int, fmt_num, fmt_rate, fmt_time
from shardline.collectives import CollectiveCost, CollectiveStep
from shardline.ops.einsum import parse_einsum
from shardline.report.collective_text import library_lines, realistic_line
from shardline.sharding.algebra import PlannedCollective, ShardedResult

__all__ = ["render_sharded", "render_collective", "render_compare", "sharded_bound_line"]

_KIND_WORDS = {
    "all_gather": "all-gather",
    "reduce_scatter": "reduce-scatter",
    "all_reduce": "all-reduce",
    "all_to_all": "all-to-all",
    "send": "send",
}


def _ratio(a: float, b: float) -> str:
    return f"{a / b:.3g}x" if b > 0 else "inf"


def sharded_bound_line(r: ShardedResult) -> str:
    """`NETWORK-BOUND: t_network 523 µs > t_compute 139 µs > t_memory 50 µs; ...`."""
    pd = r.per_device
    times = {
        "compute": float(pd.t_compute_s),
        "memory": float(pd.t_memory_s),
        "network": float(r.t_network_s),
    }
    ranked = sorted(times, key=lambda k: -times[k])
    ranked.remove(r.bound)
    ranked.insert(0, r.bound)
    chain = " >= ".join(f"t_{k} {fmt_time(times[k])}" for k in ranked)
    rule = (
        "with overlap the step takes the max"
        if r.overlap
        else "without overlap the step takes max(t_compute, t_memory) + t_network"
    )
    return f"{r.bound.upper()}-BOUND: {chain}; {rule} = {fmt_time(r.t_s)}"


def _step_numbers(step: CollectiveStep) -> str:
    st = step.stage
    lat = (
        f" + {step.hops:g} × {fmt_time(st.hop_latency_s)}"
        + (f" × {st.hop_links} links/hop" if st.hop_links > 1 else "")
        if step.hops
        else ""
    )
    return (
        f"{step.coefficient:.6g} × {fmt_int(float(step.array_bytes))} B / "
        f"{fmt_num(st.bytes_per_s)} B/s{lat} = {fmt_time(float(step.t_bandwidth_s))}"
        f" + {fmt_time(step.t_latency_s)}"
    )


def _cost_lines(cost: CollectiveCost, indent: str) -> list[str]:
    lines: list[str] = []
    if not cost.steps:
        return [f"{indent}t = 0 (one device)"]
    for step in cost.steps:
        st = step.stage
        rate = fmt_rate(st.bytes_per_s, "B/s")
        where = f"{st.topology} of n = {st.devices} ({st.link}, W = {rate}"
        where += f", {st.w_note})" if st.w_note else ")"
        lines.append(f"{indent}{where}: {step.formula}")
        lines.append(f"{indent}  = {_step_numbers(step)}")
    if len(cost.steps) > 1 and "at once" in cost.combine:
        lines.append(
            f"{indent}combined: the stages' links carry it at once (--multi-axis simultaneous), "
            f"k·(N-1)/N·V / ΣB with B = 2W on a ring, W on a line, k = 2 for an all-reduce"
            + (f"; {cost.combine}" if cost.combine != "at once" else "")
            + f"; latencies added = {fmt_time(float(cost.t_bandwidth_s))} + "
            f"{fmt_time(float(cost.t_latency_s))}"
        )
    elif len(cost.steps) > 1:
        lines.append(
            f"{indent}combined: bandwidth terms by {cost.combine}, latencies added"
            f" = {fmt_time(float(cost.t_bandwidth_s))} + "
            f"{fmt_time(float(cost.t_latency_s))}"
        )
    lines.append(realistic_line(cost, indent))
    return lines


def _collective_lines(i: int, c: PlannedCollective) -> list[str]:
    axes = "".join(c.axes)
    head = (
        f"  {i}. {_KIND_WORDS[c.kind]} {c.operand} over {axes} ({c.cost.devices} devices; "
        f"{c.cost.topology_detail}), {c.dtype}"
    )
    return [
        head,
        f"     why: {c.reason}",
        f"     V = {fmt_int(float(c.bytes))} B ({fmt_bytes(float(c.bytes))})",
        *_cost_lines(c.cost, "     "),
    ]


def _sharded_head(r: ShardedResult) -> list[str]:
    """What was asked: the einsum, the chip and mesh, dtypes, network, padding, residency."""
    pd = r.per_device
    dims = ", ".join(f"{k}={fmt_int(v)}" for k, v in r.dims.items())
    chip = r.chip.display_name if r.chip else r.hardware["name"]
    mesh = ",".join(f"{a}={n}" for a, n in r.mesh.items())
    inputs = [name for name in pd.shapes][:2]
    dtypes = ", ".join(f"{name} {r.dtypes[name]}" for name in pd.shapes)
    head = f"{r.spec}  with {dims}"
    if r.strategy:
        head += f"  (shard {r.strategy})"
    out = [
        head,
        f"on {chip} ({r.hardware['name']}), mesh {mesh} ({r.devices} devices); dtypes: {dtypes}; "
        f"compute in {r.dtypes['compute']}, partial sums in {r.dtypes['reduce']}",
        "network: " + "; ".join(f"{a} = {t}" for a, t in r.topology.items()),
    ]
    if r.padded:
        out.append(
            "padded: "
            + ", ".join(f"{d} {fmt_int(a)} -> {fmt_int(b)}" for d, (a, b) in r.padded.items())
        )
    not_resident = [n for n in inputs if n not in r.resident]
    if not_resident:
        out.append(f"not resident (start 1/{r.devices} per device): {', '.join(not_resident)}")
    return out


def _per_device_lines(r: ShardedResult) -> list[str]:
    """The local multiply: FLOPs, bytes, t_compute and t_memory with their formulas."""
    pd = r.per_device
    names = list(pd.shapes)
    shapes = {n: "[" + ", ".join(fmt_int(x) for x in pd.shapes[n]) + "]" for n in names}
    local_all, contracted = _local_dims(r)
    factor = "2 × " if contracted else ""
    split = r.unsharded_flops / float(pd.flops) if pd.flops else 0
    partial = any(step.startswith("local partial sums") for step in r.steps)
    size = {n: dtype_bytes(r.dtypes[n]) for n in names}
    if partial:  # the output leaves the multiply as partial sums, in the reduction's dtype
        size[names[2]] = dtype_bytes(r.dtypes["reduce"])
    terms = [
        f"{n} {size[n]:g} B × "
        + " × ".join(fmt_int(x) for x in pd.shapes[n])
        + (f" ({r.dtypes['reduce']} partial sums)" if partial and n == names[2] else "")
        for n in names
    ]
    return [
        f"per device  {names[0]}{shapes[names[0]]} · {names[1]}{shapes[names[1]]} -> "
        f"{names[2]}{shapes[names[2]]}",
        f"  FLOPs      F = {factor}"
        + " × ".join(fmt_int(x) for x in local_all)
        + f" = {fmt_int(pd.flops)} FLOP ({fmt_flops(pd.flops)}); total / F = {split:.4g}"
        + _replicated_note(r),
        "  bytes      Q = " + " + ".join(terms),
        "               = "
        + " + ".join(fmt_int(pd.bytes[n]) for n in names)
        + f" = {fmt_int(pd.bytes['total'])} B ({fmt_bytes(pd.bytes['total'])})",
        f"  t_compute  F / P = {fmt_num(pd.flops)} / {fmt_num(r.hardware['flops_per_s'])} "
        f"FLOP/s = {fmt_time(pd.t_compute_s)}",
        f"  t_memory   Q / W = {fmt_num(pd.bytes['total'])} / "
        f"{fmt_num(r.hardware['mem_bytes_per_s'])} B/s = {fmt_time(pd.t_memory_s)}",
    ]


def _collectives_section(r: ShardedResult) -> list[str]:
    if not r.collectives:
        return ["collectives: none (every device has what it needs; t_network = 0)"]
    out = ["collectives"]
    for i, c in enumerate(r.collectives, 1):
        out.extend(_collective_lines(i, c))
    serial = _serial_network_s(r)
    how = "sum" if serial <= float(r.t_network_s) * (1 + 1e-12) else "busiest links"
    if how != "sum":
        out.append(
            f"  the axes' links are disjoint: their collectives run at once, so t_network is the "
            f"busiest links' sum (one after another: {fmt_time(serial)})"
        )
    out.append(
        f"  t_network  {how} = {fmt_time(r.t_network_s)} (realistic "
        f"{fmt_time(r.t_network_predicted_s)}); each device sends "
        f"{fmt_bytes(r.per_device.network_bytes)}"
    )
    return out


def _replicated_note(r: ShardedResult) -> str:
    """When the devices run more than the einsum once (an axis splits none of its dims, or
    padding): what they run together, `total_flops`."""
    total, once = float(r.total_flops), float(r.unsharded_flops)
    if not once or total <= once * (1 + 1e-12):
        return ""
    return (
        f"; all {r.devices} devices run {fmt_int(total)} FLOP = {total / once:.4g} × the einsum "
        "(replicated work)"
    )


def _serial_network_s(r: ShardedResult) -> float:
    """The collectives one after another (the upper bound's network time)."""
    return sum(float(c.t_s) for c in r.collectives)


def _time_section(r: ShardedResult) -> list[str]:
    """The step overlapped and not (the chosen one marked), then the thresholds."""
    pd = r.per_device
    tc, tm, tn = float(pd.t_compute_s), float(pd.t_memory_s), float(r.t_network_s)
    mark_on, mark_off = (
        (" (--overlap, chosen)", "") if r.overlap else ("", " (--no-overlap, chosen)")
    )
    out = [
        "time",
        f"  overlapped{mark_on}: max(t_compute, t_memory, t_network) = {fmt_time(max(tc, tm, tn))}",
        f"  no overlap{mark_off}: max(t_compute, t_memory) + t_network = "
        f"{fmt_time(max(tc, tm) + max(tn, _serial_network_s(r)))}",
        f"  t_lower_s {fmt_time(r.t_lower_s)} (overlapped); t_upper_s "
        f"{fmt_time(r.t_upper_s)} (serial)",
    ]
    if r.thresholds:
        out.append("thresholds")
        for t in r.thresholds:
            where = (
                "below it: t_network > t_compute"
                if t.network_bound
                else "above it: t_compute >= t_network"
            )
            value = f"{t.value:,.0f}" if t.value >= 100 else f"{t.value:.4g}"
            out.append(f"  {t.formula} = {value}  (this {t.dim} = {fmt_int(t.current)} is {where})")
    return out


def _decisions(r: ShardedResult) -> list[str]:
    out = ["decisions"] if r.steps or r.alternatives else []
    if r.alternatives:
        options = "; ".join(
            f"{a['choice']} {fmt_time(a['t_s'])}" + (" (chosen)" if a["chosen"] else "")
            for a in sorted(r.alternatives, key=lambda a: a["t_s"])
        )
        out.append(f"  - legal choices (mesh axis -> dim it splits while multiplying): {options}")
    return out + [f"  - {s}" for s in r.steps]


def render_sharded(r: ShardedResult) -> str:
    out = _sharded_head(r)
    out += ["", sharded_bound_line(r), ""]
    out += _per_device_lines(r)
    out += _collectives_section(r)
    out += _time_section(r)
    out += _decisions(r)
    return "\n".join(out) + "\n"


def _local_dims(r: ShardedResult) -> tuple[list[int], bool]:
    """Each distinct dim's local size, from the local operand shapes (spec order)."""
    spec = parse_einsum(r.spec)
    sizes: dict[str, int] = {}
    for op in spec.operands:
        for d, size in zip(op.dims, r.per_device.shapes[op.name], strict=True):
            sizes.setdefault(d, size)
    return [sizes[d] for d in spec.all_dims], bool(spec.contracted)


def render_collective(cost: CollectiveCost) -> str:
    kind = _KIND_WORDS[cost.kind].upper()
    t_bw, t_lat = float(cost.t_bandwidth_s), float(cost.t_latency_s)
    regime = (
        "LATENCY-BOUND: t_latency {} > t_bandwidth {}"
        if t_lat > t_bw
        else "BANDWIDTH-BOUND: t_bandwidth {} >= t_latency {}"
    )
    first, second = (t_lat, t_bw) if t_lat > t_bw else (t_bw, t_lat)
    out = [
        f"{kind} of {fmt_int(float(cost.bytes))} B ({fmt_bytes(float(cost.bytes))}) over "
        f"{cost.devices} devices: predicted {fmt_time(float(cost.predicted_s))}; "
        f"{fmt_time(float(cost.t_s))} at line rate (alpha-beta lower bound)",
        f"on {cost.topology_detail}; algorithm: {cost.algorithm}"
        + (f", protocol {cost.protocol} ({cost.library})" if cost.protocol else ""),
        "",
        regime.format(fmt_time(first), fmt_time(second)),
        "",
        *_cost_lines(cost, "  "),
    ]
    library = library_lines(cost)
    if library:
        out += ["", *library]
    return "\n".join(out) + "\n"


def _one_vs_two_d(result: Any) -> list[str]:
    """Whether the best 2D mesh beats the best 1D one here, why, and over the device sweep."""
    out: list[str] = []
    b1, b2 = result.best_1d, result.best_2d
    if b1 and b2:
        if result.two_d_wins:
            out.append(
                f"2D beats 1D here: best 2D {fmt_time(b2.t_s)} ({b2.bound}-bound) vs best "
                f"1D {fmt_time(b1.t_s)} ({b1.spec}, {b1.bound}-bound), "
                f"{_ratio(b1.t_s, b2.t_s)} faster"
            )
        else:
            out.append(
                f"1D is as good or better here: best 1D {fmt_time(b1.t_s)} ({b1.bound}-"
                f"bound) vs best 2D {fmt_time(b2.t_s)} ({b2.spec} on {_mesh(b2.mesh)}, "
                f"{b2.bound}-bound)"
            )
    elif b1:
        out.append(
            f"no 2D mesh for {result.devices} devices (it is prime); best 1D {fmt_time(b1.t_s)}"
        )
    if b1 and b2 and result.two_d_wins:
        key = f"t_{b1.bound}"
        before, after = getattr(b1, key + "_s"), getattr(b2, key + "_s")
        out.append(
            f"why: the best 1D is {b1.bound}-bound ({key} {fmt_time(before)}); splitting "
            f"two dims cuts {key} to {fmt_time(after)} ({_ratio(before, after)} lower)"
        )
    return out + _sweep_line(result)


def _sweep_line(result: Any) -> list[str]:
    if not result.sweep:
        return []
    wins = [row["devices"] for row in result.sweep if row["two_d_wins"]]
    rest = [row["devices"] for row in result.sweep if not row["two_d_wins"]]
    span = f"powers of two from 4 to {result.sweep[-1]['devices']}"
    if not wins:
        return [f"for these shapes 2D never beats 1D ({span})"]
    if not [d for d in rest if d > wins[0]]:
        return [f"for these shapes 2D beats 1D from D = {wins[0]} on ({span})"]
    return [
        f"for these shapes 2D beats 1D at D = {', '.join(map(str, wins))}; "
        f"not at {', '.join(map(str, rest))} ({span})"
    ]


def _strategy_table(result: Any, top: int) -> list[str]:
    strategies = result.strategies
    out = [
        f"{'rank':>4}  {'strategy':<36} {'mesh':<10} {'bound':<8} {'t':>9} "
        f"{'t_compute':>10} {'t_memory':>10} {'t_network':>10}  collectives"
    ]
    for i, s in enumerate(strategies[:top], 1):
        out.append(
            f"{i:>4}  {s.spec:<36} {_mesh(s.mesh):<10} {s.bound:<8} {fmt_time(s.t_s):>9} "
            f"{fmt_time(s.t_compute_s):>10} {fmt_time(s.t_memory_s):>10} "
            f"{fmt_time(s.t_network_s):>10}  {'; '.join(s.collectives) or '-'}"
        )
    shown = min(top, len(strategies))
    tail = f"({len(strategies)} strategies, {shown} shown"
    if result.excluded:
        tail += f"; {result.excluded} left out because a split does not divide its dim (--pad)"
    return out + [tail + "; --top N for more, --json for all)"]


def render_compare(result: Any, top: int = 10) -> str:
    best = result.strategies[0]
    mode = "overlap: max" if result.overlap else "no overlap: max(t_compute, t_memory) + t_network"
    out = [
        f"compare C[M,N] = A[M,K]·B[K,N] with M={fmt_int(result.m)}, K={fmt_int(result.k)}, "
        f"N={fmt_int(result.n)} over {result.devices} devices on {result.hardware} "
        f"({result.dtype}, output {result.output}, {mode})",
        "",
        f"BEST: {best.spec} on {_mesh(best.mesh)} ({best.shape}), {best.bound}-bound, "
        f"{fmt_time(best.t_s)}",
    ]
    out += _one_vs_two_d(result)
    out.append("")
    out += _strategy_table(result, top)
    return "\n".join(out) + "\n"


def _mesh(mesh: dict[str, int]) -> str:
    return ",".join(f"{a}={n}" for a, n in mesh.items())
