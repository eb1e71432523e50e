"""The realistic prediction (MODEL.md section 3): how long a multiply actually takes.

The roofline `max(F/P, Q/W)` with datasheet peaks is a lower bound. The prediction replaces the
peaks with measured achievable rates (the chip's `achievable` block: catalog figures with sources,
or a file written by `shardline calibrate`) and adds what the lower bound leaves out:

- GPU: the library tiles the output; each SM computes whole bm x bn tiles, so the time is
  `waves * (time of one tile on one SM)`, with `waves = ceil(tiles / SMs)` (wave and tile
  quantization, NVIDIA "Matrix Multiplication Background" guide, section 3). A tile's rate is the
  smaller of the SM's share of the achievable peak and what the L2 can feed it
  (`tile intensity * L2 bytes/s / SMs`: the hierarchical roofline of MODEL.md section 3). Of a small
  set of candidate tiles and split-K factors (K cut into slices when there are too few tiles for
  the SMs; the fp32 partial outputs are written and read back) the fastest is taken, as a library
  heuristic would; a matrix-vector product (M or N = 1) is a streaming kernel. Dimensions whose rows
  are not a multiple of `align_bytes` lose the fast path (`unaligned_matmul_efficiency`). The time
  is then `launch overhead + max(t_compute, t_memory)` with `t_memory = Q / achievable bytes/s`.
- TPU: the MXU pads M, K and N to its size (128, or 256 on v6e); no waves (one or two cores).
- CPU (a calibrated file): a BLAS call costs a fixed per-call overhead, then packs both inputs
  into its blocked layout, then runs the math at the measured rate: `t = t_call + t_pack + F/P`.
  Streaming Q bytes takes `t_stream(Q) = min(Q, C)/W_cache + max(Q - C, 0)/W_mem` (C: the
  effective last-level cache, `on_chip.l2_bytes`). Packing reads the inputs from the cache when
  they fit it and otherwise all from memory (a pass over more than the cache evicts its own data),
  `W_mem / pack_bytes_per_s` times slower than a plain read:
  `t_pack = (bytes_a + bytes_b) / (W_cache or W_mem) * W_mem / pack_bytes_per_s`. A
  matrix-vector product (M or N = 1) is a streaming kernel instead: `t = t_call + t_stream(Q)`.

Everything is vectorized: numpy arrays in, arrays out (the sweep benchmark runs 100k+ rows).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from shardline.dtypes import ACCUMULATOR_BYTES, dtype_bits
from shardline.einsum import parse_einsum
from shardline.hardware import Chip
from shardline.roofline import RooflineResult
from shardline.tiling import GPU_TILE_CANDIDATES, tile_intensity

__all__ = [
    "with_prediction",
    "predict_gemm",
    "achievable_rate",
    "choose_gpu_tile",
    "gemm_dims",
    "stream_time",
    "pack_read_time",
    "DEFAULT_UNALIGNED_EFFICIENCY",
]

# Rate of a matmul whose row strides are not a multiple of the chip's align_bytes, as a fraction of
# the aligned rate, when the chip file has no measured `unaligned_matmul_efficiency`.
# Hopper's TMA copies need 16-byte aligned strides and the NVIDIA guide ("Tensor Core
# Requirements") says such shapes run "less efficiently" without a figure. Recent cuBLAS keeps the
# loss small: on H100, bf16 8193x2501x5008 ran at 5.09e14 FLOP/s against 5.02e14 padded to aligned
# sizes (meta-pytorch/float8_experimental PR 145), and MLX's maintainers report the unaligned
# penalty "reduced to within 20%" with CUDA 13 (ml-explore/mlx issue 2712); older libraries fell to
# align-1 kernels 2-3x slower. 0.8 takes the recent libraries' worst case; `shardline calibrate` on
# a GPU measures the real ratio (8192^3 against 8192x8191x8192).
DEFAULT_UNALIGNED_EFFICIENCY = 0.8


def stream_time(
    q_bytes: Any, cache_bytes: float | None, cache_bytes_per_s: float | None, mem_bytes_per_s: float
) -> Any:
    """Seconds to stream Q bytes once: the part that the cache holds at the cache rate, the rest at
    the memory rate, `min(Q, C)/W_cache + max(Q - C, 0)/W_mem` (no cache: `Q/W_mem`)."""
    q = np.asarray(q_bytes, dtype=np.float64)
    if not cache_bytes or not cache_bytes_per_s:
        return q / mem_bytes_per_s
    return (
        np.minimum(q, cache_bytes) / cache_bytes_per_s
        + np.maximum(q - cache_bytes, 0.0) / mem_bytes_per_s
    )


def pack_read_time(
    input_bytes: Any,
    cache_bytes: float | None,
    cache_bytes_per_s: float | None,
    mem_bytes_per_s: float,
) -> Any:
    """Seconds to read a BLAS call's inputs for packing: from the cache when they fit it, else all
    from memory (a packing pass over more than the cache evicts its own data before reuse)."""
    q = np.asarray(input_bytes, dtype=np.float64)
    if not cache_bytes or not cache_bytes_per_s:
        return q / mem_bytes_per_s
    return np.where(q <= cache_bytes, q / cache_bytes_per_s, q / mem_bytes_per_s)


def _as_array(value: Any) -> np.ndarray:
    return np.asarray(value, dtype=np.float64)


def _lookup(dtype: Any, table: Any) -> Any:
    """Apply `table(name) -> float` to a dtype name or an array of names (unique names once)."""
    if isinstance(dtype, np.ndarray):
        names, inverse = np.unique(dtype, return_inverse=True)
        values = np.array([table(str(n)) for n in names], dtype=np.float64)
        return values[inverse].reshape(dtype.shape)
    return table(str(dtype))


def achievable_rate(chip: Chip, compute_dtype: str) -> tuple[float, str]:
    """Achievable matmul FLOP/s for a compute dtype, and where it comes from.

    The chip's measured figure when it has one; else the dtype's peak times the measured
    efficiency (achievable / peak) of another dtype of the same chip; else the peak itself."""
    measured = chip.achievable.matmul_flops_per_s
    if compute_dtype in measured:
        return measured[compute_dtype], f"achievable {compute_dtype} (chip file)"
    peak = chip.peak(compute_dtype)
    for other, rate in measured.items():
        if other in chip.peak_flops_per_s:
            efficiency = rate / chip.peak_flops_per_s[other]
            return peak * efficiency, (
                f"{compute_dtype} peak x {efficiency:.3f} (measured {other} efficiency)"
            )
    return peak, f"{compute_dtype} peak (no achievable figure in the chip file)"


# Split-K factors a library may use when the output has too few tiles to fill the SMs (CUTLASS
# "split-K": each slice of K computes a partial tile; a reduction sums them).
SPLIT_K = (1, 2, 4, 8, 16)


def _gpu_tile_time(
    chip: Chip,
    k: Any,
    tiles_m: Any,
    tiles_n: Any,
    batch: Any,
    bm: int,
    bn: int,
    s_a: Any,
    s_b: Any,
    rate: Any,
    split: int = 1,
    out_elements: Any = 0,
) -> tuple[Any, Any]:
    """Compute time of one candidate tile and split: waves x (one tile's FLOPs / one SM's rate),
    plus, when K is split, writing and reading the fp32 partial outputs once each."""
    cores = chip.on_chip.cores or 1
    tiles = batch * tiles_m * tiles_n * split
    waves = np.ceil(tiles / cores)
    sm_rate = rate / cores
    l2_rate = chip.on_chip.l2_bytes_per_s
    if l2_rate:  # the L2 feeds each SM 1/cores of its bandwidth (hierarchical roofline)
        sm_rate = np.minimum(sm_rate, tile_intensity(bm, bn, s_a, s_b) * l2_rate / cores)
    t = waves * 2.0 * bm * bn * np.ceil(k / split) / sm_rate
    if split > 1:
        reduce_rate = l2_rate or chip.achievable.mem_bytes_per_s or chip.mem_bytes_per_s
        t = t + 2 * split * ACCUMULATOR_BYTES * out_elements / reduce_rate
    return t, waves


def choose_gpu_tile(
    chip: Chip,
    m: int,
    k: int,
    n: int,
    s_a: float,
    s_b: float,
    s_c: float,
    compute_dtype: str = "bf16",
) -> tuple[int, int]:
    """The candidate tile with the shortest quantized compute time for one shape."""
    rate = (
        achievable_rate(chip, compute_dtype)[0]
        if compute_dtype in chip.peak_flops_per_s
        else max(chip.peak_flops_per_s.values())
    )
    best: tuple[float, tuple[int, int]] | None = None
    for bm, bn in GPU_TILE_CANDIDATES:
        t, _ = _gpu_tile_time(chip, k, -(-m // bm), -(-n // bn), 1, bm, bn, s_a, s_b, rate)
        if best is None or float(t) < best[0]:
            best = (float(t), (bm, bn))
    assert best is not None
    return best[1]


def _aligned(length: Any, elem_bytes: Any, align_bytes: int) -> Any:
    return np.mod(_as_array(length) * elem_bytes, align_bytes) == 0


def gemm_dims(spec_text: str, dims: dict[str, Any]) -> dict[str, Any]:
    """The GEMM an einsum runs as: batch (in both inputs and the output), M (left input and output
    only), N (right input and output only), K (contracted), and each operand's row length."""
    spec = parse_einsum(spec_text)
    lhs, rhs, out = spec.lhs.dims, spec.rhs.dims, spec.out.dims

    def prod(names: list[str]) -> Any:
        value: Any = 1
        for name in names:
            value = value * dims[name]
        return value

    return {
        "batch": prod([d for d in out if d in lhs and d in rhs]),
        "m": prod([d for d in out if d in lhs and d not in rhs]),
        "n": prod([d for d in out if d in rhs and d not in lhs]),
        "k": prod([d for d in spec.all_dims if d not in out]),
        "rows": {op.name: dims[op.dims[-1]] for op in spec.operands},
    }


