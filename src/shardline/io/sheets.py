"""Spreadsheets in: read (m, k, n) rows from .csv/.xlsx (writing tables: `shardline.io.tables`).

Reading (`read_shape_rows`) finds the M, K, N columns by header name (case-insensitive; see
`ACCEPTED`), plus optional count, dtype and name columns, keeps every original column, and parses
the sizes into numpy integer arrays. A bad cell (text, negative, fractional) does not stop the read:
the row is marked bad (`ShapeTable.ok`) and described in `ShapeTable.problems` with its sheet row
number and column header, so the caller can compute the other rows and report the bad ones.

The writing names (`check_output_path`, `atomic_write`, `write_table`, ...) are importable from
here too, as before.
"""

from __future__ import annotations

import csv
import io
import math
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from shardline.answers.sheet_model import RowProblem, ShapeTable
from shardline.basics.dtypes import canonical_dtype
from shardline.basics.units import parse_count
from shardline.errors import InputError
from shardline.io.inputs import read_input_bytes, read_input_head, regular_file_size
from shardline.io.sheet_limits import (
    MAX_SHEET_BYTES,
    MAX_SHEET_COLUMNS,
    MAX_SHEET_ROWS,
    bounded_rows,
    check_xlsx_parts,
)
from shardline.io.tables import (
    BOUND_FILLS,
    OUTPUT_SUFFIXES,
    XLSX_FORMATS,
    Column,
    OutputTable,
    atomic_write,
    check_output_path,
    json_cell,
    table_payload,
    write_table,
)
from shardline.io.xlsx_writer import column_letter
from shardline.ops.einsum import MAX_DIM

__all__ = [
    "ACCEPTED",
    "RowProblem",
    "ShapeTable",
    "read_shape_rows",
    "read_rows",
    "INPUT_SUFFIXES",
    "OUTPUT_SUFFIXES",
    "check_output_path",
    "atomic_write",
    "Column",
    "OutputTable",
    "write_table",
    "table_payload",
    "json_cell",
    "XLSX_FORMATS",
    "BOUND_FILLS",
]

INPUT_SUFFIXES = (".csv", ".tsv", ".xlsx", ".xlsm")

# Header names accepted for each role, compared after `_norm` (lower case, only letters and digits,
# a trailing "(...)" note dropped: "M (rows)" -> "m").
ACCEPTED: dict[str, tuple[str, ...]] = {
    "m": ("m", "rows", "m_rows", "m_dim", "dim_m", "size_m", "batch", "tokens"),
    "k": ("k", "inner", "contraction", "reduction", "k_dim", "dim_k", "size_k", "depth"),
    "n": ("n", "cols", "columns", "n_cols", "n_dim", "dim_n", "size_n", "out_features"),
    "count": ("count", "repeat", "repeats", "times", "multiplicity", "calls", "occurrences", "qty"),
    "dtype": ("dtype", "precision", "datatype", "data_type"),
    "name": ("name", "label", "op", "layer", "operation", "description", "id"),
}
REQUIRED_ROLES = ("m", "k", "n")

# How many leading rows to search for the header row (a title or notes may sit above it).
HEADER_SEARCH_ROWS = 50

# An .xlsx encrypted with a password is an OLE compound file, not a zip (MS-OFFCRYPTO, section 2.3);
# so is an old binary .xls renamed to .xlsx.
_OLE_MAGIC = b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1"
_ZIP_MAGIC = b"PK\x03\x04"


def _norm(header: str) -> str:
    text = re.sub(r"\s*[(\[].*?[)\]]\s*$", "", header.strip().lower())
    return re.sub(r"[^a-z0-9]", "", text)


_LOOKUP: dict[str, str] = {
    _norm(alias): role for role, aliases in ACCEPTED.items() for alias in aliases
}


# ----------------------------------------------------------------------------------------------
# Raw reading: rows of cell values with their sheet row numbers


def _check_input_path(path: Path) -> None:
    if path.suffix.lower() == ".xls":
        raise InputError(
            f"{path}: the old binary .xls format is not supported; save it as .xlsx or .csv"
        )
    regular_file_size(path, "file")  # exists, readable kind: never a FIFO, a device, a directory
    if path.suffix.lower() not in INPUT_SUFFIXES:
        raise InputError(
            f"{path}: unsupported sheet type {path.suffix or '(none)'!r}; "
            f"expected one of {', '.join(INPUT_SUFFIXES)}"
        )


