"""Pipeline against tensor parallelism over the same D devices: the numbers of each (latency,
throughput, memory per device, communication per step), the winner on each, and the batch at which
the latency winner changes. Pure: no printing (the text is `shardline.report.explain_plan_text`).

The two plans are `tp = D` and `pp = D` (every other degree 1), each from `plan`:

- latency: the realistic predicted time of one step (the lower bound is kept beside it); the
  pipeline's microbatch count is the one with the lowest predicted time;
- throughput: batch items per second at the predicted time. A forward pass through a pipeline
  serves a stream of batches, so its bubble is paid once per stream, not per batch (as
  `shardline.planning.step.tokens_answers` counts it); the pipeline's throughput is the better of
  its latency-best microbatch count and the count with the highest throughput bound;
- memory per device and communication bytes per step: as the plan reports them.

The flip: both plans at powers of two of the batch from BATCH_SPAN times smaller to BATCH_SPAN
times larger (the workload's own batch included); the flip is the nearest batch of that grid whose
latency winner differs from the winner at the workload's batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shardline.basics.serialize import jsonable
from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip
from shardline.planning.results import PlanResult
from shardline.planning.search import plan
from shardline.strategies import names
from shardline.workload.stack import apply_overrides
from shardline.workload.workload import Workload

__all__ = ["PlanNumbers", "FlipPoint", "Flip", "PpTpComparison", "compare_pp_tp", "BATCH_SPAN"]

BATCH_SPAN = 64  # the flip search covers batch / 64 .. batch * 64, powers of two apart
METRICS = ("latency", "throughput", "memory", "communication")


@dataclass(frozen=True)
class PlanNumbers:
    """One plan's numbers for the comparison (`result`: the plan itself, for the renderer)."""

    name: str
    latency_s: float  # lower bound
    predicted_s: float  # realistic: the latency the comparison uses
    throughput_per_s: float  # realistic (batch items per second), at `throughput_microbatches`
    throughput_bound_per_s: float  # the lower bound's (batch items per second)
    throughput_microbatches: int
    memory_per_device_bytes: float
    comm_bytes: float
    microbatches: int
    bubble_fraction: float
    bottleneck: str
    fits: bool
    result: PlanResult = field(repr=False, compare=False)

    def to_dict(self) -> dict[str, object]:
        keys: tuple[str, ...] = ("name", "latency_s", "predicted_s", "throughput_per_s")
        keys += ("throughput_bound_per_s", "throughput_microbatches")
        keys += ("memory_per_device_bytes", "comm_bytes", "microbatches", "bubble_fraction")
        keys += ("bottleneck", "fits")
        return jsonable({k: getattr(self, k) for k in keys})


@dataclass(frozen=True)
class FlipPoint:
    """Both plans' predicted latency at one batch of the flip search (None: it does not fit)."""

    batch: int
    tp_s: float | None
    pp_s: float | None
    winner: str | None  # "tp", "pp", or None when neither fits


@dataclass(frozen=True)
class Flip:
    """The nearest batch of the grid at which the latency winner is not the workload's winner;
    `batch` None when it never changes between `searched_from` and `searched_to`."""

    batch: int | None
    from_winner: str | None
    to_winner: str | None
    previous_batch: int | None  # the grid's batch next to it on the workload's side
    searched_from: int
    searched_to: int
    points: list[FlipPoint]


@dataclass(frozen=True)
class PpTpComparison:
    workload: Workload
    chip: Chip
    devices: int
    tp: PlanNumbers
    pp: PlanNumbers
    winners: dict[str, str]  # metric -> "tp" or "pp" (or "tie")
    flip: Flip
    compute_floor_s: float  # the step's model FLOPs over D devices at peak

    def to_dict(self) -> dict[str, object]:
        w = self.workload
        return jsonable(
            {
                "workload": {**w.identity(), "batch": w.batch, "item": w.item},
                "hardware": {"name": self.chip.name, "capacity_bytes": self.chip.capacity_bytes},
                "devices": self.devices,
                "plans": {"tp": self.tp.to_dict(), "pp": self.pp.to_dict()},
                "winners": self.winners,
                "compute_floor_s": self.compute_floor_s,
                "flip": self.flip,
            }
        )


def _degrees(devices: int, which: str) -> dict[str, Any]:
    return {name: (devices if name == which else 1) for name in names()}


def _best(workload: Workload, chip: Chip, devices: int, which: str, objective: str) -> PlanResult:
    ps = plan(
        workload, chip, devices, objective=objective, require_fit=False, **_degrees(devices, which)
    )
    return ps.plans[0]


