"""`shardline compare M K N --devices D`: every 1D and 2D sharding of a multiply, ranked."""

from __future__ import annotations

import argparse
import sys

from shardline.cli.args import add_compare_args, add_json_arg
from shardline.cli.common import emit_json
from shardline.cli.compute import compute_compare
from shardline.errors import InputError

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    cp = sub.add_parser(
        "compare",
        help="rank every 1D and 2D sharding of C = A.B over D devices",
        description="Every assignment of 1D and 2D meshes (all factorizations of D) to M, N and "
        "K, ranked by time, with each one's bottleneck and when 2D beats 1D.",
    )
    add_compare_args(cp)
    cp.add_argument(
        "--top",
        type=int,
        default=10,
        metavar="N",
        help="strategies shown in the text output (default 10; --json has all)",
    )
    add_json_arg(cp)
    cp.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise InputError("--top must be at least 1")
    result = compute_compare(args)
    if args.json:
        emit_json(result.to_dict())
    else:
        from shardline.report.sharding_text import render_compare

        sys.stdout.write(render_compare(result, top=args.top))
    return 0