def _csv_rows(path: Path) -> Iterator[tuple[int, list[Any]]]:
    raw = read_input_bytes(path, "sheet", MAX_SHEET_BYTES)
    nul = raw.find(b"\x00")
    if raw.startswith((_ZIP_MAGIC, _OLE_MAGIC)) or nul >= 0:
        where = f" (a NUL byte at offset {nul:,})" if nul >= 0 else ""
        raise InputError(f"cannot read {path}: it is a binary file, not CSV text{where}")
    try:
        text = raw.decode("utf-8-sig")  # Excel writes a byte-order mark on "CSV UTF-8"
    except UnicodeDecodeError as exc:
        raise InputError(
            f"cannot read {path}: not UTF-8 text (byte {exc.start}); save it as 'CSV UTF-8'"
        ) from None
    delimiter = "\t" if path.suffix.lower() == ".tsv" else ","
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    try:
        for row in reader:
            if len(row) > MAX_SHEET_COLUMNS:
                raise InputError(
                    f"{path}: line {reader.line_num} has {len(row):,} cells; at most "
                    f"{MAX_SHEET_COLUMNS:,} columns are read"
                )
            if reader.line_num > MAX_SHEET_ROWS:
                raise InputError(
                    f"{path}: more than {MAX_SHEET_ROWS:,} lines; at most that many are read"
                )
            yield reader.line_num, row
    except csv.Error as exc:
        raise InputError(
            f"cannot read {path}: malformed CSV near line {reader.line_num}: {exc}"
        ) from None


def _open_workbook(path: Path) -> Any:
    head = read_input_head(path, 8, "sheet")
    if head.startswith(_OLE_MAGIC):
        raise InputError(
            f"cannot read {path}: the workbook is password-protected (encrypted) or an "
            "old binary .xls; remove the password or save it as .xlsx or .csv"
        )
    if not head.startswith(_ZIP_MAGIC):
        raise InputError(f"cannot read {path}: not a valid .xlsx file (corrupt or not a workbook)")
    from openpyxl import load_workbook

    check_xlsx_parts(path)
    try:
        return load_workbook(path, read_only=True, data_only=True)
    except Exception as exc:  # a corrupt zip or XML raises many kinds; all mean the same to a user
        raise InputError(
            f"cannot read {path}: corrupt .xlsx ({type(exc).__name__}: {exc})"
        ) from None


def _xlsx_rows(path: Path, sheet: str | None) -> tuple[str, list[tuple[int, list[object]]]]:
    wb = _open_workbook(path)
    try:
        if sheet is None:
            ws = wb.worksheets[0]
        elif sheet in wb.sheetnames:
            ws = wb[sheet]
        else:
            raise InputError(f"{path} has no sheet {sheet!r}; sheets: {', '.join(wb.sheetnames)}")
        if hasattr(ws, "reset_dimensions"):
            ws.reset_dimensions()  # some writers store a wrong used range; read every row present
        try:
            rows = bounded_rows(path, ws.iter_rows(values_only=True))
        except InputError:
            raise
        except Exception as exc:
            raise InputError(
                f"cannot read {path}: corrupt .xlsx ({type(exc).__name__}: {exc})"
            ) from None
        return ws.title, rows
    finally:
        wb.close()


def read_rows(
    path: str | Path, sheet: str | None = None
) -> tuple[str | None, list[tuple[int, list[object]]]]:
    """Every row of a .csv/.tsv/.xlsx as (sheet row number, cells), and the .xlsx sheet name."""
    p = Path(path)
    _check_input_path(p)
    if p.suffix.lower() in (".xlsx", ".xlsm"):
        return _xlsx_rows(p, sheet)
    if sheet is not None:
        raise InputError(f"--sheet applies to .xlsx files, not {p.name}")
    return None, list(_csv_rows(p))


# ----------------------------------------------------------------------------------------------
# Header matching


def _blank(value: object) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _header_text(value: object) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def _roles_of(headers: Sequence[str]) -> dict[str, list[tuple[int, int]]]:
    """role -> [(alias rank, column index)] for every header that names a role."""
    found: dict[str, list[tuple[int, int]]] = {}
    for i, header in enumerate(headers):
        key = _norm(header)
        role = _LOOKUP.get(key)
        if role:
            rank = [_norm(a) for a in ACCEPTED[role]].index(key)
            found.setdefault(role, []).append((rank, i))
    return found


def accepted_text() -> str:
    return "; ".join(
        f"{role.upper() if role in REQUIRED_ROLES else role}: {', '.join(names)}"
        for role, names in ACCEPTED.items()
    )


