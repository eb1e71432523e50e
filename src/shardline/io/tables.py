"""Tables out: output paths, atomic writes, and .xlsx/.csv/.json/.md tables.

Writing is atomic (a temporary file in the same directory, then moved into place), never touches
an input file, and refuses an existing output unless forced (`check_output_path`). Without
--force the finished file is placed exclusively (a hard link, which fails if the name exists), so
an output that another run wrote in the meantime is never replaced. Rows are converted and written
a block at a time; CSV text that a spreadsheet would run as a formula, and HTML or links in
Markdown, are neutralized (`shardline.io.safe_text`).

An output name holding a control character (a line feed, a tab, DEL, a C1 code, a Unicode line
separator or a bidirectional override that shows the name other than it is) is refused. The
temporary file is named `.NAME.shardline-PID.XXXXXXXX.tmp` (the output's name, then the id of the
process writing it); a run killed while writing (SIGKILL: no clean-up can run) leaves one, and the
next write of the same output removes every such file whose process is gone.
"""

from __future__ import annotations

import contextlib
import csv
import errno
import json
import math
import os
import re
import stat
import tempfile
import unicodedata
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shardline.errors import InputError
from shardline.io.safe_text import csv_safe, md_text
from shardline.io.xlsx_writer import Sheet, check_xlsx_size, write_xlsx

__all__ = [
    "OUTPUT_SUFFIXES",
    "check_output_name",
    "check_output_path",
    "atomic_write",
    "Column",
    "OutputTable",
    "json_cell",
    "write_table",
    "table_payload",
    "XLSX_FORMATS",
    "BOUND_FILLS",
    "WRITERS",
]

OUTPUT_SUFFIXES = (".xlsx", ".csv", ".json", ".md")


# ----------------------------------------------------------------------------------------------
# Output paths and atomic writes


def _same_file(a: Path, b: Path) -> bool:
    try:
        if a.exists() and b.exists():
            return os.path.samefile(a, b)
        return a.resolve() == b.resolve()
    except (OSError, ValueError, RuntimeError):  # a name too long, a NUL byte, a symlink loop
        return False


# Whether `check_output_path` allowed replacing an existing file (--force), by absolute path:
# `atomic_write` then replaces, or places the new file only where no file is (a second run that
# wrote the same name in the meantime is never overwritten without --force).
_REPLACE: dict[str, bool] = {}


def _stat(p: Path) -> os.stat_result | None:
    """lstat of an output path (None when nothing is there); OS errors as InputError."""
    try:
        return os.lstat(p)
    except FileNotFoundError:
        return None
    except NotADirectoryError:
        raise InputError(f"output {p}: a part of the path is not a directory") from None
    except (OSError, ValueError) as exc:  # ENAMETOOLONG, ELOOP, EACCES; ValueError: a NUL byte
        raise InputError(f"cannot write {p}: {_reason(exc)}") from None


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or str(exc) or type(exc).__name__
    return "invalid file name" if "null" in str(exc) else str(exc)


def _check_directory(p: Path) -> None:
    parent = p.parent if str(p.parent) else Path(".")
    try:
        is_dir = parent.is_dir()
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot write {p}: {_reason(exc)}") from None
    if not is_dir:
        raise InputError(f"output {p}: directory {parent} does not exist")
    if not os.access(parent, os.W_OK):
        raise InputError(f"cannot write {p}: directory {parent} is not writable")


# C0 controls, DEL, C1 controls, the Unicode line and paragraph separators, and the bidirectional
# embeddings, overrides and isolates (U+202A..U+202E, U+2066..U+2069), which show a name reversed.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")


def check_output_name(out: str | Path) -> None:
    """Refuse an output name with a control character in it (a name that starts with a line
    feed, a tab or an escape sequence is one no listing shows as it is)."""
    match = _CONTROL.search(str(out))
    if match:
        char = match.group(0)
        what = unicodedata.name(char, "") or _C0_NAMES.get(char, "a control character")
        raise InputError(
            f"output {str(out)!r}: the name holds U+{ord(char):04X} ({what.lower()}) at "
            f"character {match.start() + 1}; choose a name of printable characters"
        )


