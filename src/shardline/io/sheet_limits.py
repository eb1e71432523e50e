"""Limits on what a sheet may expand to, so that a small hostile file cannot take minutes or
gigabytes: an .xlsx is a zip of XML parts, and a 100 KB file can describe a cell in column XFD on
every row, or one shared string of 500 MB.

Checked before openpyxl parses anything (`check_xlsx_parts`: the uncompressed sizes the zip
declares, which zipfile enforces while reading) and while the rows are read (`bounded_rows`:
rows, columns, cells and characters per cell). Each limit is far above a real sheet of shapes
and answers with one clear error.
"""

from __future__ import annotations

import zipfile
from collections.abc import Iterable
from pathlib import Path

from shardline.errors import InputError
from shardline.io.xlsx_writer import MAX_CELL_TEXT, MAX_XLSX_COLUMNS, MAX_XLSX_ROWS

__all__ = [
    "MAX_SHEET_BYTES",
    "MAX_SHEET_ROWS",
    "MAX_SHEET_COLUMNS",
    "MAX_SHEET_CELLS",
    "MAX_XLSX_PART_BYTES",
    "MAX_SHARED_STRINGS_BYTES",
    "bounded_rows",
    "check_xlsx_parts",
]

MAX_SHEET_BYTES = 1_000_000_000  # a file on disk (a 1-million-row CSV of shapes is ~30 MB)
MAX_SHEET_ROWS = 5_000_000  # CSV rows; an .xlsx sheet stops at Excel's 1,048,576
MAX_SHEET_COLUMNS = MAX_XLSX_COLUMNS  # 16,384 (A to XFD)
MAX_SHEET_CELLS = 20_000_000  # rows x columns up to each row's last cell: 1M rows x 20 columns
MAX_XLSX_PART_BYTES = 1_000_000_000  # one uncompressed XML part of an .xlsx
MAX_XLSX_TOTAL_BYTES = 2_000_000_000  # all parts together, uncompressed
MAX_SHARED_STRINGS_BYTES = 100_000_000  # xl/sharedStrings.xml, parsed whole by openpyxl


def check_xlsx_parts(path: Path) -> None:
    """Refuse an .xlsx whose parts expand past the limits (a "zip bomb"), before parsing."""
    try:
        with zipfile.ZipFile(path) as archive:
            infos = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError) as exc:
        raise InputError(f"cannot read {path}: corrupt .xlsx ({exc})") from None
    total = sum(info.file_size for info in infos)
    for info in infos:
        limit = (
            MAX_SHARED_STRINGS_BYTES
            if info.filename.lower().endswith("sharedstrings.xml")
            else MAX_XLSX_PART_BYTES
        )
        if info.file_size > limit:
            raise InputError(
                f"cannot read {path}: its part {info.filename} expands to {info.file_size:,} "
                f"bytes (limit {limit:,}); save the sheet as .csv"
            )
    if total > MAX_XLSX_TOTAL_BYTES:
        raise InputError(
            f"cannot read {path}: it expands to {total:,} bytes (limit "
            f"{MAX_XLSX_TOTAL_BYTES:,}); save the sheet as .csv"
        )


def bounded_rows(path: Path, rows: Iterable[tuple[object, ...]]) -> list[tuple[int, list[object]]]:
    """(sheet row number, cells) for each row of an .xlsx sheet (openpyxl's read-only iteration,
    which fills missing rows with empty ones, so the position is the row number), stopping with
    an InputError past Excel's rows, MAX_SHEET_CELLS cells or a cell longer than Excel allows."""
    out: list[tuple[int, list[object]]] = []
    cells = 0
    for number, values in enumerate(rows, start=1):
        if number > MAX_XLSX_ROWS:
            raise InputError(
                f"{path}: more than {MAX_XLSX_ROWS:,} rows (Excel's limit); save it as .csv"
            )
        cells += len(values)
        if cells > MAX_SHEET_CELLS:
            raise InputError(
                f"{path}: the sheet expands to more than {MAX_SHEET_CELLS:,} cells by row "
                f"{number:,} (rows are {len(values):,} cells wide up to their last used cell); "
                "delete unused rows and columns, or save it as .csv"
            )
        for value in values:
            if type(value) is str and len(value) > MAX_CELL_TEXT:
                raise InputError(
                    f"{path}: row {number:,} has a cell of {len(value):,} characters (Excel's "
                    f"limit is {MAX_CELL_TEXT:,})"
                )
        out.append((number, list(values)))
    return out
