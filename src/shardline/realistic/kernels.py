"""One kernel's realistic time on one chip.

- Launch rule (`shardline.ops.predict.kernel_time_s`): run eagerly, a kernel costs
  `max(launch_overhead_s, floor) + work`; replayed from a CUDA graph, `floor + work` (the floor
  is the device's shortest kernel: its ramp up and drain).
- A memory-bound kernel's work is its bytes at the chip's achievable HBM bandwidth; an
  elementwise kernel's is the longer of that and its FLOPs at the chip's vector rate (CUDA cores,
  the TPU VPU: `Chip.vector_rate`), never the matrix units' peak.
- A GEMM is `shardline.ops.predict`'s realistic time (tiles, waves, alignment, achievable rate) with
  the launch rule above.
- The fused attention kernel (FlashAttention-style; Dao 2023, FlashAttention-2): the forward does
  the two attention einsums' FLOPs at the chip's achievable attention efficiency, halved under a
  causal mask; the backward kernel does 2.5x the forward's FLOPs (it recomputes the scores), at
  the backward efficiency. Decode attention reads the KV cache: memory-bound. On a GPU, a launch
  over sequences shorter than 8k keeps the share of that efficiency measured FlashAttention
  kernels keep there (`shardline.realistic.attention_length`: 0.92 at 2k, 0.70 at 512).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from math import prod
from typing import Any

import numpy as np

from shardline.basics.dtypes import dtype_bits
from shardline.hardware import Chip
from shardline.ops.achievable import achievable_rate
from shardline.ops.cost import Cost
from shardline.ops.layer import Layer
from shardline.ops.predict import kernel_time_s, with_prediction
from shardline.ops.roofline import evaluate_einsum
from shardline.realistic.attention_length import attention_length_factor
from shardline.realistic.modelshape import ModelShape

__all__ = [
    "launch_rule_s",
    "memory_kernel_s",
    "vector_kernel_s",
    "gemm_time_s",
    "attention_work_s",
    "einsum_time_s",
    "einsum_times_s",
    "shape_key",
    "causal_lower_bound",
    "mem_rate",
    "FLASH_BWD_FLOPS_RATIO",
]

# A causal mask skips the half of the S x T scores above the diagonal (Dao 2023 counts causal
# attention at half the FLOPs).
CAUSAL_FRACTION = 0.5
# The FlashAttention backward kernel does 2.5x the forward's matmul FLOPs (five matmuls against
# two; Dao 2023, FlashAttention-2, section 4 benchmark convention).
FLASH_BWD_FLOPS_RATIO = 2.5
# Each einsum of the attention backward (dQ, dK, dP, dV) is counted at the forward's FLOPs, 2x in
# all, so the kernel's 2.5x is 1.25x the backward einsums' FLOPs.
_BWD_PER_GRAD_EINSUM = FLASH_BWD_FLOPS_RATIO / 2


def launch_rule_s(chip: Chip, work_s: float, *, cuda_graphs: bool, gemm: bool = False) -> float:
    """One kernel of `work_s` seconds of device work under the launch rule of
    `shardline.ops.predict.kernel_time_s` (eager: launch overhead or the kernel floor, whichever is
    longer, plus the work; CUDA graphs: the floor plus the work)."""
    return float(kernel_time_s(chip, work_s, cuda_graphs=cuda_graphs, gemm=gemm))


def mem_rate(chip: Chip) -> float:
    """Achievable HBM bytes/s (the datasheet figure when the chip file has no measurement)."""
    return chip.achievable.mem_bytes_per_s or chip.mem_bytes_per_s


def memory_kernel_s(chip: Chip, nbytes: float, *, cuda_graphs: bool) -> float:
    """A memory-bound kernel moving `nbytes` (reads + writes) at achievable bandwidth."""
    return launch_rule_s(chip, nbytes / mem_rate(chip), cuda_graphs=cuda_graphs)


def vector_kernel_s(
    chip: Chip, nbytes: float, flops: float, dtype: str, *, cuda_graphs: bool
) -> float:
    """An elementwise kernel moving `nbytes` and doing `flops` on the vector units in `dtype`:
    max(bytes at achievable bandwidth, FLOPs at the vector rate); a chip file without a vector
    rate prices the bytes only."""
    rate = chip.vector_rate(dtype)
    work = nbytes / mem_rate(chip)
    if rate and flops:
        work = max(work, flops / rate)
    return launch_rule_s(chip, work, cuda_graphs=cuda_graphs)


def gemm_time_s(layer: Layer, chip: Chip, dims: Mapping[str, int], *, cuda_graphs: bool) -> float:
    """The per-op realistic time of one einsum instance (shardline.ops.predict, with the launch
    mode), with on-chip operands' bytes taken out of its memory time."""
    return float(_predicted_gemm_s(layer, chip, dict(dims), cuda_graphs))


