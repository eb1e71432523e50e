"""Single-device counting and the roofline: FLOPs, minimum HBM bytes, intensity, bound, times.

docs/single-device.md. Everything is vectorized: dimensions may be Python ints (counts stay exact
integers) or numpy arrays that broadcast (float64, exact up to 2**53).
"""

from __future__ import annotations

import dataclasses
import math
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import numpy as np

from shardline.basics.dtypes import canonical_dtype, categorize, dtype_bits
from shardline.basics.kinds import Bound
from shardline.basics.options import Precision, RateOverrides
from shardline.basics.serialize import jsonable
from shardline.basics.units import check_rate, short
from shardline.basics.values import JSONDict, Scalar, Words
from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip
from shardline.ops.cost import Cost, bound_of
from shardline.ops.einsum import MAX_DIM, EinsumSpec, check_dims, check_size, parse_einsum

__all__ = [
    "HardwareUsed",
    "RooflineResult",
    "matmul",
    "einsum",
    "evaluate_einsum",
    "MATMUL_SPEC",
    "operand_bytes",
    "resolve_dtypes",
    "critical_m",
]

MATMUL_SPEC = parse_einsum("a[M,K] * b[K,N] -> out[M,N]")


@dataclass(frozen=True)
class HardwareUsed:
    name: str
    flops_per_s: Scalar
    mem_bytes_per_s: float
    compute_dtype: Words


def on_vector_units(spec: EinsumSpec) -> bool:
    """An einsum that is no matrix product runs on the vector units (CUDA cores, the TPU VPU),
    not the matrix units: an elementwise one (nothing contracted) or a reduction whose two inputs
    have the same dims (a batched dot product), or a single-input map or reduction. A
    matrix-vector product keeps the matrix path."""
    if spec.is_unary or not spec.contracted:
        return True
    return set(spec.lhs.dims) == set(spec.rhs.dims)


def _vector_rate(spec: EinsumSpec, chip: Chip, compute_dtype: Words) -> Scalar | None:
    """The chip's vector rate for a non-matrix einsum, per element for an array of compute dtypes
    (None: the matrix path, also where the chip file gives no vector rate for a dtype)."""
    if not on_vector_units(spec):
        return None
    if not _is_array(compute_dtype):
        return chip.vector_rate(str(compute_dtype))
    names, codes = categorize(compute_dtype)
    rates = [chip.vector_rate(name) for name in names]
    if any(rate is None for rate in rates):
        return None
    return np.array(rates, dtype=np.float64)[codes]


@dataclass(frozen=True)
class RooflineResult:
    """One multiply on one device: its `Cost` (FLOPs, HBM bytes, times; `predicted_s` once
    `shardline.ops.predict.with_prediction` has run) and what it was computed from. The counts and
    times read as attributes; `to_dict` flattens them into the JSON keys."""

    spec: str
    dims: dict[str, Scalar]
    dtypes: dict[str, Words]
    bytes: dict[str, Scalar]
    intensity_flop_per_byte: Scalar
    ridge_flop_per_byte: Scalar
    cost: Cost
    hardware: HardwareUsed
    critical_m: Scalar | None = None
    accumulate: bool = False
    predicted_bound: Words | None = None
    prediction: dict[str, Any] | None = None
    chip: Chip | None = field(default=None, repr=False, compare=False)
    # "vector": no matrix product, priced at the CUDA cores' / VPU's rate (`on_vector_units`)
    compute_unit: str = "matrix"

    @property
    def flops(self) -> Scalar:
        return self.cost.flops

    @property
    def t_compute_s(self) -> Scalar:
        return self.cost.t_compute_s

    @property
    def t_memory_s(self) -> Scalar:
        return self.cost.t_memory_s

    @property
    def t_lower_s(self) -> Scalar:
        return self.cost.t_lower_s

    @property
    def t_upper_s(self) -> Scalar:
        return self.cost.t_upper_s

    @property
    def bound(self) -> Bound | np.ndarray:
        """ "compute" or "memory": the larger of the two times (ties go to compute)."""
        return bound_of(self.cost.t_compute_s, self.cost.t_memory_s)

    @property
    def predicted_s(self) -> Scalar | None:
        """The realistic time, or None before `with_prediction`."""
        return None if self.prediction is None else self.cost.predicted_s

    def to_dict(self) -> JSONDict:
        out = {
            "spec": self.spec,
            "dims": self.dims,
            "dtypes": self.dtypes,
            "flops": self.flops,
            "bytes": self.bytes,
            "intensity_flop_per_byte": self.intensity_flop_per_byte,
            "ridge_flop_per_byte": self.ridge_flop_per_byte,
            "bound": self.bound,
            "t_compute_s": self.t_compute_s,
            "t_memory_s": self.t_memory_s,
            "t_lower_s": self.t_lower_s,
            "t_upper_s": self.t_upper_s,
            "hardware": self.hardware,
            "critical_m": self.critical_m,
            "accumulate": self.accumulate,
        }
        if self.compute_unit != "matrix":
            out["compute_unit"] = self.compute_unit
        if self.prediction is not None:
            out["predicted_s"] = self.predicted_s
            out["predicted_bound"] = self.predicted_bound
            out["prediction"] = self.prediction
        result = jsonable(out)
        return result


