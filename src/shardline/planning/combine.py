"""The arithmetic that turns a stage's sums into a step, written once over numpy arrays (a scalar
is an array of one): the plan engine (`planning.phases`, `planning.step`) calls it for one
layout, the training search (`planning.vector_eval`) for every layout at once.

- a phase (forward or backward) of one microbatch on one stage:
  `compute + critical + max(contention, overlapped - compute)`: the critical communication the
  next op waits for, and whatever of the overlapped communication outlasts the compute; the
  overlapped kernels that hold SMs of their own slow the compute beside them by `contention`
  (seconds of compute lost) whichever is larger;
- the schedule, in slowest-stage microbatch times (`cycles`): training under 1F1B with V
  interleaved chunks `m + (P - 1)/V` (Narayanan et al. 2021; V = 1 is plain 1F1B, whose bubble
  is GPipe's (P - 1)); prefill `m + P - 1`; decode `max(m, P)` (one token for the whole batch
  passes all P stages; m >= P microbatches in flight keep them busy);
- the data-parallel gradient traffic the backward pass cannot hide: reduced in buckets while it
  runs, the last bucket always waits, and whatever outlasts the last microbatch's backward
  shows: `max(last bucket, gradient traffic - backward)`, 0 without gradient traffic;
- ZeRO's all-gather of the updated parameters follows the optimizer step, so no backward hides
  it: overlapped with the next step's first forward pass (Megatron-Core's
  --overlap-param-gather dispatches each bucket's all-gather from the forward pre-hooks) what
  outlasts that forward shows, `max(0, gather - forward)`; not overlapped (forward 0) all of it.
"""

from __future__ import annotations

from typing import Any, TypeVar

import numpy as np

__all__ = [
    "phase_s",
    "exposed_comm_s",
    "cycles",
    "exposed_gradient_s",
    "exposed_gather_s",
    "TIE",
    "slowest_stage",
]

Seconds = TypeVar("Seconds", float, np.ndarray)


def exposed_comm_s(
    compute_s: Seconds, critical_s: Seconds, overlapped_s: Seconds, contention_s: Seconds
) -> Seconds:
    """The communication a phase waits for: `critical + max(contention, overlapped - compute)`."""
    return critical_s + np.maximum(contention_s, overlapped_s - compute_s)


def phase_s(
    compute_s: Seconds, critical_s: Seconds, overlapped_s: Seconds, contention_s: Seconds
) -> Seconds:
    """One phase of one microbatch: `compute + exposed_comm_s`."""
    return compute_s + exposed_comm_s(compute_s, critical_s, overlapped_s, contention_s)


def cycles(
    training: bool, decode: bool, m: Seconds, stages: Seconds, interleave: Seconds
) -> Seconds:
    """Slowest-stage microbatch times per step (module docstring)."""
    if training:
        return m + (stages - 1) / interleave
    if decode:
        return np.maximum(m, stages) * 1.0
    return m + stages - 1.0


def exposed_gradient_s(grad_s: Seconds, last_bucket_s: Seconds, backward_s: Seconds) -> Seconds:
    """Gradient traffic the last backward pass cannot hide (module docstring)."""
    exposed = np.where(grad_s > 0, np.maximum(last_bucket_s, grad_s - backward_s), 0.0)
    return exposed if isinstance(grad_s, np.ndarray) else float(exposed)


def exposed_gather_s(gather_s: Seconds, forward_s: Seconds) -> Seconds:
    """The parameter all-gather the next forward pass cannot hide (module docstring)."""
    exposed = np.maximum(0.0, gather_s - forward_s)
    return exposed if isinstance(gather_s, np.ndarray) else float(exposed)


# relative: stage times this close are one time summed in another order (an end stage and a
# middle one both bound by the same overlapped traffic come out an ulp apart)
TIE = 1e-12


def slowest_stage(times_s: list[float] | np.ndarray) -> Any:
    """The stage whose realistic time paces the pipeline: the earliest within `TIE` of the
    largest, so that the choice (whose backward pass hides the gradient traffic) does not turn
    on the order of a sum. `times_s` [stage] (the plan engine: an int) or [stage, layout] (the
    vectorized search: an index per layout)."""
    times = np.asarray(times_s, dtype=float)
    top = times.max(axis=0)
    found = np.argmax(times >= top * (1 - TIE), axis=0)
    return int(found) if times.ndim == 1 else found
