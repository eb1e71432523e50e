"""`shardline sheet`, `template`, `explain`, `plot` and `report`: where people work (spreadsheets,
write-ups, plots, a shareable HTML page). Heavy imports (openpyxl, matplotlib) stay in the handlers.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from shardline.cli.common import add_chip_args, add_json_arg, emit_json, overrides_from_args
from shardline.errors import InputError
from shardline.options import RateOverrides

__all__ = ["register"]


def _add_operand_dtypes(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--a-dtype", help="storage dtype of A (activations); default: the row's dtype"
    )
    parser.add_argument("--b-dtype", help="storage dtype of B (weights); default: the row's dtype")
    parser.add_argument("--out-dtype", help="storage dtype of C; default: the row's dtype")


def _add_sheet_input(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--sheet",
        default=None,
        metavar="NAME",
        help="worksheet to read in an .xlsx (default: the first)",
    )


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
    sh.add_argument(
        "--force", action="store_true", help="replace OUT if it exists (never the input)"
    )
    _add_sheet_input(sh)
    add_chip_args(sh)
    _add_operand_dtypes(sh)
    sh.add_argument("--accumulate", action="store_true", help="C += A.B: the old C is read too")
    add_json_arg(sh)
    sh.set_defaults(func=run_sheet)

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
    _add_sheet_input(tp)
    tp.add_argument(
        "--rows",
        type=int,
        default=None,
        help="formula rows (default 200, or the rows of --from if more)",
    )
    tp.add_argument(
        "--force", action="store_true", help="replace OUT if it exists (never an input)"
    )
    tp.set_defaults(func=run_template)

    ex = sub.add_parser(
        "explain",
        help="a Markdown answer: assumptions, the bound first, derivation, sanity check",
        description="Explain a matmul, einsum or sharded matmul as a strong written answer would. "
        "Takes exactly the arguments of the command it explains.",
    )
    ex_sub = ex.add_subparsers(dest="what", metavar="WHAT", parser_class=type(ex))
    ex_sub.required = True
    _add_explain_targets(ex_sub)

    pl = sub.add_parser(
        "plot",
        help="plots (PNG or SVG): roofline, batch, strategies",
        description="Deterministic matplotlib plots written to .png or .svg.",
    )
    pl_sub = pl.add_subparsers(dest="plot", metavar="PLOT", parser_class=type(pl))
    pl_sub.required = True
    _add_plot_targets(pl_sub)

    rp = sub.add_parser(
        "report",
        help="one self-contained offline HTML page: interactive roofline, curves, table",
        description="Write a single HTML file (no network, no CDN) with interactive plots and the "
        "table of a sheet's rows or a workload's layers, for sharing with a team.",
    )
    rp.add_argument(
        "input", metavar="IN", help="a .csv/.xlsx sheet of (M, K, N) rows or a workload .toml"
    )
    rp.add_argument("--html", required=True, metavar="OUT.html", help="the page to write")
    rp.add_argument("--force", action="store_true", help="replace OUT.html if it exists")
    _add_sheet_input(rp)
    add_chip_args(rp)
    _add_operand_dtypes(rp)
    rp.set_defaults(func=run_report)


def _write_text(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8")


# ------------------------------------------------------------------------------------------------
# sheet


def _choice(args: argparse.Namespace) -> Any:
    from shardline.io.sheet_results import DtypeChoice

    return DtypeChoice(
        dtype=args.dtype,
        a_dtype=args.a_dtype,
        b_dtype=args.b_dtype,
        out_dtype=args.out_dtype,
        compute_dtype=args.compute_dtype,
    )


def compute_sheet(args: argparse.Namespace) -> Any:
    """Read the sheet named by `args.input` and compute every row (a SheetResult)."""
    from shardline.io.sheet_results import roofline_rows
    from shardline.io.sheets import read_shape_rows

    table = read_shape_rows(args.input, args.sheet)
    overrides = overrides_from_args(args)
    return roofline_rows(
        table,
        args.hw,
        _choice(args),
        accumulate=args.accumulate,
        flops_per_s=overrides["flops_per_s"],
        mem_bytes_per_s=overrides["mem_bytes_per_s"],
    )


def run_sheet(args: argparse.Namespace) -> int:
    from shardline.io.sheet_results import output_table
    from shardline.io.sheets import check_output_path, write_table
    from shardline.report.sheet_text import render_sheet

    out = check_output_path(args.output, [args.input], force=args.force) if args.output else None
    result = compute_sheet(args)
    table = output_table(result, title=f"roofline of {Path(args.input).name} on {result.chip.name}")
    if out is not None:
        write_table(out, table)
    if args.json:
        if out is not None:
            emit_json({"input": args.input, "output": str(out), "summary": result.summary})
        else:
            from shardline.io.sheets import table_payload

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


# ------------------------------------------------------------------------------------------------
# template


def run_template(args: argparse.Namespace) -> int:
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


# ------------------------------------------------------------------------------------------------
# explain


def _add_md_output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o",
        "--out",
        dest="out",
        metavar="OUT.md",
        default=None,
        help="also write the Markdown to this file",
    )
    parser.add_argument("--force", action="store_true", help="replace OUT.md if it exists")


def _add_explain_targets(ex_sub: argparse._SubParsersAction) -> None:
    from shardline.cli.cmd_roofline import add_einsum_args, add_matmul_args

    mm = ex_sub.add_parser(
        "matmul", help="explain C[M,N] = A[M,K] B[K,N] (same arguments as matmul)"
    )
    add_matmul_args(mm)
    _add_md_output(mm)
    mm.set_defaults(func=run_explain_matmul)
    es = ex_sub.add_parser("einsum", help="explain an einsum (same arguments as einsum)")
    add_einsum_args(es)
    _add_md_output(es)
    es.set_defaults(func=run_explain_einsum)
    try:
        from shardline.cli.cmd_shard import add_shard_args
    except ImportError:
        return
    sh = ex_sub.add_parser("shard", help="explain a sharded matmul (same arguments as shard)")
    add_shard_args(sh)
    _add_md_output(sh)
    sh.set_defaults(func=run_explain_shard)


def _emit_markdown(text: str, args: argparse.Namespace) -> int:
    if args.out:
        from shardline.io.sheets import atomic_write, check_output_path

        out = check_output_path(args.out, force=args.force, suffixes=(".md",))
        atomic_write(out, lambda tmp: _write_text(tmp, text))
    sys.stdout.write(text)
    return 0


def _explain_any(result: Any, args: argparse.Namespace, comparison: Any = None) -> int:
    from shardline.roofline import RooflineResult

    if isinstance(result, RooflineResult):
        from shardline.report.markdown import explain_roofline
        from shardline.variants import roofline_variants

        return _emit_markdown(explain_roofline(result, roofline_variants(result)), args)
    from shardline.report.markdown_sharded import explain_sharded
    from shardline.variants import single_device

    return _emit_markdown(explain_sharded(result, comparison, single=single_device(result)), args)


def run_explain_matmul(args: argparse.Namespace) -> int:
    from shardline.cli.cmd_roofline import compute_matmul

    if args.out:  # check the path before the work
        from shardline.io.sheets import check_output_path

        check_output_path(args.out, force=args.force, suffixes=(".md",))
    return _explain_any(compute_matmul(args), args)


def run_explain_einsum(args: argparse.Namespace) -> int:
    from shardline.cli.cmd_roofline import compute_einsum

    if args.out:
        from shardline.io.sheets import check_output_path

        check_output_path(args.out, force=args.force, suffixes=(".md",))
    return _explain_any(compute_einsum(args), args)


def run_explain_shard(args: argparse.Namespace) -> int:
    from shardline.cli.cmd_shard import compute_shard

    if args.out:
        from shardline.io.sheets import check_output_path

        check_output_path(args.out, force=args.force, suffixes=(".md",))
    result = compute_shard(args)
    try:  # the best of every strategy for the same multiply, for "what would help"
        from shardline.cli.cmd_shard import compute_compare

        comparison = compute_compare(args)
    except (ImportError, InputError):
        comparison = None
    return _explain_any(result, args, comparison)


# ------------------------------------------------------------------------------------------------
# plot


def _add_plot_output(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o", "--out", dest="out", metavar="OUT", required=True, help="a .png or .svg file"
    )
    parser.add_argument("--force", action="store_true", help="replace OUT if it exists")


def _add_plot_targets(pl_sub: argparse._SubParsersAction) -> None:
    rf = pl_sub.add_parser(
        "roofline",
        help="log-log roofline, one roof per dtype or level, your operations as labeled points",
    )
    rf.add_argument(
        "--from",
        dest="source",
        metavar="IN",
        default=None,
        help="a .csv/.xlsx sheet of (M, K, N) rows: one point per row",
    )
    _add_sheet_input(rf)
    rf.add_argument(
        "--matmul",
        action="append",
        default=[],
        metavar="MxKxN[=NAME]",
        help="an operation to place, e.g. 16x4096x16384=decode (repeatable)",
    )
    rf.add_argument(
        "--no-levels", action="store_true", help="leave out the L2 / shared-memory roofs"
    )
    add_chip_args(rf)
    _add_operand_dtypes(rf)
    _add_plot_output(rf)
    add_json_arg(rf)
    rf.set_defaults(func=run_plot_roofline)

    bt = pl_sub.add_parser(
        "batch", help="achieved FLOP/s versus batch for X[B,D] W[D,F] (seed 001 Q3)"
    )
    bt.add_argument(
        "--shapes",
        required=True,
        metavar="DxF[,DxF...]",
        help="the (D, F) of each curve, e.g. 4096x4096,1024x1024",
    )
    bt.add_argument(
        "--batch",
        default="1:511",
        metavar="START:STOP",
        help="batch sizes, both ends included (default 1:511)",
    )
    add_chip_args(bt)
    _add_operand_dtypes(bt)
    _add_plot_output(bt)
    add_json_arg(bt)
    bt.set_defaults(func=run_plot_batch)
    try:
        from shardline.cli.cmd_shard import add_compare_args
    except ImportError:
        return
    st = pl_sub.add_parser(
        "strategies",
        help="time by compute, memory and network per sharding "
        "strategy (same arguments as compare)",
    )
    add_compare_args(st)
    st.add_argument(
        "--top",
        type=int,
        default=10,
        metavar="N",
        help="strategies plotted, fastest first (default 10)",
    )
    _add_plot_output(st)
    add_json_arg(st)
    st.set_defaults(func=run_plot_strategies)


def _plot_path(args: argparse.Namespace, inputs: list[str]) -> Path:
    from shardline.io.sheets import check_output_path
    from shardline.report.plots import PLOT_SUFFIXES

    return check_output_path(args.out, inputs, force=args.force, suffixes=PLOT_SUFFIXES)


def _write_plot(out: Path, render: Any) -> None:
    from shardline.io.sheets import atomic_write

    # the temporary file keeps the suffix so that matplotlib picks the format from it
    atomic_write(out, lambda tmp: _render_to(tmp, out.suffix, render))


def _render_to(tmp: Path, suffix: str, render: Any) -> None:
    named = tmp.with_name(tmp.name + suffix)
    try:
        render(named)
        named.replace(tmp)
    finally:
        named.unlink(missing_ok=True)


def _parse_shape(text: str, parts: int, what: str) -> list[int]:
    from shardline.cli.common import dim_arg

    pieces = text.lower().replace("×", "x").split("x")
    if len(pieces) != parts:
        raise InputError(f"malformed {what} {text!r}: expected {parts} sizes joined by 'x'")
    return [dim_arg(p, f"{what} {text}") for p in pieces]


def _batch_range(text: str) -> Any:
    import numpy as np

    from shardline.cli.common import dim_arg

    if ":" not in text:
        raise InputError(f"malformed --batch {text!r}: expected START:STOP, e.g. 1:511")
    start_text, stop_text = text.split(":", 1)
    start, stop = dim_arg(start_text, "--batch start"), dim_arg(stop_text, "--batch stop")
    if stop < start:
        raise InputError(f"--batch {text}: STOP must be at least START")
    if stop - start > 1_000_000:
        raise InputError(f"--batch {text}: at most 1,000,000 batch sizes")
    return np.arange(start, stop + 1)


def run_plot_batch(args: argparse.Namespace) -> int:
    from shardline.curves import batch_curves
    from shardline.options import Precision, RateOverrides
    from shardline.report.plots import render_batch
    from shardline.units import fmt_int, fmt_rate

    out = _plot_path(args, [])
    shapes = [
        tuple(_parse_shape(s.strip(), 2, "shape DxF")) for s in args.shapes.split(",") if s.strip()
    ]
    if not shapes:
        raise InputError("--shapes needs at least one DxF")
    batch = _batch_range(args.batch)
    precision = Precision(
        args.dtype,
        {"a": args.a_dtype, "b": args.b_dtype, "out": args.out_dtype},
        args.compute_dtype,
    )
    rates = RateOverrides(**overrides_from_args(args))
    plot = batch_curves([(d, f) for d, f in shapes], batch, args.hw, precision, rates)
    _write_plot(out, lambda p: render_batch(plot, p))
    if args.json:
        emit_json(
            {
                "output": str(out),
                "chip": plot.chip_name,
                "dtypes": plot.dtypes,
                "flops_per_s": plot.flops_per_s,
                "mem_bytes_per_s": plot.mem_bytes_per_s,
                "batch": batch.tolist(),
                "curves": [
                    {
                        "label": c.label,
                        "d": d,
                        "f": f,
                        "critical_batch": c.critical_x,
                        "achieved_flops_per_s": c.y.tolist(),
                    }
                    for c, (d, f) in zip(plot.curves, shapes, strict=True)
                ],
            }
        )
        return 0
    lines = []
    for c in plot.curves:
        if c.critical_x is None:
            turn = "memory-bound at every batch (no batch reaches the ridge)"
        elif c.critical_x <= batch[-1]:
            turn = (
                f"compute-bound from B = {fmt_int(c.critical_x)} "
                f"(reaches the {fmt_rate(plot.flops_per_s)} peak)"
            )
        else:
            turn = (
                f"memory-bound up to B = {fmt_int(batch[-1])}; "
                f"compute-bound from B = {fmt_int(c.critical_x)}"
            )
        lines.append(
            f"{c.label}: {turn}; achieved {fmt_rate(c.y[0])} at B = {fmt_int(batch[0])}, "
            f"{fmt_rate(c.y[-1])} at B = {fmt_int(batch[-1])}"
        )
    lines.append(
        f"wrote {out}: {len(plot.curves)} curves of achieved {plot.compute_dtype} FLOP/s = "
        f"F / max(F/P, Q/W), P = {plot.flops_per_s:.3g} FLOP/s, W = {plot.mem_bytes_per_s:.3g} "
        f"B/s, exact bytes Q = s_x·B·D + s_w·D·F + s_y·B·F "
        f"({plot.dtypes['a']}, {plot.dtypes['b']}, {plot.dtypes['out']}), "
        f"B = {fmt_int(batch[0])}..{fmt_int(batch[-1])}"
    )
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


def _roof_points(args: argparse.Namespace) -> tuple[list[Any], list[str]]:
    """Points from --from (a sheet, one vectorized computation) and --matmul shapes."""
    import numpy as np

    from shardline.report.plots import RoofPoint

    overrides = overrides_from_args(args)
    points: list[Any] = []
    problems: list[str] = []
    if args.source:
        result = compute_sheet(
            argparse.Namespace(**{**vars(args), "input": args.source, "accumulate": False})
        )
        labels = result.table.labels()
        cols = result.columns
        achieved = cols["flops"] / cols["t_lower_s"]
        for i in np.flatnonzero(result.ok).tolist():
            points.append(
                RoofPoint(
                    labels[i],
                    float(cols["intensity_flop_per_byte"][i]),
                    float(achieved[i]),
                    str(cols["bound"][i]),
                )
            )
        if result.problems:
            problems.append(f"{args.source}: {result.problems_text()}")
    for text in args.matmul:
        from shardline.predict import with_prediction
        from shardline.roofline import matmul

        shape, _, name = text.partition("=")
        m, k, n = _parse_shape(shape.strip(), 3, "--matmul")
        r = with_prediction(
            matmul(
                m,
                k,
                n,
                hw=args.hw,
                dtype=args.dtype,
                a_dtype=args.a_dtype,
                b_dtype=args.b_dtype,
                out_dtype=args.out_dtype,
                compute_dtype=args.compute_dtype,
                rates=RateOverrides(**overrides),
            )
        )
        points.append(
            RoofPoint(
                name.strip() or shape.strip(),
                float(r.intensity_flop_per_byte),
                float(r.flops) / float(r.t_lower_s),
                str(r.bound),
            )
        )
    return points, problems


def run_plot_roofline(args: argparse.Namespace) -> int:
    from shardline.hardware import resolve_chip
    from shardline.report.plots import render_roofline, roofline_data

    out = _plot_path(args, [args.source] if args.source else [])
    if args.sheet and not args.source:
        raise InputError("--sheet needs --from")
    chip = resolve_chip(args.hw)
    overrides = overrides_from_args(args)
    compute = args.compute_dtype or args.dtype
    if overrides["flops_per_s"] is not None or overrides["mem_bytes_per_s"] is not None:
        chip = chip.with_overrides(compute_dtype=compute, **overrides)
    points, problems = _roof_points(args)
    plot = roofline_data(chip, points, levels=not args.no_levels, level_dtype=compute)
    _write_plot(out, lambda p: render_roofline(plot, p))
    n_mem = sum(p.bound == "memory" for p in points)
    if args.json:
        emit_json(
            {
                "output": str(out),
                "chip": chip.name,
                "roofs": [
                    {"label": r.label, "flops_per_s": r.flops_per_s, "bytes_per_s": r.bytes_per_s}
                    for r in plot.roofs
                ],
                "points": [
                    {
                        "label": p.label,
                        "intensity_flop_per_byte": p.intensity_flop_per_byte,
                        "flops_per_s": p.flops_per_s,
                        "bound": p.bound,
                    }
                    for p in points
                ],
            }
        )
    else:
        sys.stdout.write(
            f"{n_mem} of {len(points)} operations memory-bound on {chip.display_name}\n"
            f"wrote {out}: {len(plot.roofs)} roofs ({'; '.join(r.label for r in plot.roofs)})"
            f", {len(points)} points\n"
        )
    if problems:
        raise InputError("; ".join(problems))
    return 0


def run_plot_strategies(args: argparse.Namespace) -> int:
    from shardline.cli.cmd_shard import compute_compare
    from shardline.report.plots import render_strategies, strategy_bars
    from shardline.units import fmt_int, fmt_time

    if args.top < 1:
        raise InputError("--top must be at least 1")
    out = _plot_path(args, [])
    comparison = compute_compare(args)
    if not comparison.strategies:
        raise InputError(
            f"no strategy splits M={args.m}, K={args.k}, N={args.n} evenly over "
            f"{args.devices} devices (try --pad)"
        )
    bars = strategy_bars(comparison, args.top)
    title = (
        f"C[M,N] = A[M,K]·B[K,N], M={fmt_int(comparison.m)}, K={fmt_int(comparison.k)}, "
        f"N={fmt_int(comparison.n)} over {comparison.devices} devices on {comparison.hardware} "
        f"({comparison.dtype}, output {comparison.output})"
    )
    _write_plot(out, lambda p: render_strategies(bars, p, title=title))
    if args.json:
        emit_json(
            {
                "output": str(out),
                "strategies": [
                    {
                        "label": b.label,
                        "bound": b.bound,
                        "t_s": b.t_lower_s,
                        "t_compute_s": b.t_compute_s,
                        "t_memory_s": b.t_memory_s,
                        "t_network_s": b.t_network_s,
                    }
                    for b in bars
                ],
            }
        )
        return 0
    best = bars[0]
    lines = [
        f"fastest: {best.label}, {best.bound}-bound, {fmt_time(best.t_lower_s)} "
        f"(compute {fmt_time(best.t_compute_s)}, memory {fmt_time(best.t_memory_s)}, "
        f"network {fmt_time(best.t_network_s)})"
    ]
    for b in bars[1:]:
        lines.append(f"  {b.label}: {b.bound}-bound, {fmt_time(b.t_lower_s)}")
    lines.append(
        f"wrote {out}: {len(bars)} of {len(comparison.strategies)} strategies, compute / "
        "memory / network time per device each"
    )
    sys.stdout.write("\n".join(lines) + "\n")
    return 0


# ------------------------------------------------------------------------------------------------
# report

SHEET_SUFFIXES = (".csv", ".tsv", ".xlsx", ".xlsm", ".xls")


def run_report(args: argparse.Namespace) -> int:
    from shardline.curves import sheet_curves
    from shardline.io.sheets import atomic_write, check_output_path
    from shardline.report.html import render_html, report_from_sheet, report_from_stack

    out = check_output_path(args.html, [args.input], force=args.force, suffixes=(".html", ".htm"))
    name = Path(args.input).name
    problems = ""
    if Path(args.input).suffix.lower() in SHEET_SUFFIXES:
        result = compute_sheet(argparse.Namespace(**{**vars(args), "accumulate": False}))
        data = report_from_sheet(result, name, sheet_curves(result))
        if result.problems:
            problems = (
                f"{len(result.problems)} bad cell(s) in {args.input}, those rows not computed: "
                f"{result.problems_text()}; the page lists them"
            )
    else:
        from shardline.io.workload_toml import load_workload
        from shardline.stack import stack

        if args.sheet:
            raise InputError("--sheet applies to .xlsx inputs")
        workload = load_workload(args.input)
        data = report_from_stack(stack(workload, args.hw, **overrides_from_args(args)), name)
    page = render_html(data)
    atomic_write(out, lambda tmp: _write_text(tmp, page))
    n_mem = sum(1 for p in data.points if p[3] == "memory")
    sys.stdout.write(
        f"{n_mem} of {len(data.points)} points memory-bound on {data.chip.display_name}\n"
        f"wrote {out}: self-contained HTML ({len(page.encode('utf-8')):,} bytes, no network "
        f"access), {len(data.points)} points, {len(data.rows)} table rows, "
        f"{len(data.curves)} curves\n"
    )
    if problems:
        raise InputError(problems)
    return 0
