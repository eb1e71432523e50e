"""The [[layer]] tables of a workload file as Layers, each distinct table built and checked once.

A file of 200,000 tables that differ only in their names (a block written out layer by layer)
builds 1 Layer and renames it 199,999 times (`Layer.renamed`: the name is checked, the content
is shared), instead of parsing and checking the same einsum, sizes and dtypes 200,000 times.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from shardline.errors import InputError
from shardline.ops.layer import Layer
from shardline.workload.workload import check_distinct_count

__all__ = ["build_layers", "table_content"]


def table_content(table: object) -> str | None:
    """What a [[layer]] table holds besides its name, as text that tells apart every value
    TOML can give (`repr`: 1, 1.0, true and "1" differ); None for a table that is not a dict."""
    if not isinstance(table, dict):
        return None
    return repr([item for item in table.items() if item[0] != "name"])


def build_layers(
    tables: Sequence[Any], build: Callable[[Any, int], Layer], origin: str
) -> list[Layer]:
    """`build(table, index)` (index from 1) for each table, called once per distinct content
    (at most MAX_DISTINCT_LAYERS, counted before any is built); a later table of the same
    content is the first one's Layer under the later table's name (its `name`, else
    "layer{index}", as `build` names it)."""
    contents = [table_content(table) for table in tables]
    check_distinct_count(len(set(contents)), origin)
    built: dict[str, Layer] = {}
    out: list[Layer] = []
    for index, (table, content) in enumerate(zip(tables, contents, strict=True), 1):
        first = built.get(content) if content is not None else None
        if first is None:
            layer = build(table, index)
            if content is not None:
                built[content] = layer
        else:
            layer = _renamed(first, table, index)
        out.append(layer)
    return out


def _renamed(first: Layer, table: dict[str, object], index: int) -> Layer:
    """`first` under the name of table `index`, its errors worded as the builder words them."""
    if "name" not in table:
        return first.renamed(f"layer{index}")
    label = table["name"]
    try:
        return first.renamed(str(label))
    except InputError as exc:
        raise InputError(f"layer {index} ({label!r}): {exc}") from None
