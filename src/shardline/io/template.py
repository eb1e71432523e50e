"""A live roofline workbook: every result is a spreadsheet formula over a hardware block.

The workbook keeps working in Excel, LibreOffice or Google Sheets with no shardline installed:
change the bandwidth, a peak, a dtype or a shape and every time recomputes. It uses only functions
the three share (IF, MAX, VLOOKUP, ROUNDUP, SUMPRODUCT, COUNTIF) and absolute references into one
sheet.

The formulas are the ones in docs/single-device.md, in the same order of operations as
`shardline.ops.roofline`, so that a recomputation gives the library's numbers exactly.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shardline.basics.dtypes import DTYPE_BITS, canonical_dtype
from shardline.errors import InputError
from shardline.hardware import Chip
from shardline.io.tables import BOUND_FILLS, XLSX_FORMATS

if TYPE_CHECKING:
    from openpyxl.worksheet.worksheet import Worksheet

__all__ = [
    "TemplateRow",
    "TemplateLayout",
    "LAYOUT",
    "write_template",
    "DEFAULT_ROWS",
    "EXAMPLE_ROWS",
]

_ILLEGAL_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ufffe\uffff]")
DEFAULT_ROWS = 200  # formula rows below the header
MAX_ROWS = 100_000


@dataclass(frozen=True)
class TemplateRow:
    name: str
    m: int | None = None
    k: int | None = None
    n: int | None = None
    count: int | None = None
    a_dtype: str | None = None
    b_dtype: str | None = None
    out_dtype: str | None = None


# Shown when no rows are given: a large square multiply, a prefill-sized and a decode-sized one.
EXAMPLE_ROWS = (
    TemplateRow("square 8192", 8192, 8192, 8192, 1),
    TemplateRow("prefill: 4096 tokens x 4096x16384 weight", 4096, 4096, 16384, 1),
    TemplateRow("decode: 16 tokens x 4096x16384 weight", 16, 4096, 16384, 1),
)


@dataclass(frozen=True)
class TemplateLayout:
    """Where things are (1-based rows, column letters), shared with the tests that recompute it."""

    sheet: str = "roofline"
    chip_row: int = 4
    bandwidth_cell: str = "$B$5"
    default_dtype_cell: str = "$B$6"
    dtype_header_row: int = 8
    totals_row: int = 19
    header_row: int = 20

    @property
    def dtype_first_row(self) -> int:
        return self.dtype_header_row + 1

    @property
    def dtype_range(self) -> str:
        last = self.dtype_first_row + len(DTYPE_BITS) - 1
        return f"$A${self.dtype_first_row}:$C${last}"

    @property
    def first_row(self) -> int:
        return self.header_row + 1


LAYOUT = TemplateLayout()

# (header, column letter); inputs A..H, formulas I..Y. `runs` is the count, 1 where blank.
COLUMNS: tuple[tuple[str, str], ...] = (
    ("name", "A"),
    ("M", "B"),
    ("K", "C"),
    ("N", "D"),
    ("count", "E"),
    ("a_dtype", "F"),
    ("b_dtype", "G"),
    ("out_dtype", "H"),
    ("s_a_bytes", "I"),
    ("s_b_bytes", "J"),
    ("s_out_bytes", "K"),
    ("compute_dtype", "L"),
    ("peak_flops_per_s", "M"),
    ("flops", "N"),
    ("bytes", "O"),
    ("intensity_flop_per_byte", "P"),
    ("ridge_flop_per_byte", "Q"),
    ("bound", "R"),
    ("t_compute_s", "S"),
    ("t_memory_s", "T"),
    ("t_lower_s", "U"),
    ("t_upper_s", "V"),
    ("critical_m", "W"),
    ("runs", "X"),
    ("count_x_t_lower_s", "Y"),
)
COL = dict(COLUMNS)
INPUT_COLUMNS = ("name", "M", "K", "N", "count", "a_dtype", "b_dtype", "out_dtype")


def row_formulas(r: int, layout: TemplateLayout = LAYOUT) -> dict[str, str]:
    """The formula of every computed column of row r (each blank while M is blank)."""
    c = {name: f"{letter}{r}" for name, letter in COLUMNS}
    bw, default, table = layout.bandwidth_cell, layout.default_dtype_cell, layout.dtype_range

    def dtype_of(cell: str) -> str:
        return f'IF({cell}="",{default},{cell})'

    body = {
        # bytes per element of each operand's storage dtype (int4 = 0.5)
        "s_a_bytes": f"VLOOKUP({dtype_of(c['a_dtype'])},{table},2,FALSE)",
        "s_b_bytes": f"VLOOKUP({dtype_of(c['b_dtype'])},{table},2,FALSE)",
        "s_out_bytes": f"VLOOKUP({dtype_of(c['out_dtype'])},{table},2,FALSE)",
        # compute in the wider input's dtype (bf16 activations x int8 weights compute in bf16)
        "compute_dtype": (
            f"IF({c['s_b_bytes']}>{c['s_a_bytes']},{dtype_of(c['b_dtype'])},"
            f"{dtype_of(c['a_dtype'])})"
        ),
        "peak_flops_per_s": f"VLOOKUP({c['compute_dtype']},{table},3,FALSE)",
        # F = 2MKN
        "flops": f"2*{c['M']}*{c['K']}*{c['N']}",
        # Q = sA*M*K + sB*K*N + sC*M*N, each rounded up to whole bytes
        "bytes": (
            f"ROUNDUP({c['s_a_bytes']}*{c['M']}*{c['K']},0)"
            f"+ROUNDUP({c['s_b_bytes']}*{c['K']}*{c['N']},0)"
            f"+ROUNDUP({c['s_out_bytes']}*{c['M']}*{c['N']},0)"
        ),
        "intensity_flop_per_byte": f"{c['flops']}/{c['bytes']}",  # I = F / Q
        "ridge_flop_per_byte": f"{c['peak_flops_per_s']}/{bw}",  # R = P / W
        "bound": f'IF({c["t_compute_s"]}>={c["t_memory_s"]},"compute","memory")',
        "t_compute_s": f"{c['flops']}/{c['peak_flops_per_s']}",  # F / P
        "t_memory_s": f"{c['bytes']}/{bw}",  # Q / W
        "t_lower_s": f"MAX({c['t_compute_s']},{c['t_memory_s']})",  # perfect overlap
        "t_upper_s": f"{c['t_compute_s']}+{c['t_memory_s']}",  # no overlap
        # smallest M with M*(2KN/P - (sA*K + sC*N)/W) >= sB*K*N/W; none when the bracket <= 0
        "critical_m": (
            f"IF(2*{c['K']}*{c['N']}/{c['peak_flops_per_s']}-({c['s_a_bytes']}*{c['K']}"
            f"+{c['s_out_bytes']}*{c['N']})/{bw}>0,MAX(1,ROUNDUP({c['s_b_bytes']}*{c['K']}"
            f"*{c['N']}/{bw}/(2*{c['K']}*{c['N']}/{c['peak_flops_per_s']}-({c['s_a_bytes']}"
            f'*{c["K"]}+{c["s_out_bytes"]}*{c["N"]})/{bw}),0)),"none")'
        ),
        "runs": f'IF({c["count"]}="",1,{c["count"]})',
        "count_x_t_lower_s": f"{c['runs']}*{c['t_lower_s']}",
    }
    return {name: f'=IF({c["M"]}="","",{text})' for name, text in body.items()}


def totals_formulas(first: int, last: int, layout: TemplateLayout = LAYOUT) -> dict[str, str]:
    """Totals over count (a blank count counts once) across rows first..last."""

    def rng(name: str) -> str:
        return f"${COL[name]}${first}:${COL[name]}${last}"

    out: dict[str, str] = {}
    for name in ("flops", "bytes", "t_compute_s", "t_memory_s", "t_upper_s"):
        out[name] = f"=SUMPRODUCT({rng('runs')},{rng(name)})"  # blank rows are text: they add 0
    out["t_lower_s"] = f"=SUM({rng('count_x_t_lower_s')})"
    out["bound"] = (
        f'=COUNTIF({rng("bound")},"memory")&" memory, "'
        f'&COUNTIF({rng("bound")},"compute")&" compute"'
    )
    return out


def _dtype_name(text: str | None) -> str | None:
    return canonical_dtype(text) if text else None


def _yellow() -> object:
    from openpyxl.styles import PatternFill

    return PatternFill("solid", fgColor="FFF2CC")


def _bold() -> object:
    from openpyxl.styles import Font

    return Font(bold=True)


def _put_text(ws: Worksheet, ref: str, text: str) -> None:
    """Write `text` into cell `ref` as a text cell. openpyxl stores a string that starts with "="
    as a live formula: a chip name, display name or source from a user's file (`=HYPERLINK(...)`,
    `=cmd|' /C calc'!A0`, a DDE call) must stay text. Control characters XML cannot hold (openpyxl
    would raise) are dropped."""
    cell = ws[ref]
    cell.value = _ILLEGAL_XML.sub("", str(text))
    cell.data_type = "s"


def _write_header(ws: Worksheet, chip: Chip, default: str, layout: TemplateLayout) -> None:
    """The title, the formulas in words, the chip, its HBM bandwidth and the default dtype."""
    from openpyxl.styles import Font

    ws["A1"] = "shardline roofline template"
    ws["A1"].font = Font(bold=True, size=14)
    ws["A2"] = (
        "Edit the yellow cells; every other number is a formula (F = 2MKN, "
        "Q = sA*M*K + sB*K*N + sC*M*N, I = F/Q, R = P/W, t = max(F/P, Q/W))."
    )
    r = layout.chip_row
    ws[f"A{r}"] = "chip"
    _put_text(ws, f"B{r}", chip.display_name)
    _put_text(ws, f"C{r}", chip.name)
    bw_cell, default_cell = (
        layout.bandwidth_cell.replace("$", ""),
        layout.default_dtype_cell.replace("$", ""),
    )
    ws[f"A{r + 1}"], ws[bw_cell] = "HBM bandwidth (bytes/s)", float(chip.mem_bytes_per_s)
    ws[bw_cell].number_format = "0.000E+00"
    ws[bw_cell].fill = _yellow()
    _put_text(ws, f"C{r + 1}", chip.sources.get("memory.bytes_per_s", ""))
    ws[f"A{r + 2}"], ws[default_cell] = "default dtype (blank dtype cells)", default
    ws[default_cell].fill = _yellow()


def _write_dtype_table(ws: Worksheet, chip: Chip, layout: TemplateLayout) -> None:
    """Every dtype's bytes per element and the chip's peak for it (with its source)."""
    h = layout.dtype_header_row
    for col, text in zip(
        "ABCD", ("dtype", "bytes_per_element", "peak_flops_per_s", "source"), strict=True
    ):
        ws[f"{col}{h}"] = text
        ws[f"{col}{h}"].font = _bold()
    for i, (name, bits) in enumerate(DTYPE_BITS.items()):
        row = layout.dtype_first_row + i
        ws[f"A{row}"], ws[f"B{row}"] = name, bits / 8
        if name in chip.peak_flops_per_s:
            ws[f"C{row}"] = float(chip.peak_flops_per_s[name])
            ws[f"C{row}"].number_format = "0.000E+00"
            _put_text(ws, f"D{row}", chip.sources.get(f"peak_flops_per_s.{name}", ""))
        else:
            _put_text(ws, f"D{row}", f"{chip.name} has no {name} peak: storage only")
        ws[f"C{row}"].fill = _yellow()


def _write_column_headers(ws: Worksheet, layout: TemplateLayout) -> None:
    for name, letter in COLUMNS:
        cell = ws[f"{letter}{layout.header_row}"]
        cell.value = name
        cell.font = _bold()
        ws.column_dimensions[letter].width = max(9, min(24, len(name) + 2))
    ws.column_dimensions["A"].width = 34


def _number_formats() -> dict[str, str]:
    """The number format of each computed column that has one."""
    formats = {
        "flops": XLSX_FORMATS["int"],
        "bytes": XLSX_FORMATS["int"],
        "intensity_flop_per_byte": XLSX_FORMATS["float"],
        "ridge_flop_per_byte": XLSX_FORMATS["float"],
        "peak_flops_per_s": "0.000E+00",
        "critical_m": XLSX_FORMATS["int"],
    }
    formats.update({name: XLSX_FORMATS["time"] for name, _ in COLUMNS if name.endswith("_s")})
    return formats


def _write_inputs(ws: Worksheet, rr: int, given: TemplateRow) -> None:
    values = (
        given.name,
        given.m,
        given.k,
        given.n,
        given.count,
        _dtype_name(given.a_dtype),
        _dtype_name(given.b_dtype),
        _dtype_name(given.out_dtype),
    )
    for name, value in zip(INPUT_COLUMNS, values, strict=True):
        if isinstance(value, str):
            _put_text(ws, f"{COL[name]}{rr}", value)  # a name from the user's sheet stays text
        elif value is not None:
            ws[f"{COL[name]}{rr}"] = value


def _write_rows(
    ws: Worksheet, rows: Sequence[TemplateRow], n_rows: int, layout: TemplateLayout
) -> None:
    """The input rows (yellow, the given ones filled in) and every row's formulas."""
    formats, yellow = _number_formats(), _yellow()
    for i in range(n_rows):
        rr = layout.first_row + i
        if i < len(rows):
            _write_inputs(ws, rr, rows[i])
        for name in INPUT_COLUMNS:
            ws[f"{COL[name]}{rr}"].fill = yellow
        for name, formula in row_formulas(rr, layout).items():
            cell = ws[f"{COL[name]}{rr}"]
            cell.value = formula
            if name in formats:
                cell.number_format = formats[name]


