"""Tiles and on-chip memory (docs/prediction.md): real HBM and L2 traffic, tile intensity against
each level's ridge, the per-core working set, and GPU tile/wave quantization.

Pure and vectorized: dimensions may be Python ints or numpy arrays that broadcast. The formulas:

- output-stationary tiles bm x bn, K streamed in steps of bk (docs/prediction.md):
  traffic into the tiles `sA*M*K*ceil(N/bn) + sB*K*N*ceil(M/bm) + sC*M*N`
- tile intensity `2*bm*bn / (sA*bm + sB*bn)` FLOP per byte loaded (square b, one dtype: b/s)
- working set per tile `stages*(sA*bm*bk + sB*bk*bn) + 4*bm*bn` (fp32 accumulator)
- NVIDIA "Matrix Multiplication Background" guide, section 3: tiles `T = ceil(M/bm)*ceil(N/bn)`,
  waves `ceil(T/SMs)`, wave efficiency `T/(waves*SMs)`, tile efficiency
  `M*N/(ceil(M/bm)*bm*ceil(N/bn)*bn)`.
- a tile's fixed cost outside its math `(bk*(sA*bm + sB*bn) + sC*bm*bn) / (L2 bandwidth / SMs)`:
  the first K slice it waits for and the output tile it writes (docs/prediction.md); every wave
  but the last also waits for its outputs to reach memory, `SMs*sC*bm*bn / memory bandwidth`.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardline.basics.dtypes import ACCUMULATOR_BYTES, canonical_dtype, dtype_bytes
from shardline.basics.options import Precision
from shardline.basics.serialize import json_object
from shardline.basics.units import short
from shardline.basics.values import JSONDict, Scalar
from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip
from shardline.ops.achievable import achievable_rate
from shardline.ops.einsum import MAX_DIM
from shardline.ops.roofline import resolve_dtypes

__all__ = [
    "Gemm",
    "Tile",
    "TileReport",
    "Level",
    "parse_tile",
    "default_bk",
    "tile_traffic_bytes",
    "tile_intensity",
    "working_set_bytes",
    "quantization",
    "l2_blocked_hbm_bytes",
    "analyze_tile",
    "smallest_tile",
    "gpu_tile_time",
    "gpu_tile_fixed_s",
    "gpu_wave_store_s",
    "choose_gpu_tile",
    "DEFAULT_STAGES",
    "GPU_TILE_CANDIDATES",
    "SPLIT_K",
]

# Pipeline stages of the K loop kept in shared memory (double buffering).
DEFAULT_STAGES = 2
# Bytes of K loaded per stage and operand row: 128 B is one full cache line / TMA box row
# (64 bf16, 32 fp32 elements), the usual CUTLASS/cuBLAS k-tile.
_BK_BYTES = 128
# Output tiles a GPU BLAS library picks from (NVIDIA "Matrix Multiplication Background" guide,
# section 2.3 "Typical Tile Dimensions In cuBLAS And Performance": 256x128 down to 64x64).
GPU_TILE_CANDIDATES: tuple[tuple[int, int], ...] = (
    (256, 128),
    (128, 256),
    (128, 128),
    (128, 64),
    (64, 128),
    (64, 64),
)
# Split-K factors a library may use when the output has too few tiles to fill the SMs (CUTLASS
# "split-K": each slice of K computes a partial tile; a reduction sums them).
SPLIT_K = (1, 2, 4, 8, 16)
_SEARCH_SIDES = (16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
_TILE_TEXT = re.compile(r"^\s*(\d+)\s*[xX×]\s*(\d+)(?:\s*[xX×]\s*(\d+))?\s*$")


@dataclass(frozen=True)
class Gemm:
    """A (batched) GEMM: `batch` products A[M,K] . B[K,N] -> C[M,N]; element bytes of A, B, C."""

    m: Any
    k: Any
    n: Any
    s_a: Any
    s_b: Any
    s_c: Scalar
    batch: Scalar = 1


@dataclass(frozen=True)
class Tile:
    bm: int
    bn: int
    bk: int

    def text(self) -> str:
        return f"{self.bm}x{self.bn}x{self.bk}"


def default_bk(elem_bytes: float) -> int:
    """K step of a tile: 128 bytes of each operand row (64 for bf16, 32 for fp32)."""
    return max(8, int(_BK_BYTES // max(elem_bytes, 0.5)))


def parse_tile(text: str, elem_bytes: float = 2.0) -> Tile:
    """'128x256x64' (BMxBNxBK) or '128x256' (BK from the dtype: 128 bytes of K)."""
    match = _TILE_TEXT.match(text or "")
    if not match:
        raise InputError(f"cannot read tile {short(text)}: expected BMxBNxBK, e.g. 128x256x64")
    if any(len(side) > 13 or int(side) > MAX_DIM for side in match.groups() if side):
        raise InputError(f"tile {short(text)}: a side is absurdly large (limit {MAX_DIM:,})")
    bm, bn = int(match.group(1)), int(match.group(2))
    bk = int(match.group(3)) if match.group(3) else default_bk(elem_bytes)
    if min(bm, bn, bk) <= 0:
        raise InputError(f"tile {short(text)}: every side must be a positive integer")
    return Tile(bm, bn, bk)


def _ceil_div(a: Scalar, b: Scalar) -> Scalar:
    if isinstance(a, int) and isinstance(b, int):
        return -(-a // b)
    return np.ceil(np.asarray(a, dtype=np.float64) / b)


def tile_traffic_bytes(gemm: Gemm, bm: Scalar, bn: Scalar) -> Scalar:
    """Bytes moved into output-stationary bm x bn tiles: each tile reads its A panel (bm x K) and
    B panel (K x bn) once and writes its C tile once (docs/prediction.md)."""
    g = gemm
    return g.batch * (
        g.s_a * g.m * g.k * _ceil_div(g.n, bn)
        + g.s_b * g.k * g.n * _ceil_div(g.m, bm)
        + g.s_c * g.m * g.n
    )


def tile_intensity(bm: Scalar, bn: Scalar, s_a: float, s_b: float) -> Scalar:
    """FLOP per byte loaded by one tile per K step: 2*bm*bn*bk / ((sA*bm + sB*bn)*bk)."""
    return 2 * bm * bn / (s_a * bm + s_b * bn)


def working_set_bytes(
    bm: Scalar, bn: Scalar, bk: Scalar, s_a: float, s_b: float, stages: int = DEFAULT_STAGES
) -> Scalar:
    """On-chip bytes of one tile: `stages` K slices of A and B plus the fp32 accumulator."""
    return stages * (s_a * bm * bk + s_b * bk * bn) + ACCUMULATOR_BYTES * bm * bn


def quantization(m: Any, n: Any, bm: Any, bn: Any, cores: int, batch: Any = 1) -> dict[str, Any]:
    """Tile and wave quantization (NVIDIA "Matrix Multiplication Background" guide, section 3)."""
    tiles_m, tiles_n = _ceil_div(m, bm), _ceil_div(n, bn)
    tiles = batch * tiles_m * tiles_n
    waves = _ceil_div(tiles, cores)
    return {
        "tiles": tiles,
        "waves": waves,
        "wave_efficiency": tiles / (waves * cores),
        "tile_efficiency": (m * n) / (tiles_m * bm * tiles_n * bn),
    }


def l2_blocked_hbm_bytes(gemm: Gemm, bm: int, bn: int, l2_bytes: float | None) -> float:
    """HBM bytes when the L2 keeps the panels of a group of gm x gn tiles (a rasterized order):
    the traffic formula with blocks of gm*bm x gn*bn, gm and gn apart, the least traffic whose
    panels `K*(sA*gm*bm + sB*gn*bn)` fit the L2 (at least one tile, at most the matrix); without
    an L2 the tiles stream from HBM. A bigger tile reaches the same blocks, not more traffic."""
    if not l2_bytes:
        return float(tile_traffic_bytes(gemm, bm, bn))
    budget = l2_bytes / gemm.k  # bytes of one K-long row of the A and B panels together
    most = min(_ceil_div(gemm.m, bm), (budget - gemm.s_b * bn) // (gemm.s_a * bm))
    gm = np.arange(1, max(most, 1) + 1, dtype=float)
    gn = np.floor((budget - gemm.s_a * gm * bm) / (gemm.s_b * bn))
    ok = (gn >= 1) | (gm == 1)  # one tile always runs, its panels in the L2 or not
    gn = np.clip(gn, 1, _ceil_div(gemm.n, bn))
    blocks = np.minimum(gm[ok] * bm, gemm.m), np.minimum(gn[ok] * bn, gemm.n)
    return float(np.min(tile_traffic_bytes(gemm, *blocks)))


def gpu_tile_fixed_s(chip: Chip, gemm: Gemm, bm: Scalar, bn: Scalar, split: int = 1) -> Scalar:
    """Time of one tile outside its math, at one SM's share of the tile feed
    (`OnChip.feed_bytes_per_s`; the memory's where the chip gives none): the pipeline fill (the
    math waits for the first BK slice of its A and B tiles, `bk*(sA*bm + sB*bn)` bytes) and,
    without split-K, the epilogue (the output tile, `sC*bm*bn` bytes; split-K's partials are the
    reduction term of `gpu_tile_time`)."""
    cores = chip.on_chip.cores or 1
    feed = chip.on_chip.feed_bytes_per_s or chip.achievable.mem_bytes_per_s or chip.mem_bytes_per_s
    elem_bytes = np.maximum(np.maximum(gemm.s_a, gemm.s_b), 0.5)
    bk = np.minimum(np.maximum(8, np.floor(_BK_BYTES / elem_bytes)), np.ceil(gemm.k / split))
    fill_bytes = bk * (gemm.s_a * bm + gemm.s_b * bn)
    epilogue_bytes = gemm.s_c * bm * bn if split == 1 else 0.0
    return (fill_bytes + epilogue_bytes) * cores / feed


def gpu_wave_store_s(chip: Chip, gemm: Gemm, bm: Scalar, bn: Scalar) -> Scalar:
    """Time for one wave's output tiles to reach memory: the SMs of a persistent kernel run alike
    tiles in step and reach their epilogues together, so the wave's `cores` tiles of `sC*bm*bn`
    bytes leave at the memory's achievable rate (docs/prediction.md, "Short K")."""
    mem = chip.achievable.mem_bytes_per_s or chip.mem_bytes_per_s
    return gemm.s_c * bm * bn * (chip.on_chip.cores or 1) / mem


