"""Activation memory of a transformer block in training, per microbatch on one device.

Korthikanti et al. 2022 ("Reducing Activation Recomputation in Large Transformer Models",
arXiv 2205.05198, section 4), term by term so that grouped-query attention and gated FFNs fit:
with 2-byte activations, s tokens, b sequences, h hidden, a heads, t tensor-parallel ranks,

- kept on every rank unless sequence parallel: the two norms' inputs (4sbh), the QKV and FFN
  inputs (2sbh each), two dropout masks (sbh each): 10sbh;
- split by tensor parallelism: Q, K, V and the output projection's input (8sbh for multi-head
  attention), the activation's input and the down projection's input (16sbh for d_ff = 4h):
  24sbh / t;
- the attention scores (standard attention only): softmax output, dropout mask and dropout output,
  5as^2b / t; FlashAttention never stores them and selective recompute drops them.

So `sbh(10 + 24/t + 5as/(ht))` with tensor parallelism, `sbh/t (34 + 5as/h)` with sequence
parallelism; full recompute keeps the layer input only, `2sbh` (split by t under sequence
parallelism). Every recompute policy (shardline.basics.recompute, recompute.toml) is the sum of
the terms of the tensors it keeps; "none" keeps them all. A policy that saves residuals (JAX:
MaxText's) stores only the kept tensors the backward reads (`read_tensors`); the tensors an
`offload` set names are held in host memory and leave the device's count.
"""

from __future__ import annotations

from shardline.basics.dtypes import dtype_bits
from shardline.basics.recompute import (
    TENSORS,
    Policy,
    checkpointed_blocks,
    kept_tensors,
    policy,
    read_tensors,
)
from shardline.realistic.block import MASK_BYTES, activation_dtype
from shardline.realistic.modelshape import ModelShape

__all__ = [
    "layer_activation_bytes",
    "kept_bytes",
    "checkpointed_share",
    "in_flight_microbatches",
]


def layer_activation_bytes(
    model: ModelShape,
    sequences: float,
    *,
    tp: int,
    sp: bool,
    recompute: str,
    offload: frozenset[str] = frozenset(),
    blocks: float | None = None,
    chunks: int = 1,
) -> float:
    """Bytes one block keeps in device memory for the backward pass, for `sequences` sequences on
    one device, under the recompute policy `recompute` (shardline.basics.recompute): the sum of
    the tensors it stores, less those `offload` moves to host memory. `layer-N` (every Nth block
    fully recomputed) and `full-block:N` (the first N of each of `chunks` virtual stages of
    `blocks` blocks): the mean over the blocks, checkpointed_share of them keeping the input
    only and the rest everything."""
    p = policy(recompute)
    if p.every > 1 or p.first:
        share = checkpointed_share(model, p, blocks, chunks)
        full = kept_bytes(model, sequences, tp=tp, sp=sp, kept=_kept(model, p) - offload)
        every = _kept(model, policy("none")) - offload
        rest = kept_bytes(model, sequences, tp=tp, sp=sp, kept=every)
        return share * full + (1 - share) * rest
    return kept_bytes(model, sequences, tp=tp, sp=sp, kept=_kept(model, p) - offload)


def checkpointed_share(
    model: ModelShape, p: Policy, blocks: float | None = None, chunks: int = 1
) -> float:
    """The share of the blocks a policy applies to: 1; for `layer-N` floor(L / N) / L
    (torchtitan wraps block i, counted from 1, when i % N == 0); for `full-block:N` of `blocks`
    blocks (the model's L unless given) cut into `chunks` (virtual) pipeline stages, the
    checkpointed blocks (shardline.basics.recompute.checkpointed_blocks) over them."""
    if p.first:
        total = float(model.layers if blocks is None else blocks)
        return checkpointed_blocks(p, total, chunks) / total if total else 0.0
    if p.every == 1:
        return 1.0
    return (model.layers // p.every) / model.layers


def _kept(model: ModelShape, p: Policy) -> frozenset[str]:
    """The tensors p stores: those it keeps, and only those the backward reads where p saves
    residuals (JAX: shardline.basics.recompute.read_tensors)."""
    flash = model.attention != "standard"
    kept = kept_tensors(p, gated=model.gated, flash=flash)
    if p.residuals_only:
        return kept & read_tensors(p, gated=model.gated, flash=flash)
    return kept


def kept_bytes(
    model: ModelShape, sequences: float, *, tp: int, sp: bool, kept: frozenset[str]
) -> float:
    """The bytes of the `kept` tensors of one block (shardline.basics.recompute.TENSORS).
    Activations are kept at the activations' dtype (w: bf16 for an 8-bit model, as the ops
    between its matmuls count them), except the inputs of the 8-bit GEMMs (g: the QKV,
    output-projection, up- and down-projection inputs), which the 8-bit GEMMs keep in 8 bits for
    their weight gradients (Transformer Engine's Linear saves its fp8 input). Hidden-sized tensors
    are on every tensor-parallel rank unless sequence parallel; the rest are split by t."""
    w = dtype_bits(activation_dtype(model)) / 8
    g = min(w, dtype_bits(model.dtype) / 8)
    size = {"w": w, "g": g}
    s, h = model.q_len, model.d_model
    sb = s * sequences
    hidden = [TENSORS[t][1] for t in TENSORS if t in kept and TENSORS[t][0] == "hidden"]
    per_h = sum(size[k] for k in hidden if k != "mask")  # norm and residual inputs (x: w)
    masks = MASK_BYTES * sum(1 for k in hidden if k == "mask")  # the two dropout masks
    replicated = per_h * sb * h + masks * sb * h
    width = _split_widths(model)
    wide_w = sum(width[t] for t in width if t in kept and TENSORS[t][1] == "w")
    wide_g = sum(width[t] for t in width if t in kept and TENSORS[t][1] == "g")
    # Q, K, V and the up (and gate) outputs (w); the output and down projections' inputs (g)
    split = sb * (w * wide_w + g * wide_g)
    scores = 0.0
    if model.attention == "standard" and "scores" in kept:
        scores = (2 * w + MASK_BYTES) * model.heads * s * model.keys * sequences
    if sp:
        return (replicated + split + scores) / tp
    return replicated + (split + scores) / tp


def _split_widths(model: ModelShape) -> dict[str, int]:
    """Elements per token of the tensors split by tensor parallelism (the scores aside)."""
    q_out = model.heads * model.head_dim
    kv = model.kv_heads * model.head_dim
    gate = model.d_ff if model.gated else 0
    return {
        "q": q_out,
        "k": kv,
        "v": kv,
        "context": q_out,
        "gate": gate,
        "up": model.d_ff,
        "act": model.d_ff,
    }


def in_flight_microbatches(
    stages: int, microbatches: int, interleave: int, index: int = 0
) -> float:
    """Microbatches whose activations stage `index` holds under 1F1B: min(m, P - index) (the
    first stage P), times 1 + (P - 1) / (P V) with V interleaved chunks (Korthikanti et al. 2022,
    section 4.2.3; Narayanan et al. 2021)."""
    held = min(microbatches, stages - index)
    if interleave > 1 and stages > 1:
        return held * (1 + (stages - 1) / (stages * interleave))
    return float(held)
