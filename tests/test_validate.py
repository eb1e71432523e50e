"""`shardline validate` on the tiny suite: JSON contract, files, error summary, bad input."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from shardline.calibrate.validate import suite, summarize
from shardline.cli.main import main


@pytest.fixture(scope="module")
def host(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One quick calibration of this machine for the whole module."""
    path = tmp_path_factory.mktemp("cal") / "host.toml"
    assert main(["calibrate", "--out", str(path), "--quick", "--no-progress"]) == 0
    return path


def _one_error_line(captured: pytest.CaptureResult[str]) -> str:
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), captured.err
    return lines[0]


def test_summary_by_hand() -> None:
    """Errors 0.02, 0.04, 0.30 (predicted) and 0.10, 0.50, 0.60 (roofline): medians 0.04 and
    0.50, worst 0.30; 0.04 <= 10% and <= 0.50/2: the target is met."""
    cases = [
        {"abs_err_predicted": p, "abs_err_roofline": r}
        for p, r in ((0.02, 0.10), (0.04, 0.50), (0.30, 0.60))
    ]
    s = summarize(cases)
    assert s["median_abs_err_predicted"] == pytest.approx(0.04)
    assert s["median_abs_err_roofline"] == pytest.approx(0.50)
    assert s["max_abs_err_predicted"] == pytest.approx(0.30)
    assert s["predicted_within_10_percent"] == 2 and s["target_met"] is True
    s = summarize([{"abs_err_predicted": 0.09, "abs_err_roofline": 0.12}])
    assert s["target_met"] is False  # within 10% but not half the roofline's error


def test_suite_covers_the_issue_groups() -> None:
    cases = suite("cpu", ("fp32", "fp64"))
    groups = {c["group"] for c in cases}
    assert groups == {"large square", "small square", "skinny M", "odd", "K-heavy"}
    skinny = sorted({c["m"] for c in cases if c["group"] == "skinny M"})
    assert skinny[0] == 1 and skinny[-1] == 256
    assert {c["dtype"] for c in suite("gpu", ("bf16", "fp32"))} == {"bf16", "fp32"}


