"""Serving step times (serving/steptimes.py): every step is the plan engine's own at that point,
priced once per point; a fractional mean batch or context is the mix of the whole points around
it; the decode step is affine in the context at a fixed batch (the simulation's DecodeLine)."""

from __future__ import annotations

import math

import pytest

from shardline.hardware import resolve_chip
from shardline.models import load_model
from shardline.serving.analytic import Replica
from shardline.serving.config import Lengths, ServeConfig
from shardline.serving.engines import engine
from shardline.serving.simulate import DecodeLine
from shardline.serving.steptimes import StepTimes, price_step, step_times

MODEL, HW = "llama-3.2-1b", "h100-sxm"


def _engine_s(phase: str, batch: int, seq_len: int, dtype: str = "bf16") -> float:
    """The plan engine's realistic step, straight from `plan`."""
    spec, chip = load_model(MODEL), resolve_chip(HW)
    return float(price_step(spec, chip, 1, dtype, (phase, batch, seq_len)).predicted_s)


@pytest.fixture(scope="module")
def vllm_steps() -> StepTimes:
    return step_times(load_model(MODEL), resolve_chip(HW), 1, "bf16", engine("vllm"))


def test_steps_are_the_engines_at_whole_points(vllm_steps: StepTimes) -> None:
    # vLLM's scheduling overhead: 0.10 of the GPU step (engines.toml)
    scale = 1 + engine("vllm").scheduling_overhead_fraction
    assert scale == pytest.approx(1.1)
    for n, c in ((1, 1), (37, 2250), (300, 4097)):
        want = _engine_s("decode", n, c) * scale
        assert float(vllm_steps.decode_s(n, c)) == pytest.approx(want, rel=1e-12)
    for tokens in (1, 777, 2000):
        want = _engine_s("prefill", 1, tokens) * scale
        assert float(vllm_steps.prefill_s(tokens)) == pytest.approx(want, rel=1e-12)
    # a fractional prompt length is the whole prompt round(L)
    assert float(vllm_steps.prefill_s(776.6)) == float(vllm_steps.prefill_s(777))


def test_fractional_batch_and_context_mix_whole_points(vllm_steps: StepTimes) -> None:
    t = vllm_steps.decode_at
    # batch 37.25: 37 sequences for 3/4 of the steps, 38 for 1/4
    assert float(vllm_steps.decode_s(37.25, 2250)) == pytest.approx(
        0.75 * t(37, 2250) + 0.25 * t(38, 2250), rel=1e-12
    )
    # context 2250.5: halfway between the whole contexts; both at once: the four points
    assert float(vllm_steps.decode_s(37, 2250.5)) == pytest.approx(
        (t(37, 2250) + t(37, 2251)) / 2, rel=1e-12
    )
    both = 0.75 * 0.5 * (t(37, 2250) + t(37, 2251)) + 0.25 * 0.5 * (t(38, 2250) + t(38, 2251))
    assert float(vllm_steps.decode_s(37.25, 2250.5)) == pytest.approx(both, rel=1e-12)
    # below one sequence the step is one sequence's; arrays broadcast
    assert float(vllm_steps.decode_s(0.3, 2250)) == t(1, 2250)
    arr = vllm_steps.decode_s([37.25, 37.0], 2250)
    assert arr.tolist() == pytest.approx([0.75 * t(37, 2250) + 0.25 * t(38, 2250), t(37, 2250)])


@pytest.mark.parametrize(("model", "hw", "tp"), [(MODEL, HW, 1), ("llama-3.1-70b", "mi300x", 2)])
def test_decode_step_is_affine_in_the_context(model: str, hw: str, tp: int) -> None:
    """At a fixed batch the engine's decode step is a line in the context, 1 to 100,000 tokens
    (what DecodeLine and the fractional context rest on)."""
    st = step_times(load_model(model), resolve_chip(hw), tp, "fp8", engine("trtllm"))
    for n in (1, 60, 512):
        lo, hi = 1, 100_000
        line = DecodeLine(st, lo, hi)
        slope = (st.decode_at(n, hi) - st.decode_at(n, lo)) / (hi - lo)
        for c in (2, 129, 2250, 8193, 65_537):
            want = st.decode_at(n, c)  # the engine's own step at the whole context
            assert st.decode_at(n, lo) + (c - lo) * slope == pytest.approx(want, rel=1e-9)
            assert line.step_s(n, c) == pytest.approx(want, rel=1e-9)


