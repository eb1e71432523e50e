"""Why the recommended plan wins: one sentence naming the runner-up and what separates them."""

from __future__ import annotations

from collections.abc import Sequence

from shardline.basics.units import fmt_bytes, fmt_time
from shardline.hardware import Chip
from shardline.planning.results import PlanResult

__all__ = ["reason"]


def reason(
    fits: Sequence[PlanResult], results: Sequence[PlanResult], objective: str, chip: Chip
) -> str:
    best = fits[0]
    left_out = len(results) - len(fits)
    what = {
        "latency": (
            f"the lowest latency bound ({fmt_time(best.latency_s)}; predicted "
            f"{fmt_time(best.predicted_s)})"
        ),
        "predicted": (
            f"the lowest predicted time ({fmt_time(best.predicted_s)}; lower bound "
            f"{fmt_time(best.latency_s)})"
        ),
        "throughput": (
            f"the highest predicted throughput ({best.throughput_per_s:.4g} items/s; at the "
            f"lower bound {best.throughput_bound_per_s:.4g})"
        ),
    }[objective]
    text = (
        f"{best.name} has {what} of the {len(fits)} plan(s) that fit in "
        f"{fmt_bytes(chip.usable_capacity_bytes)} per device"
        + (f" ({left_out} do not fit)" if left_out else "")
        + f"; it is {best.bottleneck}-bound"
    )
    if len(fits) > 1:
        second = fits[1]
        ratio = {
            "latency": _ratio(second.latency_s, best.latency_s),
            "predicted": _ratio(second.predicted_s, best.predicted_s),
            "throughput": _ratio(best.throughput_per_s, second.throughput_per_s),
        }[objective]
        if ratio < 1.0005:
            if second.latency_upper_s > best.latency_upper_s * 1.0005:
                why = (
                    f"is slower without overlap ({fmt_time(second.latency_upper_s)} vs "
                    f"{fmt_time(best.latency_upper_s)})"
                )
            elif second.memory_per_device_bytes > best.memory_per_device_bytes:
                why = (
                    f"needs more memory per device ({fmt_bytes(second.memory_per_device_bytes)}"
                    f" vs {fmt_bytes(best.memory_per_device_bytes)})"
                )
            else:
                why = "is otherwise equal"
            text += f"; the runner-up {second.name} ties on it but {why}"
        else:
            text += (
                f"; the runner-up {second.name} is {ratio:.3f}x "
                f"{'lower' if objective == 'throughput' else 'slower'} "
                f"({second.bottleneck}-bound)"
            )
    return text


def _ratio(a: float, b: float) -> float:
    """a / b, where b = 0 (a throughput that underflowed) gives 1 for a tie, else infinity."""
    if b > 0:
        return a / b
    return 1.0 if a == b else float("inf")