_C0_NAMES = {"\n": "line feed", "\r": "carriage return", "\t": "tab", "\x1b": "escape"}


def check_output_path(
    out: str | Path,
    inputs: Iterable[str | Path] = (),
    *,
    force: bool = False,
    suffixes: Sequence[str] = OUTPUT_SUFFIXES,
) -> Path:
    """Validate an output path before any work: a name, a known type, a writable existing
    directory, not an input (not even with --force), and not an existing file unless --force."""
    if not str(out).strip():
        raise InputError("the output file name is empty")
    check_output_name(out)
    p = Path(out)
    if p.suffix.lower() not in suffixes:
        raise InputError(
            f"output {p}: unsupported type {p.suffix or '(none)'!r}; "
            f"expected one of {', '.join(suffixes)}"
        )
    _check_directory(p)
    for source in inputs:
        if _same_file(p, Path(source)):
            raise InputError(
                f"output {p} is the input file; refusing to overwrite an input "
                "(choose another output name)"
            )
    info = _stat(p)
    if p.is_dir():
        raise InputError(f"output {p} is a directory")
    if info is not None and not force:
        raise InputError(f"output {p} already exists; pass --force to replace it")
    if info is not None and not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
        raise InputError(f"output {p} is not a regular file; refusing to replace it")
    _REPLACE[os.path.abspath(p)] = force
    return p


def _replaced_mode(target: Path) -> int:
    try:
        return stat.S_IMODE(target.stat().st_mode)
    except (OSError, ValueError):
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def _place_new(tmp: Path, target: Path) -> None:
    """Move `tmp` to `target` only if nothing is at `target` (a hard link fails when the name
    exists, atomically); on a file system without hard links, claim the name with O_EXCL first."""
    appeared = InputError(
        f"output {target} appeared while this run was writing (another run?); it was left as "
        "it is; pass --force to replace it"
    )
    try:
        os.link(tmp, target)
        return
    except FileExistsError:
        raise appeared from None
    except OSError as exc:
        if exc.errno not in _NO_LINK_ERRNOS:
            raise
    try:
        os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
    except FileExistsError:
        raise appeared from None
    os.replace(tmp, target)


_NO_LINK_ERRNOS = {
    errno.EPERM,
    errno.EXDEV,
    errno.EMLINK,
    errno.ENOSYS,
    errno.ENOTSUP,
    errno.EOPNOTSUPP,
    errno.EACCES,
}


def atomic_write(
    path: str | Path, write: Callable[[Path], None], *, replace: bool | None = None
) -> None:
    """Call `write(tmp)` on a temporary file next to `path`, then move it into place, so that a
    reader never sees a half-written file and a failure (or SIGTERM, which the CLI turns into an
    exception) leaves no file behind.

    `replace`: True replaces an existing file atomically (--force); False places the file only
    where no file is, atomically, and refuses (InputError) when one appeared since the check; None
    (the default) does what `check_output_path` allowed for this path (replace when unchecked)."""
    check_output_name(path)
    target = Path(path)
    if replace is None:
        replace = _REPLACE.get(os.path.abspath(target), True)
    directory = target.parent if str(target.parent) else Path(".")
    prefix = f".{target.name[:80]}.{_TMP_TAG}"
    _remove_stale(directory, prefix)
    try:
        fd, tmp_name = tempfile.mkstemp(
            prefix=f"{prefix}{os.getpid()}.", suffix=".tmp", dir=directory
        )
    except (OSError, ValueError) as exc:
        raise InputError(f"cannot write {target}: {_reason(exc)}") from None
    tmp = Path(tmp_name)
    try:
        os.close(fd)
        write(tmp)
        # mkstemp makes the file private (0600); give it the mode a plain open() would (0666 less
        # the umask), or keep the mode of the file it replaces
        os.chmod(tmp, _replaced_mode(target))
        if replace:
            os.replace(tmp, target)
        else:
            _place_new(tmp, target)
    except OSError as exc:
        raise InputError(f"cannot write {target}: {_reason(exc)}") from None
    finally:
        tmp.unlink(missing_ok=True)


