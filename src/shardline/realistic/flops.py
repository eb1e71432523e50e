"""Model FLOPs (for MFU) and hardware FLOPs (for HFU) of one step.

Per token, training: `6 N + 12 L H Q T`; inference: `2 N + 4 L H Q T` (Chowdhery et al. 2022,
PaLM, appendix B), with N the matmul parameters (the blocks and the LM head; the embedding is a
lookup), L layers, H heads, Q head dim and T the context. No causal discount in this convention.
Hardware FLOPs add what recompute runs again: full recompute one more forward of the blocks
(`2 N_blocks + 4 L H Q T` per token), selective recompute the attention core (`4 L H Q T`).
"""

from __future__ import annotations

from shardline.realistic.modelshape import ModelShape

__all__ = ["model_flops", "hardware_flops"]


def _attention_per_token(model: ModelShape) -> float:
    """L H Q T, with Q the mean of the scores' and values' head dims (MLA) and T the keys a
    query sees, averaged over the layers (sliding windows)."""
    return model.layers * model.heads * model.attention_dim * model.keys


def model_flops(model: ModelShape, training: bool) -> float:
    """Model FLOPs of one step: the batch's tokens (decode: one per sequence)."""
    tokens = model.batch * model.q_len
    n = model.matmul_params
    a = _attention_per_token(model)
    per_token = 6 * n + 12 * a if training else 2 * n + 4 * a
    return tokens * per_token


def hardware_flops(model: ModelShape, training: bool, recompute: str) -> float:
    """Model FLOPs plus the recomputed forward work."""
    total = model_flops(model, training)
    if not training or recompute == "none":
        return total
    tokens = model.batch * model.q_len
    a = _attention_per_token(model)
    if recompute == "full":
        return total + tokens * (2 * model.block_params + 4 * a)
    return total + tokens * 4 * a
