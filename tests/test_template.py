"""The live template: recompute its spreadsheet formulas (tests/formula_eval.py, Excel semantics)
and compare every cell with shardline.ops.roofline, the library the formulas transcribe."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardline.basics.options import RateOverrides
from shardline.cli.main import main
from shardline.hardware import load_chip
from shardline.io.template import COL, LAYOUT, TemplateRow, write_template
from shardline.ops.roofline import matmul
from tests.formula_eval import FUNCTIONS, Workbook

openpyxl = pytest.importorskip("openpyxl")

# Functions Excel, LibreOffice Calc and Google Sheets all provide with the same meaning.
PORTABLE = {"IF", "MAX", "SUM", "SUMPRODUCT", "VLOOKUP", "ROUNDUP", "COUNTIF"}


def _book(path: Path) -> Workbook:
    wb = openpyxl.load_workbook(path)
    return Workbook.from_openpyxl(wb[LAYOUT.sheet])


def _check_row(
    book: Workbook,
    r: int,
    row: TemplateRow,
    chip_name: str,
    dtype: str,
    *,
    flops_per_s: float | None = None,
    mem_bytes_per_s: float | None = None,
) -> None:
    def cell(name: str) -> object:
        return book.value(f"{COL[name]}{r}")

    lib = matmul(
        row.m,
        row.k,
        row.n,
        hw=chip_name,
        dtype=dtype,
        a_dtype=row.a_dtype,
        b_dtype=row.b_dtype,
        out_dtype=row.out_dtype,
        rates=RateOverrides(flops_per_s, mem_bytes_per_s),
    )
    assert cell("flops") == lib.flops  # 2MKN, exact
    assert cell("bytes") == lib.bytes["total"]  # whole bytes per operand, exact
    assert cell("compute_dtype") == lib.dtypes["compute"]
    assert cell("bound") == lib.bound
    for name in (
        "intensity_flop_per_byte",
        "ridge_flop_per_byte",
        "t_compute_s",
        "t_memory_s",
        "t_lower_s",
        "t_upper_s",
    ):
        assert cell(name) == pytest.approx(float(getattr(lib, name)), rel=1e-15), name
    crit = cell("critical_m")
    if lib.critical_m is None:
        assert crit == "none"
    elif crit != lib.critical_m:
        # The formula is the closed form ceil(need / bracket); the library also corrects the last
        # step for byte and float rounding. They may differ by one only at an exact boundary.
        assert abs(crit - lib.critical_m) == 1
    count = row.count if row.count is not None else 1
    assert cell("count_x_t_lower_s") == pytest.approx(count * float(lib.t_lower_s), rel=1e-15)


def test_template_rows_match_the_library(tmp_path: Path) -> None:
    rows = [
        TemplateRow("square", 8192, 8192, 8192, 2),
        TemplateRow("decode", 16, 4096, 16384, 32),
        TemplateRow("int8 weights", 128, 4096, 4096, None, "bf16", "int8", "bf16"),
        TemplateRow("int4 odd", 7, 333, 129, 1, "bf16", "int4", "bf16"),  # 0.5 B rounds up
        TemplateRow("fp32", 1000, 1000, 1000, 3, "fp32", "fp32", "fp32"),
    ]
    path = tmp_path / "t.xlsx"
    write_template(path, load_chip("a100-40gb"), rows, dtype="bf16", n_rows=8)
    book = _book(path)
    first = LAYOUT.first_row
    for i, row in enumerate(rows):
        _check_row(book, first + i, row, "a100-40gb", "bf16")
    # rows left blank stay blank instead of #DIV/0!
    assert book.value(f"{COL['t_lower_s']}{first + len(rows)}") == ""
    # totals over count: sum of count x value over the filled rows (blank count = 1)
    libs = [
        matmul(
            r.m,
            r.k,
            r.n,
            hw="a100-40gb",
            a_dtype=r.a_dtype,
            b_dtype=r.b_dtype,
            out_dtype=r.out_dtype,
        )
        for r in rows
    ]
    counts = [r.count or 1 for r in rows]
    t = LAYOUT.totals_row
    assert book.value(f"{COL['flops']}{t}") == sum(
        c * lib.flops for c, lib in zip(counts, libs, strict=True)
    )
    assert book.value(f"{COL['t_lower_s']}{t}") == pytest.approx(
        sum(c * lib.t_lower_s for c, lib in zip(counts, libs, strict=True)), rel=1e-14
    )
    n_memory = sum(lib.bound == "memory" for lib in libs)
    assert book.value(f"{COL['bound']}{t}") == f"{n_memory} memory, {len(rows) - n_memory} compute"
    assert book.functions_used <= PORTABLE <= FUNCTIONS


def test_template_is_live_when_the_hardware_block_changes(tmp_path: Path) -> None:
    """Edit the bandwidth and the bf16 peak: results follow, as with the library's overrides."""
    row = TemplateRow("x", 256, 8192, 8192, 1)
    path = tmp_path / "t.xlsx"
    write_template(path, load_chip("h100-sxm"), [row], n_rows=1)
    book = _book(path)
    _check_row(book, LAYOUT.first_row, row, "h100-sxm", "bf16")
    book.set(LAYOUT.bandwidth_cell.replace("$", ""), 8.2e11)
    bf16_row = _dtype_row(book, "bf16")
    book.set(f"C{bf16_row}", 1.97e14)
    _check_row(
        book, LAYOUT.first_row, row, "h100-sxm", "bf16", flops_per_s=1.97e14, mem_bytes_per_s=8.2e11
    )
    # seed 001 Question 2 numbers: with P = 1.97e14 and W = 8.2e11 the ridge is 240 FLOP/B
    assert book.value(f"{COL['ridge_flop_per_byte']}{LAYOUT.first_row}") == pytest.approx(
        1.97e14 / 8.2e11
    )


