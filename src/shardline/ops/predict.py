"""The realistic prediction (docs/prediction.md): how long a multiply actually takes.

The roofline `max(F/P, Q/W)` with datasheet peaks is a lower bound. The prediction replaces the
peaks with measured achievable rates (the chip's `achievable` block: catalog figures with sources,
or a file written by `shardline calibrate`) and adds what the lower bound leaves out:

- GPU: the library tiles the output; each SM computes whole bm x bn tiles, so the time is
  `waves * (time of one tile on one SM)`, with `waves = ceil(tiles / SMs)` (wave and tile
  quantization, NVIDIA "Matrix Multiplication Background" guide, section 3). A tile's rate is the
  smaller of the SM's share of the achievable peak and what the L2 can feed it
  (`tile intensity * L2 bytes/s / SMs`: the hierarchical roofline of docs/prediction.md). Of a small
  set of candidate tiles and split-K factors (K cut into slices when there are too few tiles for
  the SMs; the fp32 partial outputs are written and read back) the fastest is taken, as a library
  heuristic would; a matrix-vector product (M or N = 1) is a streaming kernel, unless the chip's
  library runs it with its tiled GEMM kernels (`on_chip.matrix_vector_tiled`). Dimensions whose rows
  are not a multiple of `align_bytes` lose the fast path (`unaligned_matmul_efficiency`). The time
  is then one kernel doing `max(t_compute, t_memory)` of work (`t_memory = Q / achievable
  bytes/s`), timed by `kernel_time_s` under the caller's launch mode: launched eagerly,
  `max(launch_overhead_s, floor) + work`; replayed from a CUDA graph, `floor + work`, the floor
  being the chip's `gemm_kernel_floor_s` for a tiled kernel and `kernel_floor_s` for a streaming
  one (docs/prediction.md, "Launch mode"). With a warm L2 (`warm_l2`: a benchmark that replays
  one kernel on the same buffers without clearing the cache) a working set that fits what the L2
  holds at speed (`on_chip.l2_resident_bytes`, else `l2_bytes`) is read at its resident-read
  rate (`on_chip.resident_read_bytes_per_s`), all of it; a larger one evicts itself and streams
  from HBM, as `pack_read_time` prices a CPU's packing pass (docs/prediction.md, "Warm L2").
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardline.basics.dtypes import dtype_bits
from shardline.basics.values import Scalar, Words
from shardline.errors import InputError
from shardline.hardware import Chip
from shardline.ops.achievable import achievable_rate
from shardline.ops.cache_reads import gpu_read_time, pack_read_time, stream_time
from shardline.ops.einsum import parse_einsum
from shardline.ops.roofline import RooflineResult
from shardline.ops.tiling import GPU_TILE_CANDIDATES, SPLIT_K, Gemm, choose_gpu_tile, gpu_tile_time

__all__ = [
    "LAUNCH_MODES",
    "GemmWork",
    "kernel_time_s",
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


# How the caller launches kernels: one by one from the host ("eager", the default), or replayed
# from a captured CUDA graph ("graphs", as vLLM-style benchmarks time them).
LAUNCH_MODES = ("eager", "graphs")


def check_launch(launch: str) -> bool:
    """True for CUDA-graph replay; an unknown launch mode is an input error."""
    if launch not in LAUNCH_MODES:
        raise InputError(f"launch must be one of {', '.join(LAUNCH_MODES)}, got {launch!r}")
    return launch == "graphs"


def kernel_overhead_s(chip: Chip, *, cuda_graphs: bool, gemm: bool = False) -> float:
    """The fixed part of one kernel's time on a GPU: its floor when replayed from a CUDA graph,
    `max(launch_overhead_s, floor)` when launched eagerly. The floor is `kernel_floor_s`, or for
    a tiled library GEMM kernel (`gemm`) `gemm_kernel_floor_s` where the chip file has one. A chip
    file without a floor falls back to its launch overhead in both modes (and to 0 without
    either)."""
    ach = chip.achievable
    launch = ach.launch_overhead_s or 0.0
    floor = ach.kernel_floor_s
    if gemm and ach.gemm_kernel_floor_s is not None:
        floor = ach.gemm_kernel_floor_s
    if floor is None:
        return launch
    return floor if cuda_graphs else max(launch, floor)


def kernel_time_s(chip: Chip, work_s: Scalar, *, cuda_graphs: bool, gemm: bool = False) -> Scalar:
    """Seconds one GPU kernel takes to do `work_s` seconds of work (a number or a numpy array).

    Eager launches pay the per-kernel launch cost on top of the work, back to back:
    `max(launch_overhead_s, floor) + work`; replayed from a CUDA graph, the launch is hidden and
    only the kernel's floor remains: `floor + work`. The floor is `kernel_floor_s`, or
    `gemm_kernel_floor_s` for a tiled library GEMM kernel (`gemm=True`) where the chip file has
    one. Additive rather than `max(launch, floor + work)`: in te42kyfo/gpu-benches
    gpu-small-kernels (A100, H200), 10,000 back-to-back launches of one streaming kernel take
    1.2-1.3 us longer each than the same kernels replayed from a graph, at every size from 64 kB
    to 300 MB (docs/prediction.md, "Launch mode")."""
    overhead = kernel_overhead_s(chip, cuda_graphs=cuda_graphs, gemm=gemm)
    if isinstance(work_s, np.ndarray):
        return overhead + work_s
    return overhead + float(work_s)


def _as_array(value: object) -> np.ndarray:
    return np.asarray(value, dtype=np.float64)


def _lookup(dtype: Words, table: Callable[[str], float]) -> Scalar:
    """Apply `table(name) -> float` to a dtype name or an array of names (unique names once)."""
    if isinstance(dtype, np.ndarray):
        names, inverse = np.unique(dtype, return_inverse=True)
        values = np.array([table(str(n)) for n in names], dtype=np.float64)
        return values[inverse].reshape(dtype.shape)
    return table(str(dtype))


def _aligned(length: Scalar, elem_bytes: Scalar, align_bytes: int) -> Scalar:
    return np.mod(_as_array(length) * elem_bytes, align_bytes) == 0


def gemm_dims(spec_text: str, dims: Mapping[str, Scalar]) -> dict[str, Any]:
    """The GEMM an einsum runs as: batch (in both inputs and the output), M (left input and output
    only), N (right input and output only), K (contracted), and each operand's row length. A
    single input streams as M = its output's elements, N = 1, K = the reduced elements."""
    spec = parse_einsum(spec_text)
    lhs, out = spec.lhs.dims, spec.out.dims
    rhs = () if spec.second is None else spec.second.dims

    def prod(names: list[str]) -> Scalar:
        value: Scalar = 1
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


