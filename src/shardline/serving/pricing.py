"""Dollars and joules per token from the chip's price per hour and board power.

The figures come from `shardline.costing` (a sourced table of prices and a utilization model of
board power). MERGE NOTE: until that package is merged, a build without it gives no price or
power (None, with a note) unless --usd-per-hour is given: no number is invented here.
"""

from __future__ import annotations

from typing import Any

__all__ = ["Pricing", "pricing"]

Pricing = dict[str, Any]


def _costing() -> Any:
    try:
        import shardline.costing as costing  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # MERGE NOTE: replaced by the real package at merge
        return None
    return costing


def _known(get: Any, notes: list[str]) -> float | None:
    """A costing figure, or None with the reason (a chip the tables do not list)."""
    from shardline.errors import InputError

    try:
        return float(get())
    except InputError as exc:
        notes.append(str(exc))
        return None


def pricing(
    chip: Any,
    devices: int,
    tokens_per_s: float,
    utilization: float,
    usd_per_hour: float | None = None,
) -> Pricing:
    """$ per million output tokens = devices x usd_per_hour / 3600 / tokens_per_s x 1e6; joules
    per output token = devices x board_power_w(utilization) / tokens_per_s."""
    costing = _costing()
    notes: list[str] = []
    price = usd_per_hour
    power_w = None
    if costing is not None:
        if price is None:
            price = _known(lambda: costing.usd_per_hour(chip.name), notes)
        power_w = _known(
            lambda: costing.board_power_w(chip, min(max(utilization, 0.0), 1.0)), notes
        )
    else:
        notes.append("shardline.costing is not available: no default price or board power")
    ok = tokens_per_s > 0
    return {
        "usd_per_hour_per_device": price,
        "board_power_w": power_w,
        "usd_per_million_tokens": devices * price / 3600 / tokens_per_s * 1e6
        if price is not None and ok
        else None,
        "joules_per_token": devices * power_w / tokens_per_s
        if power_w is not None and ok
        else None,
        "notes": notes,
    }