dims = st.integers(min_value=1, max_value=70_000)
dtypes = st.sampled_from(["bf16", "fp16", "fp8", "int8", "int4", "fp32"])


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(m=dims, k=dims, n=dims, a=dtypes, b=dtypes, out=dtypes)
def test_template_formulas_equal_library_for_any_shape(
    tmp_path: Path, m: int, k: int, n: int, a: str, b: str, out: str
) -> None:
    chip = load_chip("h100-sxm")  # computes in fp8, bf16, fp16, int8, fp32 (no int4 peak)
    compute = b if _bits(b) > _bits(a) else a  # the wider input's dtype sets the peak
    if compute not in chip.peak_flops_per_s:
        return  # the library raises for a dtype the chip cannot compute in; the sheet shows #DIV/0!
    row = TemplateRow("h", m, k, n, 1, a, b, out)
    path = tmp_path / "h.xlsx"
    write_template(path, chip, [row], n_rows=1)
    _check_row(_book(path), LAYOUT.first_row, row, "h100-sxm", "bf16")


def _dtype_row(book: Workbook, name: str) -> int:
    first = LAYOUT.dtype_first_row
    return next(r for r in range(first, first + 9) if book.value(f"A{r}") == name)


def _bits(name: str) -> int:
    from shardline.basics.dtypes import dtype_bits

    return dtype_bits(name)


