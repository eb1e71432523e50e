"""`validate --trace FILE`: a profile's kernels grouped into the plan's categories, each group's
measured time the trace's own kernel durations summed (derived here by hand from the shipped
traces), held against the plan of the model and layout given."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from shardline.io.profile_trace import category_of, read_trace
from tests.cli_run import run_cli

TRACES = Path(__file__).resolve().parent.parent / "examples" / "traces"
KINETO = TRACES / "kineto_small.json"
NSYS = TRACES / "nsys_gpu_trace.csv"


def _validate(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, "validate", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


def _by_category(payload: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {row["category"]: row for row in payload["categories"]}


def test_kineto_grouping_by_hand(capsys: pytest.CaptureFixture[str]) -> None:
    got = _by_category(_validate(capsys, "--trace", str(KINETO)))
    us = 1e-6
    # kineto_small.json's kernels (ts, dur in us): sm90_xmma_gemm 1000+30 and nvjet 1030+20
    # (GEMMs); flash_fwd 1050+12 (attention); silu 1062+4 and rms_norm 1070+3 (between the
    # matmuls); ncclDevKernel_ReduceScatter 1040+25 (collective); multi_tensor_apply Adam 1080+6
    # (optimizer); Memcpy HtoD 1090+2 (copies). The cudaLaunchKernel and cpu_op events are
    # host-side and not counted.
    expected = {
        "gemm": (30 + 20, 2),
        "attention": (12, 1),
        "other_ops": (4 + 3, 2),
        "collective": (25, 1),
        "optimizer": (6, 1),
        "memcpy": (2, 1),
    }
    for category, (measured_us, kernels) in expected.items():
        assert got[category]["measured_s"] == pytest.approx(measured_us * us, rel=1e-12)
        assert got[category]["kernels"] == kernels
        assert got[category]["predicted_s"] is None  # no model given
    # idle: the window 1000..1092 (92 us) less the busy union: 1000..1066 (66), 1070..1073 (3),
    # 1080..1086 (6), 1090..1092 (2) = 77 us busy, so 15 us idle
    assert got["idle"]["measured_s"] == pytest.approx(15 * us, rel=1e-9)


def test_kineto_gemm_shapes_and_steps(capsys: pytest.CaptureFixture[str]) -> None:
    payload = _validate(capsys, "--trace", str(KINETO))
    assert payload["steps"] == 1  # one ProfilerStep#7 annotation
    assert payload["measured_step_s"] == pytest.approx(92e-6, rel=1e-9)
    top = payload["largest_kernels"][0]
    # the largest kernel is the 30 us GEMM launched by aten::mm with External id 11
    assert top["category"] == "gemm" and top["shape"] == "[8192,4096] x [4096,14336]"


def test_nsys_csv_grouping_by_hand(capsys: pytest.CaptureFixture[str]) -> None:
    got = _by_category(_validate(capsys, "--trace", str(NSYS)))
    ns = 1e-9
    # nsys_gpu_trace.csv rows (Start, Duration in ns): GEMMs 30000 + 20000; cuDNN sdpa 12000;
    # NCCL AllGather 25000; TE rmsnorm 4000; a host-to-device copy 2000
    assert got["gemm"]["measured_s"] == pytest.approx(50000 * ns, rel=1e-12)
    assert got["attention"]["measured_s"] == pytest.approx(12000 * ns, rel=1e-12)
    assert got["collective"]["measured_s"] == pytest.approx(25000 * ns, rel=1e-12)
    assert got["other_ops"]["measured_s"] == pytest.approx(4000 * ns, rel=1e-12)
    assert got["memcpy"]["measured_s"] == pytest.approx(2000 * ns, rel=1e-12)
    # window 1000000..1072000 ns = 72 us; busy 1000000..1066000 (66 us) + 1070000..1072000 (2 us)
    assert got["idle"]["measured_s"] == pytest.approx(4000 * ns, rel=1e-9)


def test_nsys_sqlite(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "run.sqlite"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE StringIds (id INTEGER, value TEXT)")
    con.execute(
        "CREATE TABLE CUPTI_ACTIVITY_KIND_KERNEL "
        "(start INTEGER, end INTEGER, deviceId INTEGER, streamId INTEGER, demangledName INTEGER)"
    )
    con.executemany(
        "INSERT INTO StringIds VALUES (?, ?)",
        [(1, "ampere_bf16_s16816gemm_bf16_128x128_ldg8_f2f_tn"), (2, "ncclKernel_AllReduce_RING")],
    )
    con.executemany(
        "INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL VALUES (?, ?, ?, ?, ?)",
        [(0, 7000, 0, 7, 1), (7000, 10000, 0, 7, 1), (2000, 6000, 0, 20, 2)],
    )
    con.commit()
    con.close()
    got = _by_category(_validate(capsys, "--trace", str(db)))
    assert got["gemm"]["measured_s"] == pytest.approx((7000 + 3000) * 1e-9, rel=1e-12)
    assert got["gemm"]["kernels"] == 2
    assert got["collective"]["measured_s"] == pytest.approx(4000 * 1e-9, rel=1e-12)
    assert got["idle"]["measured_s"] == pytest.approx(0.0, abs=1e-15)


def test_kern_sum_has_no_idle(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "kern_sum.csv"
    csv.write_text(
        "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"
        '60.0,6000,3,2000,2000,2000,2000,0,"sm90_xmma_gemm_bf16bf16_bf16f32"\n'
        '40.0,4000,2,2000,2000,2000,2000,0,"flash_bwd_dq_dk_dv_loop_kernel"\n'
    )
    payload = _validate(capsys, "--trace", str(csv))
    got = _by_category(payload)
    assert (got["gemm"]["measured_s"], got["gemm"]["kernels"]) == (pytest.approx(6e-6), 3)
    assert (got["attention"]["measured_s"], got["attention"]["kernels"]) == (pytest.approx(4e-6), 2)
    assert got["idle"]["measured_s"] is None and payload["measured_step_s"] is None


def test_against_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--model", "llama-3.2-1b", "--hw", "h100-sxm", "--devices", "8", "--fsdp", "8"]
    argv += ["--batch", "8", "--seq-len", "2048", "--microbatches", "1"]
    payload = _validate(capsys, "--trace", str(KINETO), *argv)
    code, out, err = run_cli(capsys, "plan", *argv, "--json")
    plan = json.loads(out)["plans"][0]
    got = _by_category(payload)
    b = plan["predicted_breakdown_s"]
    assert payload["plan"] == plan["name"] == "fsdp8"
    assert payload["predicted_step_s"] == plan["predicted_s"]  # one step in the trace
    assert got["gemm"]["predicted_s"] == b["gemm_s"]
    assert got["attention"]["predicted_s"] == b["attention_s"]
    assert got["other_ops"]["predicted_s"] == b["other_ops_s"]
    assert got["collective"]["predicted_s"] == plan["t_network_s"]
    assert got["idle"]["predicted_s"] == b["bubble_s"]


@pytest.mark.parametrize(
    ("name", "category"),
    [
        ("sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x256x64", "gemm"),
        ("nvjet_tst_256x128_64x4_1x2_h_bz_coopA_NTN", "gemm"),
        ("cudnn_generated_fort_native_sdpa_sm90_knob_7", "attention"),
        ("fmha_cutlassF_bf16_aligned_64x64_rf_sm80", "attention"),
        ("ncclDevKernel_AllGather_RING_LL", "collective"),
        ("all-reduce.3", "collective"),
        ("void at::native::vectorized_elementwise_kernel<4, silu>", "other_ops"),
    ],
)
def test_category_of(name: str, category: str) -> None:
    assert category_of(name) == category


def test_not_a_profile(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "notes.csv"
    path.write_text("a,b\n1,2\n")
    code, out, err = run_cli(capsys, "validate", "--trace", str(path))
    assert code == 2 and out == "" and err.startswith("error: ") and err.count("\n") == 1
    assert read_trace(str(KINETO)).format == "kineto"


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        (
            "bad_ts.json",
            '{"traceEvents":[{"ph":"X","cat":"kernel","name":"g","ts":"a","dur":1}]}',
            "ts of",
        ),
        (
            "no_kernels.json",
            '{"traceEvents":[{"ph":"X","cat":"cpu_op","name":"aten::mm"}]}',
            "no GPU",
        ),
        ("nan.csv", "Start (ns),Duration (ns),Name\n1,nan,gemm\n", "finite"),
        ("empty.csv", "Start (ns),Duration (ns),Name\n", "no kernel rows"),
    ],
)
def test_bad_profiles_are_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, text: str, says: str
) -> None:
    path = tmp_path / name
    path.write_text(text)
    code, out, err = run_cli(capsys, "validate", "--trace", str(path))
    assert code == 2 and out == "" and says in err and err.count("\n") == 1


def test_html_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "trace.html"
    payload = _validate(capsys, "--trace", str(KINETO), "--html", str(page))
    text = page.read_text()
    assert payload["html"] == str(page)
    # one bar pair per category, the largest kernel in the table, nothing fetched
    assert text.count("<rect ") == 2 * len(payload["categories"])
    assert "sm90_xmma_gemm" in text and "<script" not in text and "http" not in text


def test_against_a_framework_configuration(capsys: pytest.CaptureFixture[str]) -> None:
    config = str(
        Path(__file__).resolve().parent.parent / "examples/frameworks/torchtitan_llama3_8b.toml"
    )
    common = ["--hw", "h100-sxm", "--devices", "8"]
    payload = _validate(capsys, "--trace", str(KINETO), "--from", config, *common)
    code, out, err = run_cli(capsys, "plan", "--from", config, *common, "--json")
    plan = json.loads(out)["plans"][0]
    assert payload["predicted_step_s"] == plan["predicted_s"]
    # torchtitan's selective 'op' recompute: its time is a row of its own, never measured
    recompute = _by_category(payload)["recompute"]
    assert recompute["predicted_s"] == plan["predicted_breakdown_s"]["recompute_s"] > 0
    assert recompute["measured_s"] is None


def test_xla_op_stats(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = tmp_path / "op_stats.csv"
    csv.write_text(
        "Rank,Host/device,Type,Operation,#Occurrences,Total time (us),Total self-time (us)\n"
        "1,Device,dot,dot.12,40,900.0,800.0\n"
        "2,Device,all-reduce,all-reduce.3,8,300.0,300.0\n"
        "3,Device,fusion,fusion.7,120,250.0,200.0\n"
        "4,Host,InfeedDequeue,infeed,1,50.0,50.0\n"
    )
    got = _by_category(_validate(capsys, "--trace", str(csv)))
    # device rows only, their self-times: dot 800 us (GEMM), all-reduce 300 us, fusion 200 us
    assert got["gemm"]["measured_s"] == pytest.approx(800e-6) and got["gemm"]["kernels"] == 40
    assert got["collective"]["measured_s"] == pytest.approx(300e-6)
    assert got["other_ops"]["measured_s"] == pytest.approx(200e-6)
