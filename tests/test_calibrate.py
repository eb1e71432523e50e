"""`shardline calibrate`: the fits recover known parameters, the chip file round-trips, failures
keep what was measured and write no chip file, and the CLI's bad-input cases."""

from __future__ import annotations

import json
import sys
import tomllib
from pathlib import Path

import numpy as np
import pytest

from shardline.basics.dtypes import dtype_bytes
from shardline.calibrate import CalibrationOptions, calibrate
from shardline.calibrate.chipfile import Measured, render_toml, write_chip_file
from shardline.calibrate.collectives import fit_collectives, model_time
from shardline.calibrate.cpu import machine_identity
from shardline.calibrate.fit import CpuSetup, cpu_plan, fit_cpu, fit_gpu
from shardline.cli.main import main
from shardline.errors import InputError
from shardline.hardware import chip_from_dict, load_chip
from shardline.ops.predict import stream_time
from tests.conftest import require


def _one_error_line(captured: pytest.CaptureResult[str]) -> str:
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), captured.err
    return lines[0]


# --- the CPU fit recovers the parameters it was generated from ----------------------------------

TRUE = {
    "t_call": 1.2e-6,
    "cache": 9e6,
    "w_cache": 80e9,
    "w_mem": 20e9,
    "pack_ratio": 3.0,
    "fp32": 100e9,
    "fp64": 50e9,
}


def _synthetic_time(job: dict[str, object]) -> float:
    """The CPU model with TRUE parameters (what a perfectly behaved machine would measure)."""
    if job["kind"] in ("copy", "triad"):
        return float(job["bytes"]) * 2 / 20e9  # type: ignore[arg-type]
    m, k, n = (int(job[x]) for x in ("m", "k", "n"))  # type: ignore[call-overload]
    s = dtype_bytes(str(job["dtype"]))
    q_in, q = s * (m * k + k * n), s * (m * k + k * n + m * n)
    if m == 1:
        return TRUE["t_call"] + float(stream_time(q, TRUE["cache"], TRUE["w_cache"], TRUE["w_mem"]))
    read = q_in / TRUE["w_cache"] if q_in <= TRUE["cache"] else q_in / TRUE["w_mem"]
    t_pack = TRUE["pack_ratio"] * read
    return TRUE["t_call"] + t_pack + 2 * m * k * n / TRUE[str(job["dtype"])]


def test_fit_cpu_recovers_parameters() -> None:
    jobs = cpu_plan(("fp32", "fp64"), 32 * 2**20)
    results = [{**job, "seconds": _synthetic_time(job)} for job in jobs]
    # the 8x8x8 overhead job has 1,024 FLOP: its model time is t_call + 10 ns of math and packing
    setup = CpuSetup(
        name="t",
        identity="cpu: test",
        model="Test CPU",
        llc_bytes=32 * 2**20,
        mem_total=2**34,
        library="numpy",
        threads=1,
        backend="numpy",
    )
    chip = fit_cpu(results, setup)
    ach = chip["achievable"]
    assert ach["matmul_flops_per_s"]["fp32"].value == pytest.approx(100e9, rel=0.02)
    assert ach["matmul_flops_per_s"]["fp64"].value == pytest.approx(50e9, rel=0.02)
    assert ach["mem_bytes_per_s"].value == pytest.approx(20e9, rel=0.05)
    assert chip["on_chip"]["l2_bytes_per_s"].value == pytest.approx(80e9, rel=0.05)
    assert chip["on_chip"]["l2_bytes"].value == pytest.approx(9e6, rel=0.1)
    assert ach["pack_bytes_per_s"].value == pytest.approx(20e9 / 3.0, rel=0.05)
    assert ach["per_call_overhead_s"].value == pytest.approx(1.2e-6, rel=0.05)
    # and the file it makes loads as a chip
    chip_from_dict(tomllib.loads(render_toml(chip)))


