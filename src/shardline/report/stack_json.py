"""`shardline stack --json` as text in pieces: the text `json.dumps(result.to_dict(), indent=2)`
gives, with each distinct layer row encoded once.

A stack of 200,000 layers of one shape prints 200,000 rows that differ only in name and count;
`json.dumps` with an indent encodes in Python, float by float (about 10 s and 100 MB of text at
once). Here the summary and each distinct row (`LayerRow.content_key`) are encoded by `json.dumps`
itself, a row's name and count are put into its encoded text, and the rows come out a few
thousand at a time. tests/test_stack_large.py checks the text is the same as `json.dumps` gives.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

from shardline.basics.serialize import jsonable
from shardline.workload.stack import LayerRow, StackResult

__all__ = ["stack_json_pieces"]

_ROWS_PER_PIECE = 4096
_INDENT = "    "  # a row is an item of the top-level object's "layers" list: two levels in
# stand-ins put in place of the layers, a row's name and its count, and found in the encoded text
_MARKS = {"layers": "\x00layers\x00", "name": "\x00name\x00", "count": "\x00count\x00"}
_LAYERS, _NAME, _COUNT = (json.dumps(mark) for mark in _MARKS.values())


def _dumps(value: object) -> str:
    """The encoding `shardline.cli.common.emit_json` uses (a ValueError on inf and NaN)."""
    return json.dumps(value, indent=2, allow_nan=False)


def stack_json_pieces(result: StackResult) -> Iterator[str]:
    """The pieces of the JSON text of `result`, in order; the encoding is done before the first
    piece is returned, so that a value JSON cannot hold (a ValueError) comes before any output."""
    summary = result.to_dict(layers=False) | {"layers": _MARKS["layers"]}
    head, tail = _dumps(summary).split(_LAYERS, 1)
    templates = _row_templates(result.layers)
    return _pieces(head, tail, result.layers, templates)


def _row_templates(rows: Sequence[LayerRow]) -> dict[tuple[object, ...], tuple[str, str, str]]:
    """Each distinct row's encoded text, indented as a list item, cut around its name and count."""
    out: dict[tuple[object, ...], tuple[str, str, str]] = {}
    for row in rows:
        key = row.content_key
        if key in out:
            continue
        data = jsonable(row.to_dict()) | {"name": _MARKS["name"], "count": _MARKS["count"]}
        text = "\n".join(_INDENT + line for line in _dumps(data).split("\n"))
        before, rest = text.split(_NAME, 1)
        middle, after = rest.split(_COUNT, 1)
        out[key] = (before, middle, after)
    return out


def _pieces(
    head: str,
    tail: str,
    rows: Sequence[LayerRow],
    templates: dict[tuple[object, ...], tuple[str, str, str]],
) -> Iterator[str]:
    if not rows:
        yield head + "[]" + tail + "\n"
        return
    yield head + "[\n"
    for start in range(0, len(rows), _ROWS_PER_PIECE):
        texts = []
        for row in rows[start : start + _ROWS_PER_PIECE]:
            before, middle, after = templates[row.content_key]
            texts.append(before + json.dumps(row.name) + middle + json.dumps(row.count) + after)
        yield (",\n" if start else "") + ",\n".join(texts)
    yield "\n  ]" + tail + "\n"
