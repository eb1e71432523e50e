"""Benchmark: a 100,000-row (m, k, n) sheet read, computed and written to .xlsx and .csv.

Two pipelines side by side in one run, on the same input files:
  shardline   read_shape_rows -> roofline_rows (one vectorized call) -> write_table (.xlsx, .csv)
  plain loop  csv / openpyxl rows -> shardline.ops.roofline.matmul per row -> csv.writer / openpyxl

Run: `python benchmarks/bench_sheet.py [--rows N] [--hw CHIP]`. Prints each phase's time and rows
per second, and the ratio plain / shardline.
"""

from __future__ import annotations

import argparse
import csv
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

RESULT_KEYS = (
    "flops",
    "bytes",
    "intensity_flop_per_byte",
    "bound",
    "t_compute_s",
    "t_memory_s",
    "t_lower_s",
    "t_upper_s",
)


def make_inputs(directory: Path, rows: int) -> tuple[Path, Path]:
    """A reproducible sheet: name, m, k, n, count, as .csv and .xlsx."""
    from openpyxl import Workbook

    rng = np.random.default_rng(0)
    m = rng.integers(1, 16_384, rows)
    k = rng.choice([1024, 2048, 4096, 8192, 14336], rows)
    n = rng.choice([1024, 4096, 11008, 16384, 32768], rows)
    count = rng.integers(1, 80, rows)
    csv_path, xlsx_path = directory / "shapes.csv", directory / "shapes.xlsx"
    with csv_path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["name", "m", "k", "n", "count"])
        for i in range(rows):
            writer.writerow([f"op{i}", int(m[i]), int(k[i]), int(n[i]), int(count[i])])
    wb = Workbook(write_only=True)
    ws = wb.create_sheet("shapes")
    ws.append(["name", "m", "k", "n", "count"])
    for i in range(rows):
        ws.append([f"op{i}", int(m[i]), int(k[i]), int(n[i]), int(count[i])])
    wb.save(xlsx_path)
    return csv_path, xlsx_path


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    start = time.perf_counter()
    value = fn()
    return time.perf_counter() - start, value


# --- the shardline pipeline ------------------------------------------------------------------


def shardline_pipeline(source: Path, out: Path, hw: str) -> dict[str, float]:
    from shardline.io.sheet_results import output_table, roofline_rows
    from shardline.io.sheets import read_shape_rows, write_table

    times: dict[str, float] = {}
    times["read"], table = timed(lambda: read_shape_rows(source))
    times["compute"], result = timed(lambda: roofline_rows(table, hw, predict=False))
    output = output_table(result)
    times["write .xlsx"], _ = timed(lambda: write_table(out.with_suffix(".xlsx"), output))
    times["write .csv"], _ = timed(lambda: write_table(out.with_suffix(".csv"), output))
    return times


# --- the plain per-row loop ------------------------------------------------------------------


def plain_read(source: Path) -> list[list[Any]]:
    if source.suffix == ".csv":
        with source.open(encoding="utf-8", newline="") as fh:
            reader = csv.reader(fh)
            next(reader)
            return [[r[0], int(r[1]), int(r[2]), int(r[3]), int(r[4])] for r in reader]
    from openpyxl import load_workbook

    wb = load_workbook(source, read_only=True)
    rows = [list(r) for r in wb.worksheets[0].iter_rows(min_row=2, values_only=True)]
    wb.close()
    return rows


def plain_compute(rows: list[list[Any]], hw: str) -> list[list[Any]]:
    from shardline.ops.roofline import matmul

    out = []
    for name, m, k, n, count in rows:
        r = matmul(m, k, n, hw=hw)
        out.append(
            [
                name,
                m,
                k,
                n,
                count,
                r.flops,
                r.bytes["total"],
                r.intensity_flop_per_byte,
                r.bound,
                r.t_compute_s,
                r.t_memory_s,
                r.t_lower_s,
                r.t_upper_s,
            ]
        )
    return out


def plain_write_csv(rows: list[list[Any]], path: Path) -> None:
    with path.open("w", encoding="utf-8", newline="") as fh:
        writer = csv.writer(fh, lineterminator="\n")
        writer.writerow(["name", "m", "k", "n", "count", *RESULT_KEYS])
        writer.writerows(rows)


def plain_write_xlsx(rows: list[list[Any]], path: Path) -> None:
    from openpyxl import Workbook

    wb = Workbook(write_only=True)
    ws = wb.create_sheet("results")
    ws.append(["name", "m", "k", "n", "count", *RESULT_KEYS])
    for row in rows:
        ws.append(row)
    wb.save(path)


def plain_pipeline(source: Path, out: Path, hw: str) -> dict[str, float]:
    times: dict[str, float] = {}
    times["read"], rows = timed(lambda: plain_read(source))
    times["compute"], results = timed(lambda: plain_compute(rows, hw))
    times["write .xlsx"], _ = timed(lambda: plain_write_xlsx(results, out.with_suffix(".xlsx")))
    times["write .csv"], _ = timed(lambda: plain_write_csv(results, out.with_suffix(".csv")))
    return times


def report(title: str, rows: int, ours: dict[str, float], plain: dict[str, float]) -> None:
    print(f"\n{title}")
    print(
        f"  {'phase':<12} {'shardline':>11} {'rows/s':>12}   {'plain loop':>11} {'rows/s':>12}   "
        f"{'plain/shardline':>15}"
    )
    for phase in [*ours, "total"]:
        a = ours[phase] if phase != "total" else sum(ours.values())
        b = plain[phase] if phase != "total" else sum(plain.values())
        print(
            f"  {phase:<12} {a:>10.3f}s {rows / a:>12,.0f}   {b:>10.3f}s {rows / b:>12,.0f}   "
            f"{b / a:>14.1f}x"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=100_000)
    parser.add_argument("--hw", default="a100-40gb")
    args = parser.parse_args()
    # warm up both pipelines (imports, the chip catalog) so that neither pays it inside a phase
    from shardline.io.sheet_results import roofline_rows  # noqa: F401
    from shardline.ops.roofline import matmul

    matmul(1, 1, 1, hw=args.hw)
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        csv_path, xlsx_path = make_inputs(directory, args.rows)
        print(
            f"{args.rows:,} rows of (m, k, n) on {args.hw}; each pipeline reads, computes "
            "(FLOPs, bytes, intensity, bound, times) and writes .xlsx and .csv"
        )
        for source in (csv_path, xlsx_path):
            ours = shardline_pipeline(source, directory / f"ours_{source.suffix[1:]}", args.hw)
            plain = plain_pipeline(source, directory / f"plain_{source.suffix[1:]}", args.hw)
            report(f"input {source.name}", args.rows, ours, plain)


if __name__ == "__main__":
    main()
