"""Spreadsheets in and out: read (m, k, n) rows from .csv/.xlsx; write .xlsx/.csv/.json/.md tables.

Reading (`read_shape_rows`) finds the M, K, N columns by header name (case-insensitive; see
`ACCEPTED`), plus optional count, dtype and name columns, keeps every original column, and parses
the sizes into numpy integer arrays. A bad cell (text, negative, fractional) does not stop the read:
the row is marked bad (`ShapeTable.ok`) and described in `ShapeTable.problems` with its sheet row
number and column header, so the caller can compute the other rows and report the bad ones.

Writing is atomic (a temporary file in the same directory, then `os.replace`), never touches an
input file, and refuses an existing output unless forced (`check_output_path`).
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import re
import stat
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shardline.dtypes import canonical_dtype
from shardline.einsum import MAX_DIM
from shardline.errors import InputError
from shardline.io.xlsx_writer import column_letter
from shardline.units import parse_count

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
]

INPUT_SUFFIXES = (".csv", ".tsv", ".xlsx", ".xlsm")
OUTPUT_SUFFIXES = (".xlsx", ".csv", ".json", ".md")

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
    columns: dict[str, list[Any]]  # the original cells of every data row, per header
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


# ----------------------------------------------------------------------------------------------
# Raw reading: rows of cell values with their sheet row numbers


def _check_input_path(path: Path) -> None:
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path} is a directory, not a sheet")
    if path.suffix.lower() == ".xls":
        raise InputError(
            f"{path}: the old binary .xls format is not supported; save it as .xlsx or .csv"
        )
    if path.suffix.lower() not in INPUT_SUFFIXES:
        raise InputError(
            f"{path}: unsupported sheet type {path.suffix or '(none)'!r}; "
            f"expected one of {', '.join(INPUT_SUFFIXES)}"
        )


def _csv_rows(path: Path) -> Iterator[tuple[int, list[Any]]]:
    raw = path.read_bytes()
    if b"\x00" in raw[:4096] or raw.startswith((_ZIP_MAGIC, _OLE_MAGIC)):
        raise InputError(f"cannot read {path}: it is a binary file, not CSV text")
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
            yield reader.line_num, list(row)
    except csv.Error as exc:
        raise InputError(
            f"cannot read {path}: malformed CSV near line {reader.line_num}: {exc}"
        ) from None


def _open_workbook(path: Path) -> Any:
    head = path.read_bytes()[:8] if path.stat().st_size else b""
    if head.startswith(_OLE_MAGIC):
        raise InputError(
            f"cannot read {path}: the workbook is password-protected (encrypted) or an "
            "old binary .xls; remove the password or save it as .xlsx or .csv"
        )
    if not head.startswith(_ZIP_MAGIC):
        raise InputError(f"cannot read {path}: not a valid .xlsx file (corrupt or not a workbook)")
    from openpyxl import load_workbook

    try:
        return load_workbook(path, read_only=True, data_only=True)
    except Exception as exc:  # a corrupt zip or XML raises many kinds; all mean the same to a user
        raise InputError(
            f"cannot read {path}: corrupt .xlsx ({type(exc).__name__}: {exc})"
        ) from None


def _xlsx_rows(path: Path, sheet: str | None) -> tuple[str, list[tuple[int, list[Any]]]]:
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
        rows: list[tuple[int, list[Any]]] = []
        try:
            # read-only iteration fills missing rows with empty ones, so the index is the sheet row
            for number, values in enumerate(ws.iter_rows(values_only=True), start=1):
                rows.append((number, list(values)))
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
) -> tuple[str | None, list[tuple[int, list[Any]]]]:
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


def _blank(value: Any) -> bool:
    return value is None or (isinstance(value, str) and not value.strip())


def _header_text(value: Any) -> str:
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
    path: Path, rows: list[tuple[int, list[Any]]]
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


def _fast_sizes(values: list[Any], minimum: int) -> np.ndarray | None:
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


def read_shape_rows(path: str | Path, sheet: str | None = None) -> ShapeTable:
    """Read the (m, k, n) rows of a .csv/.tsv/.xlsx (first sheet unless `sheet` names one).

    Blank rows are skipped. Raises InputError for a missing, unreadable, encrypted or corrupt file,
    or for a sheet without recognizable M, K, N columns; bad cells only mark their row bad.
    """
    p = Path(path)
    sheet_name, rows = read_rows(p, sheet)
    header_pos, raw_headers, role_index = _find_header(p, rows)
    data = [
        (number, cells)
        for number, cells in rows[header_pos + 1 :]
        if not all(_blank(c) for c in cells)
    ]
    width = max([len(raw_headers), *(len(cells) for _, cells in data)])
    headers = _unique_headers(raw_headers, width)
    columns: dict[str, list[Any]] = {h: [] for h in headers}
    for _, cells in data:
        for i, h in enumerate(headers):
            columns[h].append(cells[i] if i < len(cells) else None)
    roles = {role: headers[i] for role, i in role_index.items()}
    count_rows = len(data)
    row_numbers = np.fromiter((number for number, _ in data), dtype=np.int64, count=count_rows)
    ok = np.ones(count_rows, dtype=bool)
    problems: list[RowProblem] = []

    def parse(role: str, minimum: int, blank_value: int | None) -> np.ndarray:
        header = roles[role]
        fast = _fast_sizes(columns[header], minimum)
        if fast is not None:
            return fast
        out = np.zeros(count_rows, dtype=np.int64)
        what = role.upper() if role in REQUIRED_ROLES else role
        for i, value in enumerate(columns[header]):
            try:
                if _blank(value):
                    if blank_value is None:
                        raise _CellError(f"{what} is blank")
                    out[i] = blank_value
                else:
                    out[i] = _size(value, what, minimum=minimum)
            except _CellError as exc:
                ok[i] = False
                problems.append(RowProblem(int(row_numbers[i]), header, str(exc)))
        return out

    m, k, n = (parse(role, 1, None) for role in REQUIRED_ROLES)
    count = parse("count", 0, 1) if "count" in roles else np.ones(count_rows, dtype=np.int64)
    dtype: np.ndarray | None = None
    if "dtype" in roles:
        names_seen: dict[str, str] = {}
        canon: list[str] = []
        for i, value in enumerate(columns[roles["dtype"]]):
            text = "" if _blank(value) else str(value).strip()
            if text and text not in names_seen:
                try:
                    names_seen[text] = canonical_dtype(text)
                except InputError as exc:
                    names_seen[text] = ""
                    problems.append(RowProblem(int(row_numbers[i]), roles["dtype"], str(exc)))
                    ok[i] = False
            elif text and not names_seen[text]:
                problems.append(
                    RowProblem(int(row_numbers[i]), roles["dtype"], f"unknown dtype {text!r}")
                )
                ok[i] = False
            canon.append(names_seen.get(text, "") if text else "")
        dtype = np.array(canon, dtype=str) if canon else np.array([], dtype=str)
    names = (
        [("" if _blank(v) else _header_text(v)) for v in columns[roles["name"]]]
        if "name" in roles
        else None
    )
    for array in (m, k, n):
        array[~ok] = 0
    problems.sort(key=lambda p: (p.row, headers.index(p.column)))
    return ShapeTable(
        path=str(path),
        sheet=sheet_name,
        header_row=rows[header_pos][0],
        headers=tuple(headers),
        columns=columns,
        roles=roles,
        row_numbers=row_numbers,
        m=m,
        k=k,
        n=n,
        count=count,
        dtype=dtype,
        names=names,
        ok=ok,
        problems=tuple(problems),
    )


# ----------------------------------------------------------------------------------------------
# Output paths and atomic writes


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
    except OSError:
        pass
    return a.resolve() == b.resolve()


def check_output_path(
    out: str | Path,
    inputs: Iterable[str | Path] = (),
    *,
    force: bool = False,
    suffixes: Sequence[str] = OUTPUT_SUFFIXES,
) -> Path:
    """Validate an output path before any work: a known type, an existing directory, not an input
    (not even with --force), and not an existing file unless --force."""
    p = Path(out)
    if p.suffix.lower() not in suffixes:
        raise InputError(
            f"output {p}: unsupported type {p.suffix or '(none)'!r}; "
            f"expected one of {', '.join(suffixes)}"
        )
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise InputError(f"output {p}: directory {parent} does not exist")
    for source in inputs:
        if _same_file(p, Path(source)):
            raise InputError(
                f"output {p} is the input file; refusing to overwrite an input "
                "(choose another output name)"
            )
    if p.is_dir():
        raise InputError(f"output {p} is a directory")
    if p.exists() and not force:
        raise InputError(f"output {p} already exists; pass --force to replace it")
    return p


def _replaced_mode(target: Path) -> int:
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except OSError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def atomic_write(path: str | Path, write: Callable[[Path], None]) -> None:
    """Call `write(tmp)` on a temporary file next to `path`, then rename it into place, so that a
    reader never sees a half-written file and a failure leaves no file behind."""
    target = Path(path)
    fd, tmp_name = tempfile.mkstemp(
        prefix=f".{target.name}.", suffix=".tmp", dir=target.parent if str(target.parent) else "."
    )
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        write(tmp)
        # mkstemp makes the file private (0600); give it the mode a plain open() would (0666 less
        # the umask), or keep the mode of the file it replaces
        os.chmod(tmp, _replaced_mode(target))
        os.replace(tmp, target)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


# ----------------------------------------------------------------------------------------------
# Writing tables


@dataclass(frozen=True)
class Column:
    """One output column. `kind` picks the number format and rendering: "int" (exact counts),
    "float" (plain ratios), "time" (seconds), "bound" (regime text, colored in .xlsx), "text"
    (passed through, e.g. input columns)."""

    name: str
    values: Any  # list or numpy array, one entry per row; None or NaN = empty
    kind: str = "text"


@dataclass(frozen=True)
class OutputTable:
    columns: list[Column]
    summary: dict[str, Any] = field(default_factory=dict)  # JSON-ready, SI units in the keys
    title: str = ""
    sheet_name: str = "results"

    @property
    def n_rows(self) -> int:
        return len(self.columns[0].values) if self.columns else 0


def json_cell(value: Any) -> Any:
    """A JSON/CSV-ready Python value: numpy scalars unwrapped, NaN -> None, dates -> ISO text."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def _column_lists(table: OutputTable) -> list[list[Any]]:
    """Each column as a list of JSON/CSV-ready Python values (numpy arrays converted in bulk)."""
    lists: list[list[Any]] = []
    for col in table.columns:
        values = col.values
        if isinstance(values, np.ndarray) and values.dtype.kind == "f":
            finite = np.isfinite(values)
            if col.kind == "int":
                out = (
                    values.astype(np.int64).tolist()
                    if finite.all()
                    else [
                        int(v) if ok else None
                        for v, ok in zip(values.tolist(), finite.tolist(), strict=True)
                    ]
                )
            else:
                out = (
                    values.tolist()
                    if finite.all()
                    else [
                        v if ok else None
                        for v, ok in zip(values.tolist(), finite.tolist(), strict=True)
                    ]
                )
            lists.append(out)
            continue
        raw = values.tolist() if isinstance(values, np.ndarray) else list(values)
        if col.kind == "int":
            raw = [int(v) if isinstance(v, float) and math.isfinite(v) else v for v in raw]
        lists.append([json_cell(v) for v in raw])
    return lists


