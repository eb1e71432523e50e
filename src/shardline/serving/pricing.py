"""Dollars and joules per token from the chip's price per hour and board power, through
`shardline.costing` (a sourced price table and a utilization model of board power). A chip the
tables do not list gives None with the reason, unless --usd-per-hour is given."""

from __future__ import annotations

from collections.abc import Callable

from shardline import costing
from shardline.errors import InputError
from shardline.hardware import Chip

__all__ = ["Pricing", "pricing"]

Pricing = dict[str, object]


def _known(get: Callable[[], float], notes: list[str]) -> float | None:
    """A costing figure, or None with the reason (a chip the tables do not list)."""
    try:
        return float(get())
    except InputError as exc:
        notes.append(str(exc))
        return None


def pricing(
    chip: Chip,
    devices: int,
    tokens_per_s: float,
    utilization: float,
    usd_per_hour: float | None = None,
) -> Pricing:
    """$ per million output tokens = devices x usd_per_hour / 3600 / tokens_per_s x 1e6; joules
    per output token = devices x board_power_w(utilization) / tokens_per_s
    (costing.usd_per_million_tokens, costing.joules_per_token)."""
    notes: list[str] = []
    price = usd_per_hour
    if price is None:
        price = _known(lambda: costing.usd_per_hour(chip.name), notes)
    power_w = _known(lambda: costing.board_power_w(chip, min(max(utilization, 0.0), 1.0)), notes)
    ok = tokens_per_s > 0
    return {
        "usd_per_hour_per_device": price,
        "board_power_w": power_w,
        "usd_per_million_tokens": costing.usd_per_million_tokens(tokens_per_s, devices, price)
        if price is not None and ok
        else None,
        "joules_per_token": costing.joules_per_token(tokens_per_s, devices, power_w)
        if power_w is not None and ok
        else None,
        "notes": notes,
    }