@dataclass(frozen=True)
class GemmWork:
    """What one (batched) GEMM does on one chip: its GEMM shape (`gemm_dims`), FLOPs and bytes
    (from the roofline), bits per element and row length by role ("a", "b", "out"), and the
    compute dtype. Python numbers or numpy arrays that broadcast."""

    batch: Scalar
    m: Scalar
    k: Scalar
    n: Scalar
    flops: Scalar
    bytes_a: Scalar
    bytes_b: Scalar
    bytes_total: Scalar
    bits: dict[str, Scalar]
    rows: dict[str, Scalar]
    compute_dtype: Words
    contracted: bool = True
    # a non-matrix einsum (shardline.ops.roofline.on_vector_units): the vector units' rate
    # FLOP/s, or an array of them per element; None: the matrix path
    vector_rate: Scalar | None = None


@dataclass(frozen=True)
class _Setup:
    """The arrays every chip kind's model reads (one broadcast shape)."""

    chip: Chip
    work: GemmWork
    batch: Scalar
    m: Scalar
    k: Scalar
    n: Scalar
    flops: Scalar
    q_bytes: Scalar
    s: dict[str, Scalar]  # bytes per element by role
    rate: Scalar  # achievable FLOP/s of the compute dtype
    mem_rate: float  # achievable memory bytes/s
    cuda_graphs: bool = False  # kernels replayed from a CUDA graph (GPU only)
    warm_l2: bool = False  # operands left in the L2 by the previous call (GPU only)


# (t_overhead, t_work, compute side?, the kind's named terms)
_KindTerms = tuple[Scalar, Scalar, int | np.ndarray, dict[str, Any]]  # terms: numbers, words


