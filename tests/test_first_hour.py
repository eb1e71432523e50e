"""The first hour of a new user (issue 14, items 6-9): a fast default test run with the slow
measurements marked and run by CI, stack and plan results in notebooks, `validate` without
matplotlib, and the machine's noise measured and reported beside every calibration claim.

Nothing here measures the machine: the measuring worker is replaced by synthetic timings from a
stated model, so that every number checked is derived by hand."""

from __future__ import annotations

import itertools
import json
import re
import sys
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest

import shardline
from shardline.basics.dtypes import dtype_bytes
from shardline.calibrate.timing import (
    MIN_ROUNDS,
    NOISE_LIMIT,
    calibration_noise,
    noise_summary,
    relative_spread,
    time_interleaved,
)
from shardline.calibrate.validate import validation_noise
from shardline.calibrate.worker import GROUP_BYTES, groups
from shardline.cli.main import main
from shardline.errors import InputError
from shardline.report.notebook import to_html, to_pandas
from shardline.workload.workload import Workload, matmul_layer
from tests.conftest import MEASURING_TESTS, require

ROOT = Path(__file__).resolve().parent.parent

# --- item 6: the default run leaves out the slow tests; CI runs them --------------------------


def test_default_run_skips_slow_tests_and_ci_runs_them() -> None:
    options = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]
    options = options["ini_options"]
    assert '-m "not slow"' in options["addopts"]
    assert any(marker.startswith("slow:") for marker in options["markers"])
    script = (ROOT / ".ci" / "run").read_text().splitlines()
    readme_command = script.index('pip install -e ".[test]" && python -m pytest -n auto')
    assert "python -m pytest -m slow" in script[readme_command + 1 :]
    assert "set -euo pipefail" in script  # either run failing fails CI


def test_every_test_marked_slow_by_name_exists() -> None:
    """conftest.py marks measuring tests by name: a renamed test must not silently become fast."""
    sources = "\n".join(p.read_text() for p in (ROOT / "tests").glob("test_*.py"))
    for name in MEASURING_TESTS:
        assert re.search(rf"^def {name}\(", sources, re.M), f"{name} is not a test any more"


# --- item 8: stack and plan results in a notebook ---------------------------------------------


def _two_layers() -> Workload:
    return Workload("two", (matmul_layer("a", 4096, 4096, 4096),), repeat=2)


def test_stack_result_to_pandas_and_html(monkeypatch: pytest.MonkeyPatch) -> None:
    result = shardline.stack(_two_layers(), "a100-40gb")
    page = to_html(result)
    assert "-&gt;" in page and "<table" in page  # the einsum's '>' is escaped
    # one layer row: F = 2·M·K·N = 2 × 4096³ = 137,438,953,472 FLOP per instance
    assert f"{2 * 4096**3:,}" in page and "total over 2 layer instances" in page
    monkeypatch.setitem(sys.modules, "pandas", None)
    with pytest.raises(InputError, match="pip install pandas"):
        to_pandas(result)
    monkeypatch.undo()
    require("pandas", "pip install pandas")
    frame = to_pandas(result)
    assert list(frame["name"]) == ["a"] and int(frame["count"][0]) == 2
    assert int(frame["flops"][0]) == 2 * 4096**3
    # Q = s(MK + KN + MN) with s = 2 B (bf16)
    assert int(frame["bytes"][0]) == 2 * 3 * 4096**2


def test_plan_result_to_pandas_and_html() -> None:
    result = shardline.plan(_two_layers(), "a100-40gb", devices=2)
    page = to_html(result)
    assert f"recommended: {result.recommended}" in page
    assert page.count("<tr>") == 1 + len(result.plans)  # the header and one row per plan
    require("pandas", "pip install pandas")
    frame = to_pandas(result)
    assert list(frame["name"]) == [p.name for p in result.plans]
    for _, row in frame.iterrows():  # every plan uses the 2 devices
        assert row["tp"] * row["pp"] * row["dp"] * row["fsdp"] == 2
    assert list(frame["predicted_s"]) == [p.predicted_s for p in result.plans]


# --- item 9: robust timing and the machine's noise --------------------------------------------


def test_relative_spread_by_hand() -> None:
    # median 1.0; |x - 1.0| = 0, 0, 0.1, 0.1, 4.0, whose median is 0.1: 1.4826 × 0.1 / 1.0
    assert relative_spread([1.0, 1.0, 1.1, 0.9, 5.0]) == pytest.approx(0.14826)
    assert relative_spread([2.0, 2.0, 2.0]) == 0.0


