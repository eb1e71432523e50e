"""Spreadsheets in and out: header matching, bad cells, file refusals, the `sheet` command."""

from __future__ import annotations

import csv
import hashlib
import json
from pathlib import Path

import numpy as np
import pytest

from shardline.answers.sheet_model import DtypeChoice, roofline_rows
from shardline.cli.main import main
from shardline.errors import InputError
from shardline.io.sheets import ACCEPTED, read_shape_rows
from shardline.ops.roofline import matmul

openpyxl = pytest.importorskip("openpyxl")

ROOT = Path(__file__).resolve().parent.parent
A100_BF16_FLOPS = 312e12  # NVIDIA A100 datasheet, dense BF16 (the catalog's a100-40gb)
A100_BYTES_PER_S = 1.555e12  # NVIDIA A100 40GB datasheet, 1,555 GB/s


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _by_hand(m: int, k: int, n: int, s: int = 2) -> dict[str, float]:
    """docs/model.md section 2 with one dtype of s bytes on the A100 40 GB."""
    flops = 2 * m * k * n
    q = s * (m * k + k * n + m * n)
    t_c, t_m = flops / A100_BF16_FLOPS, q / A100_BYTES_PER_S
    return {
        "flops": flops,
        "bytes": q,
        "t_compute_s": t_c,
        "t_memory_s": t_m,
        "t_lower_s": max(t_c, t_m),
        "bound": "compute" if t_c >= t_m else "memory",
    }


# ------------------------------------------------------------------------------------------------
# reading


def test_headers_matched_case_insensitively_below_a_title_row(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "s.csv",
        "Shapes for the interview,,,,,\n"
        "Name,ROWS (m),K,n,Count,Precision\n"
        "qkv,4096,4096,12288,2,bf16\n"
        ",,,,,\n"
        'ff,"4,096",4Ki,16384,,BFloat16\n',
    )
    t = read_shape_rows(path)
    assert t.roles == {
        "name": "Name",
        "m": "ROWS (m)",
        "k": "K",
        "n": "n",
        "count": "Count",
        "dtype": "Precision",
    }
    assert t.header_row == 2
    assert t.row_numbers.tolist() == [3, 5]  # the blank row 4 is skipped, numbers stay the sheet's
    assert t.m.tolist() == [4096, 4096] and t.k.tolist() == [4096, 4096]  # "4Ki" = 4096
    assert t.n.tolist() == [12288, 16384]
    assert t.count.tolist() == [2, 1]  # a blank count runs once
    assert t.dtype is not None and t.dtype.tolist() == ["bf16", "bf16"]  # aliases canonicalized
    assert t.names == ["qkv", "ff"] and t.ok.all() and not t.problems
    assert t.columns["ROWS (m)"] == ["4096", "4,096"]  # original cells kept as read


def test_no_mkn_columns_lists_headers_found_and_names_accepted(tmp_path: Path) -> None:
    path = _write(tmp_path / "s.csv", "rows_a,width,height\n1,2,3\n")
    with pytest.raises(InputError) as exc:
        read_shape_rows(path)
    message = str(exc.value)
    assert "no recognizable M, K, N columns" in message
    assert "'rows_a', 'width', 'height'" in message
    for alias in ACCEPTED["m"] + ACCEPTED["k"] + ACCEPTED["n"]:
        assert alias in message


def test_two_columns_for_the_same_role_is_an_error(tmp_path: Path) -> None:
    path = _write(tmp_path / "s.csv", "M,m,K,N\n1,2,3,4\n")
    with pytest.raises(InputError, match="several columns could be M"):
        read_shape_rows(path)


