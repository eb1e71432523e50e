"""A chip under a power limit: the clock the limit allows, and the compute rates that follow it.

A board's power has a part that does not follow the SM clock (`static_w`: HBM, fabric and
leakage, read as the board's draw idle at P0) and the switching power of the SMs, C V^2 f
(the CMOS dynamic-power relation). Inside the DVFS range the voltage rises with the clock,
V ∝ f, so the switching power goes as f^3:

    P(f) = static_w + (tdp_w - static_w) * (f / f_tdp)^3

where f_tdp is the clock the chip holds at its design power `tdp_w` (the clock its achievable
figures were measured at). A limit L below `tdp_w` holds the clock at

    f_L / f_tdp = ((L - static_w) / (tdp_w - static_w))^(1/3)

and every compute rate scales by that fraction: the achievable matmul rates, the fused attention
kernels' efficiencies and the vector units' rates. The HBM clock does not move, so bandwidths,
collectives, launch costs and kernel floors stay; the datasheet peaks stay too, because MFU and
the lower bound are measured against them.

The cube law is the model's assumption, not a measurement: below the DVFS range's lowest voltage
the switching power falls only linearly with f, so a deep cap (L near `static_w`) costs more
than this says. A limit at or above `tdp_w` changes nothing (the design power already bounds the
boost clock).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from shardline.errors import InputError
from shardline.hardware.chip import Chip, Power

__all__ = [
    "CLOCK_POWER_EXPONENT",
    "check_power",
    "clock_fraction",
    "limit_note",
    "read_power",
    "scaled_kernels",
    "with_power_limit",
]

# switching power C V^2 f with V proportional to f inside the DVFS range (module docstring)
CLOCK_POWER_EXPONENT = 3.0
MAX_BOARD_POWER_W = 1e5  # a board, not a data hall: anything larger is a unit mistake


def check_power(tdp_w: float, static_w: float, limit_w: float, where: str) -> None:
    """`0 <= static_w < limit_w <= tdp_w <= 1e5` W, every value finite."""
    for name, value in (("tdp_w", tdp_w), ("static_w", static_w), ("limit_w", limit_w)):
        if not math.isfinite(value) or value < 0 or value > MAX_BOARD_POWER_W:
            raise InputError(f"{where}: {name} must be between 0 and {MAX_BOARD_POWER_W:g} W")
    if not static_w < limit_w:
        raise InputError(
            f"{where}: a power limit of {limit_w:g} W leaves nothing for the SMs above the "
            f"board's static {static_w:g} W"
        )
    if limit_w > tdp_w:
        raise InputError(
            f"{where}: a power limit of {limit_w:g} W is above the board's design power "
            f"{tdp_w:g} W (the most nvidia-smi -pl allows)"
        )


def read_power(r: Any) -> Power | None:
    """A chip file's [power] table (`r`: the catalog's ChipReader): tdp_w and static_w together
    or neither; limit_w defaults to tdp_w. The Power returned is at tdp_w, the figures' own
    power; the catalog then applies a lower limit_w (with_power_limit)."""
    tdp, static, limit = (r.number(f"power.{k}") for k in ("tdp_w", "static_w", "limit_w"))
    if tdp is None and static is None and limit is None:
        return None
    if tdp is None or static is None:
        raise r.fail("power", "needs both tdp_w and static_w")
    limit = tdp if limit is None else limit
    check_power(float(tdp), float(static), float(limit), f"{r.origin}: [power]")
    return Power(tdp_w=float(tdp), static_w=float(static), limit_w=float(tdp))


def clock_fraction(power: Power, limit_w: float) -> float:
    """f_L / f_tdp under a limit of `limit_w` watts (module docstring); 1 at or above tdp_w."""
    if limit_w >= power.tdp_w:
        return 1.0
    share = (limit_w - power.static_w) / (power.tdp_w - power.static_w)
    return float(share ** (1.0 / CLOCK_POWER_EXPONENT))


def with_power_limit(chip: Chip, limit_w: float, source: str | None = None) -> Chip:
    """`chip` run under a limit of `limit_w` watts (`source`: the limit's source, a chip file's;
    default: the user's cap): its compute rates
    scaled from the clock of its present limit to the clock of the new one (module
    docstring)."""
    power = chip.power
    if power is None:
        raise InputError(
            f"{chip.name} has no power figures ([power] tdp_w and static_w in its chip file), "
            "so a power limit cannot be applied to it"
        )
    limit_w = float(limit_w)
    check_power(power.tdp_w, power.static_w, limit_w, f"{chip.name} power limit")
    ratio = clock_fraction(power, limit_w) / clock_fraction(power, power.limit_w)
    a = chip.achievable
    # no measured rate: the peaks under the limit (none at all where the clock does not move)
    base = a.matmul_flops_per_s or ({} if ratio == 1.0 else dict(chip.peak_flops_per_s))
    rates = {dtype: rate * ratio for dtype, rate in base.items()}
    fwd = min(a.attention_fwd_efficiency * ratio, 1.0) if a.attention_fwd_efficiency else None
    bwd = min(a.attention_bwd_efficiency * ratio, 1.0) if a.attention_bwd_efficiency else None
    vector = {dtype: rate * ratio for dtype, rate in chip.vector_flops_per_s.items()}
    kernels = scaled_kernels(a.attention_kernels, ratio)
    sources = dict(chip.sources)
    sources["power.limit_w"] = source or (
        f"the user's power cap; compute rates x {clock_fraction(power, limit_w):.4f}, the "
        f"clock this limit allows against the {power.tdp_w:g} W design power"
    )
    return replace(
        chip,
        achievable=replace(
            a,
            matmul_flops_per_s=rates,
            attention_fwd_efficiency=fwd,
            attention_bwd_efficiency=bwd,
            attention_kernels=kernels,
        ),
        vector_flops_per_s=vector,
        power=replace(power, limit_w=limit_w),
        sources=sources,
    )


def scaled_kernels(
    kernels: dict[str, tuple[float, float]], factor: float
) -> dict[str, tuple[float, float]]:
    """Each named attention kernel's (forward, backward) efficiencies times `factor`, at most 1."""
    return {k: (min(f * factor, 1.0), min(b * factor, 1.0)) for k, (f, b) in kernels.items()}


def limit_note(chip: Chip) -> str:
    """ ", at 500 W (clock x 0.880)" for a chip run below its design power; "" otherwise."""
    power = chip.power
    if power is None or power.limit_w >= power.tdp_w:
        return ""
    return f", at {power.limit_w:g} W (clock x {clock_fraction(power, power.limit_w):.3f})"
