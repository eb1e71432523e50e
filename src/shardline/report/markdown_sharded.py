"""`shardline explain shard`: the Markdown answer for a sharded einsum, in the same shape as the
single-device answer (`shardline.report.markdown`): assumptions, the bound called first, per-device
counts with formulas, times, a sanity check against one device, the bottleneck and changes."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

from shardline.basics.dtypes import dtype_bits
from shardline.basics.units import fmt_bytes, fmt_flops, fmt_int, fmt_num, fmt_rate, fmt_time
from shardline.io.safe_text import md_text
from shardline.ops.einsum import EinsumSpec, parse_einsum
from shardline.ops.roofline import RooflineResult
from shardline.report.markdown import element_size, percent
from shardline.sharding.algebra import ShardedResult

if TYPE_CHECKING:
    from shardline.sharding.compare import Comparison

__all__ = ["explain_sharded"]

GAIN_WORTH_A_CHANGE = 0.99  # a better strategy must be over 1% faster to be suggested


@dataclass(frozen=True)
class _Answer:
    """What every section of the sharded answer reads."""

    r: ShardedResult
    spec: EinsumSpec
    peak: float
    bw: float
    chip_name: str
    times: dict[str, float]  # compute, memory, network

    @classmethod
    def of(cls, r: ShardedResult) -> _Answer:
        hw = r.hardware
        pd = r.per_device
        times = {
            "compute": float(pd.t_compute_s),
            "memory": float(pd.t_memory_s),
            "network": float(r.t_network_s),
        }
        return cls(
            r,
            parse_einsum(r.spec),
            float(hw["flops_per_s"]),
            float(hw["mem_bytes_per_s"]),
            md_text(r.chip.display_name if r.chip else hw["name"]),
            times,
        )


def _headline(a: _Answer) -> list[str]:
    r, times = a.r, a.times
    mesh = ",".join(f"{ax}={s}" for ax, s in r.mesh.items())
    sizes = ", ".join(f"{k} = {fmt_int(v)}" for k, v in r.dims.items())
    limiter = {"compute": "arithmetic", "memory": "HBM traffic", "network": "the collectives"}[
        r.bound
    ]
    order = sorted(times, key=lambda k: -times[k])
    return [
        f"# `{r.spec}` with {sizes} over {r.devices} devices ({mesh}) on {a.chip_name}",
        "",
        f"**Answer: {r.bound.upper()}-BOUND, about {fmt_time(r.t_s)} per step.** "
        + ", ".join(f"t_{k} {fmt_time(times[k])}" for k in order)
        + f": {limiter} set{'s' if r.bound != 'network' else ''} the time. "
        + (
            f"With communication overlapping computation the step takes the max, {fmt_time(r.t_s)}"
            if r.overlap
            else f"Without overlap the step takes {fmt_time(r.t_s)}"
        )
        + f" (lower bound {fmt_time(r.t_lower_s)}, upper bound {fmt_time(r.t_upper_s)}).",
    ]


def _assumptions(a: _Answer) -> list[str]:
    r = a.r
    lines = [
        "## Assumptions",
        "",
        f"- Hardware: {a.chip_name}, P = {fmt_rate(a.peak)} ({r.hardware.get('compute_dtype', '')})"
        f" and HBM W = {fmt_rate(a.bw, 'B/s', digits=4)} per device.",
        "- Network: "
        + "; ".join(f"axis {ax}: {t}" for ax, t in r.topology.items())
        + ". Collectives cost α·hops + bytes/bandwidth (the alpha-beta model); link bandwidth is "
        "one-way per link.",
        "- Dtypes: "
        + ", ".join(f"{k} {v}" for k, v in r.dtypes.items() if k != "compute")
        + f"; compute in {r.dtypes.get('compute')}.",
        f"- Resident on the devices before the step: {', '.join(r.resident) or 'nothing'} "
        "(split as the spec says); each device reads its shards from HBM once (ideal reuse).",
        "- Overlap: "
        + (
            "communication overlaps compute (max)."
            if r.overlap
            else "none: compute, then communicate."
        ),
    ]
    if r.strategy:
        lines.append(f"- Strategy: {r.strategy}.")
    return lines


def _bound_call(a: _Answer) -> list[str]:
    r = a.r
    lines = ["## The bound, called before the arithmetic", ""]
    if r.thresholds:
        for t in r.thresholds:
            side = "below" if t.current < t.value else "at or above"
            lines.append(
                f"- {t.formula} = {t.value:,.4g}; this {t.dim} = {fmt_int(t.current)} is {side} "
                f"it, so the step is {'network-bound' if t.network_bound else 'not network-bound'} "
                "against compute."
            )
    else:
        lines.append(
            "- No threshold applies: "
            + (
                "no collective is needed, so each device is a "
                "single-device roofline on its local shapes."
                if not r.collectives
                else "see the collectives below."
            )
        )
    lines += [f"- {step}" for step in r.steps]
    return lines + [f"- **{r.bound}-bound**."]


def _local_dims(a: _Answer) -> dict[str, int]:
    """Each dim's size on one device, from the local shapes of the operands."""
    local = a.r.per_device.shapes
    dims_local: dict[str, int] = {}
    for op in a.spec.operands:
        for d, size in zip(op.dims, local.get(op.name, []), strict=False):
            dims_local.setdefault(d, int(size))
    return dims_local