def _cpu_terms(c: _Setup) -> _KindTerms:
    """CPU: per-call overhead + input packing + math at the measured rate; matrix-vector
    products stream (module docstring)."""
    ach, batch, m = c.chip.achievable, c.batch, c.m
    t_call = ach.per_call_overhead_s or ach.launch_overhead_s or 0.0
    t_overhead = batch * t_call  # numpy loops over the batch, one BLAS call per matrix
    vector = (m == 1) | (c.n == 1) | (not c.work.contracted)
    llc, llc_rate = c.chip.on_chip.l2_bytes, c.chip.on_chip.l2_bytes_per_s
    t_stream = batch * stream_time(c.q_bytes / batch, llc, llc_rate, c.mem_rate)
    pack_rate = ach.pack_bytes_per_s
    inputs = (_as_array(c.work.bytes_a) + _as_array(c.work.bytes_b)) / batch
    # packing reads the inputs `mem_rate / pack_rate` times slower than a plain read
    t_pack = (
        batch * pack_read_time(inputs, llc, llc_rate, c.mem_rate) * (c.mem_rate / pack_rate)
        if pack_rate
        else 0.0 * m
    )
    t_math = c.flops / c.rate
    t_work = np.where(vector, t_stream, np.maximum(t_pack + t_math, t_stream))
    compute_side = ~vector & (t_math >= t_pack) & (t_pack + t_math >= t_stream)
    terms = {
        "model": "cpu: per-call overhead + input packing + math at the measured rate; "
        "matrix-vector products stream",
        "t_overhead_s": t_overhead,
        "t_pack_s": t_pack * ~vector,
        "t_compute_s": t_math,
        "t_memory_s": t_stream,
        "matrix_vector": vector,
    }
    return t_overhead, t_work, compute_side, terms


def _tpu_terms(c: _Setup) -> _KindTerms:
    """TPU: M, K and N padded to the MXU; no waves. A contraction so skinny that the padded MXU
    is slower than the vector units (a batched dot product, M = N = 1: 1/128² of the MXU busy)
    runs on the VPU instead, as XLA lowers it (multiply and reduce): the faster of the two."""
    unit = c.chip.on_chip.matrix_unit_elements or 128
    m, k, n = c.m, c.k, c.n

    def pad(x: Scalar) -> Scalar:
        return np.ceil(x / unit) * unit

    t_overhead = (c.chip.achievable.launch_overhead_s or 0.0) * np.ones_like(m)
    pad_eff = (m * k * n) / (pad(m) * pad(k) * pad(n)) if c.work.contracted else np.ones_like(m)
    t_math = c.flops / (c.rate * pad_eff)
    vpu = _as_array(_lookup(c.work.compute_dtype, lambda d: c.chip.vector_rate(d) or 0.0))
    if c.work.contracted and np.any(vpu > 0):
        t_vpu = c.flops / np.where(vpu > 0, vpu, 1.0)
        t_math = np.where(vpu > 0, np.minimum(t_math, t_vpu), t_math)
    t_memory = c.q_bytes / c.mem_rate
    terms = {
        "model": f"tpu: M, K, N padded to the {unit}-wide MXU",
        "t_overhead_s": t_overhead,
        "t_compute_s": t_math,
        "t_memory_s": t_memory,
        "tile_efficiency": pad_eff,
        "mxu_elements": unit,
    }
    return t_overhead, np.maximum(t_math, t_memory), t_math >= t_memory, terms


def _align_efficiency(c: _Setup) -> Scalar:
    """1 where every operand's rows are a multiple of align_bytes, else the unaligned rate."""
    align = c.chip.on_chip.align_bytes
    if not align:
        return np.ones_like(c.m)
    ok = np.ones_like(c.m, dtype=bool)
    for name, length in c.work.rows.items():
        ok = ok & _aligned(length, c.s[name], align)
    unaligned = c.chip.achievable.unaligned_matmul_efficiency or DEFAULT_UNALIGNED_EFFICIENCY
    return np.where(ok, 1.0, unaligned)


def _best_gpu_tiles(c: _Setup, rate: Scalar) -> dict[str, Scalar]:
    """Per element: the candidate tile and split-K factor with the shortest time (the first
    candidate in `GPU_TILE_CANDIDATES` x `SPLIT_K` order on a tie), every candidate timed at
    once over a leading axis."""
    gemm = Gemm(c.m, c.k, c.n, c.s["a"], c.s["b"], c.s["out"], c.batch)
    shape = np.broadcast(c.m, c.k, c.n, c.batch, rate).shape
    lead = (slice(None),) + (None,) * len(shape)
    bm = np.array([t[0] for t in GPU_TILE_CANDIDATES], dtype=float)[lead]
    bn = np.array([t[1] for t in GPU_TILE_CANDIDATES], dtype=float)[lead]
    timed = [gpu_tile_time(c.chip, gemm, bm, bn, rate, split) for split in SPLIT_K]
    full = (len(GPU_TILE_CANDIDATES), *shape)
    # [candidate, split, element...] flattened in the loop's order: candidate outer, split inner
    t = np.stack([np.broadcast_to(x[0], full) for x in timed], axis=1).reshape(-1, *shape)
    waves = np.stack([np.broadcast_to(x[1], full) for x in timed], axis=1).reshape(-1, *shape)
    best = np.argmin(t, axis=0)
    pick = best[None, ...]
    tile, split = np.divmod(best, len(SPLIT_K))
    return {
        "bm": bm.reshape(-1)[tile],
        "bn": bn.reshape(-1)[tile],
        "split": np.asarray(SPLIT_K, dtype=float)[split],
        "t": np.take_along_axis(t, pick, axis=0)[0],
        "waves": np.take_along_axis(waves, pick, axis=0)[0],
    }


