"""Hostile inputs at the file edges (issue 14): exclusive outputs, non-regular and oversized input
files, xlsx bombs, formula injection in CSV, HTML and links in Markdown, OS errors and signals as
one `error:` line. The whole catalogue (benchmarks/bench_hostile.py) runs in the slow tests."""

from __future__ import annotations

import csv
import json
import os
import re
import signal
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest

from shardline.cli.main import main
from shardline.errors import InputError
from shardline.io import sheet_limits, xlsx_writer
from shardline.io.inputs import read_input_bytes
from shardline.io.safe_text import csv_safe, md_text
from shardline.io.sheets import read_shape_rows
from shardline.io.tables import (
    Column,
    OutputTable,
    atomic_write,
    check_output_path,
    table_payload,
    write_table,
)

ROOT = Path(__file__).resolve().parent.parent
SHAPES = "name,m,k,n\nsq,64,64,64\n"


def _table(names: list[str], values: list[float] | None = None) -> OutputTable:
    values = values if values is not None else [float(i) for i in range(len(names))]
    return OutputTable(
        [Column("name", names, "text"), Column("t_s", np.array(values), "time")], title="t"
    )


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # the parser refuses the flag itself (one error line, status 2)
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


# --- 1. outputs: created exclusively unless --force -------------------------------------------


def test_output_that_appears_during_the_run_is_not_replaced(tmp_path: Path) -> None:
    out = check_output_path(tmp_path / "out.csv", force=False)  # nothing there at the start
    out.write_text("the other run's output\n", encoding="utf-8")  # a second run finishes first
    with pytest.raises(InputError, match="appeared while this run was writing"):
        write_table(out, _table(["a"]))
    assert out.read_text(encoding="utf-8") == "the other run's output\n"
    assert _leftovers(tmp_path) == []


def test_force_replaces_atomically(tmp_path: Path) -> None:
    out = tmp_path / "out.csv"
    out.write_text("old\n", encoding="utf-8")
    with pytest.raises(InputError, match="already exists"):
        check_output_path(out, force=False)
    write_table(check_output_path(out, force=True), _table(["a"], [0.5]))
    assert out.read_text(encoding="utf-8") == "name,t_s\na,0.5\n"
    # an explicit `replace=False` refuses even a checked path
    with pytest.raises(InputError, match="appeared"):
        atomic_write(out, lambda tmp: tmp.write_bytes(b"x") and None, replace=False)
    assert _leftovers(tmp_path) == []


def test_empty_output_name_is_an_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.csv"
    src.write_text(SHAPES, encoding="utf-8")
    for name in ("", " "):
        code, err = _run(capsys, "sheet", str(src), "-o", name)
        lines = err.strip().splitlines()
        assert code == 2 and len(lines) == 1 and lines[0].startswith("error:"), err
        assert "empty" in lines[0]


def test_unwritable_outputs_are_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = tmp_path / "in.csv"
    src.write_text(SHAPES, encoding="utf-8")
    for out, message in (
        (str(tmp_path / ("a" * 300 + ".csv")), "File name too long"),
        (str(src / "out.csv"), "does not exist"),
        ("/proc/shardline-out.csv", "cannot write /proc/shardline-out.csv"),
    ):
        code, err = _run(capsys, "sheet", str(src), "-o", out)
        assert code == 2 and err.startswith("error: ") and err.count("\n") == 1
        assert message in err and "Traceback" not in err
    assert _leftovers(tmp_path) == []


# --- 2. input files: regular files only, bounded expansion ------------------------------------


def test_non_regular_input_files_are_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    (tmp_path / "dir.csv").mkdir()
    (tmp_path / "zero.csv").symlink_to("/dev/zero")
    for path, kind in (
        (fifo, "a FIFO (named pipe)"),
        (tmp_path / "dir.csv", "a directory"),
        (tmp_path / "zero.csv", "a character device"),
    ):
        with pytest.raises(InputError, match=re.escape(f"is {kind}, not a regular file")):
            read_shape_rows(path)