def gpu_tile_time(
    chip: Chip, gemm: Gemm, bm: Scalar, bn: Scalar, rate: Scalar, split: int = 1
) -> tuple[Scalar, Scalar]:
    """Compute time of one candidate tile and split-K factor: waves x (one tile's FLOPs / one SM's
    rate), plus the tile's fill and epilogue (`gpu_tile_fixed_s`) once per wave, or once where the
    chip's GEMM kernels overlap them (`on_chip.gemm_epilogue_overlapped`), plus, without split-K,
    every wave but the last waiting for its outputs to reach memory (`gpu_wave_store_s`: what a
    short K cannot hide), plus, when K is split, writing and reading the fp32 partial outputs.

    Waves: NVIDIA "Matrix Multiplication Background" guide, section 3; the tile feed gives each SM
    1/cores of its bandwidth (the hierarchical roofline of docs/prediction.md)."""
    cores = chip.on_chip.cores or 1
    tiles = gemm.batch * _ceil_div(gemm.m, bm) * _ceil_div(gemm.n, bn) * split
    waves = np.ceil(tiles / cores)
    sm_rate = rate / cores
    l2_rate = chip.on_chip.feed_bytes_per_s
    if l2_rate:
        sm_rate = np.minimum(sm_rate, tile_intensity(bm, bn, gemm.s_a, gemm.s_b) * l2_rate / cores)
    # a one-tile-per-block kernel fills and drains every tile; a persistent kernel that overlaps
    # them with other tiles' math shows one fill and one epilogue per SM
    exposed = 1 if chip.on_chip.gemm_epilogue_overlapped else waves
    t = waves * 2.0 * bm * bn * np.ceil(gemm.k / split) / sm_rate
    t = t + exposed * gpu_tile_fixed_s(chip, gemm, bm, bn, split)
    if split == 1:
        t = t + (waves - 1) * gpu_wave_store_s(chip, gemm, bm, bn)
    else:
        reduce_rate = l2_rate or chip.achievable.mem_bytes_per_s or chip.mem_bytes_per_s
        out_elements = gemm.batch * gemm.m * gemm.n
        t = t + 2 * split * ACCUMULATOR_BYTES * out_elements / reduce_rate
    return t, waves


