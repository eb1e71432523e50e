"""The sizes of a transformer as a whole model: what the realistic time model, the activation
memory formulas and MFU need beyond the einsum layers (the vocabulary, the attention kernel, the
ops between the matmuls).

A `[transformer]` template builds one (`Workload.model`). Pure: no printing, no files.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardline.errors import InputError

__all__ = ["ModelShape", "ATTENTION_KERNELS", "NORMS"]

# "flash": a fused FlashAttention-style kernel, the scores never reach HBM (the default for
# current software); "standard": scores written to HBM, a softmax kernel and a dropout kernel read
# and write them (Megatron-LM before FlashAttention).
ATTENTION_KERNELS = ("flash", "standard")
NORMS = ("rmsnorm", "layernorm")  # the block's normalization (shardline.realistic.block)


@dataclass(frozen=True)
class ModelShape:
    """A decoder-only transformer: `layers` blocks of attention (heads query heads of head_dim,
    kv_heads key/value heads) and a feed-forward of d_ff (gated: SwiGLU, two up projections);
    `vocab` tokens (None: the embedding and LM head are left out); `seq_len` the context
    (decode: the cached tokens), `q_len` the tokens each sequence runs through per step (decode:
    1); `batch` sequences; `dtype` of weights and activations."""

    d_model: int
    d_ff: int
    heads: int
    kv_heads: int
    head_dim: int
    layers: int
    seq_len: int
    q_len: int
    batch: int
    gated: bool = True
    vocab: int | None = None
    attention: str = "flash"
    rotary: bool = True
    causal: bool = True
    dtype: str = "bf16"
    router_experts: int = 0  # MoE: the router's d_model x experts matmul (docs/moe.md)
    expert_copies: int = 0  # MoE: copies of each token the dispatch makes (top-k); 0: dense
    idle_expert_params: int = 0  # MoE decode: routed experts' weights per block held, not read
    # attention variants (shardline.workload.attention); the defaults are plain GQA
    key_len: int | None = None  # keys per query, mean over the layers (None: seq_len)
    v_head_dim: int | None = None  # the values' head dim (MLA; None: head_dim)
    attention_params: int | None = None  # one block's attention weights (MLA; None: GQA's)
    causal_fraction: float = 0.5  # scores a causal fused kernel computes, of the S x T product
    weight_dtype: str = (
        ""  # the weights' storage dtype; empty: `dtype` (shardline.workload.precision)
    )
    tied_embeddings: bool = False  # the LM head is the embedding table (counted once)
    # MoE whose checkpoint quantizes only the routed experts: the dtype of every other weight
    # (shardline.workload.precision.with_tensor_dtypes); "": the weights are all alike
    dense_weight_dtype: str = ""
    # MoE with dense first blocks (DeepSeek-V3, shardline.workload.dense_first): so many blocks run
    # a dense feed-forward of width dense_d_ff in place of the experts and the router
    dense_layers_first: int = 0
    dense_d_ff: int = 0
    qk_norm: bool = False  # an RMS norm over each head of q and of k (Qwen3, Gemma 3)
    expert_load: float = 1.0  # MoE: the busiest expert's routed tokens over the mean
    norm: str = "rmsnorm"  # the blocks' norm, one of NORMS

    def __post_init__(self) -> None:
        if self.attention not in ATTENTION_KERNELS:
            raise InputError(
                f"attention must be one of {', '.join(ATTENTION_KERNELS)}, got {self.attention!r}"
            )
        if self.norm not in NORMS:
            raise InputError(f"norm must be one of {', '.join(NORMS)}, got {self.norm!r}")
        if self.vocab is not None and (
            isinstance(self.vocab, bool) or not isinstance(self.vocab, int) or self.vocab < 1
        ):
            raise InputError(f"vocab must be a positive integer, got {self.vocab!r}")

    @property
    def weights_dtype(self) -> str:
        """The dtype the weights are stored in."""
        return self.weight_dtype or self.dtype

    @property
    def decode(self) -> bool:
        return self.q_len == 1 and self.seq_len > 1

    @property
    def layer_params(self) -> int:
        """Weights of one block: W_qkv (d x (heads + 2 kv_heads) x head_dim), W_o, and the
        feed-forward (two or, gated, three d x d_ff matrices). Biases and norms are left out.
        A MoE block: d_ff is the width one token runs through ((top-k + shared) x expert_d_ff),
        so these are its active weights, plus the router d x experts."""
        d, e = self.d_model, self.head_dim
        attention = d * (self.heads + 2 * self.kv_heads) * e + self.heads * e * d
        if self.attention_params is not None:
            attention = self.attention_params
        ffn = (3 if self.gated else 2) * d * self.d_ff
        return attention + ffn + d * self.router_experts

    @property
    def block_params(self) -> int:
        """Weights of all the blocks (the 6N rule's, active experts only): layers x layer_params,
        with the dense first blocks' feed-forward (3 or 2 d x dense_d_ff) in place of the MoE
        block's active feed-forward and router."""
        total = self.layers * self.layer_params
        if self.dense_layers_first:
            ffn = 3 if self.gated else 2
            moe = ffn * self.d_model * self.d_ff + self.d_model * self.router_experts
            dense = ffn * self.d_model * self.dense_d_ff
            total += self.dense_layers_first * (dense - moe)
        return total

    @property
    def keys(self) -> int:
        """Keys each query attends to, the mean over the layers (sliding windows shorten it)."""
        return self.seq_len if self.key_len is None else self.key_len

    @property
    def attention_dim(self) -> float:
        """The mean of the scores' and the values' head dims (MLA: 192 and 128)."""
        return (self.head_dim + (self.v_head_dim or self.head_dim)) / 2

    @property
    def head_params(self) -> int:
        """The LM head (d_model x vocab); 0 without a vocabulary."""
        return self.d_model * (self.vocab or 0)

    @property
    def matmul_params(self) -> int:
        """N of the 6N rule: every block's weights and the LM head (a matmul); the embedding is
        a lookup and does not count (Chowdhery et al. 2022, PaLM, appendix B)."""
        return self.block_params + self.head_params