def test_fit_collectives_recovers_parameters() -> None:
    alpha, link, eff, half, x = 20e-6, 5e9, 0.8, 2e6, 4
    rows = [
        {"op": "ping", "bytes": 4, "seconds": 2 * alpha},
        {"op": "p2p", "bytes": 2**26, "seconds": 2 * (alpha + 2**26 / link)},
    ]
    for v in [2**e for e in range(12, 27, 2)]:
        for op in ("all_gather", "reduce_scatter", "all_reduce"):
            rows.append(
                {
                    "op": op,
                    "bytes": v,
                    "seconds": float(model_time(op, v, x, alpha, link, eff, half)),
                }
            )
    fit = fit_collectives(rows, x)
    assert fit["alpha_s"] == pytest.approx(alpha)
    assert fit["link_bytes_per_s"] == pytest.approx(link)
    assert fit["eff_max"] == pytest.approx(eff, rel=1e-6)
    assert fit["half_bytes"] == pytest.approx(half, rel=1e-6)


def test_model_time_by_hand() -> None:
    """all-reduce of 1 MB over 4 processes, alpha 10 us, W 1e9, eff 0.5 at V_half = V:
    2*10 us + 2*(3/4)*1e6/1e9 / (1.0*1e6/2e6) = 20 us + 3 ms."""
    t = model_time("all_reduce", 1e6, 4, 10e-6, 1e9, 1.0, 1e6)
    assert float(t) == pytest.approx(20e-6 + 3e-3)


def test_fit_gpu_uses_catalog_peaks() -> None:
    """GPU results (as torch.cuda would measure them) become a chip with the catalog's datasheet
    peaks and the measured achievable figures."""
    h100 = load_chip("h100-sxm")
    results = [
        {"kind": "launch", "role": "launch", "seconds": 3e-6},
        {
            "kind": "matmul",
            "role": "peak",
            "dtype": "bf16",
            "m": 8192,
            "k": 8192,
            "n": 8192,
            "seconds": 2 * 8192**3 / 780e12,
        },
        {
            "kind": "matmul",
            "role": "aligned",
            "dtype": "bf16",
            "m": 8192,
            "k": 8192,
            "n": 8192,
            "seconds": 2 * 8192**3 / 780e12,
        },
        {
            "kind": "matmul",
            "role": "unaligned",
            "dtype": "bf16",
            "m": 8192,
            "k": 8191,
            "n": 8192,
            "seconds": 2 * 8192**2 * 8191 / 600e12,
        },
        {"kind": "copy", "role": "memory", "bytes": 2**30, "seconds": 2 * 2**30 / 3.0e12},
    ]
    props = {
        "name": "NVIDIA H100 80GB HBM3",
        "sms": 132,
        "memory_bytes": 80e9,
        "l2_bytes": 52428800,
        "shared_bytes_per_sm": 233472,
        "capability": "9.0",
    }
    chip = fit_gpu(
        results,
        props=props,
        identity="gpu: NVIDIA H100 80GB HBM3",
        name="g",
        library="torch",
        catalog_chip=h100,
    )
    loaded = chip_from_dict(tomllib.loads(render_toml(chip)))
    assert loaded.peak_flops_per_s == h100.peak_flops_per_s
    assert loaded.achievable.matmul_flops_per_s["bf16"] == pytest.approx(780e12)
    assert loaded.achievable.unaligned_matmul_efficiency == pytest.approx(600 / 780)
    assert loaded.achievable.mem_bytes_per_s == pytest.approx(3.0e12)
    assert loaded.achievable.launch_overhead_s == pytest.approx(3e-6)
    assert loaded.on_chip.cores == 132 and loaded.measured_on == "gpu: NVIDIA H100 80GB HBM3"


