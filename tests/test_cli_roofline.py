"""CLI smoke tests of matmul, einsum and hw: the JSON contract and bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from shardline.cli.main import main

MATMUL_KEYS = {
    "flops",
    "bytes",
    "intensity_flop_per_byte",
    "ridge_flop_per_byte",
    "bound",
    "t_compute_s",
    "t_memory_s",
    "t_lower_s",
    "t_upper_s",
    "critical_m",
    "hardware",
}


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:  # type: ignore[type-arg]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_matmul_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, ["matmul", "4096", "8192", "1024", "--hw", "a100-40gb", "--json"])
    assert set(out) >= MATMUL_KEYS
    m, k, n = 4096, 8192, 1024
    assert out["flops"] == 2 * m * k * n
    assert out["bytes"] == {
        "a": 2 * m * k,
        "b": 2 * k * n,
        "out": 2 * m * n,
        "total": 2 * (m * k + k * n + m * n),
    }
    assert out["hardware"] == {
        "name": "a100-40gb",
        "flops_per_s": 312e12,
        "mem_bytes_per_s": 1.555e12,
        "compute_dtype": "bf16",
    }
    assert out["bound"] == "compute"
    assert isinstance(out["critical_m"], int)


def test_matmul_overrides_reproduce_the_textbook(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(
        capsys,
        [
            "matmul",
            "240",
            "4096",
            "4096",
            "--hw",
            "tpu-v5e",
            "--dtype",
            "int8",
            "--flops-per-s",
            "3.94e14",
            "--mem-bw",
            "820 GB/s",
            "--json",
        ],
    )
    assert out["hardware"]["flops_per_s"] == 3.94e14
    assert out["hardware"]["mem_bytes_per_s"] == 8.2e11
    assert out["ridge_flop_per_byte"] == pytest.approx(3.94e14 / 8.2e11)


def test_per_operand_dtypes(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(
        capsys, ["matmul", "64", "4096", "4096", "--hw", "tpu-v5e", "--b-dtype", "int8", "--json"]
    )
    assert out["bytes"]["b"] == 4096 * 4096 and out["bytes"]["a"] == 2 * 64 * 4096
    assert out["hardware"]["compute_dtype"] == "bf16"


def test_einsum_json(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(
        capsys,
        [
            "einsum",
            "X[B,D] * W[B,D,F] -> Y[B,F]",
            "--dims",
            "B=64,D=4096,F=4096",
            "--dtype",
            "int8",
            "--hw",
            "tpu-v5e",
            "--json",
        ],
    )
    assert set(out["bytes"]) == {"X", "W", "Y", "total"}
    assert out["bound"] == "memory" and out["intensity_flop_per_byte"] < 2


def test_einsum_dtypes_per_operand(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(
        capsys,
        [
            "einsum",
            "X[B,D] * W[D,F] -> Y[B,F]",
            "--dims",
            "B=8,D=16,F=32",
            "--dtypes",
            "W=int8",
            "--json",
        ],
    )
    assert out["bytes"] == {
        "X": 2 * 8 * 16,
        "W": 16 * 32,
        "Y": 2 * 8 * 32,
        "total": 2 * 8 * 16 + 16 * 32 + 2 * 8 * 32,
    }


def test_text_calls_the_bound_first(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["matmul", "8192", "8192", "8192", "--hw", "h100"]) == 0
    lines = [line for line in capsys.readouterr().out.splitlines() if line.strip()]
    # the very first line is the call: I = 2n/(3s) = 2*8192/6 = 2,731 FLOP/B against
    # R = 989.4e12 / 3.35e12 = 295.3 FLOP/B, with the rates that make the ridge
    assert lines[0] == (
        "COMPUTE-BOUND: intensity 2,731 FLOP/B >= ridge 295.3 FLOP/B (989.4 TFLOP/s / 3.35 TB/s)"
    )
    assert any("F = 2·M·K·N = 2 × 8,192 × 8,192 × 8,192" in line for line in lines)
    # a memory-bound call is first too: seed 001 Q2, I = 2*64*4096*4096 / (2*64*4096 + 4096**2
    # + 2*64*4096) = 120.5 FLOP/B < R = 1.97e14 / 8.2e11 = 240.2 FLOP/B
    argv = [
        "matmul",
        "64",
        "4096",
        "4096",
        "--hw",
        "v5e",
        "--b-dtype",
        "int8",
        "--flops-per-s",
        "1.97e14",
        "--mem-bw",
        "820 GB/s",
    ]
    assert main(argv) == 0
    first = capsys.readouterr().out.splitlines()[0]
    assert first == (
        "MEMORY-BOUND: intensity 120.5 FLOP/B < ridge 240.2 FLOP/B (197 TFLOP/s / 820 GB/s)"
    )


def test_hw_list_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["hw", "list"]) == 0
    assert "tpu-v6e" in capsys.readouterr().out
    out = _json(capsys, ["hw", "show", "H100", "--json"])
    assert out["ridge_flop_per_byte"]["bf16"] == pytest.approx(989.4e12 / 3.35e12)
    assert out["sources"]["memory.bytes_per_s"]
    assert main(["hw", "show", "tpu-v5e"]) == 0
    assert "ridge 240.5 FLOP/B" in capsys.readouterr().out


def test_hw_list_names_some_chips(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    """`hw list NAME ...`: the catalog's chips named (aliases too), in the catalog's order, then
    a chip file's; an unknown name is one error line."""
    out = _json(capsys, ["hw", "list", "v5p", "H100", "h100-sxm", "--json"])
    assert [c["name"] for c in out["chips"]] == ["h100-sxm", "tpu-v5p"]
    chip = tmp_path / "mine.toml"
    text = (
        Path(__file__).parent.parent / "src/shardline/hardware/catalog/h100-sxm.toml"
    ).read_text()
    chip.write_text(text.replace('name = "h100-sxm"', 'name = "mine"'))
    out = _json(capsys, ["hw", "list", str(chip), "b200", "--json"])
    assert [c["name"] for c in out["chips"]] == ["b200", "mine"]
    assert main(["hw", "list", "h900"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: unknown chip 'h900'") and err.count("\n") == 1


@pytest.mark.parametrize(
    "argv",
    [
        ["matmul", "0", "8", "8"],
        ["matmul", "-5", "8", "8"],
        ["matmul", "8.5", "8", "8"],
        ["matmul", "1e15", "8", "8"],
        ["matmul", "abc", "8", "8"],
        ["matmul", "8", "8", "8", "--hw", "h900"],
        ["matmul", "8", "8", "8", "--dtype", "fp7"],
        ["matmul", "8", "8", "8", "--hw", "a100", "--dtype", "fp8"],
        ["matmul", "8", "8", "8", "--mem-bw", "-3"],
        ["matmul", "8", "8"],
        ["einsum", "A[M,K] * A[K,N] -> C[M,N]", "--dims", "M=1,K=1,N=1"],
        ["einsum", "A[M,K] * B[K,N] -> C[M,N]", "--dims", "M=1,K=1"],
        ["einsum", "A[M,K] * B[K,N] -> C[M,N]", "--dims", "M=1,K=1,N=1,Q=2"],
        ["einsum", "A[M,K] * B[K,N]", "--dims", "M=1,K=1,N=1"],
        ["einsum", "A[M,K] * B[K,N] -> C[M,N]", "--dims", "M=1,K=1,N=1", "--dtypes", "Z=int8"],
        ["hw", "show", "nope"],
        ["hw", "show", "missing.toml"],
        ["matmul", "8", "8", "8", "--flops-per-s", "1e400"],  # parses to inf
        ["matmul", "8", "8", "8", "--mem-bw", "1e400", "--json"],
        [
            "einsum",
            "A[M,K] * B[K,N] -> C[M,N]",
            "--dims",
            "M=1,K=1,N=1",
            "--dtypes",
            "A=int8,A=bf16",
        ],
    ],
)
def test_bad_input_is_one_error_line(capsys: pytest.CaptureFixture[str], argv: list[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        raise SystemExit(main(argv))
    assert exc.value.code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ")


def test_invalid_toml_and_negative_via_subprocess(tmp_path: Path) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("name = [", encoding="utf-8")
    for argv in (
        ["matmul", "8", "8", "8", "--hw", str(bad)],
        ["matmul", "--", "-5", "4096", "4096"],
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "shardline.cli.main", *argv],
            capture_output=True,
            text=True,
            check=False,
        )
        assert proc.returncode == 2
        assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1


def test_cli_start_up_imports_no_heavy_modules() -> None:
    code = (
        "import sys; from shardline.cli.main import main; main(['matmul','8','8','8','--json']);"
        "heavy = [m for m in ('matplotlib','openpyxl','torch','plotly','pandas','scipy') "
        "if m in sys.modules]; print(heavy)"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert proc.stdout.strip().splitlines()[-1] == "[]"


def test_default_dtype_follows_the_chip(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # a calibrated CPU file computes in fp32 and fp64 only: no --dtype must not mean bf16
    chip = tmp_path / "cpu.toml"
    chip.write_text(
        'name = "cpu"\nkind = "cpu"\n[peak_flops_per_s]\nfp32 = 1e11\nfp64 = 5e10\n'
        "[memory]\ncapacity_bytes = 16e9\nbytes_per_s = 2e10\n",
        encoding="utf-8",
    )
    out = _json(capsys, ["matmul", "512", "512", "512", "--hw", str(chip), "--json"])
    assert out["dtypes"]["compute"] == "fp32" and out["bytes"]["a"] == 4 * 512 * 512
    assert _json(capsys, ["matmul", "8", "8", "8", "--json"])["dtypes"]["a"] == "bf16"