def test_bad_cells_mark_their_row_and_name_row_and_column(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "s.csv",
        "name,M,K,N,count,dtype\n"
        "good,64,4096,4096,1,bf16\n"
        "text,abc,4096,4096,1,bf16\n"
        "neg,64,-8,4096,1,bf16\n"
        "frac,64,4096,10.5,1,bf16\n"
        "blank,64,,4096,1,bf16\n"
        "badcount,64,64,64,-1,bf16\n"
        "baddtype,64,64,64,1,float7\n"
        "good2,128,4096,4096,3,\n",
    )
    t = read_shape_rows(path)
    assert t.ok.tolist() == [True, False, False, False, False, False, False, True]
    texts = [p.text() for p in t.problems]
    assert texts[0] == "row 3, column 'M': 'abc' is not a number; M must be a positive integer"
    assert texts[1] == "row 4, column 'K': '-8' is negative; K must be a positive integer"
    assert texts[2] == (
        "row 5, column 'N': '10.5' is not a whole number; N must be a positive integer"
    )
    assert texts[3] == "row 6, column 'K': K is blank"
    assert texts[4].startswith("row 7, column 'count': '-1' is negative")
    assert texts[5].startswith("row 8, column 'dtype': unknown dtype 'float7'")
    with pytest.raises(InputError, match="row 3, column 'M'"):
        t.require_ok()


def test_xlsx_with_numbers_blank_rows_and_a_named_sheet(tmp_path: Path) -> None:
    wb = openpyxl.Workbook()
    ws = wb.active
    ws.title = "notes"
    ws.append(["nothing here"])
    ws2 = wb.create_sheet("shapes")
    ws2.append(["Op", "M", "K", "N"])
    ws2.append(["a", 16, 4096.0, 16384])
    ws2.append([None, None, None, None])
    ws2.append(["b", 8192, 8192, 8192])
    ws2.append(["c", "x", 1, 1])
    path = tmp_path / "w.xlsx"
    wb.save(path)
    t = read_shape_rows(path, sheet="shapes")
    assert t.sheet == "shapes" and t.names == ["a", "b", "c"]
    assert t.row_numbers.tolist() == [2, 4, 5]  # Excel's row numbers, blank row 3 skipped
    assert t.m.tolist()[:2] == [16, 8192] and t.k.tolist()[:2] == [4096, 8192]
    assert [p.text() for p in t.problems] == [
        "row 5, column 'M': 'x' is not a number; M must be a positive integer"
    ]
    with pytest.raises(InputError, match="no sheet 'nope'; sheets: notes, shapes"):
        read_shape_rows(path, sheet="nope")
    with pytest.raises(
        InputError, match="no recognizable M, K, N columns; headers found: 'nothing here'"
    ):
        read_shape_rows(path)  # the first sheet has no shapes


