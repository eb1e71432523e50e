"""What `plan` writes besides its table: the cost of training on --tokens (text and JSON) and,
with --trace FILE, the recommended plan's step as Chrome trace-event JSON."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from shardline.cli.args import add_cost_args, add_force_arg
from shardline.cli.common import emit_json, write_text
from shardline.errors import InputError

if TYPE_CHECKING:
    from shardline.hardware import Chip
    from shardline.io.framework_config import Imported
    from shardline.planning.results import PlanSet

__all__ = ["add_plan_output_args", "finish_plan", "price_from_args"]


def add_plan_output_args(parser: argparse.ArgumentParser) -> None:
    add_cost_args(parser)
    parser.add_argument(
        "--trace",
        default=None,
        metavar="STEP.json",
        help="write the recommended plan's step as Chrome trace-event JSON (Perfetto)",
    )
    add_force_arg(parser, "STEP.json if it exists")


def price_from_args(args: argparse.Namespace, chip: Chip) -> float | None:
    """--usd-per-hour, else --prices FILE's row, else the default table's (None if unpriced)."""
    from shardline.costing import chip_name, price_table
    from shardline.costing.tables import MAX_VALUE

    if getattr(args, "usd_per_hour", None) is not None:
        try:
            value = float(args.usd_per_hour)
        except ValueError:
            raise InputError(
                f"--usd-per-hour must be a number, got {args.usd_per_hour!r}"
            ) from None
        if not 0 <= value <= MAX_VALUE:
            raise InputError(
                f"--usd-per-hour must be a non-negative number up to {MAX_VALUE:g}, got {value!r}"
            )
        return value
    row = price_table(getattr(args, "prices", None)).get(chip_name(chip))
    return row.usd_per_hour if row is not None else None


def _with_costs(result: PlanSet, price: float | None) -> tuple[dict[str, object], list[str]]:
    from shardline.costing import plan_training_cost
    from shardline.report.cost_text import training_cost_lines

    payload = result.to_dict()
    tokens = result.execution.tokens if result.execution is not None else None
    if tokens is None or not result.workload.training:
        return payload, []
    lines: list[str] = []
    rows = payload["plans"]
    assert isinstance(rows, list)
    for plan, row in zip(result.plans, rows, strict=True):
        cost = plan_training_cost(plan, result.devices, result.chip, tokens, price)
        if cost is None:
            continue
        row.update(
            gpu_hours=cost.gpu_hours,
            usd=cost.usd,
            energy_mwh=cost.energy_mwh,
            usd_per_hour=cost.usd_per_hour,
            board_power_w=cost.power_w,
        )
        if plan.name == result.recommended and not lines:
            lines = training_cost_lines(plan.name, tokens, cost)
    return payload, lines


def _write_trace(out: Path, result: PlanSet) -> None:
    from shardline.cli.figure_outputs import say_wrote
    from shardline.planning.timeline import plan_timeline, trace_events

    best = result.best()
    if best is None:
        raise InputError("--trace: no plan fits, so there is no step to trace")
    w, ex = result.workload, result.execution
    v = ex.interleave if ex is not None else 1
    timeline = plan_timeline(best, training=w.training, decode=w.decode, interleave=v)
    write_text(out, json.dumps(trace_events(timeline), indent=1) + "\n")
    say_wrote(out, f"Chrome trace-event JSON of {best.name}'s step (open in Perfetto)")


def finish_plan(
    args: argparse.Namespace, result: PlanSet, top: int, imported: Imported | None = None
) -> int:
    """Print the plan set (text or JSON) with the training cost; write --trace and --emit's
    configuration; say what --from read (`imported`)."""
    from shardline.cli.framework_io import emit_plan
    from shardline.report.framework_text import render_emitted, render_imported
    from shardline.report.plan_text import render_plan

    trace = None
    if getattr(args, "trace", None) is not None:
        from shardline.io.tables import check_output_path

        inputs = [args.workload] if getattr(args, "workload", None) else []
        trace = check_output_path(args.trace, inputs, force=args.force, suffixes=(".json",))
    payload, lines = _with_costs(result, price_from_args(args, result.chip))
    emitted = emit_plan(args, result) if getattr(args, "emit", None) else None
    if trace is not None:
        _write_trace(trace, result)
    if imported is not None:
        payload["from"] = imported.to_dict() | {"flags_given": getattr(args, "from_kept", [])}
    if emitted is not None:
        payload["emit"] = emitted
    if args.json:
        emit_json(payload)
    elif emitted is not None and "text" in emitted:
        sys.stdout.write(emitted["text"])  # the configuration alone, to pipe or redirect
    else:
        head = render_imported(imported, getattr(args, "from_kept", [])) if imported else ""
        text = render_plan(result, top=top)
        tail = render_emitted(emitted) if emitted else ""
        sys.stdout.write(head + text + ("\n".join(lines) + "\n" if lines else "") + tail)
    return 0
