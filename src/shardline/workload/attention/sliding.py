"""Sliding-window layers (Mistral, Gemma 2/3, gpt-oss), and the causal saving a fused kernel makes
in training and prefill.

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

docs/context-parallel-and-attention.md. Pure: no printing, no files.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

from shardline.workload.attention.base import (
    AttentionSizes,
    AttentionVariant,
    Extras,
    Standard,
    Template,
)

__all__ = ["SlidingWindow", "SlidingLayers", "layer_counts", "mean_key_length", "causal_fraction"]


@dataclass(frozen=True)
class SlidingWindow:
    """Local attention layers that see only the last `window` tokens. The layers repeat in groups
    of `local_per_global + 1`: that many sliding layers, then one global layer (gpt-oss: 1, every
    other layer; Gemma 3: 5 local to 1 global)."""

    window: int
    local_per_global: int

    def sliding_layers(self, layers: int) -> int:
        """Sliding layers among `layers`: all but every (local_per_global + 1)-th."""
        return layers - layers // (self.local_per_global + 1)


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


class SlidingLayers(AttentionVariant):
    """The `sliding_window` table: sliding-window layers among global ones."""

    key = "sliding_window"
    label = "sliding-window layers"
    record = SlidingWindow
    fields = {"window": (1, None), "local_per_global": (1, None)}
    kv_linear_in_context = False

    def kind(self, record: object, base: str) -> str:
        return base + "+sliding"

    def cached_tokens(self, record: object, layers: int, context: int) -> int:
        """Global layers cache all `context` tokens, sliding layers at most the window."""
        assert isinstance(record, SlidingWindow)
        sliding = record.sliding_layers(layers)
        return (layers - sliding) * context + sliding * min(context, record.window)

    def template(self, record: object, a: AttentionSizes, layers: int, std: Standard) -> Template:
        assert isinstance(record, SlidingWindow)
        keys = mean_key_length(a.t, layers, record)
        extra: Extras = {"key_len": keys, "causal_fraction": causal_fraction(a.t, layers, record)}
        return std(keys), extra, keys == a.t
