"""Pipeline-parallel serving (`serve --pp N`, the serving search's pp): each stage holds 1/pp of
the blocks' weights and KV cache, pp microbatches are in flight, a decode step is pp times the
slowest stage (its layers plus the send of its activations), a prompt passes every stage; the
queueing is the analytic model's (serving/analytic.py) with those steps."""

from __future__ import annotations

import json
import math

import pytest

from shardline.cli.main import main
from shardline.hardware import resolve_chip
from shardline.models import load_model
from shardline.planning.network import MeshNetwork
from shardline.serving.analytic import Replica
from shardline.serving.config import Lengths, ServeConfig
from shardline.serving.engines import engine
from shardline.serving.steady import analyze
from shardline.serving.steptimes import Split, StepTimes, price_step, step_times
from tests.cli_run import run_cli

MODEL, HW = "llama-3.2-1b", "h100-sxm"  # 16 blocks, d_model 2,048, vocab 128,256


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


@pytest.fixture(scope="module")
def steps() -> tuple[StepTimes, StepTimes]:
    spec, chip, eng = load_model(MODEL), resolve_chip(HW), engine("trtllm")
    return (
        step_times(spec, chip, 1, "bf16", eng),
        step_times(spec, chip, 1, "bf16", eng, split=Split(pp=2)),
    )


# --- memory: each stage holds half the weights and half the KV --------------------------------


def test_two_stages_hold_half_the_weights_and_twice_the_sequences(
    steps: tuple[StepTimes, StepTimes],
) -> None:
    one, two = steps
    spec = load_model(MODEL)
    embedding_bytes = spec.vocab * spec.d_model * 2  # bf16: 128,256 x 2,048 x 2 B = 525 MB
    # the fullest stage holds half the blocks, and at most the embedding (or LM head) besides
    assert one.weights_bytes_per_device / 2 <= two.weights_bytes_per_device
    assert two.weights_bytes_per_device <= one.weights_bytes_per_device / 2 + embedding_bytes
    # a token's KV is the replica's: 16 layers x 2 (K, V) x 8 KV heads x 64 x 2 B, either way
    assert one.kv_bytes_per_token == two.kv_bytes_per_token == 16 * 2 * 8 * 64 * 2
    # TensorRT-LLM's rule on every device: 0.9 (C - W - A); two devices hold distinct KV
    # (each its 8 layers), one device before
    c = 80e9
    assert one.capacity_bytes_per_device == two.capacity_bytes_per_device == c
    per_device = 0.9 * (c - two.weights_bytes_per_device - two.activations_bytes_per_device)
    assert two.kv_budget_bytes() == pytest.approx(2 * per_device, rel=1e-12)
    single = 0.9 * (c - one.weights_bytes_per_device - one.activations_bytes_per_device)
    assert one.kv_budget_bytes() == pytest.approx(single, rel=1e-12)
    # sequences of 2,000 + 500 tokens (the whole output reserved) + 8: a pp=2 replica admits
    # the budget of two devices, each with half the weights: more than twice one device's
    cfg = ServeConfig(1.0, Lengths("fixed", 2000), Lengths("fixed", 500), 2, 1)
    pp_cfg = ServeConfig(1.0, Lengths("fixed", 2000), Lengths("fixed", 500), 2, 1, pp=2)
    seq = (2000 + 500 / 2 + 8) * one.kv_bytes_per_token  # on demand: I + O/2 + 8 tokens
    assert Replica(one, cfg, 0.9).kv_limit == pytest.approx(single / seq, rel=1e-12)
    assert Replica(two, pp_cfg, 0.9).kv_limit == pytest.approx(2 * per_device / seq, rel=1e-12)
    assert Replica(two, pp_cfg, 0.9).kv_limit > 2 * Replica(one, cfg, 0.9).kv_limit


# --- the step: P stage times, each the stage's layers plus its send ----------------------------


