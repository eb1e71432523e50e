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
parallelism).
"""

from __future__ import annotations

from shardline.basics.dtypes import dtype_bits
from shardline.realistic.block import MASK_BYTES, activation_dtype
from shardline.realistic.modelshape import ModelShape

__all__ = ["layer_activation_bytes", "in_flight_microbatches"]


def layer_activation_bytes(
    model: ModelShape, sequences: float, *, tp: int, sp: bool, recompute: str
) -> float:
    """Bytes one block keeps for the backward pass, for `sequences` sequences on one device.
    Activations are kept at the activations' dtype (w: bf16 for an 8-bit model, as the ops between
    its matmuls count them), except the inputs of the 8-bit GEMMs (g: the QKV, output-projection,
    up- and down-projection inputs), which the 8-bit GEMMs keep in 8 bits for their weight
    gradients (Transformer Engine's Linear saves its fp8 input)."""
    w = dtype_bits(activation_dtype(model)) / 8
    g = min(w, dtype_bits(model.dtype) / 8)
    s, h = model.q_len, model.d_model
    sb = s * sequences
    if recompute == "full":
        return w * sb * h / (tp if sp else 1)
    # two norms' inputs (w) + the QKV and FFN inputs (g) + two dropout masks
    replicated = (2 * w + 2 * g) * sb * h + 2 * MASK_BYTES * sb * h
    q_out = model.heads * model.head_dim
    kv = 2 * model.kv_heads * model.head_dim
    ffn_in = model.d_ff * (2 if model.gated else 1)
    # Q, K, V and the up (and gate) outputs (w); the output and down projections' inputs (g)
    split = sb * (w * (q_out + kv + ffn_in) + g * (q_out + model.d_ff))
    scores = 0.0
    if model.attention == "standard" and recompute == "none":
        scores = (2 * w + MASK_BYTES) * model.heads * s * model.keys * sequences
    if sp:
        return (replicated + split + scores) / tp
    return replicated + (split + scores) / tp


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
