"""Per tensor class dtypes of a workload: weights, activations, KV cache, optimizer state and
communication (docs/whole-model.md, "Precision per tensor class").

- Activations and compute: the workload's `dtype` (`--dtype`). An 8-bit dtype runs the matmuls in
  8 bits and keeps the activations between them in bf16 (`shardline.realistic.block
  .activation_dtype`): NVIDIA Transformer Engine casts each GEMM's inputs to fp8 right before the
  GEMM and runs the rest of the layer in the higher precision.
- Weights: `weight_dtype` (`--weight-dtype`, the template's `weight_dtype`). Narrower weights with
  wider activations (int4 or fp8 weights, bf16 activations) change the weight bytes (memory and
  each GEMM's weight reads, the whole of a decode step's traffic) while the GEMM computes in the
  activations' dtype (a layer computes in its widest input's dtype). Training in 8 bits keeps the
  weights in bf16 unless told (`default_weight_dtype`): Transformer Engine's modules hold their
  parameters in the higher precision and cast them per GEMM.
- KV cache: `kv_dtype` (`--kv-dtype`, the template's `kv_dtype`).
- Attention: `attention_dtype` (`--attention-dtype`, the template's `attention_dtype`), the dtype
  the fused attention kernel reads q, k, v in and computes in. Training in 8 bits runs it in bf16
  unless told (`default_attention_dtype`): Transformer Engine's fp8 recipes (DelayedScaling,
  Float8CurrentScaling, MXFP8BlockScaling) default `fp8_dpa` to False, so only the matmuls of the
  linear layers run in fp8 (NVIDIA/TransformerEngine, transformer_engine/common/recipe/__init__.py;
  Megatron's `--fp8-dot-product-attention` turns it on).
- Optimizer state: the optimizer's bytes per parameter (`--optimizer`), with an fp32 master copy
  where the optimizer keeps one and the weights are narrower than fp32.
- Communication: each collective moves the array it reduces or gathers in that array's dtype
  (weights' dtype for FSDP gathers, gradients' for reductions, activations' for TP and pipeline).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from shardline.basics.dtypes import canonical_dtype, dtype_bits
from shardline.errors import InputError
from shardline.workload.dense_first import DenseFirstWorkload
from shardline.workload.moe import ROUTED_EXPERT_LAYERS
from shardline.workload.workload import Layer, Workload

__all__ = [
    "with_tensor_dtypes",
    "template_precision",
    "layer_in_dtype",
    "default_weight_dtype",
    "weight_dtype_of",
    "default_attention_dtype",
    "MASTER_WEIGHTS",
    "PRECISION_FIELDS",
    "ATTENTION_DTYPE_8BIT_TRAINING",
    "ATTENTION_DTYPE_MIN_INFERENCE",
]

# Transformer Engine's fp8 training keeps the parameters in bf16 (the GEMMs see fp8 casts).
MASTER_WEIGHTS = "bf16"
# ... and its dot-product attention in bf16 (the recipes' fp8_dpa defaults to False).
ATTENTION_DTYPE_8BIT_TRAINING = "bf16"
# ... and an inference step in a 4-bit dtype runs its fused attention in fp8: the narrowest q, k, v
# the serving engines' attention kernels take (TensorRT-LLM's FP8 context FMHA and XQA over an fp8
# KV cache; FlashInfer's trtllm-gen kernels, vLLM pull request 21716 'Support Flashinfer TRTLLM
# FP8-q/kv/out Attention Kernel'; FlashAttention-4 is bf16); none computes in fp4.
ATTENTION_DTYPE_MIN_INFERENCE = "fp8"
_WIDE_BITS = 16
# The template fields `template_precision` applies after the template is built.
PRECISION_FIELDS = ("weight_dtype", "attention_dtype", "tied_embeddings")


def default_weight_dtype(dtype: str, phase: str) -> str | None:
    """The weights' dtype when none is given: bf16 for 8-bit training (Transformer Engine's
    master weights), else the workload's dtype (None: leave the layers as they are)."""
    if phase == "training" and dtype_bits(dtype) < _WIDE_BITS:
        return MASTER_WEIGHTS
    return None


def default_attention_dtype(dtype: str, phase: str) -> str | None:
    """The attention kernel's dtype when none is given: bf16 for 8-bit training (Transformer
    Engine's `fp8_dpa = False`); fp8 for inference in a dtype under 8 bits (no attention kernel
    takes 4-bit q, k, v: the narrowest the engines run is fp8, ATTENTION_DTYPE_MIN_INFERENCE);
    else the workload's (None: leave the layers as they are)."""
    if phase == "training" and dtype_bits(dtype) < _WIDE_BITS:
        return ATTENTION_DTYPE_8BIT_TRAINING
    if phase != "training" and dtype_bits(dtype) < dtype_bits(ATTENTION_DTYPE_MIN_INFERENCE):
        return ATTENTION_DTYPE_MIN_INFERENCE
    return None


def _dtype_or_none(value: str | None) -> str | None:
    return None if value is None else canonical_dtype(value)


