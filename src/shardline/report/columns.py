"""Plain-text columns: the catalog tables of `hw list`, `system list` and `model list`."""

from __future__ import annotations

from collections.abc import Container, Sequence

__all__ = ["aligned"]


def aligned(rows: Sequence[Sequence[str]], right: Container[int] = ()) -> str:
    """One line per row, its cells padded to the widest of their column and joined by two spaces;
    columns in `right` align right, the others left; no trailing spaces."""
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            c.rjust(w) if i in right else c.ljust(w)
            for i, (c, w) in enumerate(zip(row, widths, strict=True))
        ]
        lines.append("  ".join(cells).rstrip() + "\n")
    return "".join(lines)
