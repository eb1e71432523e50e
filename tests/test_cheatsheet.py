"""`shardline plot roofline --cheatsheet`: the sheet's numbers derived by hand from the chip file
(src/shardline/hardware/catalog/a100-40gb.toml), and the page written."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from shardline.answers.cheatsheet import cheatsheet
from shardline.cli.main import main
from shardline.hardware import resolve_chip

# a100-40gb.toml: NVIDIA A100 datasheet (SXM4 40GB)
W = 1.555e12  # HBM bytes/s
CAPACITY = 40e9
PEAKS = {
    "bf16": 312e12,
    "fp16": 312e12,
    "tf32": 156e12,
    "fp32": 19.5e12,
    "int8": 624e12,
    "int4": 1248e12,
    "fp64": 19.5e12,  # FP64 Tensor Core 19.5 TFLOPS (the datasheet)
}


def _critical_m(k: int, n: int, s: float, peak: float) -> int:
    """Smallest M with 2MKN/P >= s(MK + KN + MN)/W: M >= s K N / (2KN W/P - s K - s N)."""
    return math.ceil(s * k * n / (2 * k * n * W / peak - s * k - s * n))


def test_a100_sheet_numbers() -> None:
    sheet = cheatsheet(resolve_chip("a100-40gb"))
    assert sheet.mem_bytes_per_s == W and sheet.capacity_bytes == CAPACITY
    assert [d.dtype for d in sheet.dtypes] == list(PEAKS)
    for row in sheet.dtypes:
        assert row.peak_flops_per_s == PEAKS[row.dtype]
        assert row.ridge_flop_per_byte == pytest.approx(PEAKS[row.dtype] / W, rel=1e-12)
        assert row.source.startswith("NVIDIA A100 datasheet")
    by = {d.dtype: d.ridge_flop_per_byte for d in sheet.dtypes}
    assert round(by["bf16"], 1) == 200.6  # 312e12 / 1.555e12
    assert round(by["fp32"], 2) == 12.54  # 19.5e12 / 1.555e12
    assert sheet.shape_dtype == "bf16"
    got = {(s.k, s.n): s for s in sheet.shapes}
    # 4096 x 4096: 2 * 4096 * 4096 / 200.64 - 4 * 4096 = 150,849.6; 33,554,432 / that = 222.4
    assert got[(4096, 4096)].critical_m == 223
    assert got[(8192, 8192)].critical_m == 211
    assert got[(4096, 14336)].critical_m == 215
    for (k, n), row in got.items():
        assert row.critical_m == _critical_m(k, n, 2, PEAKS["bf16"])
        assert row.weight_bytes == 2 * k * n
        assert row.t_weight_read_s == pytest.approx(2 * k * n / W, rel=1e-12)


def test_sheet_in_another_dtype_and_bad_dtype(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sheet = cheatsheet(resolve_chip("a100-40gb"), "fp32")
    # fp32: s = 4 B, P = 19.5e12; 4 * 4096^2 / (2 * 4096^2 * 1.555e12 / 19.5e12 - 8 * 4096)
    assert sheet.shapes[0].critical_m == _critical_m(4096, 4096, 4, PEAKS["fp32"]) == 26
    out = tmp_path / "a.png"
    argv = ["plot", "roofline", "--hw", "a100-40gb", "--cheatsheet", "--dtype", "fp8"]
    assert main([*argv, "-o", str(out)]) == 2  # the A100 has no fp8
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: a100-40gb cannot compute in fp8; it has: bf16, fp16, tf32, fp32, int8, int4, fp64"
    ]
    assert not out.exists()


def test_cheatsheet_cli_writes_the_page(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    pytest.importorskip("matplotlib")
    base = ["plot", "roofline", "--hw", "a100-40gb", "--cheatsheet"]
    png, pdf, svg = tmp_path / "a.png", tmp_path / "a.pdf", tmp_path / "a.svg"
    assert main([*base, "-o", str(png)]) == 0
    text = capsys.readouterr().out
    assert "HBM bandwidth W = 1.555 TB/s; memory capacity 40 GB" in text
    assert "  bf16   312 TFLOP/s   200.6 FLOP/B" in text
    assert "(M, 4,096, 4,096)" in text and f"wrote {png}: one page" in text
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert main([*base, "-o", str(pdf), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["output"] == str(pdf) and payload["capacity_bytes"] == CAPACITY
    assert [s["critical_m"] for s in payload["shapes"]] == [223, 211, 215, 215]
    assert pdf.read_bytes().startswith(b"%PDF")
    assert main([*base, "-o", str(svg)]) == 0
    first = svg.read_bytes()
    assert main([*base, "-o", str(svg)]) == 2  # exists: needs --force
    assert main([*base, "-o", str(svg), "--force"]) == 0
    assert svg.read_bytes() == first  # deterministic
    capsys.readouterr()
    assert main([*base, "-o", str(tmp_path / "a.txt")]) == 2
    assert main([*base, "--matmul", "8x8x8", "-o", str(tmp_path / "b.png")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 2 and all(line.startswith("error:") for line in err)
