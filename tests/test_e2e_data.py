"""benchmarks/data/e2e_runs.toml: published whole-model runs and their workload files.

Every run names its source, a workload file that parses and carries the template's fields, and a
parallel layout that is consistent (degrees multiply to the devices, microbatches times the data
split times the microbatch size is the batch). The Korthikanti et al. 2022 runs keep the values
printed in the paper, and the converted times follow from the published numbers by the formulas
written out here.
"""

from __future__ import annotations

import importlib.util
import math
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data" / "e2e_runs.toml"
CATALOG = ROOT / "src" / "shardline" / "hardware" / "catalog"
RUNS: list[dict[str, Any]] = tomllib.loads(DATA.read_text(encoding="utf-8"))["run"]
BY_NAME = {run["name"]: run for run in RUNS}

REQUIRED = {
    "name": str, "set": str, "workload": str, "hw": str, "devices": int, "tp": int, "pp": int,
    "dp": int, "fsdp": int, "microbatches": int, "microbatch_size": int, "interleave": int,
    "recompute": str, "sequence_parallel": bool, "phase": str, "batch": int, "seq_len": int,
    "measured_s": float, "metric": str, "how": str, "source": str,
}  # fmt: skip
TEMPLATE_FIELDS = (
    "d_model", "d_ff", "heads", "kv_heads", "head_dim", "seq_len", "batch", "layers", "gated",
    "dtype", "vocab", "attention", "rotary",
)  # fmt: skip
METRIC_OF_PHASE = {"training": "step_time", "prefill": "ttft", "decode": "tpot"}


def _transformer(run: dict[str, Any]) -> dict[str, Any]:
    data = tomllib.loads((ROOT / run["workload"]).read_text(encoding="utf-8"))
    return data["transformer"]


FRAMEWORKS = {
    "megatron", "torchtitan", "maxtext", "llm-foundry", "deepspeed", "vllm", "sglang",
    "tensorrt-llm", "nim", "t5x",
}  # fmt: skip


def test_every_run_names_its_source_and_framework() -> None:
    for run in RUNS:
        assert isinstance(run.get("source_id"), str) and run["source_id"], run["name"]
        assert run.get("framework") in FRAMEWORKS, run["name"]
        if "power_cap_w" in run:
            assert isinstance(run["power_cap_w"], int) and 100 <= run["power_cap_w"] <= 1500
        if "recompute_note" in run:
            assert run.get("recompute_published"), run["name"]
    # one source is one framework here (a paper's or a repository's own table)
    frameworks_of: dict[str, set[str]] = {}
    for run in RUNS:
        frameworks_of.setdefault(run["source_id"], set()).add(run["framework"])
    assert all(len(f) == 1 for f in frameworks_of.values()), frameworks_of


def test_training_runs_span_sources_frameworks_and_chips() -> None:
    # leave-one-source-out needs enough independent sources, and the coverage the brief asks for
    training = [run for run in RUNS if run["phase"] == "training"]
    assert len({run["source_id"] for run in training}) >= 6
    assert len({run["framework"] for run in training}) >= 3
    assert any(run["hw"].startswith("tpu-") for run in training)
    assert any(not run["hw"].startswith("tpu-") for run in training)
    assert any("moe" in _transformer(run) for run in training if run["hw"].startswith("tpu-"))
    dtypes = {_transformer(run)["dtype"] for run in training}
    assert {"bf16", "fp8"} <= dtypes


def test_names_are_unique_and_sets_known() -> None:
    assert len(BY_NAME) == len(RUNS)
    assert {run["set"] for run in RUNS} == {"megatron", "other", "moe"}
    assert sum(run["set"] == "megatron" for run in RUNS) == 8  # 4 models x 2 settings


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r["name"])
def test_run_fields(run: dict[str, Any]) -> None:
    for key, kind in REQUIRED.items():
        assert key in run, f"{run['name']}: no {key}"
        assert isinstance(run[key], kind), f"{run['name']}: {key} is not {kind.__name__}"
    assert run["source"].strip() and run["how"].strip()
    from shardline.basics.options import Execution

    Execution(recompute=run["recompute"])  # a recompute policy shardline runs (or InputError)
    assert METRIC_OF_PHASE[run["phase"]] == run["metric"]
    assert run["measured_s"] > 0
    assert (CATALOG / f"{run['hw']}.toml").is_file(), f"{run['hw']} is not a catalog chip"
    if "measured_mfu" in run:
        assert 0 < run["measured_mfu"] < 1