def choose_gpu_tile(chip: Chip, gemm: Gemm, compute_dtype: str = "bf16") -> tuple[int, int]:
    """The candidate tile with the shortest quantized compute time for one shape (no split-K)."""
    rate = (
        achievable_rate(chip, compute_dtype)[0]
        if compute_dtype in chip.peak_flops_per_s
        else max(chip.peak_flops_per_s.values())
    )
    best: tuple[float, tuple[int, int]] | None = None
    for bm, bn in GPU_TILE_CANDIDATES:
        t, _ = gpu_tile_time(chip, gemm, bm, bn, rate)
        if best is None or float(t) < best[0]:
            best = (float(t), (bm, bn))
    assert best is not None
    return best[1]


@dataclass(frozen=True)
class Level:
    """One memory level that feeds the math units."""

    name: str
    bytes: float  # traffic through this level for the whole multiply
    bytes_per_s: float
    ridge_flop_per_byte: float
    intensity_flop_per_byte: float  # FLOPs / bytes through this level

    @property
    def compute_bound(self) -> bool:
        return self.intensity_flop_per_byte >= self.ridge_flop_per_byte


@dataclass(frozen=True)
class TileReport:
    """`shardline tile`: the traffic and fit of one tile on one chip. Field names are JSON keys."""

    m: int
    k: int
    n: int
    dtypes: dict[str, str]
    hardware: str
    flops: int
    minimum_bytes: float
    # docs/prediction.md: sA*M*K*ceil(N/bn) + sB*K*N*ceil(M/bm) + sC*M*N, the traffic into the tiles
    # when nothing is reused across tiles: HBM traffic on a chip without an L2 level, L2 -> core
    # traffic on a GPU (whose HBM level in `levels` credits the L2's reuse).
    tile_traffic_bytes: float
    flops_per_s: float
    flops_per_s_source: str  # "achievable" or "peak"
    tile: Tile
    chosen_by: str  # "user" or "library heuristic"
    stages: int
    tile_intensity_flop_per_byte: float
    feeding_level: str  # the level the tile's panels are loaded from
    compute_bound: bool  # tile intensity >= ridge of the feeding level
    levels: tuple[Level, ...]
    working_set_bytes: float
    shared_bytes_per_core: float | None
    fits: bool | None
    cores: int | None
    quantization: dict[str, Scalar]
    smallest: Tile | None  # smallest tile that is compute-bound and fits
    smallest_intensity_flop_per_byte: float | None
    smallest_working_set_bytes: float | None

    def to_dict(self) -> JSONDict:
        out = json_object(self)
        out["tile"] = _tile_dict(self.tile)
        out["levels"] = [
            {**json_object(level), "compute_bound": level.compute_bound} for level in self.levels
        ]
        out["smallest"] = None if self.smallest is None else _tile_dict(self.smallest)
        return out


