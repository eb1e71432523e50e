"""The built-in workload templates: `ffn` (a feed-forward block) and `transformer` (a decoder
block, dense or a mixture of experts, with latent or sliding-window attention).

A template builds a `Workload` (shardline.workload.workload) from a model's sizes: the block's
einsums with their dims named by logical axis (TEMPLATE_AXES), repeated once per layer. A
mixture-of-experts model whose first blocks run a dense feed-forward (DeepSeek-V3's
`dense_layers_first`) becomes a `DenseFirstWorkload` (shardline.workload.dense_first).
docs/stack-and-plans.md, docs/moe.md.

Pure: no printing, no files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from shardline.basics import kinds
from shardline.basics.dtypes import canonical_dtype, dtype_bits
from shardline.errors import InputError
from shardline.ops.einsum import check_size
from shardline.ops.layer import Layer
from shardline.realistic.modelshape import ModelShape
from shardline.workload.attention.base import Template
from shardline.workload.dense_first import DenseFirstWorkload
from shardline.workload.moe import moe_part, moe_shape
from shardline.workload.workload import Workload

__all__ = [
    "TEMPLATE_AXES",
    "TEMPLATE_PHASES",
    "FfnShape",
    "TransformerShape",
    "ffn",
    "transformer",
    "dense_ffn_layers",
    "dense_first_template",
]

# The templates' dims: B batch, S and T tokens, D d_model, G kv heads, R query heads per kv head,
# E head dim, F d_ff (J, the fused q/k/v index, and U, up+gate, have no logical axis).
TEMPLATE_AXES = {
    "B": "batch",
    "S": "seq",
    "T": "seq",
    "D": "model",
    "G": "kv_heads",
    "R": "heads",
    "E": "head_dim",
    "F": "ffn",
}
TEMPLATE_PHASES: tuple[str, ...] = kinds.TEMPLATE_PHASES  # shardline.basics.kinds.TemplatePhase


def _with_axes(layers: Sequence[Layer]) -> tuple[Layer, ...]:
    """The template layers with their dims named by logical axis (TEMPLATE_AXES)."""
    return tuple(
        replace(
            layer,
            axes={**layer.axes, **{d: TEMPLATE_AXES[d] for d in layer.dims if d in TEMPLATE_AXES}},
        )
        for layer in layers
    )


def _flag(value: object, what: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{what} must be True or False, got {value!r}")
    return value


def _positive(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{what} must be a positive integer, got {value!r}")
    return check_size(value, what)


@dataclass(frozen=True)
class FfnShape:
    """The feed-forward block's sizes: `ffn(FfnShape(...))` or `ffn(d_model=..., ...)`."""

    d_model: int
    d_ff: int
    batch: int
    seq_len: int = 1
    gated: bool = True
    layers: int = 1


@dataclass(frozen=True)
class TransformerShape:
    """A decoder block's sizes: `transformer(TransformerShape(...))` or `transformer(d_model=...)`.
    kv_heads defaults to heads (multi-head attention), head_dim to d_model / heads."""

    d_model: int
    d_ff: int
    heads: int
    batch: int
    seq_len: int
    kv_heads: int | None = None
    head_dim: int | None = None
    gated: bool = True
    layers: int = 1
    vocab: int | None = None  # None: the embedding and the LM head are left out
    attention: str = "flash"  # "flash" (scores stay on chip) or "standard" (scores via HBM)
    rotary: bool = True  # rotary position embedding on q and k (False: learned positions)
    qk_norm: bool = False  # an RMS norm over each head of q and of k (Qwen3, Gemma 3)
    norm: str = "rmsnorm"  # the blocks' norm: "rmsnorm" or "layernorm" (GPT-2/3, MPT, OPT)
    # the attention variant (shardline.workload.attention): its record, from a table named by its
    # key (`transformer(mla={...})`, `[transformer] sliding_window = {...}`); () plain attention
    attention_variants: tuple[object, ...] = ()


