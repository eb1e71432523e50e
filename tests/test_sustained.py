"""The sustained matmul rate of a training step (shardline.realistic.sustained): the chip file's
MSMF / MAMF fraction (stas00/ml-engineering, "Maximum Achievable and Sustainable Matmul FLOPS
comparison table") derates the tensor-core work of a training step and nothing else."""

from __future__ import annotations

import tomllib
from dataclasses import replace
from typing import Any

import pytest

from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip
from shardline.hardware.catalog import catalog_files, chip_from_dict
from shardline.planning.api import plan
from shardline.planning.results import PlanResult
from shardline.realistic.sustained import sustained_chip, sustained_fraction
from shardline.workload.templates import transformer
from shardline.workload.workload import Workload

REL = 1e-9


def test_published_fractions_are_msmf_over_mamf() -> None:
    # H200 SXM bf16: MSMF 755 / MAMF 850 TFLOPS; H100 SXM takes the H200's (same GH100 die,
    # same 700 W limit); B200 SXM bf16: 1439 / 1737; B300 SXM bf16: 1519 / 1892
    assert sustained_fraction(resolve_chip("h200")) == pytest.approx(755 / 850, abs=5e-4)
    assert sustained_fraction(resolve_chip("h100-sxm")) == pytest.approx(755 / 850, abs=5e-4)
    assert sustained_fraction(resolve_chip("b200")) == pytest.approx(1439 / 1737, abs=5e-4)
    assert sustained_fraction(resolve_chip("b300")) == pytest.approx(1519 / 1892, abs=5e-4)
    # no MSMF published for the A100 SXM: Horace He's power-saturating 8192^3 bf16 matmul with
    # random inputs at the 400 W limit, 257 TFLOPS, over the 271.2 TFLOPS burst MAMF
    assert sustained_fraction(resolve_chip("a100-80gb")) == pytest.approx(257 / 271.2, abs=5e-4)
    assert sustained_fraction(resolve_chip("a100-40gb")) == pytest.approx(257 / 271.2, abs=5e-4)
    # no sustained figure for the L40S: its burst rate stands
    assert sustained_fraction(resolve_chip("l40s")) == 1.0


def test_gb200_fraction_is_the_b200_msmf_moved_to_1200_w() -> None:
    # No GB200 MSMF is published. The B200's sustained BF16 rate (MSMF 1439 TFLOPS at its 1000 W
    # limit) moved to the GB200's 1200 W by the power model (switching power ~ f^3 above a static
    # part taken as the H100's share, 73 of 700 W): clock ratio ((1200 - s) / (1000 - s))^(1/3)
    # with s = 1000 x 73 / 700; the sustained rate over the GB200's burst MAMF, 1822 TFLOPS.
    static_w = 1000 * 73 / 700
    clock = ((1200 - static_w) / (1000 - static_w)) ** (1 / 3)
    assert clock == pytest.approx(1.0695, abs=5e-5)
    expected = 1439e12 * clock / 1822e12
    gb200 = resolve_chip("gb200")
    assert sustained_fraction(gb200) == pytest.approx(expected, abs=5e-4)
    # a training step's GEMMs on the GB200 run at 1822e12 x 0.845 = 1539.6e12
    s = sustained_chip(gb200)
    assert s.achievable.matmul_flops_per_s["bf16"] == pytest.approx(1822e12 * 0.845, rel=REL)


def test_blackwell_attention_figures_are_the_flashattention4_rates() -> None:
    # FlashAttention-4 on sm_100, head dim 128, seqlen 8192, not causal (flash-attention pull
    # request 2280): backward 1359.8 TFLOPS; forward up to 1613 (FA4 paper). Over each chip's
    # dense BF16 peak: B200 2250e12, GB200 2500e12 (the same silicon at 1200 W).
    b200 = resolve_chip("b200").achievable
    assert b200.attention_fwd_efficiency == pytest.approx(1613 / 2250, abs=5e-4)
    assert b200.attention_bwd_efficiency == pytest.approx(1359.8 / 2250, abs=5e-4)
    gb200 = resolve_chip("gb200").achievable
    assert gb200.attention_fwd_efficiency == pytest.approx(1613 / 2500, abs=5e-4)
    assert gb200.attention_bwd_efficiency == pytest.approx(1359.8 / 2500, abs=5e-4)


