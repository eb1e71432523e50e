"""Timing callables properly, and saying how noisy the machine was while they ran.

Each callable is warmed up, then timed in samples long enough for the clock to read (a sample
repeats the call). `time_interleaved` takes the samples of several callables in rounds: one
sample of each per round, each round starting one case further along, so that a burst of load
from another process lands on different cases in different rounds instead of on all the samples
of one case. The estimate is the median of the samples; the noise of one measurement is the
robust relative spread of its samples, `1.4826 x MAD / median` (MAD: the median absolute
deviation; 1.4826 makes it the standard deviation for normally distributed samples), which a
few outliers do not move. `noise_summary` gives the machine's noise over a run: the median and
90th percentile of that spread over every measurement.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

__all__ = [
    "Timing",
    "time_call",
    "time_interleaved",
    "relative_spread",
    "noise_summary",
    "calibration_noise",
    "timing_settings",
    "CALIBRATE_BUDGET_S",
    "VALIDATE_BUDGET_S",
    "DEFAULT_REPEATS",
    "DEFAULT_WARMUP",
    "MIN_SAMPLE_S",
    "MIN_ROUNDS",
    "NOISE_LIMIT",
]

DEFAULT_REPEATS = 7  # samples; the median of an odd count is one of them
DEFAULT_WARMUP = 2  # untimed calls first: caches, page faults, library initialisation
MIN_SAMPLE_S = 0.02  # each sample repeats the call until it lasts at least this long
MIN_ROUNDS = 3  # interleaved rounds taken even when the time budget is spent
MAD_TO_SIGMA = 1.4826  # MAD x this = the standard deviation of a normal distribution
# The claim `validate` checks is a median error within 10% (docs/prediction.md). Measurements
# whose repeats spread by more than half of that cannot resolve it: a noise above this limit
# makes `calibrate` warn and mark its file, and `validate` call its verdict inconclusive.
NOISE_LIMIT = 0.05


# Seconds the measurements of a run may take: the worker stops adding interleaved rounds past it
# (after MIN_ROUNDS), so that `calibrate` and `validate` stay short on a busy machine.
CALIBRATE_BUDGET_S = 30.0
VALIDATE_BUDGET_S = 20.0


def timing_settings(
    quick: bool, repeats: int | None, budget_s: float = CALIBRATE_BUDGET_S
) -> dict[str, Any]:
    """The timing keys of a job: repeats, warm-up calls, sample length, time budget."""
    timing: dict[str, object]
    if quick:
        timing = {"repeats": repeats or 3, "warmup": 1, "min_sample_s": 0.004, "budget_s": 5.0}
    else:
        timing = {"repeats": repeats or 9, "warmup": 2, "min_sample_s": 0.02, "budget_s": budget_s}
    if repeats:  # the repeats asked for are all taken
        timing["budget_s"] = 0.0
    return timing


@dataclass(frozen=True)
class Timing:
    median_s: float
    min_s: float
    max_s: float
    samples: int
    calls_per_sample: int
    noise: float = 0.0  # relative_spread of the samples


def relative_spread(samples: Sequence[float]) -> float:
    """`1.4826 x median(|x - median(x)|) / median(x)`: a robust relative standard deviation.

    >>> round(relative_spread([1.0, 1.0, 1.1, 0.9, 5.0]), 4)  # MAD 0.1; the 5.0 does not count
    0.1483
    """
    if not samples:
        return 0.0
    mid = statistics.median(samples)
    if mid <= 0:
        return 0.0
    mad = statistics.median(abs(x - mid) for x in samples)
    return MAD_TO_SIGMA * mad / mid


def _summarize(samples: list[float], calls: int) -> Timing:
    ordered = sorted(samples)
    return Timing(
        statistics.median(ordered),
        ordered[0],
        ordered[-1],
        len(ordered),
        calls,
        relative_spread(ordered),
    )


class _Sampler:
    """One callable's warm-up, sample length and samples."""

    def __init__(
        self,
        fn: Callable[[], object],
        sync: Callable[[], object] | None,
        clock: Callable[[], float],
    ) -> None:
        self.fn, self.sync, self.clock = fn, sync, clock
        self.calls = 1
        self.samples: list[float] = []

    def run(self, calls: int) -> float:
        if self.sync is not None:
            self.sync()
        start = self.clock()
        for _ in range(calls):
            self.fn()
        if self.sync is not None:
            self.sync()
        return self.clock() - start

    def prepare(self, warmup: int, min_sample_s: float) -> None:
        for _ in range(max(0, warmup)):
            self.run(1)
        first = max(self.run(1), 1e-9)
        self.calls = max(1, math.ceil(min_sample_s / first))

    def sample(self) -> None:
        self.samples.append(self.run(self.calls) / self.calls)