def _is_array(value: object) -> TypeGuard[np.ndarray]:
    return isinstance(value, np.ndarray)


def operand_bytes(elements: Scalar, bits: Scalar) -> Scalar:
    """Bytes to hold `elements` values of `bits` each, rounded up to whole bytes (int4: two per
    byte)."""
    if isinstance(elements, int) and isinstance(bits, int):
        return (elements * bits + 7) // 8
    return np.ceil(np.asarray(elements, dtype=np.float64) * bits / 8)


def _dtype_table(dtype: Words, chip: Chip | None, want_peak: bool) -> tuple[Scalar, Scalar | None]:
    """(bits, peak FLOP/s) for a dtype name or an array of names."""
    if isinstance(dtype, np.ndarray):
        names, codes = categorize(dtype)
        bits = np.array([dtype_bits(n) for n in names], dtype=np.float64)[codes]
        peaks = None
        if want_peak and chip is not None:
            peaks = np.array([chip.peak(n) for n in names])[codes]
        return bits, peaks
    bits_one = dtype_bits(dtype)
    return bits_one, (chip.peak(dtype) if want_peak and chip is not None else None)


def resolve_dtypes(
    names: tuple[str, ...],
    dtype: Words | None,
    overrides: dict[str, str | None],
    compute_dtype: str | None,
) -> tuple[Mapping[str, Words], Words]:
    """Per-operand storage dtypes and the compute dtype (docs/single-device.md).

    `names`: the inputs' names, then the output's (two inputs, or one). Each operand takes its
    override or `dtype`. The compute dtype is the one given, else the widest input's (bf16
    activations with int8 weights compute in bf16; a single input computes in its own dtype).
    """
    unknown = set(overrides) - set(names)
    if unknown:
        raise InputError(
            f"--dtypes names unknown operand(s) {', '.join(sorted(unknown))}; "
            f"operands are {', '.join(names)}"
        )
    if isinstance(dtype, np.ndarray):
        distinct, codes = categorize(dtype)
        if any(d != str(dtype.flat[int(np.argmax(codes == i))]) for i, d in enumerate(distinct)):
            dtype = np.array(distinct)[codes]  # spell every element canonically
    else:
        dtype = canonical_dtype(str(dtype))
    dtypes: dict[str, Words] = {}
    for name in names:
        given = overrides.get(name)
        dtypes[name] = canonical_dtype(given) if given else dtype
    if compute_dtype:
        return dtypes, canonical_dtype(compute_dtype)
    lhs, rhs = dtypes[names[0]], dtypes[names[-2]]
    if isinstance(lhs, np.ndarray) or isinstance(rhs, np.ndarray):
        if lhs is not rhs:
            raise InputError(
                "an array of dtypes needs the same dtype for both inputs, or --compute-dtype"
            )
        return dtypes, lhs
    return dtypes, (rhs if dtype_bits(rhs) > dtype_bits(lhs) else lhs)


