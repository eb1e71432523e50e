"""The roofline of every row of a sheet, vectorized, and the table written back out.

Rows are grouped by their dtype combination (usually one group) and each group is one vectorized
`shardline.roofline.matmul` call over numpy arrays of m, k, n: no per-row loop. Bad rows (see
`ShapeTable.problems`) keep their input cells and get empty results plus an `error` message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip
from shardline.io.sheets import Column, OutputTable, RowProblem, ShapeTable
from shardline.options import RateOverrides

__all__ = ["DtypeChoice", "SheetResult", "RESULT_COLUMNS", "roofline_rows", "output_table"]

# Result columns, units in the names; `predicted_s` joins when the prediction model fills it.
RESULT_COLUMNS: tuple[tuple[str, str], ...] = (
    ("flops", "int"),
    ("bytes", "int"),
    ("intensity_flop_per_byte", "float"),
    ("ridge_flop_per_byte", "float"),
    ("bound", "bound"),
    ("t_compute_s", "time"),
    ("t_memory_s", "time"),
    ("t_lower_s", "time"),
    ("t_upper_s", "time"),
    ("predicted_s", "time"),
    ("critical_m", "int"),
)


@dataclass(frozen=True)
class DtypeChoice:
    """Storage dtypes for A, B, C and the compute dtype; None = the row's dtype cell or `dtype`."""

    dtype: str = "bf16"
    a_dtype: str | None = None
    b_dtype: str | None = None
    out_dtype: str | None = None
    compute_dtype: str | None = None


@dataclass(frozen=True)
class SheetResult:
    table: ShapeTable
    chip: Chip
    columns: dict[str, np.ndarray]  # result name -> one value per sheet row (NaN / "" on bad rows)
    ok: np.ndarray  # rows computed
    problems: tuple[RowProblem, ...]  # the sheet's bad cells and rows the chip cannot compute
    summary: dict[str, Any] = field(default_factory=dict)
    choice: DtypeChoice = field(default_factory=DtypeChoice)
    flops_per_s: float | None = None  # the user's overrides, as passed
    mem_bytes_per_s: float | None = None

    @property
    def has_prediction(self) -> bool:
        return "predicted_s" in self.columns

    def problems_text(self, limit: int = 3) -> str:
        shown = "; ".join(p.text() for p in self.problems[:limit])
        more = len(self.problems) - limit
        return shown + (f"; and {more} more" if more > 0 else "")

    def to_records(self) -> list[dict[str, Any]]:
        """One dict per sheet row: every input column, then the results (the JSON rows)."""
        from shardline.io.sheets import table_payload

        rows: list[dict[str, Any]] = table_payload(output_table(self))["rows"]
        return rows

    def _repr_html_(self) -> str:
        """The rows as an HTML table in Jupyter (every value escaped)."""
        from shardline.report.html_table import records_table_html

        return records_table_html(self.to_records())

    def to_pandas(self) -> Any:
        """The rows as a pandas DataFrame (needs pandas)."""
        from shardline.report.frames import records_to_dataframe

        return records_to_dataframe(self.to_records())


def _group_keys(table: ShapeTable, choice: DtypeChoice) -> np.ndarray:
    """The default storage dtype of each row: its dtype cell, else `choice.dtype`."""
    default = choice.dtype
    if table.dtype is None:
        return np.full(len(table), default, dtype=object)
    return np.where(table.dtype == "", default, table.dtype).astype(object)


