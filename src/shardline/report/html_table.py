"""Results as HTML tables for Jupyter (`report.notebook.to_html`). Every value is escaped."""

from __future__ import annotations

import html
import math
from typing import Any

from shardline.basics.units import fmt_bytes, fmt_flops, fmt_rate, fmt_time
from shardline.basics.values import JSONDict
from shardline.report.frames import to_records

__all__ = ["result_table_html", "records_table_html", "MAX_HTML_ROWS"]

MAX_HTML_ROWS = 200  # a vectorized result shows its first rows; to_pandas(result) has them all

_STYLE = (
    "<style>.shardline-table td,.shardline-table th{text-align:right;padding:2px 8px}"
    ".shardline-table td.k,.shardline-table th.k{text-align:left}"
    ".shardline-table .compute{background:#c6e0b4}.shardline-table .memory{background:#f8cbad}"
    "</style>"
)


def _show(key: str, value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and not math.isfinite(value):
        return ""
    if isinstance(value, bool | str):
        return str(value)
    if key.endswith("_s") and not key.endswith("_per_s"):
        return f"{fmt_time(value)} ({value:.6g} s)"
    if key == "flops":
        return f"{int(value):,} ({fmt_flops(value)})"
    if key.startswith("bytes_"):
        return f"{int(value):,} ({fmt_bytes(value)})"
    if key == "flops_per_s":
        return fmt_rate(value)
    if key == "mem_bytes_per_s":
        return fmt_rate(value, "B/s", digits=4)
    if key.endswith("_flop_per_byte"):
        return f"{value:,.4g} FLOP/B"
    if isinstance(value, float) and value.is_integer():
        return f"{int(value):,}"
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def _cell(key: str, value: object, tag: str = "td") -> str:
    cls = html.escape(str(value)) if key in ("bound", "predicted_bound") else ""
    cls = f"{cls} k" if not isinstance(value, int | float) or isinstance(value, bool) else cls
    return f'<{tag} class="{cls.strip()}">{html.escape(_show(key, value))}</{tag}>'


def result_table_html(result: JSONDict) -> str:
    """A key/value table for one multiply, or a row per element of a vectorized result."""
    records = to_records(result)
    if len(records) == 1:
        rows = "".join(
            f'<tr><th class="k">{html.escape(k)}</th>{_cell(k, v)}</tr>'
            for k, v in records[0].items()
            if v is not None
        )
        return f'{_STYLE}<table class="shardline-table">{rows}</table>'
    return records_table_html(records)


def records_table_html(records: list[JSONDict]) -> str:
    """A table with a row per record (the first MAX_HTML_ROWS) and a column per key."""
    if not records:
        return f'{_STYLE}<table class="shardline-table"></table><p>no rows</p>'
    keys = [k for k in records[0] if any(r[k] is not None for r in records)]
    head = "".join(f'<th class="k">{html.escape(k)}</th>' for k in keys)
    body = "".join(
        "<tr>" + "".join(_cell(k, r[k]) for k in keys) + "</tr>" for r in records[:MAX_HTML_ROWS]
    )
    more = len(records) - MAX_HTML_ROWS
    note = (
        f"<p>{more:,} more rows not shown; <code>to_pandas(result)</code> has all "
        f"{len(records):,}.</p>"
        if more > 0
        else ""
    )
    return f'{_STYLE}<table class="shardline-table"><tr>{head}</tr>{body}</table>{note}'