def _check_dim(value: object, name: str) -> Scalar:
    if _is_array(value):
        arr = np.asarray(value)
        if arr.dtype.kind not in "iuf" or np.any(arr <= 0) or np.any(arr != np.floor(arr)):
            raise InputError(f"dimension {name} must hold positive integers")
        if np.any(arr > MAX_DIM):
            raise InputError(f"dimension {name} holds an absurdly large size (limit {MAX_DIM:,})")
        return arr.astype(np.float64)
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            raise InputError(f"dimension {name} must be a positive integer, got {value!r}")
    return check_size(int(value), f"dimension {name}")


def _check_finite(spec: EinsumSpec, flops: Scalar, total: Scalar) -> None:
    """FLOPs and bytes must fit a float (1.8e308): the times divide them by rates."""
    for value, what in ((flops, "FLOPs"), (total, "bytes")):
        if _is_array(value):
            big = not np.all(np.isfinite(np.asarray(value, dtype=np.float64)))
        else:
            big = bool(value > sys.float_info.max)
        if big:
            raise InputError(
                f"the {what} of {spec.text()} overflow a float (above 1.8e308): the sizes are "
                "too large"
            )


def evaluate_einsum(
    spec: EinsumSpec,
    dims: Mapping[str, object],
    chip: Chip,
    dtypes: Mapping[str, Words],
    compute_dtype: Words,
    *,
    accumulate: bool = False,
) -> RooflineResult:
    """Counts and roofline for one unsharded einsum (two inputs or one) on one chip."""
    sizes = {name: _check_dim(value, name) for name, value in dims.items()}
    check_dims(spec, sizes)
    flops = spec.flop_factor * math.prod(sizes[d] for d in spec.all_dims)
    per_operand: dict[str, Scalar] = {}
    for op in spec.operands:
        bits, _ = _dtype_table(dtypes[op.name], None, want_peak=False)
        elements = math.prod(sizes[d] for d in op.dims)
        per_operand[op.name] = operand_bytes(elements, bits)
    if accumulate:  # beta != 0: the old output is read as well as written
        per_operand[spec.out.name] = 2 * per_operand[spec.out.name]
    total = sum(per_operand.values())
    _check_finite(spec, flops, total)
    unit, peak = "vector", _vector_rate(spec, chip, compute_dtype)
    if peak is None:
        unit, (_, peak) = "matrix", _dtype_table(compute_dtype, chip, want_peak=True)
    assert peak is not None  # the chip is given: the matrix peak of the compute dtype
    return RooflineResult(
        spec=spec.text(),
        dims=sizes,
        dtypes={**dtypes, "compute": compute_dtype},
        bytes={**per_operand, "total": total},
        intensity_flop_per_byte=flops / total,
        ridge_flop_per_byte=peak / chip.mem_bytes_per_s,
        cost=Cost.roofline(flops, total, peak, chip.mem_bytes_per_s),
        hardware=HardwareUsed(chip.name, peak, chip.mem_bytes_per_s, compute_dtype),
        accumulate=accumulate,
        chip=chip,
        compute_unit=unit,
    )


def _flag(value: object, what: str) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise InputError(f"{what} must be True or False, got {short(value)}")
    return bool(value)


def check_rates(rates: RateOverrides | None) -> RateOverrides:
    """The user's rate overrides: None, or RateOverrides of rates of at least 1 per second."""
    if rates is None:
        return RateOverrides()
    if not isinstance(rates, RateOverrides):
        raise InputError(f"rates must be a RateOverrides, got {type(rates).__name__}")
    flops, mem = rates.flops_per_s, rates.mem_bytes_per_s
    return RateOverrides(
        None if flops is None else check_rate(flops, "flops_per_s", "FLOP/s"),
        None if mem is None else check_rate(mem, "mem_bytes_per_s", "B/s"),
    )


