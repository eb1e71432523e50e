"""Plots: the seed 001 Question 3 curves reproduced exactly, deterministic PNG/SVG bytes, and the
roofline and strategy plots' data."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from shardline.answers.curves import batch_curves
from shardline.basics.options import Precision, RateOverrides
from shardline.cli.main import main
from shardline.report.plots import render_batch

matplotlib = pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parent.parent
SEED001_ARGS = [
    "--hw",
    "tpu-v5e",
    "--b-dtype",
    "int8",
    "--flops-per-s",
    "1.97e14",
    "--mem-bw",
    "8.2e11",
]


def seed001_roofline(B: np.ndarray, D: int, F: int) -> np.ndarray:
    """Seed 001 Question 3, verbatim: bf16 X[B,D] . int8 W[D,F] -> bf16 Z[B,F], exact bytes."""
    total_flops = 2 * B * D * F
    flops_time = total_flops / 1.97e14
    comms_time = (2 * B * D + D * F + 2 * B * F) / 8.2e11
    total_time = np.maximum(flops_time, comms_time)
    return total_flops / total_time


def test_batch_curves_equal_seed001_question3() -> None:
    bs = np.arange(1, 512)
    plot = batch_curves(
        [(4096, 4096), (1024, 1024)],
        bs,
        "tpu-v5e",
        Precision("bf16", {"b": "int8"}),
        RateOverrides(flops_per_s=1.97e14, mem_bytes_per_s=8.2e11),
    )
    assert [c.label for c in plot.curves] == ["F=D=4096", "F=D=1024"]
    np.testing.assert_array_equal(plot.curves[0].y, seed001_roofline(bs, 4096, 4096))
    np.testing.assert_array_equal(plot.curves[1].y, seed001_roofline(bs, 1024, 1024))
    # the turn to compute-bound: the smallest B with 2BDF/P >= (2BD + DF + 2BF)/W
    for curve, d in zip(plot.curves, (4096, 1024), strict=True):
        flops = 2 * bs * d * d
        first = int(bs[np.argmax(flops / 1.97e14 >= (2 * bs * d + d * d + 2 * bs * d) / 8.2e11)])
        assert curve.critical_x == first


def test_plot_batch_cli_text_json_and_files(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    png, svg = tmp_path / "q3.png", tmp_path / "q3.svg"
    args = ["plot", "batch", "--shapes", "4096x4096,1024x1024", *SEED001_ARGS]
    assert main([*args, "-o", str(png)]) == 0
    text = capsys.readouterr().out
    assert text.startswith("F=D=4096: compute-bound from B = 137 (reaches the 197 TFLOP/s peak)")
    assert "F=D=1024: compute-bound from B = 227" in text
    assert main([*args, "-o", str(svg), "--json"]) == 0
    payload = json.loads(capsys.readouterr().out)
    assert payload["batch"] == list(range(1, 512))
    assert (
        payload["curves"][0]["achieved_flops_per_s"]
        == seed001_roofline(np.arange(1, 512), 4096, 4096).tolist()
    )
    assert png.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    content = svg.read_text(encoding="utf-8")
    assert 'id="curve-0"' in content and 'id="curve-1"' in content and 'id="peak"' in content
    assert "<dc:date>" not in content and "Matplotlib v" not in content


def test_plots_are_byte_deterministic_and_ignore_user_style(tmp_path: Path) -> None:
    bs = np.arange(1, 64)
    plot = batch_curves([(1024, 1024)], bs, "tpu-v5e")
    for suffix in (".png", ".svg"):
        first, second = tmp_path / f"a{suffix}", tmp_path / f"b{suffix}"
        render_batch(plot, first)
        with matplotlib.rc_context({"lines.linewidth": 7.0, "axes.facecolor": "red"}):
            render_batch(plot, second)  # a user's style must not leak in
        assert first.read_bytes() == second.read_bytes(), suffix
        other = tmp_path / f"c{suffix}"
        render_batch(batch_curves([(2048, 2048)], bs, "tpu-v5e"), other)
        assert other.read_bytes() != first.read_bytes()


def test_plot_roofline_from_the_seed003_sheet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from shardline.answers.sheet_model import roofline_rows
    from shardline.io.sheets import read_shape_rows

    sheet = ROOT / "examples" / "seed003_shapes.csv"
    out = tmp_path / "roof.svg"
    assert (
        main(
            [
                "plot",
                "roofline",
                "--hw",
                "a100-40gb",
                "--from",
                str(sheet),
                "--matmul",
                "16x4096x16384=decode 16",
                "-o",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    payload = json.loads(capsys.readouterr().out)
    table = read_shape_rows(sheet)
    result = roofline_rows(table, "a100-40gb")
    assert len(payload["points"]) == len(table) + 1
    for i, point in enumerate(payload["points"][:-1]):
        assert point["label"] == table.names[i]  # type: ignore[index]
        assert point["intensity_flop_per_byte"] == result.columns["intensity_flop_per_byte"][i]
        # attainable on the roofline: min(P, I*W) = F / max(F/P, Q/W)
        expected = min(312e12, point["intensity_flop_per_byte"] * 1.555e12)
        assert point["flops_per_s"] == pytest.approx(expected, rel=1e-12)
    assert payload["points"][-1]["label"] == "decode 16"
    # one roof per distinct peak (bf16 = fp16 share one) plus the L2 and shared-memory levels
    labels = [r["label"] for r in payload["roofs"]]
    assert "bf16/fp16 peak, HBM" in labels and "L2 (bf16)" in labels and len(labels) == 7
    svg = out.read_text(encoding="utf-8")
    assert svg.count('id="point-') == len(table) + 1 and svg.count('id="roof-') == 7


def test_plot_strategies(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from shardline.sharding.compare import compare

    out = tmp_path / "s.svg"
    assert (
        main(
            [
                "plot",
                "strategies",
                "8192",
                "1024",
                "8192",
                "--devices",
                "8",
                "--hw",
                "h100-sxm",
                "--top",
                "5",
                "-o",
                str(out),
                "--json",
            ]
        )
        == 0
    )
    payload = json.loads(capsys.readouterr().out)
    ranked = compare(8192, 1024, 8192, 8, "h100-sxm")[:5]
    assert [s["t_s"] for s in payload["strategies"]] == [s.t_s for s in ranked]
    assert [s["t_network_s"] for s in payload["strategies"]] == [s.t_network_s for s in ranked]
    svg = out.read_text(encoding="utf-8")
    assert svg.count('id="bar-') == 3 * 5  # compute, memory, network per strategy


def test_plot_refusals(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    existing = tmp_path / "x.png"
    existing.write_bytes(b"keep")
    cases = [
        ["plot", "batch", "--shapes", "1024x1024", "-o", str(tmp_path / "x.pdf")],
        ["plot", "batch", "--shapes", "1024x1024", "-o", str(existing)],
        ["plot", "batch", "--shapes", "1024x1024", "-o", str(tmp_path / "no" / "x.png")],
        ["plot", "batch", "--shapes", "1024", "-o", str(tmp_path / "y.png")],
        ["plot", "batch", "--shapes", "1024x1024", "--batch", "9:3", "-o", str(tmp_path / "y.png")],
        ["plot", "roofline", "--matmul", "0x1x1", "-o", str(tmp_path / "y.png")],
    ]
    for argv in cases:
        assert main(argv) == 2, argv
    err = capsys.readouterr().err.splitlines()
    assert len(err) == len(cases) and all(line.startswith("error: ") for line in err)
    assert existing.read_bytes() == b"keep" and not (tmp_path / "y.png").exists()


def test_names_with_dollar_signs_are_plain_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # matplotlib reads "$...$" as mathtext; "$\frac{$" is invalid mathtext and used to crash the
    # plot with a traceback. A name is text, drawn as written.
    src = tmp_path / "s.csv"
    src.write_text(
        'name,M,K,N\n"cost $5 and $6",16,4096,4096\n"bad $\\frac{$",4096,4096,4096\n',
        encoding="utf-8",
    )
    for suffix in (".png", ".svg"):
        out = tmp_path / f"r{suffix}"
        code = main(
            [
                "plot",
                "roofline",
                "--hw",
                "a100-40gb",
                "--from",
                str(src),
                "--matmul",
                "8x8x8=$x^2$",
                "-o",
                str(out),
            ]
        )
        captured = capsys.readouterr()
        assert code == 0 and captured.err == "" and "3 points" in captured.out
        assert out.stat().st_size > 0


def test_sheet_curves_are_the_roofline_of_each_costliest_shape(tmp_path: Path) -> None:
    """The report's curves come from the core: achieved FLOP/s = F / max(F/P, Q/W) with exact
    bytes Q = 2MK + 2KN + 2MN (bf16) on the A100 40GB (312 TFLOP/s bf16, 1.555 TB/s)."""
    from shardline.answers.curves import sheet_curves
    from shardline.answers.sheet_model import roofline_rows
    from shardline.io.sheets import read_shape_rows

    src = tmp_path / "s.csv"
    src.write_text("M,K,N,count\n16,4096,4096,1\n4096,1024,1024,100\n", encoding="utf-8")
    result = roofline_rows(read_shape_rows(src), "a100-40gb")
    curves = sheet_curves(result, points=40)
    # costliest first by count x lower bound: row 2 (100 runs) before row 1
    assert [(c.k, c.n, c.dtype, c.members) for c in curves] == [
        (1024, 1024, "bf16", [1]),
        (4096, 4096, "bf16", [0]),
    ]
    for c in curves:
        m = c.m.astype(np.float64)
        flops = 2 * m * c.k * c.n
        q = 2 * (m * c.k + c.k * c.n + m * c.n)
        expected = flops / np.maximum(flops / 312e12, q / 1.555e12)
        np.testing.assert_allclose(c.curve.y, expected, rtol=1e-12)
        assert c.m[0] == 1 and c.m[-1] >= 16
    # the grid reaches past four times the critical M of K = N = 4096
    crit = result.columns["critical_m"][0]
    assert curves[1].m[-1] == max(2 * 16, 4 * int(crit), 16)