def test_validate_quick_json_and_files(
    host: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prefix = tmp_path / "val"
    assert main(["validate", "--hw", str(host), "--quick", "--out", str(prefix), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {"cases", "summary"} <= set(data)
    assert {"median_abs_err_predicted", "median_abs_err_roofline", "max_abs_err_predicted"} <= set(
        data["summary"]
    )
    case = data["cases"][0]
    assert {"m", "k", "n", "dtype", "measured_s", "predicted_s", "roofline_s"} <= set(case)
    for c in data["cases"]:
        assert c["measured_s"] > 0 and c["predicted_s"] > 0 and c["roofline_s"] > 0
        assert c["abs_err_predicted"] == pytest.approx(
            abs(c["predicted_s"] - c["measured_s"]) / c["measured_s"]
        )
    errors = sorted(c["abs_err_predicted"] for c in data["cases"])
    assert data["summary"]["max_abs_err_predicted"] == pytest.approx(errors[-1])
    rows = list(csv.DictReader((tmp_path / "val.csv").open()))
    assert len(rows) == len(data["cases"]) and float(rows[0]["measured_s"]) > 0
    assert (tmp_path / "val.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # text output: the verdict first, then the table
    assert (
        main(
            ["validate", "--hw", str(host), "--quick", "--out", str(prefix), "--force", "--no-plot"]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert out.startswith("TARGET ") and "roofline (lower bound)" in out


def test_validate_other_machine_is_an_error(
    host: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = host.read_text()
    other = tmp_path / "other.toml"
    other.write_text(text.replace('measured_on = "cpu: ', 'measured_on = "cpu: Other CPU, was '))
    assert main(["validate", "--hw", str(other), "--quick", "--out", str(tmp_path / "v")]) == 2
    line = _one_error_line(capsys.readouterr())
    assert "was calibrated on" in line
    assert not (tmp_path / "v.csv").exists()


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["validate", "--hw", "h100-sxm", "--quick"], "is a gpu"),
        (["validate", "--hw", "tpu-v5e", "--quick"], "is a tpu"),
        (["validate", "--hw", "nope.toml", "--quick"], "does not exist"),
        (["validate", "--quick"], "needs --hw"),
    ],
)
def test_validate_bad_input(
    argv: list[str],
    words: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert words in _one_error_line(capsys.readouterr())


def test_validate_never_overwrites(
    host: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "v.csv").write_text("keep")
    assert main(["validate", "--hw", str(host), "--quick", "--out", str(tmp_path / "v")]) == 2
    assert "already exists" in _one_error_line(capsys.readouterr())
    assert (tmp_path / "v.csv").read_text() == "keep"


def test_cpu_file_is_measured_on_the_cpu_where_torch_sees_a_gpu(
    host: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--device auto with a CPU chip file measures the CPU even on a GPU machine; --device cuda
    with a CPU chip file is an error that says so (not "calibrated on another machine")."""
    import shardline.calibrate.gpu as gpu
    import shardline.calibrate.validate as cal

    real_detect, real_identity = cal.detect_device, cal.current_identity
    monkeypatch.setattr(
        cal,
        "current_identity",
        lambda device: "gpu: NVIDIA H100" if device == "cuda" else real_identity(device),
    )
    monkeypatch.setattr(gpu, "cuda_available", lambda: True)
    monkeypatch.setattr(
        cal,
        "detect_device",
        lambda device: "cuda" if device in ("auto", "cuda") else real_detect(device),
    )
    assert (
        main(
            [
                "validate",
                "--hw",
                str(host),
                "--quick",
                "--no-plot",
                "--json",
                "--no-progress",
                "--out",
                str(tmp_path / "v"),
            ]
        )
        == 0
    )
    assert json.loads(capsys.readouterr().out)["backend"] == "numpy"
    assert (
        main(
            [
                "validate",
                "--hw",
                str(host),
                "--quick",
                "--no-plot",
                "--device",
                "cuda",
                "--out",
                str(tmp_path / "w"),
            ]
        )
        == 2
    )
    assert "describes a CPU" in _one_error_line(capsys.readouterr())
    assert not (tmp_path / "w.csv").exists()


def test_validate_failing_midway_keeps_the_measured_cases(
    host: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SHARDLINE_FAIL_AFTER", "2")
    prefix = tmp_path / "v"
    assert (
        main(["validate", "--hw", str(host), "--quick", "--no-progress", "--out", str(prefix)]) == 2
    )
    line = _one_error_line(capsys.readouterr())
    assert "measurement failed" in line and "no CSV or plot was written" in line
    assert not (tmp_path / "v.csv").exists() and not (tmp_path / "v.png").exists()
    rows = (tmp_path / "v.partial.csv").read_text().strip().splitlines()
    assert len(rows) == 1 + 2 and "seconds" in rows[0]


def test_calibrated_file_works_with_every_command(
    host: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`calibrate --out` then `--hw file`: matmul, einsum, sheet and stack read the measured
    numbers (t_lower = max(F/P, Q/W) with the file's fp32 peak and memory rate)."""
    import tomllib

    data = tomllib.loads(host.read_text())
    peak = data["peak_flops_per_s"]["fp32"]["value"]
    mem = data["memory"]["bytes_per_s"]["value"]
    m, k, n = 96, 200, 64
    lower = max(2 * m * k * n / peak, 4 * (m * k + k * n + m * n) / mem)
    assert (
        main(["matmul", str(m), str(k), str(n), "--hw", str(host), "--dtype", "fp32", "--json"])
        == 0
    )
    mm = json.loads(capsys.readouterr().out)
    assert mm["t_lower_s"] == pytest.approx(lower) and mm["predicted_s"] > 0
    assert (
        main(
            [
                "einsum",
                "A[M,K] * B[K,N] -> C[M,N]",
                "--dims",
                f"M={m},K={k},N={n}",
                "--hw",
                str(host),
                "--dtype",
                "fp32",
                "--json",
            ]
        )
        == 0
    )
    es = json.loads(capsys.readouterr().out)
    assert es["predicted_s"] == pytest.approx(mm["predicted_s"])
    sheet = tmp_path / "s.csv"
    sheet.write_text(f"m,k,n,dtype\n{m},{k},{n},fp32\n")
    assert main(["sheet", str(sheet), "--hw", str(host), "--json"]) == 0
    row = json.loads(capsys.readouterr().out)["rows"][0]
    assert row["t_lower_s"] == pytest.approx(lower)
    assert row["predicted_s"] == pytest.approx(mm["predicted_s"])
    assert main(["stack", str(sheet), "--hw", str(host), "--json"]) == 0
    totals = json.loads(capsys.readouterr().out)["totals"]
    assert totals["t_compute_s"] == pytest.approx(2 * m * k * n / peak)
