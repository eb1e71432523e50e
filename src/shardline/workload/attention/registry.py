"""The attention variants, one line each, and what the rest of the tool asks of them: the
variants a model file or a `[transformer]` table turns on (a table of the variant's `key`), the
template's attention einsums, and the variants' terms in the counts and the KV rules.

Adding a variant: its module in this package (an `AttentionVariant`: docs/architecture.md) and
its line in `VARIANTS`. Pure: no printing, no files.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from shardline.errors import InputError
from shardline.ops.layer import Layer
from shardline.workload.attention.base import AttentionSizes, AttentionVariant, Template
from shardline.workload.attention.mla import LatentAttention
from shardline.workload.attention.sliding import SlidingLayers

__all__ = [
    "VARIANTS",
    "PLAIN",
    "variants",
    "variant_keys",
    "variant_of",
    "records_from",
    "template_attention",
]

VARIANTS: tuple[AttentionVariant, ...] = (
    LatentAttention(),
    SlidingLayers(),
)
PLAIN = AttentionVariant()  # grouped-query attention: the defaults


def variants() -> tuple[AttentionVariant, ...]:
    """The registered variants (read at each call: the readers follow the registry)."""
    return VARIANTS


def variant_keys() -> tuple[str, ...]:
    """The table names that turn a variant on."""
    return tuple(v.key for v in variants())


def variant_of(record: object) -> AttentionVariant:
    """The variant a record belongs to."""
    for v in variants():
        if type(record) is v.record:
            return v
    raise TypeError(f"{record!r} is not the record of a registered attention variant")


def records_from(tables: Mapping[str, object]) -> tuple[object, ...]:
    """The variants' records from the tables of `tables` named by a variant's key (each a record
    or a table of its fields), in the registry's order; at most one variant at a time (no
    combination is modelled)."""
    records = tuple(
        v.from_table(tables[v.key]) for v in variants() if tables.get(v.key) is not None
    )
    return _at_most_one(records)


def _at_most_one(records: tuple[object, ...]) -> tuple[object, ...]:
    if len(records) > 1:
        first, second = (variant_of(r) for r in records[:2])
        raise InputError(f"{first.label} with {second.label} is not modeled")
    return records


def template_attention(
    records: tuple[object, ...],
    a: AttentionSizes,
    layers: int,
    standard: Callable[[int], list[Layer]],
) -> Template:
    """The transformer template's attention einsums for its variant (or plain grouped-query
    attention), the realistic ModelShape fields it sets and whether the plain KV-cache formula
    holds (AttentionVariant.template)."""
    if not _at_most_one(records):
        return PLAIN.template(None, a, layers, standard)
    return variant_of(records[0]).template(records[0], a, layers, standard)