def _predicted_gemm_s(layer: Layer, chip: Chip, dims: dict[str, Any], cuda_graphs: bool) -> Any:
    """The per-op prediction at `dims` (ints, or float arrays of many sizes: elementwise), with
    on-chip operands' bytes taken out of its memory time."""
    result = evaluate_einsum(layer.parsed, dims, chip, dict(layer.dtypes), str(layer.compute_dtype))
    predicted = with_prediction(result, launch="graphs" if cuda_graphs else "eager")
    t = np.asarray(predicted.cost.predicted_s, dtype=np.float64)
    if not layer.onchip:
        return t
    terms = predicted.prediction or {}
    overhead = np.asarray(terms.get("t_overhead_s", 0.0), dtype=np.float64)
    onchip = sum(np.asarray(result.bytes[name], dtype=np.float64) for name in layer.onchip)
    t_mem = (np.asarray(result.bytes["total"], dtype=np.float64) - onchip) / mem_rate(chip)
    return overhead + np.maximum(terms.get("t_compute_s", t - overhead), t_mem)


def attention_efficiency(chip: Chip, compute_dtype: str, backward: bool) -> float:
    """The fused attention kernel's achieved fraction of the dense peak: the chip file's figure
    (a missing backward figure takes the forward's), else the chip's achievable matmul
    efficiency for the dtype."""
    a = chip.achievable
    given = a.attention_bwd_efficiency if backward else a.attention_fwd_efficiency
    if given:
        return given
    if backward and a.attention_fwd_efficiency:  # no backward figure: the forward's (the
        return a.attention_fwd_efficiency  # backward kernel is never the faster of the two)
    return achievable_rate(chip, compute_dtype)[0] / chip.peak(compute_dtype)


def latent_attention(layer: Layer) -> bool:
    """An attention einsum over a latent shared by every query head (MLA's absorbed scores
    q[B,S,H,K] * c[B,T,K] and values p[B,H,S,T] * cv[B,T,V]): its two inputs share no dim that
    the output keeps but the sequences' B, where grouped-query attention's share their KV head
    (q[B,S,G,R,E] * k[B,T,G,E] -> p[B,G,R,S,T] keeps G)."""
    first, second = layer.inputs
    kept = set(first.dims) & set(second.dims) & set(layer.output.dims)
    return len(kept) == 1


def attention_work_s(
    layer: Layer,
    chip: Chip,
    dims: Mapping[str, int],
    *,
    causal: bool,
    decode: bool,
    fraction: float = CAUSAL_FRACTION,
) -> float:
    """One attention einsum as its share of the fused kernel: FLOPs (times `fraction`, the
    computed part of the scores, when causal: a half, less with sliding windows) at the
    attention efficiency, or at least its HBM bytes at achievable bandwidth (decode: the KV cache
    read)."""
    result = evaluate_einsum(
        layer.parsed, dict(dims), chip, dict(layer.dtypes), str(layer.compute_dtype)
    )
    compute = layer.compute_dtype or layer.dtype
    backward = layer.phase == "backward"
    flops = float(result.flops) * (fraction if causal and not decode else 1.0)
    if backward:
        flops *= _BWD_PER_GRAD_EINSUM
    rate = attention_efficiency(chip, compute, backward) * chip.peak(compute)
    rate *= length_factor(chip, dims, decode)
    mla_rate = chip.achievable.mla_decode_flops_per_s
    if decode and mla_rate and latent_attention(layer):
        rate = mla_rate  # the chip's MLA decode kernel (FlashMLA on Hopper)
    hbm = float(result.bytes["total"]) - sum(float(result.bytes[n]) for n in layer.onchip)
    return max(flops / rate, hbm / mem_rate(chip))