def _tile_dict(tile: Tile) -> JSONDict:
    return {"bm": tile.bm, "bn": tile.bn, "bk": tile.bk, "text": tile.text()}


def _rate(chip: Chip, compute: str, use_peak: bool) -> tuple[float, str]:
    """The rate the ridges use: the same achievable rate as `predicted_s` (a measured figure, or
    the dtype's peak times another dtype's measured efficiency), unless `use_peak`."""
    peak = chip.peak(compute)
    if use_peak or not chip.achievable.matmul_flops_per_s:
        return peak, "peak"
    return achievable_rate(chip, compute)[0], "achievable"


def _check_user_tile(tile: Tile, m: int, k: int, n: int) -> None:
    for side, name, dim, dim_name in (
        (tile.bm, "BM", m, "M"),
        (tile.bn, "BN", n, "N"),
        (tile.bk, "BK", k, "K"),
    ):
        if dim % side:
            raise InputError(
                f"tile {tile.text()} does not divide the problem: {name}={side} does not divide "
                f"{dim_name}={dim} ({dim_name} % {name} = {dim % side}); pick sides that divide "
                "M, N and K (or leave out --tile to let shardline choose)"
            )


def _mxu(chip: Chip) -> int | None:
    return chip.on_chip.matrix_unit_elements if chip.kind == "tpu" else None


