"""A serving trace: a CSV of `arrival_s,input_tokens,output_tokens` rows (a header line with
those names; arrivals in seconds, any order)."""

from __future__ import annotations

import csv
import io
import math
from pathlib import Path

import numpy as np

from shardline.errors import InputError
from shardline.io.inputs import read_input_bytes
from shardline.serving.config import MAX_TOKENS

__all__ = ["read_trace", "MAX_TRACE_BYTES", "MAX_TRACE_ROWS"]

COLUMNS = ("arrival_s", "input_tokens", "output_tokens")
MAX_TRACE_BYTES = 200_000_000  # a million requests is about 20 MB
MAX_TRACE_ROWS = 1_000_000


def _row(row: dict[str | None, str], line: int, path: Path) -> tuple[float, float, float]:
    if None in row:  # DictReader files the cells past the header under None
        raise InputError(f"{path}:{line}: more cells than the header's {len(COLUMNS)} columns")
    try:
        a, i, o = (float(row[c]) for c in COLUMNS)
    except (KeyError, TypeError, ValueError):
        raise InputError(f"{path}:{line}: need numbers in {', '.join(COLUMNS)}") from None
    if not (math.isfinite(a) and a >= 0 and i >= 1 and o >= 1 and math.isfinite(i + o)):
        raise InputError(f"{path}:{line}: arrival_s >= 0 and token counts >= 1 required")
    if max(i, o) > MAX_TOKENS:  # the limit of --in and --out
        raise InputError(
            f"{path}:{line}: {max(i, o):.3g} tokens is more than the limit of {MAX_TOKENS:,}"
        )
    return a, i, o


def read_trace(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival_s sorted, input_tokens, output_tokens) of the trace file."""
    p = Path(path)
    raw = read_input_bytes(p, "trace file", MAX_TRACE_BYTES)  # a regular file, not too large
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{p}: not UTF-8 text (byte {exc.start:,})") from None
    if "\0" in text:
        raise InputError(f"{p}: a NUL byte at character {text.index(chr(0)):,}")
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(f"{p}: the header needs {', '.join(COLUMNS)} (missing {missing})")
        rows = []
        for n, r in enumerate(reader):
            if n >= MAX_TRACE_ROWS:
                raise InputError(f"{p}: more than {MAX_TRACE_ROWS:,} requests (the limit)")
            rows.append(_row(r, n + 2, p))
    except csv.Error as exc:
        raise InputError(f"{p}: not a readable CSV trace: {exc}") from None
    if len(rows) < 2:
        raise InputError(f"{p}: a trace needs at least two requests")
    data = np.array(sorted(rows))
    return data[:, 0], data[:, 1], data[:, 2]