def _find_header(
    path: Path, rows: list[tuple[int, list[object]]]
) -> tuple[int, list[str], dict[str, int]]:
    """The header row: the first of the leading rows that names M, K and N columns."""
    first: list[str] | None = None
    seen = 0
    for position, (_, cells) in enumerate(rows):
        if all(_blank(c) for c in cells):
            continue
        seen += 1
        headers = [_header_text(c) for c in cells]
        if first is None:
            first = headers
        found = _roles_of(headers)
        if all(role in found for role in REQUIRED_ROLES):
            roles: dict[str, int] = {}
            for role, where in found.items():
                best = min(rank for rank, _ in where)
                tied = [i for rank, i in where if rank == best]
                if len(tied) > 1:  # e.g. "M" and "m": no way to tell which one is meant
                    names = ", ".join(repr(headers[i]) for i in tied)
                    label = role.upper() if role in REQUIRED_ROLES else role
                    raise InputError(
                        f"{path}: several columns could be {label} ({names}); rename all but one"
                    )
                roles[role] = tied[0]
            return position, headers, roles
        if seen >= HEADER_SEARCH_ROWS:
            break
    if first is None:
        raise InputError(f"{path}: the sheet is empty (no header row with M, K, N columns)")
    shown = ", ".join(repr(h) for h in first if h) or "(none)"
    raise InputError(
        f"{path}: no recognizable M, K, N columns; headers found: {shown}; "
        f"names accepted (any case): {accepted_text()}"
    )


def _unique_headers(headers: list[str], width: int) -> list[str]:
    out: list[str] = []
    for i in range(width):
        base = headers[i] if i < len(headers) and headers[i] else f"column {column_letter(i)}"
        name, suffix = base, 2
        while name in out:
            name, suffix = f"{base} ({suffix})", suffix + 1
        out.append(name)
    return out


# ----------------------------------------------------------------------------------------------
# Cell parsing


class _CellError(Exception):
    pass


def _size(value: Any, what: str, *, minimum: int = 1) -> int:
    """A positive (counts: non-negative) integer cell: 4096, 4096.0, "4,096", "4k", "4Ki"."""
    kind = type(value)
    if kind is int:
        number = value
    elif kind is float:
        if not math.isfinite(value) or not value.is_integer():
            raise _CellError(f"{value!r} is not a whole number; {what} must be an integer")
        number = int(value)
    elif kind is str:
        text = value.strip().replace(",", "")
        negative = text.startswith("-")
        try:
            number = parse_count(text.lstrip("-+"), what)
        except InputError:
            try:
                fraction = float(text)
            except ValueError:
                fraction = math.nan
            kind_of = "not a whole number" if math.isfinite(fraction) else "not a number"
            raise _CellError(
                f"{value!r} is {kind_of}; {what} must be "
                f"{'a non-negative' if minimum == 0 else 'a positive'} integer"
            ) from None
        number = -number if negative else number
    elif isinstance(value, int | float | np.number) and not isinstance(value, bool):
        return _size(
            float(value) if isinstance(value, float | np.floating) else int(value),
            what,
            minimum=minimum,
        )
    else:
        raise _CellError(f"{value!r} is not a number; {what} must be an integer")
    if number < minimum:
        sign = "negative" if number < 0 else "zero"
        raise _CellError(
            f"{value!r} is {sign}; {what} must be "
            f"{'non-negative' if minimum == 0 else 'a positive integer'}"
        )
    if number > MAX_DIM:
        raise _CellError(f"{value!r} is absurdly large (limit {MAX_DIM:,})")
    return number


def _fast_sizes(values: list[object], minimum: int) -> np.ndarray | None:
    """The whole column at once when every cell is a clean integer in range (the common case);
    None sends the column to the cell-by-cell parser, which names each bad cell."""
    if not values or any(type(v) is bool or v is None for v in values):
        return None
    try:
        array = np.asarray(values)
        if array.dtype.kind == "U":
            array = array.astype(np.int64)
        elif array.dtype.kind == "f":
            if not np.all(np.isfinite(array)) or np.any(array != np.floor(array)):
                return None
            array = array.astype(np.int64)
        elif array.dtype.kind != "i":
            return None
    except (ValueError, OverflowError, TypeError):
        return None
    if np.any(array < minimum) or np.any(array > MAX_DIM):
        return None
    return array.astype(np.int64)


