"""Issue 26: KV capacity as each engine sizes it (MLA latent cache, sliding windows, the engines'
own memory-fraction rules), closed loops of fixed concurrency, DP attention with EP experts,
per-tensor dtypes, the serving search's answer and the engines' launch lines. Every expected
number is derived here by hand from the formula in the docstring it tests."""

from __future__ import annotations

import json
import math

import pytest

from shardline.cli.main import main
from shardline.errors import InputError
from shardline.hardware import resolve_chip
from shardline.models import load_model
from shardline.serving.config import Lengths, ServeConfig
from shardline.serving.engines import GIB, engine, kv_budget_per_device
from shardline.serving.steptimes import (
    Split,
    StepTimes,
    kv_split_devices,
    serving_dtypes,
    step_times,
)


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


# --- KV capacity ------------------------------------------------------------------------------


def test_the_three_budget_rules_by_hand() -> None:
    c, w, a = 80e9, 35e9, 1e9
    # TensorRT-LLM: 0.9 of what the weights and activations leave
    assert kv_budget_per_device("fraction_of_free", 0.9, c, w, a) == pytest.approx(0.9 * 44e9)
    # vLLM: 0.9 of the device caps weights + activations + KV
    assert kv_budget_per_device("fraction_of_capacity", 0.9, c, w, a) == pytest.approx(36e9)
    # SGLang: the static pool (weights + KV) is the fraction; activations live outside it
    assert kv_budget_per_device("static_fraction", 0.88, c, w, a) == pytest.approx(35.4e9)
    assert kv_budget_per_device("fraction_of_free", 0.9, c, 90e9, a) == 0.0


def test_sglang_fraction_follows_the_device() -> None:
    sg = engine("sglang")
    h200 = resolve_chip("h200").capacity_bytes / GIB  # 141 GB = 131.3 GiB: the 12 + tp/2 tier
    assert sg.memory_fraction(resolve_chip("h200").capacity_bytes, 8) == pytest.approx(
        (h200 - (12 + 8 / 2)) / h200
    )
    # DP attention reserves 4 GiB more
    assert sg.memory_fraction(resolve_chip("h200").capacity_bytes, 8, 8) == pytest.approx(
        (h200 - 20) / h200
    )
    h100 = resolve_chip("h100-sxm").capacity_bytes / GIB  # 80 GB = 74.5 GiB: 9.5 + tp/2
    assert sg.memory_fraction(resolve_chip("h100-sxm").capacity_bytes, 1) == pytest.approx(
        (h100 - 10) / h100
    )
    b200 = resolve_chip("b200").capacity_bytes / GIB  # above 160 GiB: 32 GiB
    assert sg.memory_fraction(resolve_chip("b200").capacity_bytes, 4) == pytest.approx(
        (b200 - 32) / b200
    )
    assert engine("vllm").memory_fraction(80e9, 8) == 0.9


def test_mla_latent_cache_is_whole_on_every_tp_rank() -> None:
    ds = load_model("deepseek-v3")
    assert kv_split_devices(ds, 8) == 1  # one latent per token: all 8 ranks hold all of it
    assert kv_split_devices(ds, 8, 8) == 8  # DP attention: each rank its own sequences
    assert kv_split_devices(ds, 8, 2) == 2
    llama = load_model("llama-3.1-70b")  # 8 KV heads
    assert kv_split_devices(llama, 4) == 4 and kv_split_devices(llama, 16) == 8


def test_deepseek_kv_limit_by_hand() -> None:
    """TensorRT-LLM, 8 x H200, tp 8, fp8: KV per device 0.9 (C - W - A), held whole by every
    rank; a sequence reserves I + O + 8 tokens of 61 layers x (512 + 64) latent values x 1 B."""
    spec, chip = load_model("deepseek-v3"), resolve_chip("h200")
    st = step_times(spec, chip, 8, "fp8", engine("trtllm"))
    per_device = 0.9 * (
        chip.capacity_bytes - st.weights_bytes_per_device - st.activations_bytes_per_device
    )
    per_seq = 61 * (512 + 64) * 1 * (1000 + 1000 + 8)
    from shardline.serving.analytic import Replica

    cfg = ServeConfig(
        1.0,
        Lengths("fixed", 1000),
        Lengths("fixed", 1000),
        8,
        8,
        kv_reservation="full_output",
    )
    rep = Replica(st, cfg, st.kv_fraction)
    assert rep.kv_limit == pytest.approx(per_device / per_seq)  # not 8 x that
    assert 500 < rep.kv_limit < 1000


