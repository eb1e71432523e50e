"""A zoo model as the `[transformer]` template table of a workload file (docs/models.md): the
same Workload a hand-written template with these numbers builds: dense and mixture-of-experts
models (the `moe` sub-table, docs/moe.md), latent attention (MLA) and sliding-window layers (the
`mla` and `sliding_window` tables, shardline.workload.attention)."""

from __future__ import annotations

from typing import Any

from shardline.workload.modelspec import ModelSpec
from shardline.workload.workload import Workload

__all__ = [
    "transformer_table",
    "model_workload",
    "DEFAULT_PHASE",
    "DEFAULT_BATCH",
    "DEFAULT_SEQ_LEN",
]

# the model file's precision fields, passed to the template when set
DTYPE_FIELDS = ("dtype", "weight_dtype", "kv_dtype", "attention_dtype")
DEFAULT_PHASE = "training"
DEFAULT_BATCH = 1
DEFAULT_SEQ_LEN = 4096


def _attention_tables(spec: ModelSpec) -> dict[str, dict[str, int]]:
    """The [transformer] template's table of the model's attention variant, named by its key
    (`mla`, `sliding_window`: shardline.workload.attention)."""
    from shardline.workload.attention import variant_of

    return {variant_of(r).key: dict(vars(r)) for r in spec.attention_variants}


def transformer_table(spec: ModelSpec, *, batch: int, seq_len: int) -> dict[str, Any]:
    """The `[transformer]` table of `spec` at `batch` sequences of `seq_len` tokens. Biases, norm
    scales and learned position tables are not in the template (they are under 0.1% of the weights
    of every zoo model the template takes)."""
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
        "qk_norm": spec.qk_norm,
        "norm": spec.norm,
        "tied_embeddings": spec.tied_embeddings,
        "batch": batch,
        "seq_len": seq_len,
        **_attention_tables(spec),
        **{key: getattr(spec, key) for key in DTYPE_FIELDS if getattr(spec, key)},
    } | _moe_table(spec)


def _moe_table(spec: ModelSpec) -> dict[str, object]:
    """The `moe` sub-table of a mixture-of-experts model (dropless, balanced routing: the
    template's defaults)."""
    if spec.moe is None:
        return {}
    m = spec.moe
    return {
        "moe": {
            "experts": m.experts,
            "experts_per_token": m.experts_per_token,
            "expert_d_ff": m.expert_d_ff,
            "shared_experts": m.shared_experts,
            **({"dense_layers_first": m.dense_layers_first} if m.dense_layers_first else {}),
        }
    }


def model_workload(
    spec: ModelSpec, *, phase: str, batch: int, seq_len: int, dtype: str | None = None
) -> Workload:
    """The Workload of `spec` at `batch` sequences of `seq_len` tokens in `phase`: the same one
    `--model NAME` and a `[transformer]` file with `transformer_table`'s numbers build (the
    precision fields, weight_dtype, attention_dtype and tied_embeddings, applied after the
    template). `dtype` overrides the model file's (default bf16)."""
    from shardline.workload.precision import PRECISION_FIELDS, template_precision
    from shardline.workload.templates import transformer

    table = transformer_table(spec, batch=batch, seq_len=seq_len)
    precision = {k: table.pop(k) for k in PRECISION_FIELDS if k in table}
    stated = table.pop("dtype", "bf16")
    work = transformer(**table, phase=phase, dtype=dtype or stated, name=spec.name)
    return _checkpoint_layout(spec, template_precision(work, **precision))


def _checkpoint_layout(spec: ModelSpec, work: Any) -> Any:
    """`work` told that `spec`'s quantized checkpoint quantizes only its routed experts
    (`moe.dense_weight_dtype`): `with_tensor_dtypes` then keeps the other weights in that dtype."""
    from dataclasses import replace

    dense = spec.moe.dense_weight_dtype if spec.moe is not None else ""
    if not dense or work.model is None:
        return work
    return replace(work, model=replace(work.model, dense_weight_dtype=dense))
