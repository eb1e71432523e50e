"""Tiles and on-chip memory (shardline.ops.tiling, `shardline tile`): formulas derived by hand."""

from __future__ import annotations

import json
import math

import pytest

from shardline.basics.options import Precision
from shardline.cli.main import main
from shardline.ops.tiling import (
    Gemm,
    Tile,
    analyze_tile,
    l2_blocked_hbm_bytes,
    parse_tile,
    smallest_tile,
    tile_intensity,
    tile_traffic_bytes,
    working_set_bytes,
)

BF16 = Precision("bf16")


def test_traffic_formula_by_hand() -> None:
    """M=K=N=1024 bf16, 128x256 tiles: A is read ceil(1024/256) = 4 times, B ceil(1024/128) = 8
    times, C written once: 2*1024^2*(4 + 8 + 1) bytes."""
    assert tile_traffic_bytes(Gemm(1024, 1024, 1024, 2, 2, 2), 128, 256) == 2 * 1024**2 * 13
    # a non-dividing tile still reads whole panels: ceil(1000/128) = 8, ceil(1000/256) = 4
    square = Gemm(1000, 1000, 1000, 2, 2, 2)
    assert tile_traffic_bytes(square, 128, 256) == 2 * 1000**2 * (4 + 8 + 1)
    # a batch of 3 moves three times the bytes
    assert tile_traffic_bytes(Gemm(1000, 1000, 1000, 2, 2, 2, batch=3), 128, 256) == (
        3 * 2 * 1000**2 * (4 + 8 + 1)
    )


def test_tile_intensity_square_is_b_over_s() -> None:
    """Square b, one dtype: 2*b*b / (s*b + s*b) = b/s."""
    for b in (64, 128, 256):
        for s in (1, 2, 4):
            assert tile_intensity(b, b, s, s) == pytest.approx(b / s)


def test_working_set_by_hand() -> None:
    """128x256x64 bf16, 2 stages: 2*(2*128*64 + 2*64*256) + 4*128*256 = 98,304 + 131,072 B."""
    assert working_set_bytes(128, 256, 64, 2, 2, 2) == 229_376


def test_smallest_tile_on_h100_bf16() -> None:
    """Fed from L2 at 9.8e12 B/s with the achievable 794.5e12 FLOP/s, a tile needs
    2*bm*bn/(2bm + 2bn) >= 81.07 FLOP/B: 128x128 gives 64 (too little), 128x256 gives 85.3 and its
    working set 229,376 B fits the 233,472 B of shared memory per SM; 256x256 (128) does not fit."""
    from shardline.hardware import load_chip

    h100 = load_chip("h100-sxm")
    ridge = 794.5e12 / 9.8e12
    assert smallest_tile(h100, 2, 2, 64, ridge) == Tile(128, 256, 64)
    assert working_set_bytes(256, 256, 64, 2, 2) > 233_472


def test_l2_blocked_traffic_is_minimum_when_everything_fits() -> None:
    """A 1024^3 bf16 multiply: the panels of all tiles (K*(2*1024 + 2*1024) = 4 MiB) fit a 50 MB
    L2, so HBM sees each operand once."""
    gemm = Gemm(1024, 1024, 1024, 2, 2, 2)
    assert l2_blocked_hbm_bytes(gemm, 128, 256, 50e6) == 3 * 2 * 1024**2
    # no L2: the plain tile traffic
    assert l2_blocked_hbm_bytes(gemm, 128, 256, None) == tile_traffic_bytes(gemm, 128, 256)


def test_l2_blocked_traffic_does_not_grow_with_a_bigger_tile() -> None:
    """Issue 28: `tile 8192 8192 8192 --hw h100` showed 2.15 GB of HBM traffic for 256x128 and
    1.74 GB for 64x64 (the group was g x g tiles, a tall tile made a tall block). With gm and gn
    chosen apart, a K-row of the panels may take 50e6 / 8192 = 6,103 B of the H100's 50 MB L2:
    64x64: 128 gm + 128 gn <= 6,103, gm = 23, gn = 24 (blocks 1472 x 1536); 256x128: 512 gm +
    256 gn <= 6,103, gm = 6, gn = 11 (1536 x 1408). Both read A and B in ceil(8192/1536) +
    ceil(8192/1472) = 6 + 6 = 12 panel sweeps of 2 * 8192^2 B, plus C once: 13 * 134,217,728 B."""
    gemm = Gemm(8192, 8192, 8192, 2, 2, 2)
    expected = 13 * 2 * 8192**2
    assert expected == 1_744_830_464
    for bm, bn in ((64, 64), (128, 128), (128, 256), (256, 128)):
        assert l2_blocked_hbm_bytes(gemm, bm, bn, 50e6) == expected
    # a tile whose L2 panel alone overflows the L2: one tile per group, the plain tile traffic
    tall = Gemm(8192, 2**20, 8192, 2, 2, 2)  # 2^20 * (2*256 + 2*128) = 805 MB per K-panel pair
    assert l2_blocked_hbm_bytes(tall, 256, 128, 50e6) == tile_traffic_bytes(tall, 256, 128)