@pytest.mark.parametrize(
    ("content", "name", "message"),
    [
        # MS-OFFCRYPTO: an encrypted .xlsx is an OLE compound file (magic D0 CF 11 E0 A1 B1 1A E1)
        (b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504), "locked.xlsx", "password-protected"),
        (b"PK\x03\x04 this is not really a zip", "broken.xlsx", "corrupt .xlsx"),
        (b"hello", "text.xlsx", "not a valid .xlsx"),
        (b"", "empty.xlsx", "not a valid .xlsx"),
        (b"M,K,N\n\x00\x01\x02", "binary.csv", "binary file"),
        (b"M,K,N\n\xff\xfe1,2,3\n", "latin.csv", "not UTF-8"),
        (b"", "empty.csv", "empty"),
        (b"M,K,N\n1,2,3\n", "old.xls", ".xls format is not supported"),
        (b"M,K,N\n1,2,3\n", "shapes.txt", "unsupported sheet type"),
    ],
)
def test_unreadable_files(tmp_path: Path, content: bytes, name: str, message: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(InputError, match=message):
        read_shape_rows(path)


# ------------------------------------------------------------------------------------------------
# computing


def test_rows_match_hand_formulas_and_the_library(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "s.csv", "name,m,k,n,count\ndecode,8,4096,16384,32\nsq,8192,8192,8192,2\n"
    )
    result = roofline_rows(read_shape_rows(path), "a100-40gb")
    for i, (m, k, n) in enumerate([(8, 4096, 16384), (8192, 8192, 8192)]):
        hand = _by_hand(m, k, n)
        for key in ("flops", "bytes"):
            assert result.columns[key][i] == hand[key]
        for key in ("t_compute_s", "t_memory_s", "t_lower_s"):
            assert result.columns[key][i] == pytest.approx(hand[key], rel=1e-15)
        assert result.columns["bound"][i] == hand["bound"]
    assert result.columns["bound"].tolist() == ["memory", "compute"]
    # totals multiply each row by its count
    totals = result.summary["totals"]
    assert totals["flops"] == 32 * 2 * 8 * 4096 * 16384 + 2 * 2 * 8192**3
    assert totals["t_lower_s"] == pytest.approx(
        32 * _by_hand(8, 4096, 16384)["t_lower_s"] + 2 * _by_hand(8192, 8192, 8192)["t_lower_s"]
    )
    assert result.summary["rows_memory_bound"] == 1 and result.summary["rows_compute_bound"] == 1


def test_one_vectorized_library_call_per_dtype_group(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import shardline.answers.sheet_model as sheet_model

    rng = np.random.default_rng(3)
    rows = rng.integers(1, 20_000, size=(500, 3))
    dtypes = rng.choice(["bf16", "fp8", "int8"], size=500)
    lines = ["M,K,N,dtype"] + [
        f"{m},{k},{n},{d}" for (m, k, n), d in zip(rows, dtypes, strict=True)
    ]
    path = _write(tmp_path / "many.csv", "\n".join(lines) + "\n")
    calls: list[int] = []
    real = sheet_model.matmul

    def counting(m, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(np.size(m))
        return real(m, *args, **kwargs)

    monkeypatch.setattr(sheet_model, "matmul", counting)
    result = roofline_rows(read_shape_rows(path), "h100-sxm")
    assert len(calls) == 3 and sum(calls) == 500  # one call per dtype, each over its rows
    for i in rng.choice(500, size=12, replace=False).tolist():  # spot-check rows one by one
        m, k, n = (int(v) for v in rows[i])
        one = real(m, k, n, hw="h100-sxm", dtype=str(dtypes[i]))
        assert result.columns["flops"][i] == one.flops
        assert result.columns["bytes"][i] == one.bytes["total"]
        assert result.columns["t_lower_s"][i] == pytest.approx(one.t_lower_s, rel=1e-15)
        assert result.columns["bound"][i] == one.bound


def test_rows_the_chip_cannot_compute_are_reported_not_fatal(tmp_path: Path) -> None:
    path = _write(tmp_path / "s.csv", "M,K,N,dtype\n64,64,64,bf16\n64,64,64,fp8\n")
    result = roofline_rows(read_shape_rows(path), "a100-40gb")  # the A100 has no fp8
    assert result.ok.tolist() == [True, False]
    assert (
        result.problems[0]
        .text()
        .startswith("row 3, column 'dtype': a100-40gb cannot compute in fp8")
    )


def test_operand_dtypes_int8_weights(tmp_path: Path) -> None:
    path = _write(tmp_path / "s.csv", "M,K,N\n128,4096,4096\n")
    result = roofline_rows(read_shape_rows(path), "tpu-v5e", DtypeChoice(b_dtype="int8"))
    # bf16 X[128,4096], int8 W[4096,4096], bf16 Y: Q = 2*128*4096 + 4096*4096 + 2*128*4096
    assert result.columns["bytes"][0] == 2 * 128 * 4096 + 4096 * 4096 + 2 * 128 * 4096
    assert result.columns["ridge_flop_per_byte"][0] == pytest.approx(197e12 / 8.19e11)


# ------------------------------------------------------------------------------------------------
# the `sheet` command


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def test_sheet_writes_every_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _write(
        tmp_path / "in.csv",
        "name,M,K,N,count,note\ndecode,8,4096,16384,32,hot path\nsq,8192,8192,8192,2,\n",
    )
    before = _digest(src)
    hand = _by_hand(8, 4096, 16384)
    for suffix in (".csv", ".json", ".md", ".xlsx"):
        out = tmp_path / f"out{suffix}"
        code, stdout, err = _run(capsys, "sheet", str(src), "--hw", "a100-40gb", "-o", str(out))
        assert code == 0 and err == ""
        assert stdout.splitlines()[1].startswith(
            "1 of 2 rows MEMORY-BOUND (intensity below the ridge"
        )
        assert f"wrote {out}: 2 rows" in stdout
    assert _digest(src) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "in.csv",
        "out.csv",
        "out.json",
        "out.md",
        "out.xlsx",
    ]  # no temporary files left
    rows = list(csv.DictReader((tmp_path / "out.csv").open(encoding="utf-8")))
    assert list(rows[0])[:6] == ["name", "M", "K", "N", "count", "note"]  # every input column kept
    assert rows[0]["note"] == "hot path"
    assert int(rows[0]["flops"]) == hand["flops"] and int(rows[0]["bytes"]) == hand["bytes"]
    assert float(rows[0]["t_lower_s"]) == hand["t_lower_s"]  # repr() round-trips floats exactly
    assert rows[0]["bound"] == "memory" and rows[1]["bound"] == "compute"
    for key in ("intensity_flop_per_byte", "t_compute_s", "t_memory_s", "t_upper_s", "critical_m"):
        assert key in rows[0]
    payload = json.loads((tmp_path / "out.json").read_text(encoding="utf-8"))
    assert payload["rows"][0]["flops"] == hand["flops"]
    assert (
        payload["summary"]["totals"]["flops"]
        == 32 * hand["flops"] + 2 * _by_hand(8192, 8192, 8192)["flops"]
    )
    md = (tmp_path / "out.md").read_text(encoding="utf-8")
    assert "| decode | 8 | 4096 | 16384 | 32 | hot path |" in md and "## Summary" in md
    wb = openpyxl.load_workbook(tmp_path / "out.xlsx")
    assert wb.sheetnames == ["results", "summary"]
    ws = wb["results"]
    header = [c.value for c in ws[1]]
    flops_cell = ws.cell(row=2, column=header.index("flops") + 1)
    assert flops_cell.value == hand["flops"] and flops_cell.number_format == "#,##0"  # numeric
    time_cell = ws.cell(row=2, column=header.index("t_lower_s") + 1)
    assert time_cell.value == pytest.approx(hand["t_lower_s"]) and "E" in time_cell.number_format
    bound_mem = ws.cell(row=2, column=header.index("bound") + 1)
    bound_comp = ws.cell(row=3, column=header.index("bound") + 1)
    assert bound_mem.value == "memory" and bound_mem.fill.fgColor.rgb.endswith("F8CBAD")
    assert bound_comp.value == "compute" and bound_comp.fill.fgColor.rgb.endswith("C6E0B4")
    # a blank input cell stays an empty cell (not a zero-length text that formulas trip on)
    assert ws.cell(row=3, column=header.index("note") + 1).value is None
    summary = {r[0]: r[1] for r in wb["summary"].iter_rows(min_row=2, values_only=True)}
    # totals over count: 32 decodes and 2 squares, each row's time times its count
    square = _by_hand(8192, 8192, 8192)
    assert summary["count_total"] == 32 + 2
    for key in ("t_lower_s", "t_compute_s", "t_memory_s", "bytes"):
        assert summary[f"totals.{key}"] == pytest.approx(32 * hand[key] + 2 * square[key])
    assert summary["rows"] == 2 and summary["totals.flops"] == payload["summary"]["totals"]["flops"]


def test_sheet_refusals_leave_input_untouched(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _write(tmp_path / "in.csv", "M,K,N\n8,4096,16384\n")
    before = _digest(src)
    existing = _write(tmp_path / "exists.csv", "keep me\n")
    cases = [
        (["-o", str(src), "--force"], "refusing to overwrite an input"),
        (["-o", str(existing)], "already exists; pass --force"),
        (["-o", str(tmp_path / "missing" / "o.csv")], "does not exist"),
        (["-o", str(tmp_path / "o.pdf")], "unsupported type '.pdf'"),
    ]
    for extra, message in cases:
        code, out, err = _run(capsys, "sheet", str(src), "--hw", "a100-40gb", *extra)
        assert code == 2 and out == ""
        assert err.count("\n") == 1 and err.startswith("error: ") and message in err
    assert _digest(src) == before
    assert existing.read_text(encoding="utf-8") == "keep me\n"
    code, _, _ = _run(
        capsys, "sheet", str(src), "--hw", "a100-40gb", "-o", str(existing), "--force"
    )
    assert code == 0 and existing.read_text(encoding="utf-8").startswith("M,K,N,flops")


def test_sheet_bad_rows_reported_rest_computed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    src = _write(
        tmp_path / "in.csv", "name,M,K,N\nok,8,4096,16384\nbad,-3,4096,16384\nok2,16,16,16\n"
    )
    out = tmp_path / "o.csv"
    code, stdout, err = _run(capsys, "sheet", str(src), "--hw", "a100-40gb", "-o", str(out))
    assert code == 2
    assert err.count("\n") == 1
    assert err.startswith("error: 1 bad cell(s) in ")
    assert "row 3, column 'M': '-3' is negative" in err and f"the other rows are in {out}" in err
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert [r["bound"] for r in rows] == ["memory", "", "memory"]
    assert int(rows[2]["flops"]) == 2 * 16 * 16 * 16
    assert rows[1]["error"].startswith("column 'M': '-3' is negative") and rows[0]["error"] == ""
    assert "1 rows not computed" in stdout


def test_sheet_bad_input_files_one_error_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    locked = tmp_path / "locked.xlsx"
    locked.write_bytes(b"\xd0\xcf\x11\xe0\xa1\xb1\x1a\xe1" + bytes(504))
    nomkn = _write(tmp_path / "nomkn.csv", "a,b,c\n1,2,3\n")
    for path, message in (
        (locked, "password-protected"),
        (nomkn, "headers found: 'a', 'b', 'c'"),
        (tmp_path / "absent.csv", "no such file"),
    ):
        before = _digest(path) if path.exists() else None
        code, out, err = _run(capsys, "sheet", str(path), "-o", str(tmp_path / "o.xlsx"))
        assert code == 2 and out == "" and err.count("\n") == 1 and message in err
        assert (_digest(path) if path.exists() else None) == before
    assert not (tmp_path / "o.xlsx").exists()


def test_sheet_json_without_output(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    src = _write(tmp_path / "in.csv", "M,K,N\n8192,8192,8192\n")
    code, out, _ = _run(capsys, "sheet", str(src), "--hw", "a100-40gb", "--json")
    payload = json.loads(out)
    assert code == 0 and payload["rows"][0]["flops"] == 2 * 8192**3
    assert payload["rows"][0]["bound"] == "compute" and payload["summary"]["rows"] == 1


def test_seed003_example_sheet_end_to_end(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The sample of seed 003 ships as .xlsx and .csv with the same rows; the sheet command reads
    either and calls the bound of each row (A100 40 GB, bf16)."""
    xlsx = read_shape_rows(ROOT / "examples" / "seed003_shapes.xlsx")
    plain = read_shape_rows(ROOT / "examples" / "seed003_shapes.csv")
    assert xlsx.names == plain.names and len(xlsx) >= 10
    for a, b in (
        (xlsx.m, plain.m),
        (xlsx.k, plain.k),
        (xlsx.n, plain.n),
        (xlsx.count, plain.count),
    ):
        assert a.tolist() == b.tolist()
    out = tmp_path / "seed003.xlsx"
    code, stdout, _ = _run(
        capsys,
        "sheet",
        str(ROOT / "examples" / "seed003_shapes.xlsx"),
        "--hw",
        "a100-40gb",
        "-o",
        str(out),
    )
    assert code == 0
    result = roofline_rows(xlsx, "a100-40gb")
    for i in range(len(xlsx)):
        hand = _by_hand(int(xlsx.m[i]), int(xlsx.k[i]), int(xlsx.n[i]))
        assert result.columns["bound"][i] == hand["bound"]
        assert result.columns["t_lower_s"][i] == pytest.approx(hand["t_lower_s"], rel=1e-15)
    # decode rows stay memory-bound until M reaches the critical M: 2MKN/P >= Q/W
    decode = [i for i, name in enumerate(xlsx.names or []) if name.startswith("decode")]
    assert {result.columns["bound"][i] for i in decode} == {"memory", "compute"}
    crit = matmul(1, 4096, 16384, hw="a100-40gb").critical_m
    assert crit is not None
    for i in decode:
        assert (result.columns["bound"][i] == "compute") == (xlsx.m[i] >= crit)


def test_xlsx_writer_round_trips_text_numbers_and_styles(tmp_path: Path) -> None:
    from shardline.io.sheets import Column, OutputTable, write_table

    names = [" lead & <tag>", "ctrl\x01char", "x" * 40_000, "", None]
    table = OutputTable(
        columns=[
            Column("name", names, "text"),
            Column("flops", np.array([1.0, 2.0**53, np.nan, 3.0, 4.0]), "int"),
            Column("t_lower_s", np.array([1e-9, 0.5, 1.5e-3, np.inf, 2.0]), "time"),
            Column("bound", ["memory", "compute", "network", "", None], "bound"),
        ],
        summary={"rows": 5, "totals": {"t_lower_s": 0.25}},
    )
    first, second = tmp_path / "a.xlsx", tmp_path / "b.xlsx"
    write_table(first, table)
    write_table(second, table)
    assert first.read_bytes() == second.read_bytes()  # no timestamps inside
    wb = openpyxl.load_workbook(first)
    ws = wb["results"]
    assert ws.freeze_panes == "A2" and ws["A1"].font.b
    assert ws["A2"].value == " lead & <tag>" and ws["A3"].value == "ctrlchar"
    assert len(ws["A4"].value) == 32_767  # Excel's cell limit
    assert ws["A5"].value in (None, "") and ws["A6"].value is None
    assert ws["B3"].value == 2**53 and ws["B3"].number_format == "#,##0" and ws["B4"].value is None
    assert ws["C2"].value == 1e-9 and ws["C2"].number_format == "0.000E+00"
    assert ws["C5"].value is None
    assert [ws[f"D{r}"].fill.fgColor.rgb for r in (2, 3, 4)] == ["FFF8CBAD", "FFC6E0B4", "FFBDD7EE"]
    summary = {r[0]: r[1] for r in wb["summary"].iter_rows(min_row=2, values_only=True)}
    assert summary == {"rows": 5, "totals.t_lower_s": 0.25}


def test_example_with_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """examples/seed003_shapes_with_errors.csv (docs/spreadsheets.md, "Bad input")."""
    src = ROOT / "examples" / "seed003_shapes_with_errors.csv"
    before = _digest(src)
    out = tmp_path / "fixed.csv"
    code, stdout, err = _run(capsys, "sheet", str(src), "--hw", "a100-40gb", "-o", str(out))
    assert code == 2 and err.count("\n") == 1 and _digest(src) == before
    assert "row 3, column 'm': '8l92' is not a number" in err
    assert "row 4, column 'k': '-4096' is negative" in err
    rows = list(csv.DictReader(out.open(encoding="utf-8")))
    assert [r["bound"] for r in rows] == ["memory", "", "", "compute"]
    assert int(rows[3]["flops"]) == 2 * 4096**3 and stdout.startswith(str(src))


def test_atomic_write_leaves_nothing_on_error_and_a_normal_mode(tmp_path: Path) -> None:
    import os

    from shardline.io.sheets import atomic_write

    target = tmp_path / "out.csv"

    def half_then_fail(tmp: Path) -> None:
        tmp.write_text("M,K,N\n1,", encoding="utf-8")
        raise OSError("disk full")

    # an OS error while writing is a one-line InputError naming the output
    with pytest.raises(InputError, match=f"cannot write {target}: disk full"):
        atomic_write(target, half_then_fail)
    assert list(tmp_path.iterdir()) == []  # no partial output, no temporary file
    # a failure while replacing keeps the old file whole
    target.write_text("old\n", encoding="utf-8")
    target.chmod(0o640)
    with pytest.raises(InputError):
        atomic_write(target, half_then_fail)
    assert target.read_text(encoding="utf-8") == "old\n" and len(list(tmp_path.iterdir())) == 1
    # a new file gets the mode open() would give it (0666 less the umask), not mkstemp's 0600;
    # a replaced file keeps its own mode
    mask = os.umask(0)
    os.umask(mask)
    fresh = tmp_path / "fresh.csv"
    atomic_write(fresh, lambda tmp: tmp.write_text("x\n", encoding="utf-8"))
    assert fresh.stat().st_mode & 0o777 == 0o666 & ~mask
    atomic_write(target, lambda tmp: tmp.write_text("new\n", encoding="utf-8"))
    assert target.read_text(encoding="utf-8") == "new\n" and target.stat().st_mode & 0o777 == 0o640
