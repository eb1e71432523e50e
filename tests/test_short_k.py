"""Short-K GEMMs: every wave but the last waits for its output tiles to reach memory
(`shardline.ops.tiling.gpu_wave_store_s`, docs/prediction.md "Short K"), checked by hand and against
DeepGEMM's published H800 table (deepseek-ai/DeepGEMM README.md, initial commit a6d97a1)."""

from __future__ import annotations

import pytest

from shardline.hardware import load_chip
from shardline.ops.predict import with_prediction
from shardline.ops.roofline import matmul
from shardline.ops.tiling import Gemm, gpu_tile_time, gpu_wave_store_s

H100_SMS = 132
H100_MEM_ACHIEVABLE = 3.14e12  # h100-sxm.toml achievable.mem_bytes_per_s
H100_L2_BYTES_PER_S = 9.8e12
H100_FP8 = 1402.6e12  # h100-sxm.toml achievable fp8
H100_GEMM_FLOOR_S = 5.2e-6


def test_one_wave_store_by_hand() -> None:
    """132 bf16 output tiles of 256 x 128 (65536 B each) at 3.14e12 B/s: 2.755 us. It scales with
    the tile's bytes (an fp8 output halves it) and not with K."""
    h100 = load_chip("h100-sxm")
    store = 132 * 2 * 256 * 128 / 3.14e12
    assert float(gpu_wave_store_s(h100, Gemm(4096, 512, 32768, 1, 1, 2), 256, 128)) == (
        pytest.approx(store, rel=1e-12)
    )
    assert float(gpu_wave_store_s(h100, Gemm(4096, 16384, 32768, 1, 1, 1), 256, 128)) == (
        pytest.approx(store / 2, rel=1e-12)
    )


def test_deepgemm_k512_by_hand() -> None:
    """DeepGEMM's 4096 x 32768 x 512 fp8 GEMM (bf16 out) on H100 SXM compute and HBM, 256 x 128
    tiles: 16 * 256 = 4096 tiles, ceil(4096 / 132) = 32 waves. One SM runs at min(1402.6e12/132,
    tile intensity 2*256*128/(256 + 128) = 170.7 FLOP/B x 9.8e12/132) = 1402.6e12/132; a wave's
    math is 2*256*128*512 FLOPs. Plus one fill and epilogue at one SM's share of the L2,
    (128*(256 + 128) + 2*256*128) B, and 31 waves each storing 132 output tiles of 65536 B at
    3.14e12 B/s (85.4 us, what the long-K rate misses), plus the 5.2 us GEMM kernel floor."""
    h100 = load_chip("h100-sxm")
    gemm = Gemm(4096, 512, 32768, 1, 1, 2)
    t, waves = gpu_tile_time(h100, gemm, 256, 128, H100_FP8)
    math = 32 * 2 * 256 * 128 * 512 / (H100_FP8 / H100_SMS)
    fixed = (128 * (256 + 128) + 2 * 256 * 128) / (H100_L2_BYTES_PER_S / H100_SMS)
    stores = 31 * H100_SMS * 2 * 256 * 128 / H100_MEM_ACHIEVABLE
    assert waves == 32
    assert float(t) == pytest.approx(math + fixed + stores, rel=1e-12)
    r = matmul(4096, 512, 32768, hw="h100-sxm", a_dtype="fp8", b_dtype="fp8", out_dtype="bf16")
    p = with_prediction(r, launch="graphs")
    assert p.prediction is not None
    assert (p.prediction["tile_m"], p.prediction["tile_n"]) == (256, 128)
    assert p.predicted_s == pytest.approx(H100_GEMM_FLOOR_S + math + fixed + stores, rel=1e-9)
    # the README: 590 TFLOPS = 232.9 us measured; the model was 54% fast without the stores
    measured_s = 2 * 4096 * 32768 * 512 / 590e12
    assert abs(p.predicted_s / measured_s - 1) < 0.20


def test_one_wave_and_split_k_pay_no_store() -> None:
    """A GEMM of one wave ends when its tiles are in the L2 (the epilogue of `gpu_tile_fixed_s`):
    no store term; split-K's partial tiles are priced by its reduction term instead."""
    h100 = load_chip("h100-sxm")
    one_wave = Gemm(1024, 512, 2048, 1, 1, 2)  # 8 x 16 = 128 tiles of 128 x 128: one wave
    t, waves = gpu_tile_time(h100, one_wave, 128, 128, H100_FP8)
    fixed = (128 * (128 + 128) + 2 * 128 * 128) / (H100_L2_BYTES_PER_S / H100_SMS)
    # fp8 128 x 128 tiles: 2*128*128/(128 + 128) = 128 FLOP/B x 9.8e12/132 B/s is below
    # 1402.6e12/132 FLOP/s: the L2 feed limits the SM
    sm_rate = min(H100_FP8 / H100_SMS, 128 * H100_L2_BYTES_PER_S / H100_SMS)
    assert waves == 1
    assert float(t) == pytest.approx(2 * 128 * 128 * 512 / sm_rate + fixed)
    split = Gemm(256, 65536, 256, 2, 2, 2)
    t2, waves2 = gpu_tile_time(h100, split, 128, 128, 794.5e12, split=16)
    assert waves2 == 1  # 4 tiles x 16 slices = 64 partial tiles
    reduce_s = 2 * 16 * 4 * 256 * 256 / H100_L2_BYTES_PER_S
    fill = 64 * (2 * 128 + 2 * 128) / (H100_L2_BYTES_PER_S / H100_SMS)
    sm_rate = min(794.5e12 / 132, 64 * H100_L2_BYTES_PER_S / 132)
    assert float(t2) == pytest.approx(2 * 128 * 128 * 4096 / sm_rate + fill + reduce_s)
