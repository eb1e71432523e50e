"""What an attention variant is to the rest of the tool: one `AttentionVariant` (its table's name
and fields, the record of its numbers, the einsums it gives the transformer template and its
terms in the parameter and KV-cache counts), and the sizes its einsums need (`AttentionSizes`).

A variant is turned on by a table of its name in a model file or a `[transformer]` table; the
registry (shardline.workload.attention.registry) lists the variants, and the model reader, the
template, the counts (shardline.workload.modelspec) and the serving KV rules ask it. The defaults
below are plain grouped-query attention's: a variant overrides only what it changes.
Pure: no printing, no files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from shardline.errors import InputError
from shardline.ops.layer import Layer

__all__ = [
    "AttentionSizes",
    "AttentionVariant",
    "Template",
    "Extras",
    "Standard",
    "attention_layer",
]

Extras = dict[str, int | float]  # the realistic ModelShape fields a variant sets
Standard = Callable[[int], list[Layer]]  # grouped-query attention's einsums at a key length
Template = tuple[list[Layer], Extras, bool]  # einsums, ModelShape fields, plain KV formula holds


@dataclass(frozen=True)
class AttentionSizes:
    """The block's sizes a variant's einsums need: batch, query and key tokens, d_model, heads,
    the dtypes, whether the scores stay on chip and the phase."""

    b: int
    s: int
    t: int
    d: int
    h: int
    dtype: str
    kv_dtype: str
    onchip_scores: bool
    phase: str


AXES = {"B": "batch", "S": "seq", "T": "seq", "D": "model", "H": "heads"}


def attention_layer(
    name: str, spec: str, dims: dict[str, int], a: AttentionSizes, **kw: Any
) -> Layer:
    """One einsum of a variant at the block's dtype, its logical axes named from AXES."""
    axes = {d: AXES[d] for d in dims if d in AXES}
    return Layer(name, spec, dims, dtype=a.dtype, axes=axes, **kw)


def _whole(value: object, what: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        kind = "a positive" if least == 1 else "a non-negative"
        raise InputError(f"{what} must be {kind} integer, got {value!r}")
    return value


class AttentionVariant:
    """One attention variant. `key` names its table; `fields` maps each field of its record (in
    the record's order) to (least value, default in a model file or None: required); `label`
    names it in messages."""

    key: ClassVar[str]
    label: ClassVar[str]
    record: ClassVar[type]
    fields: ClassVar[Mapping[str, tuple[int, int | None]]]
    # an attention tensor-parallel rank holds 1 / (its share of the KV heads) of the cache; False:
    # the cache has no heads to split (a latent), every rank holds all of it
    kv_split_over_heads: ClassVar[bool] = True
    # the cache of one sequence grows by the same bytes per token at every context (False: it
    # does not, `cached_tokens` says how: sliding windows)
    kv_linear_in_context: ClassVar[bool] = True

    def from_table(self, value: object) -> object:
        """The record from itself or a table of exactly its fields (a `[transformer]` table)."""
        if isinstance(value, self.record):
            return value
        if not isinstance(value, Mapping):
            raise InputError(f"{self.key} must be a table of {', '.join(self.fields)}")
        unknown = sorted(set(value) - set(self.fields))
        missing = [f for f in self.fields if f not in value]
        if unknown or missing:
            bad = f"unknown {', '.join(unknown)}" if unknown else f"missing {', '.join(missing)}"
            raise InputError(f"{self.key}: {bad}; fields: {', '.join(self.fields)}")
        sizes = [
            _whole(value[f], f"{self.key}.{f}", least) for f, (least, _) in self.fields.items()
        ]
        return self.record(*sizes)

    def kind(self, record: object, base: str) -> str:
        """The attention kind a summary prints, from the plain kind `base` (MHA, GQA, MQA)."""
        return base

    def attention_params(self, record: object, d: int, heads: int, norm_scale: int) -> int | None:
        """One block's attention weights (None: grouped-query attention's); `norm_scale` is the
        parameters per channel of one of the model's norms (1 RMSNorm, 2 LayerNorm)."""
        return None

    def kv_values_per_layer(self, record: object) -> int | None:
        """Cached values per token and layer (None: 2 x kv_heads x head_dim, K and V)."""
        return None

    def cached_tokens(self, record: object, layers: int, context: int) -> int:
        """Tokens the cache holds over all `layers` for one sequence of `context` tokens."""
        return layers * context

    def template(self, record: object, a: AttentionSizes, layers: int, std: Standard) -> Template:
        """The block's attention einsums (`std(keys)`: grouped-query attention at a key
        length), the ModelShape fields it sets, and whether the KV-cache formula
        2 L n_kv d_head S B s_kv holds."""
        return std(a.t), {"key_len": a.t, "causal_fraction": 0.5}, True