def time_call(
    fn: Callable[[], object],
    *,
    repeats: int = DEFAULT_REPEATS,
    warmup: int = DEFAULT_WARMUP,
    min_sample_s: float = MIN_SAMPLE_S,
    sync: Callable[[], object] | None = None,
    clock: Callable[[], float] = time.perf_counter,
) -> Timing:
    """Seconds per call of `fn`. `sync` (e.g. torch.cuda.synchronize) runs before each clock read,
    so asynchronous devices are timed to completion."""
    sampler = _Sampler(fn, sync, clock)
    sampler.prepare(warmup, min_sample_s)
    for _ in range(max(1, repeats)):
        sampler.sample()
    return _summarize(sampler.samples, sampler.calls)


def time_interleaved(
    fns: Sequence[Callable[[], object]],
    *,
    repeats: int = DEFAULT_REPEATS,
    warmup: int = DEFAULT_WARMUP,
    min_sample_s: float = MIN_SAMPLE_S,
    clock: Callable[[], float] = time.perf_counter,
    deadline: float | None = None,
) -> list[Timing]:
    """Seconds per call of each of `fns`, sampled in interleaved rounds (see the module
    docstring). `deadline` (a `time.monotonic()` value) ends the rounds early, but never before
    MIN_ROUNDS rounds (or `repeats`, if fewer)."""
    samplers = [_Sampler(fn, None, clock) for fn in fns]
    for sampler in samplers:
        sampler.prepare(warmup, min_sample_s)
    rounds = max(1, repeats)
    for r in range(rounds):
        if r >= MIN_ROUNDS and deadline is not None and time.monotonic() > deadline:
            break
        for i in range(len(samplers)):
            samplers[(i + r) % len(samplers)].sample()
    return [_summarize(s.samples, s.calls) for s in samplers]


def noise_summary(records: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The machine's noise over a run, from records with a `noise` field (the relative spread
    of each measurement's repeats): the median and the 90th percentile over the measurements,
    the limit, and whether the median is above it."""
    spreads = sorted(float(r["noise"]) for r in records if r.get("noise") is not None)
    if not spreads:
        return {"measurements": 0, "limit": NOISE_LIMIT, "noisy": False}
    median = statistics.median(spreads)
    p90 = spreads[min(len(spreads) - 1, math.ceil(0.9 * len(spreads)) - 1)]
    return {
        "repeat_spread": round(median, 5),
        "repeat_spread_p90": round(p90, 5),
        "measurements": len(spreads),
        "limit": NOISE_LIMIT,
        "noisy": bool(median > NOISE_LIMIT),
    }


def calibration_noise(results: list[dict[str, Any]]) -> dict[str, object]:
    """The `[calibration.noise]` table: the machine's noise during the run (`noise_summary`), a
    warning when it is above the limit, and the reference multiply (the largest square measured,
    its median time) that `validate` measures again to see whether the machine has changed."""
    noise = noise_summary(results)
    if noise["noisy"]:
        noise["warning"] = (
            f"repeated measurements spread by {noise['repeat_spread']:.1%} (median over "
            f"{noise['measurements']}), above the {noise['limit']:.0%} limit: other processes "
            "were loading this machine; predictions from this file carry that noise"
        )
    squares = [
        r
        for r in results
        if r.get("kind") == "matmul"
        and r.get("role") in ("fit", "peak")
        and r["m"] == r["k"] == r["n"]
    ]
    if squares:
        ref = max(squares, key=lambda r: r["m"] * r["k"] * r["n"])
        noise["reference"] = {
            **{key: ref[key] for key in ("m", "k", "n", "dtype")},
            "seconds": float(ref["seconds"]),
        }
    return noise