def smallest_tile(
    chip: Chip, s_a: float, s_b: float, bk: int, ridge: float, stages: int = DEFAULT_STAGES
) -> Tile | None:
    """The smallest tile (by area, then squarest) whose intensity reaches `ridge` and whose working
    set fits the per-core memory; sides are powers of two (multiples of the MXU on a TPU)."""
    unit = _mxu(chip)
    sides = [s for s in _SEARCH_SIDES if unit is None or s % unit == 0]
    limit = chip.on_chip.shared_bytes_per_core
    best: tuple[float, float, Tile] | None = None
    for bm in sides:
        for bn in sides:
            if tile_intensity(bm, bn, s_a, s_b) < ridge:
                continue
            if limit is not None and working_set_bytes(bm, bn, bk, s_a, s_b, stages) > limit:
                continue
            key = (bm * bn, abs(math.log2(bm / bn)), Tile(bm, bn, bk))
            if best is None or key[:2] < best[:2]:
                best = key
    return None if best is None else best[2]


def _heuristic_tile(
    chip: Chip, gemm: Gemm, bk: int, ridge: float, stages: int, compute: str
) -> Tile:
    """The tile a library would pick for this shape. TPU (a compiler sizes VMEM blocks): the
    smallest MXU-multiple block that reaches the HBM ridge and fits VMEM, else one MXU tile.
    GPU: the candidate with the shortest quantized time (shardline.ops.predict makes the same
    choice, vectorized)."""
    unit = _mxu(chip)
    if unit:
        return smallest_tile(chip, gemm.s_a, gemm.s_b, bk, ridge, stages) or Tile(unit, unit, bk)
    bm, bn = choose_gpu_tile(chip, gemm, compute)
    return Tile(bm, bn, bk)


def _check_fit(chip: Chip, tile: Tile, work: float, stages: int) -> None:
    """A user's tile must fit the per-core memory."""
    limit = chip.on_chip.shared_bytes_per_core
    if limit is not None and work > limit:
        raise InputError(
            f"tile {tile.text()} does not fit: its working set {stages}*(sA*BM*BK + sB*BK*BN) + "
            f"4*BM*BN = {work:,.0f} B exceeds the {limit:,.0f} B of shared memory per "
            f"{chip.on_chip.core_name} on {chip.name}"
        )


def _levels(chip: Chip, gemm: Gemm, tile: Tile, rate: float) -> tuple[Level, ...]:
    """The memory levels that feed the tiles, outermost first: HBM (with the L2's reuse credited)
    and the L2 on a chip that has one, else HBM alone; the last one feeds the tiles."""
    flops = 2 * gemm.m * gemm.k * gemm.n
    tile_bytes = float(tile_traffic_bytes(gemm, tile.bm, tile.bn))
    hbm_rate, l2_rate = chip.mem_bytes_per_s, chip.on_chip.l2_bytes_per_s
    if not l2_rate:
        return (Level("HBM", tile_bytes, hbm_rate, rate / hbm_rate, flops / tile_bytes),)
    hbm = float(l2_blocked_hbm_bytes(gemm, tile.bm, tile.bn, chip.on_chip.l2_bytes))
    return (
        Level("HBM", hbm, hbm_rate, rate / hbm_rate, flops / hbm),
        Level("L2", tile_bytes, l2_rate, rate / l2_rate, flops / tile_bytes),
    )


def _smallest_fields(small: Tile | None, gemm: Gemm, stages: int) -> dict[str, Any]:
    keys = ("smallest", "smallest_intensity_flop_per_byte", "smallest_working_set_bytes")
    if small is None:
        return dict.fromkeys(keys)
    s_a, s_b = gemm.s_a, gemm.s_b
    return {
        "smallest": small,
        "smallest_intensity_flop_per_byte": float(tile_intensity(small.bm, small.bn, s_a, s_b)),
        "smallest_working_set_bytes": float(
            working_set_bytes(small.bm, small.bn, small.bk, s_a, s_b, stages)
        ),
    }


