"""CUDA-graph padding of a decode step (TensorRT-LLM's `cuda_graph_config: enable_padding: true`):
a rank with m sequences runs the captured graph of the smallest size g >= m, its g - m dummy
generation requests running every token-proportional kernel while the attention reads only the
real sequences' KV. Values derived by hand below."""

from __future__ import annotations

import pytest

from shardline.serving.steptimes import graph_batch, padded_decode_s

# The overview's llm_options.yml batch sizes (TensorRT-LLM developer-guide/perf-overview.md)
SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256, 384, 512, 1024, 2048, 4096, 8192)


def test_graph_batch_is_the_next_captured_size() -> None:
    assert graph_batch(750, SIZES) == 1024
    assert graph_batch(1024, SIZES) == 1024
    assert graph_batch(300, SIZES) == 384
    assert graph_batch(9000, SIZES) == 9000  # past the largest graph: no padding
    assert graph_batch(750, ()) == 750  # no graphs stated


def _step(n: int, c: int) -> float:
    """An affine decode step: 5 ms fixed + 4 us per sequence + 1 ns per cached token read."""
    return 5e-3 + 4e-6 * n + 1e-9 * n * c


def test_padding_adds_the_dummies_token_work_not_their_kv() -> None:
    """Two ranks of 750 sequences at 5,120 tokens pad to 1,024 a rank. By hand:
    real step = 5e-3 + 4e-6 x 1,500 + 1e-9 x 1,500 x 5,120 = 5 + 6 + 7.68 = 18.68 ms;
    the dummies add step(2,048, 1) - step(1,500, 1) = 4e-6 x 548 + 1e-9 x 548 = 2.192548 ms
    (their one token each), 20.872548 ms in all."""
    t = padded_decode_s(_step, 2, 750, 5120, SIZES)
    assert _step(1500, 5120) == pytest.approx(18.68e-3, rel=1e-12)
    assert t == pytest.approx(18.68e-3 + 2.192548e-3, rel=1e-12)
    # on a captured size, or without graphs, the step is the plain one
    assert padded_decode_s(_step, 2, 1024, 5120, SIZES) == pytest.approx(_step(2048, 5120))
    assert padded_decode_s(_step, 2, 750, 5120, ()) == pytest.approx(_step(1500, 5120))


def test_step_times_pad_with_the_stated_graphs() -> None:
    """with_graph_padding prices a step of 300 sequences as the plain engine's step at
    300 plus what 84 more sequences of one cached token add (300 pads to the 384 graph)."""
    from shardline.hardware import load_chip
    from shardline.models import load_model
    from shardline.serving.engines import engine
    from shardline.serving.steptimes import step_times, with_graph_padding

    spec, chip = load_model("llama-3.1-8b"), load_chip("h100-sxm")
    plain = step_times(spec, chip, 1, "fp8", engine("trtllm"))
    padded = with_graph_padding(step_times(spec, chip, 1, "fp8", engine("trtllm")), 1, SIZES)
    assert with_graph_padding(plain, 1, ()) is plain
    expected = plain.decode_at(300, 100) + plain.decode_at(384, 1) - plain.decode_at(300, 1)
    assert padded.decode_at(300, 100) == pytest.approx(expected, rel=1e-12)
    assert padded.decode_at(300, 100) > plain.decode_at(300, 100)
    assert padded.decode_at(256, 100) == pytest.approx(plain.decode_at(256, 100), rel=1e-12)
