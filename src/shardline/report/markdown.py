"""`shardline explain`: a Markdown answer in the shape a strong candidate gives.

Assumptions first; the bound called before the arithmetic (from the ridge and a one-line estimate of
the intensity); every count with its formula, the numbers put in and units; the times; a sanity
check against the roofline; the bottleneck and concrete changes, each with its effect computed by
the library (`shardline.answers.variants`, computed by the caller and passed in: nothing is re-run
here). The sharded answer is in `shardline.report.markdown_sharded`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from shardline.answers.variants import Variant, dominant_operand
from shardline.basics.dtypes import dtype_bits
from shardline.basics.units import fmt_bytes, fmt_flops, fmt_int, fmt_num, fmt_rate, fmt_time
from shardline.io.safe_text import md_code, md_text
from shardline.ops.einsum import EinsumSpec, parse_einsum
from shardline.ops.roofline import RooflineResult

__all__ = ["explain_roofline", "Suggestion", "suggestions", "percent", "element_size"]

# A dimension at least this many times smaller than the others sets the intensity (I ~ 2x/s).
SMALL_DIM_RATIO = 8


def element_size(dtype: str) -> str:
    return f"{dtype_bits(dtype) / 8:g} B"


def percent(x: float) -> str:
    return f"{100 * x:.1f}%"


@dataclass(frozen=True)
class Suggestion:
    """A concrete change, the result it gives (computed), and how to read the comparison."""

    change: str
    result: RooflineResult
    effect: str


def _dims(r: RooflineResult) -> dict[str, int]:
    return {k: int(v) for k, v in r.dims.items()}


def _grow(r: RooflineResult, v: Variant) -> Suggestion:
    d, target, bigger = v.dim, v.size, v.result
    dims, t = _dims(r), float(r.t_lower_s)
    share = float(r.bytes[v.operand]) / float(r.bytes["total"])
    per_old, per_new = t / dims[d], float(bigger.t_lower_s) / target
    return Suggestion(
        f"Reuse {v.operand} ({percent(share)} of the bytes) over more work: grow {d} from "
        f"{fmt_int(dims[d])} to {fmt_int(target)}"
        + (" (the critical M)" if target == r.critical_m else ""),
        bigger,
        f"time per unit of {d} falls from {fmt_time(per_old)} to {fmt_time(per_new)} "
        f"({per_old / per_new:.2f}x less), {bigger.bound}-bound "
        f"(I = {float(bigger.intensity_flop_per_byte):,.4g} FLOP/B)",
    )


def _store(r: RooflineResult, v: Variant) -> Suggestion:
    smaller, t = v.result, float(r.t_lower_s)
    return Suggestion(
        f"Store {v.operand} in {v.dtype} instead of {r.dtypes[v.operand]} (compute stays "
        f"{r.dtypes['compute']})",
        smaller,
        f"bytes {fmt_bytes(r.bytes['total'])} -> {fmt_bytes(smaller.bytes['total'])}, "
        f"time {fmt_time(t)} -> {fmt_time(smaller.t_lower_s)} "
        f"({t / float(smaller.t_lower_s):.2f}x faster)",
    )


def _compute(r: RooflineResult, v: Variant) -> Suggestion:
    assert r.chip is not None
    lower, t = v.result, float(r.t_lower_s)
    return Suggestion(
        f"Compute in {v.dtype} ({fmt_rate(r.chip.peak(v.dtype))} peak) instead of "
        f"{r.dtypes['compute']}",
        lower,
        f"time {fmt_time(t)} -> {fmt_time(lower.t_lower_s)} "
        f"({t / float(lower.t_lower_s):.2f}x faster), {lower.bound}-bound; check accuracy",
    )


def _split(r: RooflineResult, v: Variant) -> Suggestion:
    half, t = v.result, float(r.t_lower_s)
    return Suggestion(
        f"Split {v.dim} over 2 devices (each computes half; no communication while the "
        f"inputs that lack {v.dim} are resident on both)",
        half,
        f"time per device {fmt_time(t)} -> {fmt_time(half.t_lower_s)} "
        f"({t / float(half.t_lower_s):.2f}x), {half.bound}-bound",
    )


_WORDS: dict[str, Callable[[RooflineResult, Variant], Suggestion]] = {
    "grow": _grow,
    "store": _store,
    "compute": _compute,
    "split": _split,
}


def suggestions(r: RooflineResult, variants: Sequence[Variant]) -> list[Suggestion]:
    """Changes that attack the binding resource, worded from the variants the caller computed
    (`shardline.answers.variants.roofline_variants(r)`)."""
    out: list[Suggestion] = []
    spec = parse_einsum(r.spec)
    biggest = dominant_operand(r, spec)
    if r.bound == "memory" and all(d in biggest.dims for d in spec.all_dims):
        per = spec.flop_factor
        out.append(
            Suggestion(
                f"No reuse is possible: {biggest.name} has every dimension, so each of its bytes "
                f"feeds about {per / (dtype_bits(str(r.dtypes[biggest.name])) / 8):g} FLOP "
                "whatever the sizes; only fewer bytes help",
                r,
                f"intensity is capped near {per} / s",
            )
        )
    return out + [_WORDS[v.kind](r, v) for v in variants]


def _estimate_line(r: RooflineResult, spec: EinsumSpec, dims: dict[str, int]) -> str:
    """A one-line estimate of the intensity from the shape, made before the exact counts."""
    if spec.lhs.dims != ("M", "K") or spec.rhs.dims != ("K", "N") or spec.out.dims != ("M", "N"):
        ops = " + ".join(f"s_{op.name}·{'·'.join(op.dims)}" for op in spec.operands)
        return (
            f"the intensity is F / Q with F = {'2 × ' if spec.flop_factor == 2 else ''}"
            f"(product of every dim) and Q = {ops}; "
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
    return f" (source: {md_text(text)})" if text else ""


@dataclass(frozen=True)
class _Answer:
    """What every section of the single-device answer reads."""

    r: RooflineResult
    spec: EinsumSpec
    dims: dict[str, int]
    chip_name: str
    compute: str
    peak: float
    bw: float
    intensity: float
    ridge: float

    @classmethod
    def of(cls, r: RooflineResult) -> _Answer:
        return cls(
            r,
            parse_einsum(r.spec),
            _dims(r),
            md_text(r.chip.display_name if r.chip else r.hardware.name),
            str(r.dtypes["compute"]),
            float(r.hardware.flops_per_s),
            float(r.hardware.mem_bytes_per_s),
            float(r.intensity_flop_per_byte),
            float(r.ridge_flop_per_byte),
        )


def _headline(a: _Answer) -> list[str]:
    r = a.r
    sizes = ", ".join(f"{k} = {fmt_int(v)}" for k, v in a.dims.items())
    bound_word = "COMPUTE-BOUND" if r.bound == "compute" else "MEMORY-BOUND"
    limiter = "arithmetic (FLOP/s)" if r.bound == "compute" else "HBM traffic"
    return [
        f"# `{r.spec}` with {sizes} on {a.chip_name}",
        "",
        f"**Answer: {bound_word}, about {fmt_time(r.t_lower_s)}.** The intensity "
        f"({a.intensity:,.4g} FLOP/B) is {'at or above' if r.bound == 'compute' else 'below'} the "
        f"ridge ({a.ridge:,.4g} FLOP/B), so {limiter} sets the time: {fmt_time(r.t_lower_s)} with "
        f"compute and memory overlapped (lower bound), {fmt_time(r.t_upper_s)} without overlap "
        "(upper bound).",
    ]


def _assumptions(a: _Answer) -> list[str]:
    r, compute = a.r, a.compute
    if r.compute_unit == "vector":  # no matrix product: the CUDA cores' / VPU's rate
        peak = f"the vector units' rate P = {fmt_rate(a.peak)} for {compute} (no matrix product)"
        key = f"vector_flops_per_s.{compute}"
        if r.chip is not None and key not in r.chip.sources:  # the fp32 rate stands in
            key = "vector_flops_per_s.fp32"
    else:
        peak = f"peak P = {fmt_rate(a.peak)} dense for {compute} compute"
        key = f"peak_flops_per_s.{compute}"
    return [
        "## Assumptions",
        "",
        f"- Hardware: {a.chip_name} ({md_code(r.hardware.name)}), {peak}{_source(r, key)}; HBM "
        f"bandwidth W = {fmt_rate(a.bw, 'B/s', digits=4)}{_source(r, 'memory.bytes_per_s')}.",
        "- Storage: "
        + ", ".join(
            f"{op.name} {r.dtypes[op.name]} ({element_size(str(r.dtypes[op.name]))}/element)"
            for op in a.spec.operands
        )
        + f"; the math runs at the {compute} rate (the wider input's dtype unless told).",
        _flop_convention(a.spec),
        "- Ideal reuse: each input is read from HBM once and the output written once"
        + (" (and read once more: C += A·B)" if r.accumulate else "")
        + ". This is the minimum traffic; real tiles re-read inputs, so bytes can only be higher.",
        "- Lower bound max(t_compute, t_memory) assumes perfect overlap; upper bound the sum.",
    ]


def _flop_convention(spec: EinsumSpec) -> str:
    if not spec.is_unary:
        return "- One multiply-add is 2 FLOP; peaks are dense (no 2:4 sparsity)."
    convention = spec.unary_convention
    return f"- {convention[0].upper()}{convention[1:]}."


def _bound_call(a: _Answer) -> list[str]:
    r = a.r
    relation = ">=" if r.bound == "compute" else "<"
    return [
        "## The bound, called before the arithmetic",
        "",
        f"- Ridge (critical intensity) R = P / W = {fmt_num(a.peak)} / {fmt_num(a.bw)} = "
        f"{a.ridge:,.4g} FLOP/B: below it HBM cannot feed the math.",
        f"- Estimate: {_estimate_line(r, a.spec, a.dims)}.",
        f"- {a.intensity:,.4g} {relation} {a.ridge:,.4g}: **{r.bound}-bound**.",
    ]


def _counts(a: _Answer) -> list[str]:
    r, spec, dims = a.r, a.spec, a.dims
    all_dims = spec.all_dims
    factor = "2·" if spec.flop_factor == 2 else ""
    lines = [
        "## Counts",
        "",
        "| quantity | formula | numbers | value |",
        "|---|---|---|---:|",
        f"| FLOPs | F = {factor}{'·'.join(all_dims)} | "
        f"{'2 × ' if factor else ''}{' × '.join(fmt_int(dims[d]) for d in all_dims)} | "
        f"{fmt_int(r.flops)} FLOP ({fmt_flops(r.flops)}) |",
    ]
    for op in spec.operands:
        dtype = str(r.dtypes[op.name])
        mult = "2·" if (r.accumulate and op is spec.out) else ""
        lines.append(
            f"| bytes of {op.name} | {mult}s_{op.name}·{'·'.join(op.dims)} | "
            f"{'2 × ' if mult else ''}{element_size(dtype)} × "
            f"{' × '.join(fmt_int(dims[d]) for d in op.dims)}"
            f" | {fmt_int(r.bytes[op.name])} B ({fmt_bytes(r.bytes[op.name])}) |"
        )
    terms = " + ".join(fmt_int(r.bytes[op.name]) for op in spec.operands)
    return lines + [
        f"| bytes total | Q = sum | {terms} | {fmt_int(r.bytes['total'])} B "
        f"({fmt_bytes(r.bytes['total'])}) |",
        f"| intensity | I = F / Q | {fmt_num(r.flops)} / {fmt_num(r.bytes['total'])} | "
        f"{a.intensity:,.4g} FLOP/B |",
    ]


def _times(a: _Answer) -> list[str]:
    r = a.r
    lines = [
        "## Times",
        "",
        f"- t_compute = F / P = {fmt_num(r.flops)} FLOP / {fmt_num(a.peak)} FLOP/s = "
        f"**{fmt_time(r.t_compute_s)}**",
        f"- t_memory = Q / W = {fmt_num(r.bytes['total'])} B / {fmt_num(a.bw)} B/s = "
        f"**{fmt_time(r.t_memory_s)}**",
        f"- lower bound max(t_compute, t_memory) = **{fmt_time(r.t_lower_s)}** (perfect overlap); "
        f"upper bound t_compute + t_memory = {fmt_time(r.t_upper_s)} (no overlap)",
    ]
    if r.predicted_s is not None:
        lines.append(
            f"- realistic prediction (achievable rates, tile quantization, launch overhead): "
            f"**{fmt_time(r.predicted_s)}**, {r.predicted_bound}-bound"
        )
    return lines


def _sanity(a: _Answer) -> list[str]:
    r, peak, bw, intensity = a.r, a.peak, a.bw, a.intensity
    attainable = min(peak, intensity * bw)
    t_roof = float(r.flops) / attainable
    same = abs(t_roof - float(r.t_lower_s)) <= 1e-9 * t_roof
    biggest = dominant_operand(r, a.spec)
    lines = [
        "## Sanity check",
        "",
        f"- On the roofline, attainable FLOP/s = min(P, I·W) = min({fmt_rate(peak)}, "
        f"{intensity:,.4g} × {fmt_rate(bw, 'B/s', digits=4)}) = {fmt_rate(attainable)}; "
        f"F / attainable = {fmt_time(t_roof)}, {'the same as' if same else 'DIFFERENT FROM'} "
        f"the lower bound {fmt_time(r.t_lower_s)}.",
        "- At the lower bound the math runs at "
        f"{percent(float(r.t_compute_s) / float(r.t_lower_s))} "
        f"of peak FLOP/s and HBM at {percent(float(r.t_memory_s) / float(r.t_lower_s))} of its "
        "bandwidth.",
        f"- The largest traffic is {biggest.name}: {fmt_bytes(r.bytes[biggest.name])} "
        f"({percent(float(r.bytes[biggest.name]) / float(r.bytes['total']))} of Q); moving it "
        f"alone takes {fmt_time(float(r.bytes[biggest.name]) / bw)}.",
    ]
    if r.critical_m is not None and "M" in a.dims:
        where = "at or above" if a.dims["M"] >= r.critical_m else "below"
        lines.append(
            f"- Critical M (smallest M that is compute-bound with this K and N): "
            f"{fmt_int(r.critical_m)}; M = {fmt_int(a.dims['M'])} is {where} it, consistent with "
            f"the call."
        )
    return lines


def _bottleneck(a: _Answer, variants: Sequence[Variant]) -> list[str]:
    r = a.r
    lines = ["## Bottleneck and what would help", ""]
    if r.bound == "memory":
        lines.append(
            "HBM bandwidth: the math units idle "
            f"{percent(1 - float(r.t_compute_s) / float(r.t_lower_s))}"
            " of the time waiting for bytes."
        )
    else:
        lines.append(
            f"Peak FLOP/s: memory is busy only {percent(float(r.t_memory_s) / float(r.t_lower_s))}"
            " of the time; fewer bytes would not help."
        )
    lines.append("")
    tips = suggestions(r, variants)
    if not tips:
        lines.append("- Nothing simple: the multiply already runs at its roofline.")
    for i, tip in enumerate(tips, start=1):
        lines.append(f"{i}. {tip.change}: {tip.effect}.")
    return lines


def explain_roofline(r: RooflineResult, variants: Sequence[Variant], *, brief: bool = False) -> str:
    """The Markdown answer for one single-device multiply; `variants` are the alternatives the
    caller computed with `shardline.answers.variants.roofline_variants(r)`. `brief`: only the
    answer, the bound call, the counts and the times (a drill's worked answer)."""
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
            _sanity(a),
            _bottleneck(a, variants),
        ]
    return "\n\n".join("\n".join(part) for part in parts) + "\n"
