"""The event simulation's decode-only stretches (`simulate._decode_stretch`: the steps between an
arrival that finds a free slot and the next finish, on Python scalars) take the very steps the
step-by-step loop takes: every array of the run equal to the bit, over chunked and separate
prefill, a full batch, disaggregated pools, prefix caching, several tokens per step, contexts
that change the step (affine or not) and whole and exponential lengths."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import fields

import numpy as np
import pytest

from shardline.serving import simulate
from shardline.serving.config import Lengths, ServeConfig, parse_lengths
from shardline.serving.simulate import poisson_requests, simulate_replica
from shardline.serving.steptimes import StepTimes


def _steps(decode: Callable[[int, int], float]) -> StepTimes:
    return StepTimes(
        chip="synthetic",
        tp=1,
        decode_point=decode,
        prefill_point=lambda tokens: 2e-5 * tokens,
        weights_bytes_per_device=0.0,
        activations_bytes_per_device=0.0,
        capacity_bytes_per_device=1e12,
        kv_bytes_per_token=1.0,
    )


def _affine(n: int, c: int) -> float:  # each sequence reads its c tokens of KV
    return 0.01 + 1e-4 * n + 3e-8 * n * c


def _root(n: int, c: int) -> float:  # not affine in c: the step at the whole context round(c)
    return 0.01 + 1e-4 * n * math.sqrt(c)


CASES = {
    "chunked, exponential lengths": (_affine, "exp:300", "exp:60", 8.0, {"chunk_tokens": 64}),
    "separate prefill, a full batch": (_affine, "200", "50", 400.0, {"max_batch": 16}),
    "disaggregated pools": (_affine, "500", "80", 20.0, {"disagg": (1, 1)}),
    "prefix cache, context not affine": (_root, "exp:400", "exp:150", 5.0, {"prefix_hit": 0.5}),
    "four tokens per step": (_affine, "300", "exp:90", 30.0, {"spec_k": 3, "spec_alpha": 1.0}),
}


def _run(case: str) -> simulate.SimResult:
    decode, inp, out, rate, kw = CASES[case]
    cfg = ServeConfig(rate, parse_lengths(inp, "--in"), parse_lengths(out, "--out"), 1, 1, **kw)
    return simulate_replica(_steps(decode), cfg, 0.9, poisson_requests(cfg, rate, 300, seed=7))


@pytest.mark.parametrize("case", list(CASES))
def test_stretches_take_the_loops_steps(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    single: list[int] = []
    step = simulate._step
    monkeypatch.setattr(simulate, "_step", lambda *a: single.append(1) or step(*a))
    fast = _run(case)
    looped = len(single)
    monkeypatch.setattr(simulate, "_whole_tokens", lambda *a: False)  # every step by the loop
    slow = _run(case)
    assert len(fast.time_s) > 500
    for f in fields(simulate.SimResult):
        if f.name != "requests":
            got, want = getattr(fast, f.name), getattr(slow, f.name)
            assert np.array_equal(got, want, equal_nan=True), f.name
    # the stretches took a good share of the steps: the loop took those that admit or finish
    assert looped < 0.6 * len(fast.time_s)


def test_fractional_tokens_are_left_to_the_loop() -> None:
    """Tokens per step of 3.3616 (k = 4, alpha = 0.8) make fractional contexts, whose sums
    depend on their order: the loop takes every step."""
    per_token = np.full(3, 1e-5)
    whole = Lengths("fixed", 100).sample(np.random.default_rng(0), 3)
    reqs = simulate.Requests(np.arange(3.0), whole, whole)
    assert simulate._whole_tokens(reqs, 1.0, per_token)
    assert not simulate._whole_tokens(reqs, 3.3616, per_token)
    assert not simulate._whole_tokens(
        simulate.Requests(np.arange(3.0), whole + 0.5, whole), 1.0, per_token
    )
    assert not simulate._whole_tokens(reqs, 1.0, np.array([1e-5, np.inf, 1e-5]))
