"""The A100's FlashAttention-2 backward figure (issue 24): the chip files carry the FA2 paper's
backward efficiency (up to 63% of the dense peak, Dao 2023, arXiv 2307.08691, section 1) beside
its forward (73%), so a training step's attention backward is no longer priced at the forward's
rate. Values derived by hand below."""

from __future__ import annotations

from dataclasses import replace

import pytest

from shardline.hardware import load_chip
from shardline.realistic.kernels import attention_efficiency, attention_work_s
from shardline.workload.templates import transformer

A100_BF16_PEAK = 312e12  # NVIDIA A100 datasheet, dense BF16 tensor core


@pytest.mark.parametrize("name", ["a100-80gb", "a100-40gb"])
def test_a100_attention_backward_is_the_fa2_papers_63_percent(name: str) -> None:
    chip = load_chip(name)
    assert chip.peak("bf16") == A100_BF16_PEAK
    assert attention_efficiency(chip, "bf16", backward=False) == pytest.approx(0.73)
    assert attention_efficiency(chip, "bf16", backward=True) == pytest.approx(0.63)


def test_a100_attention_backward_einsum_runs_at_the_backward_rate() -> None:
    chip = load_chip("a100-80gb")
    w = transformer(d_model=4096, d_ff=16384, heads=32, head_dim=128, layers=1, batch=1,
                    seq_len=8192, phase="training")  # fmt: skip
    scores = next(x for x in w.layers if x.name == "attn_scores")
    # 8k tokens: the long-sequence figures stand (shardline.realistic.attention_length)
    # scores q[B,S,G,R,E] * k[B,T,G,E]: 2 B S T G R E = 2 x 8192 x 8192 x 32 x 128 FLOPs
    flops = 2 * 1 * 8192 * 8192 * 32 * 1 * 128
    assert flops == 549_755_813_888
    fwd = attention_work_s(scores, chip, scores.dims, causal=True, decode=False)
    # forward: the causal half at 0.73 x 312e12 = 227.76e12 FLOP/s -> 1.2069 ms
    assert fwd == pytest.approx(flops * 0.5 / (0.73 * 312e12))
    assert fwd == pytest.approx(1.2069e-3, rel=1e-3)
    back = replace(scores, phase="backward")
    bwd = attention_work_s(back, chip, back.dims, causal=True, decode=False)
    # backward einsum: the FA kernel's 2.5x over two einsums = 1.25x this einsum's causal FLOPs,
    # at 0.63 x 312e12 = 196.56e12 FLOP/s: 549.76e9 x 0.5 x 1.25 / 196.56e12 = 1.748 ms (at the
    # forward's 0.73 it was 1.509 ms: 0.73 / 0.63 = 1.159x longer now)
    assert bwd == pytest.approx(flops * 0.5 * 1.25 / (0.63 * 312e12))
    assert bwd == pytest.approx(1.7480e-3, rel=1e-3)
    assert bwd / (flops * 0.5 * 1.25 / (0.73 * 312e12)) == pytest.approx(0.73 / 0.63)
