"""`shardline shard M K N --devices D --along m|n|k`: one 1D split of a multiply."""

from __future__ import annotations

import argparse
import sys

from shardline.cli.args import add_json_arg, add_shard_args
from shardline.cli.common import emit_json
from shardline.cli.compute import compute_shard

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    sh = sub.add_parser(
        "shard",
        help="C = A.B split over D devices along M, N or K",
        description="The seed's 1D strategies: per-device compute, memory and network, the "
        "collectives, the bound and the closed-form threshold.",
    )
    add_shard_args(sh)
    add_json_arg(sh)
    sh.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    result = compute_shard(args)
    if args.json:
        emit_json(result.to_dict())
    else:
        from shardline.report.sharding_text import render_sharded

        sys.stdout.write(render_sharded(result))
    return 0