_TMP_TAG = "shardline-"


def _remove_stale(directory: Path, prefix: str) -> None:
    """Remove the temporary files `prefix`PID.XXXXXXXX.tmp that an earlier write of the same
    output left when it was killed (its process PID no longer runs). A live run's file stays."""
    try:
        names = [e.name for e in os.scandir(directory) if e.name.startswith(prefix)]
    except (OSError, ValueError):
        return
    for name in names:
        pid_text, _, rest = name[len(prefix) :].partition(".")
        if (
            not (pid_text.isascii() and pid_text.isdigit())
            or not rest.endswith(".tmp")
            or _alive(int(pid_text))
        ):
            continue
        with contextlib.suppress(OSError):
            os.unlink(directory / name)


def _alive(pid: int) -> bool:
    if pid == os.getpid():
        return True
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError, OSError):
        return True  # another user's process, or a number no pid can be: leave the file
    return True


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
    summary: dict[str, object] = field(default_factory=dict)  # JSON-ready, SI units in the keys
    title: str = ""
    sheet_name: str = "results"

    @property
    def n_rows(self) -> int:
        return len(self.columns[0].values) if self.columns else 0


def json_cell(value: object) -> object:
    """A JSON/CSV-ready Python value: numpy scalars unwrapped, NaN -> None, dates -> ISO text."""
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def _column_lists(
    table: OutputTable, start: int = 0, stop: int | None = None
) -> list[list[object]]:
    """Each column (rows start..stop) as a list of JSON/CSV-ready Python values (numpy arrays
    converted in bulk)."""
    lists: list[list[object]] = []
    for col in table.columns:
        values = col.values[start:stop]
        if isinstance(values, np.ndarray) and values.dtype.kind == "f":
            lists.append(_float_list(values, col.kind == "int"))
            continue
        raw = values.tolist() if isinstance(values, np.ndarray) else list(values)
        if col.kind == "int":
            raw = [int(v) if isinstance(v, float) and math.isfinite(v) else v for v in raw]
        lists.append([json_cell(v) for v in raw])
    return lists


def _float_list(values: np.ndarray, as_int: bool) -> list[object]:
    finite = np.isfinite(values)
    if finite.all():
        return values.astype(np.int64).tolist() if as_int else values.tolist()
    return [
        (int(v) if as_int else v) if ok else None
        for v, ok in zip(values.tolist(), finite.tolist(), strict=True)
    ]


CHUNK_ROWS = 8192  # rows converted and written at a time: memory does not grow with the table


def iter_rows(table: OutputTable) -> Iterator[tuple[object, ...]]:
    """The table's rows as tuples of JSON/CSV-ready values, converted a chunk at a time."""
    for start in range(0, table.n_rows, CHUNK_ROWS):
        yield from zip(*_column_lists(table, start, start + CHUNK_ROWS), strict=True)


def _write_csv(table: OutputTable, tmp: Path) -> None:
    """Raw SI numbers; floats as Python's shortest round-trip repr, empty cells empty; text that
    a spreadsheet would run as a formula is neutralized (`csv_safe`)."""
    text_columns = [j for j, c in enumerate(table.columns) if c.kind in ("text", "bound")]
    with tmp.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow([csv_safe(c.name) for c in table.columns])
        for start in range(0, table.n_rows, CHUNK_ROWS):
            lists = _column_lists(table, start, start + CHUNK_ROWS)
            for j in text_columns:
                lists[j] = [csv_safe(v) for v in lists[j]]
            writer.writerows(zip(*lists, strict=True))