def length_factor(chip: Chip, dims: Mapping[str, int], decode: bool) -> float:
    """The share of its long-sequence efficiency a GPU's fused attention keeps over a launch of
    dims["S"]-token queries (shardline.realistic.attention_length: measured FlashAttention
    kernels); 1 for decode (the KV-cache read binds), a TPU or CPU, or an einsum without S."""
    length = dims.get("S")
    if decode or chip.kind != "gpu" or not length:
        return 1.0
    return attention_length_factor(float(length))


# Memo of einsum_time_s across searches (a batch sweep plans the same shapes many times). A Chip
# holds dicts and has no hash, so the key names it by identity; each entry holds its chip, so that
# the chip stays alive (its id not reused by another object) for as long as the entry stands.
_MEMO: dict[tuple[object, ...], tuple[Chip, float]] = {}
_MEMO_MAX = 1 << 18


def shape_key(
    layer: Layer, dims: Mapping[str, int], model: ModelShape | None
) -> tuple[object, ...]:
    """All that an einsum instance's realistic time (`einsum_time_s`) and roofline (`layer_cost`,
    `causal_lower_bound`) read: the layer's einsum, dtypes, kernel, on-chip operands and phase
    at `dims`, and the model's attention flags; not the layer's own (global) sizes."""
    flags = None
    if model is not None:
        flags = (model.attention, model.causal, model.decode, model.causal_fraction)
    return (
        layer.spec,
        tuple(dims.items()),
        layer.dtype,
        tuple(layer.dtypes.items()),
        layer.compute_dtype,
        layer.kernel,
        layer.onchip,
        layer.phase,
        flags,
        layer.name in ROUTED_EXPERT_LAYERS,  # a decode step's experts: moe_decode_chip
    )


def einsum_time_s(
    layer: Layer, chip: Chip, dims: Mapping[str, int], model: ModelShape | None, cuda_graphs: bool
) -> float:
    """The realistic time of one einsum instance: a GEMM under the launch rule, or its share of
    the fused attention kernel (one launch per kernel: on the einsum that makes the scores)."""
    key = (id(chip), shape_key(layer, dims, model), cuda_graphs)
    hit = _recalled(key, chip)
    if hit is not None:
        return hit
    return _remember(key, chip, _einsum_time_s(layer, chip, dims, model, cuda_graphs))


def _recalled(key: tuple[object, ...], chip: Chip) -> float | None:
    hit = _MEMO.get(key)
    return hit[1] if hit is not None and hit[0] is chip else None


def _remember(key: tuple[object, ...], chip: Chip, seconds: float) -> float:
    if len(_MEMO) >= _MEMO_MAX:
        _MEMO.clear()
    _MEMO[key] = (chip, seconds)
    return seconds


EXACT_BELOW = 2**53  # every integer below it is a float64 exactly


def einsum_times_s(
    layer: Layer,
    chip: Chip,
    sizes: Sequence[Mapping[str, int]],
    model: ModelShape | None,
    cuda_graphs: bool,
) -> list[float]:
    """`einsum_time_s` of one einsum at many sizes, the same numbers: a GEMM's priced at once
    over arrays (`_gemm_times_s`) where every count it forms is exact as a float (`_exact`), the
    rest one by one."""
    out: list[float] = [0.0] * len(sizes)
    keys = [(id(chip), shape_key(layer, dims, model), cuda_graphs) for dims in sizes]
    gemm = model is None or not _fused_attention(layer, model)
    batch = []
    for k, (key, dims) in enumerate(zip(keys, sizes, strict=True)):
        hit = _recalled(key, chip)
        if hit is not None:
            out[k] = hit
        elif gemm and _exact(layer, dims):
            batch.append(k)
        else:
            out[k] = _remember(key, chip, _einsum_time_s(layer, chip, dims, model, cuda_graphs))
    if batch:
        routed = model is not None and model.decode and layer.name in ROUTED_EXPERT_LAYERS
        on = moe_decode_chip(chip) if routed else chip
        found = _gemm_times_s(layer, on, [sizes[k] for k in batch], cuda_graphs)
        for k, seconds in zip(batch, found, strict=True):
            out[k] = _remember(keys[k], chip, seconds)
    return out


