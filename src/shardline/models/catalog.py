"""Loading models: the shipped zoo (one TOML per model, `models/catalog/*.toml`) or a user's own
file, validated into a `ModelSpec`.

The file form is documented in docs/models.md. Every number is `{value, source}` (a boolean may be
too); `unsourced_fields` finds those that are not, and the test suite runs it over every catalog
file. An unknown field is an error, never ignored.
"""

from __future__ import annotations

import math
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from shardline.basics.dtypes import canonical_dtype
from shardline.errors import InputError
from shardline.hardware.datafile import SourcedReader, read_data_toml
from shardline.models.template import (
    DEFAULT_BATCH,
    DEFAULT_PHASE,
    DEFAULT_SEQ_LEN,
    DTYPE_FIELDS,
    model_workload,
)
from shardline.workload.attention import records_from, variants
from shardline.workload.modelspec import MAX_EXPERTS, ModelSpec, MoE

__all__ = [
    "load_model",
    "list_models",
    "model_from_dict",
    "model_files",
    "MODEL_FIELDS",
    "workload_of",
]

INTS = ("d_model", "layers", "heads", "kv_heads", "head_dim", "d_ff", "vocab")
OPTIONAL_INTS = {"norms_per_layer": 2, "learned_positions": 0, "extra_params": 0}
BOOLS = {"gated": None, "tied_embeddings": None, "rotary": True, "mlp_bias": False}
BOOLS |= {"qk_norm": False, "attention_sinks": False, "active_counts_embedding": True}
TEXTS = {
    "attention": ("flash", "standard"),
    "norm": ("rmsnorm", "layernorm"),
    "attention_bias": ("none", "qkv", "all"),
}
MOE_TABLE_FIELDS = (
    "experts",
    "experts_per_token",
    "expert_d_ff",
    "shared_experts",
    "dense_layers_first",
    "router_bias",
    "dense_weight_dtype",
)
# precision per tensor class, optional (docs/models.md, "Precision")
MODEL_FIELDS = (
    ("schema", "name", "description") + INTS + tuple(OPTIONAL_INTS) + tuple(BOOLS) + tuple(TEXTS)
) + DTYPE_FIELDS


def table_fields() -> dict[str, tuple[str, ...]]:
    """A model file's tables and their fields: [moe] and each attention variant's."""
    return {"moe": MOE_TABLE_FIELDS} | {v.key: tuple(v.fields) for v in variants()}


MAX_MODEL_INT = 10**15  # far above any real size; stops a value that would overflow the counts


class _Reader(SourcedReader):
    """Reads typed values out of a parsed model file, recording each one's source."""

    def integer(self, path: str, default: int | None = None, *, zero: bool = False) -> int:
        if self.raw(path) is None:
            if default is None:
                raise self.fail(path, "is missing")
            return default
        value = self.sourced(path)
        if (
            isinstance(value, bool)
            or not isinstance(value, int | float)
            or not math.isfinite(value)
            or value != int(value)
        ):
            raise self.fail(path, f"must be a whole number, got {value!r}")
        if value < 0 or (value == 0 and not zero):
            raise self.fail(path, f"must be {'0 or more' if zero else 'positive'}, got {value!r}")
        if value > MAX_MODEL_INT:
            raise self.fail(path, f"is too large (at most {MAX_MODEL_INT:.0e}), got {value!r}")
        return int(value)

    def boolean(self, path: str, default: bool | None) -> bool:
        if self.raw(path) is None:
            if default is None:
                raise self.fail(path, "is missing (true or false)")
            return default
        value = self.sourced(path)
        if not isinstance(value, bool):
            raise self.fail(path, f"must be true or false, got {value!r}")
        return value

    def dtype(self, path: str) -> str:
        if self.raw(path) is None:
            return ""
        value = self.sourced(path)
        if not isinstance(value, str) or not value.strip():
            raise self.fail(path, f'must be a dtype name such as "fp8", got {value!r}')
        try:
            return canonical_dtype(value)
        except InputError as exc:
            raise self.fail(path, str(exc)) from None

    def text(self, path: str, choices: tuple[str, ...]) -> str:
        value = self.raw(path)
        if value is None:
            return choices[0]
        if not isinstance(value, str) or value not in choices:
            raise self.fail(path, f"must be one of {', '.join(choices)}, got {value!r}")
        return value


def _check_fields(r: _Reader) -> None:
    tables = table_fields()
    for key, value in r.data.items():
        if key in tables:
            if not isinstance(value, dict):
                raise r.fail(key, "must be a table")
            unknown = sorted(set(value) - set(tables[key]))
            if unknown:
                raise r.fail(f"{key}.{unknown[0]}", f"is not a field of [{key}]")
        elif key not in MODEL_FIELDS:
            raise r.fail(key, "is not a model field (see docs/models.md)")