def table_payload(table: OutputTable) -> dict[str, Any]:
    """The JSON form of a table: column names, one object per row, the summary."""
    names = [c.name for c in table.columns]
    return {
        "title": table.title,
        "columns": names,
        "rows": [dict(zip(names, row, strict=True)) for row in iter_rows(table)],
        "summary": table.summary,
    }


def _write_json(table: OutputTable, tmp: Path) -> None:
    """The `table_payload` object, streamed: one row object per line, never the whole text in
    memory."""
    names = [c.name for c in table.columns]
    encode = json.JSONEncoder(allow_nan=False, ensure_ascii=False).encode
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write(f'{{\n "title": {encode(table.title)},\n "columns": {encode(names)},\n "rows": [')
        separator = "\n  "
        for row in iter_rows(table):
            fh.write(separator + encode(dict(zip(names, row, strict=True))))
            separator = ",\n  "
        summary = json.dumps(table.summary, indent=1, allow_nan=False, ensure_ascii=False)
        fh.write(f'\n ],\n "summary": {summary}\n}}\n')


def _md_value(value: object, kind: str) -> str:
    if value is None:
        return ""
    if isinstance(value, float) and kind in ("time", "float"):
        return f"{value:.4g}"
    if isinstance(value, float) and kind == "int":
        return f"{int(value):d}"
    return md_text(str(value))


def _write_md(table: OutputTable, tmp: Path) -> None:
    """A Markdown table; every text cell, header and the title go through `md_text` (no raw HTML,
    no links)."""
    head = [f"# {md_text(table.title)}", ""] if table.title else []
    head.append("| " + " | ".join(md_text(c.name) for c in table.columns) + " |")
    head.append(
        "|"
        + "|".join("---:" if c.kind in ("int", "float", "time") else "---" for c in table.columns)
        + "|"
    )
    kinds = [c.kind for c in table.columns]
    with tmp.open("w", encoding="utf-8") as fh:
        fh.write("\n".join(head) + "\n")
        for row in iter_rows(table):
            cells = " | ".join(_md_value(v, kind) for v, kind in zip(row, kinds, strict=True))
            fh.write(f"| {cells} |\n")
        if table.summary:
            lines = ["", "## Summary", "", "| quantity | value |", "|---|---:|"]
            for key, value in _flatten(table.summary):
                lines.append(f"| {md_text(key)} | {_md_value(json_cell(value), 'float')} |")
            fh.write("\n".join(lines) + "\n")


def _flatten(mapping: dict[str, object], prefix: str = "") -> list[tuple[str, object]]:
    out: list[tuple[str, object]] = []
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
    styles = [
        "fill" if c.kind == "bound" else c.kind if c.kind in XLSX_FORMATS else "default"
        for c in table.columns
    ]
    widths = [max(10, min(40, len(c.name) + 2)) for c in table.columns]
    sheets = [
        Sheet(
            table.sheet_name,
            [c.name for c in table.columns],
            iter_rows(table),
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


WRITERS: dict[str, Callable[[OutputTable, Path], None]] = {
    ".csv": _write_csv,
    ".json": _write_json,
    ".md": _write_md,
    ".xlsx": _write_xlsx,
}


def write_table(path: str | Path, table: OutputTable) -> None:
    """Write `table` atomically in the format the suffix names (.xlsx, .csv, .json, .md).
    Call `check_output_path` first: this function does not check for overwriting."""
    p = Path(path)
    writer = WRITERS.get(p.suffix.lower())
    if writer is None:
        raise InputError(
            f"output {p}: unsupported type {p.suffix!r}; expected one of "
            f"{', '.join(OUTPUT_SUFFIXES)}"
        )
    if writer is _write_xlsx:
        check_xlsx_size(table.n_rows + 1, len(table.columns))
    atomic_write(p, lambda tmp: writer(table, tmp))
