"""Attention beyond grouped-query attention, for the transformer template: multi-head latent
attention (MLA, DeepSeek-V2/V3) and sliding-window layers (Mistral, Gemma 2/3, gpt-oss); and the
causal saving a fused kernel makes in training and prefill.

Sliding window W, `local_per_global` sliding layers to each global one: a sliding layer's query
sees at most the last W keys, so its key length is min(T, W); the cache of a sliding layer holds
min(context, W) tokens. The template keeps one block repeated `layers` times (so pipelines split
it as before) and gives every block's attention the mean key length over the layers,
`T_eff = ceil((n_global T + n_sliding min(T, W)) / layers)`: the FLOPs, the cache bytes and the
cache reads of the whole model are those of the real pattern (to the rounding of T_eff up).

Causal saving: a fused kernel skips the key blocks above the diagonal (and, for a sliding layer,
those before the window), so it computes `n_global S^2/2 + n_sliding (S W' - W'^2/2)` scores
(W' = min(S, W)) of the `layers S T_eff` the einsums count: `causal_fraction`, 1/2 without
sliding layers (FlashAttention-2, Dao 2023). Model FLOPs (MFU) keep the full product.

MLA (DeepSeek-V2, arXiv 2405.04434, section 2.1): the token's query goes through a latent of
q_lora_rank (or straight from d_model), its keys and values through one latent of kv_lora_rank
plus a rotary key of qk_rope_head_dim shared by the heads: the cache holds
`kv_lora_rank + qk_rope_head_dim` values per token and layer. Heads attend with qk head dim
`qk_nope_head_dim + qk_rope_head_dim` and v head dim `v_head_dim`.
- Training: the explicit form. The two up-projections (query and key/value) run as one einsum
  over the concatenated latents A = (q_lora_rank or d_model) + kv_lora_rank with
  M = ceil((q_in K + kv_lora_rank (nope + v)) / A) outputs per head, so that its weights and
  FLOPs are the two matrices' (exact when M divides: DeepSeek-V3's M = 208) and tensor
  parallelism splits the heads of both as Megatron's fused QKV projection does.
- Prefill and decode: the absorbed form (DeepSeek-V2 section 2.1.3): W_UK is absorbed into the
  query and W_UV into the output, `mla_absorb` counts both (2 H (nope + v) kv_lora_rank FLOPs per
  token); the scores read the cached latent (width kv_lora_rank + rope) and the values reuse the
  latent tile the scores loaded (on chip, as FlashMLA does). Prefill in this form does more
  attention FLOPs than the explicit form that some servers use for prefill.

docs/context-parallel-and-attention.md. Pure: no printing, no files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from math import ceil
from typing import Any

from shardline.errors import InputError
from shardline.ops.layer import Layer
from shardline.workload.modelspec import MLA, SlidingWindow

__all__ = [
    "MLA",
    "SlidingWindow",
    "as_mla",
    "as_window",
    "layer_counts",
    "mean_key_length",
    "causal_fraction",
    "mla_attention_params",
    "mla_cache_width",
    "mla_layers",
    "AttentionSizes",
    "template_attention",
]

MLA_FIELDS = ("q_lora_rank", "kv_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
WINDOW_FIELDS = ("window", "local_per_global")


def _int(value: object, what: str, minimum: int = 1) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        kind = "a positive" if minimum == 1 else "a non-negative"
        raise InputError(f"{what} must be {kind} integer, got {value!r}")
    return value


def _table(value: object, fields: tuple[str, ...], what: str) -> dict[str, object]:
    if not isinstance(value, Mapping):
        raise InputError(f"{what} must be a table of {', '.join(fields)}")
    unknown = sorted(set(value) - set(fields))
    missing = [f for f in fields if f not in value]
    if unknown or missing:
        bad = f"unknown {', '.join(unknown)}" if unknown else f"missing {', '.join(missing)}"
        raise InputError(f"{what}: {bad}; fields: {', '.join(fields)}")
    return dict(value)


def as_window(value: object) -> SlidingWindow | None:
    """A SlidingWindow from itself or a {window, local_per_global} table (None: no sliding)."""
    if value is None or isinstance(value, SlidingWindow):
        return value
    t = _table(value, WINDOW_FIELDS, "sliding_window")
    return SlidingWindow(
        _int(t["window"], "sliding_window.window"),
        _int(t["local_per_global"], "sliding_window.local_per_global"),
    )


def as_mla(value: object) -> MLA | None:
    """An MLA from itself or a table of its five fields (q_lora_rank 0: no query latent)."""
    if value is None or isinstance(value, MLA):
        return value
    t = _table(value, MLA_FIELDS, "mla")
    sizes = [_int(t[f], f"mla.{f}", 0 if f == "q_lora_rank" else 1) for f in MLA_FIELDS]
    return MLA(*sizes)


def layer_counts(layers: int, window: SlidingWindow | None) -> tuple[int, int]:
    """(global layers, sliding layers): every (local_per_global + 1)-th layer is global."""
    sliding = window.sliding_layers(layers) if window is not None else 0
    return layers - sliding, sliding


def mean_key_length(keys: int, layers: int, window: SlidingWindow | None) -> int:
    """T_eff = ceil((n_global T + n_sliding min(T, W)) / layers) (module docstring)."""
    n_global, n_sliding = layer_counts(layers, window)
    if window is None or n_sliding == 0:
        return keys
    return ceil((n_global * keys + n_sliding * min(keys, window.window)) / layers)


def causal_fraction(seq: int, layers: int, window: SlidingWindow | None) -> float:
    """Scores a causal fused kernel computes over the S x T_eff product the einsums count, for
    S = T = `seq` (training, prefill): (n_global S^2/2 + n_sliding (S W' - W'^2/2)) /
    (layers S T_eff), W' = min(S, W); 1/2 without sliding layers."""
    n_global, n_sliding = layer_counts(layers, window)
    if window is None or n_sliding == 0:
        return 0.5
    w = min(seq, window.window)
    pairs = n_global * seq * seq / 2 + n_sliding * (seq * w - w * w / 2)
    return pairs / (layers * seq * mean_key_length(seq, layers, window))