def predict_gemm(
    chip: Chip,
    *,
    batch: Any,
    m: Any,
    k: Any,
    n: Any,
    flops: Any,
    bytes_a: Any,
    bytes_b: Any,
    bytes_total: Any,
    bits: dict[str, Any],
    rows: dict[str, Any],
    compute_dtype: Any,
    t_lower_s: Any,
    contracted: bool = True,
) -> dict[str, Any]:
    """The realistic time of a (batched) GEMM on one chip, as a dict of named terms (arrays)."""
    s = {name: _as_array(b) / 8 for name, b in bits.items()}
    s_a, s_b = s["a"], s["b"]
    rate = _lookup(compute_dtype, lambda d: achievable_rate(chip, d)[0])
    source = (
        achievable_rate(chip, str(compute_dtype))[1]
        if not isinstance(compute_dtype, np.ndarray)
        else "per row: see hardware"
    )
    mem_rate = chip.achievable.mem_bytes_per_s or chip.mem_bytes_per_s
    # one shape for every term: a scalar M with an array of K (a sweep) broadcasts
    batch, m, k, n = np.broadcast_arrays(*(_as_array(v) for v in (batch, m, k, n)))
    flops, q_bytes = _as_array(flops), _as_array(bytes_total)
    t_memory = q_bytes / mem_rate
    terms: dict[str, Any] = {
        "lower_bound_s": t_lower_s,
        "achievable_flops_per_s": rate,
        "achievable_flops_source": source,
        "achievable_mem_bytes_per_s": mem_rate,
    }
    if chip.kind == "cpu":
        t_call = chip.achievable.per_call_overhead_s or chip.achievable.launch_overhead_s or 0.0
        t_overhead = batch * t_call  # numpy loops over the batch, one BLAS call per matrix
        vector = (m == 1) | (n == 1) | (not contracted)
        llc, llc_rate = chip.on_chip.l2_bytes, chip.on_chip.l2_bytes_per_s
        t_stream = batch * stream_time(q_bytes / batch, llc, llc_rate, mem_rate)
        pack_rate = chip.achievable.pack_bytes_per_s
        inputs = (_as_array(bytes_a) + _as_array(bytes_b)) / batch
        # packing reads the inputs `mem_rate / pack_rate` times slower than a plain read
        t_pack = (
            batch * pack_read_time(inputs, llc, llc_rate, mem_rate) * (mem_rate / pack_rate)
            if pack_rate
            else 0.0 * m
        )
        t_math = flops / rate
        t_work = np.where(vector, t_stream, np.maximum(t_pack + t_math, t_stream))
        compute_side = ~vector & (t_math >= t_pack) & (t_pack + t_math >= t_stream)
        terms.update(
            {
                "model": "cpu: per-call overhead + input packing + math at the measured rate; "
                "matrix-vector products stream",
                "t_overhead_s": t_overhead,
                "t_pack_s": t_pack * ~vector,
                "t_compute_s": t_math,
                "t_memory_s": t_stream,
                "matrix_vector": vector,
            }
        )
    elif chip.kind == "tpu":
        unit = chip.on_chip.matrix_unit_elements or 128

        def pad(x: Any) -> Any:
            return np.ceil(x / unit) * unit

        t_overhead = (chip.achievable.launch_overhead_s or 0.0) * np.ones_like(m)
        pad_eff = (m * k * n) / (pad(m) * pad(k) * pad(n)) if contracted else np.ones_like(m)
        t_math = flops / (rate * pad_eff)
        t_work = np.maximum(t_math, t_memory)
        compute_side = t_math >= t_memory
        terms.update(
            {
                "model": f"tpu: M, K, N padded to the {unit}-wide MXU",
                "t_overhead_s": t_overhead,
                "t_compute_s": t_math,
                "t_memory_s": t_memory,
                "tile_efficiency": pad_eff,
                "mxu_elements": unit,
            }
        )
    else:
        cores = chip.on_chip.cores or 1
        align = chip.on_chip.align_bytes
        align_eff: Any = np.ones_like(m)
        if align:
            ok = np.ones_like(m, dtype=bool)
            for name, length in rows.items():
                ok = ok & _aligned(length, s[name], align)
            unaligned = chip.achievable.unaligned_matmul_efficiency or DEFAULT_UNALIGNED_EFFICIENCY
            align_eff = np.where(ok, 1.0, unaligned)

        def candidate(bm: int, bn: int, split: int) -> tuple[Any, Any]:
            return _gpu_tile_time(
                chip,
                k,
                np.ceil(m / bm),
                np.ceil(n / bn),
                batch,
                bm,
                bn,
                s_a,
                s_b,
                rate * align_eff,
                split,
                batch * m * n,
            )

        first_bm, first_bn = GPU_TILE_CANDIDATES[0]
        best_t, best_waves = candidate(first_bm, first_bn, 1)
        best_bm, best_bn = np.full_like(m, first_bm), np.full_like(m, first_bn)
        best_split = np.ones_like(m)
        for bm, bn in GPU_TILE_CANDIDATES:
            for split in SPLIT_K:
                t, waves = candidate(bm, bn, split)
                better = t < best_t
                best_t = np.where(better, t, best_t)
                best_waves = np.where(better, waves, best_waves)
                best_bm = np.where(better, bm, best_bm)
                best_bn = np.where(better, bn, best_bn)
                best_split = np.where(better, split, best_split)
        tiles = batch * np.ceil(m / best_bm) * np.ceil(n / best_bn) * best_split
        t_overhead = (chip.achievable.launch_overhead_s or 0.0) * np.ones_like(m)
        # a matrix-vector product (or an einsum without a contraction) runs a streaming kernel:
        # no output tiles to quantize
        plain = (not contracted) | (m == 1) | (n == 1)
        t_math = np.where(plain, flops / (rate * align_eff), best_t)
        t_work = np.maximum(t_math, t_memory)
        compute_side = t_math >= t_memory
        terms.update(
            {
                "model": f"gpu: best of {len(GPU_TILE_CANDIDATES)} library tiles, waves over "
                f"{cores} SMs, launch overhead",
                "t_overhead_s": t_overhead,
                "t_compute_s": t_math,
                "t_memory_s": t_memory,
                "tile_m": best_bm,
                "tile_n": best_bn,
                "split_k": best_split,
                "tiles": tiles,
                "waves": best_waves,
                "sms": cores,
                "wave_efficiency": tiles / (best_waves * cores),
                "tile_efficiency": (m * n * batch * best_split) / (tiles * best_bm * best_bn),
                "streaming_kernel": plain,
                "align_efficiency": align_eff,
            }
        )
    predicted = t_overhead + t_work
    bound = np.where(t_overhead > t_work, "overhead", np.where(compute_side, "compute", "memory"))
    terms["predicted_s"] = predicted
    terms["predicted_bound"] = bound
    terms["lower_bound_over_predicted"] = _as_array(t_lower_s) / predicted
    return terms