def _gpu_terms(c: _Setup) -> _KindTerms:
    """GPU: the best of the library's tiles and split-K factors, waves over the SMs, one kernel
    timed by `kernel_time_s` (its overhead here, the work in `max(t_compute, t_memory)`)."""
    cores = c.chip.on_chip.cores or 1
    m, n, batch = c.m, c.n, c.batch
    align_eff = _align_efficiency(c)
    best = _best_gpu_tiles(c, c.rate * align_eff)
    bm, bn, split, waves = best["bm"], best["bn"], best["split"], best["waves"]
    tiles = batch * np.ceil(m / bm) * np.ceil(n / bn) * split
    # a matrix-vector product (or an einsum without a contraction) runs a streaming kernel: no
    # output tiles, a streaming kernel's floor (unless the library tiles it: matrix_vector_tiled)
    vector = ((m == 1) | (n == 1)) & (not c.chip.on_chip.matrix_vector_tiled)
    plain = (not c.work.contracted) | vector
    t_overhead = np.where(
        plain,
        kernel_overhead_s(c.chip, cuda_graphs=c.cuda_graphs),
        kernel_overhead_s(c.chip, cuda_graphs=c.cuda_graphs, gemm=True),
    ) * np.ones_like(m)
    t_math = np.where(plain, c.flops / (c.rate * align_eff), best["t"])
    t_memory = gpu_read_time(c.chip, c.q_bytes, c.mem_rate, warm_l2=c.warm_l2)
    terms = {
        "model": f"gpu: best of {len(GPU_TILE_CANDIDATES)} library tiles, waves over "
        f"{cores} SMs, "
        + ("kernel floor (CUDA graph replay)" if c.cuda_graphs else "launch overhead"),
        "t_overhead_s": t_overhead,
        "t_compute_s": t_math,
        "t_memory_s": t_memory,
        "tile_m": bm,
        "tile_n": bn,
        "split_k": split,
        "tiles": tiles,
        "waves": waves,
        "sms": cores,
        "wave_efficiency": tiles / (waves * cores),
        "tile_efficiency": (m * n * batch * split) / (tiles * bm * bn),
        "streaming_kernel": plain,
        "align_efficiency": align_eff,
    }
    return t_overhead, np.maximum(t_math, t_memory), t_math >= t_memory, terms


_KIND_MODELS = {"cpu": _cpu_terms, "tpu": _tpu_terms}


def predict_gemm(
    chip: Chip, work: GemmWork, t_lower_s: Scalar, *, launch: str = "eager", warm_l2: bool = False
) -> dict[str, Any]:
    """The realistic time of a (batched) GEMM on one chip, as a dict of named terms (arrays).
    `launch`: "eager" (the default) or "graphs" (CUDA-graph replay; GPUs only). `warm_l2`: the
    operands are left in the L2 by the previous call (GPUs only; module docstring)."""
    cuda_graphs = check_launch(launch)
    compute_dtype = work.compute_dtype
    if work.vector_rate is not None:  # elementwise work: the vector units' peak (no measurement)
        shown = "per row" if isinstance(compute_dtype, np.ndarray) else str(compute_dtype)
        rate, source = work.vector_rate, f"vector units, {shown} (chip file, peak)"
    else:
        rate = _lookup(compute_dtype, lambda d: achievable_rate(chip, d)[0])
        source = (
            achievable_rate(chip, str(compute_dtype))[1]
            if not isinstance(compute_dtype, np.ndarray)
            else "per row: see hardware"
        )
    mem_rate = chip.achievable.mem_bytes_per_s or chip.mem_bytes_per_s
    # one shape for every term: a scalar M with an array of K (a sweep) broadcasts
    batch, m, k, n = np.broadcast_arrays(
        *(_as_array(v) for v in (work.batch, work.m, work.k, work.n))
    )
    setup = _Setup(
        chip=chip,
        work=work,
        batch=batch,
        m=m,
        k=k,
        n=n,
        flops=_as_array(work.flops),
        q_bytes=_as_array(work.bytes_total),
        s={name: _as_array(b) / 8 for name, b in work.bits.items()},
        rate=rate,
        mem_rate=mem_rate,
        cuda_graphs=cuda_graphs,
        warm_l2=warm_l2,
    )
    t_overhead, t_work, compute_side, kind_terms = _KIND_MODELS.get(chip.kind, _gpu_terms)(setup)
    if chip.kind in _KIND_MODELS:
        predicted = t_overhead + t_work
    else:  # a GPU: one kernel, a streaming or a tiled GEMM one, under the launch mode
        streaming = kind_terms["streaming_kernel"]
        predicted = np.where(
            streaming,
            kernel_time_s(chip, t_work, cuda_graphs=cuda_graphs),
            kernel_time_s(chip, t_work, cuda_graphs=cuda_graphs, gemm=True),
        )
    bound = np.where(t_overhead > t_work, "overhead", np.where(compute_side, "compute", "memory"))
    return {
        "lower_bound_s": t_lower_s,
        "achievable_flops_per_s": rate,
        "achievable_flops_source": source,
        "achievable_mem_bytes_per_s": mem_rate,
        **kind_terms,
        "predicted_s": predicted,
        "predicted_bound": bound,
        "lower_bound_over_predicted": _as_array(t_lower_s) / predicted,
    }


