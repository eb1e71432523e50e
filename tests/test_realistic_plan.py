"""The realistic whole-model answers of `shardline plan`, each against a value derived by hand here:
resident KV cache and the decode pipeline rule, activation memory (Korthikanti et al. 2022), the
interleaved 1F1B bubble (Narayanan et al. 2021), MFU and HFU (Chowdhery et al. 2022, PaLM,
appendix B), ZeRO and optimizer state (Rajbhandari et al. 2020), sequence parallelism's
collectives, the CLI contract and the Megatron-LM runs of benchmarks/data/e2e_runs.toml."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from shardline.basics.options import Execution
from shardline.cli.main import main
from shardline.hardware import resolve_chip
from shardline.io.workload_toml import load_workload
from shardline.planning.api import plan
from shardline.planning.evaluate import Context
from shardline.planning.results import PlanResult
from shardline.strategies import Degrees
from shardline.workload.templates import transformer
from shardline.workload.workload import Workload
from tests.cli_run import run_cli

ROOT = Path(__file__).resolve().parent.parent
L70 = Path(__file__).resolve().parent / "data" / "l70.toml"
REL = 1e-9

# The Llama-3-70B-like shape of tests/data/l70.toml.
L70_LAYERS, L70_D, L70_FF, L70_H, L70_G, L70_Q = 80, 8192, 28672, 64, 8, 128
# One block's weights: W_qkv d x (H + 2G) x Q, W_o H Q x d, three d x d_ff (SwiGLU).
L70_LAYER_PARAMS = (
    L70_D * (L70_H + 2 * L70_G) * L70_Q + L70_H * L70_Q * L70_D + 3 * L70_D * L70_FF
)  # = 855,638,016


def _one(workload: Workload, hw: str, devices: int, **kw: Any) -> PlanResult:
    """The single plan with every degree fixed (tp, pp, dp, fsdp given; others default 1)."""
    degrees = {k: kw.pop(k, 1) for k in ("tp", "pp", "dp", "fsdp")}
    result = plan(workload, hw, devices, require_fit=False, **degrees, **kw)
    assert len(result.plans) == 1
    return result.plans[0]


def _gpt(**kw: Any) -> Workload:
    """A GPT-style block as in Korthikanti et al. 2022: GeLU FFN of 4h, multi-head attention
    (kv_heads = heads, head_dim = h / a), scores in HBM, fp16, no vocabulary."""
    sizes: dict[str, Any] = dict(
        d_model=1024, d_ff=4096, heads=16, kv_heads=16, head_dim=64, batch=4, seq_len=512,
        layers=4, gated=False, attention="standard", dtype="fp16",
    )  # fmt: skip
    sizes.update(kw)
    return transformer(**sizes)


def _non_bubble_s(p: PlanResult) -> float:
    """The m microbatches' realistic time through the slowest stage (the breakdown less the
    bubble and the optimizer step)."""
    b = p.predicted_breakdown_s
    return sum(v for k, v in b.items() if k not in ("bubble_s", "optimizer_s"))


# 1. Decode: the KV cache is resident for the whole batch whatever the microbatch count.


@pytest.mark.parametrize("m", [1, 2, 4, 8])
def test_decode_kv_cache_is_the_whole_batch_for_every_microbatch_count(m: int) -> None:
    w = load_workload(L70, phase="decode", batch=256, seq_len=8192)
    p = _one(w, "h100-sxm", 8, tp=4, pp=2, microbatches=m)
    # 2 (K and V) * L * n_kv * d_head * S * B * 2 bytes (bf16), split over tp * pp = 8 devices:
    # 2 * 80 * 8 * 128 * 8192 * 256 * 2 / 8 = 85,899,345,920 B (~85.9 GB), whatever m is.
    kv = 2 * 80 * 8 * 128 * 8192 * 256 * 2 / 8
    assert kv == 85_899_345_920
    assert p.memory.kv_cache_bytes == pytest.approx(kv, rel=REL)
    # the weights: 80 blocks of 855,638,016 bf16 parameters over 8 devices = 17.1 GB
    weights = L70_LAYERS * L70_LAYER_PARAMS * 2 / 8
    assert p.memory.weights_bytes == pytest.approx(weights, rel=REL)
    # 85.9 GB + 17.1 GB = 103 GB > 80 GB of an H100 SXM: does not fit.
    assert p.memory_per_device_bytes >= kv + weights
    assert not p.fits


def test_decode_that_does_not_fit_is_one_error_line_from_the_cli(
    capsys: pytest.CaptureFixture[str],
) -> None:
    argv = ["plan", str(L70), "--hw", "h100-sxm", "--devices", "8", "--phase", "decode"]
    # --tp 4 alone leaves pp and dp open: a search, which refuses when no layout fits
    argv += ["--seq-len", "8192", "--batch", "256", "--tp", "4"]
    argv += ["--microbatches", "4", "--json"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert "fits on no plan" in lines[0]
    # it names the bytes per device: KV cache 85.9 GB + weights 17.1 GB (+ a few MB) = 1.03e11
    found = re.search(r"tp4-pp2, ([0-9.e+]+) B\)", lines[0])
    assert found, lines[0]
    need = 2 * 80 * 8 * 128 * 8192 * 256 * 2 / 8 + L70_LAYERS * L70_LAYER_PARAMS * 2 / 8
    assert float(found.group(1)) == pytest.approx(need, rel=5e-3)


# 2. Decode through a pipeline: one token of a sequence passes every stage.


def test_batch_one_decode_through_eight_stages_takes_a_full_pass_per_token() -> None:
    w = load_workload(L70, phase="decode", batch=1, seq_len=8192)
    p = _one(w, "h100-sxm", 8, pp=8, microbatches=1)
    # the stages' own realistic and lower-bound times for the one microbatch, from the context
    ctx = Context(w, resolve_chip("h100-sxm"), Execution())
    deg = Degrees({"tp": 1, "pp": 8, "dp": 1, "fsdp": 1})
    stages = [ctx.stage(deg, 1, i, layers, last) for i, (layers, last) in enumerate(ctx.stages(8))]
    t_pred = max(st.t_pred_s for st in stages)
    t_lower = max(st.t_s for st in stages)
    # cycles = max(m, P) = max(1, 8) = 8: the token waits for all eight stages
    assert p.predicted_s == pytest.approx(8 * t_pred, rel=REL)
    assert p.latency_s == pytest.approx(8 * p.t_stage_s, rel=REL)
    assert p.t_stage_s == pytest.approx(t_lower, rel=REL)
    # the bubble is the other 7 stage times: 7 x (the one microbatch's own time)
    assert p.predicted_breakdown_s["bubble_s"] == pytest.approx(7 * _non_bubble_s(p), rel=REL)
    # one sequence: tokens/s = batch / predicted_s = 1 / predicted_s; lower bound 1 / latency_s
    assert p.tokens_per_s == pytest.approx(1 / p.predicted_s, rel=REL)
    assert p.throughput_per_s == pytest.approx(1 / p.predicted_s, rel=REL)
    assert p.throughput_bound_per_s == pytest.approx(1 / p.latency_s, rel=REL)
    # never faster than one token per full pass through every stage
    assert p.tokens_per_s is not None
    assert 1 / p.tokens_per_s >= sum(st.t_pred_s for st in stages) * (1 - REL)


def test_decode_attention_reads_the_kv_cache_at_hbm_bandwidth() -> None:
    # one microbatch of 256 sequences through a stage of 40 blocks on tp = 4: each block's fused
    # attention kernel reads its K and V (the device's whole KV cache over the 40 blocks), reads
    # q and writes the output, B * (H / tp) * Q bf16 each: bytes at the achievable HBM bandwidth,
    # plus one eager launch per kernel (max(launch overhead, kernel floor))
    w = load_workload(L70, phase="decode", batch=256, seq_len=8192)
    p = _one(w, "h100-sxm", 8, tp=4, pp=2, microbatches=1)
    ach = resolve_chip("h100-sxm").achievable
    assert ach.mem_bytes_per_s and ach.launch_overhead_s and ach.kernel_floor_s
    kv = 2 * 80 * 8 * 128 * 8192 * 256 * 2 / 8
    q_and_out = 40 * 2 * 256 * (64 // 4) * 128 * 2
    launches = 40 * max(ach.launch_overhead_s, ach.kernel_floor_s)
    expected = launches + (kv + q_and_out) / ach.mem_bytes_per_s
    assert p.predicted_breakdown_s["attention_s"] == pytest.approx(expected, rel=REL)


@pytest.mark.parametrize("m", [1, 2, 4, 8])
def test_decode_tokens_per_s_is_the_batch_over_the_step(m: int) -> None:
    w = load_workload(L70, phase="decode", batch=256, seq_len=8192)
    p = _one(w, "h100-sxm", 8, tp=4, pp=2, microbatches=m)
    # one output token for each of the 256 sequences per step
    assert p.tokens_per_s == pytest.approx(256 / p.predicted_s, rel=REL)
    assert p.tokens_per_s_per_device == pytest.approx(256 / p.predicted_s / 8, rel=REL)
    # cycles = max(m, P = 2): m = 1 waits one more stage time, m >= 2 keeps both stages busy
    cycles = max(m, 2)
    assert p.latency_s == pytest.approx(cycles * p.t_stage_s, rel=REL)
    assert p.predicted_breakdown_s["bubble_s"] == pytest.approx(
        (cycles - m) / m * _non_bubble_s(p), rel=REL, abs=1e-15
    )


# 3. Activation memory (Korthikanti et al. 2022, section 4): tp = t, pp = 1, one microbatch.

S, B, H, A, LAYERS, T = 512, 4, 1024, 16, 4, 4
SBH = S * B * H


@pytest.mark.parametrize(
    ("recompute", "sp", "per_layer"),
    [
        # sbh (10 + 24/t + 5as/(ht)) = sbh (10 + 6 + 5*16*512/(1024*4)) = 26 sbh
        ("none", False, SBH * (10 + 24 / T + 5 * A * S / (H * T))),
        # sequence parallel: sbh/t (34 + 5as/h) = sbh/4 (34 + 40) = 18.5 sbh
        ("none", True, SBH / T * (34 + 5 * A * S / H)),
        # selective recompute drops the scores' 5as/h: sbh (10 + 24/t) = 16 sbh
        ("selective", False, SBH * (10 + 24 / T)),
        # selective + sequence parallel: 34 sbh / t = 8.5 sbh
        ("selective", True, SBH * 34 / T),
        # full recompute keeps the block input only: 2 sbh (split by t with SP: 2 sbh / t)
        ("full", False, 2 * SBH),
        ("full", True, 2 * SBH / T),
    ],
)
def test_activation_memory_is_korthikanti(recompute: str, sp: bool, per_layer: float) -> None:
    w = _gpt(batch=B, seq_len=S, layers=LAYERS)
    p = _one(w, "a100-80gb", T, tp=T, microbatches=1, recompute=recompute, sequence_parallel=sp)
    assert p.memory.activations_bytes == pytest.approx(LAYERS * per_layer, rel=REL)


def test_flash_attention_keeps_no_scores() -> None:
    w = _gpt(batch=B, seq_len=S, layers=LAYERS, attention="flash")
    p = _one(w, "a100-80gb", T, tp=T, microbatches=1)
    # no 5as^2b term: sbh (10 + 24/t)
    assert p.memory.activations_bytes == pytest.approx(LAYERS * SBH * (10 + 24 / T), rel=REL)


def test_activation_memory_of_a_gated_grouped_query_block() -> None:
    # Korthikanti et al.'s terms with H query heads and G key/value heads of Q, a SwiGLU FFN:
    # on every rank 10 sbh (the two norms' inputs 4 sbh, the QKV and FFN inputs 2 sbh each, two
    # 1-byte dropout masks); split by t: 2 bytes x sb x (Q and the attention output, H Q each;
    # K and V, G Q each; the SwiGLU's two inputs, 2 d_ff; the down projection's input, d_ff)
    s, b, h, heads, kv, q, ff, t, layers = 512, 2, 1024, 16, 4, 64, 2816, 2, 2
    w = transformer(
        d_model=h, d_ff=ff, heads=heads, kv_heads=kv, head_dim=q, batch=b, seq_len=s,
        layers=layers, gated=True, attention="flash",
    )  # fmt: skip
    p = _one(w, "h100-sxm", t, tp=t, microbatches=1)
    per_layer = 10 * s * b * h + 2 * s * b * (2 * heads * q + 2 * kv * q + 2 * ff + ff) / t
    assert p.memory.activations_bytes == pytest.approx(layers * per_layer, rel=REL)


def test_activation_memory_with_the_lm_head_adds_the_fp32_logits() -> None:
    vocab = 8192
    w = _gpt(batch=B, seq_len=S, layers=LAYERS, vocab=vocab)
    p = _one(w, "a100-80gb", T, tp=T, microbatches=1)
    # one stage is the last: the loss keeps fp32 logits, 4 * s*b*V / t bytes
    blocks = LAYERS * SBH * (10 + 24 / T + 5 * A * S / (H * T))
    assert p.memory.activations_bytes == pytest.approx(blocks + 4 * S * B * vocab / T, rel=REL)


def test_pipeline_stage_holds_p_microbatches_times_the_interleave_factor() -> None:
    # P = 4 stages, m = 8 microbatches of 16 / 8 = 2 sequences, V = 2 chunks: the first stage
    # holds min(m, P) = 4 microbatches, times 1 + (P - 1)/(P V) = 1 + 3/8 (Korthikanti et al.
    # 2022, section 4.2.3), of its 8 / 4 = 2 blocks, each sbh (10 + 24 + 5as/h) with t = 1.
    w = _gpt(batch=16, seq_len=S, layers=8, attention="standard")
    p = _one(w, "a100-80gb", 4, pp=4, microbatches=8, interleave=2)
    per_block = S * 2 * H * (10 + 24 + 5 * A * S / H)
    assert p.memory.activations_bytes == pytest.approx(2 * per_block * 4 * (1 + 3 / 8), rel=REL)


# 4. Interleaved 1F1B: the bubble is (P - 1) / V stage times (Narayanan et al. 2021).


@pytest.mark.parametrize(("P", "V", "m"), [(4, 1, 8), (4, 2, 8), (2, 4, 4), (8, 3, 16)])
def test_interleaved_bubble(P: int, V: int, m: int) -> None:
    w = transformer(
        d_model=1024, d_ff=2816, heads=16, kv_heads=4, head_dim=64, batch=16, seq_len=1024,
        layers=48, vocab=None,
    )  # fmt: skip
    p = _one(w, "h100-sxm", P, pp=P, microbatches=m, interleave=V)
    # bubble over the ideal step of m stage times: (P - 1) / (V m)
    assert p.bubble_over_ideal == pytest.approx((P - 1) / (V * m), rel=REL)
    # lower bound: (m + (P - 1)/V) t_stage (no data parallelism: nothing once per step)
    assert p.latency_s == pytest.approx((m + (P - 1) / V) * p.t_stage_s, rel=REL)
    # realistic: the bubble is (P - 1)/V of one microbatch's realistic stage time, and the m
    # microbatches are m of them: bubble_s / (the rest) = (P - 1) / (V m)
    bubble = p.predicted_breakdown_s["bubble_s"]
    assert bubble == pytest.approx((P - 1) / (V * m) * _non_bubble_s(p), rel=REL)


@pytest.mark.parametrize(("P", "V", "m"), [(4, 1, 8), (4, 2, 8), (8, 3, 16)])
def test_interleaved_sends(P: int, V: int, m: int) -> None:
    # a middle stage (the slowest: it sends both ways) passes each microbatch on V times, its
    # activations forward and their gradient backward: 2 m V sends per step of a microbatch's
    # s * (b/m) * h bf16 hidden state
    w = transformer(
        d_model=1024, d_ff=2816, heads=16, kv_heads=4, head_dim=64, batch=16, seq_len=1024,
        layers=48, vocab=None,
    )  # fmt: skip
    p = _one(w, "h100-sxm", P, pp=P, microbatches=m, interleave=V)
    sends = [c for c in p.comm if c.purpose == "pp"]
    assert len(sends) == 1 and sends[0].kind == "send"
    assert sends[0].calls == 2 * m * V
    assert sends[0].bytes == pytest.approx(2 * m * V * 1024 * (16 // m) * 1024 * 2, rel=REL)


# 5. MFU and HFU (Chowdhery et al. 2022, PaLM, appendix B).

MF = dict(d=1024, ff=2816, H=16, G=4, Q=64, L=4, V=32000, b=8, s=1024)


def _mf_workload(phase: str = "training") -> Workload:
    return transformer(
        d_model=MF["d"], d_ff=MF["ff"], heads=MF["H"], kv_heads=MF["G"], head_dim=MF["Q"],
        layers=MF["L"], vocab=MF["V"], batch=MF["b"], seq_len=MF["s"], gated=True, phase=phase,
    )  # fmt: skip


def _layer_params() -> int:
    d, ff, H, G, Q = MF["d"], MF["ff"], MF["H"], MF["G"], MF["Q"]
    # W_qkv d x (H + 2G) Q, W_o H Q x d, SwiGLU's three d x d_ff
    return d * (H + 2 * G) * Q + H * Q * d + 3 * d * ff


def test_mfu_and_hfu_follow_the_palm_convention() -> None:
    L, H, Q, T = MF["L"], MF["H"], MF["Q"], MF["s"]
    N = L * _layer_params() + MF["d"] * MF["V"]  # blocks + the LM head; the embedding is a lookup
    tokens = MF["b"] * MF["s"]
    model = tokens * (6 * N + 12 * L * H * Q * T)
    peak = resolve_chip("h100-sxm").peak("bf16")
    for recompute, extra in (
        ("none", 0),
        # selective: the attention core again, 4 L H Q T per token
        ("selective", tokens * 4 * L * H * Q * T),
        # full: one more forward of the blocks, 2 N_blocks + 4 L H Q T per token
        ("full", tokens * (2 * L * _layer_params() + 4 * L * H * Q * T)),
    ):
        p = _one(_mf_workload(), "h100-sxm", 8, tp=2, dp=4, microbatches=2, recompute=recompute)
        assert p.model_flops == pytest.approx(model, rel=REL)
        assert p.hardware_flops == pytest.approx(model + extra, rel=REL)
        assert p.mfu == pytest.approx(model / (8 * peak * p.predicted_s), rel=REL)
        assert p.hfu == pytest.approx((model + extra) / (8 * peak * p.predicted_s), rel=REL)
        assert p.tokens_per_s == pytest.approx(tokens / p.predicted_s, rel=REL)
        assert 0 < p.mfu <= p.hfu < 1


def test_decode_mfu_counts_one_token_per_sequence() -> None:
    # inference: 2 N + 4 L H Q T per token, T the cached context; decode runs one token of
    # each of the 256 sequences
    w = load_workload(L70, phase="decode", batch=256, seq_len=8192)
    p = _one(w, "h100-sxm", 8, tp=4, pp=2, microbatches=2)
    N = L70_LAYERS * L70_LAYER_PARAMS  # no vocabulary in l70.toml
    model = 256 * (2 * N + 4 * L70_LAYERS * L70_H * L70_Q * 8192)
    assert p.model_flops == pytest.approx(model, rel=REL)
    assert p.hardware_flops == pytest.approx(model, rel=REL)
    peak = resolve_chip("h100-sxm").peak("bf16")
    assert p.mfu == pytest.approx(model / (8 * peak * p.predicted_s), rel=REL)


def test_days_to_train() -> None:
    tokens = 1e12
    p = _one(_mf_workload(), "h100-sxm", 8, tp=2, dp=4, microbatches=2, tokens=tokens)
    # 1e12 tokens at b s / predicted_s tokens per second, 86400 s a day
    per_s = MF["b"] * MF["s"] / p.predicted_s
    assert p.days_to_train == pytest.approx(tokens / per_s / 86400, rel=REL)


# 6. The realistic step's breakdown and its gap to the lower bound.


@pytest.mark.parametrize("phase", ["training", "prefill", "decode"])
@pytest.mark.parametrize(
    "execution",
    [{}, {"recompute": "full", "sequence_parallel": True}, {"interleave": 2, "zero": 1}],
)
def test_breakdown_and_gap_add_up(phase: str, execution: dict[str, Any]) -> None:
    if phase != "training":
        execution = {k: v for k, v in execution.items() if k not in ("recompute", "zero")}
    w = _mf_workload(phase)
    names = set()
    for p in plan(w, "h100-sxm", 8, require_fit=False, **execution).plans:
        names.add(p.name)
        assert sum(p.predicted_breakdown_s.values()) == pytest.approx(p.predicted_s, rel=REL)
        assert sum(p.gap_s.values()) == pytest.approx(
            p.predicted_s - p.latency_s, rel=REL, abs=REL * p.predicted_s
        )
        assert p.predicted_s >= p.latency_s * (1 - REL), p.name
        assert all(v >= 0 for v in p.predicted_breakdown_s.values()), p.name
        if phase != "training":
            assert p.predicted_breakdown_s["optimizer_s"] == 0
    # every strategy took part: tp, pp, dp and fsdp plans were checked
    assert {"tp8", "pp8", "dp8", "fsdp8"} <= names


# 7. Sequence parallelism: each tensor-parallel all-reduce becomes a reduce-scatter and an
# all-gather of the same array (Korthikanti et al. 2022, section 4.2.2).


def _tp_comm(p: PlanResult) -> dict[str, tuple[float, float]]:
    return {c.kind: (c.calls, c.bytes) for c in p.comm if c.purpose == "tp"}


def test_sequence_parallel_swaps_all_reduce_for_reduce_scatter_and_all_gather() -> None:
    w = _gpt(batch=B, seq_len=S, layers=LAYERS)
    plain = _tp_comm(_one(w, "a100-80gb", T, tp=T, microbatches=1))
    sp = _tp_comm(_one(w, "a100-80gb", T, tp=T, microbatches=1, sequence_parallel=True))
    # per block: two all-reduces forward (after attention, after the FFN), two backward (dX of
    # W_qkv and of the FFN's up projection): 4 L calls of the s*b*h fp16 hidden state
    calls, per_call = 4 * LAYERS, S * B * H * 2
    assert plain == {"all_reduce": (calls, calls * per_call)}
    assert sp == {
        "reduce_scatter": (calls, calls * per_call),
        "all_gather": (calls, calls * per_call),
    }


def test_sequence_parallel_lm_head_gathers_its_input() -> None:
    # with a vocabulary and m microbatches the head adds, per microbatch, a backward all-reduce of
    # its input gradient (no SP), or with SP a forward all-gather of its sequence-split input and
    # a backward reduce-scatter: 4 L + 1 calls of each per microbatch, all of s*b*h fp16 bytes
    m = 2
    w = _gpt(batch=B, seq_len=S, layers=LAYERS, vocab=8192)
    plain = _tp_comm(_one(w, "a100-80gb", T, tp=T, microbatches=m))
    sp = _tp_comm(_one(w, "a100-80gb", T, tp=T, microbatches=m, sequence_parallel=True))
    per_call = S * (B // m) * H * 2
    calls = m * (4 * LAYERS + 1)
    assert plain == {"all_reduce": (calls, calls * per_call)}
    assert sp == {
        "reduce_scatter": (calls, calls * per_call),
        "all_gather": (calls, calls * per_call),
    }


# 8. ZeRO and the optimizer state (Rajbhandari et al. 2020, section 3.1).


def _zero_plan(**kw: Any) -> PlanResult:
    w = transformer(
        d_model=1024, d_ff=2816, heads=16, kv_heads=4, head_dim=64, batch=16, seq_len=1024,
        layers=4, vocab=None,
    )  # fmt: skip
    return _one(w, "h100-sxm", 8, dp=8, microbatches=1, **kw)


def test_zero_shards_optimizer_state_then_gradients() -> None:
    # bf16 weights: 4 blocks of d(H + 2G)Q + HQd + 3 d d_ff parameters, all on every replica
    params = 4 * (1024 * (16 + 8) * 64 + 16 * 64 * 1024 + 3 * 1024 * 2816)
    # mixed-precision Adam: two fp32 moments and an fp32 master copy, 12 B per parameter
    z0 = _zero_plan(zero=0).memory
    z1 = _zero_plan(zero=1).memory
    z2 = _zero_plan(zero=2).memory
    assert z0.weights_bytes == pytest.approx(2 * params, rel=REL)
    assert z0.gradients_bytes == pytest.approx(2 * params, rel=REL)
    assert z0.optimizer_bytes == pytest.approx(12 * params, rel=REL)
    # ZeRO-1: the optimizer state over dp = 8
    assert z1.optimizer_bytes == pytest.approx(z0.optimizer_bytes / 8, rel=REL)
    assert z1.gradients_bytes == pytest.approx(z0.gradients_bytes, rel=REL)
    # ZeRO-2: the gradients too
    assert z2.optimizer_bytes == pytest.approx(z0.optimizer_bytes / 8, rel=REL)
    assert z2.gradients_bytes == pytest.approx(z0.gradients_bytes / 8, rel=REL)
    assert z2.weights_bytes == pytest.approx(z0.weights_bytes, rel=REL)


def test_optimizer_state_bytes_per_parameter() -> None:
    adam = _zero_plan().memory.optimizer_bytes
    # momentum SGD: one fp32 moment + the fp32 master copy, 8 B against Adam's 12 B
    assert _zero_plan(optimizer="sgd").memory.optimizer_bytes == pytest.approx(
        adam * 8 / 12, rel=REL
    )
    # Adam with bf16 moments and no master copy: 2 x 2 B
    assert _zero_plan(optimizer="adam-bf16").memory.optimizer_bytes == pytest.approx(
        adam * 4 / 12, rel=REL
    )
    # a number is the whole state per parameter: 6 B
    assert _zero_plan(optimizer=6.0).memory.optimizer_bytes == pytest.approx(adam * 6 / 12, rel=REL)
    # plain SGD (optax.sgd without momentum, MaxText's opt_type sgd; bf16 weights updated in
    # place): no state at all, the weights and gradients unchanged
    plain = _zero_plan(optimizer="sgd-plain").memory
    assert plain.optimizer_bytes == 0
    assert plain.weights_bytes == _zero_plan().memory.weights_bytes
    assert plain.gradients_bytes == _zero_plan().memory.gradients_bytes


def test_optimizer_step_reads_and_writes_the_local_shard_once() -> None:
    # one memory-bound kernel over the device's parameters: weights read and written (2 x 2 B),
    # gradients read twice (the norm clipping and the update, 2 x 2 B), the 12 B of Adam state
    # read and written: 32 B per parameter at the chip's achievable HBM bandwidth, plus one eager
    # launch (max(launch overhead, kernel floor)); ZeRO-1 over dp = 8 updates 1/8 of them
    params = 4 * (1024 * (16 + 8) * 64 + 16 * 64 * 1024 + 3 * 1024 * 2816)
    ach = resolve_chip("h100-sxm").achievable
    assert ach.mem_bytes_per_s and ach.launch_overhead_s and ach.kernel_floor_s
    launch = max(ach.launch_overhead_s, ach.kernel_floor_s)
    for zero, ways in ((0, 1), (1, 8)):
        t = _zero_plan(zero=zero).predicted_breakdown_s["optimizer_s"]
        assert t == pytest.approx(launch + params / ways * 32 / ach.mem_bytes_per_s, rel=REL)


def test_vocabulary_adds_untied_embedding_and_head_weights() -> None:
    # one stage is both ends: the embedding table and the LM head, each vocab x d_model
    vocab = 32000
    w = transformer(
        d_model=1024, d_ff=2816, heads=16, kv_heads=4, head_dim=64, batch=16, seq_len=1024,
        layers=4, vocab=vocab,
    )  # fmt: skip
    p = _one(w, "h100-sxm", 8, dp=8, microbatches=1)
    params = 4 * (1024 * (16 + 8) * 64 + 16 * 64 * 1024 + 3 * 1024 * 2816) + 2 * vocab * 1024
    assert p.memory.weights_bytes == pytest.approx(2 * params, rel=REL)
    assert p.memory.optimizer_bytes == pytest.approx(12 * params, rel=REL)


def test_fsdp_shards_everything_and_holds_two_gathered_blocks() -> None:
    w = transformer(
        d_model=1024, d_ff=2816, heads=16, kv_heads=4, head_dim=64, batch=16, seq_len=1024,
        layers=4, vocab=None,
    )  # fmt: skip
    layer = 1024 * (16 + 8) * 64 + 16 * 64 * 1024 + 3 * 1024 * 2816
    for tp, fsdp in ((1, 8), (2, 4)):
        m = _one(w, "h100-sxm", 8, tp=tp, fsdp=fsdp, microbatches=1).memory
        # weights, gradients (2 B) and Adam state (12 B) of 4 blocks over tp * fsdp = 8 devices
        assert m.weights_bytes == pytest.approx(2 * 4 * layer / 8, rel=REL)
        assert m.gradients_bytes == pytest.approx(2 * 4 * layer / 8, rel=REL)
        assert m.optimizer_bytes == pytest.approx(12 * 4 * layer / 8, rel=REL)
        # the block in use and the one prefetched, gathered over fsdp (still split over tp)
        assert m.buffers_bytes == pytest.approx(2 * 2 * layer / tp, rel=REL)


# 9. The CLI contract.

SMALL = """\
name = "small-gpt"
phase = "training"

