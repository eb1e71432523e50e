"""A small, fast .xlsx writer for plain tables: numbers stay numbers with a number format, text is
inline, a few fills color cells, the header row is bold and frozen.

openpyxl (used to read sheets and to build the formula template) serializes cell by cell through
an XML tree and takes about 200 µs per row of 16 cells; a results table needs none of its
generality, so this module writes the SpreadsheetML parts (ECMA-376 Part 1: workbook, worksheets,
styles, relationships, content types) as text. Zip entries carry a fixed date, so equal tables give
equal files.
"""

from __future__ import annotations

import math
import re
import zipfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from xml.sax.saxutils import escape, quoteattr

__all__ = [
    "Sheet",
    "STYLE",
    "write_xlsx",
    "column_letter",
    "check_xlsx_size",
    "MAX_XLSX_ROWS",
    "MAX_XLSX_COLUMNS",
]

_MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_PKG_REL = "http://schemas.openxmlformats.org/package/2006/relationships"
_ZIP_DATE = (1980, 1, 1, 0, 0, 0)  # the zip format's earliest date: no build time in the file
_ILLEGAL_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
MAX_CELL_TEXT = 32_767  # Excel's limit on the characters in one cell
# Excel's sheet size (rows including the header; columns A..XFD), "Excel specifications and
# limits", https://support.microsoft.com/en-us/office/excel-specifications-and-limits-1672b34d-7043-467e-8e27-269d656771c3
MAX_XLSX_ROWS = 1_048_576
MAX_XLSX_COLUMNS = 16_384

# Cell style ids (indexes into cellXfs below).
STYLE = {
    "default": 0,
    "header": 1,
    "int": 2,
    "float": 3,
    "time": 4,
    "fill:compute": 5,
    "fill:memory": 6,
    "fill:network": 7,
}

# fills 2, 3, 4: compute (green), memory (orange), network (blue), as BOUND_FILLS in sheets.py
_FILLS = "".join(
    f'<fill><patternFill patternType="solid"><fgColor rgb="FF{rgb}"/>'
    '<bgColor indexed="64"/></patternFill></fill>\n'
    for rgb in ("C6E0B4", "F8CBAD", "BDD7EE")
)

_STYLES_XML = f"""<?xml version="1.0" encoding="UTF-8" standalone="yes"?>
<styleSheet xmlns="{_MAIN}">
<numFmts count="1"><numFmt numFmtId="164" formatCode="0.000E+00"/></numFmts>
<fonts count="2"><font><sz val="11"/><name val="Calibri"/><family val="2"/></font>
<font><b/><sz val="11"/><name val="Calibri"/><family val="2"/></font></fonts>
<fills count="5"><fill><patternFill patternType="none"/></fill>
<fill><patternFill patternType="gray125"/></fill>
{_FILLS}</fills>
<borders count="1"><border><left/><right/><top/><bottom/><diagonal/></border></borders>
<cellStyleXfs count="1"><xf numFmtId="0" fontId="0" fillId="0" borderId="0"/></cellStyleXfs>
<cellXfs count="8">
<xf numFmtId="0" fontId="0" fillId="0" borderId="0" xfId="0"/>
<xf numFmtId="0" fontId="1" fillId="0" borderId="0" xfId="0" applyFont="1"/>
<xf numFmtId="3" fontId="0" fillId="0" borderId="0" xfId="0" applyNumberFormat="1"/>
<xf numFmtId="2" fontId="0" fillId="0" borderId="0" xfId="0" applyNumberFormat="1"/>
<xf numFmtId="164" fontId="0" fillId="0" borderId="0" xfId="0" applyNumberFormat="1"/>
<xf numFmtId="0" fontId="0" fillId="2" borderId="0" xfId="0" applyFill="1"/>
<xf numFmtId="0" fontId="0" fillId="3" borderId="0" xfId="0" applyFill="1"/>
<xf numFmtId="0" fontId="0" fillId="4" borderId="0" xfId="0" applyFill="1"/>
</cellXfs>
<cellStyles count="1"><cellStyle name="Normal" xfId="0" builtinId="0"/></cellStyles>
</styleSheet>"""
# numFmtId 3 is the built-in "#,##0" and 2 is "0.00" (ECMA-376 Part 1, 18.8.30).
_NUMBER_STYLES = {name: f' s="{STYLE[name]}"' for name in ("int", "float", "time")}


@dataclass(frozen=True)
class Sheet:
    """A sheet: a bold, frozen header row, then rows of cells. `styles[j]` is the style of column
    j's values ("int", "float", "time", "fill" for text colored by its value, or "default")."""

    name: str
    header: Sequence[str]
    rows: Iterable[Sequence[object]]
    styles: Sequence[str]
    widths: Sequence[float] = ()


def column_letter(index: int) -> str:
    """0 -> A, 25 -> Z, 26 -> AA."""
    letters = ""
    index += 1
    while index:
        index, rem = divmod(index - 1, 26)
        letters = chr(65 + rem) + letters
    return letters


def check_xlsx_size(rows: int, columns: int, what: str = "the table") -> None:
    """Refuse a sheet larger than Excel opens (`rows` counts the header row)."""
    from shardline.errors import InputError

    if rows > MAX_XLSX_ROWS or columns > MAX_XLSX_COLUMNS:
        raise InputError(
            f"{what} has {rows:,} rows and {columns:,} columns with the header, more than an .xlsx "
            f"sheet holds (Excel's limit: {MAX_XLSX_ROWS:,} rows, {MAX_XLSX_COLUMNS:,} columns, "
            "A to XFD); write .csv or .json instead"
        )