def test_analyze_user_tile_h100() -> None:
    r = analyze_tile(8192, 8192, 8192, "h100-sxm", precision=BF16, tile="128x256x64")
    assert r.fits is True and r.compute_bound is True and r.feeding_level == "L2"
    assert r.working_set_bytes == 229_376
    levels = {level.name: level for level in r.levels}
    assert levels["L2"].bytes == 2 * 8192**2 * (8192 // 256 + 8192 // 128 + 1)
    assert levels["L2"].ridge_flop_per_byte == pytest.approx(794.5e12 / 9.8e12)
    assert levels["HBM"].ridge_flop_per_byte == pytest.approx(794.5e12 / 3.35e12)
    q = r.quantization  # 64*32 = 2048 tiles over 132 SMs: 16 waves
    assert (q["tiles"], q["waves"]) == (2048, math.ceil(2048 / 132))
    # with the datasheet peak the L2 ridge is 989.4e12 / 9.8e12 = 101: 128x256 no longer reaches it
    peak = analyze_tile(
        8192, 8192, 8192, "h100-sxm", precision=BF16, tile="128x256x64", use_peak=True
    )
    assert peak.compute_bound is False and peak.flops_per_s_source == "peak"


def test_tpu_tile_is_fed_from_hbm() -> None:
    r = analyze_tile(4096, 4096, 4096, "tpu-v5e", precision=BF16)
    assert r.feeding_level == "HBM" and len(r.levels) == 1
    assert r.tile.bm % 128 == 0 and r.tile.bn % 128 == 0
    # the heuristic picks the smallest MXU-multiple tile that reaches the HBM ridge 187.15e12/819e9
    assert r.compute_bound and r.tile_intensity_flop_per_byte >= 187.15e12 / 8.19e11


def test_parse_tile() -> None:
    assert parse_tile("128x256x64") == Tile(128, 256, 64)
    assert parse_tile("128x256", elem_bytes=4) == Tile(128, 256, 32)  # 128 bytes of K


def test_cli_tile_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["tile", "8192", "8192", "8192", "--hw", "h100", "--tile", "128x256x64"]) == 0
    out = capsys.readouterr().out
    # the answer first: 2*128*256/(2*128 + 2*256) = 85.33 >= L2 ridge 794.5e12/9.8e12 = 81.07
    assert out.startswith("COMPUTE-BOUND: tile intensity 85.33 FLOP/B >= L2 ridge 81.07 FLOP/B")
    assert out.splitlines()[1].startswith("tile 128x256x64 (user)")
    assert "229,376 B" in out
    assert main(["tile", "4096", "4096", "4096", "--hw", "h100", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["chosen_by"] == "library heuristic"
    assert {
        "levels",
        "tile",
        "fits",
        "working_set_bytes",
        "smallest",
        "quantization",
        "tile_intensity_flop_per_byte",
    } <= set(data)
    assert data["smallest"]["text"] == "128x256x64"


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["tile", "1000", "1000", "1000", "--tile", "128x128x64"], "does not divide"),
        (["tile", "8192", "8192", "8192", "--tile", "512x512x64"], "does not fit"),
        (["tile", "8192", "8192", "8192", "--tile", "128by64"], "cannot read tile"),
        (["tile", "8192", "8192", "8192", "--stages", "0"], "--stages"),
        (["tile", "0", "8", "8"], "dimension M"),
    ],
)
def test_cli_tile_bad_input(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:") and words in lines[0]


def test_tile_json_reports_the_model_traffic_formula(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(["tile", "4096", "2048", "1024", "--hw", "tpu-v5e", "--tile", "128x128x64", "--json"])
        == 0
    )
    out = json.loads(capsys.readouterr().out)
    m, k, n, s = 4096, 2048, 1024, 2
    # docs/model.md section 3: sA*M*K*ceil(N/bn) + sB*K*N*ceil(M/bm) + sC*M*N
    expected = s * m * k * math.ceil(n / 128) + s * k * n * math.ceil(m / 128) + s * m * n
    assert out["tile_traffic_bytes"] == expected


def test_tiling_and_prediction_import_in_one_direction() -> None:
    """predict imports tiling and achievable; neither imports predict, not even inside a
    function (the cycle that lazy imports used to hide)."""
    import ast
    from pathlib import Path

    import shardline

    src = Path(shardline.__file__).parent / "ops"
    for name in ("tiling", "achievable", "roofline"):
        tree = ast.parse((src / f"{name}.py").read_text(encoding="utf-8"))
        imported = {
            node.module
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom) and node.module is not None
        }
        assert "shardline.ops.predict" not in imported, name
        assert not any(
            isinstance(node, ast.Import | ast.ImportFrom) and node.col_offset > 0
            for node in ast.walk(tree)
        ), f"{name}.py imports inside a function"


