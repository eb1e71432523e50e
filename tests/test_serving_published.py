"""benchmarks/data/serving_published.csv: every row has its source and a load and metric the
benchmark knows; the TensorRT-LLM v0.5.0 rows are static batches read as group totals."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data" / "serving_published.csv"


def _rows() -> list[dict[str, str]]:
    with DATA.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def test_every_row_is_sourced_and_known() -> None:
    rows = _rows()
    assert len({r["name"] for r in rows}) == len(rows)
    for r in rows:
        assert r["source"].strip() and r["how"].strip(), r["name"]
        assert r["load"] in ("max", "closed", "static"), r["name"]
        assert r["metric"] in ("throughput_tokens_per_s", "ttft_s", "tpot_s", "latency_s")
        assert r["engine"] in ("trtllm", "vllm", "sglang"), r["name"]
        assert float(r["measured"]) > 0
        if r["metric"] == "latency_s":
            assert r["load"] == "static", r["name"]


def test_v050_rows_are_static_group_totals() -> None:
    old = [r for r in _rows() if r["set"] == "trtllm-static-batch"]
    assert [int(r["measured"]) for r in old] == [3317, 2616, 843, 1583]
    for r in old:
        assert r["load"] == "static" and r["devices"] == r["tp"] == "4"
        assert "Throughput (out tok/s)" in r["how"] and "release/0.5.0" in r["source"]


def test_per_gpu_rows_are_totals_over_their_gpus() -> None:
    """TensorRT-LLM's newer overview publishes output tokens/s per GPU: each row's measured
    figure is that times the GPUs (its `how` states both), and a DEPn layout is attention data
    parallelism with expert parallelism over all n GPUs of the replica."""
    import re

    new = [r for r in _rows() if r["name"].startswith("trtllm12-")]
    assert len(new) == 22
    for r in new:
        per_gpu = float(re.search(r"per GPU ([\d,]+) tokens", r["how"]).group(1).replace(",", ""))
        assert float(r["measured"]) == per_gpu * int(r["devices"])
        if "-dep" in r["name"]:
            assert r["ep"] == r["attention_dp"] == r["tp"] == r["devices"]
        assert r["kv_dtype"] == "fp8" and r["weight_dtype"] == r["dtype"]


def test_trtllm_overview_rows_are_runs_of_the_overviews_request_counts() -> None:
    """trtllm-bench queues a fixed number of requests at once; TensorRT-LLM's perf overview
    (developer-guide/perf-overview.md, 'Preparing a Dataset') lists 3000 at 1024/1024 (taken
    for 1000/1000 too), 1500 at 8192/1024 and at 1024/8192. Rows without a count are steady
    states."""
    expected = {("1000", "1000"): "3000", ("1024", "8192"): "1500", ("8192", "1024"): "1500"}
    for r in _rows():
        if r["name"].startswith("trtllm12-"):
            assert r["load"] == "max" and r["metric"] == "throughput_tokens_per_s"
            assert r["requests"] == expected[(r["input_tokens"], r["output_tokens"])], r["name"]
        elif not r["name"].startswith("sglang-"):
            assert r["requests"] == "", r["name"]


def test_sglang_gpt_oss_row_is_its_closed_loop_as_a_capped_burst() -> None:
    """SGLang pull request 9359: 12,800 prompts of 1,024 / 2,048 tokens, at most 2,560 in flight
    against --max-running-requests 2560, 26,214,400 output tokens in 391.60 s; the client's cap
    is the server's, so the run is a burst of 12,800 with a batch limit of 2,560; SGLang's
    default chunk on a B200 (16,384) split over DP 4."""
    (r,) = [r for r in _rows() if r["engine"] == "sglang"]
    # the duration is printed to 10 ms: 26,214,400 / 391.60 = 66,941.8, within 1e-5 of 66,941.4
    assert float(r["measured"]) == pytest.approx(26_214_400 / 391.60, rel=1e-5)
    assert 12_800 * 2_048 == 26_214_400
    assert (r["requests"], r["max_batch"], r["chunk_tokens"]) == ("12800", "2560", "16384")
    assert r["ep"] == r["attention_dp"] == r["tp"] == r["devices"] == "4"
    assert r["kv_dtype"] == "bf16" and "pull request #9359" in r["source"]