@pytest.mark.parametrize(
    ("device", "chip"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),
        ("NVIDIA A100-SXM4-80GB", "a100-80gb"),
        ("NVIDIA A100-SXM4-40GB", "a100-40gb"),
        ("NVIDIA H200", "h200"),
        ("Tesla T4", None),
    ],
)
def test_catalog_match(device: str, chip: str | None) -> None:
    from shardline.calibrate import catalog_match

    found = catalog_match(device)
    assert (found.name if found else None) == chip


def test_progress_bar_renders() -> None:
    import io

    from shardline.calibrate.runner import ProgressBar

    stream = io.StringIO()
    bar = ProgressBar(4, "calibrate cpu", stream=stream, enabled=True)
    bar.update("matmul fp32 8x8x8")
    bar.update("copy 1 MB")
    assert "[" + "#" * 15 + "." * 15 + "] 2/4 copy 1 MB" in stream.getvalue()
    bar.close()


def test_torch_job_runner_on_cpu_device() -> None:
    """The torch path that times CUDA kernels, run on torch's CPU device (same code, no sync)."""
    require("torch", "pip install torch==2.13.0")
    from shardline.calibrate.gpu import run_torch_job

    quick = {"repeats": 1, "warmup": 0, "min_sample_s": 0.0}
    for job in (
        {"kind": "matmul", "m": 32, "k": 32, "n": 32, "dtype": "bf16"},
        {"kind": "copy", "bytes": 2**16},
        {"kind": "launch"},
    ):
        assert run_torch_job({**job, "device": "cpu"}, **quick).median_s > 0


# --- the chip file ------------------------------------------------------------------------------


def test_chip_file_round_trip(tmp_path: Path) -> None:
    data = {
        "schema": 1,
        "name": "rt",
        "kind": "cpu",
        "measured_on": "cpu: X (2 logical CPUs)",
        "peak_flops_per_s": {"fp32": Measured(1.5e11, 'measured "best"')},
        "memory": {
            "capacity_bytes": Measured(2**34, "meminfo"),
            "bytes_per_s": Measured(2.5e10, "copy"),
        },
        "achievable": {
            "pack_bytes_per_s": Measured(7e9, "fit"),
            "matmul_flops_per_s": {"fp32": Measured(1.2e11, "fit")},
        },
        "calibration": {"threads": 1, "backend": "numpy"},
    }
    path = tmp_path / "rt.toml"
    write_chip_file(path, data)
    chip = load_chip(str(path))
    assert chip.peak_flops_per_s == {"fp32": 1.5e11}
    assert chip.achievable.pack_bytes_per_s == 7e9
    assert chip.sources["peak_flops_per_s.fp32"] == 'measured "best"'
    assert chip.measured_on == "cpu: X (2 logical CPUs)"


def test_chip_file_never_half_written(tmp_path: Path) -> None:
    """A table the loader rejects is never written (and no temporary file is left behind)."""
    path = tmp_path / "bad.toml"
    bad = {
        "schema": 1,
        "name": "bad",
        "kind": "cpu",
        "peak_flops_per_s": {},
        "memory": {"capacity_bytes": 1.0, "bytes_per_s": 1.0},
    }
    with pytest.raises(InputError):
        write_chip_file(path, bad)
    assert list(tmp_path.iterdir()) == []


# --- end to end ---------------------------------------------------------------------------------


