"""Terminal rendering of single-device results: the bound first, then every step with numbers."""

from __future__ import annotations

from shardline.basics.dtypes import dtype_bytes
from shardline.basics.units import fmt_bytes, fmt_flops, fmt_int, fmt_num, fmt_rate, fmt_time
from shardline.ops.einsum import EinsumSpec, parse_einsum
from shardline.ops.roofline import RooflineResult

__all__ = ["render_roofline", "bound_line"]


def _size(dtype: str) -> str:
    return f"{dtype_bytes(dtype):g} B"


def bound_line(r: RooflineResult) -> str:
    """The call, made before the arithmetic: which resource binds and why."""
    intensity, ridge = float(r.intensity_flop_per_byte), float(r.ridge_flop_per_byte)
    rate = (
        f"{fmt_rate(r.hardware.flops_per_s, digits=4)} / "
        f"{fmt_rate(r.hardware.mem_bytes_per_s, 'B/s', digits=4)}"
    )
    if r.bound == "compute":
        return (
            f"COMPUTE-BOUND: intensity {intensity:,.4g} FLOP/B >= ridge {ridge:,.4g} FLOP/B "
            f"({rate})"
        )
    return f"MEMORY-BOUND: intensity {intensity:,.4g} FLOP/B < ridge {ridge:,.4g} FLOP/B ({rate})"


def _count_lines(r: RooflineResult, spec: EinsumSpec, dims: dict[str, int]) -> list[str]:
    """FLOPs and bytes, each with its formula and the numbers put in."""
    out: list[str] = []
    all_dims = spec.all_dims
    factor = "2·" if spec.flop_factor == 2 else ""
    numbers = " × ".join(fmt_int(dims[d]) for d in all_dims)
    out.append(
        f"  FLOPs      F = {factor}{'·'.join(all_dims)} = {'2 × ' if factor else ''}{numbers}"
        f" = {fmt_int(r.flops)} FLOP ({fmt_flops(r.flops)})" + _unary_note(spec)
    )
    terms, values = [], []
    for op in spec.operands:
        dtype = r.dtypes[op.name]
        mult = "2·" if (r.accumulate and op is spec.out) else ""
        terms.append(f"{mult}s_{op.name}·{'·'.join(op.dims)}")
        values.append(
            f"{'2 × ' if mult else ''}{_size(str(dtype))} × "
            + " × ".join(fmt_int(dims[d]) for d in op.dims)
        )
    reads = "the input read once" if spec.is_unary else "each input read once"
    out.append(f"  bytes      Q = {' + '.join(terms)}   ({reads}, the output written once)")
    out.append(f"               = {' + '.join(values)}")
    out.append(
        f"               = {' + '.join(fmt_int(r.bytes[op.name]) for op in spec.operands)}"
        f" = {fmt_int(r.bytes['total'])} B ({fmt_bytes(r.bytes['total'])})"
    )
    return out


def _unary_note(spec: EinsumSpec) -> str:
    """The FLOP convention of a single-input einsum, stated where F is counted."""
    return f"  ({spec.unary_convention})" if spec.is_unary else ""


def render_roofline(r: RooflineResult) -> str:
    spec = parse_einsum(r.spec)
    dims = {k: int(v) for k, v in r.dims.items()}
    chip_name = r.chip.display_name if r.chip else r.hardware.name
    sizes = ", ".join(f"{k}={fmt_int(v)}" for k, v in dims.items())
    dtypes = ", ".join(f"{op.name} {r.dtypes[op.name]}" for op in spec.operands)
    out = [  # the call first, then what was asked, then every step
        bound_line(r),
        f"{r.spec}  with {sizes}",
        f"on {chip_name} ({r.hardware.name}); dtypes: {dtypes}; compute in {r.dtypes['compute']}",
        "",
    ]
    out += _count_lines(r, spec, dims)
    out.append(
        f"  intensity  I = F / Q = {fmt_num(r.flops)} / {fmt_num(r.bytes['total'])}"
        f" = {float(r.intensity_flop_per_byte):,.4g} FLOP/B"
    )
    out.append(
        f"  ridge      R = P / W = {fmt_num(r.hardware.flops_per_s)} FLOP/s / "
        f"{fmt_num(r.hardware.mem_bytes_per_s)} B/s = {float(r.ridge_flop_per_byte):,.4g} FLOP/B"
        + ("  (P: the vector units; no matrix product)" if r.compute_unit == "vector" else "")
    )
    out.append(
        f"  t_compute  F / P = {fmt_num(r.flops)} / {fmt_num(r.hardware.flops_per_s)}"
        f" = {fmt_time(r.t_compute_s)}"
    )
    out.append(
        f"  t_memory   Q / W = {fmt_num(r.bytes['total'])} / "
        f"{fmt_num(r.hardware.mem_bytes_per_s)} = {fmt_time(r.t_memory_s)}"
    )
    out.append(
        f"  lower bound  max(t_compute, t_memory) = {fmt_time(r.t_lower_s)}  (perfect overlap)"
    )
    out.append(f"  upper bound  t_compute + t_memory     = {fmt_time(r.t_upper_s)}  (no overlap)")
    if r.predicted_s is not None:
        out.append(
            f"  predicted    {fmt_time(r.predicted_s)}  ({r.predicted_bound}-bound; "
            "achievable rates, quantization and launch overhead; see --json 'prediction')"
        )
    if "a" in r.bytes and "out" in r.bytes and spec.lhs.dims == ("M", "K"):
        out.extend(_critical_lines(r, dims))
    return "\n".join(out) + "\n"


def _critical_lines(r: RooflineResult, dims: dict[str, int]) -> list[str]:
    formula = "smallest M with M·(2KN/P - (s_a·K + s_out·N)/W) >= s_b·K·N/W"
    if r.critical_m is None:
        return [
            f"  critical M {formula}: none; with K={fmt_int(dims['K'])}, N={fmt_int(dims['N'])} "
            "no M makes this compute-bound (the bracket is <= 0)"
        ]
    where = "at or above" if dims["M"] >= r.critical_m else "below"
    return [
        f"  critical M {formula}",
        f"             = {fmt_int(r.critical_m)} (compute-bound from M = {fmt_int(r.critical_m)};"
        f" this M = {fmt_int(dims['M'])} is {where} it)",
    ]