def _setup(
    hw: str | Chip, names: tuple[str, ...], precision: Precision, rates: RateOverrides | None
) -> tuple[Chip, Mapping[str, Words], Words]:
    dtypes, compute = resolve_dtypes(
        names, precision.dtype, dict(precision.operands), precision.compute
    )
    chip = resolve_chip(hw)
    rates = check_rates(rates)
    if rates.flops_per_s is not None and isinstance(compute, np.ndarray):
        raise InputError("--flops-per-s needs a single compute dtype")
    chip = chip.with_overrides(
        compute_dtype=None if isinstance(compute, np.ndarray) else compute,
        flops_per_s=rates.flops_per_s,
        mem_bytes_per_s=rates.mem_bytes_per_s,
    )
    return chip, dtypes, compute


# The dtype keywords of `matmul`: the default, one per operand, and the compute dtype.
MATMUL_DTYPE_KEYWORDS = ("dtype", "a_dtype", "b_dtype", "out_dtype", "compute_dtype")


def check_precision(precision: object) -> Precision | None:
    """`precision=`: a Precision or None (a dtype alone is a keyword: dtype="bf16")."""
    if precision is not None and not isinstance(precision, Precision):
        raise InputError(
            f"precision must be a Precision (shardline.basics.options) or None, got "
            f"{short(precision)}; give one dtype as dtype={short(precision)}"
        )
    return precision


def _matmul_precision(precision: Precision | None, keywords: dict[str, Any]) -> Precision:
    """One Precision from `precision=` and the dtype keywords (a keyword wins over the same
    field of `precision`); an unknown keyword is an error that names the valid ones."""
    unknown = sorted(set(keywords) - set(MATMUL_DTYPE_KEYWORDS))
    if unknown:
        raise TypeError(
            f"matmul() got unexpected keyword argument(s) {', '.join(unknown)}; its dtype "
            f"keywords are {', '.join(MATMUL_DTYPE_KEYWORDS)} (or precision=Precision(...))"
        )
    base = check_precision(precision) or Precision()
    operands = dict(base.operands)
    for role in ("a", "b", "out"):
        if keywords.get(f"{role}_dtype"):
            operands[role] = keywords[f"{role}_dtype"]
    dtype = keywords.get("dtype")
    return dataclasses.replace(
        base,
        dtype=dtype if dtype is not None else (base.dtype or "bf16"),
        operands=operands,
        compute=keywords.get("compute_dtype") or base.compute,
    )


def matmul(
    m: Scalar,
    k: Scalar,
    n: Scalar,
    hw: str | Chip = "h100-sxm",
    *,
    precision: Precision | None = None,
    rates: RateOverrides | None = None,
    accumulate: bool = False,
    **dtypes: object,
) -> RooflineResult:
    """C[M,N] = A[M,K] . B[K,N] on one chip: counts, bound, times and the exact critical M.

    Dtypes by keyword: `dtype` (every operand, default bf16; a name or an array of names),
    `a_dtype`, `b_dtype`, `out_dtype` (one operand) and `compute_dtype` (the math), or all of
    them as `precision=Precision(...)`; `rates` replaces the chip's peak FLOP/s and HBM bytes/s.

    >>> r = matmul(8192, 8192, 8192, hw="h100-sxm", dtype="bf16")
    >>> r.flops == 2 * 8192**3, r.bound
    (True, 'compute')
    """
    chosen = _matmul_precision(precision, dtypes)
    accumulate = _flag(accumulate, "accumulate")
    chip, resolved, compute = _setup(hw, ("a", "b", "out"), chosen, rates)
    result = evaluate_einsum(
        MATMUL_SPEC, {"M": m, "K": k, "N": n}, chip, resolved, compute, accumulate=accumulate
    )
    crit = critical_m(
        result.dims["K"],
        result.dims["N"],
        resolved,
        result.hardware.flops_per_s,
        chip.mem_bytes_per_s,
        accumulate=accumulate,
    )
    return dataclasses.replace(result, critical_m=crit)


def _bits(dtype: Words) -> Scalar:
    return _dtype_table(dtype, None, want_peak=False)[0]


