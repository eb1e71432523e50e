"""A model's architecture as numbers (`ModelSpec`), and what follows from them by counting: the
parameters it holds (`params_total`), the parameters one token uses (`params_active`) and the
bytes of KV cache one token adds (`kv_bytes_per_token`, `kv_bytes_at`).

Every formula is written beside the function that computes it; docs/models.md states them with
their sources. Counts are exact sums over the weight matrices, biases and norm scales the file
describes; what a file does not describe (a vision tower, a multi-token-prediction head) is left
out unless it names it in `extra_params`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shardline.basics.dtypes import dtype_bits
from shardline.basics.units import check_real, check_whole, short
from shardline.errors import InputError
from shardline.ops.einsum import MAX_DIM
from shardline.workload.attention import MLA, SlidingWindow, variant_of
from shardline.workload.attention.base import AttentionVariant
from shardline.workload.attention.registry import PLAIN

__all__ = [
    "ModelSpec",
    "MoE",
    "MLA",
    "SlidingWindow",
    "params_total",
    "params_active",
    "kv_bytes_per_token",
    "kv_bytes_at",
    "attention_kind",
    "KV_BYTES_DEFAULT",
    "MAX_EXPERTS",
]

KV_BYTES_DEFAULT = 2  # bf16: the KV cache dtype when the file states none
# The most routed experts a MoE may have: 2**20, the 1,024 x 1,024 experts of the largest
# published design (He, "Mixture of A Million Experts", arXiv:2407.04202, PEER); real models have
# up to 384 (Kimi K2). Past it the count is a typing error, and the per-expert tables would not fit.
MAX_EXPERTS = 2**20


@dataclass(frozen=True)
class MoE:
    """Mixture of experts: each MoE block routes a token to `experts_per_token` of `experts`
    feed-forward networks of width `expert_d_ff`, plus `shared_experts` that every token uses. The
    first `dense_layers_first` blocks are dense (the model's `d_ff`), as in DeepSeek-V3."""

    experts: int
    experts_per_token: int
    expert_d_ff: int
    shared_experts: int = 0
    dense_layers_first: int = 0
    router_bias: bool = False
    # a checkpoint that quantizes only its routed experts (gpt-oss: MXFP4 experts): the dtype it
    # keeps every other weight in (attention, router, embeddings, LM head); "" when none
    dense_weight_dtype: str = ""


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer. `sources` maps each field (dotted for tables) to where its value
    comes from."""

    name: str
    d_model: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    d_ff: int
    gated: bool
    vocab: int
    tied_embeddings: bool
    rotary: bool = True
    attention: str = "flash"
    norm: str = "rmsnorm"  # "layernorm" has a bias beside the scale
    norms_per_layer: int = 2
    attention_bias: str = "none"  # "none", "qkv" (Qwen2) or "all" (q, k, v and o: GPT, gpt-oss)
    mlp_bias: bool = False
    qk_norm: bool = False  # a norm scale of head_dim on queries and one on keys (Qwen3, Gemma 3)
    attention_sinks: bool = False  # one learned logit per head and layer (gpt-oss)
    learned_positions: int = 0  # rows of a learned position table (GPT-3); 0 with rotary
    extra_params: int = 0  # parameters outside the decoder the file names (a vision tower)
    # whether the model's card counts the input embedding table among the active parameters
    # (most do; gpt-oss's counts only the unembedding: a lookup reads one row of the table)
    active_counts_embedding: bool = True
    # precision per tensor class as the file states it ("": the template's defaults, bf16)
    dtype: str = ""  # compute and activations
    weight_dtype: str = ""  # the weights as stored (an fp8 or int4 release)
    kv_dtype: str = ""  # the KV cache
    attention_dtype: str = ""  # the fused attention kernel
    description: str = ""
    moe: MoE | None = None
    # the attention variant's record, at most one (shardline.workload.attention): () plain
    attention_variants: tuple[object, ...] = ()
    sources: dict[str, str] = field(default_factory=dict, compare=False)

    @property
    def dense(self) -> bool:
        """Plain attention and a dense feed-forward: what the `[transformer]` template describes."""
        return self.moe is None and not self.attention_variants

    @property
    def mla(self) -> MLA | None:
        """The multi-head latent attention record, if the model has one."""
        return next((r for r in self.attention_variants if isinstance(r, MLA)), None)

    @property
    def sliding_window(self) -> SlidingWindow | None:
        """The sliding-window record, if the model has one."""
        return next((r for r in self.attention_variants if isinstance(r, SlidingWindow)), None)

    def variant(self) -> tuple[AttentionVariant, object]:
        """The attention variant and its record (plain attention's defaults and None)."""
        if not self.attention_variants:
            return PLAIN, None
        record = self.attention_variants[0]
        return variant_of(record), record


def attention_kind(spec: ModelSpec) -> str:
    """MHA, GQA or MQA, or the variant's kind: MLA, or `+sliding` when some layers are local."""
    if spec.kv_heads == spec.heads:
        kind = "MHA"
    elif spec.kv_heads == 1:
        kind = "MQA"
    else:
        kind = "GQA"
    variant, record = spec.variant()
    return variant.kind(record, kind)


def _norm_params(spec: ModelSpec, width: int) -> int:
    """RMSNorm has a scale per channel; LayerNorm a scale and a bias."""
    return width * (2 if spec.norm == "layernorm" else 1)


def _attention_params(spec: ModelSpec) -> int:
    """One block's attention.

    MHA/GQA: W_q d x (heads * head_dim), W_k and W_v d x (kv_heads * head_dim) each, W_o
    (heads * head_dim) x d; biases of the output widths ("qkv": q, k, v; "all": also o); qk-norm
    2 x head_dim; sinks one per head.
    A variant's own count where it has one (MLA: shardline.workload.attention.mla).
    """
    d, h, g, e = spec.d_model, spec.heads, spec.kv_heads, spec.head_dim
    variant, record = spec.variant()
    own = variant.attention_params(record, d, h, _norm_params(spec, 1))
    if own is not None:
        return own
    weights = d * h * e + 2 * d * g * e + h * e * d
    biases = 0
    if spec.attention_bias in ("qkv", "all"):
        biases += h * e + 2 * g * e
    if spec.attention_bias == "all":
        biases += d
    qk_norm = 2 * _norm_params(spec, e) if spec.qk_norm else 0
    sinks = h if spec.attention_sinks else 0
    return weights + biases + qk_norm + sinks


def _ffn_params(spec: ModelSpec, d_ff: int) -> int:
    """One feed-forward network: gated (SwiGLU/GeGLU) 3 x d x d_ff (gate, up, down), else
    2 x d x d_ff; with biases, 2 x d_ff + d (gated) or d_ff + d."""
    d = spec.d_model
    weights = (3 if spec.gated else 2) * d * d_ff
    biases = ((2 if spec.gated else 1) * d_ff + d) if spec.mlp_bias else 0
    return weights + biases


def _moe_block_params(spec: ModelSpec, experts: int) -> int:
    """One MoE block with `experts` routed experts counted: experts x FFN(expert_d_ff) + shared
    experts x FFN(expert_d_ff) + the router d x E (+ E with a router bias)."""
    assert spec.moe is not None
    m = spec.moe
    routed = experts * _ffn_params(spec, m.expert_d_ff)
    shared = m.shared_experts * _ffn_params(spec, m.expert_d_ff)
    router = spec.d_model * m.experts + (m.experts if m.router_bias else 0)
    return routed + shared + router


def _count(spec: ModelSpec, routed_experts: int | None) -> int:
    """Embedding V x d (+ the LM head V x d unless tied) + learned positions P x d + per block
    (attention + feed-forward + norms_per_layer x norm(d)) + a final norm(d) + extra_params.
    `routed_experts`: how many routed experts a MoE block counts (None: all of them)."""
    d = spec.d_model
    embed = spec.vocab * d * (1 if spec.tied_embeddings else 2) + spec.learned_positions * d
    per_block = _attention_params(spec) + spec.norms_per_layer * _norm_params(spec, d)
    dense_ffn = _ffn_params(spec, spec.d_ff)
    if spec.moe is None:
        blocks = spec.layers * (per_block + dense_ffn)
    else:
        first = spec.moe.dense_layers_first
        experts = spec.moe.experts if routed_experts is None else routed_experts
        blocks = spec.layers * per_block + first * dense_ffn
        blocks += (spec.layers - first) * _moe_block_params(spec, experts)
    return embed + blocks + _norm_params(spec, d) + spec.extra_params


def params_total(spec: ModelSpec) -> int:
    """Every parameter the model holds (all experts)."""
    return _count(spec, None)


def params_active(spec: ModelSpec) -> int:
    """The parameters one token uses, as the model's card counts them: `params_total` but each
    MoE block counts only experts_per_token routed experts (the shared experts and the router
    always). The embedding table is counted whole, as the total counts it, unless the file says
    its card leaves it out (`active_counts_embedding = false`: gpt-oss); a dense model's active
    count is its total."""
    if spec.moe is None:
        return params_total(spec)
    lookup = 0 if spec.active_counts_embedding else spec.vocab * spec.d_model
    return _count(spec, spec.moe.experts_per_token) - lookup


def _kv_elements_per_layer(spec: ModelSpec) -> int:
    """Cached values per token per layer: 2 x kv_heads x head_dim (K and V) for MHA/GQA, or the
    variant's (MLA caches the latent and the rotary key, kv_lora_rank + qk_rope_head_dim)."""
    variant, record = spec.variant()
    own = variant.kv_values_per_layer(record)
    return 2 * spec.kv_heads * spec.head_dim if own is None else own


def _element_bytes(spec: ModelSpec, kv_bytes: float | None) -> float:
    """Bytes per cached element: `kv_bytes` when given, else the file's `kv_dtype` (else its
    `dtype`), else bf16's 2 (the template's rule: the cache follows the compute dtype)."""
    if kv_bytes is not None:
        return kv_bytes
    stated = spec.kv_dtype or spec.dtype
    return dtype_bits(stated) / 8 if stated else KV_BYTES_DEFAULT


def kv_bytes_per_token(spec: ModelSpec, kv_bytes: float | None = None) -> float:
    """KV-cache bytes one token adds over all layers: layers x per-layer elements x bytes per
    element. Convention for sliding-window layers: a context no longer than the window, where every
    layer caches every token (beyond the window use `kv_bytes_at`)."""
    if not isinstance(spec, ModelSpec):
        raise InputError(f"kv_bytes_per_token needs a ModelSpec, got {short(spec)}")
    if kv_bytes is not None and not check_real(kv_bytes, "kv_bytes") > 0:
        raise InputError(f"kv_bytes must be a positive number of bytes, got {short(kv_bytes)}")
    return spec.layers * _kv_elements_per_layer(spec) * _element_bytes(spec, kv_bytes)


def kv_bytes_at(spec: ModelSpec, context: int, kv_bytes: float | None = None) -> float:
    """KV-cache bytes of one sequence of `context` tokens: per-layer elements x bytes x the tokens
    the layers hold (layers x context; with sliding-window layers, global x context + sliding x
    min(context, window): the variant's `cached_tokens`)."""
    if not isinstance(spec, ModelSpec):
        raise InputError(f"kv_bytes_at needs a ModelSpec, got {short(spec)}")
    check_whole(context, "context", least=0, most=MAX_DIM)
    if kv_bytes is not None and not check_real(kv_bytes, "kv_bytes") > 0:
        raise InputError(f"kv_bytes must be a positive number of bytes, got {short(kv_bytes)}")
    per_layer = _kv_elements_per_layer(spec) * _element_bytes(spec, kv_bytes)
    variant, record = spec.variant()
    return per_layer * variant.cached_tokens(record, spec.layers, context)
