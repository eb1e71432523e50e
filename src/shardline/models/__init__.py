"""The model zoo: architectures as data (`models/catalog/*.toml`, each number with its source) and
the counts that follow from them (total and active parameters, KV-cache bytes per token)."""

from __future__ import annotations

from shardline.models.catalog import list_models, load_model, model_from_dict, workload_of
from shardline.workload.modelspec import (
    MLA,
    ModelSpec,
    MoE,
    SlidingWindow,
    attention_kind,
    kv_bytes_at,
    kv_bytes_per_token,
    params_active,
    params_total,
)

__all__ = [
    "MLA",
    "ModelSpec",
    "MoE",
    "SlidingWindow",
    "attention_kind",
    "kv_bytes_at",
    "kv_bytes_per_token",
    "list_models",
    "load_model",
    "model_from_dict",
    "params_active",
    "params_total",
    "workload_of",
]