def roofline_rows(
    table: ShapeTable,
    hw: str | Chip,
    choice: DtypeChoice | None = None,
    *,
    flops_per_s: float | None = None,
    mem_bytes_per_s: float | None = None,
    accumulate: bool = False,
    predict: bool = True,
) -> SheetResult:
    """Counts, bound and times for every good row of `table` on chip `hw`."""
    from shardline.predict import with_prediction
    from shardline.roofline import matmul

    choice = choice or DtypeChoice()
    chip = resolve_chip(hw)
    size = len(table)
    ok = table.ok.copy()
    problems = list(table.problems)
    floats = {name: np.full(size, np.nan) for name, kind in RESULT_COLUMNS if kind != "bound"}
    bound = np.full(size, "", dtype=object)
    have_prediction = False
    keys = _group_keys(table, choice)
    dtype_header = table.roles.get("dtype", "dtype")
    for key in dict.fromkeys(keys[ok].tolist()):
        rows = np.flatnonzero(ok & (keys == key))
        try:
            result = matmul(
                table.m[rows],
                table.k[rows],
                table.n[rows],
                hw=chip,
                dtype=key,
                a_dtype=choice.a_dtype,
                b_dtype=choice.b_dtype,
                out_dtype=choice.out_dtype,
                compute_dtype=choice.compute_dtype,
                rates=RateOverrides(flops_per_s, mem_bytes_per_s),
                accumulate=accumulate,
            )
        except InputError as exc:
            if table.dtype is None or not np.all(table.dtype[rows] == key):
                raise  # not about a dtype cell: the whole sheet cannot be computed
            ok[rows] = False
            problems += [
                RowProblem(int(table.row_numbers[i]), dtype_header, str(exc)) for i in rows
            ]
            continue
        if predict:
            result = with_prediction(result)
        values = {
            "flops": result.flops,
            "bytes": result.bytes["total"],
            "intensity_flop_per_byte": result.intensity_flop_per_byte,
            "ridge_flop_per_byte": result.ridge_flop_per_byte,
            "t_compute_s": result.t_compute_s,
            "t_memory_s": result.t_memory_s,
            "t_lower_s": result.t_lower_s,
            "t_upper_s": result.t_upper_s,
            "critical_m": result.critical_m,
        }
        if result.predicted_s is not None:
            values["predicted_s"] = result.predicted_s
            have_prediction = True
        for name, value in values.items():
            floats[name][rows] = np.broadcast_to(np.asarray(value, dtype=np.float64), rows.shape)
        bound[rows] = np.broadcast_to(np.asarray(result.bound, dtype=object), rows.shape)
    if not have_prediction:
        floats.pop("predicted_s")
    columns: dict[str, np.ndarray] = {}
    for name, kind in RESULT_COLUMNS:
        if kind == "bound":
            columns[name] = bound
        elif name in floats:
            columns[name] = floats[name]
    problems.sort(key=lambda p: p.row)
    summary = _summary(table, chip, columns, ok, choice, flops_per_s, mem_bytes_per_s)
    return SheetResult(
        table=table,
        chip=chip,
        columns=columns,
        ok=ok,
        problems=tuple(problems),
        summary=summary,
        choice=choice,
        flops_per_s=flops_per_s,
        mem_bytes_per_s=mem_bytes_per_s,
    )


def _summary(
    table: ShapeTable,
    chip: Chip,
    columns: dict[str, np.ndarray],
    ok: np.ndarray,
    choice: DtypeChoice,
    flops_per_s: float | None,
    mem_bytes_per_s: float | None,
) -> dict[str, Any]:
    """Totals over `count` (each row's cost times how often it runs)."""
    count = table.count.astype(np.float64)
    weight = np.where(ok, count, 0.0)
    totals: dict[str, float] = {}
    for name in (
        "flops",
        "bytes",
        "t_compute_s",
        "t_memory_s",
        "t_lower_s",
        "t_upper_s",
        "predicted_s",
    ):
        if name in columns:
            totals[name] = float(np.sum(weight * np.nan_to_num(columns[name])))
    bound = columns["bound"]
    memory_time = float(
        np.sum(np.where(bound == "memory", weight * np.nan_to_num(columns["t_lower_s"]), 0.0))
    )
    summary: dict[str, Any] = {
        "chip": chip.name,
        "mem_bytes_per_s": float(mem_bytes_per_s or chip.mem_bytes_per_s),
        "dtype": choice.dtype,
        "rows": len(table),
        "rows_computed": int(np.count_nonzero(ok)),
        "rows_bad": int(np.count_nonzero(~ok)),
        "rows_compute_bound": int(np.count_nonzero(bound == "compute")),
        "rows_memory_bound": int(np.count_nonzero(bound == "memory")),
        "count_total": int(np.sum(np.where(ok, table.count, 0))),
        "totals": totals,
        "memory_bound_time_fraction": (
            memory_time / totals["t_lower_s"] if totals.get("t_lower_s") else 0.0
        ),
    }
    if flops_per_s is not None:
        summary["flops_per_s"] = float(flops_per_s)
    return summary


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
