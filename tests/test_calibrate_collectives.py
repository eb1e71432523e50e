"""`calibrate --collectives` (8 B .. 1 GiB, four kinds, latency floor, several nodes) and
`validate --collectives`: the fits on synthetic rows derived by hand, then the real gloo runs."""

from __future__ import annotations

import csv
import json
import time
from pathlib import Path

import pytest

from shardline.calibrate.collectives import (
    fit_latency,
    fit_nodes,
    fit_scale_out,
    network_chip,
    sizes,
)
from shardline.calibrate.collectives_run import OPS, next_size_s
from shardline.cli.main import main
from shardline.collectives import collective_cost
from shardline.errors import InputError
from shardline.hardware import load_chip
from tests.conftest import require


def test_sizes_sweep_8_bytes_to_1_gib() -> None:
    """Steps of 4x from 8 B, and the top size itself: quick ends at 4 MiB, full at 1 GiB."""
    assert sizes(True) == [8, 32, 128, 512, 2048, 8192, 32768, 131072, 524288, 2097152, 2**22]
    full = sizes(False)
    assert full[0] == 8 and full[-2:] == [2**29, 2**30] and len(full) == 15
    assert OPS == ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")


def test_fit_latency_is_the_median_of_the_smallest_size() -> None:
    """Three repeats of the 8-byte all-reduce (30, 10, 20 us) and one faster 32-byte run (5 us):
    the floor is the median of the smallest size's repeats, 20 us, not the fastest row; the
    other kinds do not count."""
    rows = [
        {"op": "all_reduce", "bytes": 8, "seconds": 30e-6},
        {"op": "all_reduce", "bytes": 8, "seconds": 10e-6},
        {"op": "all_reduce", "bytes": 8, "seconds": 20e-6},
        {"op": "all_reduce", "bytes": 32, "seconds": 5e-6},
        {"op": "all_gather", "bytes": 8, "seconds": 1e-6},
    ]
    assert fit_latency(rows) == pytest.approx(20e-6)
    with pytest.raises(InputError, match="no all-to-all"):
        fit_latency(rows, "all_to_all")


def test_fit_scale_out_by_hand() -> None:
    """Rank 0 to the next node: a 4-byte round trip of 12 us -> hop latency 6 us; a 4 MiB
    round trip of 2 x (6 us + 2**22 / 10e9) -> one-way 10e9 B/s; the smallest all-reduce over
    every rank (8 B, 90 us) is the scale-out floor."""
    alpha, w = 6e-6, 10e9
    rows = [
        {"op": "ping_node", "bytes": 4, "seconds": 2 * alpha},
        {"op": "p2p_node", "bytes": 2**22, "seconds": 2 * (alpha + 2**22 / w)},
        {"op": "all_reduce", "bytes": 8, "seconds": 90e-6},
        {"op": "all_reduce", "bytes": 2**20, "seconds": 400e-6},
    ]
    out = fit_scale_out(rows)
    assert out["alpha_s"] == pytest.approx(alpha)
    assert out["bytes_per_s"] == pytest.approx(w)
    assert out["latency_s"] == pytest.approx(90e-6)


def test_fit_nodes_recovers_the_efficiency_curve() -> None:
    """4 ranks as 2 nodes of 2: rows made with shardline's own hierarchical pricing on known links
    (in-node alpha 10 us, W 20e9; between nodes 30 us, 5e9) and eff(V) = 0.6 V / (V + 1e6):
    t = latency + bandwidth term / eff(V). The fit gives back alpha, W, eff_max and V_half."""
    alpha, w, out_alpha, out_w, eff_max, half = 10e-6, 20e9, 30e-6, 5e9, 0.6, 1e6
    chip = network_chip(alpha, w, 2, {"alpha_s": out_alpha, "bytes_per_s": out_w})
    rows = [
        {"op": "ping", "bytes": 4, "seconds": 2 * alpha},
        {"op": "p2p", "bytes": 2**22, "seconds": 2 * (alpha + 2**22 / w)},
        {"op": "ping_node", "bytes": 4, "seconds": 2 * out_alpha},
        {"op": "p2p_node", "bytes": 2**22, "seconds": 2 * (out_alpha + 2**22 / out_w)},
    ]
    for v in sizes(True):
        for op in OPS:
            line = collective_cost(op, float(v), 4, chip)
            eff = eff_max * v / (v + half)
            seconds = float(line.t_latency_s) + float(line.t_bandwidth_s) / eff
            rows.append({"op": op, "bytes": v, "seconds": seconds})
    fit = fit_nodes(rows, 4, 2)
    assert fit["alpha_s"] == pytest.approx(alpha)
    assert fit["link_bytes_per_s"] == pytest.approx(w)
    assert fit["eff_max"] == pytest.approx(eff_max, rel=1e-6)
    assert fit["half_bytes"] == pytest.approx(half, rel=1e-6)
    assert fit["scale_out"]["bytes_per_s"] == pytest.approx(out_w)