def _counts(a: _Answer) -> list[str]:
    r, spec, pd = a.r, a.spec, a.r.per_device
    contracted = [d for d in spec.all_dims if d not in spec.out.dims]
    dims_local = _local_dims(a)
    numbers = " × ".join(fmt_int(dims_local.get(d, 0)) for d in spec.all_dims)
    lines = [
        "## Per-device counts",
        "",
        "| quantity | formula | numbers | value |",
        "|---|---|---|---:|",
        f"| FLOPs | F = {'2·' if contracted else ''}{'·'.join(spec.all_dims)} (local) | "
        f"{'2 × ' if contracted else ''}{numbers} | {fmt_int(pd.flops)} FLOP "
        f"({fmt_flops(pd.flops)}) |",
    ]
    for op in spec.operands:
        dtype = str(r.dtypes.get(op.name, "bf16"))
        shape = " × ".join(fmt_int(v) for v in pd.shapes.get(op.name, []))
        lines.append(
            f"| bytes of {op.name} | s·{'·'.join(op.dims)} (local) | "
            f"{element_size(dtype)} × {shape} | "
            f"{fmt_int(pd.bytes[op.name])} B ({fmt_bytes(pd.bytes[op.name])}) |"
        )
    lines.append(
        f"| bytes total | Q | sum | {fmt_int(pd.bytes['total'])} B "
        f"({fmt_bytes(pd.bytes['total'])}) |"
    )
    for i, c in enumerate(r.collectives, start=1):
        lines.append(
            f"| collective {i}: {c.kind.replace('_', '-')} of {c.operand} over "
            f"{','.join(c.axes)} | {c.cost.formula} | V = {fmt_int(c.bytes)} B ({c.dtype}) | "
            f"{fmt_time(c.t_s)} |"
        )
    lines.append(f"| network bytes sent per device | | | {fmt_bytes(pd.network_bytes)} |")
    return lines


def _times(a: _Answer) -> list[str]:
    r, pd = a.r, a.r.per_device
    return [
        "## Times",
        "",
        f"- t_compute = F / P = {fmt_num(pd.flops)} FLOP / {fmt_num(a.peak)} FLOP/s = "
        f"**{fmt_time(pd.t_compute_s)}**",
        f"- t_memory = Q / W = {fmt_num(pd.bytes['total'])} B / {fmt_num(a.bw)} B/s = "
        f"**{fmt_time(pd.t_memory_s)}**",
        f"- t_network = sum of the collectives = **{fmt_time(r.t_network_s)}**"
        + (
            f" (realistic {fmt_time(r.t_network_predicted_s)} at measured bus efficiency)"
            if r.t_network_predicted_s is not None and r.collectives
            else ""
        ),
        f"- step: {fmt_time(r.t_s)} "
        f"({'max of the three' if r.overlap else 'max(t_compute, t_memory) + t_network'}); "
        f"lower bound {fmt_time(r.t_lower_s)}, upper bound {fmt_time(r.t_upper_s)}",
    ]


def _sanity(a: _Answer, single: RooflineResult | None) -> list[str]:
    r, pd, times = a.r, a.r.per_device, a.times
    conserved = r.devices * int(pd.flops) == int(r.unsharded_flops)
    lines = [
        "## Sanity check",
        "",
        f"- FLOPs are conserved: {r.devices} devices × {fmt_int(pd.flops)} = "
        f"{fmt_int(r.devices * int(pd.flops))} FLOP vs the unsharded "
        f"{fmt_int(r.unsharded_flops)} FLOP"
        + (" ✓" if conserved else " (more: padding or replicated work)")
        + ".",
    ]
    # the local work on the single-device roofline (docs/single-device.md):
    # I = F / Q against R = P / W
    local_i = float(pd.flops) / float(pd.bytes["total"]) if float(pd.bytes["total"]) else math.inf
    ridge = a.peak / a.bw
    local_bound = "compute" if local_i >= ridge else "memory"
    lines.append(
        f"- Each device on the roofline: I = F / Q = {local_i:,.4g} FLOP/B "
        f"{'>=' if local_i >= ridge else '<'} R = P / W = {ridge:,.4g} FLOP/B, so its local work "
        f"is {local_bound}-bound, as t_compute {fmt_time(times['compute'])} "
        f"{'>=' if times['compute'] >= times['memory'] else '<'} t_memory "
        f"{fmt_time(times['memory'])} says."
    )
    if single is not None:
        speedup = float(single.t_lower_s) / float(r.t_s)
        lines.append(
            f"- One device alone takes {fmt_time(single.t_lower_s)} ({single.bound}-bound); "
            f"{r.devices} devices take {fmt_time(r.t_s)}: a {speedup:.2f}x speedup, "
            f"{percent(speedup / r.devices)} of the ideal {r.devices}x."
        )
    return lines