def _scalarize(value: Any) -> Any:
    if (isinstance(value, np.ndarray) and value.ndim == 0) or isinstance(value, np.generic):
        return value.item()
    return value


def with_prediction(result: RooflineResult) -> RooflineResult:
    """The roofline result with `predicted_s`, `predicted_bound` and the named terms in
    `prediction` (which also repeats the lower bound, so that the two are never confused)."""
    chip = result.chip
    if chip is None:
        return result
    gemm = gemm_dims(result.spec, result.dims)
    spec = parse_einsum(result.spec)
    names = {"a": spec.lhs.name, "b": spec.rhs.name, "out": spec.out.name}

    def bits_of(dtype: Any) -> Any:
        return _lookup(dtype, lambda d: float(dtype_bits(d)))

    bits = {role: bits_of(result.dtypes[name]) for role, name in names.items()}
    rows = {role: gemm["rows"][name] for role, name in names.items()}
    terms = predict_gemm(
        chip,
        batch=gemm["batch"],
        m=gemm["m"],
        k=gemm["k"],
        n=gemm["n"],
        flops=result.flops,
        bytes_a=result.bytes[names["a"]],
        bytes_b=result.bytes[names["b"]],
        bytes_total=result.bytes["total"],
        bits=bits,
        rows=rows,
        compute_dtype=result.dtypes["compute"],
        t_lower_s=result.t_lower_s,
        contracted=bool(spec.contracted),
    )
    vector = any(
        isinstance(v, np.ndarray)
        for v in (*result.dims.values(), result.dtypes["compute"], result.flops)
    )
    if not vector:
        terms = {key: _scalarize(value) for key, value in terms.items()}
        for key in ("tile_m", "tile_n", "split_k", "tiles", "waves", "mxu_elements"):
            if key in terms:
                terms[key] = int(terms[key])
        for key in ("matrix_vector", "streaming_kernel"):
            if key in terms:
                terms[key] = bool(terms[key])
        terms["predicted_bound"] = str(terms["predicted_bound"])
    predicted, bound = terms.pop("predicted_s"), terms.pop("predicted_bound")
    return dataclasses.replace(
        result, predicted_s=predicted, predicted_bound=bound, prediction=terms
    )