def critical_m(
    k: Scalar,
    n: Scalar,
    dtypes: Mapping[str, Words],
    flops_per_s: Scalar,
    mem_bytes_per_s: float,
    *,
    accumulate: bool = False,
) -> Scalar | None:
    """The smallest integer M at which C = A[M,K] B[K,N] is compute-bound (docs/single-device.md).

    Solve M * (2KN/P - (sA*K + sC*N)/W) >= sB*K*N/W; no M exists when the bracket is <= 0.
    The closed form is then checked against the exact bound (byte rounding, float rounding) so
    that the bound flips exactly here. Scalars give an int or None; arrays give floats with NaN.
    """
    k, n = _check_dim(k, "K"), _check_dim(n, "N")
    if not isinstance(dtypes, Mapping) or not {"a", "b", "out"} <= set(dtypes):
        raise InputError(f"dtypes must map a, b and out to dtypes, got {short(dtypes)}")
    flops_per_s = check_rate(flops_per_s, "flops_per_s", "FLOP/s")
    mem_bytes_per_s = check_rate(mem_bytes_per_s, "mem_bytes_per_s", "B/s")
    bits_a, bits_b, bits_c = _bits(dtypes["a"]), _bits(dtypes["b"]), _bits(dtypes["out"])
    out_factor = 2 if _flag(accumulate, "accumulate") else 1
    s_a, s_b, s_c = bits_a / 8, bits_b / 8, out_factor * bits_c / 8
    bracket = 2 * k * n / flops_per_s - (s_a * k + s_c * n) / mem_bytes_per_s
    need = s_b * k * n / mem_bytes_per_s

    def compute_bound(m: Scalar) -> bool | np.ndarray:
        flops = 2 * m * k * n
        total = (
            operand_bytes(m * k, bits_a)
            + operand_bytes(k * n, bits_b)
            + out_factor * operand_bytes(m * n, bits_c)
        )
        return flops / flops_per_s >= total / mem_bytes_per_s

    vector = any(_is_array(v) for v in (k, n, bits_a, bits_b, bits_c, flops_per_s))
    if not vector:
        if bracket <= 0:
            return None
        m = max(1, math.ceil(need / bracket))
        while m > 1 and compute_bound(m - 1):
            m -= 1
        while not compute_bound(m):
            m += 1
        return m
    valid = bracket > 0
    safe = np.where(valid, bracket, 1.0)
    m_arr = np.maximum(1.0, np.ceil(need / safe))
    for _ in range(2):  # float and byte rounding move the answer by at most one step
        m_arr = np.where((m_arr > 1) & compute_bound(m_arr - 1), m_arr - 1, m_arr)
        m_arr = np.where(compute_bound(m_arr), m_arr, m_arr + 1)
    return np.where(valid, m_arr, np.nan)


def einsum(
    spec: str | EinsumSpec,
    dims: Mapping[str, object],
    hw: str | Chip = "h100-sxm",
    dtype: str | None = "bf16",
    *,
    dtypes: dict[str, str] | None = None,
    precision: Precision | None = None,
    rates: RateOverrides | None = None,
    accumulate: bool = False,
) -> RooflineResult:
    """Any einsum in named notation on one chip, e.g.
    `einsum("X[B,D] * W[B,D,F] -> Y[B,F]", {"B": 64, "D": 4096, "F": 4096}, "tpu-v5e", "int8")`,
    or a single-input map or reduction, `einsum("x[B,D] -> y[B]", {"B": 64, "D": 4096})`.

    `dtypes` maps operand names to their own dtypes (`{"W": "int8"}`); `precision` gives the
    compute dtype (and may carry the dtypes instead: `dtype` and `dtypes` win over its fields);
    `rates` replaces the chip's peak FLOP/s and HBM bytes/s.
    """
    parsed = spec if isinstance(spec, EinsumSpec) else parse_einsum(spec)
    if not isinstance(dims, Mapping):
        raise InputError(f"dims must map dimension names to sizes, got {short(dims)}")
    accumulate = _flag(accumulate, "accumulate")
    names = tuple(op.name for op in parsed.operands)
    base = check_precision(precision) or Precision()
    chosen = dataclasses.replace(
        base,
        dtype=dtype if dtype is not None else (base.dtype or "bf16"),
        operands={**base.operands, **(dtypes or {})},
    )
    chip, resolved, compute = _setup(hw, names, chosen, rates)
    return evaluate_einsum(parsed, dims, chip, resolved, compute, accumulate=accumulate)
