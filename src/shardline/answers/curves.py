"""Achieved FLOP/s versus batch (or M) for fixed (D, F) weights: the data behind the batch plot and
the report's curves (pure: numpy and the roofline, no plotting).

For X[B,D] . W[D,F] -> Y[B,F], achieved FLOP/s = F / max(F/P, Q/W) (docs/single-device.md) with the
exact bytes Q = s_x·B·D + s_w·D·F + s_y·B·F, one vectorized `matmul` call per (D, F).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shardline.answers.sheet_model import SheetResult
from shardline.basics.options import Precision, RateOverrides
from shardline.hardware import Chip
from shardline.ops.roofline import matmul

__all__ = [
    "Curve",
    "BatchPlot",
    "batch_curves",
    "SheetCurve",
    "sheet_curves",
    "MAX_CURVES",
    "CURVE_POINTS",
]

MAX_CURVES = 6  # achieved-FLOP/s-versus-M curves for the costliest (K, N, dtype) shapes
CURVE_POINTS = 160


@dataclass(frozen=True)
class Curve:
    label: str
    x: np.ndarray
    y: np.ndarray
    critical_x: float | None = None  # where the curve turns compute-bound


@dataclass(frozen=True)
class BatchPlot:
    """Achieved FLOP/s = F / max(F/P, Q/W) versus batch B for X[B,D] . W[D,F] -> Y[B,F]."""

    curves: list[Curve]
    flops_per_s: float
    mem_bytes_per_s: float
    compute_dtype: str
    chip_name: str
    dtypes: dict[str, str]


def batch_curves(
    shapes: Sequence[tuple[int, int]],
    batch: np.ndarray,
    hw: str | Chip,
    precision: Precision | None = None,
    rates: RateOverrides | None = None,
) -> BatchPlot:
    """One vectorized library call per (D, F): exact bytes, not the small-B approximation.
    `precision` names the storage dtypes ("a", "b", "out") and the compute dtype (bf16 unless
    told); `rates` replaces the chip's peak FLOP/s and HBM bandwidth."""
    precision = precision or Precision("bf16")
    rates = rates or RateOverrides()
    curves: list[Curve] = []
    first = None
    for d, f in shapes:
        r = matmul(
            batch,
            d,
            f,
            hw=hw,
            dtype=precision.dtype,
            a_dtype=precision.operands.get("a"),
            b_dtype=precision.operands.get("b"),
            out_dtype=precision.operands.get("out"),
            compute_dtype=precision.compute,
            rates=rates,
        )
        first = first or r
        achieved = np.asarray(r.flops, dtype=np.float64) / np.asarray(r.t_lower_s, dtype=np.float64)
        crit = r.critical_m
        crit_value = (
            None
            if crit is None or not np.isfinite(np.atleast_1d(crit)[0])
            else float(np.atleast_1d(crit)[0])
        )
        label = f"F=D={d}" if d == f else f"D={d}, F={f}"
        curves.append(Curve(label, np.asarray(batch, dtype=np.float64), achieved, crit_value))
    assert first is not None
    return BatchPlot(
        curves=curves,
        flops_per_s=float(first.hardware.flops_per_s),
        mem_bytes_per_s=float(first.hardware.mem_bytes_per_s),
        compute_dtype=str(first.dtypes["compute"]),
        chip_name=first.hardware.name,
        dtypes={k: str(v) for k, v in first.dtypes.items()},
    )


@dataclass(frozen=True)
class SheetCurve:
    """Achieved FLOP/s versus M for one (K, N, dtype) shape of a sheet; `members` are the sheet's
    rows of that shape, costliest first."""

    k: int
    n: int
    dtype: str
    members: list[int]
    m: np.ndarray
    curve: Curve


def _costliest_shapes(result: SheetResult) -> dict[tuple[int, int, str], list[int]]:
    """The computed rows grouped by (K, N, dtype), groups and rows by count x lower bound."""
    table, cols = result.table, result.columns
    default = result.summary["dtype"]
    dtypes = table.dtype if table.dtype is not None else np.full(len(table), "", dtype=object)
    weight = np.where(result.ok, table.count, 0) * np.nan_to_num(cols["t_lower_s"])
    seen: dict[tuple[int, int, str], list[int]] = {}
    for i in np.argsort(-weight, kind="stable").tolist():
        if not result.ok[i]:
            continue
        shape = (int(table.k[i]), int(table.n[i]), str(dtypes[i]) or default)
        seen.setdefault(shape, []).append(i)
    return seen


def sheet_curves(
    result: SheetResult, max_curves: int = MAX_CURVES, points: int = CURVE_POINTS
) -> list[SheetCurve]:
    """Curves for the `max_curves` costliest shapes of a sheet, M from 1 to past the larger of
    twice the largest M of the shape and four times its critical M, on a geometric grid."""
    table, choice = result.table, result.choice
    out: list[SheetCurve] = []
    for (k, n, dt), members in list(_costliest_shapes(result).items())[:max_curves]:
        top_m = max(int(table.m[j]) for j in members)
        crit = result.columns["critical_m"][members[0]]
        hi = max(2 * top_m, 4 * int(crit) if math.isfinite(crit) else 0, 16)
        m = np.unique(np.geomspace(1, hi, points).round().astype(np.int64))
        precision = Precision(
            dt,
            {"a": choice.a_dtype, "b": choice.b_dtype, "out": choice.out_dtype},
            choice.compute_dtype,
        )
        plot = batch_curves([(k, n)], m, result.chip, precision, result.rates)
        out.append(SheetCurve(k, n, dt, members, m, plot.curves[0]))
    return out
