"""Write examples/seed003_shapes.csv and examples/seed003_shapes.xlsx: the (m, k, n) sheet of the
seed 003 interview round (matmul arithmetic intensity on an A100 40 GB), with name and count
columns.

Run from the repository root: `python examples/make_seed003_shapes.py`. The rows cover both regimes
(decode-sized M against a 4096 x 16384 weight, squares, a small contraction K) and the two layer
types of the 72-layer pipeline in Part 2 (type 1: x[m,n] . w[n,k]; type 2: x[m,k] . w[k,n]; 36 of
each).
The .xlsx is written with fixed document dates so that rerunning the script reproduces it.
"""

from __future__ import annotations

import csv
import datetime
import re
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

# m = tokens, k = contraction, n = output features, as in the seed's Excel sheet.
PIPELINE_M, PIPELINE_K, PIPELINE_N = 8192, 8192, 32768
ROWS: list[tuple[str, int, int, int, int]] = [
    ("decode, 1 token", 1, 4096, 16384, 1),
    ("decode, batch 8", 8, 4096, 16384, 1),
    ("decode, batch 32", 32, 4096, 16384, 1),
    ("decode, batch 128", 128, 4096, 16384, 1),
    ("decode, batch 256", 256, 4096, 16384, 1),
    ("prefill, 2048 tokens", 2048, 4096, 16384, 1),
    ("square 512", 512, 512, 512, 1),
    ("square 1024", 1024, 1024, 1024, 1),
    ("square 2048", 2048, 2048, 2048, 1),
    ("square 4096", 4096, 4096, 4096, 1),
    ("square 8192", 8192, 8192, 8192, 1),
    ("small K = 128 (attention scores)", 8192, 128, 8192, 1),
    ("small K = 64", 4096, 64, 4096, 1),
    ("tall-skinny output N = 8", 65536, 4096, 8, 1),
    ("LM head", 2048, 4096, 128256, 1),
    ("type 1 layer: x[m,n] . w[n,k]", PIPELINE_M, PIPELINE_N, PIPELINE_K, 36),
    ("type 2 layer: x[m,k] . w[k,n]", PIPELINE_M, PIPELINE_K, PIPELINE_N, 36),
]
HEADER = ("name", "m", "k", "n", "count")
FIXED_DATE = datetime.datetime(2024, 1, 1)
# The same kind of sheet as typed by hand, with the mistakes the `sheet` command reports by row and
# column while it computes the other rows (docs/spreadsheets.md, "Bad input").
WITH_ERRORS = (
    "name,m,k,n,count\n"
    '"decode, batch 8",8,4096,16384,1\n'
    "typo in m,8l92,8192,8192,1\n"
    "negative k,4096,-4096,4096,1\n"
    "square 4096,4096,4096,4096,1\n"
)


def write_csv(path: Path) -> None:
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(HEADER)
        writer.writerows(ROWS)


def write_xlsx(path: Path) -> None:
    from openpyxl import Workbook
    from openpyxl.styles import Font

    wb = Workbook()
    ws = wb.active
    ws.title = "shapes"
    ws.append(list(HEADER))
    for cell in ws[1]:
        cell.font = Font(bold=True)
    for row in ROWS:
        ws.append(list(row))
    ws.column_dimensions["A"].width = 34
    wb.properties.creator = "shardline examples"
    wb.properties.created = FIXED_DATE
    wb.save(path)
    _pin_dates(path)


def _pin_dates(path: Path) -> None:
    """openpyxl stamps the save time into docProps/core.xml and every zip entry; pin both so that
    rerunning the script reproduces the file byte for byte."""
    stamp = FIXED_DATE.strftime("%Y-%m-%dT%H:%M:%SZ")
    with zipfile.ZipFile(path) as source:
        entries = [(info.filename, source.read(info)) for info in source.infolist()]
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as target:
        for name, data in entries:
            if name == "docProps/core.xml":
                data = re.sub(rb"(<dcterms:modified[^>]*>)[^<]*", rb"\g<1>" + stamp.encode(), data)
            target.writestr(
                zipfile.ZipInfo(name, date_time=FIXED_DATE.timetuple()[:6]),
                data,
                compress_type=zipfile.ZIP_DEFLATED,
            )


if __name__ == "__main__":
    write_csv(HERE / "seed003_shapes.csv")
    write_xlsx(HERE / "seed003_shapes.xlsx")
    (HERE / "seed003_shapes_with_errors.csv").write_text(WITH_ERRORS, encoding="utf-8")
    print(
        f"wrote {HERE / 'seed003_shapes.csv'} and {HERE / 'seed003_shapes.xlsx'} ({len(ROWS)} rows)"
    )