def test_noise_summary_by_hand() -> None:
    records = [{"noise": x} for x in (0.01, 0.02, 0.03, 0.04, 0.10)]
    s = noise_summary(records)
    # median of the five spreads 0.03; 90th percentile: the ceil(0.9 × 5) = 5th smallest, 0.10
    assert s["repeat_spread"] == pytest.approx(0.03)
    assert s["repeat_spread_p90"] == pytest.approx(0.10)
    assert s["measurements"] == 5 and s["limit"] == NOISE_LIMIT and s["noisy"] is False
    assert noise_summary([{"noise": 0.2}] * 3)["noisy"] is True  # 20% > the 5% limit


def test_interleaved_rounds_rotate_and_stop_at_the_deadline() -> None:
    log: list[str] = []
    fns = [lambda name=name: log.append(name) for name in "abc"]
    ticks = itertools.count()
    clock = lambda: float(next(ticks))  # noqa: E731 - one tick per clock read
    timings = time_interleaved(fns, repeats=3, warmup=0, min_sample_s=0.0, clock=clock)
    # one sizing call each, then rounds that start one case further along each time
    assert "".join(log) == "abc" + "abc" + "bca" + "cab"
    assert [t.samples for t in timings] == [3, 3, 3]
    # a deadline already past: no more than MIN_ROUNDS rounds, even when 9 are asked for
    late = time_interleaved(
        fns, repeats=9, warmup=0, min_sample_s=0.0, deadline=time.monotonic() - 1.0
    )
    assert [t.samples for t in late] == [MIN_ROUNDS] * 3


def test_worker_groups_by_memory() -> None:
    # fp64 squares of side n hold 3 n² × 8 B; n = 4096: 402,653,184 B, more than half GROUP_BYTES
    big = {"backend": "numpy", "kind": "matmul", "m": 4096, "k": 4096, "n": 4096, "dtype": "fp64"}
    small = {**big, "m": 64, "k": 64, "n": 64}
    gpu = {**small, "backend": "torch", "device": "cuda"}
    assert 3 * 4096**2 * 8 <= GROUP_BYTES < 2 * 3 * 4096**2 * 8
    jobs = [small, small, big, big, gpu, small]
    assert groups(jobs) == [[0, 1, 2], [3], [4], [5]]


def _measured(m: int, seconds: float, noise: float) -> dict[str, Any]:
    return {"kind": "matmul", "role": "fit", "m": m, "k": m, "n": m, "dtype": "fp64",
            "seconds": seconds, "noise": noise}  # fmt: skip


def test_calibration_noise_warns_and_keeps_a_reference() -> None:
    quiet = calibration_noise([_measured(256, 1e-3, 0.01), _measured(1024, 0.05, 0.02)])
    assert quiet["noisy"] is False and "warning" not in quiet
    assert quiet["reference"] == {"m": 1024, "k": 1024, "n": 1024, "dtype": "fp64",
                                  "seconds": 0.05}  # fmt: skip
    noisy = calibration_noise([_measured(256, 1e-3, 0.12), _measured(1024, 0.05, 0.08)])
    assert noisy["noisy"] is True  # median spread (0.12 + 0.08)/2 = 10% > 5%
    assert "10.0%" in noisy["warning"]


def test_validation_noise_drift_by_hand() -> None:
    info = {"noise": {"repeat_spread": 0.01, "noisy": False}}
    reference = {"m": 1024, "k": 1024, "n": 1024, "dtype": "fp64", "seconds": 0.050}
    measured = [{"noise": 0.01}, {"noise": 0.01, "seconds": 0.052}]
    noise = validation_noise(measured, info, reference)
    assert noise["reference_drift"] == pytest.approx(0.052 / 0.050 - 1)  # +4% <= 5%: conclusive
    assert noise["conclusive"] is True and noise["calibration_repeat_spread"] == 0.01
    measured[-1]["seconds"] = 0.060  # +20%: the machine changed since the calibration
    changed = validation_noise(measured, info, reference)
    assert changed["conclusive"] is False and "+20.0%" in changed["warning"]


# --- calibrate and validate end to end, with synthetic measurements ---------------------------

T_CALL_S, W_BYTES_PER_S = 1e-6, 20e9
P_FLOPS_PER_S = {"fp32": 100e9, "fp64": 50e9}


def _model_time(job: dict[str, Any]) -> float:
    """t = t_call + Q/W + F/P: a machine that follows the CPU model with no packing penalty."""
    if job["kind"] in ("copy", "triad"):
        return float(job["bytes"]) * 2 / W_BYTES_PER_S
    m, k, n, s = job["m"], job["k"], job["n"], dtype_bytes(job["dtype"])
    q = s * (m * k + k * n + m * n)
    flops = 0.0 if m == 1 else 2 * m * k * n / P_FLOPS_PER_S[job["dtype"]]
    return T_CALL_S + q / W_BYTES_PER_S + flops


