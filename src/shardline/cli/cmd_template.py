"""`shardline template OUT.xlsx`: a live-formula roofline workbook for a chip, which works in
Excel, LibreOffice and Google Sheets without shardline."""

from __future__ import annotations

import argparse
import sys

from shardline.cli.args import add_chip_args, add_force_arg, add_sheet_input
from shardline.cli.common import overrides_from_args
from shardline.errors import InputError

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    tp = sub.add_parser(
        "template",
        help="write a live-formula roofline workbook (.xlsx) for a chip",
        description="Write an .xlsx whose cells compute FLOPs, bytes, intensity, bound and times "
        "with "
        "spreadsheet formulas from a hardware block; it works in Excel, LibreOffice and "
        "Google Sheets without shardline.",
    )
    tp.add_argument("output", metavar="OUT", help="the .xlsx to write")
    add_chip_args(tp, dtype=False)
    tp.add_argument(
        "--dtype",
        default="bf16",
        help="default storage dtype for rows without one (default bf16); --flops-per-s "
        "overrides this dtype's peak",
    )
    tp.add_argument(
        "--from",
        dest="source",
        default=None,
        metavar="IN",
        help="fill the rows from a .csv/.xlsx sheet of (M, K, N) rows",
    )
    add_sheet_input(tp)
    tp.add_argument(
        "--rows",
        type=int,
        default=None,
        help="formula rows (default 200, or the rows of --from if more)",
    )
    add_force_arg(tp, "OUT if it exists (never an input)")
    tp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from shardline.hardware import resolve_chip
    from shardline.io.sheets import atomic_write, check_output_path, read_shape_rows
    from shardline.io.template import (
        DEFAULT_ROWS,
        EXAMPLE_ROWS,
        LAYOUT,
        rows_from_table,
        write_template,
    )

    inputs = [args.source] if args.source else []
    out = check_output_path(args.output, inputs, force=args.force, suffixes=(".xlsx",))
    overrides = overrides_from_args(args)
    chip = resolve_chip(args.hw).with_overrides(compute_dtype=args.dtype, **overrides)
    if args.source:
        rows = rows_from_table(read_shape_rows(args.source, args.sheet).require_ok())
    else:
        if args.sheet:
            raise InputError("--sheet needs --from")
        rows = list(EXAMPLE_ROWS)
    n_rows = args.rows if args.rows is not None else max(DEFAULT_ROWS, len(rows))
    atomic_write(out, lambda tmp: write_template(tmp, chip, rows, dtype=args.dtype, n_rows=n_rows))
    first = LAYOUT.first_row
    sys.stdout.write(
        f"wrote {out}: live roofline template for {chip.display_name} ({chip.name}), "
        f"{max(n_rows, len(rows))} formula rows ({len(rows)} filled, from row {first}); edit the "
        f"yellow cells: HBM bytes/s in {LAYOUT.bandwidth_cell.replace('$', '')}, dtype sizes and "
        f"peaks in {LAYOUT.dtype_range.replace('$', '')}, shapes in columns A-H\n"
    )
    return 0