def test_sustained_chip_scales_matmul_rates_and_attention_only() -> None:
    h100 = resolve_chip("h100-sxm")
    s = sustained_chip(h100)
    # bf16 794.5e12 x 0.888 = 705.516e12; fp8 1402.6e12 x 0.888 = 1245.5088e12
    assert s.achievable.matmul_flops_per_s["bf16"] == pytest.approx(705.516e12, rel=REL)
    assert s.achievable.matmul_flops_per_s["fp8"] == pytest.approx(1245.5088e12, rel=REL)
    # FlashAttention-3: 0.748 x 0.888 = 0.664224 forward, 0.567 x 0.888 = 0.503496 backward
    assert s.achievable.attention_fwd_efficiency == pytest.approx(0.664224, rel=REL)
    assert s.achievable.attention_bwd_efficiency == pytest.approx(0.503496, rel=REL)
    # peaks, HBM bandwidth, kernel floors and launch costs do not move
    assert s.peak_flops_per_s == h100.peak_flops_per_s
    assert s.achievable.mem_bytes_per_s == h100.achievable.mem_bytes_per_s
    assert s.achievable.gemm_kernel_floor_s == h100.achievable.gemm_kernel_floor_s
    assert s.achievable.launch_overhead_s == h100.achievable.launch_overhead_s
    # the same derated chip every time (the kernel-time memo keys on its identity)
    assert sustained_chip(h100) is s
    l40s = resolve_chip("l40s")
    assert sustained_chip(l40s) is l40s


def _llama(phase: str) -> Workload:
    return transformer(
        d_model=4096, d_ff=14336, heads=32, kv_heads=8, head_dim=128, batch=8, seq_len=4096,
        layers=2, gated=True, attention="flash", dtype="bf16", phase=phase,
    )  # fmt: skip


def _one(workload: Workload, chip: Any) -> PlanResult:
    result = plan(workload, chip, 1, require_fit=False, tp=1, pp=1, dp=1, fsdp=1)
    return result.plans[0]


def _burst(chip: Chip) -> Chip:
    return replace(chip, achievable=replace(chip.achievable, sustained_matmul_fraction=None))


def test_training_attention_kernel_runs_at_the_sustained_rate() -> None:
    # the fused attention kernel of a long sequence is FLOP-bound: FLOPs / (efficiency x peak),
    # so the sustained efficiency (x 0.888) makes it 1 / 0.888 longer, launches aside
    h100 = resolve_chip("h100-sxm")
    f = sustained_fraction(h100)
    ach = h100.achievable
    assert ach.launch_overhead_s and ach.kernel_floor_s
    launches = 2 * 2 * max(ach.launch_overhead_s, ach.kernel_floor_s)  # 2 blocks, fwd and bwd
    sustained = _one(_llama("training"), h100).predicted_breakdown_s["attention_s"]
    burst = _one(_llama("training"), _burst(h100)).predicted_breakdown_s["attention_s"]
    assert sustained - launches == pytest.approx((burst - launches) / f, rel=1e-6)


def test_training_gemms_slow_down_and_inference_does_not() -> None:
    # a training GEMM's compute term runs at 0.888 x the burst rate: its GEMM seconds grow by at
    # most 1 / 0.888 (the launch and floor terms are unchanged); prefill keeps the burst rate
    h100 = resolve_chip("h100-sxm")
    f = sustained_fraction(h100)
    train = _one(_llama("training"), h100).predicted_breakdown_s["gemm_s"]
    train_burst = _one(_llama("training"), _burst(h100)).predicted_breakdown_s["gemm_s"]
    assert train_burst < train <= train_burst / f * (1 + 1e-9)
    assert train > train_burst * (1 + 0.9 * (1 / f - 1))  # large GEMMs: nearly all compute
    prefill = _one(_llama("prefill"), h100).predicted_breakdown_s["gemm_s"]
    prefill_burst = _one(_llama("prefill"), _burst(h100)).predicted_breakdown_s["gemm_s"]
    assert prefill == pytest.approx(prefill_burst, rel=REL)


def test_training_lower_bound_stays_at_peak() -> None:
    h100 = resolve_chip("h100-sxm")
    sustained = _one(_llama("training"), h100).latency_s
    burst = _one(_llama("training"), _burst(h100)).latency_s
    assert sustained == pytest.approx(burst, rel=REL)


def test_fraction_above_one_is_refused() -> None:
    # a sustained rate above the burst rate would make a long run faster than a short one
    entry = next(e for e in catalog_files() if e.name == "h100-sxm.toml")
    data = tomllib.loads(entry.read_text(encoding="utf-8"))
    data["achievable"]["sustained_matmul_fraction"]["value"] = 1.2
    with pytest.raises(InputError, match="sustained_matmul_fraction"):
        chip_from_dict(data)


def test_hw_show_prints_the_fraction_with_its_source() -> None:
    from shardline.report.hardware import render_chip

    line = next(x for x in render_chip(resolve_chip("b200")).splitlines() if "sustained" in x)
    # 1439 / 1737 = 0.828 -> 82.8%
    assert "82.8% in training" in line and "MSMF 1439" in line
    assert "sustained" not in render_chip(resolve_chip("l40s"))