def _fake_worker(noise: float, times: dict[tuple[int, int, int, str], float] | None = None) -> Any:
    def run_jobs(jobs: list[dict[str, Any]], **_: Any) -> list[dict[str, Any]]:
        out = []
        for job in jobs:
            key = (job.get("m"), job.get("k"), job.get("n"), job.get("dtype"))
            seconds = (times or {}).get(key) or _model_time(job)  # type: ignore[arg-type]
            out.append({**job, "seconds": seconds, "noise": noise, "samples": 3})
        return out

    return run_jobs


def _calibrate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, noise: float) -> Path:
    monkeypatch.setattr("shardline.calibrate.run_jobs", _fake_worker(noise))
    out = tmp_path / "host.toml"
    assert main(["calibrate", "--out", str(out), "--quick", "--no-progress"]) == 0
    return out


def test_calibrate_reports_noise_and_warns_when_noisy(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    quiet = _calibrate(tmp_path, monkeypatch, 0.01)
    captured = capsys.readouterr()
    assert "noise: repeats spread 1.0%" in captured.out and captured.err == ""
    table = tomllib.loads(quiet.read_text())["calibration"]["noise"]
    assert table["repeat_spread"] == 0.01 and table["noisy"] is False
    (tmp_path / "noisy").mkdir()
    noisy = _calibrate(tmp_path / "noisy", monkeypatch, 0.2)
    err = capsys.readouterr().err
    assert err.startswith("warning:") and "noisy = true" in err and len(err.splitlines()) == 1
    assert tomllib.loads(noisy.read_text())["calibration"]["noise"]["noisy"] is True
    assert shardline.load_chip(str(noisy)).kind == "cpu"  # still a working chip file


def test_validate_without_matplotlib_writes_the_csv_and_skips_the_plot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    host = _calibrate(tmp_path, monkeypatch, 0.01)
    capsys.readouterr()
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises
    prefix = tmp_path / "v"
    assert main(["validate", "--hw", str(host), "--quick", "--out", str(prefix), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["files"] == [f"{prefix}.csv"] and "matplotlib" in data["plot_skipped"]
    assert Path(f"{prefix}.csv").exists() and not Path(f"{prefix}.png").exists()
    assert data["summary"]["noise"]["repeat_spread"] == 0.01
    assert main(["validate", "--hw", str(host), "--quick", "--out", str(prefix), "--force"]) == 0
    assert "plot skipped: matplotlib is not installed" in capsys.readouterr().out


def test_validate_on_a_changed_machine_is_not_conclusive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    host = _calibrate(tmp_path, monkeypatch, 0.01)
    capsys.readouterr()
    ref = tomllib.loads(host.read_text())["calibration"]["noise"]["reference"]
    assert ref["m"] == ref["k"] == ref["n"]  # the largest square of the calibration
    key = (ref["m"], ref["k"], ref["n"], ref["dtype"])
    slower = _fake_worker(0.01, {key: ref["seconds"] * 1.3})  # 30% slower than when calibrated
    monkeypatch.setattr("shardline.calibrate.run_jobs", slower)
    prefix = tmp_path / "v"
    argv = ["validate", "--hw", str(host), "--quick", "--out", str(prefix), "--no-plot"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    assert "NOT CONCLUSIVE" in captured.out.splitlines()[0]
    assert "reference multiply +30.0% since calibration" in captured.out
    assert captured.err.startswith("warning: verdict not conclusive")


def _run_worker(
    jobs: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> tuple[int, list[dict[str, Any]]]:
    import io

    from shardline.calibrate import worker

    monkeypatch.setattr(sys, "stdin", io.StringIO(json.dumps(jobs)))
    code = worker.main()
    return code, [json.loads(line) for line in capsys.readouterr().out.splitlines()]


def test_worker_interleaves_and_reports_noise(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Three tiny multiplies in one group: one record each, in order, with a noise field;
    SHARDLINE_FAIL_AFTER=2 keeps the first two records, then one error line and exit 1."""
    timing = {"repeats": 3, "warmup": 0, "min_sample_s": 0.0, "budget_s": 1.0}
    jobs = [
        {"backend": "numpy", "device": "cpu", "kind": "matmul", "m": n, "k": n, "n": n,
         "dtype": "fp64", **timing}
        for n in (8, 16, 32)
    ]  # fmt: skip
    code, records = _run_worker(jobs, monkeypatch, capsys)
    assert code == 0 and [r["index"] for r in records] == [0, 1, 2]
    assert all(r["samples"] == 3 and r["seconds"] > 0 and r["noise"] >= 0 for r in records)
    monkeypatch.setenv("SHARDLINE_FAIL_AFTER", "2")
    code, records = _run_worker(jobs, monkeypatch, capsys)
    assert code == 1 and [r["index"] for r in records] == [0, 1, 2]
    assert "error" in records[2] and "error" not in records[1]