def test_a_decode_step_is_two_stage_times_of_half_the_layers_and_a_send(
    steps: tuple[StepTimes, StepTimes],
) -> None:
    from dataclasses import replace

    _, two = steps
    spec, chip = load_model(MODEL), resolve_chip(HW)
    n, c = 64, 1500
    plan = price_step(spec, chip, 1, "bf16", ("decode", n, c), split=Split(pp=2))
    first, last = plan.stages
    assert plan.microbatches == 2  # the engine's two microbatches of 32 sequences in flight
    # the first stage sends its microbatch's activations on: 32 sequences x 2,048 x 2 B, point
    # to point over the link between the two devices (collectives' send, with its latency)
    v = 32 * spec.d_model * 2
    send = MeshNetwork(chip, {"pp": 2}).predicted("send", v, "pp")
    assert first["fwd_comm_s"] == pytest.approx(send, rel=1e-12)
    assert first["predicted_s"] == pytest.approx(first["fwd_compute_s"] + send, rel=1e-12)
    assert last["fwd_comm_s"] == 0.0  # the last stage sends nothing on
    # the last stage is the engine's step of half the model (8 blocks, with the LM head) at
    # 32 sequences: it differs only by the embedding lookup, which the first stage holds
    half = price_step(replace(spec, layers=8), chip, 1, "bf16", ("decode", 32, c))
    assert last["predicted_s"] == pytest.approx(half.predicted_s, rel=1e-2)
    # a token for every sequence: each microbatch passes both stages, the slowest paces them
    step = 2 * max(first["predicted_s"], last["predicted_s"])
    assert two.decode_at(n, c) == pytest.approx(step, rel=1e-12)
    # one sequence: one microbatch, still two stage times (the other stage idles)
    lone = price_step(spec, chip, 1, "bf16", ("decode", 1, c), split=Split(pp=2))
    assert lone.microbatches == 1
    assert two.decode_at(1, c) == pytest.approx(
        2 * max(s["predicted_s"] for s in lone.stages), rel=1e-12
    )


def test_a_prompt_passes_both_stages_and_holds_the_pipeline_one(
    steps: tuple[StepTimes, StepTimes],
) -> None:
    _, two = steps
    spec, chip = load_model(MODEL), resolve_chip(HW)
    plan = price_step(spec, chip, 1, "bf16", ("prefill", 1, 2000), split=Split(pp=2))
    stage = max(s["predicted_s"] for s in plan.stages)
    # one microbatch through two stages: m + P - 1 = 2 stage times end to end
    assert plan.predicted_s == pytest.approx(2 * stage, rel=1e-12)
    assert float(two.prefill_pass_s(2000)) == pytest.approx(plan.predicted_s, rel=1e-12)
    # the next prompt enters after one stage time: what the replica's throughput pays
    assert float(two.prefill_s(2000)) == pytest.approx(stage, rel=1e-12)


# --- the queueing: the analytic model with the pipeline's steps --------------------------------


def _formula_steps(stage_s: float, per_seq_s: float, prompt_stage_s: float) -> StepTimes:
    """Two stages: a stage time of stage_s + per_seq_s x (its microbatch); a prompt's stage
    time prompt_stage_s (its pass through both: twice that)."""
    return StepTimes(
        chip="formula",
        tp=1,
        pp=2,
        decode_point=lambda n, c: 2 * (stage_s + per_seq_s * math.ceil(n / min(n, 2))),
        prefill_point=lambda tokens: prompt_stage_s,
        weights_bytes_per_device=0.0,
        activations_bytes_per_device=0.0,
        capacity_bytes_per_device=1e12,
        kv_bytes_per_token=1.0,
        kv_rule="fraction_of_free",
        kv_fraction=0.9,
    )


def test_the_pipeline_queue_by_hand() -> None:
    # stage time 4 ms + 0.1 ms a sequence of its microbatch; a prompt holds a stage 20 ms
    st = _formula_steps(4e-3, 1e-4, 20e-3)
    lam = 10.0
    cfg = ServeConfig(
        lam, Lengths("fixed", 1000), Lengths("fixed", 100), 2, 1, chunk_tokens=None, pp=2
    )
    a = analyze(st, cfg, 0.9)
    # capacity at B = 256: B / (O t_dec(B) + B t_p), t_dec(256) = 2 (4 + 0.1 x 128) ms =
    # 33.6 ms, t_p = 20 ms (one stage time a prompt): 256 / (100 x 0.0336 + 256 x 0.02)
    assert a.capacity_requests_per_s == pytest.approx(256 / (100 * 0.0336 + 256 * 0.02), rel=1e-9)
    # TTFT: the queue moves a prompt per stage time (S / P = 20 ms), the prompt passes both
    # stages (S = 40 ms): M/D/1 wait lam (S/P)^2 / (2 (1 - lam S/P)) = 10 x 0.02^2 / (2 x 0.8)
    wait = 10 * 0.02**2 / (2 * (1 - 10 * 0.02))
    assert a.ttft_mean_s == pytest.approx(wait + 0.040, rel=1e-9)
    # TPOT: t_dec(b) / (1 - rho_p), rho_p = lam x 20 ms = 0.2 (the median: no spread term)
    assert a.tpot_s[50] == pytest.approx(float(st.decode_s(a.batch, 1050)) / 0.8, rel=1e-9)
    # Little's law: b (1 - rho_p) / t_dec(b) = lam O
    assert a.batch * 0.8 / float(st.decode_s(a.batch, 1050)) == pytest.approx(10 * 100, rel=1e-6)