def _resolve(m: int, k: int, n: int, precision: Precision | None) -> tuple[Gemm, dict[str, str]]:
    """The GEMM with its element bytes, and the dtypes by role (a, b, out, compute)."""
    precision = precision or Precision()
    dtypes, compute = resolve_dtypes(
        ("a", "b", "out"), precision.dtype or "bf16", dict(precision.operands), precision.compute
    )
    s_a, s_b, s_c = (dtype_bytes(str(dtypes[x])) for x in ("a", "b", "out"))
    names = {x: str(dtypes[x]) for x in dtypes}
    return Gemm(m, k, n, s_a, s_b, s_c), {**names, "compute": canonical_dtype(str(compute))}


def _choose_tile(
    chip: Chip, gemm: Gemm, tile: str | Tile | None, ridge: float, stages: int, compute: str
) -> Tile:
    """The user's tile (which must divide the problem and fit), else the library's choice."""
    elem_bytes = max(gemm.s_a, gemm.s_b)
    if tile is None:
        return _heuristic_tile(chip, gemm, default_bk(elem_bytes), ridge, stages, compute)
    tile = parse_tile(tile, elem_bytes) if isinstance(tile, str) else tile
    _check_user_tile(tile, gemm.m, gemm.k, gemm.n)
    work = float(working_set_bytes(tile.bm, tile.bn, tile.bk, gemm.s_a, gemm.s_b, stages))
    _check_fit(chip, tile, work, stages)
    return tile


def analyze_tile(
    m: int,
    k: int,
    n: int,
    hw: str | Chip = "h100-sxm",
    *,
    precision: Precision | None = None,
    tile: str | Tile | None = None,
    stages: int = DEFAULT_STAGES,
    use_peak: bool = False,
) -> TileReport:
    """Traffic per memory level, tile intensity against each ridge, fit in the per-core memory,
    and the smallest tile that is compute-bound and fits. `precision`: the dtypes by role
    (operands "a", "b", "out"; bf16 when not given)."""
    chip = resolve_chip(hw)
    if stages < 1:
        raise InputError(f"--stages must be at least 1, got {stages}")
    gemm, dtypes = _resolve(m, k, n, precision)
    s_a, s_b = gemm.s_a, gemm.s_b
    rate, source = _rate(chip, dtypes["compute"], use_peak)
    # the ridge of the level that feeds the tiles
    ridge = rate / (chip.on_chip.l2_bytes_per_s or chip.mem_bytes_per_s)
    chosen_by = "library heuristic" if tile is None else "user"
    tile = _choose_tile(chip, gemm, tile, ridge, stages, dtypes["compute"])
    work = float(working_set_bytes(tile.bm, tile.bn, tile.bk, s_a, s_b, stages))
    limit = chip.on_chip.shared_bytes_per_core
    intensity = float(tile_intensity(tile.bm, tile.bn, s_a, s_b))
    levels = _levels(chip, gemm, tile, rate)
    cores = chip.on_chip.cores
    return TileReport(
        m=m,
        k=k,
        n=n,
        dtypes=dtypes,
        hardware=chip.name,
        flops=2 * m * k * n,
        minimum_bytes=s_a * m * k + s_b * k * n + gemm.s_c * m * n,
        tile_traffic_bytes=levels[-1].bytes,
        flops_per_s=rate,
        flops_per_s_source=source,
        tile=tile,
        chosen_by=chosen_by,
        stages=stages,
        tile_intensity_flop_per_byte=intensity,
        feeding_level=levels[-1].name,
        compute_bound=intensity >= ridge,
        levels=levels,
        working_set_bytes=work,
        shared_bytes_per_core=limit,
        fits=None if limit is None else work <= limit,
        cores=cores,
        quantization={
            key: float(value)
            for key, value in quantization(m, n, tile.bm, tile.bn, cores or 1).items()
        },
        **_smallest_fields(smallest_tile(chip, s_a, s_b, tile.bk, ridge, stages), gemm, stages),
    )
