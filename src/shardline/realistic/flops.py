"""Model FLOPs (for MFU) and hardware FLOPs (for HFU) of one step.

Per token, training: `6 N + 12 L H Q T`; inference: `2 N + 4 L H Q T` (Chowdhery et al. 2022,
PaLM, appendix B), with N the matmul parameters (the blocks and the LM head; the embedding is a
lookup), L layers, H heads, Q head dim and T the context. No causal discount in this convention.
Hardware FLOPs add what recompute runs again: full recompute one more forward of the blocks
(`2 N_blocks + 4 L H Q T` per token), selective recompute the attention core (`4 L H Q T`);
any other policy (shardline.basics.recompute) the matmuls it reruns (2 x their weights per token)
and the attention core if it reruns it.
"""

from __future__ import annotations

from shardline.basics.recompute import checkpointed_blocks, policy, rerun_ops
from shardline.realistic.modelshape import ModelShape

__all__ = ["model_flops", "hardware_flops", "recomputed_flops", "matmul_params"]


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


def hardware_flops(model: ModelShape, training: bool, recompute: str, chunks: int = 1) -> float:
    """Model FLOPs plus the recomputed forward work of the policy `recompute`
    (`recomputed_flops`); `full-block:N` on the model's blocks cut into `chunks` (virtual)
    pipeline stages (pp x interleave)."""
    total = model_flops(model, training)
    if not training:
        return total
    p = policy(recompute)
    rerun = rerun_ops(p, gated=model.gated, flash=model.attention != "standard")
    if not rerun:
        return total
    tokens = model.batch * model.q_len
    a = _attention_per_token(model)
    params = sum(n for op, n in matmul_params(model).items() if op in rerun)
    if p.every > 1 or p.first:
        L = model.layers
        share = (checkpointed_blocks(p, L, chunks) if p.first else L // p.every) / L
        return total + share * tokens * (2 * params + 4 * a)
    if not params:  # the attention core alone (selective), or no matmul at all
        return total + tokens * 4 * a if "attention" in rerun else total
    return total + tokens * (2 * params + 4 * a * ("attention" in rerun))


def recomputed_flops(model: ModelShape, recompute: str, chunks: int = 1) -> float:
    """The FLOPs one training step runs again under the policy: `2 P + 4 L H Q T` per token,
    with P the weights of the matmuls the policy reruns (`matmul_params`) and the attention
    term if it reruns the attention core (a `layer-N` or `full-block:N` policy: its share of the
    blocks)."""
    return hardware_flops(model, True, recompute, chunks) - model_flops(model, True)


def matmul_params(model: ModelShape) -> dict[str, int]:
    """The weights of each of a block's matmuls (shardline.basics.recompute.MATMULS), summed over
    the blocks, so that they add up to `block_params`: the attention's input projections split
    over q, k and v in proportion to heads : kv_heads : kv_heads (MLA's down- and up-projections
    too), the out projection heads x v head dim x d_model; the FFN's gate, up and down
    projections of d_model x d_ff each (the router's d_model x experts with the gate, or the up
    projection without one), with the dense first blocks' width where a MoE has them."""
    d, e = model.d_model, model.head_dim
    out = model.heads * (model.v_head_dim or e) * d
    attention = d * (model.heads + 2 * model.kv_heads) * e + model.heads * e * d
    if model.attention_params is not None:
        attention = model.attention_params
    inputs = attention - out
    q = inputs * model.heads // (model.heads + 2 * model.kv_heads)
    k = (inputs - q) // 2
    L, first = model.layers, model.dense_layers_first
    ffn = L * d * model.d_ff + first * (d * model.dense_d_ff - d * model.d_ff)
    router = (L - first) * d * model.router_experts
    gate = ffn + router if model.gated else 0
    up = ffn if model.gated else ffn + router
    return {
        "q_proj": L * q,
        "k_proj": L * k,
        "v_proj": L * (inputs - q - k),
        "out_proj": L * out,
        "gate_proj": gate,
        "up_proj": up,
        "down_proj": ffn,
    }
