"""The roofline of every row of a sheet, vectorized (pure: no files, no printing).

`ShapeTable` holds the parsed (m, k, n) rows of a sheet (`shardline.io.sheets.read_shape_rows`
reads one); `roofline_rows` prices them. Rows are grouped by their dtype combination (usually one
group) and each group is one vectorized `shardline.ops.roofline.matmul` call over numpy arrays of
m, k, n: no per-row loop. Bad rows (see `ShapeTable.problems`) keep their input cells and get
empty results plus an error message.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardline.basics.options import RateOverrides
from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip
from shardline.ops.predict import with_prediction
from shardline.ops.roofline import RooflineResult, matmul

__all__ = [
    "RowProblem",
    "ShapeTable",
    "DtypeChoice",
    "SheetResult",
    "RESULT_COLUMNS",
    "roofline_rows",
]

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
# Totals over `count` in the summary.
_TOTALLED = ("flops", "bytes", "t_compute_s", "t_memory_s", "t_lower_s", "t_upper_s", "predicted_s")


@dataclass(frozen=True)
class RowProblem:
    """A bad cell: its sheet row number (as Excel shows it), its column header and what is wrong."""

    row: int
    column: str
    message: str

    def text(self) -> str:
        return f"row {self.row}, column {self.column!r}: {self.message}"


@dataclass(frozen=True)
class ShapeTable:
    """The (m, k, n) rows of a sheet. Arrays are aligned: entry i is data row i, found at sheet row
    `row_numbers[i]`. Bad rows stay in (so the output keeps them) with `ok[i]` False and zeros in
    m, k, n.
    """

    path: str
    sheet: str | None
    header_row: int
    headers: tuple[str, ...]  # unique, non-empty; blank headers become "column C" and so on
    columns: dict[str, list[object]]  # the original cells of every data row, per header
    roles: dict[str, str]  # role ("m", "k", "n", "count", "dtype", "name") -> header
    row_numbers: np.ndarray
    m: np.ndarray
    k: np.ndarray
    n: np.ndarray
    count: np.ndarray  # 1 where the sheet has no count column or the cell is blank
    dtype: np.ndarray | None  # canonical dtype names; "" where blank; None without a dtype column
    names: list[str] | None  # the name column as text; None without one
    ok: np.ndarray
    problems: tuple[RowProblem, ...] = field(default=())

    def __len__(self) -> int:
        return len(self.row_numbers)

    @property
    def n_bad(self) -> int:
        return int(np.count_nonzero(~self.ok))

    def labels(self) -> list[str]:
        """A label per row: its name, or "row N" where the sheet has none."""
        if self.names is not None:
            return [
                name or f"row {r}"
                for name, r in zip(self.names, self.row_numbers.tolist(), strict=True)
            ]
        return [f"row {r}" for r in self.row_numbers.tolist()]

    def problems_text(self, limit: int = 3) -> str:
        shown = "; ".join(p.text() for p in self.problems[:limit])
        more = len(self.problems) - limit
        return shown + (f"; and {more} more" if more > 0 else "")

    def require_ok(self) -> ShapeTable:
        """Raise InputError naming the bad cells, for callers that cannot use partial tables."""
        if self.problems:
            raise InputError(f"{self.path}: {self.problems_text()}")
        return self


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
    """The results of a sheet. Its notebook views (an HTML table, `to_pandas`) are functions of
    `shardline.report.notebook`."""

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

    @property
    def rates(self) -> RateOverrides:
        return RateOverrides(self.flops_per_s, self.mem_bytes_per_s)

    def problems_text(self, limit: int = 3) -> str:
        shown = "; ".join(p.text() for p in self.problems[:limit])
        more = len(self.problems) - limit
        return shown + (f"; and {more} more" if more > 0 else "")


def _group_keys(table: ShapeTable, choice: DtypeChoice) -> np.ndarray:
    """The default storage dtype of each row: its dtype cell, else `choice.dtype`."""
    default = choice.dtype
    if table.dtype is None:
        return np.full(len(table), default, dtype=object)
    return np.where(table.dtype == "", default, table.dtype).astype(object)


def _result_values(result: RooflineResult) -> dict[str, Any]:
    """The numeric result columns of one group's (vectorized) result."""
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
    return values