def with_tensor_dtypes(
    workload: Workload,
    *,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    attention_dtype: str | None = None,
) -> Workload:
    """The workload with its weight operands stored in `weight_dtype`, its KV-cache operands in
    `kv_dtype` and its fused attention kernel (the einsums of kernel "attention") reading and
    computing in `attention_dtype` (None: unchanged). Other layers keep their compute dtype."""
    weights, cache = _dtype_or_none(weight_dtype), _dtype_or_none(kv_dtype)
    attention = _dtype_or_none(attention_dtype)
    if weights is None and cache is None and attention is None:
        return workload

    def stored(layer: Layer) -> Layer:
        dtypes = dict(layer.dtypes)
        if weights is not None:
            dtypes.update({name: weights for name in layer.weights})
        if cache is not None:
            dtypes.update({name: cache for name in layer.cache})
        if attention is not None and layer.kernel == "attention":
            dtypes.update({name: attention for name in dtypes if name not in layer.cache})
            return replace(layer, dtype=attention, dtypes=dtypes, compute_dtype=attention)
        return layer if dtypes == dict(layer.dtypes) else replace(layer, dtypes=dtypes)

    model = workload.model
    dense = _dense_weight_dtype(model, weights)
    convert: Callable[[Layer], Layer] = stored if dense is None else _experts_only(stored, dense)
    layers = [convert(layer) for layer in workload.layers]
    if isinstance(workload, DenseFirstWorkload):  # the dense first blocks' FFN einsums too
        workload = replace(workload, dense_ffn=tuple(convert(x) for x in workload.dense_ffn))
    if model is not None and weights is not None:
        model = replace(model, weight_dtype=dense or weights)
    formula = workload.kv_cache_formula
    if formula is not None and cache is not None:
        formula = {**formula, "s_kv_bits": dtype_bits(cache)}
    return replace(workload, layers=tuple(layers), model=model, kv_cache_formula=formula)


def _dense_weight_dtype(model: object, weights: str | None) -> str | None:
    """The dtype the non-expert weights stay in when `weights` narrower than 16 bits are the
    model's experts-only quantized checkpoint (ModelShape.dense_weight_dtype); None otherwise."""
    dense = getattr(model, "dense_weight_dtype", "") if model is not None else ""
    if not dense or weights is None or dtype_bits(weights) >= _WIDE_BITS:
        return None
    return canonical_dtype(dense)


def _experts_only(stored: Callable[[Layer], Layer], dense: str) -> Callable[[Layer], Layer]:
    """`stored` for a checkpoint that quantizes only the routed experts (gpt-oss: MXFP4 experts,
    everything else bf16, the model card's `modules_to_not_convert`): every other matmul
    (attention projections, router, dense feed-forward) keeps its weights in `dense` and computes
    in it, as the engines run those layers unquantized; the experts and the KV cache as told."""

    def layout(layer: Layer) -> Layer:
        if layer.kernel != "gemm" or layer.name in ROUTED_EXPERT_LAYERS:
            return stored(layer)
        dtypes = {name: dense for name in layer.dtypes} | {name: dense for name in layer.weights}
        return replace(layer, dtype=dense, dtypes=dtypes, compute_dtype=dense)

    return layout


def weight_dtype_of(workload: Workload) -> str:
    """The dtype the workload's weights are stored in (its first weight operand's)."""
    for layer in workload.layers:
        if layer.weights:
            return str(layer.dtypes.get(layer.weights[0], layer.dtype))
    return str(workload.layers[0].dtype)


def template_precision(
    workload: Workload,
    *,
    weight_dtype: str | None = None,
    attention_dtype: str | None = None,
    tied_embeddings: bool = False,
) -> Workload:
    """A [transformer] template's `weight_dtype` (default: `default_weight_dtype`),
    `attention_dtype` (default: `default_attention_dtype`) and `tied_embeddings` put into its
    workload."""
    if workload.model is None:
        return workload
    if not isinstance(tied_embeddings, bool):
        raise InputError(
            f"[transformer] tied_embeddings must be true or false, got {tied_embeddings!r}"
        )
    for field, value in (("weight_dtype", weight_dtype), ("attention_dtype", attention_dtype)):
        if value is not None and (not isinstance(value, str) or not value.strip()):
            raise InputError(
                f'[transformer] {field} must be a dtype name such as "fp8", got {value!r}'
            )
    dtype, phase = workload.model.dtype, workload.phase
    out = with_tensor_dtypes(
        workload,
        weight_dtype=weight_dtype or default_weight_dtype(dtype, phase),
        attention_dtype=attention_dtype or default_attention_dtype(dtype, phase),
    )
    assert out.model is not None
    return replace(out, model=replace(out.model, tied_embeddings=tied_embeddings))


def layer_in_dtype(layer: Layer, dtype: str) -> Layer:
    """`--dtype` on a [[layer]] stack: every operand and the compute in `dtype`."""
    return replace(layer, dtype=dtype, dtypes={}, compute_dtype=None)
