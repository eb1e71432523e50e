"""`shardline tile M K N`: HBM/L2 traffic, intensity and fit of a tile; the smallest good tile."""

from __future__ import annotations

import argparse
import sys

from shardline.cli.args import add_json_arg, add_operand_dtypes, reject_empty
from shardline.cli.common import dim_arg, emit_json

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    tl = sub.add_parser(
        "tile",
        help="HBM/L2 traffic, intensity and fit of a tile; the smallest good tile",
        description="Tiling for on-chip memory: HBM and L2 traffic of output-stationary BMxBN "
        "tiles, the tile intensity against each level's ridge, whether the working "
        "set fits the per-SM (per-core) memory, tile and wave quantization, and the "
        "smallest tile that is compute-bound and fits.",
    )
    reject_empty(tl)
    tl.add_argument("m", metavar="M")
    tl.add_argument("k", metavar="K")
    tl.add_argument("n", metavar="N")
    tl.add_argument("--hw", default="h100-sxm", help="chip name or chip .toml (default h100-sxm)")
    tl.add_argument("--dtype", default="bf16", help="storage dtype of every operand (default bf16)")
    add_operand_dtypes(tl, "plain")
    tl.add_argument(
        "--compute-dtype", help="dtype whose rate applies (default: the widest input's)"
    )
    tl.add_argument("--tile", help="BMxBNxBK, e.g. 128x256x64 (default: the tile a library picks)")
    tl.add_argument(
        "--stages",
        type=int,
        default=2,
        help="K-loop buffers in shared memory (default 2: double buffering)",
    )
    tl.add_argument(
        "--peak",
        action="store_true",
        help="ridges from the datasheet peak instead of the achievable rate",
    )
    add_json_arg(tl)
    tl.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from shardline.basics.options import Precision
    from shardline.ops.tiling import analyze_tile

    report = analyze_tile(
        dim_arg(args.m, "M"),
        dim_arg(args.k, "K"),
        dim_arg(args.n, "N"),
        args.hw,
        precision=Precision(
            args.dtype,
            {"a": args.a_dtype, "b": args.b_dtype, "out": args.out_dtype},
            args.compute_dtype,
        ),
        tile=args.tile,
        stages=args.stages,
        use_peak=args.peak,
    )
    if args.json:
        emit_json(report.to_dict())
    else:
        from shardline.report.predict_text import render_tile

        sys.stdout.write(render_tile(report))
    return 0