def dense_ffn_layers(d: int, f: int, b: int, s: int, gated: bool, dtype: str) -> tuple[Layer, ...]:
    up_spec = "x[B,S,D] * win[D,F,U] -> h[B,S,F,U]" if gated else "x[B,S,D] * win[D,F] -> h[B,S,F]"
    up_dims = {"B": b, "S": s, "D": d, "F": f} | ({"U": 2} if gated else {})
    up = Layer(
        "ffn_in" if gated else "ffn_up",
        up_spec,
        up_dims,
        dtype=dtype,
        weights=("win",),
        tp_dims=("F",),
    )
    down = Layer(
        "ffn_down",
        "h[B,S,F] * wout[F,D] -> y[B,S,D]",
        {"B": b, "S": s, "D": d, "F": f},
        dtype=dtype,
        weights=("wout",),
        tp_dims=("F",),
    )
    return _with_axes((up, down))


def ffn(
    shape: FfnShape | None = None,
    *,
    phase: str = "training",
    dtype: str = "bf16",
    name: str | None = None,
    **sizes: Any,
) -> Workload:
    """The transformer feed-forward block alone (the seed 000 follow-up): In[B,S,D] x W_in[D,F]
    (x W_gate) -> H[B,S,F] x W_out[F,D] -> Out[B,S,D]; Megatron tensor parallelism splits F.
    `sizes`: the fields of FfnShape (d_model, d_ff, batch, seq_len, gated, layers)."""
    shape = shape or FfnShape(**sizes)
    d, f = _positive(shape.d_model, "d_model"), _positive(shape.d_ff, "d_ff")
    b, s, n_layers = (
        _positive(shape.batch, "batch"),
        _positive(shape.seq_len, "seq_len"),
        _positive(shape.layers, "layers"),
    )
    if phase not in ("training", "forward", "prefill", "decode"):
        raise InputError(f"ffn phase must be training, forward, prefill or decode, got {phase!r}")
    if phase == "decode":
        s = 1
    gated = _flag(shape.gated, "gated")
    label = name or f"ffn d_model={d} d_ff={f}{' gated' if gated else ''} x{n_layers}"
    return Workload(
        label,
        dense_ffn_layers(d, f, b, s, gated, dtype),
        repeat=n_layers,
        phase="training" if phase == "training" else "forward",
        batch_dim="B",
        kind="ffn",
        item="token" if s == 1 else "sequence",
        tokens_per_item=s,
        description=f"{phase}: batch {b} x seq {s} tokens",
    )


@dataclass(frozen=True)
class _Block:
    """A transformer block's checked sizes (the template's dims) and dtypes."""

    d: int
    f: int
    h: int
    g: int
    e: int
    b: int
    s: int
    n_layers: int
    gated: bool
    q_len: int
    k_len: int
    cache: tuple[str, ...]
    dtype: str
    kv_dtype: str
    onchip_scores: bool


def _block(shape: TransformerShape, phase: str, dtype: str, kv_dtype: str | None) -> _Block:
    d, f = _positive(shape.d_model, "d_model"), _positive(shape.d_ff, "d_ff")
    h = _positive(shape.heads, "heads")
    g = _positive(shape.kv_heads if shape.kv_heads is not None else shape.heads, "kv_heads")
    b, s = _positive(shape.batch, "batch"), _positive(shape.seq_len, "seq_len")
    n_layers = _positive(shape.layers, "layers")
    head_dim = shape.head_dim
    if head_dim is None:
        if d % h:
            raise InputError(f"d_model {d} is not a multiple of heads {h}; give head_dim")
        head_dim = d // h
    e = _positive(head_dim, "head_dim")
    if h % g:
        raise InputError(f"heads ({h}) must be a multiple of kv_heads ({g})")
    if phase not in TEMPLATE_PHASES:
        raise InputError(
            f"transformer phase must be one of {', '.join(TEMPLATE_PHASES)}, got {phase!r}"
        )
    q_len, k_len = (1, s) if phase == "decode" else (s, s)
    cache = ("k", "v") if phase in ("prefill", "decode") else ()
    kv = canonical_dtype(kv_dtype if kv_dtype is not None else dtype)
    flash, gated = shape.attention == "flash", _flag(shape.gated, "gated")
    return _Block(d, f, h, g, e, b, s, n_layers, gated, q_len, k_len, cache, dtype, kv, flash)


