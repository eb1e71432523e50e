"""A sheet's results as a table to write out (`output_table`) and as JSON records.

The computation lives in the core (`shardline.answers.sheet_model`); its names are importable from
here too (`roofline_rows`, `DtypeChoice`, `SheetResult`), as the docs show.
"""

from __future__ import annotations

from shardline.answers.sheet_model import RESULT_COLUMNS, DtypeChoice, SheetResult, roofline_rows
from shardline.io.tables import Column, OutputTable, table_payload

__all__ = [
    "DtypeChoice",
    "SheetResult",
    "RESULT_COLUMNS",
    "roofline_rows",
    "output_table",
    "sheet_records",
]


def sheet_records(result: SheetResult) -> list[dict[str, object]]:
    """One dict per sheet row: every input column, then the results (the JSON rows)."""
    rows: list[dict[str, object]] = table_payload(output_table(result))["rows"]
    return rows


def output_table(result: SheetResult, title: str = "") -> OutputTable:
    """Every input column (cells as read), then the results, then `error` when any row is bad."""
    table = result.table
    names = set(result.columns) | {"error"}
    cols: list[Column] = []
    parsed = {table.roles[r]: getattr(table, r) for r in ("m", "k", "n") if r in table.roles}
    if "count" in table.roles:
        parsed[table.roles["count"]] = table.count
    bad_rows = {p.row for p in table.problems}
    for header in table.headers:
        shown = f"{header} (input)" if header in names else header
        cells = table.columns[header]
        if header in parsed:  # sizes as numbers ("4,096" in a CSV becomes 4096), bad cells as read
            sizes = parsed[header].tolist()
            cells = [
                cell if (int(row) in bad_rows or cell is None or cell == "") else size
                for cell, size, row in zip(cells, sizes, table.row_numbers.tolist(), strict=True)
            ]
        cols.append(Column(shown, cells, "text"))
    kinds = dict(RESULT_COLUMNS)
    for name, values in result.columns.items():
        cols.append(Column(name, values, kinds[name]))
    if result.problems:
        messages: dict[int, list[str]] = {}
        for p in result.problems:
            messages.setdefault(p.row, []).append(f"column {p.column!r}: {p.message}")
        errors = ["; ".join(messages.get(int(r), [])) for r in table.row_numbers.tolist()]
        cols.append(Column("error", errors, "text"))
    return OutputTable(columns=cols, summary=result.summary, title=title)
