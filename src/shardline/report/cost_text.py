"""The cost of training on the --tokens given, as text lines under the plan report."""

from __future__ import annotations

from shardline.basics.units import fmt_num
from shardline.costing import TrainingCost

__all__ = ["training_cost_lines"]


def _amount(value: float) -> str:
    """Whole units with thousands separators; three significant digits below 100."""
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def training_cost_lines(plan_name: str, tokens: float, cost: TrainingCost) -> list[str]:
    """GPU-hours, USD, MWh and days for the recommended plan."""
    out = [
        "",
        f"TRAINING on {fmt_num(tokens)} tokens with {plan_name}: {cost.days:.3g} days, "
        f"{_amount(cost.gpu_hours)} GPU-hours",
    ]
    if cost.usd is not None and cost.usd_per_hour is not None:
        out.append(f"  ${_amount(cost.usd)} at ${cost.usd_per_hour:.4g} per chip-hour")
    else:
        out.append("  $: no price for this chip (give --usd-per-hour X or --prices FILE)")
    if cost.energy_mwh is not None and cost.power_w is not None:
        out.append(
            f"  {fmt_num(cost.energy_mwh)} MWh of board energy ({cost.power_w:.0f} W per device: "
            "idle + (TDP - idle) x the share of the step outside the bubble; boards only, no "
            "host, network or cooling)"
        )
    else:
        out.append("  MWh: no board power for this chip in shardline/costing/power.toml")
    return out
