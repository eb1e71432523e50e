"""Issue 28's "Reliability" list and issue 31's second list, each cause with a test that would
have caught it (group 8 of benchmarks/bench_hostile.py replays them through the CLI): integers past
a float's range in data files, Hugging Face counts of the wrong type, a MoE's expert count, trace
token counts, the simulation's measuring window, the speculative verification step against the
compute roofline, serve figures of a model file, search's messages and flags, partial CSVs, the
crossover bisection and the layer count of a huge workload file."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from shardline.errors import InputError
from shardline.models.hf_import import model_toml_from_config
from tests.cli_run import run_cli

ROOT = Path(__file__).resolve().parent.parent
CHIP = ROOT / "src" / "shardline" / "hardware" / "catalog" / "h100-sxm.toml"
LLAMA = ROOT / "src" / "shardline" / "models" / "catalog" / "llama-3.2-1b.toml"
DIGITS = "9" * 400


def _one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def test_a_400_digit_integer_in_a_chip_file_is_one_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = "\n".join(x for x in CHIP.read_text().splitlines() if not x.startswith("aliases"))
    chip = tmp_path / "chip.toml"
    chip.write_text(text.replace("value = 989.4e12", f"value = {DIGITS}", 1))
    code, _, err = run_cli(capsys, "matmul", "4096", "4096", "4096", "--hw", str(chip))
    assert code == 2
    assert _one_error(err).endswith(
        "field 'peak_flops_per_s.bf16' is too large a number (400 digits)"
    )


def test_a_400_digit_integer_in_a_model_file_is_one_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = tmp_path / "m.toml"
    text = LLAMA.read_text()
    model.write_text(text.replace("d_ff = { value = 8192", f"d_ff = {{ value = {DIGITS}"))
    code, _, err = run_cli(capsys, "model", "show", str(model))
    assert code == 2
    assert _one_error(err).endswith("field 'd_ff' is too large a number (400 digits)")


DEEPSEEK = {
    "model_type": "deepseek_v3", "hidden_size": 1024, "intermediate_size": 4096,
    "moe_intermediate_size": 512, "n_routed_experts": 16, "num_experts_per_tok": 2,
    "q_lora_rank": 256, "kv_lora_rank": 128, "qk_rope_head_dim": 32, "qk_nope_head_dim": 64,
    "v_head_dim": 64, "num_attention_heads": 8, "num_hidden_layers": 4, "vocab_size": 32000,
}  # fmt: skip
GEMMA = {
    "model_type": "gemma3_text", "hidden_size": 1024, "intermediate_size": 4096,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 128, "num_hidden_layers": 12,
    "vocab_size": 32000, "sliding_window": 512, "sliding_window_pattern": 6,
}  # fmt: skip
NOT_COUNTS = ("64", [64], {"value": 64}, math.nan, math.inf, "", 64.5, True, 0, -64)


@pytest.mark.parametrize("value", NOT_COUNTS, ids=repr)
@pytest.mark.parametrize(
    ("key", "base"),
    [("qk_nope_head_dim", DEEPSEEK), ("qk_rope_head_dim", DEEPSEEK),
     ("sliding_window_pattern", GEMMA)],
)  # fmt: skip
def test_hf_counts_of_the_wrong_type_name_the_key(key: str, base: dict, value: object) -> None:
    # the string "64" and True were taken as 64 and 1 (int()), 64.5 as 64; a list, a table,
    # NaN and inf raised TypeError/ValueError/OverflowError
    with pytest.raises(InputError, match=f"{key} must be a positive whole number, got "):
        model_toml_from_config({**base, key: value}, "c.json", "m")


def test_hf_counts_that_are_right_are_read() -> None:
    # qk_nope + qk_rope = 64 + 32 = 96 per head; Gemma's pattern 6 = 5 sliding layers per global
    assert "head_dim = { value = 96" in model_toml_from_config(DEEPSEEK, "c.json", "m")
    assert "local_per_global = { value = 5" in model_toml_from_config(GEMMA, "c.json", "m")


def test_a_moe_past_a_million_experts_is_refused(tmp_path: Path) -> None:
    from shardline.models import load_model
    from shardline.workload.modelspec import MAX_EXPERTS

    # the largest published design: 1,024 x 1,024 experts (He 2024, PEER)
    assert MAX_EXPERTS == 1024 * 1024
    with pytest.raises(InputError, match="'moe.experts' is more than 1,048,576"):
        model_toml_from_config({**DEEPSEEK, "n_routed_experts": 10**12}, "c.json", "m")
    oss = (LLAMA.parent / "gpt-oss-20b.toml").read_text()
    path = tmp_path / "moe.toml"
    path.write_text(oss.replace("experts = { value = 32", f"experts = {{ value = {MAX_EXPERTS}"))
    assert load_model(str(path)).moe.experts == MAX_EXPERTS  # the limit itself is legal
    from shardline.workload.moe import moe_shape

    with pytest.raises(InputError, match="experts must be at most 1,048,576, got 1,048,577"):
        moe_shape({"experts": MAX_EXPERTS + 1, "experts_per_token": 2}, 4096)


@pytest.mark.parametrize("tokens", ["1e15", "1e300", "1000000001"])
def test_trace_token_counts_past_the_limit_are_refused(tmp_path: Path, tokens: str) -> None:
    from shardline.io.serving_trace import read_trace

    path = tmp_path / "t.csv"
    path.write_text(f"arrival_s,input_tokens,output_tokens\n0,10,10\n1,10,{tokens}\n")
    with pytest.raises(InputError, match=r"t.csv:3: .* tokens is more than the limit of 1,000,0"):
        read_trace(path)


def _synthetic() -> Any:
    from shardline.serving.steptimes import StepTimes

    # decode step t(n) = 0.01 + 1e-4 n s at any context; prefill 1e-4 s per token
    return StepTimes(
        chip="synthetic",
        tp=1,
        decode_point=lambda n, c: 0.01 + 1e-4 * n,
        prefill_point=lambda tokens: 1e-4 * tokens,
        weights_bytes_per_device=0.0,
        activations_bytes_per_device=0.0,
        capacity_bytes_per_device=1e12,
        kv_bytes_per_token=1.0,
    )


def _config(**kw: Any) -> Any:
    from shardline.serving.config import Lengths, ServeConfig

    return ServeConfig(5.0, Lengths("fixed", 100), Lengths("fixed", 20), 1, 1, **kw)


@pytest.mark.parametrize("gap_s", [0.0, 1e-13], ids=["zero gaps", "1e13 per s"])
def test_a_burst_is_measured_over_the_whole_run(gap_s: float) -> None:
    from shardline.serving.simulate import Requests, simulate_replica, summarize

    n = 50
    reqs = Requests(np.arange(n) * gap_s, np.full(n, 100.0), np.full(n, 20.0))
    sim = simulate_replica(_synthetic(), _config(chunk_tokens=None), 0.9, reqs)
    s = summarize(sim)
    # all 50 are admitted within one step: the window between admissions holds no step (it
    # reported 0 tokens/s and 1e13 requests/s); the whole run is measured instead, 50 x 20
    # tokens from the first admission to the last finish
    span = float(np.max(sim.finish_s) - sim.admitted_s[0])
    assert s["throughput_tokens_per_s"] == pytest.approx(n * 20 / span)
    assert s["requests_per_s"] == pytest.approx(n / span)


def test_one_request_is_served_at_its_own_rate() -> None:
    from shardline.serving.simulate import Requests, simulate_replica, summarize

    reqs = Requests(np.array([0.3]), np.array([100.0]), np.array([20.0]))
    sim = simulate_replica(_synthetic(), _config(chunk_tokens=None), 0.9, reqs)
    s = summarize(sim)
    # prefill 100 x 1e-4 = 0.01 s gives the first token, then 19 decode steps of 0.0101 s
    span = 0.01 + 19 * 0.0101
    assert float(sim.finish_s[0] - sim.admitted_s[0]) == pytest.approx(span)
    assert s["throughput_tokens_per_s"] == pytest.approx(20 / span)
    assert s["requests_per_s"] == pytest.approx(1 / span)


def test_the_verification_step_costs_at_least_its_compute() -> None:
    from shardline.serving.analytic import Replica

    st = _synthetic()
    # k = 1024: each of b sequences checks 1,025 tokens, each at least a prefill token's 1e-4 s
    # (the prefill of 4,096 tokens over 4,096): b x 1025 x 1e-4 s, not t(b) = 0.01 + 1e-4 b
    spec = Replica(st, _config(spec_k=1024, spec_alpha=1.0), 0.9)
    assert spec.t_dec(8.0) == pytest.approx(8 * 1025 * 1e-4)
    # k = 4 at b = 8: 8 x 5 x 1e-4 = 0.004 s < 0.01 + 8e-4: the decode step stands
    small = Replica(st, _config(spec_k=4, spec_alpha=0.8), 0.9)
    assert small.t_dec(8.0) == pytest.approx(0.01 + 8e-4)


def test_spec_decode_stays_under_the_compute_roofline(capsys: pytest.CaptureFixture[str]) -> None:
    from shardline.hardware import resolve_chip
    from shardline.models import load_model
    from shardline.workload.modelspec import params_active

    code, out, err = run_cli(
        capsys, "serve", "--model", "llama-3.2-1b", "--hw", "h100-sxm", "--devices", "8",
        "--tp", "1", "--rate", "1e5", "--in", "10", "--out", "5000", "--spec-decode", "1024,1.0",
        "--json",
    )  # fmt: skip
    assert code == 0, err
    # every output token is at least 2 FLOP per active weight: 8 x 989.4e12 / (2 x 1.236e9)
    bound = 8 * resolve_chip("h100-sxm").peak_flops_per_s["bf16"]
    bound /= 2 * params_active(load_model("llama-3.2-1b"))
    assert 3.1e6 < bound < 3.3e6
    assert json.loads(out)["throughput_tokens_per_s"] <= bound  # it said 24.6M


def test_serve_figures_draw_the_model_file_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import shardline.serving.plotdata as plotdata

    seen = []

    def record(model: str, *args: Any) -> Any:
        seen.append(model)
        raise InputError("figures not drawn in this test")

    monkeypatch.setattr(plotdata, "serve_plot_data", record)
    model = tmp_path / "renamed.toml"  # carries the zoo's name, other numbers
    model.write_text(LLAMA.read_text().replace("layers = { value = 16", "layers = { value = 20"))
    code, _, err = run_cli(
        capsys, "serve", "--model", str(model), "--hw", "h100-sxm", "--devices", "8", "--tp",
        "8", "--rate", "5", "--in", "200", "--out", "50", "--html", str(tmp_path / "o.html"),
    )  # fmt: skip
    assert code == 2 and "figures not drawn in this test" in err
    assert seen == [str(model)]  # not "llama-3.2-1b", the zoo model the file's name matches


def test_search_says_when_no_layout_exists(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys, "search", "--model", "llama-3.2-1b", "--hw", "h100-sxm", "--tokens", "1T",
        "--devices", "97", "--json", "--quiet",
    )  # fmt: skip
    assert code == 0, err
    answer = json.loads(out)
    assert answer["evaluated"] == 0
    assert answer["why_none"].startswith("no layout exists on 97 devices")


@pytest.mark.parametrize(
    ("flag", "value"),
    [("--devices", "8"), ("--tokens", "1T"), ("--seq-len", "4096"), ("--global-batch", "1Mi"),
     ("--scales", "4"), ("--fix", "tp=2"), ("--rerank", "12")],
)  # fmt: skip
def test_the_serving_search_refuses_training_flags(
    capsys: pytest.CaptureFixture[str], flag: str, value: str
) -> None:
    code, _, err = run_cli(
        capsys, "search", "--model", "llama-3.2-1b", "--hw", "h100-sxm", "--slo",
        "ttft=500ms,tpot=30ms", "--rate", "5/s", "--in", "2000", "--out", "500", flag, value,
    )  # fmt: skip
    assert code == 2
    assert _one_error(err).startswith(f"error: {flag} applies to the training search")


def test_a_partial_csv_this_run_did_not_write_is_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    mine = tmp_path / "host.toml.partial.csv"
    mine.write_text("mine\n")
    monkeypatch.setenv("SHARDLINE_FAIL_AFTER", "3")
    code, _, err = run_cli(capsys, "calibrate", "--out", str(tmp_path / "host.toml"), "--quick")
    assert code == 2
    kept = tmp_path / "host.toml.partial-2.csv"
    assert f"the 3 finished measurements are in {kept}" in _one_error(err)
    assert mine.read_text() == "mine\n"  # it was replaced, and deleted by a run that ended well
    assert len(kept.read_text().strip().splitlines()) == 1 + 3


def test_the_next_free_partial_name(tmp_path: Path) -> None:
    from shardline.calibrate.chipfile import free_partial_path

    first = tmp_path / "v.partial.csv"
    assert free_partial_path(first) == first
    first.write_text("x")
    (tmp_path / "v.partial-2.csv").write_text("x")
    assert free_partial_path(first) == tmp_path / "v.partial-3.csv"


def test_a_wide_batch_range_is_bisected_geometrically(monkeypatch: pytest.MonkeyPatch) -> None:
    import shardline.planning.sweep as sweep
    from shardline import transformer

    calls = []

    class Found:
        def __init__(self, batch: int) -> None:
            self.recommended = "small" if batch < 1000 else "large"
            self.plans = []

        def best(self) -> None:
            return None

    def fake_planner(work: Any, *args: Any, **kw: Any) -> Callable[[int], Found]:
        def at(batch: int) -> Found:
            calls.append(batch)
            return Found(batch)

        return at

    monkeypatch.setattr(sweep, "batch_planner", fake_planner)
    w = transformer(d_model=256, d_ff=1024, heads=4, seq_len=128, batch=1, layers=2)
    result = sweep.sweep_batch(w, "h100-sxm", 8, [1, 10**9])
    assert [(c.batch, c.from_plan, c.to_plan) for c in result.crossovers] == [
        (1000, "small", "large")
    ]
    # geometric means while the bracket spans over 2x (31622, 177, 2365, 647, 1237), then
    # halving (942 ... 999): 2 ends + 14 probes; halving alone takes 2 + 30
    assert len(calls) == 16


def test_a_workload_file_past_the_layer_limit_is_refused_before_parsing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shardline.io.workload_toml as workload_toml
    from shardline.workload.workload import MAX_LAYERS

    layer = '[[layer]]\nname = "l"\neinsum = "x[M,N] * w[N,K] -> y[M,K]"\n'
    path = tmp_path / "many.toml"
    path.write_text("[dims]\nM = 64\nN = 64\nK = 64\n" + layer * (MAX_LAYERS + 1))

    def never(*_: Any) -> None:
        raise AssertionError("parsed")

    monkeypatch.setattr(workload_toml.tomllib, "loads", never)
    monkeypatch.setattr(workload_toml, "loads_subset", never)
    with pytest.raises(InputError, match="250,001 layers; the limit is 250,000"):
        workload_toml.workload_from_toml(path)
