"""`shardline sheet IN`: the roofline of every (M, K, N) row of a .csv/.xlsx sheet, written to
.xlsx, .csv, .json or .md. openpyxl is imported only when a workbook is read or written."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from shardline.cli.args import (
    add_chip_args,
    add_force_arg,
    add_json_arg,
    add_operand_dtypes,
    add_sheet_input,
)
from shardline.cli.common import emit_json
from shardline.cli.compute import compute_sheet
from shardline.errors import InputError

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    sh = sub.add_parser(
        "sheet",
        help="roofline of every (M, K, N) row of a .csv/.xlsx sheet",
        description="Read rows with M, K and N columns (optional count, dtype, name) and add "
        "FLOPs, "
        "bytes, intensity, bound and times. Writes .xlsx, .csv, .json or .md.",
    )
    sh.add_argument("input", metavar="IN", help="a .csv, .tsv or .xlsx sheet")
    sh.add_argument(
        "-o",
        "--output",
        "--out",
        dest="output",
        metavar="OUT",
        default=None,
        help="write every row with its results (.xlsx, .csv, .json or .md)",
    )
    add_force_arg(sh, "OUT if it exists (never the input)")
    add_sheet_input(sh)
    add_chip_args(sh)
    add_operand_dtypes(sh, "row")
    sh.add_argument("--accumulate", action="store_true", help="C += A.B: the old C is read too")
    add_json_arg(sh)
    sh.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from shardline.io.sheet_results import output_table
    from shardline.io.sheets import check_output_path, table_payload, write_table
    from shardline.report.sheet_text import render_sheet

    out = (
        check_output_path(args.output, [args.input], force=args.force)
        if args.output is not None
        else None
    )
    result = compute_sheet(args, args.input, accumulate=args.accumulate)
    table = output_table(result, title=f"roofline of {Path(args.input).name} on {result.chip.name}")
    if out is not None:
        write_table(out, table)
    if args.json and out is not None:
        emit_json({"input": args.input, "output": str(out), "summary": result.summary})
    elif args.json:
        emit_json({"input": args.input, **table_payload(table)})
    else:
        text = render_sheet(result, args.input)
        if out is not None:
            sheets = " (sheets 'results' and 'summary')" if out.suffix.lower() == ".xlsx" else ""
            text += f"wrote {out}: {table.n_rows:,} rows, {len(table.columns)} columns{sheets}\n"
        sys.stdout.write(text)
    if result.problems:
        where = f"; the other rows are in {out}" if out is not None else ""
        raise InputError(
            f"{len(result.problems)} bad cell(s) in {args.input}, those rows not computed: "
            f"{result.problems_text()}{where}"
        )
    return 0
