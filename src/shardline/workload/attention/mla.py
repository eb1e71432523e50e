"""Multi-head latent attention (MLA: DeepSeek-V2/V3, arXiv 2405.04434, section 2.1).

The token's query goes through a latent of q_lora_rank (or straight from d_model), its keys and
values through one latent of kv_lora_rank plus a rotary key of qk_rope_head_dim shared by the
heads: the cache holds `kv_lora_rank + qk_rope_head_dim` values per token and layer. Heads attend
with qk head dim `qk_nope_head_dim + qk_rope_head_dim` and v head dim `v_head_dim`.
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

The latent cache has no heads to split: every attention tensor-parallel rank holds all of it.
docs/context-parallel-and-attention.md. Pure: no printing, no files.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from shardline.ops.layer import Layer
from shardline.workload.attention.base import (
    AttentionSizes,
    AttentionVariant,
    Extras,
    Standard,
    Template,
    attention_layer,
)

__all__ = ["MLA", "LatentAttention", "mla_cache_width", "mla_attention_params", "mla_layers"]


@dataclass(frozen=True)
class MLA:
    """Multi-head latent attention (DeepSeek-V2/V3): queries through a low-rank `q_lora_rank`
    (0: a full projection), keys and values from one shared latent of `kv_lora_rank` plus a
    decoupled rotary key of `qk_rope_head_dim`; the cache holds only the latent and the rotary
    key."""

    q_lora_rank: int
    kv_lora_rank: int
    qk_rope_head_dim: int
    qk_nope_head_dim: int
    v_head_dim: int


def mla_cache_width(mla: MLA) -> int:
    """Cached values per token and layer: the latent and the rotary key."""
    return mla.kv_lora_rank + mla.qk_rope_head_dim


def mla_attention_params(d_model: int, heads: int, mla: MLA, norm_scale: int = 0) -> int:
    """One block's MLA weights: W_q = d x r_q (+ a norm of r_q) then r_q x H (nope + rope), or
    d x H (nope + rope) without r_q; W_kv_a = d x (r_kv + rope) (+ a norm of r_kv); W_kv_b =
    r_kv x H (nope + v); W_o = H v x d. `norm_scale`: parameters per channel of a norm (0: the
    latents' norms left out, as the template's weights leave every norm out)."""
    qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    if mla.q_lora_rank:
        q = d_model * mla.q_lora_rank + norm_scale * mla.q_lora_rank
        q += mla.q_lora_rank * heads * qk
    else:
        q = d_model * heads * qk
    kv = d_model * mla_cache_width(mla) + norm_scale * mla.kv_lora_rank
    kv += mla.kv_lora_rank * heads * (mla.qk_nope_head_dim + mla.v_head_dim)
    return q + kv + heads * mla.v_head_dim * d_model


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
        attention_layer(
            "attn_scores",
            f"q[B,S,H,K] * {k_spec} -> p[B,H,S,T]",
            {**base, "K": qk},
            a,
            onchip=onchip,
            tp_dims=("H",),
            kernel="attention",
            **cache,
        ),
        attention_layer(
            "attn_values",
            f"p[B,H,S,T] * {v_spec} -> o[B,S,H,V]",
            {**base, "V": v},
            a,
            onchip=onchip + v_onchip,
            tp_dims=("H",),
            kernel="attention",
        ),
    ]


def _up_projections(a: AttentionSizes, mla: MLA, q_in: int, qk: int) -> list[Layer]:
    """Training's one up-projection einsum over both latents (module docstring), or inference's
    query up-projection and the absorbed key/value up-projection."""
    if a.phase == "training":
        lat = q_in + mla.kv_lora_rank
        m = ceil((q_in * qk + mla.kv_lora_rank * (mla.qk_nope_head_dim + mla.v_head_dim)) / lat)
        dims = {"B": a.b, "S": a.s, "A": lat, "H": a.h, "M": m}
        spec = "c[B,S,A] * wb[A,H,M] -> qkv[B,S,H,M]"
        return [attention_layer("mla_up", spec, dims, a, weights=("wb",), tp_dims=("H",))]
    q_dims = {"B": a.b, "S": a.s, "A": q_in, "H": a.h, "K": qk}
    n = mla.qk_nope_head_dim + mla.v_head_dim
    kv_dims = {"B": a.b, "S": a.s, "H": a.h, "N": n, "L": mla.kv_lora_rank}
    return [
        attention_layer(
            "mla_q_up",
            "c[B,S,A] * wq[A,H,K] -> q[B,S,H,K]",
            q_dims,
            a,
            weights=("wq",),
            tp_dims=("H",),
        ),
        attention_layer(
            "mla_absorb",
            "q[B,S,H,N] * wkv[L,H,N] -> ql[B,S,H,L]",
            kv_dims,
            a,
            weights=("wkv",),
            tp_dims=("H",),
        ),
    ]


def mla_layers(a: AttentionSizes, mla: MLA) -> list[Layer]:
    """The MLA einsums of one block (module docstring): training explicit, inference absorbed."""
    qk = mla.qk_nope_head_dim + mla.qk_rope_head_dim
    tok = {"B": a.b, "S": a.s, "D": a.d}
    down_dims = {**tok, "A": mla.q_lora_rank + mla_cache_width(mla)}
    down = attention_layer(
        "mla_down", "x[B,S,D] * wa[D,A] -> ca[B,S,A]", down_dims, a, weights=("wa",)
    )
    out = attention_layer(
        "attn_out",
        "o[B,S,H,V] * wo[H,V,D] -> y[B,S,D]",
        {**tok, "H": a.h, "V": mla.v_head_dim},
        a,
        weights=("wo",),
        tp_dims=("H",),
    )
    up = _up_projections(a, mla, mla.q_lora_rank or a.d, qk)
    if a.phase == "training":
        return [down, *up, *_attention(a, qk, mla.v_head_dim, None), out]
    cached = "cache" if a.phase in ("prefill", "decode") else "latent"
    return [down, *up, *_attention(a, mla_cache_width(mla), mla.kv_lora_rank, cached), out]


class LatentAttention(AttentionVariant):
    """The `mla` table: multi-head latent attention."""

    key = "mla"
    label = "multi-head latent attention (MLA)"
    record = MLA
    fields = {
        "q_lora_rank": (0, 0),
        "kv_lora_rank": (1, None),
        "qk_rope_head_dim": (1, None),
        "qk_nope_head_dim": (1, None),
        "v_head_dim": (1, None),
    }
    kv_split_over_heads = False

    def kind(self, record: object, base: str) -> str:
        return "MLA"

    def attention_params(self, record: object, d: int, heads: int, norm_scale: int) -> int:
        assert isinstance(record, MLA)
        return mla_attention_params(d, heads, record, norm_scale)

    def kv_values_per_layer(self, record: object) -> int:
        assert isinstance(record, MLA)
        return mla_cache_width(record)

    def template(self, record: object, a: AttentionSizes, layers: int, std: Standard) -> Template:
        assert isinstance(record, MLA)
        extra: Extras = {
            "head_dim": record.qk_nope_head_dim + record.qk_rope_head_dim,
            "v_head_dim": record.v_head_dim,
            "attention_params": mla_attention_params(a.d, a.h, record),
        }
        return mla_layers(a, record), extra, False
