"""A serving trace: a CSV of `arrival_s,input_tokens,output_tokens` rows (a header line with
those names; arrivals in seconds, any order)."""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np

from shardline.errors import InputError

__all__ = ["read_trace"]

COLUMNS = ("arrival_s", "input_tokens", "output_tokens")


def _row(row: dict[str, str], line: int, path: Path) -> tuple[float, float, float]:
    try:
        a, i, o = (float(row[c]) for c in COLUMNS)
    except (KeyError, TypeError, ValueError):
        raise InputError(f"{path}:{line}: need numbers in {', '.join(COLUMNS)}") from None
    if not (math.isfinite(a) and a >= 0 and i >= 1 and o >= 1 and math.isfinite(i + o)):
        raise InputError(f"{path}:{line}: arrival_s >= 0 and token counts >= 1 required")
    return a, i, o


def read_trace(path: str | Path) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(arrival_s sorted, input_tokens, output_tokens) of the trace file."""
    p = Path(path)
    if not p.is_file():
        raise InputError(f"{p}: no such trace file")
    with p.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise InputError(f"{p}: the header needs {', '.join(COLUMNS)} (missing {missing})")
        rows = [_row(r, n + 2, p) for n, r in enumerate(reader)]
    if len(rows) < 2:
        raise InputError(f"{p}: a trace needs at least two requests")
    data = np.array(sorted(rows))
    return data[:, 0], data[:, 1], data[:, 2]
