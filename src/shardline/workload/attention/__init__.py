"""Attention beyond grouped-query attention, for the transformer template and the model counts:
each variant is one module here (`mla`: multi-head latent attention; `sliding`: sliding-window
layers), an `AttentionVariant` (`base`) listed in `registry.VARIANTS`. Pure: no printing, no
files."""

from __future__ import annotations

from shardline.workload.attention.base import AttentionSizes, AttentionVariant
from shardline.workload.attention.mla import MLA, mla_attention_params, mla_cache_width
from shardline.workload.attention.registry import (
    VARIANTS,
    records_from,
    template_attention,
    variant_keys,
    variant_of,
    variants,
)
from shardline.workload.attention.sliding import (
    SlidingWindow,
    causal_fraction,
    layer_counts,
    mean_key_length,
)

__all__ = [
    "AttentionSizes",
    "AttentionVariant",
    "MLA",
    "SlidingWindow",
    "VARIANTS",
    "causal_fraction",
    "layer_counts",
    "mean_key_length",
    "mla_attention_params",
    "mla_cache_width",
    "records_from",
    "template_attention",
    "variant_keys",
    "variant_of",
    "variants",
]