[transformer]
d_model = 1024
d_ff = 4096
gated = false
heads = 16
kv_heads = 16
head_dim = 64
seq_len = 1024
batch = 64
layers = 24
dtype = "bf16"
vocab = 32000
attention = "{attention}"
"""
CONTRACT = ["--hw", "a100-80gb", "--devices", "64", "--tp", "8", "--pp", "8", "--dp", "1"]
CONTRACT += ["--fsdp", "1", "--microbatches", "64"]


@pytest.mark.parametrize("attention", ["flash", "standard"])
def test_cli_plan_json_contract(
    tmp_path: Path, attention: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "small.toml"
    path.write_text(SMALL.format(attention=attention), encoding="utf-8")
    argv = ["plan", str(path), *CONTRACT, "--interleave", "3", "--recompute", "full"]
    code, stdout, stderr = run_cli(capsys, *argv, "--sequence-parallel", "--json")
    assert code == 0, stderr
    out = json.loads(stdout)
    assert out["execution"]["interleave"] == 3
    assert out["execution"]["recompute"] == "full"
    assert out["execution"]["sequence_parallel"] is True
    assert out["plans"]
    for p in out["plans"]:
        assert {"predicted_s", "mfu", "hfu", "tokens_per_s", "latency_s"} <= set(p)
        assert 0 < p["latency_s"] <= p["predicted_s"]
        assert 0 < p["mfu"] <= p["hfu"] < 1
        # 64 sequences of 1024 tokens per step
        assert p["tokens_per_s"] == pytest.approx(64 * 1024 / p["predicted_s"], rel=REL)
        # interleaved 1F1B: bubble (P - 1)/(V m) = 7 / (3 * 64)
        assert p["bubble_over_ideal"] == pytest.approx(7 / (3 * 64), rel=REL)


@pytest.mark.parametrize(
    ("attention", "extra", "bad"),
    [
        ("fast", [], "'fast'"),
        ("flash", ["--interleave", "0"], "'0'"),
        ("flash", ["--recompute", "some"], "'some'"),
        ("flash", ["--optimizer", "lion"], "'lion'"),
    ],
)
def test_cli_bad_values_are_one_error_line(
    tmp_path: Path, attention: str, extra: list[str], bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "small.toml"
    path.write_text(SMALL.format(attention=attention), encoding="utf-8")
    code, stdout, stderr = run_cli(capsys, "plan", str(path), *CONTRACT, *extra, "--json")
    assert code == 2
    assert stdout == ""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), stderr
    assert bad in lines[0]  # the message names the bad value


# 10. The Megatron-LM runs of Korthikanti et al. 2022, Table 5.


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_e2e", ROOT / "benchmarks" / "bench_e2e.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_e2e", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_megatron_runs_are_predicted_within_ten_percent_median() -> None:
    bench = _bench()
    runs = [r for r in bench.load_runs() if r["set"] == "megatron"]
    assert len(runs) == 8
    outcomes = [bench.evaluate(run) for run in runs]
    for o in outcomes:
        assert o.error is not None, o.notes
        assert not any(n.startswith(("partial", "latency_s", "loader")) for n in o.notes), o.notes
    summary = bench.summarize(outcomes)["megatron"]
    assert summary["predicted"] == 8
    assert summary["median_abs_error"] <= 0.10, summary
    assert summary["worst_abs_error"] <= 0.20, summary


def test_a_whole_layout_that_does_not_fit_is_still_answered(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Every degree given: the CLI answers for that layout (fits false) instead of refusing, so
    # that a published run our memory model finds too big still gets its predicted time.
    argv = ["plan", str(L70), "--hw", "h100-sxm", "--devices", "8", "--phase", "decode"]
    argv += ["--seq-len", "8192", "--batch", "256", "--tp", "4", "--pp", "2", "--dp", "1"]
    argv += ["--fsdp", "1", "--microbatches", "4", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    (p,) = out["plans"]
    assert out["recommended"] is None and p["fits"] is False
    # KV cache per device: 2 L n_kv d_head S B bytes / (tp pp) = 2*80*8*128*8192*256*2/8
    assert p["memory"]["kv_cache_bytes"] == 2 * 80 * 8 * 128 * 8192 * 256 * 2 / 8
    assert p["latency_s"] <= p["predicted_s"] and p["tokens_per_s"] == 256 / p["predicted_s"]


def test_degrees_that_multiply_to_the_devices_pin_the_layout(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # --tp 4 --pp 2 on 8 devices leaves dp = fsdp = 1: one layout, answered even though its KV
    # cache (2 x 80 x 8 x 128 x 8192 x 256 x 2 B / 8 = 85.9 GB per device) does not fit
    argv = ["plan", str(L70), "--hw", "h100-sxm", "--devices", "8", "--phase", "decode"]
    argv += ["--seq-len", "8192", "--batch", "256", "--tp", "4", "--pp", "2", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    (p,) = out["plans"]
    assert p["fits"] is False and p["name"] == "tp4-pp2"
    assert p["memory"]["kv_cache_bytes"] == 2 * 80 * 8 * 128 * 8192 * 256 * 2 / 8
    # a degree left open still searches, and refuses when nothing fits
    argv = ["plan", str(L70), "--hw", "h100-sxm", "--devices", "8", "--phase", "decode"]
    argv += ["--seq-len", "8192", "--batch", "256", "--tp", "4"]
    assert main(argv) == 2
    assert capsys.readouterr().err.startswith("error: the workload fits on no plan")