def test_calibrate_cli_quick(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "host.toml"
    assert main(["calibrate", "--out", str(out), "--quick", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["path"] == str(out) and data["measurements"]
    chip = load_chip(str(out))
    assert chip.kind == "cpu" and chip.measured_on == machine_identity()
    assert set(chip.achievable.matmul_flops_per_s) == {"fp32", "fp64"}
    text = tomllib.loads(out.read_text())
    assert text["calibration"]["threads"] == 1
    # refuses to replace it without --force
    assert main(["calibrate", "--out", str(out), "--quick"]) == 2
    assert "already exists" in _one_error_line(capsys.readouterr())


def test_failure_midway_keeps_measurements_writes_no_chip(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("SHARDLINE_FAIL_AFTER", "3")
    out = tmp_path / "host.toml"
    assert main(["calibrate", "--out", str(out), "--quick"]) == 2
    line = _one_error_line(capsys.readouterr())
    assert "measurement failed" in line and "no chip file" in line
    assert not out.exists()
    partial = tmp_path / "host.toml.partial.csv"
    rows = partial.read_text().strip().splitlines()
    assert len(rows) == 1 + 3  # header and the three finished measurements
    assert "seconds" in rows[0]


def test_torch_missing_names_the_extra(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` now raises ImportError
    out = tmp_path / "h.toml"
    assert main(["calibrate", "--out", str(out), "--backend", "torch", "--quick"]) == 2
    assert "pip install 'shardline[torch]'" in _one_error_line(capsys.readouterr())
    assert main(["calibrate", "--out", str(out), "--device", "cuda"]) == 2
    assert "shardline[torch]" in _one_error_line(capsys.readouterr())
    assert not out.exists()


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["calibrate", "--out", "x.json"], "expected one of .toml"),
        (["calibrate", "--out", "no/such/dir/h.toml"], "does not exist"),
        (["calibrate", "--out", "h.toml", "--threads", "0"], "--threads"),
        (["calibrate", "--out", "h.toml", "--processes", "1", "--collectives"], "--processes"),
    ],
)
def test_calibrate_bad_input(
    argv: list[str],
    words: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert words in _one_error_line(capsys.readouterr())


@pytest.mark.slow
def test_collectives_with_gloo(tmp_path: Path) -> None:
    """Two local gloo processes, the quick size sweep: the fitted fields land in the chip file."""
    require("torch", "pip install torch==2.13.0")
    out = tmp_path / "net.toml"
    result = calibrate(out, quick=True, collectives=True, processes=2, progress=False)
    chip = load_chip(str(out))
    assert chip.interconnect is not None and chip.interconnect.topology == "switch"
    assert chip.interconnect.hop_latency_s > 0 and chip.interconnect.link_bytes_per_s > 0
    assert 0 < (chip.achievable.collective_bus_efficiency or 0) <= 1
    assert (chip.achievable.collective_half_efficiency_bytes or 0) > 0
    ops = {r.get("op") for r in result.measurements if r["kind"] == "collective"}
    assert {"all_gather", "reduce_scatter", "all_reduce"} <= ops
    assert np.isfinite([r["seconds"] for r in result.measurements]).all()


@pytest.mark.slow
def test_collectives_under_torchrun(tmp_path: Path) -> None:
    """`torchrun --nproc_per_node 2 shardline calibrate --collectives`: the ranks torchrun started
    measure, rank 0 fits and writes the chip file, and every rank exits cleanly."""
    require("torch", "pip install torch==2.13.0")
    import socket
    import subprocess

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    out = tmp_path / "tr.toml"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--nproc_per_node=2",
            f"--master_port={port}",
            "-m",
            "shardline.cli.main",
            "calibrate",
            "--out",
            str(out),
            "--quick",
            "--collectives",
            "--no-progress",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    chip = load_chip(str(out))
    assert chip.interconnect is not None and chip.interconnect.scale_up_devices == 2
    assert chip.interconnect.scale_out is None  # torchrun's LOCAL_WORLD_SIZE 2 = WORLD_SIZE 2
    assert (chip.achievable.collective_latency_s or 0) > 0


def test_calibrate_options_by_keyword_or_group(tmp_path: Path) -> None:
    """calibrate's settings come as CalibrationOptions or as its field names; an unknown keyword
    and a bad thread count fail before anything is measured or written."""
    out = tmp_path / "x.toml"
    with pytest.raises(TypeError, match="bogus"):
        calibrate(out, bogus=1)
    with pytest.raises(InputError, match="--threads must be at least 1, got 0"):
        calibrate(out, CalibrationOptions(threads=4), threads=0)  # the keyword wins
    assert not out.exists()