def _strategy_tip(r: ShardedResult, comparison: Comparison | None) -> list[str]:
    if comparison is None or not comparison.strategies:
        return []
    best = comparison.strategies[0]
    if best.t_s < float(r.t_s) * GAIN_WORTH_A_CHANGE:
        return [
            f"Use `{best.spec}` on mesh {','.join(f'{ax}={s}' for ax, s in best.mesh.items())} "
            f"instead: {fmt_time(best.t_s)}, {best.bound}-bound "
            f"({float(r.t_s) / best.t_s:.2f}x "
            "faster; the fastest of the strategies `shardline compare` ranks)"
        ]
    return [
        f"This is already the fastest (within 1%) of the {len(comparison.strategies)} "
        "strategies `shardline compare` ranks"
    ]


def _network_tips(a: _Answer) -> list[str]:
    r, tips = a.r, []
    if r.bound == "network" and r.t_network_predicted_s is not None and not r.overlap:
        overlapped = max(a.times.values())
        tips.append(
            "Overlap the collective with computation (--overlap): the step becomes the max of the "
            f"three, {fmt_time(r.t_s)} -> {fmt_time(overlapped)} "
            f"({float(r.t_s) / overlapped:.2f}x faster)"
        )
    if r.bound == "network" and r.thresholds:
        t = r.thresholds[0]
        tips.append(
            f"Grow {t.dim} past {t.value:,.0f} per step (e.g. more work per collective) so the "
            "collective hides under the math"
        )
    return tips


def _memory_tip(a: _Answer) -> list[str]:
    """Fewer HBM bytes per device: the largest local operand stored at half the width (the compute
    dtype unchanged); the step is re-formed from the three times (docs/sharding.md)."""
    r, pd, times = a.r, a.r.per_device, a.times
    big = max(a.spec.operands, key=lambda op: float(pd.bytes[op.name]))
    current = str(r.dtypes.get(big.name, "bf16"))
    narrow = next(
        (d for d in ("bf16", "int8", "int4") if dtype_bits(d) * 2 == dtype_bits(current)), None
    )
    if narrow is None:
        return []
    op_bytes = float(pd.bytes[big.name])
    t_mem_new = (float(pd.bytes["total"]) - op_bytes / 2) / a.bw
    rest = [times["compute"], t_mem_new]
    step_new = max(*rest, times["network"]) if r.overlap else max(rest) + times["network"]
    return [
        f"Store {big.name} ({percent(op_bytes / float(pd.bytes['total']))} of the bytes each "
        f"device reads) in {narrow} instead of {current} (compute stays "
        f"{r.dtypes.get('compute')}): t_memory {fmt_time(times['memory'])} -> "
        f"{fmt_time(t_mem_new)}, step {fmt_time(r.t_s)} -> {fmt_time(step_new)} "
        f"({float(r.t_s) / step_new:.2f}x faster; network time taken as unchanged)"
    ]


def _bottleneck(a: _Answer, comparison: Comparison | None) -> list[str]:
    r, times = a.r, a.times
    lines = ["## Bottleneck and what would help", ""]
    if r.bound == "network":
        lines.append(
            f"The collectives: {fmt_time(r.t_network_s)} against "
            f"{fmt_time(max(times['compute'], times['memory']))} "
            "of local work."
        )
    elif r.bound == "memory":
        lines.append("HBM bandwidth on each device: the local shapes have low intensity.")
    else:
        lines.append("Peak FLOP/s on each device.")
    lines.append("")
    tips = _strategy_tip(r, comparison) + _network_tips(a)
    if r.bound == "memory":
        tips += _memory_tip(a)
    if r.bound == "compute":
        tips.append(
            f"Add devices: t_compute scales as 1/D, so {r.devices} -> {2 * r.devices} devices "
            f"takes it from {fmt_time(times['compute'])} to {fmt_time(times['compute'] / 2)} "
            "(the collectives do not shrink; check with `shardline compare` at the new count)"
        )
    if not tips:
        tips.append("Nothing simple: the step runs at its roofline")
    return lines + [f"{i}. {tip}." for i, tip in enumerate(tips, start=1)]


def explain_sharded(
    r: ShardedResult,
    comparison: Comparison | None = None,
    *,
    single: RooflineResult | None,
    brief: bool = False,
) -> str:
    """The Markdown answer for a sharded einsum. `comparison` (a
    `shardline.sharding.compare.Comparison` of the same multiply) supplies the best alternative;
    `single` is the whole multiply on one device (`shardline.answers.variants.single_device(r)`),
    None to leave that comparison out. `brief`: only the answer, the bound call, the counts and the
    times (a drill's worked answer)."""
    a = _Answer.of(r)
    if brief:
        parts = [_headline(a), _bound_call(a), _counts(a), _times(a)]
    else:
        parts = [
            _headline(a),
            _assumptions(a),
            _bound_call(a),
            _counts(a),
            _times(a),
            _sanity(a, single),
            _bottleneck(a, comparison),
        ]
    return "\n\n".join("\n".join(part) for part in parts) + "\n"