def _scalarize(value: object) -> object:
    if (isinstance(value, np.ndarray) and value.ndim == 0) or isinstance(value, np.generic):
        return value.item()
    return value


def with_prediction(
    result: RooflineResult, *, launch: str = "eager", warm_l2: bool = False
) -> RooflineResult:
    """The roofline result with `predicted_s`, `predicted_bound` and the named terms in
    `prediction` (which also repeats the lower bound, so that the two are never confused).
    `launch`: "eager" (kernels launched one by one, the default) or "graphs" (replayed from a
    CUDA graph: the launch overhead hidden, the per-kernel floor kept). `warm_l2`: the operands
    are left in the L2 by the previous call (a benchmark replaying one kernel on the same
    buffers; GPUs only): where they fit it they are read at the L2's resident-read rate."""
    chip = result.chip
    if chip is None:
        return result
    gemm = gemm_dims(result.spec, result.dims)
    spec = parse_einsum(result.spec)
    # a single input stands in for "b" too (its bits and rows), with no bytes of its own
    names = {"a": spec.lhs.name, "b": (spec.second or spec.lhs).name, "out": spec.out.name}

    def bits_of(dtype: Words) -> Scalar:
        return _lookup(dtype, lambda d: float(dtype_bits(d)))

    bits = {role: bits_of(result.dtypes[name]) for role, name in names.items()}
    rows = {role: gemm["rows"][name] for role, name in names.items()}
    work = GemmWork(
        batch=gemm["batch"],
        m=gemm["m"],
        k=gemm["k"],
        n=gemm["n"],
        flops=result.flops,
        bytes_a=result.bytes[names["a"]],
        bytes_b=0 if spec.is_unary else result.bytes[names["b"]],
        bytes_total=result.bytes["total"],
        bits=bits,
        rows=rows,
        compute_dtype=result.dtypes["compute"],
        contracted=bool(spec.contracted) and not spec.is_unary,
        vector_rate=result.hardware.flops_per_s if result.compute_unit == "vector" else None,
    )
    terms = predict_gemm(chip, work, result.t_lower_s, launch=launch, warm_l2=warm_l2)
    vector = any(
        isinstance(v, np.ndarray)
        for v in (*result.dims.values(), result.dtypes["compute"], result.flops)
    )
    if not vector:
        terms = _scalar_terms(terms)
    predicted, bound = terms.pop("predicted_s"), terms.pop("predicted_bound")
    cost = dataclasses.replace(result.cost, predicted_s=predicted)
    return dataclasses.replace(result, cost=cost, predicted_bound=bound, prediction=terms)


def _scalar_terms(terms: dict[str, Any]) -> dict[str, object]:
    """The terms of one multiply as Python numbers: counts as ints, flags as bools."""
    terms = {key: _scalarize(value) for key, value in terms.items()}  # numbers, words, flags
    for key in ("tile_m", "tile_n", "split_k", "tiles", "waves", "mxu_elements"):
        if key in terms:
            terms[key] = int(terms[key])
    for key in ("matrix_vector", "streaming_kernel"):
        if key in terms:
            terms[key] = bool(terms[key])
    terms["predicted_bound"] = str(terms["predicted_bound"])
    return terms