def test_points_are_priced_once() -> None:
    calls: list[tuple[int, int]] = []

    def decode(n: int, c: int) -> float:
        calls.append((n, c))
        return 0.01 + 1e-4 * n

    st = StepTimes("t", 1, decode, lambda tokens: 1e-4 * tokens, 0.0, 0.0, 1e12, 1.0)
    st.decode_s([3.5, 3.5, 4.0], 100)
    st.decode_s(3.5, 100)
    assert sorted(calls) == [(3, 100), (4, 100)]
    assert st.points_priced == 2


def test_decode_line_falls_back_where_the_step_is_not_affine() -> None:
    # attention over a 100-token window: t = 0.01 + 1e-6 n min(c, 100) is not a line on
    # [50, 500], so the step is the one at the whole context round(c)
    window = StepTimes(
        "t", 1, lambda n, c: 0.01 + 1e-6 * n * min(c, 100), lambda x: 1e-4 * x, 0, 0, 1e12, 1.0
    )
    line = DecodeLine(window, 50, 500)
    assert line.step_s(8, 60.4) == pytest.approx(0.01 + 1e-6 * 8 * 60)
    assert line.step_s(8, 400.0) == pytest.approx(0.01 + 1e-6 * 8 * 100)
    # a line: t = 0.01 + 1e-6 n c at any real context
    affine = StepTimes("t", 1, lambda n, c: 0.01 + 1e-6 * n * c, lambda x: 1e-4 * x, 0, 0, 1e12, 1)
    assert DecodeLine(affine, 50, 500).step_s(8, 60.4) == pytest.approx(0.01 + 1e-6 * 8 * 60.4)


def test_running_batch_solves_littles_law_between_whole_batches() -> None:
    # t(n) = 0.01 + 1e-4 n^1.5 (not a line in n): the running batch b of lam = 4 req/s,
    # O = 100, separate prefill of 1e-5 x 100 = 1 ms (rho_p = 0.004) solves
    # b (1 - rho_p) = lam O ((1 - w) t(n) + w t(n + 1)), n = floor(b), w = b - n
    def t(n: int) -> float:
        return 0.01 + 1e-4 * n**1.5

    st = StepTimes("t", 1, lambda n, c: t(n), lambda x: 1e-5 * x, 0.0, 0.0, 1e12, 1.0)
    cfg = ServeConfig(4.0, Lengths("fixed", 100), Lengths("fixed", 100), 1, 1, 256, None)
    rep = Replica(st, cfg, 0.9)
    b = rep.batch(4.0, rep.tp1)
    n, w = math.floor(b), b - math.floor(b)
    assert rep.tp1 == pytest.approx(1e-3)
    assert b * 0.996 == pytest.approx(400 * ((1 - w) * t(n) + w * t(n + 1)), rel=1e-12)
    # between 4 and 5 sequences: at 4 the replica falls short (4 x 0.996 / t(4) = 369 < 400
    # tokens/s), at 5 it keeps up (448)
    assert n == 4 and 400 * t(4) > 4 * 0.996 and 400 * t(5) <= 5 * 0.996
    # a trickle: below one sequence the step is t(1), b = lam O t(1) / (1 - rho_p)
    assert rep.batch(0.1, 1e-3) == pytest.approx(0.1 * 100 * t(1) / (1 - 1e-4), rel=1e-12)
    # more than the limit can serve: the limit
    assert rep.batch(1e4, 0.0) == 256
