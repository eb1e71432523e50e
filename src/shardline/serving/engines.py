"""Per-engine software efficiency (engines.toml): one sourced figure per engine, never fitted per
benchmark case."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

from shardline.errors import InputError

__all__ = ["Engine", "engine", "engine_names"]

_FIELDS = (
    "scheduling_overhead_fraction",
    "kv_memory_fraction",
    "chunked_prefill",
    "default_chunk_tokens",
    "kv_reservation",
)
RESERVATIONS = ("full_output", "on_demand")


@dataclass(frozen=True)
class Engine:
    """One engine's figures and where each comes from."""

    name: str
    scheduling_overhead_fraction: float
    kv_memory_fraction: float
    chunked_prefill: bool
    default_chunk_tokens: int
    kv_reservation: str
    sources: dict[str, str]


@cache
def _table() -> dict[str, Engine]:
    text = files("shardline.serving").joinpath("engines.toml").read_text(encoding="utf-8")
    out: dict[str, Engine] = {}
    for name, row in tomllib.loads(text)["engine"].items():
        sources = {f: str(row[f"{f}_source"]) for f in _FIELDS}
        out[name] = Engine(
            name=name,
            scheduling_overhead_fraction=float(row["scheduling_overhead_fraction"]),
            kv_memory_fraction=float(row["kv_memory_fraction"]),
            chunked_prefill=bool(row["chunked_prefill"]),
            default_chunk_tokens=int(row["default_chunk_tokens"]),
            kv_reservation=str(row["kv_reservation"]),
            sources=sources,
        )
    return out


def engine_names() -> tuple[str, ...]:
    """Every engine engines.toml holds (one `[engine.NAME]` table each), sorted."""
    return tuple(sorted(_table()))


def engine(name: str) -> Engine:
    """The engine called `name` (a table of engines.toml; TensorRT-LLM is trtllm)."""
    table = _table()
    key = name.strip().lower().replace("-", "").replace("_", "")
    key = {"tensorrtllm": "trtllm"}.get(key, key)
    if key not in table:
        raise InputError(f"unknown engine {name!r}; give one of {', '.join(sorted(table))}")
    return table[key]
