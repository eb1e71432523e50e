"""The achievable matmul rate of a chip for a compute dtype (docs/prediction.md).

Below both `shardline.ops.tiling` (the ridges and the library's tile choice) and
`shardline.ops.predict` (the realistic time), so that neither needs the other.
"""

from __future__ import annotations

from shardline.hardware import Chip

__all__ = ["achievable_rate"]


def achievable_rate(chip: Chip, compute_dtype: str) -> tuple[float, str]:
    """Achievable matmul FLOP/s for a compute dtype, and where it comes from.

    The chip's measured figure when it has one; else the dtype's peak times the measured
    efficiency (achievable / peak) of another dtype of the same chip; else the peak itself."""
    measured = chip.achievable.matmul_flops_per_s
    if compute_dtype in measured:
        return measured[compute_dtype], f"achievable {compute_dtype} (chip file)"
    peak = chip.peak(compute_dtype)
    for other, rate in measured.items():
        if other in chip.peak_flops_per_s:
            efficiency = rate / chip.peak_flops_per_s[other]
            return peak * efficiency, (
                f"{compute_dtype} peak x {efficiency:.3f} (measured {other} efficiency)"
            )
    return peak, f"{compute_dtype} peak (no achievable figure in the chip file)"