def test_gpu_tile_time_by_hand() -> None:
    """H100 (132 SMs), 8192^3 bf16, 128x256 tiles: 64*32 = 2048 tiles, ceil(2048/132) = 16 waves;
    one SM runs at min(P/132, tile intensity 85.33 FLOP/B * 9.8e12 B/s / 132) and a tile does
    2*128*256*8192 FLOPs. Plus, once (H100's persistent kernels overlap the rest with other
    tiles' math), the fill of the first BK = 64 slice, 64*(2*128 + 2*256) B, and the epilogue of
    the bf16 output tile, 2*128*256 B, at one SM's share of the L2, 9.8e12/132 B/s; and each of
    the first 15 waves waits for its 132 output tiles, 132*2*128*256 B, to reach memory at the
    achievable 3.14e12 B/s (docs/prediction.md, "Short K")."""
    from shardline.hardware import load_chip
    from shardline.ops.tiling import gpu_tile_time

    h100 = load_chip("h100-sxm")
    rate = 794.5e12
    t, waves = gpu_tile_time(h100, Gemm(8192, 8192, 8192, 2, 2, 2), 128, 256, rate)
    intensity = 2 * 128 * 256 / (2 * 128 + 2 * 256)
    sm_rate = min(rate / 132, intensity * 9.8e12 / 132)
    assert waves == 16
    fixed = (64 * (2 * 128 + 2 * 256) + 2 * 128 * 256) / (9.8e12 / 132)
    stores = 15 * 132 * 2 * 128 * 256 / 3.14e12
    assert float(t) == pytest.approx(
        16 * 2 * 128 * 256 * 8192 / sm_rate + fixed + stores, rel=1e-12
    )


def test_gpu_tile_fixed_cost_every_wave_on_a100_by_hand() -> None:
    """A100 (108 SMs; its GEMM kernels run one tile per thread block, epilogue after mainloop),
    the tensor-parallel attention output projection [8192, 768] x [768, 6144] bf16 in 128x128
    tiles: 64*48 = 3072 tiles, ceil(3072/108) = 29 waves. Every wave adds the fill of the first
    BK = 64 slice, 64*(2*128 + 2*128) = 32768 B, and the bf16 output tile, 2*128*128 = 32768 B,
    at one SM's share of the L2, 5.4e12/108 = 50e9 B/s: 65536 B / 50e9 B/s = 1.31 us; and every
    wave but the last waits for its 108 output tiles, 108*32768 B, to reach memory, 1.769e12 B/s."""
    from shardline.hardware import load_chip
    from shardline.ops.tiling import gpu_tile_fixed_s, gpu_tile_time

    a100 = load_chip("a100-80gb")
    rate = 271.2e12  # a100-80gb.toml achievable bf16
    gemm = Gemm(8192, 768, 6144, 2, 2, 2)
    t, waves = gpu_tile_time(a100, gemm, 128, 128, rate)
    # tile intensity 2*128*128/(2*128 + 2*128) = 64 FLOP/B * 50e9 B/s = 3.2e12 FLOP/s per SM,
    # above 271.2e12/108 = 2.51e12: compute-limited
    sm_rate = min(rate / 108, 64 * 5.4e12 / 108)
    fixed = (32768 + 32768) / (5.4e12 / 108)
    assert waves == 29
    assert float(gpu_tile_fixed_s(a100, gemm, 128, 128)) == pytest.approx(fixed, rel=1e-12)
    stores = 28 * 108 * 32768 / 1.769e12  # a100-80gb.toml achievable memory rate
    assert float(t) == pytest.approx(
        29 * (2 * 128 * 128 * 768 / sm_rate + fixed) + stores, rel=1e-12
    )
    # K shorter than BK: the first slice is all of K (here 32), and split-K drops the epilogue
    # (its fp32 partial tiles are the reduction term)
    short = Gemm(8192, 32, 6144, 2, 2, 2)
    fill = 32 * (2 * 128 + 2 * 128) / (5.4e12 / 108)
    assert float(gpu_tile_fixed_s(a100, short, 128, 128)) == pytest.approx(fill + 32768 / 50e9)
    assert float(gpu_tile_fixed_s(a100, gemm, 128, 128, split=4)) == pytest.approx(32768 / 50e9)