def mla_cache_width(mla: MLA) -> int:
    """Cached values per token and layer: the latent and the rotary key."""
    return mla.kv_lora_rank + mla.qk_rope_head_dim


def mla_attention_params(d_model: int, heads: int, mla: MLA) -> int:
    """One block's MLA weights, norms left out: W_q (d x r_q, r_q x H (nope + rope); or d x
    H (nope + rope)), W_kv_a d x (r_kv + rope), W_kv_b r_kv x H (nope + v), W_o H v x d."""
    qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    if mla.q_lora_rank:
        q = d_model * mla.q_lora_rank + mla.q_lora_rank * heads * qk
    else:
        q = d_model * heads * qk
    kv = d_model * mla_cache_width(mla) + mla.kv_lora_rank * heads * (
        mla.qk_nope_head_dim + mla.v_head_dim
    )
    return q + kv + heads * mla.v_head_dim * d_model


@dataclass(frozen=True)
class AttentionSizes:
    """The block's sizes the MLA einsums need: batch, query and key tokens, d_model, heads, the
    dtypes, whether the scores stay on chip and the phase."""

    b: int
    s: int
    t: int
    d: int
    h: int
    dtype: str
    kv_dtype: str
    onchip_scores: bool
    phase: str


AXES = {"B": "batch", "S": "seq", "T": "seq", "D": "model", "H": "heads"}


def _layer(name: str, spec: str, dims: dict[str, int], a: AttentionSizes, **kw: Any) -> Layer:
    axes = {d: AXES[d] for d in dims if d in AXES}
    return Layer(name, spec, dims, dtype=a.dtype, axes=axes, **kw)


def _attention(a: AttentionSizes, qk: int, v: int, cached: str | None) -> list[Layer]:
    """Scores and values over T keys: explicit (K of qk, V of v per head; `cached` None) or
    absorbed (the latent of width qk, its first v values the values' input, on chip; `cached`
    "cache": the latent is the KV cache, "latent": a forward pass without one)."""
    onchip = ("p",) if a.onchip_scores else ()
    base = {"B": a.b, "S": a.s, "T": a.t, "H": a.h}
    v_onchip: tuple[str, ...] = ()
    if cached is None:
        k_spec, v_spec = "k[B,T,H,K]", "v[B,T,H,V]"
    else:
        k_spec, v_spec, v_onchip = "c[B,T,K]", "cv[B,T,V]", ("cv",)
    cache = {"cache": ("c",), "dtypes": {"c": a.kv_dtype}} if cached == "cache" else {}
    return [
        _layer(
            "attn_scores",
            f"q[B,S,H,K] * {k_spec} -> p[B,H,S,T]",
            {**base, "K": qk},
            a,
            onchip=onchip,
            tp_dims=("H",),
            kernel="attention",
            **cache,
        ),
        _layer(
            "attn_values",
            f"p[B,H,S,T] * {v_spec} -> o[B,S,H,V]",
            {**base, "V": v},
            a,
            onchip=onchip + v_onchip,
            tp_dims=("H",),
            kernel="attention",
        ),
    ]


