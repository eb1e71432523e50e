"""What a new user trips on (issue 28, items 1-6): one check per item, each one that would have
caught what the issue found."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import shardline
from shardline.errors import InputError
from tests.cli_run import run_cli as _run

ROOT = Path(__file__).resolve().parent.parent


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    version = next(
        line.split('"')[1]
        for line in (ROOT / "pyproject.toml").read_text().splitlines()
        if line.startswith("version = ")
    )
    assert shardline.__version__ == version
    code, out, _ = _run(capsys, "--version")
    assert (code, out) == (0, f"shardline {version}\n")


def test_plan_from_a_zoo_model_name_is_the_cli_plan(capsys: pytest.CaptureFixture[str]) -> None:
    ps = shardline.plan("llama-3.1-8b", "h100-sxm", 8)
    code, out, err = _run(
        capsys, "plan", "--model", "llama-3.1-8b", "--hw", "h100-sxm", "--devices", "8", "--json"
    )
    assert code == 0, err
    cli = json.loads(out)
    assert ps.recommended == cli["recommended"]
    assert ps.plans[0].predicted_s == pytest.approx(cli["plans"][0]["predicted_s"], rel=1e-12)
    # the defaults: a training step of one sequence of 4096 tokens (= `search`'s --seq-len)
    assert ps.workload.training and ps.workload.batch == 1
    assert ps.workload.tokens_per_item == 4096
    with pytest.raises(InputError, match="unknown model 'no-such-model'"):
        shardline.plan("no-such-model")


def test_plan_and_search_default_to_one_sequence_length() -> None:
    from shardline.cli import cmd_search
    from shardline.models.template import DEFAULT_SEQ_LEN

    assert cmd_search.DEFAULT_SEQ_LEN == DEFAULT_SEQ_LEN == 4096


def test_trace_says_which_file_it_wrote(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out_path = tmp_path / "step.json"
    code, out, err = _run(
        capsys, "plan", str(ROOT / "examples" / "ffn_70b.toml"), "--devices", "8",
        "--trace", str(out_path), "--json",
    )  # fmt: skip
    assert code == 0, err
    json.loads(out)  # stdout stays the JSON answer
    assert out_path.exists()
    assert err == f"wrote {out_path}: Chrome trace-event JSON of fsdp8's step (open in Perfetto)\n"


def test_report_summary_is_the_plan_its_timeline_draws(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # issue 28 item 2: the summary showed the one-chip stack (1.35 TB: DOES NOT FIT) beside the
    # 16-device plan's timeline
    import re

    from shardline.basics.units import fmt_bytes, fmt_time

    flags = ["--model", "llama-3.1-70b", "--devices", "16", "--tp", "4", "--pp", "4"]
    page = tmp_path / "r.html"
    code, _, err = _run(capsys, "report", *flags, "--html", str(page))
    assert code == 0, err
    code, out, err = _run(capsys, "plan", *flags, "--json")
    assert code == 0, err
    best = json.loads(out)["plans"][0]
    found = re.search(r'"summary":(\[\[.*?\]\])', page.read_text())
    assert found is not None
    summary = dict(json.loads(found.group(1).replace("\\/", "/")))
    assert "total time" not in summary and "memory" not in summary
    assert summary["plan"] == f"{best['name']} over 16 devices (the step timeline below)"
    assert best["name"] == "tp4-pp4"
    assert summary["step"] == (
        f"{fmt_time(best['predicted_s'])} predicted, {fmt_time(best['latency_s'])} lower bound"
    )
    mem = best["memory"]
    assert summary["memory per device"] == (
        f"{fmt_bytes(mem['total_bytes'])} of {fmt_bytes(mem['capacity_bytes'])}: fits"
    )
    assert f"Step timeline: {best['name']}" in page.read_text()


def _seconds(text: str) -> float:
    number, unit = text.split()
    return float(number) * {"ns": 1e-9, "µs": 1e-6, "ms": 1e-3, "s": 1.0}[unit]


def _per_s(text: str) -> float:
    number, unit = text.split()
    return float(number) * {"MB/s": 1e6, "GB/s": 1e9, "TB/s": 1e12}[unit]


def test_collective_library_table_reproduces_its_rows(capsys: pytest.CaptureFixture[str]) -> None:
    # issue 28: 64 KiB over 64 H100 printed ring/Simple as latency 585 µs and algbw 203 GB/s
    # (585 µs + 0.3 µs) beside t = 1.15 ms: the header formula must give every row's t
    import re

    v = 65536
    code, out, err = _run(
        capsys, "collective", "all-reduce", "--bytes", str(v), "--devices", "64", "--hw", "h100"
    )
    assert code == 0, err
    assert "t = latency + V / (algbw × ramp)" in out
    row = re.compile(
        r"^  (\S+)\s+(LL128|LL|Simple)\s+([\d.]+ [nµm]?s)\s+([\d.]+ [MGT]B/s)\s+"
        r"([\d.]+ [MGT]B/s)\s+([\d.e-]+)\s+([\d.]+ [nµm]?s)"
    )
    rows = [m.groups() for line in out.splitlines() if (m := row.match(line))]
    assert len(rows) >= 4
    ramps = {float(r[5]) for r in rows}
    assert min(ramps) < 0.01 and max(ramps) == 1  # the size ramp shows: 64 KiB is far below it
    for _, _, latency, _, algbw, ramp, t in rows:
        # each figure printed to 3 significant digits: agree to 1%
        expected = _seconds(latency) + v / (_per_s(algbw) * float(ramp))
        assert _seconds(t) == pytest.approx(expected, rel=0.01)


def test_slowest_stage_names_the_embedding_only_where_there_is_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # issue 28: a [[layer]] stack (no embedding, no LM head) was told "slowest stage 0 (it also
    # holds the embedding)"
    stack = ["plan", str(ROOT / "examples" / "seed003_stack.toml"), "--hw", "a100-40gb"]
    code, out, err = _run(capsys, *stack, "--devices", "2", "--pp", "2")
    assert code == 0, err
    (line,) = [x for x in out.splitlines() if x.startswith("  slowest stage:")]
    assert "embedding" not in line and "LM head" not in line
    model = ["plan", "--model", "llama-3.1-8b", "--devices", "8", "--pp", "4", "--tp", "2"]
    code, out, err = _run(capsys, *model)
    assert code == 0, err
    (line,) = [x for x in out.splitlines() if x.startswith("  slowest stage:")]
    assert line.startswith("  slowest stage: 3 of 0-3 (it also holds the LM head and loss)")


@pytest.mark.parametrize("name", ["a100-40gb", "a100-80gb"])
def test_a100_fp64_peaks(name: str) -> None:
    # NVIDIA A100 datasheet (SXM4): FP64 9.7 TFLOPS, FP64 Tensor Core 19.5 TFLOPS; the CUDA
    # cores run fp64 at half their fp32 rate (19.5 / 2 = 9.75, the datasheet rounds to 9.7)
    chip = shardline.load_chip(name)
    assert chip.peak("fp64") == 19.5e12
    assert chip.vector_flops_per_s["fp64"] == 9.7e12
    assert chip.vector_flops_per_s["fp32"] / 2 == pytest.approx(9.7e12, rel=0.01)
    assert "datasheet" in chip.sources["peak_flops_per_s.fp64"]


SERVE_70B = [
    "serve", "--model", "llama-3.1-70b", "--hw", "h100-sxm", "--devices", "16", "--tp", "4",
    "--in", "2000", "--out", "500", "--dtype", "fp8",
]  # fmt: skip


def test_serve_prefill_has_one_meaning_and_busy_is_not_load(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # issue 28: "prefill X ms per request" was the prompt's whole service (its chunk's decode
    # step added) below capacity and t_p alone when saturated; "utilization 100%" sat beside
    # "load 57% of capacity"
    answers = {}
    for rate in ("20", "40"):  # 40 req/s is past the 28.5 req/s capacity
        code, out, err = _run(capsys, *SERVE_70B, "--rate", rate, "--json")
        assert code == 0, err
        answers[rate] = json.loads(out)
    below, above = answers["20"], answers["40"]
    assert not below["saturated"] and above["saturated"]
    assert below["prefill_s"] == above["prefill_s"]  # the prompt's own compute, t_p
    code, out, err = _run(capsys, *SERVE_70B, "--rate", "20")
    assert code == 0, err
    load = 20 / below["capacity_requests_per_s"]
    assert (
        f"engine busy {below['utilization']:.0%} of the time (continuous batching; the load, "
        f"{load:.0%} of capacity, sets the batch)" in out
    )
    assert f"prefill {below['prefill_s'] * 1e3:.1f} ms of compute per request (t_p)" in out


def test_serve_html_names_what_it_serves_and_says_it_wrote(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pytest.importorskip("matplotlib")
    page = tmp_path / "serve.html"
    code, _, err = _run(
        capsys, "serve", "--model", "llama-3.2-1b", "--hw", "h100-sxm", "--devices", "2",
        "--tp", "2", "--rate", "5", "--in", "200", "--out", "50", "--dtype", "fp8",
        "--slo", "ttft=500ms,tpot=30ms", "--requests", "50", "--html", str(page),
    )  # fmt: skip
    assert code == 0, err
    assert f"wrote {page}: self-contained HTML page\n" in err
    text = page.read_text()
    for shown in ("2 x h100-sxm, tp 2", "fp8", "5 requests/s, 200 in / 50 out tokens"):
        assert shown in text
    assert "TTFT 500 ms, TPOT 30 ms at p99: met" in text


@pytest.mark.parametrize("model", ["mixtral-8x7b", "deepseek-v3", "gemma-3-27b"])
def test_serve_runs_experts_latent_attention_and_sliding_windows(
    capsys: pytest.CaptureFixture[str], model: str
) -> None:
    # issue 28: docs/serving.md said "dense models only" while MoE, MLA and sliding-window
    # models serve; each answer keeps up below capacity at 1 request/s: 200 output tokens/s
    code, out, err = _run(
        capsys, "serve", "--model", model, "--hw", "h200", "--devices", "8", "--tp", "8",
        "--rate", "1", "--in", "1000", "--out", "200", "--dtype", "fp8", "--json",
    )  # fmt: skip
    assert code == 0, err
    r = json.loads(out)
    assert not r["saturated"] and r["capacity_requests_per_s"] > 1
    assert r["throughput_tokens_per_s"] == pytest.approx(1 * 200, rel=1e-12)


def test_search_page_summary_reads_as_a_person_would() -> None:
    # issue 28: costs to three significant figures ("$0.1M" for every Pareto point was wrong),
    # no float's seventeen digits in the search page's summary
    from shardline.cli.cmd_search import _shown

    assert _shown("usd", 97_512_345.6) == "$97.5M"
    assert _shown("usd", 102_163.0) == "$102k"
    assert _shown("mfu", 0.42912345) == "0.4291"
    assert _shown("devices", 16384) == "16384"
