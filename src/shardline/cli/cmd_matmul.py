"""`shardline matmul M K N`: the roofline of one multiply on one chip."""

from __future__ import annotations

import argparse
import sys

from shardline.cli.args import add_json_arg, add_matmul_args
from shardline.cli.common import emit_json
from shardline.cli.compute import compute_matmul

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    mm = sub.add_parser(
        "matmul",
        help="one matmul C[M,N] = A[M,K] B[K,N] on one chip",
        description="Roofline of C[M,N] = A[M,K] . B[K,N] on one chip.",
    )
    add_matmul_args(mm)
    add_json_arg(mm)
    mm.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = compute_matmul(args)
    if args.json:
        emit_json(result.to_dict())
    else:
        from shardline.report.text import render_roofline

        sys.stdout.write(render_roofline(result))
    return 0