def test_sliding_window_layers_hold_their_window() -> None:
    """gpt-oss-120b: 36 layers, 18 of them sliding over 128 tokens, 2 x 8 x 64 KV values per
    layer and token; bf16. A sequence of c tokens holds 1024 x 2 B x (18 c + 18 min(c, 128))."""
    spec, chip = load_model("gpt-oss-120b"), resolve_chip("h200")
    st = step_times(spec, chip, 1, "bf16", engine("vllm"))
    per = 1024 * 2
    assert st.sequence_kv_bytes(4000) == pytest.approx(per * (18 * 4000 + 18 * 128))
    assert st.sequence_kv_bytes(100) == pytest.approx(per * 36 * 100)
    from shardline.serving.analytic import sequence_kv_bytes

    cfg = ServeConfig(1.0, Lengths("fixed", 2000), Lengths("fixed", 1000), 1, 1)
    # on demand: the mean over the output of I + u O + 8 tokens, all past the window
    assert sequence_kv_bytes(st, cfg) == pytest.approx(per * (18 * 2508 + 18 * 128))


def test_trtllm_holds_sliding_window_layers_at_full_length() -> None:
    """TensorRT-LLM sizes every layer's KV at the sequence's full length (engines.toml
    sliding_window_kv = "full": its memory allocation follows the largest attention window).
    gpt-oss-120b in fp8 KV: 36 layers x 2 x 8 x 64 = 36,864 B a token, so 4,000 tokens hold
    147,456,000 B, where the windowed count (vLLM) is 1024 x (18 x 4000 + 18 x 128) =
    76,087,296 B."""
    spec, chip = load_model("gpt-oss-120b"), resolve_chip("b200")
    trt = step_times(spec, chip, 1, "fp4", engine("trtllm"), weight_dtype="fp4", kv_dtype="fp8")
    vll = step_times(spec, chip, 1, "fp4", engine("vllm"), weight_dtype="fp4", kv_dtype="fp8")
    assert engine("trtllm").sliding_window_kv == "full"
    assert engine("vllm").sliding_window_kv == "window"
    assert float(trt.sequence_kv_bytes(4000)) == pytest.approx(36 * 2 * 8 * 64 * 4000)
    assert float(trt.sequence_kv_bytes(4000)) == pytest.approx(147_456_000)
    assert float(vll.sequence_kv_bytes(4000)) == pytest.approx(1024 * (18 * 4000 + 18 * 128))
    # a dense model is unchanged by the rule: Llama 3.1 70B, 80 x 2 x 8 x 128 B a token in fp8
    llama = step_times(
        load_model("llama-3.1-70b"), resolve_chip("h100-sxm"), 1, "fp8", engine("trtllm")
    )
    assert float(llama.sequence_kv_bytes(1000)) == pytest.approx(80 * 2 * 8 * 128 * 1000)


def test_trtllm_gpt_oss_20b_kv_limit_on_b200(capsys: pytest.CaptureFixture[str]) -> None:
    """gpt-oss-20b on one B200 with TensorRT-LLM, 1000/1000, fp8 KV: a sequence reserves
    1000 + 1000 + 8 tokens in all 24 layers (24 x 1,024 B a token = 24,576 B), so the KV limit
    is floor(budget / (24,576 x 2,008)) = 3,042 for the 150.16 GB budget, not the 5,720 of
    12 full layers and 12 windows of 128."""
    out = _json(
        capsys,
        *("serve", "--model", "gpt-oss-20b", "--hw", "b200", "--devices", "1"),
        *("--dtype", "fp4", "--weight-dtype", "fp4", "--kv-dtype", "fp8", "--engine", "trtllm"),
        *("--rate", "1e8", "--in", "1000", "--out", "1000", "--max-batch", "2048"),
    )
    per_seq = 24 * 1024 * 2008
    assert out["kv_limit_sequences"] == math.floor(out["kv_budget_bytes"] / per_seq)
    assert out["kv_limit_sequences"] == 3042
    assert out["batch"] == pytest.approx(2048)  # the batch limit binds