def _write_csv(table: OutputTable, tmp: Path) -> None:
    """Raw SI numbers; floats as Python's shortest round-trip repr, empty cells empty."""
    lists = _column_lists(table)
    with tmp.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow([c.name for c in table.columns])
        writer.writerows(zip(*lists, strict=True))


def table_payload(table: OutputTable) -> dict[str, Any]:
    """The JSON form of a table: column names, one object per row, the summary."""
    lists = _column_lists(table)
    names = [c.name for c in table.columns]
    return {
        "title": table.title,
        "columns": names,
        "rows": [dict(zip(names, row, strict=True)) for row in zip(*lists, strict=True)],
        "summary": table.summary,
    }


def _write_json(table: OutputTable, tmp: Path) -> None:
    text = json.dumps(table_payload(table), indent=1, allow_nan=False)
    tmp.write_text(text + "\n", encoding="utf-8")


def _md_escape(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _md_value(value: Any, kind: str) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and kind in ("time", "float"):
        return f"{value:.4g}"
    if isinstance(value, float) and kind == "int":
        return f"{int(value):d}"
    return _md_escape(str(value))


def _write_md(table: OutputTable, tmp: Path) -> None:
    lists = _column_lists(table)
    lines = [f"# {_md_escape(table.title)}", ""] if table.title else []
    lines.append("| " + " | ".join(_md_escape(c.name) for c in table.columns) + " |")
    lines.append(
        "|"
        + "|".join("---:" if c.kind in ("int", "float", "time") else "---" for c in table.columns)
        + "|"
    )
    kinds = [c.kind for c in table.columns]
    for row in zip(*lists, strict=True):
        lines.append(
            "| " + " | ".join(_md_value(v, kind) for v, kind in zip(row, kinds, strict=True)) + " |"
        )
    if table.summary:
        lines += ["", "## Summary", "", "| quantity | value |", "|---|---:|"]
        for key, value in _flatten(table.summary):
            lines.append(f"| {_md_escape(key)} | {_md_value(json_cell(value), 'float')} |")
    tmp.write_text("\n".join(lines) + "\n", encoding="utf-8")


def _flatten(mapping: dict[str, Any], prefix: str = "") -> list[tuple[str, Any]]:
    out: list[tuple[str, Any]] = []
    for key, value in mapping.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            out += _flatten(value, name + ".")
        else:
            out.append((name, value))
    return out


# Number formats keep cells numeric (Excel shows them formatted; formulas still see the numbers).
XLSX_FORMATS = {"int": "#,##0", "float": "0.00", "time": "0.000E+00"}
BOUND_FILLS = {"compute": "C6E0B4", "memory": "F8CBAD", "network": "BDD7EE"}  # green, orange, blue


def _write_xlsx(table: OutputTable, tmp: Path) -> None:
    """Results sheet (numbers formatted, bound cells filled) and a summary sheet."""
    from shardline.io.xlsx_writer import Sheet, write_xlsx

    lists = _column_lists(table)
    styles = [
        "fill" if c.kind == "bound" else c.kind if c.kind in XLSX_FORMATS else "default"
        for c in table.columns
    ]
    widths = [max(10, min(40, len(c.name) + 2)) for c in table.columns]
    sheets = [
        Sheet(
            table.sheet_name,
            [c.name for c in table.columns],
            zip(*lists, strict=True),
            styles,
            widths,
        )
    ]
    if table.summary:
        pairs = [(key, json_cell(value)) for key, value in _flatten(table.summary)]
        sheets.append(
            Sheet("summary", ["quantity", "value"], pairs, ["default", "float"], [36, 20])
        )
    write_xlsx(tmp, sheets)


_WRITERS: dict[str, Callable[[OutputTable, Path], None]] = {
    ".csv": _write_csv,
    ".json": _write_json,
    ".md": _write_md,
    ".xlsx": _write_xlsx,
}


def write_table(path: str | Path, table: OutputTable) -> None:
    """Write `table` atomically in the format the suffix names (.xlsx, .csv, .json, .md).
    Call `check_output_path` first: this function does not check for overwriting."""
    p = Path(path)
    writer = _WRITERS.get(p.suffix.lower())
    if writer is None:
        raise InputError(
            f"output {p}: unsupported type {p.suffix!r}; expected one of "
            f"{', '.join(OUTPUT_SUFFIXES)}"
        )
    atomic_write(p, lambda tmp: writer(table, tmp))