def _attention_layers(k: _Block) -> list[Layer]:
    r = k.h // k.g
    onchip = ("p",) if k.onchip_scores else ()
    common = {"B": k.b, "D": k.d, "G": k.g, "E": k.e, "S": k.q_len}
    scores = {"B": k.b, "S": k.q_len, "T": k.k_len, "G": k.g, "R": r, "E": k.e}
    cached = bool(k.cache)
    # tensor parallelism wider than the KV heads: with a KV cache the ways beyond G split the
    # batch (each rank keeps its sequences' cache of its KV heads, as "How to Scale Your Model",
    # Part 8, shards it), not the query heads R (which would leave every rank the whole cache of
    # its heads: the cache replicated tp / G times); a batch too small to take them falls to R
    attention_tp = ("G", "B", "R") if cached else ("G", "R")
    return [
        Layer(
            "attn_qkv",
            "x[B,S,D] * wqkv[D,G,J,E] -> qkv[B,S,G,J,E]",
            {**common, "J": r + 2},
            dtype=k.dtype,
            weights=("wqkv",),
            tp_dims=("G", "J"),
        ),
        Layer(
            "attn_scores",
            "q[B,S,G,R,E] * k[B,T,G,E] -> p[B,G,R,S,T]",
            scores,
            dtype=k.dtype,
            dtypes={"k": k.kv_dtype} if cached else {},
            cache=k.cache[:1],
            onchip=onchip,
            tp_dims=attention_tp,
            kernel="attention",
        ),
        Layer(
            "attn_values",
            "p[B,G,R,S,T] * v[B,T,G,E] -> o[B,S,G,R,E]",
            scores,
            dtype=k.dtype,
            dtypes={"v": k.kv_dtype} if cached else {},
            cache=k.cache[1:],
            onchip=onchip,
            tp_dims=attention_tp,
            kernel="attention",
        ),
        Layer(
            "attn_out",
            "o[B,S,G,R,E] * wo[G,R,E,D] -> y[B,S,D]",
            {**common, "R": r},
            dtype=k.dtype,
            weights=("wo",),
            tp_dims=("G", "R"),
        ),
    ]


def _model_shape(
    shape: TransformerShape,
    k: _Block,
    dtype: str,
    ffn_width: int,
    moe_sizes: tuple[int, int, int, float],
    variant: dict[str, Any],
) -> ModelShape:
    """The whole model's sizes of a transformer template (MFU, the realistic ops): `moe_sizes`
    from shardline.workload.moe (0, 0, 0, 1.0 for a dense FFN), `variant` from the attention
    variants."""
    return ModelShape(
        k.d,
        ffn_width,
        k.h,
        k.g,
        variant.pop("head_dim", k.e),
        k.n_layers,
        k.s,
        k.q_len,
        k.b,
        k.gated,
        shape.vocab,
        shape.attention,
        _flag(shape.rotary, "rotary"),
        True,
        canonical_dtype(dtype),
        *moe_sizes[:3],
        **variant,
        qk_norm=_flag(shape.qk_norm, "qk_norm"),
        expert_load=moe_sizes[3],
        norm=shape.norm,
    )


def _shape_of(sizes: dict[str, Any]) -> TransformerShape:
    """A TransformerShape from `transformer`'s keywords: its fields, and an attention variant's
    table under the variant's key (shardline.workload.attention)."""
    from shardline.workload.attention import records_from

    tables = {key: sizes.pop(key) for key in variant_keys_in(sizes)}
    return TransformerShape(**sizes, attention_variants=records_from(tables))


def _variant_attention(shape: TransformerShape, k: _Block, phase: str) -> Template:
    """The block's attention einsums, the ModelShape fields its variant sets and whether the
    plain KV-cache formula holds (shardline.workload.attention.template_attention)."""
    from shardline.workload.attention import AttentionSizes, template_attention

    a = AttentionSizes(k.b, k.q_len, k.k_len, k.d, k.h, k.dtype, k.kv_dtype, k.onchip_scores, phase)
    return template_attention(
        shape.attention_variants,
        a,
        k.n_layers,
        lambda keys: _attention_layers(replace(k, k_len=keys)),
    )


def variant_keys_in(sizes: dict[str, Any]) -> list[str]:
    """The attention variants' table names among a template's keyword arguments."""
    from shardline.workload.attention import variant_keys

    return [key for key in variant_keys() if key in sizes]


