"""What training on the `--tokens` given costs with one plan: the plan's realistic step, its
tokens per step, its devices and chip through shardline.costing.energy.training_cost.

Power utilization of a training step: the share of the step the devices are not idle in the
pipeline bubble, `1 - bubble_s / predicted_s` (the exposed communication and the optimizer keep
the board busy; an idle floor is paid throughout, see power.toml)."""

from __future__ import annotations

from shardline.costing.energy import TrainingCost, training_cost
from shardline.hardware import Chip
from shardline.planning.results import PlanResult

__all__ = ["busy_fraction", "plan_training_cost"]


def busy_fraction(plan: PlanResult) -> float:
    """1 - the bubble's share of the realistic step."""
    if plan.predicted_s <= 0:
        return 0.0
    bubble = plan.predicted_breakdown_s.get("bubble_s", 0.0)
    return min(1.0, max(0.0, 1.0 - bubble / plan.predicted_s))


def plan_training_cost(
    plan: PlanResult, devices: int, chip: Chip, tokens: float, usd_per_hour: float | None = None
) -> TrainingCost | None:
    """The cost of training on `tokens` with `plan`; None when the plan has no token rate."""
    if plan.tokens_per_s is None or plan.predicted_s <= 0:
        return None
    tokens_per_step = plan.tokens_per_s * plan.predicted_s
    return training_cost(
        plan.predicted_s, tokens_per_step, tokens, devices, chip, busy_fraction(plan), usd_per_hour
    )