def test_saturated_throughput_is_a_microbatch_per_stage_time() -> None:
    # prompts that cost nothing: capacity tokens/s = B / t_dec(B) = (B / 2) / t_stage(B / 2)
    st = _formula_steps(4e-3, 1e-4, 1e-12)
    cfg = ServeConfig(
        1e6, Lengths("fixed", 10), Lengths("fixed", 1000), 2, 1, chunk_tokens=None, pp=2
    )
    a = analyze(st, cfg, 0.9)
    stage = 4e-3 + 1e-4 * 128
    assert a.throughput_tokens_per_s == pytest.approx(128 / stage, rel=1e-6)


# --- the command line: plan agrees, the launch lines, the search, bad input -------------------


def test_serve_pp_decode_step_is_plans_step(capsys: pytest.CaptureFixture[str]) -> None:
    """Saturated, the running batch is 256 at the mean context 1,500: `plan --phase decode
    --pp 2` at that batch and context prices the same step."""
    out = _json(
        capsys,
        *("serve", "--model", "llama-3.1-8b", "--hw", "h100-sxm", "--devices", "4", "--pp", "2"),
        *("--rate", "1000", "--in", "1000", "--out", "1000", "--dtype", "fp8"),
    )
    assert out["config"]["pp"] == 2 and out["config"]["tp"] == 1
    assert out["batch"] == 256 and out["mean_context_tokens"] == 1500
    plan = _json(
        capsys,
        *("plan", "--model", "llama-3.1-8b", "--hw", "h100-sxm", "--devices", "2", "--tp", "1"),
        *("--pp", "2", "--phase", "decode", "--batch", "256", "--seq-len", "1500"),
        *("--dtype", "fp8", "--microbatches", "2"),
    )
    assert plan["plans"][0]["predicted_s"] == pytest.approx(out["decode_step_s"], rel=1e-12)
    # left to pick, the plan picks the same 2 microbatches: m x t_stage(256 / m) for m > 2
    # reads each stage's weights m times, fewer than 2 leave a stage idle
    free = _json(
        capsys,
        *("plan", "--model", "llama-3.1-8b", "--hw", "h100-sxm", "--devices", "2", "--tp", "1"),
        *("--pp", "2", "--phase", "decode", "--batch", "256", "--seq-len", "1500"),
        *("--dtype", "fp8"),
    )
    assert free["plans"][0]["microbatches"] == 2
    assert free["plans"][0]["predicted_s"] == plan["plans"][0]["predicted_s"]
    # two replicas of two stages serve twice one replica's capacity
    one = _json(
        capsys,
        *("serve", "--model", "llama-3.1-8b", "--hw", "h100-sxm", "--devices", "2", "--pp", "2"),
        *("--rate", "1000", "--in", "1000", "--out", "1000", "--dtype", "fp8"),
    )
    assert out["capacity_requests_per_s"] == pytest.approx(
        2 * one["capacity_requests_per_s"], rel=1e-12
    )


def test_dp_attention_in_each_stage_is_plans_ep_pp_step(capsys: pytest.CaptureFixture[str]) -> None:
    """DP attention over 4 ranks in each of 2 stages of 4 devices is the plan's tp 1 x ep 4 x
    pp 2 on 8 devices, each rank's 64 of the 256 sequences in 2 microbatches of 32."""
    out = _json(
        capsys,
        *("serve", "--model", "qwen3-30b-a3b", "--hw", "h100-sxm", "--devices", "8", "--tp", "4"),
        *("--ep", "4", "--attention-dp", "4", "--pp", "2", "--rate", "1000", "--in", "1000"),
        *("--out", "1000", "--dtype", "fp8"),
    )
    assert out["batch"] == 256 and out["mean_context_tokens"] == 1500
    plan = _json(
        capsys,
        *("plan", "--model", "qwen3-30b-a3b", "--hw", "h100-sxm", "--devices", "8", "--tp", "1"),
        *("--ep", "4", "--pp", "2", "--microbatches", "2", "--phase", "decode", "--batch", "256"),
        *("--seq-len", "1500", "--dtype", "fp8"),
    )
    assert plan["plans"][0]["predicted_s"] == pytest.approx(out["decode_step_s"], rel=1e-12)


