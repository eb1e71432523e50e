"""The optimizer step as a framework's code runs it (frameworks/*.toml [optimizer_step],
shardline.planning.step.optimizer_step_s): Composer's DecoupledAdamW, a Python loop of tensor
ops over the fp32 FSDP shards, and FSDP's gradient-norm clipping, against the fused
multi-tensor Adam (one pass) of the other frameworks."""

from __future__ import annotations

from typing import Any

import pytest

from shardline.basics.framework import optimizer_step_tensors
from shardline.hardware import resolve_chip
from shardline.planning.api import plan
from shardline.planning.results import PlanResult
from shardline.workload.templates import transformer

REL = 1e-9


def test_composer_adamw_and_fsdp_clipping_counted_from_their_code() -> None:
    # composer/optim/decoupled_weight_decay.py DecoupledAdamW.adamw (weight_decay 0: no
    # param.mul_), per parameter element, (reads, writes) of fp32 tensors:
    adam = [
        (1, 1),  # exp_avg.mul_(beta1)
        (2, 1),  # .add_(grad, alpha=1 - beta1)
        (1, 1),  # exp_avg_sq.mul_(beta2)
        (3, 1),  # .addcmul_(grad, grad, value=1 - beta2)
        (1, 1),  # exp_avg_sq.sqrt()
        (1, 1),  # / math.sqrt(bias_correction2)
        (1, 1),  # .add_(eps)
        (3, 1),  # param.addcdiv_(exp_avg, denom, value=-step_size)
    ]
    # FSDP.clip_grad_norm_: vector_norm of each gradient, then grad.mul_(clip_coef_clamped)
    clip = [(1, 0), (1, 1)]
    reads = sum(r for r, _ in adam + clip)
    writes = sum(w for _, w in adam + clip)
    assert (reads, writes) == (15, 9)
    assert optimizer_step_tensors("llm-foundry") == (reads, writes)
    # Megatron-Core, torchtitan (fused AdamW), DeepSpeed (FusedAdam), MaxText (one XLA
    # program): a fused multi-tensor Adam, priced in one pass
    for name in ("megatron", "torchtitan", "deepspeed", "maxtext"):
        assert optimizer_step_tensors(name) is None


def _fsdp8(**kw: Any) -> PlanResult:
    w = transformer(
        d_model=1024, d_ff=2816, heads=16, kv_heads=4, head_dim=64, batch=16, seq_len=1024,
        layers=4, vocab=None,
    )  # fmt: skip
    result = plan(w, "h100-sxm", 8, require_fit=False, fsdp=8, microbatches=1, **kw)
    assert len(result.plans) == 1
    return result.plans[0]


def test_llm_foundry_step_moves_24_fp32_tensors_per_parameter() -> None:
    # 4 blocks of d(H + 2G)Q + HQd + 3 d d_ff parameters, sharded 8 ways by FSDP
    params = 4 * (1024 * (16 + 8) * 64 + 16 * 64 * 1024 + 3 * 1024 * 2816) / 8
    chip = resolve_chip("h100-sxm")
    rate = chip.achievable.mem_bytes_per_s
    launch = max(chip.achievable.launch_overhead_s, chip.achievable.kernel_floor_s)
    foundry = _fsdp8(framework="llm-foundry").predicted_breakdown_s["optimizer_s"]
    # (15 + 9) fp32 tensors of 4 B per parameter element, one memory-bound kernel's launch
    assert foundry == pytest.approx(params * 24 * 4 / rate + launch, rel=REL)
    # the fused Adam over bf16 weights: read the weights and gradients (and the gradients again
    # for the clipping: 2 x 2 B + 2 x 2 B), read and write the 12 B of fp32 state: 32 B
    fused = _fsdp8(framework="megatron").predicted_breakdown_s["optimizer_s"]
    assert fused == pytest.approx(params * 32 / rate + launch, rel=REL)


def test_another_optimizer_under_llm_foundry_is_priced_fused() -> None:
    # the table counts Adam's two moments: momentum SGD (8 B of state: one moment and the fp32
    # master) is priced in one pass, 2 x 2 + 2 x 2 + 2 x 8 = 24 B per parameter
    params = 4 * (1024 * (16 + 8) * 64 + 16 * 64 * 1024 + 3 * 1024 * 2816) / 8
    chip = resolve_chip("h100-sxm")
    launch = max(chip.achievable.launch_overhead_s, chip.achievable.kernel_floor_s)
    sgd = _fsdp8(framework="llm-foundry", optimizer="sgd").predicted_breakdown_s["optimizer_s"]
    assert sgd == pytest.approx(params * 24 / chip.achievable.mem_bytes_per_s + launch, rel=REL)
