"""Static batching (serving/static.py) on step times whose formulas are known exactly."""

from __future__ import annotations

import pytest

from shardline.errors import InputError
from shardline.serving.config import Lengths
from shardline.serving.static import static_batch
from shardline.serving.steptimes import StepTimes


def _steps() -> StepTimes:
    """t_dec(n, c) = 0.01 + 1e-5 n + 1e-8 n c and t_p(L) = 1e-4 L."""
    return StepTimes(
        chip="test",
        tp=1,
        decode_point=lambda n, c: 0.01 + 1e-5 * n + 1e-8 * n * c,
        prefill_point=lambda tokens: 1e-4 * tokens,
        weights_bytes_per_device=0.0,
        activations_bytes_per_device=0.0,
        capacity_bytes_per_device=1e9,
        kv_bytes_per_token=1.0,
    )


def test_fixed_lengths_by_hand() -> None:
    # B = 4, I = 200, O = 10: prefill 4 x 1e-4 x 200 = 0.08 s; decode steps at contexts
    # 200..209: 10 x (0.01 + 4e-5) + 4e-8 x (200 + ... + 209) = 0.1004 + 4e-8 x 2045.
    sb = static_batch(_steps(), 4, Lengths("fixed", 200.0), Lengths("fixed", 10.0))
    decode = 10 * (0.01 + 4e-5) + 4e-8 * 2045
    assert sb.prefill_s == pytest.approx(0.08)
    assert sb.decode_s == pytest.approx(decode)
    assert sb.throughput_tokens_per_s == pytest.approx(40 / (0.08 + decode))
    assert sb.ttft_s == pytest.approx(0.08)
    assert sb.tpot_s == pytest.approx(decode / 10)
    assert sb.longest_output_tokens == 10


def test_batch_waits_for_its_longest_output() -> None:
    # uniform 10..30 outputs, B = 4: the longest is the 4/5 quantile, 10 + 20 x 0.8 = 26
    # steps, while the useful tokens are 4 x 20 (the mean).
    sb = static_batch(_steps(), 4, Lengths("fixed", 200.0), Lengths("uniform", 20.0, 10.0, 30.0))
    assert sb.longest_output_tokens == 26
    decode = 26 * (0.01 + 4e-5) + 4e-8 * sum(range(200, 226))
    assert sb.decode_s == pytest.approx(decode)
    assert sb.throughput_tokens_per_s == pytest.approx(80 / (0.08 + decode))


def test_empty_batch_is_refused() -> None:
    with pytest.raises(InputError):
        static_batch(_steps(), 0, Lengths("fixed", 1.0), Lengths("fixed", 1.0))