@pytest.mark.parametrize("run", RUNS, ids=lambda r: r["name"])
def test_layout_is_consistent(run: dict[str, Any]) -> None:
    ep = run.get("ep", 1)  # expert parallelism (docs/moe.md): its ranks hold different sequences
    if "etp" in run:  # parallel folding: dp is the attention's, the experts' group lies across it
        assert run["tp"] * run["pp"] * run["dp"] * run["fsdp"] == run["devices"]
        assert run["devices"] % (run["pp"] * run["etp"] * ep) == 0  # edp whole
        ep = 1
    assert run["tp"] * run["pp"] * run["dp"] * run["fsdp"] * ep == run["devices"]
    per_step = run["microbatches"] * run["dp"] * run["fsdp"] * ep * run["microbatch_size"]
    assert per_step == run["batch"]
    layers = _transformer(run)["layers"]
    # stages may be uneven (Qwen3-235B's 94 blocks over 8 stages as published; Megatron's
    # pipeline_model_parallel_layout hands DeepSeek-V3's 61 blocks to 16 chunks), with at least
    # one block per model chunk
    assert layers >= run["pp"] * run["interleave"], "stages must hold blocks"
    if run["interleave"] > 1:  # Megatron's interleaved schedule runs microbatches in groups of pp
        assert run["microbatches"] % run["pp"] == 0
    if run["phase"] != "training":
        assert run["pp"] == 1 and run["microbatches"] == 1


@pytest.mark.parametrize("path", sorted({run["workload"] for run in RUNS}))
def test_workload_files(path: str) -> None:
    data = tomllib.loads((ROOT / path).read_text(encoding="utf-8"))
    section = data["transformer"]
    missing = [key for key in TEMPLATE_FIELDS if key not in section]
    assert not missing, f"{path}: missing {missing}"
    # heads x head_dim is d_model for most models; Qwen3's configs give head_dim 128 beside it
    # (Qwen3-30B-A3B: 32 x 128 = 4096 against d_model 2048), and MaxText's synthetic models keep
    # base.yml's head_dim 256 while global_parameter_scale doubles heads and d_model apart
    # (scale 128: 64 x 256 = 16384 against d_model 10240), and PaLM 540B has 48 x 256 = 12288
    # against d_model 18432 (Chowdhery et al. 2022, Table 1)
    apart = "moe" in section or Path(path).name.startswith(("maxtext-", "palm-"))
    assert section["heads"] * section["head_dim"] == section["d_model"] or apart
    assert section["heads"] % section["kv_heads"] == 0
    assert section["attention"] in ("standard", "flash")
    text = (ROOT / path).read_text(encoding="utf-8")
    assert text.startswith("#"), f"{path}: needs a comment header naming its source"


# Korthikanti et al. 2022 (arXiv 2205.05198), Table 5: seconds per iteration with full recompute
# and with sequence parallelism + selective recompute; configurations as in Calculon's
# validation/seqsel/tab5 (GPUs, TP, PP, global batch, microbatch, interleave).
TABLE5 = {
    "22b": (8, 8, 1, 4, 4, 1, 1.42, 1.10),
    "175b": (64, 8, 8, 64, 1, 3, 18.13, 13.75),
    "530b": (280, 8, 35, 280, 1, 3, 49.05, 37.83),
    "1t": (512, 8, 64, 512, 1, 1, 94.42, 71.49),
}
SHAPES = {"22b": (6144, 64, 48), "175b": (12288, 96, 96), "530b": (20480, 128, 105)}
SHAPES["1t"] = (25600, 160, 128)


@pytest.mark.parametrize("size", sorted(TABLE5))
def test_megatron_rows_match_table5(size: str) -> None:
    gpus, tp, pp, batch, mbs, interleave, full_s, seqsel_s = TABLE5[size]
    full, seqsel = BY_NAME[f"megatron-gpt-{size}-full"], BY_NAME[f"megatron-gpt-{size}-seqsel"]
    for run in (full, seqsel):
        got = (run["devices"], run["tp"], run["pp"], run["batch"], run["microbatch_size"])
        assert got == (gpus, tp, pp, batch, mbs)
        assert run["interleave"] == interleave and run["hw"] == "a100-80gb"
        d_model, heads, layers = SHAPES[size]
        shape = _transformer(run)
        assert (shape["d_model"], shape["heads"], shape["layers"]) == (d_model, heads, layers)
        assert shape["d_ff"] == 4 * d_model and shape["vocab"] == 51200
        assert shape["gated"] is False and shape["attention"] == "standard"
    assert (full["measured_s"], full["recompute"], full["sequence_parallel"]) == (
        full_s,
        "full",
        False,
    )
    assert (seqsel["measured_s"], seqsel["recompute"], seqsel["sequence_parallel"]) == (
        seqsel_s,
        "selective",
        True,
    )


def test_converted_times_follow_the_published_numbers() -> None:
    # llm-foundry H100 table, 70b at 2048 on 64 GPUs: 66523 tokens/s for 2048 sequences of 2048.
    assert math.isclose(
        BY_NAME["mpt-70b-h100-64gpu"]["measured_s"], 2048 * 2048 / 66523, rel_tol=1e-5
    )
    # Megatron-Bridge DGX-H100 LLAMA3_70B: 1602 tokens/s/GPU on 64 GPUs, GBS 128 of 8192 tokens.
    run = BY_NAME["llama3-70b-h100-tp4pp8-fp8"]
    assert math.isclose(run["measured_s"], 128 * 8192 / (1602 * 64), rel_tol=1e-5)
    # TensorRT-LLM H100 FP8 LLaMA 70B: 1486 output tokens/s/GPU at batch 480 on TP 4, so one
    # decode step of the batch takes 480 / (1486 * 4) s; the mean context is 128 + 2048 / 2.
    run = BY_NAME["llama2-70b-h100-tp4-decode-b480-fp8"]
    assert math.isclose(run["measured_s"], 480 / (1486 * 4), rel_tol=1e-5)
    assert run["seq_len"] == 128 + 2048 // 2