def test_trtllm_tp1_fp8_70b_budget(capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's case: 0.9 x (80 GB - 70.6 GB of fp8 weights - activations), not 0.9 x 80 GB
    - weights (which leaves about 1.4 GB)."""
    out = _json(
        capsys,
        *("serve", "--model", "llama-3.1-70b", "--hw", "h100-sxm", "--devices", "1"),
        *("--rate", "0.1", "--in", "2000", "--out", "500", "--dtype", "fp8"),
    )
    st = step_times(
        load_model("llama-3.1-70b"), resolve_chip("h100-sxm"), 1, "fp8", engine("trtllm")
    )
    budget = 0.9 * (80e9 - st.weights_bytes_per_device - st.activations_bytes_per_device)
    per_seq = 80 * 2 * 8 * 128 * 1 * (2000 + 500 + 8)
    assert out["kv_limit_sequences"] == math.floor(budget / per_seq)  # whole sequences
    assert out["kv_budget_bytes"] == pytest.approx(budget)
    assert out["kv_budget_rule"] == "fraction_of_free"


# --- closed loop ------------------------------------------------------------------------------


def _linear_steps() -> StepTimes:
    """decode 10 ms + 0.1 ms per sequence, prefill 0.1 ms per prompt token; a huge memory."""
    return StepTimes(
        chip="x",
        tp=1,
        decode_point=lambda n, c: 0.010 + 0.0001 * n,
        prefill_point=lambda tokens: 0.0001 * tokens,
        weights_bytes_per_device=0.0,
        activations_bytes_per_device=0.0,
        capacity_bytes_per_device=1e15,
        kv_bytes_per_token=1.0,
    )


def test_fixed_lengths_run_in_waves_by_hand() -> None:
    """16 clients, 1,000 in / 101 out, chunk 8,192: a wave prefills 16,000 tokens in two
    chunks of 8,192 (0.8192 s each), then decodes 100 steps of 16 (11.6 ms):
    W = 2 x 0.8192 + 100 x 0.0116 = 2.7984 s, X = 16 / W. Prompts 1-8 end in the first chunk
    (TTFT 0.8192 s), 9-16 in the second (1.6384 s); TPOT_k = (W - TTFT_k) / 100."""
    from shardline.serving.closed import closed_loop

    cfg = ServeConfig(1.0, Lengths("fixed", 1000), Lengths("fixed", 101), 1, 1)
    a = closed_loop(_linear_steps(), cfg, 0.9, 16, waves=True)
    wave = 2 * 0.8192 + 100 * 0.0116
    assert a.requests_per_s == pytest.approx(16 / wave)
    assert a.throughput_tokens_per_s == pytest.approx(16 / wave * 101)
    assert a.ttft_mean_s == pytest.approx((0.8192 + 1.6384) / 2)
    assert a.ttft_s[99] == pytest.approx(1.6384)
    assert a.tpot_mean_s == pytest.approx(((wave - 0.8192) + (wave - 1.6384)) / 2 / 100)
    # Little's law: N = X (mean TTFT + (O - 1) mean TPOT)
    assert a.requests_per_s * (a.ttft_mean_s + 100 * a.tpot_mean_s) == pytest.approx(16)


def test_more_clients_than_the_batch_wait_for_a_slot() -> None:
    from shardline.serving.closed import closed_loop

    cfg = ServeConfig(1.0, Lengths("fixed", 1000), Lengths("fixed", 101), 1, 1, max_batch=8)
    a = closed_loop(_linear_steps(), cfg, 0.9, 32, waves=True)
    # waves of 8: one 8,000-token chunk (0.8 s) + 100 steps of 10.8 ms
    wave = 0.8 + 100 * 0.0108
    assert a.requests_per_s == pytest.approx(8 / wave)
    assert a.requests_per_s * (a.ttft_mean_s + 100 * a.tpot_mean_s) == pytest.approx(32)


def test_serve_concurrency_contract(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(
        capsys,
        *("serve", "--model", "llama-3.1-8b", "--hw", "h100-sxm", "--devices", "2"),
        *("--concurrency", "64", "--in", "1000", "--out", "500", "--dtype", "fp8"),
    )
    for key in ("requests_per_s", "ttft_mean_s", "throughput_tokens_per_s"):
        assert out[key] > 0
    assert set(out["tpot_s"]) == {"p50", "p90", "p99"}
    assert out["throughput_tokens_per_s"] == pytest.approx(out["requests_per_s"] * 500)
    latency = out["ttft_mean_s"] + 499 * out["tpot_mean_s"]
    assert out["requests_per_s"] * latency == pytest.approx(64, rel=1e-6)  # Little's law
    assert out["tpot_mean_s"] == out["tpot_s"]["p50"]  # the steady state's TPOT is normal
    assert out["config"]["concurrency"] == 64 and out["config"]["rate_per_s"] == pytest.approx(
        out["requests_per_s"]
    )
    waves = _json(
        capsys,
        *("serve", "--model", "llama-3.1-8b", "--hw", "h100-sxm", "--devices", "2"),
        *("--concurrency", "64", "--in", "1000", "--out", "500", "--dtype", "fp8", "--waves"),
    )
    assert waves["batch"] == 32  # 64 clients over two replicas, in step
    latency = waves["ttft_mean_s"] + 499 * waves["tpot_mean_s"]
    assert waves["requests_per_s"] * latency == pytest.approx(64)
    # in step, the later prompts of a wave wait for the earlier ones: a longer mean TTFT
    assert waves["ttft_mean_s"] > out["ttft_mean_s"]


def test_rate_or_concurrency_exactly_one(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["serve", "--model", "llama-3.1-8b", "--devices", "1", "--in", "100", "--out", "10"]
    assert main(base) == 2
    assert main([*base, "--rate", "1", "--concurrency", "4"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 2 and "--concurrency" in err


# --- plan and serve agree ---------------------------------------------------------------------


def test_serve_decode_step_is_plans_step(capsys: pytest.CaptureFixture[str]) -> None:
    """Saturated, the running batch is the limit (256, whole) at the mean context I + O/2 =
    1,500: `plan --phase decode` at that batch and context prices the same step."""
    out = _json(
        capsys,
        *("serve", "--model", "llama-3.1-8b", "--hw", "h100-sxm", "--devices", "1"),
        *("--rate", "1000", "--in", "1000", "--out", "1000", "--dtype", "fp8"),
    )
    assert out["saturated"] and out["batch"] == 256 and out["mean_context_tokens"] == 1500
    plan = _json(
        capsys,
        *("plan", "--model", "llama-3.1-8b", "--hw", "h100-sxm", "--devices", "1", "--tp", "1"),
        *("--phase", "decode", "--batch", "256", "--seq-len", "1500", "--dtype", "fp8"),
    )
    assert plan["plans"][0]["predicted_s"] == pytest.approx(out["decode_step_s"], rel=1e-12)


def test_dp_attention_step_is_plans_ep_step(capsys: pytest.CaptureFixture[str]) -> None:
    """DP attention over 4 ranks with the experts over them is the plan's tp 1 x ep 4: at the
    saturated batch (256, a multiple of 4: no padding) and context 1,500 the steps agree."""
    out = _json(
        capsys,
        *("serve", "--model", "qwen3-30b-a3b", "--hw", "h100-sxm", "--devices", "4", "--tp", "4"),
        *("--ep", "4", "--attention-dp", "4", "--rate", "1000", "--in", "1000", "--out", "1000"),
        *("--dtype", "fp8"),
    )
    assert out["batch"] == 256 and out["mean_context_tokens"] == 1500
    plan = _json(
        capsys,
        *("plan", "--model", "qwen3-30b-a3b", "--hw", "h100-sxm", "--devices", "4", "--tp", "1"),
        *(
            "--ep",
            "4",
            "--phase",
            "decode",
            "--batch",
            "256",
            "--seq-len",
            "1500",
            "--dtype",
            "fp8",
        ),
    )
    assert plan["plans"][0]["predicted_s"] == pytest.approx(out["decode_step_s"], rel=1e-12)


def test_backlogged_closed_loop_shifts_every_ttft(capsys: pytest.CaptureFixture[str]) -> None:
    """2,000 clients on one H100 (batch limit 256): the clients beyond the batch wait, so the
    mean TTFT is N / X - (O - 1) TPOT and every quantile moves with it."""
    out = _json(
        capsys,
        *("serve", "--model", "llama-3.1-8b", "--hw", "h100-sxm", "--devices", "1"),
        *("--concurrency", "2000", "--in", "1000", "--out", "200", "--dtype", "fp8"),
    )
    assert out["ttft_mean_s"] == pytest.approx(
        2000 / out["requests_per_s"] - 199 * out["tpot_s"]["p50"]
    )
    assert out["ttft_s"]["p50"] > 0.5 * out["ttft_mean_s"]
    assert out["ttft_s"]["p99"] >= out["ttft_s"]["p50"]


# --- layouts and dtypes -----------------------------------------------------------------------


def test_dp_attention_pads_the_ranks_and_splits_the_kv(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["serve", "--model", "deepseek-v3", "--hw", "h200", "--devices", "8", "--tp", "8"]
    argv += ["--rate", "1", "--in", "1000", "--out", "1000", "--dtype", "fp8"]
    dp = _json(capsys, *argv, "--ep", "8", "--attention-dp", "8")
    tp = _json(capsys, *argv)
    assert dp["config"]["ep"] == 8 and dp["config"]["attention_dp"] == 8
    # 8 ranks each hold their own sequences' latents: about 8x the sequences (weights differ:
    # the dense part is copied on every DP rank)
    assert dp["kv_limit_sequences"] > 5 * tp["kv_limit_sequences"]
    st = step_times(
        load_model("deepseek-v3"),
        resolve_chip("h200"),
        8,
        "fp8",
        engine("trtllm"),
        split=Split(attention_dp=8),
    )
    assert st.decode_at(1, 2000) == st.decode_at(8, 2000)  # one sequence pads every rank to 1
    with pytest.raises(InputError, match="mixture-of-experts"):
        step_times(
            load_model("llama-3.1-8b"),
            resolve_chip("h200"),
            2,
            "bf16",
            engine("sglang"),
            split=Split(attention_dp=2),
        )
    assert main([*argv, "--attention-dp", "3"]) == 2
    assert main([*argv, "--ep", "3"]) == 2  # divides neither 8 nor 8 x 1
    # vLLM's reading: attention tp 1 on 8 data-parallel ranks, experts over the 8
    vllm_style = [*argv[:7], "--tp", "1", *argv[9:]]
    as_vllm = _json(capsys, *vllm_style, "--ep", "8", "--attention-dp", "8")
    assert as_vllm["config"]["tp"] == 8
    assert as_vllm["kv_limit_sequences"] == pytest.approx(dp["kv_limit_sequences"])


def test_dtypes_per_tensor() -> None:
    h100, b200 = resolve_chip("h100-sxm"), resolve_chip("b200")
    # fp4 weights on a chip without fp4 compute: dequantized to bf16, KV fp8
    assert serving_dtypes(h100, None, "mxfp4") == ("bf16", "fp4", "fp8")
    assert serving_dtypes(h100, "fp4", None) == ("bf16", "fp4", "fp8")
    assert serving_dtypes(b200, "fp4", None) == ("fp4", "fp4", "fp8")
    assert serving_dtypes(b200, None, "fp4", "fp8") == ("fp4", "fp4", "fp8")
    assert serving_dtypes(h100, "fp8", None) == ("fp8", "fp8", "fp8")
    assert serving_dtypes(h100, None, None) == ("bf16", "bf16", "bf16")


def test_b200_fp4_gemms_at_the_measured_fp4_rate(capsys: pytest.CaptureFixture[str]) -> None:
    """B200 fp4 GEMMs are priced at the measured NVFP4 rate of its chip file (FlashInfer mm_fp4,
    CUTLASS, 3370.4 TFLOP/s: flashinfer pull request 1979), not at the 9 PFLOP/s peak times the
    bf16 efficiency (1745/2250 = 0.776, 6.98 PFLOP/s): a compute-bound 8192^3 fp4 GEMM takes at
    least 2 x 8192^3 / 3370e12 = 0.326 ms, more than twice 2 x 8192^3 / 6.98e15 = 0.158 ms."""
    from shardline.ops.achievable import achievable_rate

    b200 = resolve_chip("b200")
    assert achievable_rate(b200, "fp4") == (3370e12, "achievable fp4 (chip file)")
    assert main(["matmul", "8192", "8192", "8192", "--hw", "b200", "--dtype", "fp4", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["prediction"]["achievable_flops_per_s"] == pytest.approx(3370e12)
    assert data["predicted_s"] >= 2 * 8192**3 / 3370e12 > 2 * 2 * 8192**3 / (9000e12 * 1745 / 2250)


def test_fp4_kv_is_not_fp4_by_default(capsys: pytest.CaptureFixture[str]) -> None:
    """`--dtype fp4` on B200 keeps an fp8 KV cache: 2 x 8 x 128 x 80 x 1 B per token."""
    out = _json(
        capsys,
        *("serve", "--model", "llama-3.1-70b", "--hw", "b200", "--devices", "1"),
        *("--rate", "0.1", "--in", "1000", "--out", "100", "--dtype", "fp4"),
    )
    assert (out["dtype"], out["weight_dtype"], out["kv_dtype"]) == ("fp4", "fp4", "fp8")
    per_seq = 2 * 8 * 128 * 80 * 1 * (1000 + 100 + 8)
    assert out["kv_limit_sequences"] == math.floor(out["kv_budget_bytes"] / per_seq)


# --- the search and the launch line -----------------------------------------------------------


def _same_answer(served: dict, row: dict) -> None:
    """`serve`'s throughput and p99 TTFT and TPOT are the search row's."""
    assert served["throughput_tokens_per_s"] == pytest.approx(row["throughput_tokens_per_s"])
    assert served["tpot_s"]["p99"] == pytest.approx(row["tpot_p99_s"])
    assert served["ttft_s"]["p99"] == pytest.approx(row["ttft_p99_s"])


SEARCH = [
    *("search", "--model", "llama-3.1-8b", "--hw", "h100-sxm", "--rate", "20"),
    *("--in", "1000", "--out", "200", "--slo", "ttft=1s,tpot=50ms", "--max-devices", "2"),
    "--quiet",
]


def test_search_best_names_its_layout_and_serve_reproduces_it(
    capsys: pytest.CaptureFixture[str],
) -> None:
    result = _json(capsys, *SEARCH, "--engine", "vllm", "--kv-dtype", "fp8")
    best = result["best"]
    for key in ("chip", "devices", "tp", "engine", "dtype", "max_batch", "throughput_tokens_per_s"):
        assert key in best
    assert best["engine"] == "vllm@0.10" and best["kv_dtype"] == "fp8"
    assert result["assumed"]["engine"] == "vllm@0.10"
    again = _json(
        capsys,
        *("serve", "--model", "llama-3.1-8b", "--hw", best["chip"], "--rate", "20"),
        *("--in", "1000", "--out", "200", "--devices", str(best["devices"])),
        *("--tp", str(best["tp"]), "--max-batch", str(best["max_batch"])),
        *("--engine", best["engine"], "--dtype", best["dtype"], "--kv-dtype", best["kv_dtype"]),
    )
    _same_answer(again, best)


def test_emit_prints_the_engines_own_flags(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["serve", "--model", "deepseek-v3", "--hw", "h200", "--devices", "8", "--tp", "8"]
    argv += ["--ep", "8", "--attention-dp", "8", "--rate", "1", "--in", "1000", "--out", "1000"]
    argv += ["--dtype", "fp8", "--max-batch", "128"]
    assert main([*argv, "--emit", "sglang"]) == 0
    text = capsys.readouterr().out
    f = (131.31648302078247 - (12 + 4 + 4)) / 131.31648302078247  # sglang's own fraction
    for flag in ("--tp-size 8", "--dp-size 8", "--enable-dp-attention", "--ep-size 8"):
        assert flag in text
    assert "--max-running-requests 128" in text and "--chunked-prefill-size 8192" in text
    assert f"--mem-fraction-static {f:.3f}" in text and "--kv-cache-dtype fp8_e4m3" in text
    assert main([*argv, "--emit", "vllm"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("vllm serve deepseek-ai/DeepSeek-V3")
    for flag in ("--tensor-parallel-size 1", "--data-parallel-size 8", "--enable-expert-parallel"):
        assert flag in text
    # vLLM and TensorRT-LLM take the batch limit per attention-DP rank: ceil(128 / 8) = 16
    assert "--gpu-memory-utilization 0.9" in text and "--max-num-seqs 16" in text
    assert main([*argv, "--emit", "trtllm"]) == 0
    text = capsys.readouterr().out
    for flag in ("--tp_size 8", "--ep_size 8", "--max_batch_size 16", "enable_attention_dp: true"):
        assert flag in text
    assert "--kv_cache_free_gpu_memory_fraction 0.9" in text
    assert main([*argv, "--emit", "vllm", "--engine", "sglang"]) == 2
    capsys.readouterr()
    assert main([*SEARCH, "--emit", "vllm"]) == 0
    assert capsys.readouterr().out.startswith("vllm serve meta-llama/Llama-3.1-8B")
    assert math.isfinite(f)


def test_search_prices_dp_attention_as_serve_does(capsys: pytest.CaptureFixture[str]) -> None:
    """A MoE model's DP-attention layouts (ep = attention-dp = tp) in the search are `serve
    --ep N --attention-dp N` of the same layout, to the digit."""
    from shardline.serving.search import Chunk, evaluate_chunk
    from shardline.serving.slo import parse_slo

    chunk = Chunk(
        model="qwen3-30b-a3b",
        chip="h100-sxm",
        tp=2,
        rate_per_s=10.0,
        input_tokens=Lengths("fixed", 1000),
        output_tokens=Lengths("fixed", 500),
        slo=parse_slo("ttft=1s,tpot=40ms"),
        max_devices=2,
        engine="sglang",
        dtype="fp8",
        attention_dp=2,
    )
    row = next(r for r in evaluate_chunk(chunk) if r["max_batch"] == 64)
    assert (row["ep"], row["attention_dp"], row["engine"]) == (2, 2, "sglang@0.4")
    out = _json(
        capsys,
        *("serve", "--model", "qwen3-30b-a3b", "--hw", "h100-sxm", "--devices", "2", "--tp", "2"),
        *("--ep", "2", "--attention-dp", "2", "--rate", "10", "--in", "1000", "--out", "500"),
        *("--max-batch", "64", "--engine", "sglang", "--dtype", "fp8"),
    )
    _same_answer(out, row)


def test_search_pools_are_serves_disaggregated_pools(capsys: pytest.CaptureFixture[str]) -> None:
    from shardline.serving.search import Chunk, evaluate_chunk, pool_splits
    from shardline.serving.slo import parse_slo

    # 8 devices of tp 2: colocated, then 2:6 and 4:4 (1 and 2 prefill replicas; 8:0 leaves none)
    assert pool_splits(8, 2) == [None, (2, 6), (4, 4)]
    chunk = Chunk(
        model="llama-3.1-8b",
        chip="h100-sxm",
        tp=1,
        rate_per_s=20.0,
        input_tokens=Lengths("fixed", 4000),
        output_tokens=Lengths("fixed", 200),
        slo=parse_slo("ttft=300ms,tpot=20ms"),
        max_devices=3,
        engine="trtllm",
        dtype="fp8",
        disagg=True,
    )
    rows = evaluate_chunk(chunk)
    assert len(rows) == 7 * (1 + 2 + 3)  # 1, 2, 3 devices: 1, 2 and 3 layouts x 7 batch limits
    row = next(r for r in rows if r.get("pools") == {"prefill_devices": 1, "decode_devices": 2})
    out = _json(
        capsys,
        *("serve", "--model", "llama-3.1-8b", "--hw", "h100-sxm", "--devices", "3", "--tp", "1"),
        *("--rate", "20", "--in", "4000", "--out", "200", "--disagg", "1:2", "--dtype", "fp8"),
        *("--max-batch", str(row["max_batch"])),
    )
    assert out["throughput_tokens_per_s"] == pytest.approx(row["throughput_tokens_per_s"])
    assert out["ttft_s"]["p99"] == pytest.approx(row["ttft_p99_s"])
    assert out["tpot_s"]["p99"] == pytest.approx(row["tpot_p99_s"])


def test_weights_that_leave_no_kv_room_are_one_error_line(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """DeepSeek-V3 in bf16 on 8 B200: 671e9 parameters x 2 B / 8 devices = 168 GB of weights on
    each 180 GB device; TensorRT-LLM's 0.9 of what the weights leave, less the activations, holds
    no request of 1,000 + 1,000 tokens. Rate or concurrency, one `error:` line, exit 2 (it was a
    ZeroDivisionError traceback)."""
    base = ["serve", "--model", "deepseek-v3", "--hw", "b200", "--devices", "8", "--tp", "8",
            "--ep", "8", "--attention-dp", "8", "--in", "1000", "--out", "1000"]  # fmt: skip
    assert 671e9 * 2 / 8 > 0.9 * 180e9  # the weights alone take more than 0.9 of a device
    for load in (["--rate", "1"], ["--concurrency", "256"], ["--rate", "1", "--json"]):
        assert main([*base, *load]) == 2
        err = capsys.readouterr().err
        assert err.startswith("error: deepseek-v3 (bf16 weights") and "holds no request" in err
    assert main([*base, "--concurrency", "256", "--weight-dtype", "fp8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["kv_limit_sequences"] >= 1
