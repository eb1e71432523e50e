"""The fused attention kernel's dtype (`attention_dtype`, `--attention-dtype`): 8-bit training
keeps it in bf16 as Transformer Engine does (its fp8 recipes leave `fp8_dpa` off), values derived
by hand below."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shardline.cli.main import main
from shardline.errors import InputError
from shardline.hardware import load_chip
from shardline.io.workload_toml import workload_from_dict
from shardline.ops.roofline import evaluate_einsum
from shardline.workload.precision import default_attention_dtype, with_tensor_dtypes

TEMPLATE = {"d_model": 1024, "d_ff": 4096, "heads": 8, "seq_len": 512, "batch": 4, "layers": 2}
# attn_scores q[B,S,G,R,E] * k[B,T,G,E]: 2 B S T H E = 2 x 4 x 512 x 512 x 8 x 128 FLOPs
SCORES_FLOPS = 2 * 4 * 512 * 512 * 8 * 128


def _workload(**extra: Any) -> Any:
    return workload_from_dict({"transformer": {**TEMPLATE, **extra}})


def _attention(workload: Any) -> list[Any]:
    return [layer for layer in workload.layers if layer.kernel == "attention"]


def _compute_s(layer: Any, hw: str = "h100-sxm") -> float:
    cost = evaluate_einsum(
        layer.parsed, dict(layer.dims), load_chip(hw), dict(layer.dtypes), layer.compute_dtype
    ).cost
    return float(cost.t_compute_s)


def test_fp8_training_runs_attention_in_bf16_and_the_gemms_in_fp8() -> None:
    w = _workload(dtype="fp8", phase="training")
    attention = _attention(w)
    assert [x.name for x in attention] == ["attn_scores", "attn_values"]
    for layer in attention:
        assert layer.compute_dtype == "bf16" and set(layer.dtypes.values()) == {"bf16"}
    qkv = next(x for x in w.layers if x.name == "attn_qkv")
    assert qkv.compute_dtype == "fp8"
    # at the H100 datasheet bf16 peak, 989.4e12 FLOP/s: 2,147,483,648 / 989.4e12 = 2.170 us
    scores = attention[0]
    assert SCORES_FLOPS == 2_147_483_648
    assert _compute_s(scores) == pytest.approx(SCORES_FLOPS / 989.4e12, rel=1e-9)


def test_attention_dtype_fp8_runs_at_the_fp8_peak() -> None:
    w = _workload(dtype="fp8", phase="training", attention_dtype="fp8")
    scores = _attention(w)[0]
    assert scores.compute_dtype == "fp8"
    assert _compute_s(scores) == pytest.approx(SCORES_FLOPS / 1979e12, rel=1e-9)


def test_defaults_leave_inference_and_wide_training_alone() -> None:
    assert default_attention_dtype("fp8", "training") == "bf16"
    assert default_attention_dtype("int8", "training") == "bf16"
    assert default_attention_dtype("fp8", "prefill") is None
    assert default_attention_dtype("bf16", "training") is None
    for layer in _attention(_workload(dtype="fp8", phase="prefill")):
        assert layer.compute_dtype == "fp8"  # serving engines state their own (not TE's rule)
    for layer in _attention(_workload(dtype="bf16", phase="training")):
        assert layer.compute_dtype == "bf16"


def test_decode_keeps_the_cache_dtype_under_attention_dtype() -> None:
    w = with_tensor_dtypes(
        _workload(phase="decode"), kv_dtype="fp8", attention_dtype="fp8"
    )  # an fp8 cache read by an fp8 attention kernel
    scores = _attention(w)[0]
    assert scores.dtypes["k"] == "fp8" and scores.compute_dtype == "fp8"
    w = with_tensor_dtypes(_workload(phase="decode"), kv_dtype="fp8", attention_dtype="bf16")
    scores = _attention(w)[0]
    assert scores.dtypes["k"] == "fp8" and scores.dtypes["q"] == "bf16"


def _predicted(capsys: pytest.CaptureFixture[str], *extra: str) -> float:
    argv = ["plan", "--model", "llama-3.1-8b", "--hw", "h100", "--devices", "8", "--batch", "8"]
    fixed = ["--fsdp", "8", "--dtype", "fp8", "--json"]
    assert main([*argv, *fixed, *extra]) == 0
    return float(json.loads(capsys.readouterr().out)["plans"][0]["predicted_s"])


def test_cli_flag_moves_the_step(capsys: pytest.CaptureFixture[str]) -> None:
    default = _predicted(capsys)
    assert _predicted(capsys, "--attention-dtype", "bf16") == pytest.approx(default, rel=1e-12)
    assert _predicted(capsys, "--attention-dtype", "fp8") < default


def test_bad_attention_dtype(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(InputError, match="attention_dtype"):
        _workload(attention_dtype=5)
    with pytest.raises(InputError, match="dtype"):
        _workload(attention_dtype="fp7")
    argv = ["plan", "--model", "llama-3.1-8b", "--hw", "h100", "--devices", "1"]
    assert main([*argv, "--attention-dtype", "fp7"]) == 2
    assert capsys.readouterr().err.startswith("error:")


def test_four_bit_inference_runs_attention_in_fp8() -> None:
    """No serving attention kernel takes 4-bit q, k, v (the narrowest is fp8: TensorRT-LLM's FP8
    context FMHA, FlashInfer's trtllm-gen FP8-q/kv kernels), so a prefill or decode in fp4 runs
    the fused attention at the fp8 rate: on B200 the scores einsum takes
    SCORES_FLOPS / 4.5e15 (the fp8 datasheet peak), not SCORES_FLOPS / 9e15 (fp4's)."""
    assert default_attention_dtype("fp4", "prefill") == "fp8"
    assert default_attention_dtype("fp4", "decode") == "fp8"
    assert default_attention_dtype("fp4", "training") == "bf16"  # Transformer Engine's rule
    assert default_attention_dtype("fp8", "decode") is None  # 8 bits already: unchanged
    w = _workload(dtype="fp4", phase="prefill")
    scores = _attention(w)[0]
    assert scores.compute_dtype == "fp8"
    assert next(x for x in w.layers if x.name == "attn_qkv").compute_dtype == "fp4"
    # 2,147,483,648 FLOPs / 4.5e15 FLOP/s = 0.477 us
    assert _compute_s(scores, "b200") == pytest.approx(SCORES_FLOPS / 4.5e15, rel=1e-9)
