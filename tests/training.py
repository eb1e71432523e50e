"""A training workload of a zoo model, as `shardline search` builds it (tests share it)."""

from __future__ import annotations

from functools import lru_cache

from shardline.io.workload_toml import workload_from_dict
from shardline.models import load_model
from shardline.models.template import transformer_table
from shardline.workload.workload import Workload


@lru_cache(maxsize=8)
def training_workload(model: str, sequences: int, seq_len: int) -> Workload:
    """`model` training on `sequences` sequences of `seq_len` tokens per step."""
    spec = load_model(model)
    table = transformer_table(spec, batch=sequences, seq_len=seq_len)
    return workload_from_dict(
        {"name": spec.name, "phase": "training", "transformer": table}, origin="test"
    )