def _moe(r: _Reader) -> MoE | None:
    if "moe" not in r.data:
        return None
    moe = MoE(
        experts=r.integer("moe.experts"),
        experts_per_token=r.integer("moe.experts_per_token"),
        expert_d_ff=r.integer("moe.expert_d_ff"),
        shared_experts=r.integer("moe.shared_experts", 0, zero=True),
        dense_layers_first=r.integer("moe.dense_layers_first", 0, zero=True),
        router_bias=r.boolean("moe.router_bias", False),
        dense_weight_dtype=r.dtype("moe.dense_weight_dtype"),
    )
    if moe.experts > MAX_EXPERTS:
        raise r.fail("moe.experts", f"is more than {MAX_EXPERTS:,} (the most this tool models)")
    if moe.experts_per_token > moe.experts:
        raise r.fail("moe.experts_per_token", f"is more than the {moe.experts} experts")
    return moe


def _variants(r: _Reader) -> tuple[object, ...]:
    """The attention variant's record from its table (shardline.workload.attention), each field
    read with its least value and default."""
    tables = {}
    for v in variants():
        if v.key in r.data:
            tables[v.key] = {
                f: r.integer(f"{v.key}.{f}", default, zero=least == 0)
                for f, (least, default) in v.fields.items()
            }
    try:
        return records_from(tables)
    except InputError as err:
        raise InputError(f"{r.origin}: {err}") from None


def model_from_dict(data: dict[str, object], origin: str = "model file") -> ModelSpec:
    """A validated ModelSpec from a parsed model file, or an InputError naming the bad field."""
    if not isinstance(data, dict):
        raise InputError(f"{origin}: a model file is a TOML table")
    r = _Reader(data, origin)
    _check_fields(r)
    name = data.get("name")
    if not isinstance(name, str) or not name.strip():
        raise r.fail("name", "is missing (a non-empty string)")
    ints: dict[str, Any] = {key: r.integer(key) for key in INTS}
    ints |= {key: r.integer(key, default, zero=True) for key, default in OPTIONAL_INTS.items()}
    bools: dict[str, Any] = {key: r.boolean(key, default) for key, default in BOOLS.items()}
    texts: dict[str, Any] = {key: r.text(key, choices) for key, choices in TEXTS.items()}
    texts |= {key: r.dtype(key) for key in DTYPE_FIELDS}
    if ints["heads"] % ints["kv_heads"]:
        raise r.fail("kv_heads", f"({ints['kv_heads']}) must divide heads ({ints['heads']})")
    spec = ModelSpec(
        name=name,
        description=str(data.get("description", "")),
        moe=_moe(r),
        attention_variants=_variants(r),
        sources=r.sources,
        **ints,
        **bools,
        **texts,
    )
    if spec.moe is not None and spec.moe.dense_layers_first > spec.layers:
        raise r.fail("moe.dense_layers_first", f"is more than the {spec.layers} layers")
    return spec


def model_files() -> list[Traversable]:
    """The shipped model files, sorted by name."""
    folder = resources.files("shardline.models") / "catalog"
    return sorted((f for f in folder.iterdir() if f.name.endswith(".toml")), key=lambda f: f.name)


@cache
def _catalog() -> dict[str, ModelSpec]:
    import tomllib

    models: dict[str, ModelSpec] = {}
    for entry in model_files():
        spec = model_from_dict(tomllib.loads(entry.read_text("utf-8")), f"models/{entry.name}")
        models[spec.name] = spec
    return models


def list_models() -> list[ModelSpec]:
    """Every model of the shipped zoo, in name order."""
    return [spec for _, spec in sorted(_catalog().items())]


def load_model(name_or_path: str | Path) -> ModelSpec:
    """A zoo model by name (case-insensitive), or a model .toml file."""
    text = str(name_or_path)
    found = _catalog().get(text.strip().lower())
    if found is not None:
        return found
    if text.endswith(".toml") or "/" in text or isinstance(name_or_path, Path):
        path = Path(text)
        return model_from_dict(read_data_toml(path, "model file"), str(path))
    known = ", ".join(sorted(_catalog()))
    raise InputError(f"unknown model {text!r}; known: {known} (or give a model .toml file)")


def workload_of(
    model: Any,
    *,
    phase: str = DEFAULT_PHASE,
    batch: int = DEFAULT_BATCH,
    seq_len: int = DEFAULT_SEQ_LEN,
    dtype: str | None = None,
) -> Any:
    """The Workload of a zoo model's name, a model .toml file (an imported Hugging Face config
    among them) or a ModelSpec: the same one `--model NAME` builds with these defaults (training,
    batch 1, sequence length 4096)."""
    spec = model if isinstance(model, ModelSpec) else load_model(model)
    return model_workload(spec, phase=phase, batch=batch, seq_len=seq_len, dtype=dtype)
