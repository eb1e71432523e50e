"""A zoo model as the `[transformer]` template table of a workload file (docs/models.md): the
same Workload a hand-written template with these numbers builds. Dense models only: the template
has no experts, no latent attention and no sliding window, and approximating them would be wrong
without saying so."""

from __future__ import annotations

from typing import Any

from shardline.errors import InputError
from shardline.models.spec import ModelSpec

__all__ = ["transformer_table", "DEFAULT_PHASE", "DEFAULT_BATCH", "DEFAULT_SEQ_LEN"]

DEFAULT_PHASE = "training"
DEFAULT_BATCH = 1
DEFAULT_SEQ_LEN = 4096


def _unplannable(spec: ModelSpec) -> str | None:
    if spec.moe is not None:
        return "mixture-of-experts"
    if spec.mla is not None:
        return "multi-head latent attention (MLA)"
    if spec.sliding_window is not None:
        return "sliding-window attention"
    return None


def transformer_table(spec: ModelSpec, *, batch: int, seq_len: int) -> dict[str, Any]:
    """The `[transformer]` table of `spec` at `batch` sequences of `seq_len` tokens. Biases, norm
    scales and learned position tables are not in the template (they are under 0.1% of the weights
    of every zoo model the template takes)."""
    kind = _unplannable(spec)
    if kind is not None:
        raise InputError(
            f"model {spec.name}: {kind} planning is not available yet; "
            f"`shardline model show {spec.name}` gives its counts"
        )
    return {
        "d_model": spec.d_model,
        "d_ff": spec.d_ff,
        "heads": spec.heads,
        "kv_heads": spec.kv_heads,
        "head_dim": spec.head_dim,
        "layers": spec.layers,
        "gated": spec.gated,
        "vocab": spec.vocab,
        "attention": spec.attention,
        "rotary": spec.rotary,
        "tied_embeddings": spec.tied_embeddings,
        "batch": batch,
        "seq_len": seq_len,
    }