def test_torchtitan_and_maxtext_times_follow_the_published_numbers() -> None:
    # torchtitan Table 4 (Dec 2024): 70B on 256 H100, local batch 16 x FSDP 32 = 512 sequences
    # of 8192 at 829 tokens/s per GPU.
    run = BY_NAME["tt-llama3.1-70b-h100-fsdp32-tp8-compile-fp8"]
    assert (run["batch"], run["fsdp"] * run["tp"], run["power_cap_w"]) == (512, 256, 500)
    assert math.isclose(run["measured_s"], 512 * 8192 / (829 * 256), rel_tol=1e-5)
    # Trainy on 4 H200 nodes: 10938 tokens/s per GPU, 32 GPUs of local batch 2.
    run = BY_NAME["trainy-llama3.1-8b-h200-fsdp32-compile-fp8"]
    assert math.isclose(run["measured_s"], 64 * 8192 / (10938 * 32), rel_tol=1e-5)
    # MaxText v5p 32B on v5p-128 (64 chips) at 328 TFLOP/s per chip: per-device TFLOPs by MaxText's
    # count (train.py at 76bd53b0) = 6 N S b + 6 heads layers head_dim S^2 b, N = 32 layers x
    # (4 x 10240 x 32 x 256 + 2 x 10240 x 32768 + 2 x 10240) + 32768 x 10240 + 10240.
    n = 32 * (4 * 10240 * 32 * 256 + 2 * 10240 * 32768 + 2 * 10240) + 32768 * 10240 + 10240
    tflops = (6 * n * 2048 * 8 + 6 * 32 * 32 * 256 * 2048**2 * 8) / 1e12
    run = BY_NAME["maxtext-32b-v5p-128"]
    assert (run["devices"], run["tp"], run["fsdp"], run["batch"]) == (64, 4, 16, 8 * 64)
    assert math.isclose(run["measured_s"], tflops / 328, rel_tol=1e-4)
    shape = _transformer(run)
    dims = (shape["d_model"], shape["d_ff"], shape["heads"], shape["layers"])
    assert dims == (10240, 32768, 32, 32)


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_e2e", ROOT / "benchmarks" / "bench_e2e.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_e2e", module)  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def test_doc_section_stays_between_its_markers(tmp_path: Path) -> None:
    bench = _bench()
    doc = tmp_path / "validation.md"
    bench.write_doc(doc, f"{bench.START}\n## End-to-end runs\nfirst\n{bench.END}\n")
    assert doc.read_text() == f"{bench.START}\n## End-to-end runs\nfirst\n{bench.END}\n"
    other = "# Validation\n\n<!-- gemm:start -->\nGEMM\n<!-- gemm:end -->\n"
    doc.write_text(other + "\n" + doc.read_text() + "tail\n")
    bench.write_doc(doc, f"{bench.START}\nsecond\n{bench.END}\n")
    assert doc.read_text() == other + f"\n{bench.START}\nsecond\n{bench.END}\ntail\n"


def test_one_run_is_planned() -> None:
    outcome = _bench().evaluate(BY_NAME["megatron-gpt-22b-full"])
    assert outcome.predicted_s is not None and outcome.predicted_s > 0, outcome.notes
    assert math.isclose(outcome.error, outcome.predicted_s / 1.42 - 1)


def test_every_source_is_named_for_leave_one_source_out() -> None:
    """benchmarks/e2e_loso.py finds a source's own figures by the strings e2e_sources.toml gives
    for it: a source without them could be scored against its own figures unnoticed."""
    sources = tomllib.loads((ROOT / "benchmarks/data/e2e_sources.toml").read_text())["source"]
    named = {s["id"] for s in sources if s["matches"]}
    assert {run["source_id"] for run in RUNS} <= named


def test_a_run_that_ran_is_never_said_not_to_fit_by_more_than_5_percent() -> None:
    """Every published training run ran on its chips: its plan's memory per device may not pass
    the chip's usable capacity by more than 5% (issue 24). The memory mechanisms the runs state
    (host offload, the optimizer, sequence-parallel activations) carry their sources."""
    bench = _bench()
    over = {}
    for run in RUNS:
        if run["metric"] != "step_time":
            continue
        workload = bench.load_run_workload(run, [])
        chosen = bench.plan_run(run, workload, [])
        capacity = bench.run_chip(run).usable_capacity_bytes
        share = chosen.memory_per_device_bytes / capacity - 1
        if share > 0.05:
            over[run["name"]] = round(share, 3)
    assert over == {}


def test_stated_memory_mechanisms_name_their_source() -> None:
    for run in RUNS:
        for key in ("offload", "optimizer"):
            if key in run:
                assert run.get(f"{key}_source"), (run["name"], key)
