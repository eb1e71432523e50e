"""Tables out: output paths, atomic writes, and .xlsx/.csv/.json/.md tables.

Writing is atomic (a temporary file in the same directory, then `os.replace`), never touches an
input file, and refuses an existing output unless forced (`check_output_path`).
"""

from __future__ import annotations

import csv
import json
import math
import os
import stat
import tempfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shardline.errors import InputError
from shardline.io.xlsx_writer import Sheet, write_xlsx

__all__ = [
    "OUTPUT_SUFFIXES",
    "check_output_path",
    "atomic_write",
    "Column",
    "OutputTable",
    "json_cell",
    "write_table",
    "table_payload",
    "XLSX_FORMATS",
    "BOUND_FILLS",
]

OUTPUT_SUFFIXES = (".xlsx", ".csv", ".json", ".md")


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