def _numbers(workload: Workload, chip: Chip, devices: int, which: str) -> PlanNumbers:
    fast = _best(workload, chip, devices, which, "predicted")
    options = [fast]
    if which == "pp":
        options.append(_best(workload, chip, devices, which, "throughput"))
    stream = max(options, key=lambda p: p.throughput_per_s)
    return PlanNumbers(
        name=fast.name,
        latency_s=fast.latency_s,
        predicted_s=fast.predicted_s,
        throughput_per_s=stream.throughput_per_s,
        throughput_bound_per_s=fast.throughput_bound_per_s,
        throughput_microbatches=stream.microbatches,
        memory_per_device_bytes=fast.memory_per_device_bytes,
        comm_bytes=fast.comm_bytes,
        microbatches=fast.microbatches,
        bubble_fraction=fast.bubble_fraction,
        bottleneck=fast.bottleneck,
        fits=fast.fits,
        result=fast,
    )


def _smaller(tp: float, pp: float) -> str:
    if tp == pp:
        return "tie"
    return "tp" if tp < pp else "pp"


def winners(tp: PlanNumbers, pp: PlanNumbers) -> dict[str, str]:
    """The winner on each metric: lower predicted latency, higher predicted throughput, less
    memory per device, fewer communication bytes per step. A plan that does not fit loses every
    metric to one that does."""
    if tp.fits != pp.fits:
        side = "tp" if tp.fits else "pp"
        return dict.fromkeys(METRICS, side)
    return {
        "latency": _smaller(tp.predicted_s, pp.predicted_s),
        "throughput": _smaller(-tp.throughput_per_s, -pp.throughput_per_s),
        "memory": _smaller(tp.memory_per_device_bytes, pp.memory_per_device_bytes),
        "communication": _smaller(tp.comm_bytes, pp.comm_bytes),
    }


def _point(workload: Workload, chip: Chip, devices: int, batch: int) -> FlipPoint:
    w = workload.with_batch(batch)
    times: dict[str, float | None] = {}
    for which in ("tp", "pp"):
        p = _best(w, chip, devices, which, "predicted")
        times[which] = p.predicted_s if p.fits else None
    fitting = {k: v for k, v in times.items() if v is not None}
    winner = None if not fitting else min(fitting, key=lambda k: (fitting[k], k != "tp"))
    if len(fitting) == 2 and times["tp"] == times["pp"]:
        winner = "tie"
    return FlipPoint(batch, times["tp"], times["pp"], winner)


def batch_grid(batch: int, span: int = BATCH_SPAN) -> list[int]:
    """Powers of two from batch / span to batch * span (at least 1), and the batch itself."""
    grid = {batch}
    low = 1
    while low * span < batch:
        low *= 2
    value = low
    while value <= batch * span:
        grid.add(value)
        value *= 2
    return sorted(grid)


def find_flip(workload: Workload, chip: Chip, devices: int, at_batch: str | None) -> Flip:
    """The grid's batch nearest to the workload's (by ratio; larger first on a tie) whose latency
    winner differs from `at_batch`, the winner at the workload's batch."""
    grid = batch_grid(workload.batch)
    points = [_point(workload, chip, devices, b) for b in grid]
    here = grid.index(workload.batch)
    best: tuple[float, int, int] | None = None  # (distance, index, neighbour index)
    for i, pt in enumerate(points):
        if pt.winner == at_batch:
            continue
        step = 1 if i > here else -1
        distance = abs(i - here) - (0.5 if step > 0 else 0.0)
        if best is None or distance < best[0]:
            best = (distance, i, i - step)
    if best is None:
        return Flip(None, at_batch, None, None, grid[0], grid[-1], points)
    _, i, prev = best
    return Flip(grid[i], at_batch, points[i].winner, grid[prev], grid[0], grid[-1], points)


def compare_pp_tp(
    workload: Workload,
    hw: str | Chip,
    devices: int,
    flops_per_s: float | None = None,
    mem_bytes_per_s: float | None = None,
) -> PpTpComparison:
    """Tensor parallelism over all `devices` against a pipeline of `devices` stages (the rate
    overrides replace the chip's peak and HBM bandwidth, as in `plan`)."""
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 2:
        raise InputError(
            f"comparing pipeline and tensor parallelism needs 2 or more devices, got {devices!r}"
        )
    chip = apply_overrides(resolve_chip(hw), workload, flops_per_s, mem_bytes_per_s)
    tp = _numbers(workload, chip, devices, "tp")
    pp = _numbers(workload, chip, devices, "pp")
    won = winners(tp, pp)
    flip = find_flip(workload, chip, devices, won["latency"])
    dtype = workload.layers[0].compute_dtype or workload.layers[0].dtype
    floor = tp.result.model_flops / (devices * chip.peak(dtype))
    return PpTpComparison(workload, chip, devices, tp, pp, won, flip, floor)
