"""`shardline explain`: a Markdown answer in the shape a strong candidate gives.

Assumptions first; the bound called before the arithmetic (from the ridge and a one-line estimate of
the intensity); every count with its formula, the numbers put in and units; the times; a sanity
check against the roofline; the bottleneck and concrete changes, each with its effect computed by
the library (not guessed).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from shardline.dtypes import dtype_bits
from shardline.einsum import EinsumSpec, parse_einsum
from shardline.errors import InputError
from shardline.options import Precision
from shardline.roofline import RooflineResult, einsum
from shardline.units import fmt_bytes, fmt_flops, fmt_int, fmt_num, fmt_rate, fmt_time

__all__ = ["explain_roofline", "explain_sharded", "Suggestion", "suggestions"]

# A dimension at least this many times smaller than the others sets the intensity (I ~ 2x/s).
SMALL_DIM_RATIO = 8


def _s(dtype: str) -> str:
    return f"{dtype_bits(dtype) / 8:g} B"


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


@dataclass(frozen=True)
class Suggestion:
    """A concrete change, the result it gives (computed), and how to read the comparison."""

    change: str
    result: RooflineResult
    effect: str


def _dims(r: RooflineResult) -> dict[str, int]:
    return {k: int(v) for k, v in r.dims.items()}


def _rerun(
    r: RooflineResult,
    *,
    dims: dict[str, int] | None = None,
    dtypes: dict[str, str] | None = None,
    compute: str | None = None,
) -> RooflineResult:
    """The same einsum on the same (possibly overridden) chip with some inputs changed."""
    spec = parse_einsum(r.spec)
    assert r.chip is not None
    new_dtypes = {op.name: str(r.dtypes[op.name]) for op in spec.operands}
    new_dtypes.update(dtypes or {})
    return einsum(
        spec,
        dims or _dims(r),
        hw=r.chip,
        dtype=new_dtypes[spec.lhs.name],
        dtypes=new_dtypes,
        precision=Precision(compute=compute or str(r.dtypes["compute"])),
        accumulate=r.accumulate,
    )


def _try(make: Callable[[], RooflineResult]) -> RooflineResult | None:
    try:
        return make()
    except InputError:
        return None


def suggestions(r: RooflineResult) -> list[Suggestion]:
    """Changes that attack the binding resource, each evaluated with the library."""
    spec = parse_einsum(r.spec)
    dims = _dims(r)
    t = float(r.t_lower_s)
    out: list[Suggestion] = []
    if r.bound == "memory":
        biggest = max(spec.operands, key=lambda op: float(r.bytes[op.name]))
        share = float(r.bytes[biggest.name]) / float(r.bytes["total"])
        # 1. reuse the dominant operand over more work: grow the dims it does not have
        free = [d for d in spec.all_dims if d not in biggest.dims]
        if free:
            d = free[0]
            target = None
            if r.critical_m is not None and d == "M" and "M" in dims:
                target = int(r.critical_m)
            if target is None or target <= dims[d]:
                target = dims[d] * 8
            bigger = _try(lambda: _rerun(r, dims={**dims, d: target}))
            if bigger is not None:
                per_old, per_new = t / dims[d], float(bigger.t_lower_s) / target
                out.append(
                    Suggestion(
                        f"Reuse {biggest.name} ({_pct(share)} of the bytes) over more work: grow "
                        f"{d} from "
                        f"{fmt_int(dims[d])} to {fmt_int(target)}"
                        + (" (the critical M)" if target == r.critical_m else ""),
                        bigger,
                        f"time per unit of {d} falls from {fmt_time(per_old)} to "
                        f"{fmt_time(per_new)} "
                        f"({per_old / per_new:.2f}x less), {bigger.bound}-bound "
                        f"(I = {float(bigger.intensity_flop_per_byte):,.4g} FLOP/B)",
                    )
                )
        else:
            out.append(
                Suggestion(
                    f"No reuse is possible: {biggest.name} has every dimension, so each of its "
                    "bytes "
                    f"feeds about {2 / (dtype_bits(str(r.dtypes[biggest.name])) / 8):g} FLOP "
                    "whatever the "
                    "sizes; only fewer bytes help",
                    r,
                    "intensity is capped near 2 / s",
                )
            )
        # 2. store the dominant operand in fewer bits (weight-only quantization: same compute dtype)
        current = str(r.dtypes[biggest.name])
        for narrow in ("int8", "int4"):
            if dtype_bits(narrow) < dtype_bits(current):
                smaller = _try(
                    partial(
                        _rerun, r, dtypes={biggest.name: narrow}, compute=str(r.dtypes["compute"])
                    )
                )
                if smaller is not None:
                    out.append(
                        Suggestion(
                            f"Store {biggest.name} in {narrow} instead of {current} (compute stays "
                            f"{r.dtypes['compute']})",
                            smaller,
                            f"bytes {fmt_bytes(r.bytes['total'])} -> "
                            f"{fmt_bytes(smaller.bytes['total'])}, "
                            f"time {fmt_time(t)} -> {fmt_time(smaller.t_lower_s)} "
                            f"({t / float(smaller.t_lower_s):.2f}x faster)",
                        )
                    )
                break
    else:
        # compute-bound: a faster compute dtype the chip has, then splitting the work
        assert r.chip is not None
        compute = str(r.dtypes["compute"])
        peak = float(r.hardware.flops_per_s)
        faster = [
            d
            for d, p in r.chip.peak_flops_per_s.items()
            if p > peak and dtype_bits(d) < dtype_bits(compute) and not d.startswith("int")
        ]
        if faster:
            narrow = max(faster, key=lambda d: dtype_bits(d))
            lower = _try(
                lambda: _rerun(
                    r, dtypes={op.name: narrow for op in spec.operands[:2]}, compute=narrow
                )
            )
            if lower is not None:
                out.append(
                    Suggestion(
                        f"Compute in {narrow} ({fmt_rate(r.chip.peak(narrow))} peak) instead of "
                        f"{compute}",
                        lower,
                        f"time {fmt_time(t)} -> {fmt_time(lower.t_lower_s)} "
                        f"({t / float(lower.t_lower_s):.2f}x faster), {lower.bound}-bound; check "
                        "accuracy",
                    )
                )
        split = next((d for d in spec.out.dims if d in dims and dims[d] % 2 == 0), None)
        if split is not None:
            half = _try(lambda: _rerun(r, dims={**dims, split: dims[split] // 2}))
            if half is not None:
                out.append(
                    Suggestion(
                        f"Split {split} over 2 devices (each computes half; no communication "
                        "while the "
                        f"inputs that lack {split} are resident on both)",
                        half,
                        f"time per device {fmt_time(t)} -> {fmt_time(half.t_lower_s)} "
                        f"({t / float(half.t_lower_s):.2f}x), {half.bound}-bound",
                    )
                )
    return out


def _estimate_line(r: RooflineResult, spec: EinsumSpec, dims: dict[str, int]) -> str:
    """A one-line estimate of the intensity from the shape, made before the exact counts."""
    if spec.lhs.dims != ("M", "K") or spec.rhs.dims != ("K", "N") or spec.out.dims != ("M", "N"):
        ops = " + ".join(f"s_{op.name}·{'·'.join(op.dims)}" for op in spec.operands)
        return (
            f"the intensity is F / Q with F = 2 × (product of every dim) and Q = {ops}; "
            "compare it with the ridge below"
        )
    m, k, n = dims["M"], dims["K"], dims["N"]
    # the operands by position (an einsum may call them X, W, Y rather than a, b, out)
    a, b, out = spec.lhs.name, spec.rhs.name, spec.out.name
    sa, sb, sc = (dtype_bits(str(r.dtypes[x])) / 8 for x in (a, b, out))
    # C += A·B reads the old C as well as writing it: the output's bytes count twice
    reads = 2 if r.accumulate else 1
    out_term = f"2·s_{out}" if r.accumulate else f"s_{out}"
    exact = f"I = F / Q = 1 / (s_{a}/(2N) + s_{b}/(2M) + {out_term}/(2K))"
    smallest = min((m, "M"), (k, "K"), (n, "N"))
    others = [v for v, name in ((m, "M"), (k, "K"), (n, "N")) if name != smallest[1]]
    if smallest[0] * SMALL_DIM_RATIO <= min(others):
        name = smallest[1]
        s = {"M": sb, "N": sa, "K": reads * sc}[name]
        sym = {"M": f"s_{b}", "N": f"s_{a}", "K": f"({out_term})" if r.accumulate else out_term}[
            name
        ]
        approx = 2 * smallest[0] / s
        return (
            f"{exact}; {name} = {fmt_int(smallest[0])} is much smaller than the other dims, so "
            f"I ≈ 2{name}/{sym} = 2 × {fmt_int(smallest[0])} / {s:g} = {approx:,.4g} FLOP/B"
        )
    if max(m, k, n) <= 2 * min(m, k, n) and sa == sb == sc:
        cube = (m * k * n) ** (1 / 3)
        return (
            f"{exact}; the shape is nearly square (n ≈ {cube:,.0f}), so I ≈ 2n/({2 + reads}s) = "
            f"2 × {cube:,.0f} / ({2 + reads} × {sa:g}) = "
            f"{2 * cube / ((2 + reads) * sa):,.4g} FLOP/B"
        )
    return (
        f"{exact} = {float(r.intensity_flop_per_byte):,.4g} FLOP/B (no single dimension dominates)"
    )


def _source(r: RooflineResult, key: str) -> str:
    if r.chip is None:
        return ""
    text = r.chip.sources.get(key)
    return f" (source: {text})" if text else ""


def explain_roofline(r: RooflineResult) -> str:
    """The Markdown answer for one single-device multiply."""
    spec = parse_einsum(r.spec)
    dims = _dims(r)
    chip_name = r.chip.display_name if r.chip else r.hardware.name
    compute = str(r.dtypes["compute"])
    peak, bw = float(r.hardware.flops_per_s), float(r.hardware.mem_bytes_per_s)
    intensity, ridge = float(r.intensity_flop_per_byte), float(r.ridge_flop_per_byte)
    sizes = ", ".join(f"{k} = {fmt_int(v)}" for k, v in dims.items())
    bound_word = "COMPUTE-BOUND" if r.bound == "compute" else "MEMORY-BOUND"
    relation = ">=" if r.bound == "compute" else "<"
    limiter = "arithmetic (FLOP/s)" if r.bound == "compute" else "HBM traffic"
    lines = [
        f"# `{r.spec}` with {sizes} on {chip_name}",
        "",
        f"**Answer: {bound_word}, about {fmt_time(r.t_lower_s)}.** The intensity "
        f"({intensity:,.4g} FLOP/B) is {'at or above' if r.bound == 'compute' else 'below'} the "
        "ridge "
        f"({ridge:,.4g} FLOP/B), so {limiter} sets the time: {fmt_time(r.t_lower_s)} with compute "
        "and "
        f"memory overlapped (lower bound), {fmt_time(r.t_upper_s)} without overlap (upper bound).",
        "",
        "## Assumptions",
        "",
        f"- Hardware: {chip_name} (`{r.hardware.name}`), peak P = {fmt_rate(peak)} dense for "
        f"{compute} "
        f"compute{_source(r, f'peak_flops_per_s.{compute}')}; HBM bandwidth W = "
        f"{fmt_rate(bw, 'B/s', digits=4)}{_source(r, 'memory.bytes_per_s')}.",
        "- Storage: "
        + ", ".join(
            f"{op.name} {r.dtypes[op.name]} ({_s(str(r.dtypes[op.name]))}/element)"
            for op in spec.operands
        )
        + f"; the math runs at the {compute} rate (the wider input's dtype unless told).",
        "- One multiply-add is 2 FLOP; peaks are dense (no 2:4 sparsity).",
        "- Ideal reuse: each input is read from HBM once and the output written once"
        + (" (and read once more: C += A·B)" if r.accumulate else "")
        + ". This is the minimum traffic; real tiles re-read inputs, so bytes can only be higher.",
        "- Lower bound max(t_compute, t_memory) assumes perfect overlap; upper bound the sum.",
        "",
        "## The bound, called before the arithmetic",
        "",
        f"- Ridge (critical intensity) R = P / W = {fmt_num(peak)} / {fmt_num(bw)} = {ridge:,.4g} "
        "FLOP/B: "
        "below it HBM cannot feed the math.",
        f"- Estimate: {_estimate_line(r, spec, dims)}.",
        f"- {intensity:,.4g} {relation} {ridge:,.4g}: **{r.bound}-bound**.",
        "",
        "## Counts",
        "",
        "| quantity | formula | numbers | value |",
        "|---|---|---|---:|",
    ]
    all_dims = spec.all_dims
    factor = "2·" if spec.contracted else ""
    lines.append(
        f"| FLOPs | F = {factor}{'·'.join(all_dims)} | "
        f"{'2 × ' if factor else ''}{' × '.join(fmt_int(dims[d]) for d in all_dims)} | "
        f"{fmt_int(r.flops)} FLOP ({fmt_flops(r.flops)}) |"
    )
    for op in spec.operands:
        dtype = str(r.dtypes[op.name])
        mult = "2·" if (r.accumulate and op is spec.out) else ""
        lines.append(
            f"| bytes of {op.name} | {mult}s_{op.name}·{'·'.join(op.dims)} | "
            f"{'2 × ' if mult else ''}{_s(dtype)} × "
            f"{' × '.join(fmt_int(dims[d]) for d in op.dims)}"
            f" | {fmt_int(r.bytes[op.name])} B ({fmt_bytes(r.bytes[op.name])}) |"
        )
    lines.append(
        f"| bytes total | Q = sum | {' + '.join(fmt_int(r.bytes[op.name]) for op in spec.operands)}"
        f" | {fmt_int(r.bytes['total'])} B ({fmt_bytes(r.bytes['total'])}) |"
    )
    lines.append(
        f"| intensity | I = F / Q | {fmt_num(r.flops)} / {fmt_num(r.bytes['total'])} | "
        f"{intensity:,.4g} FLOP/B |"
    )
    lines += [
        "",
        "## Times",
        "",
        f"- t_compute = F / P = {fmt_num(r.flops)} FLOP / {fmt_num(peak)} FLOP/s = "
        f"**{fmt_time(r.t_compute_s)}**",
        f"- t_memory = Q / W = {fmt_num(r.bytes['total'])} B / {fmt_num(bw)} B/s = "
        f"**{fmt_time(r.t_memory_s)}**",
        f"- lower bound max(t_compute, t_memory) = **{fmt_time(r.t_lower_s)}** (perfect overlap); "
        f"upper bound t_compute + t_memory = {fmt_time(r.t_upper_s)} (no overlap)",
    ]
    if r.predicted_s is not None:
        lines.append(
            f"- realistic prediction (achievable rates, tile quantization, launch overhead): "
            f"**{fmt_time(r.predicted_s)}**, {r.predicted_bound}-bound"
        )
    attainable = min(peak, intensity * bw)
    t_roof = float(r.flops) / attainable
    same = abs(t_roof - float(r.t_lower_s)) <= 1e-9 * t_roof
    lines += [
        "",
        "## Sanity check",
        "",
        f"- On the roofline, attainable FLOP/s = min(P, I·W) = min({fmt_rate(peak)}, "
        f"{intensity:,.4g} × "
        f"{fmt_rate(bw, 'B/s', digits=4)}) = {fmt_rate(attainable)}; "
        f"F / attainable = {fmt_time(t_roof)}, "
        f"{'the same as' if same else 'DIFFERENT FROM'} "
        f"the lower bound {fmt_time(r.t_lower_s)}.",
        f"- At the lower bound the math runs at {_pct(float(r.t_compute_s) / float(r.t_lower_s))} "
        "of "
        f"peak FLOP/s and HBM at {_pct(float(r.t_memory_s) / float(r.t_lower_s))} of its "
        "bandwidth.",
    ]
    biggest = max(spec.operands, key=lambda op: float(r.bytes[op.name]))
    lines.append(
        f"- The largest traffic is {biggest.name}: {fmt_bytes(r.bytes[biggest.name])} "
        f"({_pct(float(r.bytes[biggest.name]) / float(r.bytes['total']))} of Q); moving it "
        f"alone takes {fmt_time(float(r.bytes[biggest.name]) / bw)}."
    )
    if r.critical_m is not None and "M" in dims:
        where = "at or above" if dims["M"] >= r.critical_m else "below"
        lines.append(
            f"- Critical M (smallest M that is compute-bound with this K and N): "
            f"{fmt_int(r.critical_m)}; M = {fmt_int(dims['M'])} is {where} it, consistent with "
            f"the call."
        )
    lines += ["", "## Bottleneck and what would help", ""]
    if r.bound == "memory":
        lines.append(
            "HBM bandwidth: the math units idle "
            f"{_pct(1 - float(r.t_compute_s) / float(r.t_lower_s))}"
            " of the time waiting for bytes."
        )
    else:
        lines.append(
            f"Peak FLOP/s: memory is busy only {_pct(float(r.t_memory_s) / float(r.t_lower_s))}"
            " of the time; fewer bytes would not help."
        )
    lines.append("")
    tips = suggestions(r)
    if not tips:
        lines.append("- Nothing simple: the multiply already runs at its roofline.")
    for i, tip in enumerate(tips, start=1):
        lines.append(f"{i}. {tip.change}: {tip.effect}.")
    return "\n".join(lines) + "\n"


# ------------------------------------------------------------------------------------------------
# sharded


def _unsharded(spec_text: str) -> EinsumSpec:
    spec = parse_einsum(spec_text)
    plain = " * ".join(f"{op.name}[{','.join(op.dims)}]" for op in (spec.lhs, spec.rhs))
    return parse_einsum(f"{plain} -> {spec.out.name}[{','.join(spec.out.dims)}]")


def explain_sharded(r: Any, comparison: Any = None) -> str:
    """The Markdown answer for a sharded einsum (`shardline.sharding.ShardedResult`); `comparison`
    (a `shardline.compare.Comparison` of the same multiply) supplies the best alternative."""
    spec = parse_einsum(r.spec)
    hw = r.hardware
    peak, bw = float(hw["flops_per_s"]), float(hw["mem_bytes_per_s"])
    chip_name = r.chip.display_name if r.chip else hw["name"]
    pd = r.per_device
    times = {
        "compute": float(pd.t_compute_s),
        "memory": float(pd.t_memory_s),
        "network": float(r.t_network_s),
    }
    mesh = ",".join(f"{a}={s}" for a, s in r.mesh.items())
    sizes = ", ".join(f"{k} = {fmt_int(v)}" for k, v in r.dims.items())
    limiter = {"compute": "arithmetic", "memory": "HBM traffic", "network": "the collectives"}[
        r.bound
    ]
    order = sorted(times, key=lambda k: -times[k])
    lines = [
        f"# `{r.spec}` with {sizes} over {r.devices} devices ({mesh}) on {chip_name}",
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
        "",
        "## Assumptions",
        "",
        f"- Hardware: {chip_name}, P = {fmt_rate(peak)} ({hw.get('compute_dtype', '')}) and HBM "
        f"W = {fmt_rate(bw, 'B/s', digits=4)} per device.",
        "- Network: "
        + "; ".join(f"axis {a}: {t}" for a, t in r.topology.items())
        + ". Collectives cost α·hops + bytes/bandwidth (MODEL.md section 4); link bandwidth is "
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
    lines += ["", "## The bound, called before the arithmetic", ""]
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
    for step in r.steps:
        lines.append(f"- {step}")
    lines += [
        f"- **{r.bound}-bound**.",
        "",
        "## Per-device counts",
        "",
        "| quantity | formula | numbers | value |",
        "|---|---|---|---:|",
    ]
    local = {op: shape for op, shape in pd.shapes.items()}
    lhs = spec.lhs.name
    contracted = [d for d in spec.all_dims if d not in spec.out.dims]
    dims_local: dict[str, int] = {}
    for op in spec.operands:
        for d, size in zip(op.dims, local.get(op.name, []), strict=False):
            dims_local.setdefault(d, int(size))
    numbers = " × ".join(fmt_int(dims_local.get(d, 0)) for d in spec.all_dims)
    lines.append(
        f"| FLOPs | F = {'2·' if contracted else ''}{'·'.join(spec.all_dims)} (local) | "
        f"{'2 × ' if contracted else ''}{numbers} | {fmt_int(pd.flops)} FLOP "
        f"({fmt_flops(pd.flops)}) |"
    )
    for op in spec.operands:
        dtype = str(r.dtypes.get(op.name, "bf16"))
        shape = " × ".join(fmt_int(v) for v in local.get(op.name, []))
        lines.append(
            f"| bytes of {op.name} | s·{'·'.join(op.dims)} (local) | {_s(dtype)} × {shape} | "
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
    lines += [
        "",
        "## Times",
        "",
        f"- t_compute = F / P = {fmt_num(pd.flops)} FLOP / {fmt_num(peak)} FLOP/s = "
        f"**{fmt_time(pd.t_compute_s)}**",
        f"- t_memory = Q / W = {fmt_num(pd.bytes['total'])} B / {fmt_num(bw)} B/s = "
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
        "",
        "## Sanity check",
        "",
        f"- FLOPs are conserved: {r.devices} devices × {fmt_int(pd.flops)} = "
        f"{fmt_int(r.devices * int(pd.flops))} FLOP vs the unsharded {fmt_int(r.total_flops)} FLOP"
        + (
            " ✓"
            if r.devices * int(pd.flops) == int(r.total_flops)
            else " (more: padding or replicated work)"
        )
        + ".",
    ]
    # the local work on the single-device roofline (MODEL.md section 2): I = F / Q against R = P / W
    local_i = float(pd.flops) / float(pd.bytes["total"]) if float(pd.bytes["total"]) else math.inf
    ridge = peak / bw
    local_bound = "compute" if local_i >= ridge else "memory"
    lines.append(
        f"- Each device on the roofline: I = F / Q = {local_i:,.4g} FLOP/B "
        f"{'>=' if local_i >= ridge else '<'} R = P / W = {ridge:,.4g} FLOP/B, so its local work "
        f"is {local_bound}-bound, as t_compute {fmt_time(times['compute'])} "
        f"{'>=' if times['compute'] >= times['memory'] else '<'} t_memory "
        f"{fmt_time(times['memory'])} says."
    )
    single = None
    if r.chip is not None:
        plain = _unsharded(r.spec)
        dtypes = {op.name: str(r.dtypes.get(op.name, "bf16")) for op in plain.operands}
        single = _try(
            lambda: einsum(
                plain,
                dict(r.dims),
                hw=r.chip,
                dtype=dtypes[lhs],
                dtypes=dtypes,
                precision=Precision(compute=str(r.dtypes.get("compute"))),
            )
        )
    if single is not None:
        speedup = float(single.t_lower_s) / float(r.t_s)
        lines.append(
            f"- One device alone takes {fmt_time(single.t_lower_s)} ({single.bound}-bound); "
            f"{r.devices} devices take {fmt_time(r.t_s)}: a {speedup:.2f}x speedup, "
            f"{_pct(speedup / r.devices)} of the ideal {r.devices}x."
        )
    lines += ["", "## Bottleneck and what would help", ""]
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
    tips: list[str] = []
    if comparison is not None and comparison.strategies:
        best = comparison.strategies[0]
        if best.t_s < float(r.t_s) * 0.99:  # a gain under 1% is not worth a change of plan
            tips.append(
                f"Use `{best.spec}` on mesh {','.join(f'{a}={s}' for a, s in best.mesh.items())} "
                f"instead: {fmt_time(best.t_s)}, {best.bound}-bound "
                f"({float(r.t_s) / best.t_s:.2f}x "
                "faster; the fastest of the strategies `shardline compare` ranks)"
            )
        else:
            tips.append(
                f"This is already the fastest (within 1%) of the {len(comparison.strategies)} "
                "strategies `shardline compare` ranks"
            )
    if r.bound == "network" and r.t_network_predicted_s is not None and not r.overlap:
        overlapped = max(times.values())
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
    if r.bound == "memory":
        # fewer HBM bytes per device: the largest local operand stored at half the width (the
        # compute dtype unchanged); the step is re-formed from the three times (MODEL.md section 5)
        big = max(spec.operands, key=lambda op: float(pd.bytes[op.name]))
        current = str(r.dtypes.get(big.name, "bf16"))
        narrow = next(
            (d for d in ("bf16", "int8", "int4") if dtype_bits(d) * 2 == dtype_bits(current)), None
        )
        if narrow is not None:
            op_bytes = float(pd.bytes[big.name])
            t_mem_new = (float(pd.bytes["total"]) - op_bytes / 2) / bw
            rest = [times["compute"], t_mem_new]
            step_new = max(*rest, times["network"]) if r.overlap else max(rest) + times["network"]
            tips.append(
                f"Store {big.name} ({_pct(op_bytes / float(pd.bytes['total']))} of the bytes each "
                f"device reads) in {narrow} instead of {current} (compute stays "
                f"{r.dtypes.get('compute')}): t_memory {fmt_time(times['memory'])} -> "
                f"{fmt_time(t_mem_new)}, step {fmt_time(r.t_s)} -> {fmt_time(step_new)} "
                f"({float(r.t_s) / step_new:.2f}x faster; network time taken as unchanged)"
            )
    if r.bound == "compute":
        tips.append(
            f"Add devices: t_compute scales as 1/D, so {r.devices} -> {2 * r.devices} devices "
            f"takes it from {fmt_time(times['compute'])} to {fmt_time(times['compute'] / 2)} "
            "(the collectives do not shrink; check with `shardline compare` at the new count)"
        )
    if not tips:
        tips.append("Nothing simple: the step runs at its roofline")
    for i, tip in enumerate(tips, start=1):
        lines.append(f"{i}. {tip}.")
    return "\n".join(lines) + "\n"
