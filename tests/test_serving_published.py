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
        assert r["engine"] in ("trtllm", "vllm", "sglang", "tgi", "lmdeploy"), r["name"]
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


def test_lmdeploy_rows_are_its_a100_table_as_closed_loops() -> None:
    """LMDeploy docs/en/benchmark/a100_fp16.md (v0.2.0 TurboMind, one A100-80G, FP16 llama2-7b,
    Static Inference Benchmark): throughput(out tok/s) 98.92 at batch 1, 128 in / 2,048 out;
    1010.62 at batch 16, 128 / 2,048; 601.63 at batch 16, 2,048 / 2,048; FTL(ave) 0.139 s at
    batch 1, 2,048 / 128. profile_generation.py runs `batch` threads each sending its requests
    one after another: a closed loop of that concurrency."""
    import re

    table = {
        (1, 128, 2048, "throughput_tokens_per_s"): 98.92,
        (16, 128, 2048, "throughput_tokens_per_s"): 1010.62,
        (16, 2048, 2048, "throughput_tokens_per_s"): 601.63,
        (1, 2048, 128, "ttft_s"): 0.139,
    }
    rows = [r for r in _rows() if r["engine"] == "lmdeploy"]
    got = {
        (
            int(r["concurrency"]),
            int(r["input_tokens"]),
            int(r["output_tokens"]),
            r["metric"],
        ): float(r["measured"])
        for r in rows
    }
    assert got == table
    for r in rows:
        assert "a100_fp16.md" in r["source"] and "v0.2.0" in r["source"]
        assert (r["hw"], r["dtype"], r["devices"], r["tp"]) == ("a100-80gb", "fp16", "1", "1")
        assert r["load"] == "closed"
        assert int(re.search(r"batch (\d+),", r["how"]).group(1)) == int(r["concurrency"])
        # TurboMind v0.2.0 defaults: max_batch_size 128, a prompt prefilled in one iteration
        assert (r["max_batch"], r["chunk_tokens"]) == ("128", "0")


def test_llama_2_7b_file_is_the_published_model() -> None:
    """The LMDeploy rows' model file: Llama 2 7B's 6,738,415,616 parameters (the Hub's count
    for meta-llama/Llama-2-7b-hf), by hand: untied embedding and head 2 x 32,000 x 4,096, per
    layer four 4,096^2 attention projections (32 KV heads: no GQA), three 4,096 x 11,008 SwiGLU
    matrices and two norms, and the final norm; its KV cache per token
    2 x 32 layers x 4,096 x 2 B = 512 KiB, so 16 sequences of 4,096 tokens hold 32 GiB."""
    from shardline.models import load_model
    from shardline.workload.modelspec import params_total

    spec = load_model(str(ROOT / "benchmarks" / "data" / "models" / "llama-2-7b.toml"))
    d, ff, layers, vocab = 4096, 11008, 32, 32_000
    by_hand = 2 * vocab * d + layers * (4 * d * d + 3 * d * ff + 2 * d) + d
    assert by_hand == 6_738_415_616 == params_total(spec)
    assert (spec.kv_heads, spec.head_dim) == (32, 128)
    assert 16 * 4096 * (2 * layers * spec.kv_heads * spec.head_dim * 2) == 32 * 2**30


def test_trtllm_bench_rows_take_the_tools_own_limits() -> None:
    """The TensorRT-LLM overviews run `trtllm-bench throughput` with no --max_batch_size or
    --max_num_tokens, so their rows name the checkpoint's quantization for trtllm-bench's own
    choice (serving/trtllm_bench.py) and leave max_batch and chunk_tokens empty; gpt-oss's MXFP4
    experts are W4A8_MXFP4_MXFP8 on Blackwell, DeepSeek-R1's own FP8 weights are block-scaled."""
    named = [r for r in _rows() if r["trtllm_bench_quant"]]
    assert {r["trtllm_bench_quant"] for r in named} == {
        "NVFP4",
        "FP8",
        "FP8_BLOCK_SCALES",
        "W4A8_MXFP4_MXFP8",
    }
    for r in named:
        assert "perf-overview.md" in r["source"], r["name"]
        assert r["max_batch"] == r["chunk_tokens"] == "", r["name"]
        assert ("gpt-oss" in r["model"]) == (r["trtllm_bench_quant"] == "W4A8_MXFP4_MXFP8")
    overview = [r for r in _rows() if "perf-overview.md" in r["source"]]
    assert len(named) == len(overview) == 22 + 60
