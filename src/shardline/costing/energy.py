"""Price, power and energy of a run: the formulas, with the tables of shardline.costing.tables.

- price of a run: devices x USD per chip-hour x hours;
- USD per million tokens: `devices x usd_per_hour / (3600 x tokens_per_s) x 1e6`;
- board power at utilization u: `P_idle + (TDP - P_idle) u` with `P_idle = idle_fraction x TDP`
  (linear between idle and TDP; the idle fraction is measured on one chip, see power.toml);
- joules per token: `devices x power_w / tokens_per_s`;
- training on T tokens: steps = T / tokens_per_step, seconds = steps x step_s, GPU-hours =
  devices x seconds / 3600, USD = GPU-hours x usd_per_hour, energy = devices x P(u) x seconds
  (1 MWh = 3.6e9 J).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from shardline.basics.values import JSONDict
from shardline.costing.tables import chip_name, idle_fraction, power_table, price_table
from shardline.errors import InputError
from shardline.hardware import Chip

__all__ = [
    "usd_per_hour",
    "tdp_w",
    "board_power_w",
    "usd_per_million_tokens",
    "joules_per_token",
    "TrainingCost",
    "training_cost",
    "SECONDS_PER_HOUR",
    "JOULES_PER_MWH",
]

SECONDS_PER_HOUR = 3600.0
SECONDS_PER_DAY = 86400.0
JOULES_PER_MWH = 3.6e9


def _positive(value: float, what: str) -> float:
    if not value > 0:
        raise InputError(f"{what} must be positive, got {value!r}")
    return float(value)


def usd_per_hour(
    chip: str | Chip, override: float | None = None, prices_file: str | None = None
) -> float:
    """USD per chip-hour: `override` when given, else the price file's or the default table's
    row for the chip (InputError naming the chips priced when there is none)."""
    if override is not None:
        if not override >= 0:
            raise InputError(f"--usd-per-hour must be a non-negative number, got {override!r}")
        return float(override)
    table = price_table(prices_file)
    name = chip_name(chip)
    if name not in table:
        raise InputError(
            f"no price for chip {name!r}; give --usd-per-hour X or --prices FILE "
            f"(priced: {', '.join(sorted(table))})"
        )
    return table[name].usd_per_hour


def _known_price(chip: str | Chip) -> float | None:
    row = price_table().get(chip_name(chip))
    return row.usd_per_hour if row is not None else None


def _check_utilization(utilization: float) -> None:
    if not 0.0 <= utilization <= 1.0:
        raise InputError(f"utilization must be in [0, 1], got {utilization!r}")


def tdp_w(chip: str | Chip) -> float:
    """The chip's board power at full load (W), from power.toml."""
    table = power_table()
    name = chip_name(chip)
    if name not in table:
        raise InputError(
            f"no board power for chip {name!r} (power.toml has: {', '.join(sorted(table))})"
        )
    return table[name][0]


def board_power_w(chip: str | Chip, utilization: float) -> float:
    """Board power (W) at `utilization` in [0, 1]: idle + (TDP - idle) x utilization."""
    _check_utilization(utilization)
    tdp = tdp_w(chip)
    idle = idle_fraction()[0] * tdp
    return idle + (tdp - idle) * utilization


def usd_per_million_tokens(tokens_per_s: float, devices: int, usd_per_hour: float) -> float:
    """USD per million tokens at `tokens_per_s` over all `devices`."""
    rate = _positive(tokens_per_s, "tokens_per_s")
    return devices * usd_per_hour / (SECONDS_PER_HOUR * rate) * 1e6


def joules_per_token(tokens_per_s: float, devices: int, power_w: float) -> float:
    """Board energy per token (J): all devices' power over the token rate."""
    return devices * power_w / _positive(tokens_per_s, "tokens_per_s")


@dataclass(frozen=True)
class TrainingCost:
    steps: float
    seconds: float
    days: float
    gpu_hours: float
    usd: float | None  # None when the chip has no price
    energy_mwh: float | None  # None when the chip has no board power
    usd_per_hour: float | None
    power_w: float | None  # per device, at the utilization given

    def to_dict(self) -> JSONDict:
        return asdict(self)


def training_cost(
    step_s: float,
    tokens_per_step: float,
    tokens: float,
    devices: int,
    chip: str | Chip,
    utilization: float,
    usd_per_hour: float | None = None,
) -> TrainingCost:
    """GPU-hours, USD, MWh and days to train on `tokens` (module docstring). `usd_per_hour`
    None: the chip's default price (usd stays None when it has none); the energy stays None
    when the chip has no board power."""
    steps = _positive(tokens, "tokens") / _positive(tokens_per_step, "tokens per step")
    seconds = steps * _positive(step_s, "step time")
    gpu_hours = devices * seconds / SECONDS_PER_HOUR
    price = usd_per_hour if usd_per_hour is not None else _known_price(chip)
    _check_utilization(utilization)
    power = board_power_w(chip, utilization) if chip_name(chip) in power_table() else None
    return TrainingCost(
        steps=steps,
        seconds=seconds,
        days=seconds / SECONDS_PER_DAY,
        gpu_hours=gpu_hours,
        usd=gpu_hours * price if price is not None else None,
        energy_mwh=devices * power * seconds / JOULES_PER_MWH if power is not None else None,
        usd_per_hour=price,
        power_w=power,
    )
