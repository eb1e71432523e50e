"""Timing a callable properly: warm-up, then repeated samples, each long enough to be read by the
clock, reported as the median (and min/max) seconds per call."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Timing", "time_call", "DEFAULT_REPEATS", "DEFAULT_WARMUP", "MIN_SAMPLE_S"]

DEFAULT_REPEATS = 7  # samples; the median of an odd count is one of them
DEFAULT_WARMUP = 2  # untimed calls first: caches, page faults, library initialisation
MIN_SAMPLE_S = 0.02  # each sample repeats the call until it lasts at least this long


@dataclass(frozen=True)
class Timing:
    median_s: float
    min_s: float
    max_s: float
    samples: int
    calls_per_sample: int


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

    def run(calls: int) -> float:
        if sync is not None:
            sync()
        start = clock()
        for _ in range(calls):
            fn()
        if sync is not None:
            sync()
        return clock() - start

    for _ in range(max(0, warmup)):
        run(1)
    first = max(run(1), 1e-9)
    calls = max(1, math.ceil(min_sample_s / first))
    samples = sorted(run(calls) / calls for _ in range(max(1, repeats)))
    return Timing(statistics.median(samples), samples[0], samples[-1], len(samples), calls)