def test_workload_fifo_and_nested_toml(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fifo = tmp_path / "w.toml"
    os.mkfifo(fifo)
    code, err = _run(capsys, "stack", str(fifo))
    assert code == 2 and "is a FIFO (named pipe), not a regular workload file" in err
    nested = tmp_path / "nested.toml"
    nested.write_text("x = " + "[" * 2000 + "]" * 2000 + "\n", encoding="utf-8")
    code, err = _run(capsys, "stack", str(nested))
    assert code == 2 and err == f"error: cannot read {nested}: nested too deeply\n"


def test_permission_denied_is_an_input_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "in.csv"
    path.write_text(SHAPES, encoding="utf-8")

    def denied(*args: object, **kwargs: object) -> None:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr("shardline.io.inputs.open", denied, raising=False)
    with pytest.raises(InputError, match=f"cannot read sheet {path}: Permission denied"):
        read_input_bytes(path, "sheet")


def test_nul_byte_anywhere_in_a_csv(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = tmp_path / "in.csv"
    text = SHAPES * 500 + "evil\x00,1,1,1\n"
    src.write_text(text, encoding="utf-8")
    out = tmp_path / "t.xlsx"
    code, err = _run(capsys, "template", str(out), "--from", str(src))
    offset = text.index("\x00")
    assert code == 2
    assert (
        err == f"error: cannot read {src}: it is a binary file, not CSV text (a NUL byte at "
        f"offset {offset:,})\n"
    )
    assert not out.exists() and _leftovers(tmp_path) == []


def _xlsx(path: Path, rows_xml: str, shared: str | None = None) -> Path:
    main_ns = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
    rel = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
    pkg = "http://schemas.openxmlformats.org/package/2006/relationships"
    ct = "application/vnd.openxmlformats-officedocument.spreadsheetml"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr(
            "[Content_Types].xml",
            '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
            '<Default Extension="rels" ContentType="application/vnd.openxmlformats-package.'
            'relationships+xml"/><Default Extension="xml" ContentType="application/xml"/>'
            f'<Override PartName="/xl/workbook.xml" ContentType="{ct}.sheet.main+xml"/>'
            f'<Override PartName="/xl/worksheets/sheet1.xml" ContentType="{ct}.worksheet+xml"/>'
            f'<Override PartName="/xl/sharedStrings.xml" ContentType="{ct}.sharedStrings+xml"/>'
            "</Types>",
        )
        z.writestr(
            "_rels/.rels",
            f'<Relationships xmlns="{pkg}"><Relationship Id="rId1" Type="{rel}/officeDocument" '
            'Target="xl/workbook.xml"/></Relationships>',
        )
        z.writestr(
            "xl/workbook.xml",
            f'<workbook xmlns="{main_ns}" xmlns:r="{rel}"><sheets><sheet name="s" sheetId="1" '
            'r:id="rId1"/></sheets></workbook>',
        )
        z.writestr(
            "xl/_rels/workbook.xml.rels",
            f'<Relationships xmlns="{pkg}"><Relationship Id="rId1" Type="{rel}/worksheet" '
            'Target="worksheets/sheet1.xml"/><Relationship Id="rId2" '
            f'Type="{rel}/sharedStrings" Target="sharedStrings.xml"/></Relationships>',
        )
        z.writestr(
            "xl/sharedStrings.xml",
            f'<sst xmlns="{main_ns}"><si><t>{shared or "x"}</t></si></sst>',
        )
        head = (
            '<row r="1"><c r="A1" t="inlineStr"><is><t>m</t></is></c><c r="B1" '
            't="inlineStr"><is><t>k</t></is></c><c r="C1" t="inlineStr"><is><t>n</t></is></c>'
            "</row>"
        )
        z.writestr(
            "xl/worksheets/sheet1.xml",
            f'<worksheet xmlns="{main_ns}"><sheetData>{head}{rows_xml}</sheetData></worksheet>',
        )
    return path


def test_xlsx_bombs_stop_at_the_limits(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # a cell in column XFD (16,384) on each row, under a header of 3 cells: with the limit
    # lowered to 1,000,000 cells, rows 2-62 make 3 + 61 x 16,384 = 999,427 and row 63 passes it
    monkeypatch.setattr(sheet_limits, "MAX_SHEET_CELLS", 1_000_000)
    rows = "".join(f'<row r="{r}"><c r="XFD{r}"><v>1</v></c></row>' for r in range(2, 102))
    with pytest.raises(InputError, match=r"more than 1,000,000 cells by row 63 "):
        read_shape_rows(_xlsx(tmp_path / "xfd.xlsx", rows))
    # a row past Excel's last row
    monkeypatch.setattr(sheet_limits, "MAX_XLSX_ROWS", 50)
    with pytest.raises(InputError, match="more than 50 rows"):
        read_shape_rows(
            _xlsx(tmp_path / "far.xlsx", '<row r="900000000"><c r="A900000000"><v>1</v></c></row>')
        )
    # a shared-strings part larger than its limit is refused before it is parsed
    monkeypatch.setattr(sheet_limits, "MAX_SHARED_STRINGS_BYTES", 1000)
    with pytest.raises(
        InputError, match=r"xl/sharedStrings.xml expands to \d[\d,]* bytes \(limit 1,000\)"
    ):
        read_shape_rows(_xlsx(tmp_path / "sst.xlsx", "", shared="A" * 2000))
    # one cell longer than Excel's 32,767 characters
    long_cell = f'<row r="2"><c r="A2" t="inlineStr"><is><t>{"B" * 40_000}</t></is></c></row>'
    with pytest.raises(InputError, match="a cell of 40,000 characters"):
        read_shape_rows(_xlsx(tmp_path / "long.xlsx", long_cell))


# --- 3. formula injection in CSV, HTML and links in Markdown ----------------------------------


def test_csv_neutralizes_formulas_but_not_numbers(tmp_path: Path) -> None:
    formulas = [
        '=HYPERLINK("http://x","y")',
        "+cmd|' /C calc'!A0",
        "@SUM(1+1)",
        "-2+3+cmd|' /C calc'!A0",
        "\t=1+1",
        "\r=1+1",
    ]
    plain = ["-5", "+1.5e3", "x=1", "a-b"]
    table = OutputTable(
        [
            Column("=evil header", formulas + plain, "text"),
            Column("value", np.array([-1.5] * 10), "float"),
        ]
    )
    out = tmp_path / "out.csv"
    write_table(out, table)
    with out.open(encoding="utf-8", newline="") as fh:
        rows = list(csv.reader(fh))
    assert rows[0] == ["'=evil header", "value"]
    neutral = ["'" + f.replace("\r", "\n") for f in formulas]  # a CR inside a cell: LF, quoted
    assert [r[0] for r in rows[1:]] == neutral + plain
    assert {r[1] for r in rows[1:]} == {"-1.5"}  # numbers stay numbers
    assert csv_safe(-5) == -5 and csv_safe("-5") == "-5" and csv_safe("-inf") == "'-inf"


def test_markdown_escapes_html_and_links(tmp_path: Path) -> None:
    names = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "[x](javascript:a)"]
    out = tmp_path / "out.md"
    write_table(out, _table(names))
    text = out.read_text(encoding="utf-8")
    assert "<script" not in text and "<img" not in text and "](javascript" not in text
    assert "| &lt;script&gt;alert(1)&lt;/script&gt; |" in text
    assert "| \\[x\\]\\(javascript:a) |" in text
    assert md_text("a|b\nc & d") == "a\\|b c &amp; d"


def test_json_is_streamed_and_equal_to_the_payload(tmp_path: Path) -> None:
    table = _table([f"op{i}" for i in range(20_000)], [i / 7 for i in range(20_000)])
    out = tmp_path / "out.json"
    write_table(out, table)
    assert json.loads(out.read_text(encoding="utf-8")) == table_payload(table)


# --- 5. xlsx outputs past Excel's sheet ---------------------------------------------------------


def test_xlsx_output_past_excel_limits_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wide = OutputTable([Column(f"c{j}", [1], "int") for j in range(16_385)])
    with pytest.raises(InputError, match=r"16,385 columns .* A to XFD"):
        write_table(tmp_path / "wide.xlsx", wide)
    monkeypatch.setattr(xlsx_writer, "MAX_XLSX_ROWS", 10)  # 10 rows and the header: 11
    with pytest.raises(InputError, match=r"has 11 rows and 2 columns"):
        write_table(tmp_path / "long.xlsx", _table([str(i) for i in range(10)]))
    assert list(tmp_path.iterdir()) == []


# --- 4. signals: one line, no temporary file left --------------------------------------------


@pytest.mark.parametrize(
    ("raise_it", "status", "message"),
    [
        (lambda: os.kill(os.getpid(), signal.SIGTERM), 143, "error: terminated (SIGTERM)\n"),
        (lambda: (_ for _ in ()).throw(KeyboardInterrupt), 130, "error: interrupted\n"),
    ],
)
def test_signal_during_a_write_leaves_no_file(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    raise_it: object,
    status: int,
    message: str,
) -> None:
    import time

    from shardline.io import tables

    def half_then_signal(table: OutputTable, tmp: Path) -> None:
        tmp.write_text("name,m\nhalf", encoding="utf-8")
        raise_it()  # type: ignore[operator]
        time.sleep(5)  # the SIGTERM handler raises before this ends

    monkeypatch.setitem(tables.WRITERS, ".csv", half_then_signal)
    src = tmp_path / "in.csv"
    src.write_text(SHAPES, encoding="utf-8")
    before = signal.getsignal(signal.SIGTERM)
    code, err = _run(capsys, "sheet", str(src), "-o", str(tmp_path / "out.csv"))
    assert (code, err) == (status, message)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.csv"]
    assert signal.getsignal(signal.SIGTERM) == before  # the handler is put back


# --- the whole catalogue (slow) -----------------------------------------------------------------


def _catalogue(config: pytest.Config, *args: str) -> subprocess.CompletedProcess[str]:
    """Minutes of subprocesses: only when asked for (`-m slow`, or SHARDLINE_SLOW=1), also where
    the `slow` marker is not deselected by default."""
    expr = str(config.getoption("markexpr") or "")
    wanted = "slow" in expr.replace("not slow", "") or os.environ.get("SHARDLINE_SLOW") == "1"
    if not wanted:
        pytest.skip("the hostile catalogue runs with -m slow (or SHARDLINE_SLOW=1)")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_hostile.py"), *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=3600,
    )


@pytest.mark.slow
def test_hostile_catalogue_io_cases(pytestconfig: pytest.Config) -> None:
    """The file and signal cases: no traceback, hang, lost or .tmp file, no wrong answer."""
    proc = _catalogue(pytestconfig, "--only", "io")
    assert proc.returncode == 0, proc.stdout[-4000:]


@pytest.mark.slow
def test_hostile_catalogue_full(pytestconfig: pytest.Config) -> None:
    """Every case of issue 14, number validation included."""
    proc = _catalogue(pytestconfig)
    assert proc.returncode == 0, proc.stdout[-4000:]


def test_ctrl_c_wrapped_by_a_class_body_is_still_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Python wraps an exception raised in __set_name__ (a dataclass field of a module imported
    # while a command runs) in a RuntimeError whose cause is the original: a Ctrl-C there must
    # still end as "error: interrupted", exit status 130
    from shardline.cli import main as cli_main

    def interrupted(argv: object) -> int:
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt as exc:
            raise RuntimeError("Error calling __set_name__") from exc

    monkeypatch.setattr(cli_main, "run_command", interrupted)
    assert cli_main.main(["hw", "list"]) == 130
    assert capsys.readouterr().err == "error: interrupted\n"
