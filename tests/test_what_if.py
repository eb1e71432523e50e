"""`shardline what-if precision`: each row checked against the roofline written out by hand."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shardline.answers.whatif import DtypeMix, parse_dtype_mixes
from shardline.cli.main import main
from shardline.errors import InputError
from shardline.hardware import resolve_chip

N = 4096  # matmul 4096 x 4096 x 4096


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict[str, Any]:
    assert main(argv) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)
    return out


def _rows(capsys: pytest.CaptureFixture[str], hw: str, dtypes: str) -> dict[str, dict[str, Any]]:
    argv = ["what-if", "precision", "matmul", str(N), str(N), str(N), "--hw", hw]
    out = _json(capsys, [*argv, "--dtypes", dtypes, "--json"])
    return {row["dtype"]: row for row in out["rows"]}


def test_fp8_halves_compute_and_memory_against_bf16(capsys: pytest.CaptureFixture[str]) -> None:
    chip = resolve_chip("h100-sxm")
    rows = _rows(capsys, "h100-sxm", "bf16,fp8")
    flops = 2 * N**3
    for dtype, size_bytes in (("bf16", 2), ("fp8", 1)):
        row = rows[dtype]
        assert row["supported"] is True
        # T_compute = 2 M K N / P(dtype); T_memory = (M K + K N + M N) s / W
        assert row["t_compute_s"] == pytest.approx(flops / chip.peak(dtype), rel=1e-12)
        memory_bytes = 3 * N * N * size_bytes
        assert row["memory_bytes"] == memory_bytes
        assert row["t_memory_s"] == pytest.approx(memory_bytes / chip.mem_bytes_per_s, rel=1e-12)
        assert row["bound"] == "compute"
        assert row["predicted_s"] > max(row["t_compute_s"], row["t_memory_s"])
        assert "t_network_s" not in row
    # h100-sxm: fp8 peak 1979 TFLOP/s, bf16 989.4 TFLOP/s (twice, to 1e-4)
    assert chip.peak("fp8") / chip.peak("bf16") == pytest.approx(2, rel=1e-3)
    change = rows["fp8"]["change"]
    assert change["t_compute_s"] == pytest.approx(chip.peak("bf16") / chip.peak("fp8"))
    assert change["t_compute_s"] == pytest.approx(0.5, rel=1e-3)
    assert change["t_memory_s"] == 0.5
    assert change["memory_bytes"] == 0.5
    assert rows["bf16"]["change"]["t_compute_s"] == 1.0


def test_int8_weights_move_only_the_weight_bytes(capsys: pytest.CaptureFixture[str]) -> None:
    chip = resolve_chip("h100-sxm")
    rows = _rows(capsys, "h100-sxm", "bf16,b:int8")
    mix = rows["bf16+b:int8"]
    assert mix["dtypes"] == {"a": "bf16", "b": "int8", "out": "bf16", "compute": "bf16"}
    memory_bytes = N * N * 2 + N * N * 1 + N * N * 2  # a bf16, b int8, out bf16
    assert mix["memory_bytes"] == memory_bytes
    assert mix["t_memory_s"] == pytest.approx(memory_bytes / chip.mem_bytes_per_s, rel=1e-12)
    assert mix["t_compute_s"] == rows["bf16"]["t_compute_s"]  # still computes in bf16
    assert mix["change"]["memory_bytes"] == pytest.approx(5 / 6)


def test_critical_m_is_where_the_bound_flips(capsys: pytest.CaptureFixture[str]) -> None:
    """critical M solves M (2KN/P - (sA K + sC N)/W) >= sB K N / W; at K = N the bytes per
    element cancel when A, B, C share a size s: M = s N^2/W / (2N^2/P - 2 s N/W)."""
    chip = resolve_chip("h100-sxm")
    rows = _rows(capsys, "h100-sxm", "bf16,b:int8")
    p, w = chip.peak("bf16"), chip.mem_bytes_per_s
    exact = 2 * N * N / w / (2 * N * N / p - 2 * 2 * N / w)
    assert rows["bf16"]["critical_m"] in (int(exact), int(exact) + 1)
    exact_mix = 1 * N * N / w / (2 * N * N / p - (2 * N + 2 * N) / w)  # only sB = 1
    assert rows["bf16+b:int8"]["critical_m"] in (int(exact_mix), int(exact_mix) + 1)


def test_unsupported_dtype_has_no_times(capsys: pytest.CaptureFixture[str]) -> None:
    rows = _rows(capsys, "a100-40gb", "bf16,fp8")
    fp8 = rows["fp8"]
    assert fp8["supported"] is False
    assert "a100-40gb has no fp8" in fp8["note"]
    assert fp8["t_compute_s"] is None and fp8["t_memory_s"] is None
    assert fp8["change"]["t_compute_s"] is None
    assert main(["what-if", "precision", "matmul", "64", "64", "64", "--hw", "a100-40gb"]) == 0
    text = capsys.readouterr().out
    assert "fp8: not supported: a100-40gb has no fp8 compute" in text


def test_shard_rows_carry_the_network(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["what-if", "precision", "shard", "4096", "8192", "4096", "--devices", "8"]
    out = _json(capsys, [*argv, "--along", "m", "--dtypes", "bf16,fp8", "--json"])
    bf16, fp8 = out["rows"]
    assert "t_network_s" in bf16
    # along m nothing is reduced: the local multiply is A[512, 8192] B[8192, 4096] -> C[512, 4096]
    assert bf16["memory_bytes"] == 2 * (512 * 8192 + 8192 * 4096 + 512 * 4096)
    assert fp8["change"]["memory_bytes"] == 0.5


def test_einsum_names_its_own_operands(capsys: pytest.CaptureFixture[str]) -> None:
    spec = "X[B,D] * W[D,F] -> Y[B,F]"
    argv = ["what-if", "precision", "einsum", spec, "--dims", "B=64,D=4096,F=4096"]
    out = _json(capsys, [*argv, "--hw", "tpu-v5e", "--dtypes", "bf16,w:int8", "--json"])
    mix = out["rows"][1]
    assert mix["dtype"] == "bf16+W:int8"
    assert mix["memory_bytes"] == 2 * 64 * 4096 + 4096 * 4096 + 2 * 64 * 4096
    assert mix["critical_m"] is None


def test_parse_dtype_mixes() -> None:
    names = ("a", "b", "out")
    assert parse_dtype_mixes("fp8,b:int8,fp32+c:bf16", names, "bf16") == [
        DtypeMix("fp8"),
        DtypeMix("fp8", (("b", "int8"),)),
        DtypeMix("fp32", (("out", "bf16"),)),
    ]
    assert parse_dtype_mixes("b:int8", names, "bf16") == [DtypeMix("bf16", (("b", "int8"),))]
    for bad in ("bf16,fp7", "bf16,,fp8", "bf16,x:int8", "bf16+fp8", "bf16,bf16", ""):
        with pytest.raises(InputError):
            parse_dtype_mixes(bad, names, "bf16")


@pytest.mark.parametrize(
    "extra",
    [
        ["matmul", "64", "64", "64", "--dtypes", "bf16,fp7"],
        ["matmul", "64", "64", "64", "--flops-per-s", "1e12"],
        ["einsum", "X[M_X,K] * W[K,N] -> Y[M_X,N]", "--dims", "M=8,K=8,N=8"],
        ["plan", "no-such-workload.toml", "--devices", "2"],
    ],
)
def test_bad_input_is_one_error_line(extra: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["what-if", "precision", *extra]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and err.count("\n") == 1


def test_plot_is_written_and_not_overwritten(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "wi.svg"
    argv = ["what-if", "precision", "matmul", "64", "64", "64", "--dtypes", "bf16,fp4"]
    assert main([*argv, "--plot", str(out)]) == 0
    assert out.read_text(encoding="utf-8").startswith("<?xml")
    capsys.readouterr()
    assert main([*argv, "--plot", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main([*argv, "--plot", str(out), "--force", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["plot"] == str(out)


def test_plan_rows_follow_the_dtypes_of_weights_and_activations(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # One forward layer x[M,K] * w[K,N] -> y[M,N] (w a weight) on one h100-sxm. By hand:
    # t_compute = 2 M K N / peak(dtype); memory per device = weights K N s_w plus the live
    # activations (M K + M N) s_x; fp8 halves both against bf16, w:int8 moves the weight bytes only.
    m = k = n = 4096
    path = tmp_path / "one.toml"
    path.write_text(
        f'[[layer]]\nname = "a"\nm = {m}\nk = {k}\nn = {n}\nweights = ["w"]\n', encoding="utf-8"
    )
    argv = ["what-if", "precision", "plan", str(path), "--hw", "h100-sxm", "--devices", "1"]
    assert main([*argv, "--dtypes", "bf16,fp8,w:int8", "--json"]) == 0
    rows = {r["dtype"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    chip = resolve_chip("h100-sxm")
    assert rows["bf16"]["t_compute_s"] == pytest.approx(2 * m * k * n / chip.peak("bf16"))
    assert rows["fp8"]["t_compute_s"] == pytest.approx(2 * m * k * n / chip.peak("fp8"))
    assert rows["bf16"]["memory_bytes"] == k * n * 2 + (m * k + m * n) * 2
    assert rows["fp8"]["memory_bytes"] == k * n * 1 + (m * k + m * n) * 1
    assert rows["bf16+w:int8"]["memory_bytes"] == k * n * 1 + (m * k + m * n) * 2
    assert rows["bf16+w:int8"]["dtypes"]["compute"] == "bf16"  # the wider input
    assert rows["bf16"]["critical_m"] is None and "t_network_s" in rows["bf16"]
