"""The chip as a long training run sees it: matmul rates held at the power limit.

The achievable matmul rate of a chip file (`achievable.matmul_flops_per_s`, a MAMF figure) is a
short burst: the benchmark times each shape for a fraction of a second, at or near the boost clock.
A training step keeps every GPU of the board busy for seconds to minutes; a GPU at its power limit
then lowers its clock until its power fits, and its tensor cores deliver less. The published
measurement of both on the same chips (stas00/ml-engineering, "Maximum Achievable and Sustainable
Matmul FLOPS comparison table": MAMF, the short boost-clock burst, against MSMF, the throughput a
shape holds steady over a 2 s window with the chip saturated at its power limit and its siblings
busy) gives the ratio MSMF / MAMF per chip, the chip file's `achievable.sustained_matmul_fraction`.

In a training step the realistic time of the tensor-core work (GEMMs and the fused attention
kernel) runs at `fraction x` the burst rate:

    rate_sustained = sustained_matmul_fraction x achievable matmul rate
    attention efficiency_sustained = sustained_matmul_fraction x attention efficiency

Memory-bound kernels, the kernel floors and launch costs and the collectives are left alone (the
power limit lowers the SM clock; the HBM clock does not move). Single kernels (the GEMM benchmark,
`shardline predict`) and inference phases keep the burst rates.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from shardline.hardware import Chip
from shardline.hardware.power import scaled_kernels

__all__ = ["sustained_chip", "sustained_fraction", "with_attention_kernel"]

# Chips derived from a chip (sustained rates, a named attention kernel's figures), by the identity
# of the chip and what was derived. Each entry holds the original chip, so that its id is never
# reused while the entry stands; the same derived object for the same chip lets the kernel-time
# memo (realistic.kernels) hit.
_DERIVED: dict[tuple[int, str], tuple[Chip, Chip]] = {}
_DERIVED_MAX = 1 << 10


def _derived(chip: Chip, what: str, build: Callable[[], Chip]) -> Chip:
    """`build()`, once per (chip, what) while the memo holds it."""
    hit = _DERIVED.get((id(chip), what))
    if hit is not None and hit[0] is chip:
        return hit[1]
    out = build()
    if len(_DERIVED) >= _DERIVED_MAX:
        _DERIVED.clear()
    _DERIVED[(id(chip), what)] = (chip, out)
    return out


def sustained_fraction(chip: Chip) -> float:
    """MSMF / MAMF of the chip file, 1 when it has none."""
    return chip.achievable.sustained_matmul_fraction or 1.0


def sustained_chip(chip: Chip) -> Chip:
    """A copy of `chip` whose matmul rates and attention efficiencies are the sustained ones
    (times `sustained_fraction`); the chip itself when its fraction is 1 or it has no measured
    matmul rate to derate."""
    f = sustained_fraction(chip)
    if f >= 1.0 or not chip.achievable.matmul_flops_per_s:
        return chip
    return _derived(chip, "sustained", lambda: _derate(chip, f))


def _derate(chip: Chip, f: float) -> Chip:
    a = chip.achievable
    rates = {dtype: rate * f for dtype, rate in a.matmul_flops_per_s.items()}
    fwd = a.attention_fwd_efficiency * f if a.attention_fwd_efficiency else None
    bwd = a.attention_bwd_efficiency * f if a.attention_bwd_efficiency else None
    return replace(
        chip,
        achievable=replace(
            a,
            matmul_flops_per_s=rates,
            attention_fwd_efficiency=fwd,
            attention_bwd_efficiency=bwd,
            attention_kernels=scaled_kernels(a.attention_kernels, f),
        ),
    )


def with_attention_kernel(chip: Chip, kernel: str | None) -> Chip:
    """`chip` with the efficiencies of the fused attention kernel `kernel` ("fa2", "cudnn",
    "fa3": the chip file's `achievable.attention_kernels`) as its attention efficiencies; the
    chip itself when `kernel` is None or the file has no figures for it (its generic figures
    stand)."""
    a = chip.achievable
    if kernel is None or kernel not in a.attention_kernels:
        return chip
    fwd, bwd = a.attention_kernels[kernel]
    return _derived(
        chip,
        f"attention {kernel}",
        lambda: replace(
            chip, achievable=replace(a, attention_fwd_efficiency=fwd, attention_bwd_efficiency=bwd)
        ),
    )
