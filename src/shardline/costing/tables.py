"""The price and power tables (prices.toml, power.toml beside this module) and a user's own
price file: each number with its source, looked up by catalog chip name (aliases resolve)."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from shardline.errors import InputError
from shardline.hardware import Chip, load_chip

__all__ = ["PriceRow", "price_table", "power_table", "idle_fraction", "chip_name"]

MAX_VALUE = 1e9  # a price per chip-hour (USD) or a power (W): past it, a typo or an overflow
PRICE_FIELDS = ("usd_per_hour", "provider", "date")


@dataclass(frozen=True)
class PriceRow:
    usd_per_hour: float
    source: str
    provider: str = ""
    date: str = ""


def _packaged(name: str) -> dict[str, object]:
    text = resources.files("shardline.costing").joinpath(name).read_text(encoding="utf-8")
    return tomllib.loads(text)


def _number(value: object, where: str) -> tuple[float, str]:
    """A `{value, source}` table or a bare number (a user's file): (value, source)."""
    source = "user file"
    if isinstance(value, dict):
        source = str(value.get("source", source))
        value = value.get("value")
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 <= value <= MAX_VALUE:
        raise InputError(
            f"{where} must be a non-negative number up to {MAX_VALUE:g}, got {value!r}"
        )
    return float(value), source


def _rows(data: dict[str, object], what: str) -> dict[str, PriceRow]:
    out = {}
    for name, row in data.items():
        if not isinstance(row, dict) or "usd_per_hour" not in row:
            raise InputError(f"{what}: [{name}] needs usd_per_hour = X (USD per chip-hour)")
        extra = [key for key in row if key not in PRICE_FIELDS]
        if extra:
            raise InputError(
                f"{what}: [{name}] unknown field {extra[0]!r}; fields: {', '.join(PRICE_FIELDS)}"
            )
        value, source = _number(row["usd_per_hour"], f"{what}: {name}.usd_per_hour")
        provider, date = str(row.get("provider", "")), str(row.get("date", ""))
        out[name.strip().lower()] = PriceRow(value, source, provider, date)
    return out


@cache
def _default_prices() -> dict[str, PriceRow]:
    return _rows(_packaged("prices.toml"), "prices.toml")


def price_table(path: str | Path | None = None) -> dict[str, PriceRow]:
    """The default prices, with a user's price file (same layout) laid over them."""
    table = dict(_default_prices())
    if path is not None:
        from shardline.hardware.datafile import read_data_toml

        table.update(_rows(read_data_toml(Path(path), "price file"), f"price file {path}"))
    return table


@cache
def _power() -> dict[str, Any]:
    return _packaged("power.toml")


def power_table() -> dict[str, tuple[float, str]]:
    """Chip name -> (TDP in W, source)."""
    chips = _power()["chips"]
    return {name: _number(row["tdp_w"], f"power.toml: {name}.tdp_w") for name, row in chips.items()}


def idle_fraction() -> tuple[float, str]:
    """Idle board power as a fraction of TDP, and its source."""
    return _number(_power()["idle"]["idle_fraction"], "power.toml: idle.idle_fraction")


def chip_name(chip: str | Chip) -> str:
    """The catalog name of a chip, an alias of one, or a Chip; a name the catalog does not know
    is used as given (lower case), so that a user's price file can price any chip."""
    if isinstance(chip, Chip):
        return chip.name
    try:
        return load_chip(chip).name
    except InputError:
        return chip.strip().lower()