@dataclass
class _Cells:
    """The data rows of a sheet by column, and the bad cells found while parsing them."""

    columns: dict[str, list[object]]
    row_numbers: np.ndarray
    ok: np.ndarray
    problems: list[RowProblem]

    def bad(self, i: int, header: str, message: str) -> None:
        self.ok[i] = False
        self.problems.append(RowProblem(int(self.row_numbers[i]), header, message))

    def sizes(self, header: str, role: str, minimum: int, blank_value: int | None) -> np.ndarray:
        """A size column as integers; a bad cell marks its row bad and reads as 0."""
        fast = _fast_sizes(self.columns[header], minimum)
        if fast is not None:
            return fast
        out = np.zeros(len(self.row_numbers), dtype=np.int64)
        what = role.upper() if role in REQUIRED_ROLES else role
        for i, value in enumerate(self.columns[header]):
            try:
                if _blank(value):
                    if blank_value is None:
                        raise _CellError(f"{what} is blank")
                    out[i] = blank_value
                else:
                    out[i] = _size(value, what, minimum=minimum)
            except _CellError as exc:
                self.bad(i, header, str(exc))
        return out

    def dtypes(self, header: str) -> np.ndarray:
        """Canonical dtype names; "" where blank or unknown (that row marked bad)."""
        names_seen: dict[str, str] = {}
        canon: list[str] = []
        for i, value in enumerate(self.columns[header]):
            text = "" if _blank(value) else str(value).strip()
            if text and text not in names_seen:
                try:
                    names_seen[text] = canonical_dtype(text)
                except InputError as exc:
                    names_seen[text] = ""
                    self.bad(i, header, str(exc))
            elif text and not names_seen[text]:
                self.bad(i, header, f"unknown dtype {text!r}")
            canon.append(names_seen.get(text, "") if text else "")
        return np.array(canon, dtype=str) if canon else np.array([], dtype=str)


def _cells(
    rows: list[tuple[int, list[object]]], header_pos: int, raw_headers: list[str]
) -> tuple[list[str], _Cells]:
    """The unique headers and the non-blank data rows below the header row, by column."""
    data = [
        (number, cells)
        for number, cells in rows[header_pos + 1 :]
        if not all(_blank(c) for c in cells)
    ]
    width = max([len(raw_headers), *(len(cells) for _, cells in data)])
    headers = _unique_headers(raw_headers, width)
    columns: dict[str, list[object]] = {h: [] for h in headers}
    for _, cells in data:
        for i, h in enumerate(headers):
            columns[h].append(cells[i] if i < len(cells) else None)
    row_numbers = np.fromiter((number for number, _ in data), dtype=np.int64, count=len(data))
    return headers, _Cells(columns, row_numbers, np.ones(len(data), dtype=bool), [])


def read_shape_rows(path: str | Path, sheet: str | None = None) -> ShapeTable:
    """Read the (m, k, n) rows of a .csv/.tsv/.xlsx (first sheet unless `sheet` names one).

    Blank rows are skipped. Raises InputError for a missing, unreadable, encrypted or corrupt file,
    or for a sheet without recognizable M, K, N columns; bad cells only mark their row bad.
    """
    p = Path(path)
    sheet_name, rows = read_rows(p, sheet)
    header_pos, raw_headers, role_index = _find_header(p, rows)
    headers, cells = _cells(rows, header_pos, raw_headers)
    columns = cells.columns
    roles = {role: headers[i] for role, i in role_index.items()}
    m, k, n = (cells.sizes(roles[role], role, 1, None) for role in REQUIRED_ROLES)
    count = (
        cells.sizes(roles["count"], "count", 0, 1)
        if "count" in roles
        else np.ones(len(cells.row_numbers), dtype=np.int64)
    )
    dtype = cells.dtypes(roles["dtype"]) if "dtype" in roles else None
    names = (
        [("" if _blank(v) else _header_text(v)) for v in columns[roles["name"]]]
        if "name" in roles
        else None
    )
    for array in (m, k, n):
        array[~cells.ok] = 0
    cells.problems.sort(key=lambda p: (p.row, headers.index(p.column)))
    return ShapeTable(
        path=str(path),
        sheet=sheet_name,
        header_row=rows[header_pos][0],
        headers=tuple(headers),
        columns=columns,
        roles=roles,
        row_numbers=cells.row_numbers,
        m=m,
        k=k,
        n=n,
        count=count,
        dtype=dtype,
        names=names,
        ok=cells.ok,
        problems=tuple(cells.problems),
    )