def _text_cell(ref: str, text: str, style: int) -> str:
    text = _ILLEGAL_XML.sub("", text)[:MAX_CELL_TEXT]
    space = ' xml:space="preserve"' if text != text.strip() else ""
    s = f' s="{style}"' if style else ""
    return f'<c r="{ref}" t="inlineStr"{s}><is><t{space}>{escape(text)}</t></is></c>'


def _cell(ref: str, value: object, style_name: str) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return f'<c r="{ref}" t="b"><v>{int(value)}</v></c>'
    if isinstance(value, int):
        return f'<c r="{ref}"{_NUMBER_STYLES.get(style_name, "")}><v>{value}</v></c>'
    if isinstance(value, float):
        if not math.isfinite(value):
            return ""
        return f'<c r="{ref}"{_NUMBER_STYLES.get(style_name, "")}><v>{value!r}</v></c>'
    text = str(value)
    if not text:
        return ""  # an empty cell stays empty (no zero-length string that formulas see as text)
    style = STYLE.get(f"fill:{text}", 0) if style_name == "fill" else 0
    return _text_cell(ref, text, style)


def _sheet_xml(sheet: Sheet) -> Iterable[str]:
    letters = [column_letter(j) for j in range(len(sheet.header))]
    yield (
        f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<worksheet xmlns="{_MAIN}">'
        '<sheetViews><sheetView workbookViewId="0"><pane ySplit="1" topLeftCell="A2" '
        'activePane="bottomLeft" state="frozen"/></sheetView></sheetViews>'
    )
    if sheet.widths:
        yield (
            "<cols>"
            + "".join(
                f'<col min="{j + 1}" max="{j + 1}" width="{w:g}" customWidth="1"/>'
                for j, w in enumerate(sheet.widths)
            )
            + "</cols>"
        )
    yield "<sheetData>"
    header = "".join(
        _text_cell(f"{letters[j]}1", str(name), STYLE["header"])
        for j, name in enumerate(sheet.header)
    )
    yield f'<row r="1">{header}</row>'
    styles = list(sheet.styles)
    for i, row in enumerate(sheet.rows, start=2):
        if i > MAX_XLSX_ROWS:
            check_xlsx_size(i, len(letters), f"sheet {sheet.name!r}")
        cells = "".join(_cell(f"{letters[j]}{i}", value, styles[j]) for j, value in enumerate(row))
        yield f'<row r="{i}">{cells}</row>'
    yield "</sheetData></worksheet>"


def _entry(name: str) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=_ZIP_DATE)
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def write_xlsx(path: str | Path, sheets: Sequence[Sheet]) -> None:
    """Write the sheets (names unique, at most 31 characters) to an .xlsx at `path`."""
    for sheet in sheets:
        check_xlsx_size(1, len(sheet.header), f"sheet {sheet.name!r}")
    overrides = "".join(
        f'<Override PartName="/xl/worksheets/sheet{i}.xml" ContentType="application/'
        'vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>'
        for i in range(1, len(sheets) + 1)
    )
    content_types = (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
        '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
        '<Default Extension="rels" '
        'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
        '<Default Extension="xml" ContentType="application/xml"/>'
        '<Override PartName="/xl/workbook.xml" ContentType="application/'
        'vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>'
        '<Override PartName="/xl/styles.xml" ContentType="application/'
        'vnd.openxmlformats-officedocument.spreadsheetml.styles+xml"/>'
        f"{overrides}</Types>"
    )
    root_rels = (
        '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
        f'<Relationships xmlns="{_PKG_REL}">'
        f'<Relationship Id="rId1" Type="{_REL}/officeDocument" Target="xl/workbook.xml"/>'
        "</Relationships>"
    )
    sheet_list = "".join(
        f'<sheet name={quoteattr(s.name[:31])} sheetId="{i}" r:id="rId{i}"/>'
        for i, s in enumerate(sheets, start=1)
    )
    workbook = (
        f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
        f'<workbook xmlns="{_MAIN}" xmlns:r="{_REL}">'
        f"<sheets>{sheet_list}</sheets></workbook>"
    )
    rels = "".join(
        f'<Relationship Id="rId{i}" Type="{_REL}/worksheet" Target="worksheets/sheet{i}.xml"/>'
        for i in range(1, len(sheets) + 1)
    )
    rels += f'<Relationship Id="rId{len(sheets) + 1}" Type="{_REL}/styles" Target="styles.xml"/>'
    workbook_rels = (
        f'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
        f'<Relationships xmlns="{_PKG_REL}">{rels}</Relationships>'
    )
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr(_entry("[Content_Types].xml"), content_types)
        archive.writestr(_entry("_rels/.rels"), root_rels)
        archive.writestr(_entry("xl/workbook.xml"), workbook)
        archive.writestr(_entry("xl/_rels/workbook.xml.rels"), workbook_rels)
        archive.writestr(_entry("xl/styles.xml"), _STYLES_XML)
        for i, sheet in enumerate(sheets, start=1):
            _write_sheet(archive, f"xl/worksheets/sheet{i}.xml", sheet)


def _write_sheet(archive: zipfile.ZipFile, name: str, sheet: Sheet) -> None:
    """A worksheet part, streamed in blocks of about 1 MB of XML (rows are never all in memory)."""
    with archive.open(_entry(name), "w") as fh:
        buffer: list[str] = []
        size = 0
        for piece in _sheet_xml(sheet):
            buffer.append(piece)
            size += len(piece)
            if size > 1 << 20:
                fh.write("".join(buffer).encode("utf-8"))
                buffer, size = [], 0
        fh.write("".join(buffer).encode("utf-8"))