def mla_layers(a: AttentionSizes, mla: MLA) -> list[Layer]:
    """The MLA einsums of one block (module docstring): training explicit, inference absorbed."""
    qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    r_q, r_kv, width = mla.q_lora_rank, mla.kv_lora_rank, mla_cache_width(mla)
    tok = {"B": a.b, "S": a.s, "D": a.d}
    down = _layer(
        "mla_down",
        "x[B,S,D] * wa[D,A] -> ca[B,S,A]",
        {**tok, "A": r_q + width},
        a,
        weights=("wa",),
    )
    out = _layer(
        "attn_out",
        "o[B,S,H,V] * wo[H,V,D] -> y[B,S,D]",
        {**tok, "H": a.h, "V": mla.v_head_dim},
        a,
        weights=("wo",),
        tp_dims=("H",),
    )
    q_in = r_q or a.d
    if a.phase == "training":
        lat = q_in + r_kv
        m = ceil((q_in * qk + r_kv * (mla.qk_nope_head_dim + mla.v_head_dim)) / lat)
        up = _layer(
            "mla_up",
            "c[B,S,A] * wb[A,H,M] -> qkv[B,S,H,M]",
            {"B": a.b, "S": a.s, "A": lat, "H": a.h, "M": m},
            a,
            weights=("wb",),
            tp_dims=("H",),
        )
        return [down, up, *_attention(a, qk, mla.v_head_dim, None), out]
    q_up = _layer(
        "mla_q_up",
        "c[B,S,A] * wq[A,H,K] -> q[B,S,H,K]",
        {"B": a.b, "S": a.s, "A": q_in, "H": a.h, "K": qk},
        a,
        weights=("wq",),
        tp_dims=("H",),
    )
    absorb = _layer(
        "mla_absorb",
        "q[B,S,H,N] * wkv[L,H,N] -> ql[B,S,H,L]",
        {"B": a.b, "S": a.s, "H": a.h, "N": mla.qk_nope_head_dim + mla.v_head_dim, "L": r_kv},
        a,
        weights=("wkv",),
        tp_dims=("H",),
    )
    cached = "cache" if a.phase in ("prefill", "decode") else "latent"
    return [down, q_up, absorb, *_attention(a, width, r_kv, cached), out]


def template_attention(
    shape: Any, k: Any, phase: str, standard: Callable[[int], list[Layer]]
) -> tuple[list[Layer], dict[str, object], bool]:
    """The transformer template's attention einsums for a TransformerShape's `mla` and
    `sliding_window` tables and its checked block sizes `k` (shardline.workload.templates._Block),
    the ModelShape fields of the variant, and whether the KV-cache formula 2 L n_kv d_head S B s_kv
    holds; `standard(keys)` builds the grouped-query einsums at a key length."""
    mla, window = as_mla(shape.mla), as_window(shape.sliding_window)
    layers = k.n_layers
    a = AttentionSizes(k.b, k.q_len, k.k_len, k.d, k.h, k.dtype, k.kv_dtype, k.onchip_scores, phase)
    if mla is not None and window is not None:
        raise InputError("multi-head latent attention with sliding windows is not modeled")
    if mla is not None:
        extra: dict[str, object] = {
            "head_dim": mla.qk_nope_head_dim + mla.qk_rope_head_dim,
            "v_head_dim": mla.v_head_dim,
            "attention_params": mla_attention_params(a.d, a.h, mla),
        }
        return mla_layers(a, mla), extra, False
    keys = mean_key_length(a.t, layers, window)
    extra = {"key_len": keys, "causal_fraction": causal_fraction(a.t, layers, window)}
    return standard(keys), extra, keys == a.t
