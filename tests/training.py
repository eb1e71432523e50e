"""A training workload of a zoo model, as `shardline search` builds it (tests share it)."""

from __future__ import annotations

from functools import lru_cache

from shardline.io.workload_toml import workload_from_dict
from shardline.models import load_model
from shardline.models.template import transformer_table
from shardline.workload.workload import Workload

DENSE_FIRST = "dense-first-7"  # `dense_first_workload`, by name


@lru_cache(maxsize=8)
def training_workload(
    model: str, sequences: int, seq_len: int, dtype: str | None = None
) -> Workload:
    """`model` (a zoo model, or `DENSE_FIRST`) training on `sequences` sequences of `seq_len`
    tokens per step; `dtype` as `--dtype` sets it (None: the model's)."""
    if model == DENSE_FIRST:
        return dense_first_workload(sequences, seq_len)
    spec = load_model(model)
    table = transformer_table(spec, batch=sequences, seq_len=seq_len)
    return workload_from_dict(
        {"name": spec.name, "phase": "training", "transformer": table}, origin="test", dtype=dtype
    )


@lru_cache(maxsize=2)
def dense_first_workload(sequences: int, seq_len: int) -> Workload:
    """A small model whose blocks differ, as DeepSeek-V3's (its first 3 of 61 blocks dense): 7
    blocks of d_model 1,024 and 8 heads, the first 3 a dense gated FFN of d_ff 4,096, the other
    4 a mixture of 8 experts of width 1,024 (top 2), a 32,000-token vocabulary; 7 blocks split
    unevenly on 2 and 4 stages, the first stage holding the dense blocks."""
    from shardline.workload.templates import transformer

    moe = {"experts": 8, "experts_per_token": 2, "expert_d_ff": 1024, "dense_layers_first": 3}
    sizes = {"d_model": 1024, "d_ff": 4096, "heads": 8, "layers": 7, "vocab": 32000}
    return transformer(
        **sizes, gated=True, batch=sequences, seq_len=seq_len, phase="training", moe=moe
    )
