"""Leave one source out for the serving rows (benchmarks/serving_loso.py,
benchmarks/data/serving_sources.toml, benchmarks/bench_serve.py)."""

from __future__ import annotations

import collections
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))
import bench_serve  # noqa: E402
import serving_loso as LOSO  # noqa: E402
from e2e_loso import Figure  # noqa: E402


def test_every_row_names_one_serving_source() -> None:
    # counted by hand from the source texts of serving_published.csv: the TensorRT-LLM overview's
    # two tables (60 at commit 00f37686, 22 at 03e27c7), NIM's sweep (24), OCI's vLLM blog (11),
    # the v0.5.0 performance page (4), SGLang pull request 9359 (1), LMDeploy's A100 table (4)
    counts = collections.Counter(LOSO.row_source(r) for r in LOSO.load_rows())
    assert counts == {
        "trtllm-perf-overview": 82,
        "nim-llm-benchmarking": 24,
        "oci-vllm-mi300x": 11,
        "trtllm-v0.5-performance": 4,
        "sglang-pr-9359": 1,
        "lmdeploy-a100-fp16": 4,
    }


def test_a_row_naming_no_source_stops() -> None:
    with pytest.raises(SystemExit, match="no serving source"):
        LOSO.row_source({"name": "x", "source": "a blog nobody listed"})


def test_the_engine_measured_figure_is_its_scheduling_overhead() -> None:
    trt = {f.path: f for f in LOSO.engine_figures() if f.file == "trtllm"}
    assert trt["scheduling_overhead_fraction"].measured
    stated_fields = (
        "kv_budget_rule",
        "kv_memory_fraction",
        "default_chunk_tokens",
        "kv_reservation",
    )
    for stated in stated_fields:
        assert not trt[stated].measured, stated


def test_the_overview_gave_a_stated_fraction_only() -> None:
    """TensorRT-LLM's KV memory fraction cites the overview beside the LLM API reference (both
    0.9), and its sliding-window KV rule cites the overview's GPT-OSS recipe (no
    max_attention_window) beside the engine's long-sequence docs: stated configuration, kept
    out of source; no measured figure names a serving publication, so no row moves."""
    own = LOSO.own_figures("trtllm-perf-overview", "h200", "trtllm")
    assert own.removed == []
    assert sorted((f.file, f.path, f.value) for f in own.stated) == [
        ("trtllm", "kv_memory_fraction", 0.9),
        ("trtllm", "sliding_window_kv", "full"),
    ]
    assert LOSO.own_figures("nim-llm-benchmarking", "h100-sxm", "trtllm").stated == []


def test_a_measured_engine_figure_without_another_source_refuses() -> None:
    fig = Figure("engine", "vllm", "scheduling_overhead_fraction", 0.1, "x", True)
    assert LOSO.engine_out_of("vllm", [fig]) is None
    assert LOSO.engine_out_of("vllm", []).scheduling_overhead_fraction == 0.1


def test_a_fallback_stands_in_for_a_removed_engine_figure(monkeypatch: pytest.MonkeyPatch) -> None:
    fig = Figure("engine", "vllm", "scheduling_overhead_fraction", 0.1, "x", True)
    other = {"engine": "vllm", "field": "scheduling_overhead_fraction", "value": 0.05}
    monkeypatch.setattr(LOSO, "_fallbacks", lambda: [other])
    assert LOSO.engine_out_of("vllm", [fig]).scheduling_overhead_fraction == 0.05


def test_a_removed_chip_rate_leaves_the_chip() -> None:
    # B200's measured NVFP4 GEMM rate (3370 TFLOP/s) taken out: the chip has no fp4 rate left
    fp4 = Figure("chip", "b200.toml", "achievable.matmul_flops_per_s.fp4", 3370e12, "x", True)
    shipped = LOSO.chip_out_of("b200", [])
    out = LOSO.chip_out_of("b200", [fp4])
    assert shipped.achievable.matmul_flops_per_s["fp4"] == 3370e12
    assert "fp4" not in out.achievable.matmul_flops_per_s
    assert out.achievable.matmul_flops_per_s["fp8"] == shipped.achievable.matmul_flops_per_s["fp8"]


def test_a_row_whose_source_gave_nothing_keeps_its_error() -> None:
    row = next(r for r in LOSO.load_rows() if LOSO.row_source(r) == "nim-llm-benchmarking")
    o = bench_serve.Outcome(row["name"], row["set"], row["metric"], 2.0, 2.5, 0.25)
    o.source_id = "nim-llm-benchmarking"
    assert bench_serve._loso_error(row, o, {}) == (0.25, False)


def test_summary_sets_in_sample_beside_out_of_source() -> None:
    def outcome(err: float, loso: float | None, moe: bool) -> bench_serve.Outcome:
        o = bench_serve.Outcome("r", "s", "tpot_s", 1.0, 1 + err, err, engine="vllm", hw="h200")
        o.load, o.moe, o.source_id, o.loso_error = "max", moe, "src", loso
        o.moved = loso is not None and loso != err
        return o

    rows = [outcome(0.1, 0.1, False), outcome(-0.3, 0.2, True), outcome(0.05, None, True)]
    s = bench_serve.summarize(rows)
    assert list(s)[:6] == ["all", "metric tpot_s", "engine vllm", "chip h200", "dense", "MoE"]
    assert s["all"]["median_abs_error"] == pytest.approx(0.1)  # of 0.1, 0.3, 0.05
    assert s["all"]["loso_median_abs_error"] == pytest.approx(0.15)  # of 0.1, 0.2: one refused
    assert (s["all"]["moved"], s["all"]["loso_scored"], s["all"]["loso_within_15pct"]) == (1, 2, 1)
    assert s["MoE"]["loso_worst_abs_error"] == pytest.approx(0.2)
