"""`shardline solve clock|utilization`: inverse questions (shardline.answers.inverse). The batch
that reaches a target MFU is `plan --target-mfu F`."""

from __future__ import annotations

import argparse
import sys

from shardline.cli.args import add_json_arg
from shardline.cli.common import emit_json
from shardline.errors import InputError

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    so = sub.add_parser(
        "solve",
        help="inverse questions: the clock from a vector rate, the utilization from GPU-hours",
        description="Solve a forward formula for its input: the clock a vector rate implies, or "
        "the utilization a number of accelerator-hours implies (the batch that reaches a target "
        "MFU: `plan --target-mfu F`).",
    )
    actions = so.add_subparsers(dest="solve_command", metavar="QUESTION", parser_class=type(so))
    actions.required = True
    clock = actions.add_parser(
        "clock", help="f = vector rate / (cores x lanes per core x FLOPs per lane per cycle)"
    )
    clock.add_argument("--hw", default="h100-sxm", help="chip name, alias or .toml file")
    clock.add_argument(
        "--vector-rate", default=None, metavar="FLOP/S", help="default: the chip file's"
    )
    clock.add_argument("--dtype", default="fp32", help="the vector rate's dtype (default fp32)")
    clock.add_argument(
        "--per-cycle",
        type=float,
        default=None,
        metavar="F",
        help="FLOPs one lane does per cycle (default: 2 on a GPU, an FMA; 1 on a TPU)",
    )
    add_json_arg(clock)
    clock.set_defaults(func=run_clock)
    util = actions.add_parser("utilization", help="U = FLOPs / (hours x 3600 x peak)")
    util.add_argument("--hw", default="h100-sxm", help="chip name, alias or .toml file")
    util.add_argument("--gpu-hours", required=True, metavar="H", help="accelerator-hours spent")
    util.add_argument("--flops", default=None, metavar="F", help="the FLOPs of the work")
    util.add_argument("--model", default=None, help="a zoo model: FLOPs = 6 x active params x T")
    util.add_argument("--tokens", default=None, metavar="T", help="training tokens (with --model)")
    util.add_argument("--dtype", default=None, help="the dtype of the peak (default bf16)")
    add_json_arg(util)
    util.set_defaults(func=run_utilization)


def run_clock(args: argparse.Namespace) -> int:
    from shardline.answers.inverse import clock_from_vector_rate
    from shardline.basics.units import parse_quantity
    from shardline.hardware import resolve_chip

    rate = None if args.vector_rate is None else parse_quantity(args.vector_rate, "FLOP/s")
    a = clock_from_vector_rate(
        resolve_chip(args.hw), rate, dtype=args.dtype, per_cycle=args.per_cycle
    )
    return _emit(
        args,
        a.to_dict(),
        f"CLOCK {a.clock_hz / 1e9:.4g} GHz on {a.chip}: f = rate / (cores x lanes x "
        f"per cycle) = {a.vector_flops_per_s:.4g} / ({a.cores} x {a.lanes_per_core} x "
        f"{a.flops_per_lane_per_cycle:g}) = {a.clock_hz:.4g} Hz",
    )


def _emit(args: argparse.Namespace, answer: dict, text: str) -> int:
    """The answer as JSON (--json) or its one line of text."""
    if args.json:
        emit_json(answer)
    else:
        sys.stdout.write(text + "\n")
    return 0


def run_utilization(args: argparse.Namespace) -> int:
    from shardline.answers.inverse import utilization
    from shardline.basics.units import parse_count, parse_quantity
    from shardline.hardware import resolve_chip

    hours = parse_quantity(args.gpu_hours, "")
    if (args.flops is None) == (args.model is None):
        raise InputError("give --flops F, or --model NAME with --tokens T")
    if args.flops is not None:
        flops, note = parse_quantity(args.flops, "FLOP"), "given"
    else:
        if args.tokens is None:
            raise InputError("--model needs --tokens T (the training tokens)")
        from shardline.models import load_model, params_active

        n = params_active(load_model(args.model))
        tokens = float(parse_count(args.tokens, "--tokens"))
        flops, note = 6 * n * tokens, f"6 x {n:,} active params x {tokens:.4g} tokens"
    a = utilization(resolve_chip(args.hw), flops, hours, dtype=args.dtype, note=note)
    return _emit(
        args,
        a.to_dict(),
        f"UTILIZATION {a.utilization:.1%}: U = FLOPs / (hours x 3600 x peak) = "
        f"{a.flops:.4g} / ({a.hours:.4g} x 3600 x {a.peak_flops_per_s:.4g} {a.dtype}) on "
        f"{a.chip}; FLOPs: {a.flops_note}",
    )