@dataclass
class _Filling:
    """The result columns as they fill, group by group."""

    floats: dict[str, np.ndarray]
    bound: np.ndarray
    ok: np.ndarray
    problems: list[RowProblem]
    have_prediction: bool = False

    @classmethod
    def empty(cls, table: ShapeTable) -> _Filling:
        size = len(table)
        floats = {name: np.full(size, np.nan) for name, kind in RESULT_COLUMNS if kind != "bound"}
        bound = np.full(size, "", dtype=object)
        return cls(floats, bound, table.ok.copy(), list(table.problems))

    def put(self, rows: np.ndarray, result: RooflineResult) -> None:
        values = _result_values(result)
        self.have_prediction |= "predicted_s" in values
        for name, value in values.items():
            self.floats[name][rows] = np.broadcast_to(
                np.asarray(value, dtype=np.float64), rows.shape
            )
        self.bound[rows] = np.broadcast_to(np.asarray(result.bound, dtype=object), rows.shape)

    def columns(self) -> dict[str, np.ndarray]:
        if not self.have_prediction:
            self.floats.pop("predicted_s")
        columns: dict[str, np.ndarray] = {}
        for name, kind in RESULT_COLUMNS:
            if kind == "bound":
                columns[name] = self.bound
            elif name in self.floats:
                columns[name] = self.floats[name]
        return columns


def _group_matmul(
    table: ShapeTable,
    rows: np.ndarray,
    chip: Chip,
    dtype: str,
    choice: DtypeChoice,
    rates: RateOverrides,
    accumulate: bool,
) -> RooflineResult:
    return matmul(
        table.m[rows],
        table.k[rows],
        table.n[rows],
        hw=chip,
        dtype=dtype,
        a_dtype=choice.a_dtype,
        b_dtype=choice.b_dtype,
        out_dtype=choice.out_dtype,
        compute_dtype=choice.compute_dtype,
        rates=rates,
        accumulate=accumulate,
    )


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
    choice = choice or DtypeChoice()
    rates = RateOverrides(flops_per_s, mem_bytes_per_s)
    chip = resolve_chip(hw)
    fill = _Filling.empty(table)
    keys = _group_keys(table, choice)
    dtype_header = table.roles.get("dtype", "dtype")
    for key in dict.fromkeys(keys[fill.ok].tolist()):
        rows = np.flatnonzero(fill.ok & (keys == key))
        try:
            result = _group_matmul(table, rows, chip, key, choice, rates, accumulate)
        except InputError as exc:
            if table.dtype is None or not np.all(table.dtype[rows] == key):
                raise  # not about a dtype cell: the whole sheet cannot be computed
            fill.ok[rows] = False
            fill.problems += [
                RowProblem(int(table.row_numbers[i]), dtype_header, str(exc)) for i in rows
            ]
            continue
        fill.put(rows, with_prediction(result) if predict else result)
    columns = fill.columns()
    fill.problems.sort(key=lambda p: p.row)
    return SheetResult(
        table=table,
        chip=chip,
        columns=columns,
        ok=fill.ok,
        problems=tuple(fill.problems),
        summary=_summary(table, chip, columns, fill.ok, choice, rates),
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
    rates: RateOverrides,
) -> dict[str, object]:
    """Totals over `count` (each row's cost times how often it runs)."""
    count = table.count.astype(np.float64)
    weight = np.where(ok, count, 0.0)
    totals: dict[str, float] = {}
    for name in _TOTALLED:
        if name in columns:
            totals[name] = float(np.sum(weight * np.nan_to_num(columns[name])))
    bound = columns["bound"]
    memory_time = float(
        np.sum(np.where(bound == "memory", weight * np.nan_to_num(columns["t_lower_s"]), 0.0))
    )
    summary: dict[str, object] = {
        "chip": chip.name,
        "mem_bytes_per_s": float(rates.mem_bytes_per_s or chip.mem_bytes_per_s),
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
    if rates.flops_per_s is not None:
        summary["flops_per_s"] = float(rates.flops_per_s)
    return summary