def _exact(layer: Layer, dims: Mapping[str, int]) -> bool:
    """Whether every count the per-op model forms of this einsum (FLOPs, each operand's bits,
    the GEMM's M, N, K and batch: products of its dims) is an integer below 2**53: then the
    scalar call's integer arithmetic and the arrays' float arithmetic give the same numbers."""
    spec = layer.parsed
    every = prod(dims[d] for d in spec.all_dims)
    if every * max(spec.flop_factor, 1) >= EXACT_BELOW:
        return False
    return all(
        prod(dims[d] for d in op.dims) * dtype_bits(layer.dtypes[op.name]) < EXACT_BELOW
        for op in spec.operands
    )


def _gemm_times_s(
    layer: Layer, chip: Chip, sizes: Sequence[Mapping[str, int]], cuda_graphs: bool
) -> list[float]:
    """`gemm_time_s` at each of `sizes` (`_exact` ones), the per-op model run once over arrays of
    the sizes: every step elementwise, as the scalar call runs it."""
    dims = {d: np.array([x[d] for x in sizes], dtype=np.float64) for d in sizes[0]}
    t = _predicted_gemm_s(layer, chip, dims, cuda_graphs)
    return [float(x) for x in np.broadcast_to(t, (len(sizes),))]


def _fused_attention(layer: Layer, model: ModelShape) -> bool:
    """Whether the einsum runs inside the fused attention kernel (FlashAttention-style)."""
    return layer.kernel == "attention" and model.attention == "flash"


def _einsum_time_s(
    layer: Layer, chip: Chip, dims: Mapping[str, int], model: ModelShape | None, cuda_graphs: bool
) -> float:
    if model is not None and _fused_attention(layer, model):
        work = attention_work_s(
            layer,
            chip,
            dims,
            causal=model.causal,
            decode=model.decode,
            fraction=model.causal_fraction,
        )
        if layer.output.name in layer.onchip:
            return launch_rule_s(chip, work, cuda_graphs=cuda_graphs)
        return work
    if model is not None and model.decode and layer.name in ROUTED_EXPERT_LAYERS:
        chip = moe_decode_chip(chip)
    return gemm_time_s(layer, chip, dims, cuda_graphs=cuda_graphs)


# the routed experts' einsums of a MoE block (shardline.workload.moe builds them; a quantized
# checkpoint may quantize only these: gpt-oss)
ROUTED_EXPERT_LAYERS = frozenset({"expert_in", "expert_up", "expert_down"})
_MOE_CHIPS: dict[int, tuple[Chip, Chip]] = {}


def moe_decode_chip(chip: Chip) -> Chip:
    """`chip` as a decode step's routed expert einsums see it: its HBM read at the fused MoE
    kernel's rate, `achievable.moe_decode_bytes_per_s`, where the chip file gives one (the
    engines run a decode step's experts as one grouped kernel over every expert of a few rows,
    which streams the weights below a plain read's rate); `chip` itself otherwise."""
    rate = chip.achievable.moe_decode_bytes_per_s
    if not rate:
        return chip
    kept = _MOE_CHIPS.get(id(chip))
    if kept is None or kept[0] is not chip:
        slower = replace(chip, achievable=replace(chip.achievable, mem_bytes_per_s=rate))
        kept = _MOE_CHIPS[id(chip)] = (chip, slower)
    return kept[1]


def causal_lower_bound(cost: Cost, layer: Layer, model: ModelShape | None) -> Cost:
    """An attention einsum's roofline with the causal saving: a causal fused kernel skips the
    masked half of the scores, so its compute time is half the full S x T product's (the FLOP count
    keeps the full product, the MFU convention). Other einsums unchanged."""
    if layer.kernel != "attention" or model is None or not model.causal or model.decode:
        return cost
    if model.attention != "flash":  # the standard kernel computes the whole product, then masks
        return cost
    t_compute = cost.t_compute_s * model.causal_fraction
    return replace(
        cost,
        t_compute_s=t_compute,
        t_lower_s=max(t_compute, cost.t_memory_s),
        t_upper_s=t_compute + cost.t_memory_s,
    )
