"""`shardline einsum SPEC --dims ...`: any two-operand einsum on one chip, or its sharding over a
mesh when the spec names mesh axes (M_X); or a single-input map or reduction on one chip."""

from __future__ import annotations

import argparse
import sys

from shardline.cli.args import add_einsum_args, add_json_arg
from shardline.cli.common import emit_json
from shardline.cli.compute import compute_einsum

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    es = sub.add_parser(
        "einsum",
        help="any two-operand einsum in named notation, or a single-input map or reduction",
        description="Roofline of a two-operand einsum such as "
        "'X[B,D] * W[B,D,F] -> Y[B,F]', or its sharding over a mesh; or of a single-input "
        "elementwise map 'x[B,D] -> y[B,D]' or reduction 'x[B,D] -> y[B]' (one device).",
    )
    add_einsum_args(es)
    add_json_arg(es)
    es.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from shardline.ops.roofline import RooflineResult

    result = compute_einsum(args)
    if args.json:
        emit_json(result.to_dict())
    elif isinstance(result, RooflineResult):
        from shardline.report.text import render_roofline

        sys.stdout.write(render_roofline(result))
    else:
        from shardline.report.sharding_text import render_sharded

        sys.stdout.write(render_sharded(result))
    return 0
