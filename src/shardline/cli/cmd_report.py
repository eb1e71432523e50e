"""`shardline report IN --html OUT.html` (or `--model NAME`): one self-contained offline HTML page
(interactive roofline, curves, table) of a sheet's rows or a workload's layers."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from shardline.cli.args import (
    add_chip_args,
    add_force_arg,
    add_operand_dtypes,
    add_workload_args,
)
from shardline.cli.common import load_from_args, overrides_from_args, write_text
from shardline.cli.compute import compute_sheet
from shardline.cli.execution_args import add_degree_args, add_execution_args
from shardline.errors import InputError

if TYPE_CHECKING:
    from shardline.planning.results import PlanResult
    from shardline.report.figures import Figure
    from shardline.report.html import ReportData

__all__ = ["register", "run"]

SHEET_SUFFIXES = (".csv", ".tsv", ".xlsx", ".xlsm", ".xls")


def register(sub: argparse._SubParsersAction) -> None:
    rp = sub.add_parser(
        "report",
        help="one self-contained offline HTML page: interactive roofline, curves, table",
        description="Write a single HTML file (no network, no CDN) with interactive plots and the "
        "table of a sheet's rows or a workload's layers, for sharing with a team.",
    )
    rp.add_argument("--html", required=True, metavar="OUT.html", help="the page to write")
    add_force_arg(rp, "OUT.html if it exists")
    add_workload_args(
        rp, dtype=False
    )  # IN (a sheet or a workload .toml) or --model NAME, and overrides
    add_chip_args(rp)
    add_operand_dtypes(rp, "row")
    plan = rp.add_argument_group("step timeline (a workload .toml only)")
    plan.add_argument(
        "--devices",
        default=None,
        metavar="D",
        help="also plan the workload over D devices and draw the recommended plan's step",
    )
    add_degree_args(rp)
    add_execution_args(rp)
    rp.set_defaults(func=run)


def _data(args: argparse.Namespace) -> tuple[ReportData, str]:
    """The page's data, and the problems of a sheet's bad rows ("" when none)."""
    from shardline.answers.curves import sheet_curves
    from shardline.report.html import report_from_sheet, report_from_stack

    source = args.workload
    if source is not None and args.model is None and Path(source).suffix.lower() in SHEET_SUFFIXES:
        result = compute_sheet(args, source)
        problems = ""
        if result.problems:
            problems = (
                f"{len(result.problems)} bad cell(s) in {source}, those rows not computed: "
                f"{result.problems_text()}; the page lists them"
            )
        if args.devices is not None:
            raise InputError("--devices applies to a workload .toml, not a sheet")
        return report_from_sheet(result, Path(source).name, sheet_curves(result)), problems
    from shardline.workload.stack import stack

    if args.sheet and args.model is None:
        raise InputError("--sheet applies to .xlsx inputs")
    workload = load_from_args(args)  # a workload .toml, or the zoo model of --model
    name = Path(source).name if args.model is None and source else workload.name
    data = report_from_stack(stack(workload, args.hw, **overrides_from_args(args)), name)
    if args.devices is not None:
        figure, best = _timeline_figure(args, workload)
        data = replace(data, figures=[figure], summary=plan_summary(data.summary, best, args))
    return data, ""


def plan_summary(
    stack_rows: list[tuple[str, str]], best: PlanResult, args: argparse.Namespace
) -> list[tuple[str, str]]:
    """The page's summary with --devices: the plan the timeline draws (its step, predicted and
    lower bound, and its memory per device) in place of the one-device stack's time and memory."""
    from shardline.basics.units import fmt_bytes, fmt_time

    mem = best.memory
    rows = [(k, v) for k, v in stack_rows if k not in ("total time", "memory")]
    return rows + [
        ("plan", f"{best.name} over {args.devices} devices (the step timeline below)"),
        (
            "step",
            f"{fmt_time(best.predicted_s)} predicted, {fmt_time(best.latency_s)} lower bound",
        ),
        (
            "memory per device",
            f"{fmt_bytes(mem.total_bytes)} of {fmt_bytes(mem.capacity_bytes)}: "
            + ("fits" if mem.fits else "DOES NOT FIT"),
        ),
    ]


def _timeline_figure(args: argparse.Namespace, workload: Any) -> tuple[Figure, Any]:
    """The recommended plan's step over --devices as an inline SVG figure, and the plan."""
    from shardline.cli.common import positive_arg
    from shardline.cli.execution_args import plan_options_from_args
    from shardline.planning.api import plan
    from shardline.planning.timeline import plan_timeline
    from shardline.report.figures import Figure
    from shardline.report.timeline_svg import timeline_svg

    options = plan_options_from_args(args)
    result = plan(workload, args.hw, positive_arg(args.devices, "--devices"), **options)
    best = result.best()
    if best is None:
        raise InputError(f"--devices {args.devices}: no plan fits, so there is no step to draw")
    v = result.execution.interleave if result.execution is not None else 1
    w = result.workload
    timeline = plan_timeline(best, training=w.training, decode=w.decode, interleave=v)
    from shardline.basics.framework import load_framework

    framework = load_framework(result.execution.framework if result.execution else "megatron")
    caption = (
        "One step of the recommended plan per pipeline stage: forward and backward passes per "
        "microbatch, exposed communication (thin lane), bubbles, gradient all-reduce, optimizer. "
        f"Framework: {framework.display_name}."
    )
    svg = timeline_svg(timeline, standalone=False)
    return Figure(f"Step timeline: {best.name}", svg, caption), best


def _check_plan_flags(args: argparse.Namespace) -> None:
    """The degrees and --microbatches shape the step drawn for --devices: without it they would
    be ignored, so they are refused (and a bad value of any plan flag is an error either way)."""
    from shardline.cli.execution_args import plan_options_from_args
    from shardline.strategies import strategies

    plan_options_from_args(args)  # checks every value
    if args.devices is None:
        words = [s.word for s in strategies() if getattr(args, s.name) is not None]
        words += ["microbatches"] if args.microbatches is not None else []
        if words:
            raise InputError(f"--{words[0]} applies with --devices D (the plan's step drawn)")


def run(args: argparse.Namespace) -> int:
    from shardline.io.sheets import check_output_path
    from shardline.report.html import render_html

    _check_plan_flags(args)
    inputs = [args.workload] if args.workload else []
    out = check_output_path(args.html, inputs, force=args.force, suffixes=(".html", ".htm"))
    data, problems = _data(args)
    page = render_html(data)
    write_text(out, page)
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
