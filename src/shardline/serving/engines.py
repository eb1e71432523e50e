"""Serving engines as data (engines.toml): each engine's release, KV budget rule, scheduler and
kernels, one sourced figure each, never fitted per benchmark case."""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib.resources import files

from shardline.errors import InputError

__all__ = ["Engine", "engine", "engine_names", "kv_budget_per_device", "KV_BUDGET_RULES", "GIB"]

GIB = 2**30
_FIELDS = (
    "display_name",
    "version",
    "scheduling_overhead_fraction",
    "kv_budget_rule",
    "kv_memory_fraction",
    "chunked_prefill",
    "default_chunk_tokens",
    "kv_reservation",
    "cuda_graph_max_batch",
    "attention_kernel",
    "moe_kernel",
)
RESERVATIONS = ("full_output", "on_demand")
# how the engine's KV cache holds a sliding-window layer: "window" (its last `window` tokens, as
# the model's attention reads them) or "full" (every token of the sequence, as a full layer)
SLIDING_WINDOW_KV = ("window", "full")
# f x (C - W - A); f x C - W - A; f x C - W (engines.toml's header)
KV_BUDGET_RULES = ("fraction_of_free", "fraction_of_capacity", "static_fraction")


@dataclass(frozen=True)
class Engine:
    """One engine release's figures and where each comes from. `reserved_memory`: (below GiB,
    base GiB, GiB per rank) tiers of an engine whose memory fraction follows the device.
    `sliding_window_kv`: "full" where the engine's KV cache holds every token of a sequence in a
    sliding-window layer too (engines.toml says so, with its source); "window" otherwise, the
    model's own sizing (its local layers hold their last `window` tokens)."""

    name: str
    display_name: str
    version: str
    scheduling_overhead_fraction: float
    kv_budget_rule: str
    kv_memory_fraction: float
    chunked_prefill: bool
    default_chunk_tokens: int
    kv_reservation: str
    cuda_graph_max_batch: int
    attention_kernel: str
    moe_kernel: str
    sources: dict[str, str]
    reserved_memory: tuple[tuple[float, float, float], ...] = ()
    reserved_memory_dp_attention_gib: float = 0.0
    sliding_window_kv: str = "window"

    @property
    def label(self) -> str:
        """NAME@VERSION, as `--engine` takes it."""
        return f"{self.name}@{self.version}"

    def memory_fraction(self, capacity_bytes: float, ranks: int, attention_dp: int = 1) -> float:
        """The engine's memory fraction f on a device of `capacity_bytes` in a replica of `ranks`
        devices: the fixed fraction, or (SGLang) f = (C - reserved) / C with reserved = base +
        ranks x per-rank GiB of the first tier the device's memory is below, plus the DP
        attention reserve when attention is data parallel."""
        if not self.reserved_memory:
            return self.kv_memory_fraction
        gib = capacity_bytes / GIB
        for below, base, per_rank in self.reserved_memory:
            if gib < below:
                reserved = base + per_rank * ranks
                if attention_dp > 1:
                    reserved += self.reserved_memory_dp_attention_gib
                return max(gib - reserved, 0.0) / gib
        return self.kv_memory_fraction


def kv_budget_per_device(
    rule: str, fraction: float, capacity: float, weights: float, activations: float
) -> float:
    """KV bytes one device holds by an engine's rule (engines.toml): fraction_of_free
    f (C - W - A) (TensorRT-LLM, TGI, LMDeploy), fraction_of_capacity f C - W - A (vLLM),
    static_fraction f C - W (SGLang); at least 0."""
    if rule == "fraction_of_free":
        budget = fraction * (capacity - weights - activations)
    elif rule == "fraction_of_capacity":
        budget = fraction * capacity - weights - activations
    elif rule == "static_fraction":
        budget = fraction * capacity - weights
    else:
        raise InputError(f"unknown KV budget rule {rule!r}; one of {', '.join(KV_BUDGET_RULES)}")
    return max(budget, 0.0)


def _engine_of(name: str, row: dict) -> Engine:
    sources = {f: str(row[f"{f}_source"]) for f in _FIELDS}
    tiers = tuple(
        (float(t["below_gib"]), float(t["base_gib"]), float(t["per_rank_gib"]))
        for t in row.get("reserved_memory", ())
    )
    if tiers:
        sources["reserved_memory"] = str(row["reserved_memory_source"])
    rule, reservation = str(row["kv_budget_rule"]), str(row["kv_reservation"])
    if rule not in KV_BUDGET_RULES or reservation not in RESERVATIONS:
        raise ValueError(f"engines.toml [engine.{name}]: unknown rule {rule} or {reservation}")
    window_kv = str(row.get("sliding_window_kv", "window"))
    if window_kv not in SLIDING_WINDOW_KV:
        raise ValueError(f"engines.toml [engine.{name}]: unknown sliding_window_kv {window_kv}")
    if "sliding_window_kv" in row:
        sources["sliding_window_kv"] = str(row["sliding_window_kv_source"])
    return Engine(
        name=name,
        display_name=str(row["display_name"]),
        version=str(row["version"]),
        scheduling_overhead_fraction=float(row["scheduling_overhead_fraction"]),
        kv_budget_rule=rule,
        kv_memory_fraction=float(row["kv_memory_fraction"]),
        chunked_prefill=bool(row["chunked_prefill"]),
        default_chunk_tokens=int(row["default_chunk_tokens"]),
        kv_reservation=reservation,
        cuda_graph_max_batch=int(row["cuda_graph_max_batch"]),
        attention_kernel=str(row["attention_kernel"]),
        moe_kernel=str(row["moe_kernel"]),
        sources=sources,
        reserved_memory=tiers,
        reserved_memory_dp_attention_gib=float(row.get("reserved_memory_dp_attention_gib", 0.0)),
        sliding_window_kv=window_kv,
    )


@cache
def _table() -> dict[str, Engine]:
    text = files("shardline.serving").joinpath("engines.toml").read_text(encoding="utf-8")
    return {name: _engine_of(name, row) for name, row in tomllib.loads(text)["engine"].items()}


def engine_names() -> tuple[str, ...]:
    """Every engine engines.toml holds (one `[engine.NAME]` table each), sorted."""
    return tuple(sorted(_table()))


def engine(name: str) -> Engine:
    """The engine called `name` (a table of engines.toml; TensorRT-LLM is trtllm), optionally
    `NAME@VERSION` naming the release its table describes."""
    if not isinstance(name, str):
        raise InputError(f"--engine must be a name such as vllm, got {name!r}")
    table = _table()
    base, _, version = name.partition("@")
    key = base.strip().lower().replace("-", "").replace("_", "")
    key = {"tensorrtllm": "trtllm", "textgenerationinference": "tgi"}.get(key, key)
    if key not in table:
        raise InputError(
            f"unknown engine {name!r}; give one of {', '.join(sorted(table))} (NAME or "
            "NAME@VERSION)"
        )
    eng = table[key]
    if version.strip() and version.strip().lstrip("v") != eng.version:
        raise InputError(
            f"--engine {name}: engines.toml describes {eng.name} {eng.version} only; give "
            f"{eng.name} or {eng.label}"
        )
    return eng