def _write_totals(ws: Worksheet, first: int, last: int, layout: TemplateLayout) -> None:
    formats, bold = _number_formats(), _bold()
    t = layout.totals_row
    ws[f"A{t}"] = "total over count"
    ws[f"A{t}"].font = bold
    for name, formula in totals_formulas(first, last, layout).items():
        cell = ws[f"{COL[name]}{t}"]
        cell.value = formula
        cell.font = bold
        if name in formats:
            cell.number_format = formats[name]


def _color_bounds(ws: Worksheet, first: int, last: int) -> None:
    """Bound cells filled by regime (conditional formatting: it follows the formulas)."""
    from openpyxl.formatting.rule import CellIsRule
    from openpyxl.styles import PatternFill

    bound_range = f"{COL['bound']}{first}:{COL['bound']}{last}"
    for regime in ("compute", "memory"):
        ws.conditional_formatting.add(
            bound_range,
            CellIsRule(
                operator="equal",
                formula=[f'"{regime}"'],
                fill=PatternFill("solid", fgColor=BOUND_FILLS[regime], bgColor=BOUND_FILLS[regime]),
            ),
        )


def write_template(
    path: str | Path,
    chip: Chip,
    rows: Sequence[TemplateRow] = EXAMPLE_ROWS,
    *,
    dtype: str = "bf16",
    n_rows: int = DEFAULT_ROWS,
    layout: TemplateLayout = LAYOUT,
) -> None:
    """Write the workbook to `path` (the caller makes the write atomic and checks the path)."""
    from openpyxl import Workbook

    if not 1 <= n_rows <= MAX_ROWS:
        raise InputError(f"--rows must be between 1 and {MAX_ROWS:,}")
    n_rows = max(n_rows, len(rows))
    default = canonical_dtype(dtype)
    wb = Workbook()
    ws = wb.active
    ws.title = layout.sheet
    _write_header(ws, chip, default, layout)
    _write_dtype_table(ws, chip, layout)
    _write_column_headers(ws, layout)
    first, last = layout.first_row, layout.first_row + n_rows - 1
    _write_rows(ws, rows, n_rows, layout)
    _write_totals(ws, first, last, layout)
    _color_bounds(ws, first, last)
    ws.freeze_panes = f"B{first}"
    wb.calculation.fullCalcOnLoad = True  # Excel recomputes every formula on opening
    wb.save(path)


def rows_from_table(table: Any) -> list[TemplateRow]:
    """Template rows from a ShapeTable (good rows only), keeping names, counts and dtypes."""
    labels = table.labels()
    out: list[TemplateRow] = []
    for i in range(len(table)):
        if not table.ok[i]:
            continue
        dt = str(table.dtype[i]) if table.dtype is not None and table.dtype[i] else None
        out.append(
            TemplateRow(
                labels[i],
                int(table.m[i]),
                int(table.k[i]),
                int(table.n[i]),
                int(table.count[i]),
                dt,
                dt,
                dt,
            )
        )
    return out
