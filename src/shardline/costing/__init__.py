"""Cost and energy: USD per chip-hour (a sourced default table, overridable), board power with
a utilization model, USD per million tokens, joules per token, and what training on T tokens
costs (GPU-hours, USD, MWh, days). Pure: no printing, no files written."""

from shardline.costing.energy import (
    JOULES_PER_MWH,
    SECONDS_PER_HOUR,
    TrainingCost,
    board_power_w,
    joules_per_token,
    tdp_w,
    training_cost,
    usd_per_hour,
    usd_per_million_tokens,
)
from shardline.costing.plan_cost import busy_fraction, plan_training_cost
from shardline.costing.tables import PriceRow, chip_name, idle_fraction, power_table, price_table

__all__ = [
    "JOULES_PER_MWH",
    "SECONDS_PER_HOUR",
    "PriceRow",
    "TrainingCost",
    "board_power_w",
    "busy_fraction",
    "plan_training_cost",
    "chip_name",
    "idle_fraction",
    "joules_per_token",
    "power_table",
    "price_table",
    "tdp_w",
    "training_cost",
    "usd_per_hour",
    "usd_per_million_tokens",
]
