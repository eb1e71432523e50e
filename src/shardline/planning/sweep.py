"""Sweeping the batch: the recommended plan at each batch size and where it changes."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import isqrt
from numbers import Integral
from typing import Any

from shardline.basics.serialize import jsonable
from shardline.basics.units import short
from shardline.basics.values import JSONDict
from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip
from shardline.planning.evaluate import Context
from shardline.planning.results import PlanSet
from shardline.planning.search import PlanOptions, _options, plan_with
from shardline.strategies import Degrees
from shardline.workload.stack import apply_overrides
from shardline.workload.workload import Workload

__all__ = [
    "SweepPoint",
    "Crossover",
    "BatchSweep",
    "sweep_batch",
    "MAX_CROSSOVERS",
    "MAX_BATCHES",
    "MAX_SWEEP_PLANS",
]


@dataclass(frozen=True)
class SweepPoint:
    batch: int
    recommended: str | None
    latency_s: float | None
    throughput_per_s: float | None
    bottleneck: str | None
    memory_per_device_bytes: float | None
    latency_by_plan_s: dict[str, float]  # every plan that fits at this batch
    predicted_s: float | None = None  # the recommended plan's realistic time
    # the batch one device of the recommended plan works on per step: batch / the ways it is
    # split (dp x fsdp replicas); a tensor- or pipeline-parallel rank sees its replica's whole
    # batch, not batch / devices
    batch_per_device: float | None = None


@dataclass(frozen=True)
class Crossover:
    """The smallest batch at which the recommendation changes from `from_plan` to `to_plan`."""

    batch: int
    from_plan: str | None
    to_plan: str | None


@dataclass(frozen=True)
class BatchSweep:
    workload: Workload
    chip: Chip
    devices: int
    objective: str
    points: list[SweepPoint]
    crossovers: list[Crossover]
    # False when the bisection stopped at MAX_SWEEP_PLANS plan searches (or MAX_CROSSOVERS)
    # before it had looked between every pair of neighbouring batches
    crossovers_complete: bool = True

    def to_dict(self) -> JSONDict:
        w = self.workload
        return jsonable(
            {
                "workload": {
                    **w.identity(),
                    "item": w.item,
                    "tokens_per_item": w.tokens_per_item,
                },
                "hardware": {"name": self.chip.name, "capacity_bytes": self.chip.capacity_bytes},
                "devices": self.devices,
                "objective": self.objective,
                "sweep": self.points,
                "crossovers": self.crossovers,
                "crossovers_complete": self.crossovers_complete,
            }
        )


MAX_CROSSOVERS = 20
# Each batch size is a plan search (about a second for a zoo model on 8 devices) and each step of
# a crossover's bisection one more: at most MAX_BATCHES sizes, and the bisection stops when the
# sweep has run MAX_SWEEP_PLANS searches in all (the crossovers found so far are kept).
MAX_BATCHES = 12
MAX_SWEEP_PLANS = 48


def _point(batch: int, ps: PlanSet) -> SweepPoint:
    """One batch of the sweep: the recommended plan's numbers (None where nothing fits)."""
    best = ps.best()
    return SweepPoint(
        batch=batch,
        recommended=ps.recommended,
        latency_s=best.latency_s if best else None,
        throughput_per_s=best.throughput_per_s if best else None,
        bottleneck=best.bottleneck if best else None,
        memory_per_device_bytes=best.memory_per_device_bytes if best else None,
        latency_by_plan_s={p.name: p.latency_s for p in ps.plans if p.fits},
        predicted_s=best.predicted_s if best else None,
        batch_per_device=batch / Degrees(best.degrees).replicas if best else None,
    )


def _sizes(batches: Sequence[int]) -> list[int]:
    """The batch sizes, sorted and distinct: positive integers, at most MAX_BATCHES of them."""
    if isinstance(batches, str) or not isinstance(batches, Sequence) or not batches:
        raise InputError(f"batches must be a list of batch sizes, got {short(batches)}")
    for b in batches:
        if isinstance(b, bool) or not isinstance(b, Integral) or b < 1:
            raise InputError(f"each batch must be a positive integer, got {short(b)}")
    sizes = sorted({int(b) for b in batches})
    if len(sizes) > MAX_BATCHES:
        raise InputError(
            f"batches: {len(sizes):,} batch sizes; the limit is {MAX_BATCHES} (each is a plan "
            "search of its own)"
        )
    return sizes


def batch_planner(
    workload: Workload,
    chip: Chip,
    devices: int,
    *,
    microbatches: int | None = None,
    objective: str = "predicted",
    **given: Any,
) -> Callable[[int], PlanSet]:
    """`plan(workload.with_batch(batch), chip, devices, require_fit=False, ...)` at each batch
    asked for, the searches sharing what does not depend on the batch (the networks, their
    priced collectives and the layer Costs by shape: `share` below), so that a
    sweep's tens of searches price each shape once."""
    opts: PlanOptions = _options(microbatches, objective, False, given)
    first: list[Context] = []

    def share(ctx: Context) -> None:
        """The first search's caches that do not depend on the batch, for each search: the
        networks and their priced collectives (same chip and network options) and the layer
        Costs by shape (`Context.cost`; same execution)."""
        base = (first or [ctx])[0]
        first[:] = [base]
        assert base.chip is ctx.chip and base.network_options == ctx.network_options
        assert base.execution == ctx.execution and base.kernel_chip is ctx.kernel_chip
        ctx._networks, ctx._priced, ctx._shapes = base._networks, base._priced, base._shapes

    return lambda batch: plan_with(workload.with_batch(batch), chip, devices, opts, share)


def sweep_batch(
    workload: Workload,
    hw: str | Chip,
    devices: int,
    batches: Sequence[int],
    **options: Any,
) -> BatchSweep:
    """`plan` at each batch size, and each crossover: between two neighbouring batches whose
    recommendations differ, the smallest batch at which the recommendation changes (bisection)."""
    if not isinstance(workload, Workload):
        raise InputError(f"sweep_batch needs a Workload, got {short(workload)}")
    sizes = _sizes(batches)
    chip = apply_overrides(
        resolve_chip(hw),
        workload,
        options.pop("flops_per_s", None),
        options.pop("mem_bytes_per_s", None),
    )
    objective = str(options.get("objective", "predicted"))
    memo: dict[int, PlanSet] = {}
    search = batch_planner(workload, chip, devices, **options)

    def at(batch: int) -> PlanSet:
        if batch not in memo:
            memo[batch] = search(batch)
        return memo[batch]

    points = [_point(b, at(b)) for b in sizes]
    crossovers: list[Crossover] = []
    complete = True
    for lo, hi in zip(sizes, sizes[1:], strict=False):
        a = lo
        while at(a).recommended != at(hi).recommended and complete:
            if len(crossovers) >= MAX_CROSSOVERS:
                complete = False
                break
            first = at(a).recommended
            left, right = a, hi  # rec(left) == first, rec(right) != first
            while right - left > 1:
                if len(memo) >= MAX_SWEEP_PLANS:
                    complete = False
                    break
                # geometric while the bracket spans more than a factor of two (1 to 1e9 in
                # about 5 + log2(crossover) searches, not 30), then halving
                mid = isqrt(left * right) if right > 2 * left else (left + right) // 2
                if at(mid).recommended == first:
                    left = mid
                else:
                    right = mid
            if not complete:
                break
            crossovers.append(
                Crossover(batch=right, from_plan=first, to_plan=at(right).recommended)
            )
            a = right
    return BatchSweep(workload, chip, devices, objective, points, crossovers, complete)