@pytest.mark.parametrize(
    ("name", "flag"),
    [
        ("vllm", "--pipeline-parallel-size 2"),
        ("sglang", "--pp-size 2"),
        ("trtllm", "--pp_size 2"),
    ],
)
def test_emit_names_the_stages_in_each_engines_flag(
    capsys: pytest.CaptureFixture[str], name: str, flag: str
) -> None:
    argv = ("serve", "--model", MODEL, "--hw", HW, "--devices", "4", "--tp", "2", "--pp", "2")
    code, out, _ = run_cli(
        capsys, *argv, "--rate", "1", "--in", "100", "--out", "10", "--emit", name
    )
    assert code == 0 and flag in out
    # without pipeline stages the flag stays out (each engine's default is 1)
    code, out, _ = run_cli(
        capsys, *argv[:-2], "--rate", "1", "--in", "100", "--out", "10", "--emit", name
    )
    assert code == 0 and flag.split()[0] not in out


def test_search_takes_pipeline_stages_when_a_node_does_not_hold_the_model(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """405B in bf16 (810 GB) fits no 8 H100s (640 GB): the cheapest layout meeting the SLO is a
    tp 8 x pp 2 replica of 16, and serve gives it the search's figures."""
    argv = ("--model", "llama-3.1-405b", "--hw", "h100-sxm", "--rate", "1", "--in", "1000")
    argv += ("--out", "200", "--dtype", "bf16")
    found = _json(capsys, "search", *argv, "--max-devices", "16", "--slo", "ttft=2s,tpot=100ms")
    best = found["best"]
    assert (best["devices"], best["tp"], best["pp"]) == (16, 8, 2)
    served = _json(
        capsys,
        "serve",
        *argv,
        *("--devices", "16", "--tp", "8", "--pp", "2", "--max-batch", str(best["max_batch"])),
    )
    assert served["throughput_tokens_per_s"] == pytest.approx(best["throughput_tokens_per_s"])
    assert served["ttft_s"]["p99"] == pytest.approx(best["ttft_p99_s"], rel=1e-12)
    assert served["tpot_s"]["p99"] == pytest.approx(best["tpot_p99_s"], rel=1e-12)
    code, out, _ = run_cli(
        capsys,
        "search",
        *argv,
        "--max-devices",
        "16",
        "--slo",
        "ttft=2s,tpot=100ms",
        "--emit",
        "vllm",
    )
    assert code == 0 and "--tensor-parallel-size 8" in out and "--pipeline-parallel-size 2" in out


@pytest.mark.parametrize(
    ("extra", "says"),
    [
        (("--devices", "3", "--pp", "3"), "--pp 3 does not divide the model's 16 blocks"),
        (("--devices", "32", "--pp", "32"), "--pp 32 does not divide the model's 16 blocks"),
        (("--devices", "2", "--tp", "2", "--pp", "2"), "do not split into replicas of --tp 2 x"),
        (("--devices", "2", "--pp", "0"), "--pp"),
        (("--devices", "2", "--pp", "two"), "--pp"),
        (("--devices", "4", "--pp", "2", "--disagg", "2:2"), "--pp with --disagg"),
        (("--devices", "2048", "--pp", "2048"), "--pp must be at most 1,024"),
        # a huge value is shown short, not as a hundred digits
        (("--devices", "2", "--pp", "1e99"), "--pp must be at most 1,024, got 1e+99"),
    ],
)
def test_bad_pipeline_input_is_one_error_line(
    capsys: pytest.CaptureFixture[str], extra: tuple[str, ...], says: str
) -> None:
    argv = ("serve", "--model", MODEL, "--hw", HW, "--rate", "1", "--in", "100", "--out", "10")
    code, out, err = run_cli(capsys, *argv, *extra)
    assert code == 2 and out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and says in lines[0]


def test_waves_refuse_pipeline_stages(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ("serve", "--model", MODEL, "--hw", HW, "--devices", "2", "--pp", "2")
    code, _, err = run_cli(
        capsys, *argv, "--concurrency", "8", "--waves", "--in", "100", "--out", "10"
    )
    assert code == 2 and err.count("error:") == 1 and "--pp 1" in err


def test_the_simulation_runs_the_pipeline(capsys: pytest.CaptureFixture[str]) -> None:
    """At a trickle of 2 req/s nobody queues: a simulated prompt's first token leaves the last
    stage after its pass through both, twice the stage time it holds the replica (t_p)."""
    out = _json(
        capsys,
        *("serve", "--model", MODEL, "--hw", HW, "--devices", "2", "--pp", "2", "--rate", "2"),
        *("--in", "2000", "--out", "100", "--simulate", "--requests", "400"),
    )
    sim = out["simulation"]["ttft_s"]["p50"]
    # the pass 2 t_p; the analytic TTFT adds one decode step for the prompt's chunk
    assert sim >= 2 * out["prefill_s"] * (1 - 1e-9)
    assert sim <= out["ttft_s"]["p50"]