def test_budget_projection() -> None:
    """Latency-bound sizes (this size 1 s, the one before 1 s) project 1 s for the next; a size
    that took 3x the one before projects 3x, never more than the size ratio (4)."""
    assert next_size_s(1.0, 1.0, 4.0) == pytest.approx(1.0)
    assert next_size_s(3.0, 1.0, 4.0) == pytest.approx(9.0)
    assert next_size_s(8.0, 1.0, 4.0) == pytest.approx(32.0)
    assert next_size_s(2.0, 0.0, 4.0) == pytest.approx(2.0)


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (
            ["calibrate", "--out", "h.toml", "--collectives", "--processes", "4"]
            + ["--processes-per-node", "3"],
            "--processes-per-node",
        ),
        (["validate", "--collectives", "--out", "v.csv"], "needs --hw"),
    ],
)
def test_bad_input(
    argv: list[str],
    words: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert words in capsys.readouterr().err


def _validate(path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    csv_path = tmp_path / "v.csv"
    argv = ["validate", "--collectives", "--hw", str(path), "--quick", "--no-progress"]
    assert main([*argv, "--out", str(csv_path), "--json", *extra]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert {"rows", "summary", "devices", "backend", "files"} <= set(payload)
    assert {"kind", "bytes", "measured_s", "predicted_s", "error", "abs_error"} <= set(
        payload["rows"][0]
    )
    with csv_path.open(encoding="utf-8") as handle:
        table = list(csv.DictReader(handle))
    assert len(table) == len(payload["rows"])
    assert set(table[0]) == {
        "kind",
        "bytes",
        "devices",
        "measured_s",
        "predicted_s",
        "error",
        "abs_error",
    }
    return dict(payload)


@pytest.mark.slow
def test_quick_gloo_sweep_then_validate(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Two local gloo processes, the quick sweep: every kind measured from 8 B, the latency floor
    written, and validate --collectives on the file just made stays within a loose bound (a busy
    CPU runner is noisy)."""
    require("torch", "pip install torch==2.13.0")
    out = tmp_path / "net.toml"
    start = time.perf_counter()
    argv = ["calibrate", "--device", "cpu", "--quick", "--collectives", "--processes", "2"]
    assert main([*argv, "--out", str(out), "--no-progress", "--json"]) == 0
    elapsed = time.perf_counter() - start
    measured = json.loads(capsys.readouterr().out)["measurements"]
    rows = [r for r in measured if r["kind"] == "collective"]
    assert {r["op"] for r in rows} >= set(OPS)
    assert min(r["bytes"] for r in rows if r["op"] == "all_reduce") == 8
    chip = load_chip(str(out))
    smallest = [r["seconds"] for r in rows if r["op"] == "all_reduce" and r["bytes"] == 8]
    assert chip.achievable.collective_latency_s == pytest.approx(smallest[0])
    assert chip.interconnect is not None and chip.interconnect.scale_out is None
    assert elapsed < 120  # the quick sweep is bounded by its time budget (8 s of sweep)
    payload = _validate(out, tmp_path, capsys, "--processes", "2")
    assert payload["devices"] == 2 and payload["summary"]["median_abs_error"] < 2.0


@pytest.mark.slow
def test_fake_two_nodes_write_scale_out(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Four local processes as two nodes of two (LOCAL_WORLD_SIZE 2): the chip file gets
    [interconnect.scale_out] and scale_up_devices 2; validate prices 4 devices over 2 nodes."""
    require("torch", "pip install torch==2.13.0")
    out = tmp_path / "two.toml"
    argv = ["calibrate", "--device", "cpu", "--quick", "--collectives", "--processes", "4"]
    assert main([*argv, "--processes-per-node", "2", "--out", str(out), "--no-progress"]) == 0
    capsys.readouterr()
    chip = load_chip(str(out))
    ic = chip.interconnect
    assert ic is not None and ic.scale_up_devices == 2 and ic.scale_out is not None
    assert ic.scale_out.devices_per_node == 2
    assert ic.scale_out.bytes_per_s_per_device > 0 and ic.scale_out.hop_latency_s > 0
    assert (ic.scale_out.collective_latency_s or 0) > 0
    assert (chip.achievable.collective_latency_s or 0) > 0
    payload = _validate(out, tmp_path, capsys, "--processes", "4", "--processes-per-node", "2")
    assert payload["devices"] == 4 and payload["devices_per_node"] == 2
    assert payload["summary"]["median_abs_error"] < 2.0
