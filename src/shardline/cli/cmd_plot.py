"""`shardline plot roofline|batch|strategies -o OUT.png`: deterministic matplotlib plots (PNG or
SVG). matplotlib and numpy are imported only inside the handlers."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from shardline.basics.values import JSONDict
from shardline.cli.args import (
    add_chip_args,
    add_compare_args,
    add_json_arg,
    add_operand_dtypes,
    add_plot_output,
    add_sheet_input,
)
from shardline.cli.common import dim_arg, emit_json, overrides_from_args, parse_shape
from shardline.cli.compute import compute_compare, compute_sheet
from shardline.errors import InputError

if TYPE_CHECKING:
    import numpy as np

    from shardline.report.plots import BatchPlot, RooflinePlot, RoofPoint, StrategyBar

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    pl = sub.add_parser(
        "plot",
        help="plots (PNG or SVG): roofline, batch, strategies",
        description="Deterministic matplotlib plots written to .png or .svg.",
    )
    pl_sub = pl.add_subparsers(dest="plot", metavar="PLOT", parser_class=type(pl))
    pl_sub.required = True
    _add_roofline(pl_sub)
    _add_batch(pl_sub)
    _add_strategies(pl_sub)


def _add_roofline(pl_sub: argparse._SubParsersAction) -> None:
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
    add_sheet_input(rf)
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
    rf.add_argument(
        "--cheatsheet",
        action="store_true",
        help="a printable one-page sheet of the chip (.png, .svg or .pdf): peaks, bandwidth, "
        "ridges, capacity and the critical M of common shapes (--dtype: their dtype); "
        "the same facts on stdout",
    )
    add_chip_args(rf)
    add_operand_dtypes(rf, "row")
    add_plot_output(rf)
    add_json_arg(rf)
    rf.set_defaults(func=run_roofline)


def _add_batch(pl_sub: argparse._SubParsersAction) -> None:
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
    add_operand_dtypes(bt, "row")
    add_plot_output(bt)
    add_json_arg(bt)
    bt.set_defaults(func=run_batch)


def _add_strategies(pl_sub: argparse._SubParsersAction) -> None:
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
    add_plot_output(st)
    add_json_arg(st)
    st.set_defaults(func=run_strategies)


# --- writing a plot --------------------------------------------------------------------------


def _plot_path(args: argparse.Namespace, inputs: list[str]) -> Path:
    from shardline.io.sheets import check_output_path
    from shardline.report.plots import PLOT_SUFFIXES

    return check_output_path(args.out, inputs, force=args.force, suffixes=PLOT_SUFFIXES)


def _write_plot(out: Path, render: Callable[[Path], None]) -> None:
    from shardline.io.sheets import atomic_write

    # the temporary file keeps the suffix so that matplotlib picks the format from it
    atomic_write(out, lambda tmp: _render_to(tmp, out.suffix, render))


def _render_to(tmp: Path, suffix: str, render: Callable[[Path], None]) -> None:
    named = tmp.with_name(tmp.name + suffix)
    try:
        render(named)
        named.replace(tmp)
    finally:
        named.unlink(missing_ok=True)


# --- plot batch ------------------------------------------------------------------------------


def _batch_range(text: str) -> np.ndarray:
    import numpy as np

    if ":" not in text:
        raise InputError(f"malformed --batch {text!r}: expected START:STOP, e.g. 1:511")
    start_text, stop_text = text.split(":", 1)
    start, stop = dim_arg(start_text, "--batch start"), dim_arg(stop_text, "--batch stop")
    if stop < start:
        raise InputError(f"--batch {text}: STOP must be at least START")
    if stop - start > 1_000_000:
        raise InputError(f"--batch {text}: at most 1,000,000 batch sizes")
    return np.arange(start, stop + 1)


def run_batch(args: argparse.Namespace) -> int:
    from shardline.answers.curves import batch_curves
    from shardline.basics.options import Precision, RateOverrides
    from shardline.report.plots import render_batch

    out = _plot_path(args, [])
    pairs = [parse_shape(s.strip(), 2, "shape DxF") for s in args.shapes.split(",") if s.strip()]
    shapes = [(d, f) for d, f in pairs]
    if not shapes:
        raise InputError("--shapes needs at least one DxF")
    batch = _batch_range(args.batch)
    precision = Precision(
        args.dtype,
        {"a": args.a_dtype, "b": args.b_dtype, "out": args.out_dtype},
        args.compute_dtype,
    )
    rates = RateOverrides(**overrides_from_args(args))
    plot = batch_curves(shapes, batch, args.hw, precision, rates)
    _write_plot(out, lambda p: render_batch(plot, p))
    if args.json:
        emit_json(_batch_json(plot, batch, shapes, out))
    else:
        from shardline.report.plot_text import batch_summary

        sys.stdout.write(batch_summary(plot, batch, out))
    return 0


def _batch_json(
    plot: BatchPlot, batch: np.ndarray, shapes: list[tuple[int, int]], out: Path
) -> JSONDict:
    return {
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


# --- plot roofline ---------------------------------------------------------------------------


def _sheet_points(args: argparse.Namespace) -> tuple[list[RoofPoint], list[str]]:
    """One point per good row of the --from sheet (one vectorized computation)."""
    import numpy as np

    from shardline.report.plots import RoofPoint

    result = compute_sheet(args, args.source)
    labels = result.table.labels()
    cols = result.columns
    achieved = cols["flops"] / cols["t_lower_s"]
    points = [
        RoofPoint(
            labels[i],
            float(cols["intensity_flop_per_byte"][i]),
            float(achieved[i]),
            str(cols["bound"][i]),
        )
        for i in np.flatnonzero(result.ok).tolist()
    ]
    problems = [f"{args.source}: {result.problems_text()}"] if result.problems else []
    return points, problems


def _matmul_point(args: argparse.Namespace, text: str) -> RoofPoint:
    """One --matmul MxKxN[=NAME] as a point."""
    from shardline.basics.options import RateOverrides
    from shardline.ops.predict import with_prediction
    from shardline.ops.roofline import matmul
    from shardline.report.plots import RoofPoint

    overrides = overrides_from_args(args)
    shape, _, name = text.partition("=")
    m, k, n = parse_shape(shape.strip(), 3, "--matmul")
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
    return RoofPoint(
        name.strip() or shape.strip(),
        float(r.intensity_flop_per_byte),
        float(r.flops) / float(r.t_lower_s),
        str(r.bound),
    )


def run_roofline(args: argparse.Namespace) -> int:
    from shardline.hardware import resolve_chip
    from shardline.report.plots import render_roofline, roofline_data

    if args.cheatsheet:
        return _run_cheatsheet(args)
    out = _plot_path(args, [args.source] if args.source else [])
    if args.sheet and not args.source:
        raise InputError("--sheet needs --from")
    chip = resolve_chip(args.hw)
    overrides = overrides_from_args(args)
    compute = args.compute_dtype or args.dtype
    if overrides["flops_per_s"] is not None or overrides["mem_bytes_per_s"] is not None:
        chip = chip.with_overrides(compute_dtype=compute, **overrides)
    points, problems = _sheet_points(args) if args.source else ([], [])
    points += [_matmul_point(args, text) for text in args.matmul]
    plot = roofline_data(chip, points, levels=not args.no_levels, level_dtype=compute)
    _write_plot(out, lambda p: render_roofline(plot, p))
    n_mem = sum(p.bound == "memory" for p in points)
    if args.json:
        emit_json(_roofline_json(plot, points, chip.name, out))
    else:
        sys.stdout.write(
            f"{n_mem} of {len(points)} operations memory-bound on {chip.display_name}\n"
            f"wrote {out}: {len(plot.roofs)} roofs ({'; '.join(r.label for r in plot.roofs)})"
            f", {len(points)} points\n"
        )
    if problems:
        raise InputError("; ".join(problems))
    return 0


def _run_cheatsheet(args: argparse.Namespace) -> int:
    """`plot roofline --cheatsheet`: the chip's one-page sheet and its facts."""
    from shardline.answers.cheatsheet import cheatsheet
    from shardline.hardware import resolve_chip
    from shardline.io.sheets import check_output_path
    from shardline.report.cheatsheet import SHEET_SUFFIXES, render_cheatsheet, sheet_text

    if args.source or args.matmul:
        raise InputError("--cheatsheet describes the chip alone: leave out --from and --matmul")
    out = check_output_path(args.out, [], force=args.force, suffixes=SHEET_SUFFIXES)
    chip = resolve_chip(args.hw)
    overrides = overrides_from_args(args)
    dtype = args.compute_dtype or args.dtype
    if overrides["flops_per_s"] is not None or overrides["mem_bytes_per_s"] is not None:
        chip = chip.with_overrides(compute_dtype=dtype, **overrides)
    sheet = cheatsheet(chip, dtype)
    _write_plot(out, lambda p: render_cheatsheet(sheet, chip, p))
    if args.json:
        emit_json({"output": str(out), **sheet.to_dict()})
    else:
        sys.stdout.write(sheet_text(sheet, out))
    return 0


def _roofline_json(
    plot: RooflinePlot, points: list[RoofPoint], chip_name: str, out: Path
) -> JSONDict:
    return {
        "output": str(out),
        "chip": chip_name,
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


# --- plot strategies -------------------------------------------------------------------------


def run_strategies(args: argparse.Namespace) -> int:
    from shardline.basics.units import fmt_int
    from shardline.report.plots import render_strategies, strategy_bars

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
        emit_json({"output": str(out), "strategies": [_bar_json(b) for b in bars]})
    else:
        from shardline.report.plot_text import strategies_summary

        sys.stdout.write(strategies_summary(bars, comparison, out))
    return 0


def _bar_json(b: StrategyBar) -> JSONDict:
    return {
        "label": b.label,
        "bound": b.bound,
        "t_s": b.t_lower_s,
        "t_compute_s": b.t_compute_s,
        "t_memory_s": b.t_memory_s,
        "t_network_s": b.t_network_s,
    }