def test_template_cli_from_sheet_and_refusals(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "shapes.csv"
    src.write_text(
        "name,M,K,N,count\nqkv,4096,4096,12288,2\ndecode,8,8192,8192,\n", encoding="utf-8"
    )
    out = tmp_path / "t.xlsx"
    assert main(["template", str(out), "--hw", "a100-40gb", "--from", str(src), "--rows", "4"]) == 0
    text = capsys.readouterr().out
    assert text.startswith(f"wrote {out}: live roofline template for NVIDIA A100")
    book = _book(out)
    assert book.value(f"A{LAYOUT.first_row}") == "qkv"
    # qkv: F = 2*4096*4096*12288 = 412,316,860,416 FLOP
    assert book.value(f"{COL['flops']}{LAYOUT.first_row}") == 2 * 4096 * 4096 * 12288
    # decode on A100: Q = 2*8*8192 + 2*8192*8192 + 2*8*8192 B, t = Q / 1.555e12 B/s (memory-bound)
    q = 2 * 8 * 8192 + 2 * 8192 * 8192 + 2 * 8 * 8192
    assert book.value(f"{COL['t_lower_s']}{LAYOUT.first_row + 1}") == pytest.approx(q / 1.555e12)
    assert book.value(f"{COL['bound']}{LAYOUT.first_row + 1}") == "memory"
    wb = openpyxl.load_workbook(out)
    assert wb.calculation.fullCalcOnLoad
    rules = wb[LAYOUT.sheet].conditional_formatting
    assert len(list(rules)) == 1  # the bound column is colored by regime

    # refuse an existing output without --force, the input even with --force, a missing directory
    assert main(["template", str(out), "--hw", "a100-40gb"]) == 2
    assert main(["template", str(src.with_suffix(".xlsx")), "--from", str(src)]) == 0
    assert main(["template", str(tmp_path / "nodir" / "t.xlsx")]) == 2
    assert main(["template", str(tmp_path / "t.csv")]) == 2
    captured = capsys.readouterr()
    errors = [line for line in captured.err.splitlines() if line]
    assert len(errors) == 3 and all(line.startswith("error: ") for line in errors)
    assert "already exists" in errors[0] and "does not exist" in errors[1] and ".xlsx" in errors[2]


def test_template_with_flops_override(tmp_path: Path) -> None:
    out = tmp_path / "v5e.xlsx"
    assert (
        main(["template", str(out), "--hw", "tpu-v5e", "--flops-per-s", "1.5e14", "--rows", "3"])
        == 0
    )
    book = _book(out)
    bf16_row = _dtype_row(book, "bf16")
    assert book.value(f"C{bf16_row}") == 1.5e14
    assert math.isclose(
        book.value(f"{COL['ridge_flop_per_byte']}{LAYOUT.first_row}"), 1.5e14 / 8.19e11
    )


def test_template_recomputes_in_libreoffice(tmp_path: Path) -> None:
    """An independent spreadsheet engine: LibreOffice Calc recomputes the workbook on load (the
    file has no cached values) and must print the library's numbers. Runs where `soffice` exists."""
    import csv
    import shutil
    import subprocess

    soffice = shutil.which("soffice") or shutil.which("libreoffice")
    if soffice is None:
        pytest.skip("LibreOffice (soffice) is not installed")
    rows = [
        TemplateRow("sq", 8192, 8192, 8192, 2),
        TemplateRow("dec", 16, 4096, 16384, 32),
        TemplateRow("odd", 7, 333, 129, 1, "bf16", "int4", "bf16"),
    ]
    path = tmp_path / "lo.xlsx"
    write_template(path, load_chip("a100-40gb"), rows, n_rows=4)
    subprocess.run(
        [
            soffice,
            "--headless",
            "--norestore",
            f"-env:UserInstallation=file://{tmp_path / 'profile'}",
            "--convert-to",
            "csv",
            "--outdir",
            str(tmp_path / "out"),
            str(path),
        ],
        check=True,
        capture_output=True,
        timeout=180,
    )
    lines = list(csv.reader((tmp_path / "out" / "lo.csv").read_text(encoding="utf-8").splitlines()))
    header = lines[LAYOUT.header_row - 1]
    for i, row in enumerate(rows):
        got = dict(zip(header, lines[LAYOUT.first_row - 1 + i], strict=False))
        lib = matmul(
            row.m,
            row.k,
            row.n,
            hw="a100-40gb",
            a_dtype=row.a_dtype,
            b_dtype=row.b_dtype,
            out_dtype=row.out_dtype,
        )
        assert int(got["flops"]) == lib.flops and int(got["bytes"]) == lib.bytes["total"]
        assert got["bound"] == lib.bound
        assert float(got["t_lower_s"]) == pytest.approx(float(lib.t_lower_s), rel=1e-12)
        assert got["critical_m"] == ("none" if lib.critical_m is None else str(lib.critical_m))


def test_template_keeps_formula_like_names_as_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # a name that looks like a formula must not become one (openpyxl stores "=..." as a formula)
    src = tmp_path / "shapes.csv"
    src.write_text('name,M,K,N\n"=1+1",8,8,8\n"=HYPERLINK(""x"")",16,16,16\n', encoding="utf-8")
    out = tmp_path / "t.xlsx"
    assert main(["template", str(out), "--hw", "a100-40gb", "--from", str(src), "--rows", "2"]) == 0
    capsys.readouterr()
    ws = openpyxl.load_workbook(out)[LAYOUT.sheet]
    first = LAYOUT.first_row
    names = [ws[f"A{first + i}"] for i in range(2)]
    assert [c.value for c in names] == ["=1+1", '=HYPERLINK("x")']
    assert [c.data_type for c in names] == ["s", "s"]  # text, not formulas
    assert ws[f"{COL['flops']}{first}"].data_type == "f"  # the computed columns stay formulas
    assert _book(out).value(f"{COL['flops']}{first}") == 2 * 8 * 8 * 8