def transformer(
    shape: TransformerShape | None = None,
    *,
    phase: str = "training",
    dtype: str = "bf16",
    kv_dtype: str | None = None,
    name: str | None = None,
    moe: Any = None,
    **sizes: Any,
) -> Workload:
    """A decoder block (attention + feed-forward) repeated `layers` times; `sizes`: the fields of
    TransformerShape. Dims: B batch, S query and T key tokens (decode: S = 1, T the context), D
    d_model, G kv heads, R query heads per kv head, E head dim, F d_ff, U = 2 for a gated FFN's
    fused up+gate, J = R + 2 for the fused W_qkv (one dX all-reduce under tp, as Megatron). Flash
    attention keeps the scores on chip; `vocab` adds the embedding and LM head; `moe` (a MoeShape
    or a `[moe]` table) makes each block a mixture of experts (docs/moe.md), the `mla` and
    `sliding_window` tables (an attention variant's key: shardline.workload.attention) change the
    attention. Phases: training (forward + backward), forward, prefill and decode (with a KV
    cache)."""
    shape = shape or _shape_of(sizes)
    k = _block(shape, phase, dtype, kv_dtype)
    attention, variant, plain_cache = _variant_attention(shape, k, phase)
    ffn_layers, ffn_width, moe_sizes = (  # dense, or a mixture of experts (shardline.workload.moe)
        (dense_ffn_layers(k.d, k.f, k.b, k.q_len, k.gated, dtype), k.f, (0, 0, 0, 1.0))
        if moe is None
        else moe_part(moe, k.d, k.f, (k.b, k.q_len), k.gated, dtype, phase == "decode")
    )
    model = _model_shape(shape, k, dtype, ffn_width, moe_sizes, variant)
    block = _with_axes(attention) + ffn_layers  # the FFN part names its own axes
    label = name or f"transformer d_model={k.d} d_ff={k.f} heads={k.h}/{k.g} x{k.n_layers} {phase}"
    formula = {
        "L": k.n_layers,
        "n_kv": k.g,
        "d_head": k.e,
        "S": k.s,
        "B": k.b,
        "s_kv_bits": dtype_bits(k.kv_dtype),
    }
    workload = Workload(
        label,
        block,
        repeat=k.n_layers,
        phase="training" if phase == "training" else ("forward" if phase == "forward" else phase),
        batch_dim="B",
        kind="transformer",
        item="sequence",
        tokens_per_item=k.q_len,
        description=f"{phase}: batch {k.b}, {k.q_len} query x {k.k_len} key tokens",
        kv_cache_formula=formula if k.cache and plain_cache else None,
        model=model,
    )
    if moe is not None:  # DeepSeek-V3's dense first blocks, when the [moe] table has them
        workload = dense_first_template(workload, moe, k.f, len(ffn_layers))
    return workload


def dense_first_template(workload: Workload, moe: Any, d_ff: int, moe_ffn: int) -> Workload:
    """The transformer template's MoE `workload` (its block's last `moe_ffn` einsums are the MoE
    feed-forward) with its first `dense_layers_first` blocks (from the `moe` table) running a
    dense feed-forward of width `d_ff`, the template's FFN einsums at the block's sizes."""
    dense_blocks = moe_shape(moe, d_ff).dense_layers_first
    model = workload.model
    if not dense_blocks or model is None:
        return workload
    if dense_blocks > workload.repeat:
        raise InputError(
            f"[moe] dense_layers_first ({dense_blocks}) is more than the {workload.repeat} layers"
        )
    dtype = workload.layers[-1].dtype
    dense = dense_ffn_layers(model.d_model, d_ff, model.batch, model.q_len, model.gated, dtype)
    fields: dict[str, Any] = {f: getattr(workload, f) for f in Workload.__dataclass_fields__}
    fields["model"] = replace(model, dense_layers_first=dense_blocks, dense_d_ff=d_ff)
    return DenseFirstWorkload(
        **fields,
        dense_ffn=tuple(replace(layer, name=f"dense_{layer.name}") for layer in dense),
        replaced=tuple(layer.name for layer in workload.layers[-moe_ffn:]),
        dense_blocks=dense_blocks,
    )
