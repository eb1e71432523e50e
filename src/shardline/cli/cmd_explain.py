"""`shardline explain matmul|einsum|shard ...`: a Markdown answer (assumptions, the bound first,
derivation, sanity check). Each takes exactly the arguments of the command it explains.
`shardline explain plan WORKLOAD --devices D`: pipeline against tensor parallelism in one
paragraph."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from shardline.cli.args import add_einsum_args, add_matmul_args, add_md_output, add_shard_args
from shardline.cli.common import write_text
from shardline.cli.compute import compute_compare, compute_einsum, compute_matmul, compute_shard
from shardline.errors import InputError

if TYPE_CHECKING:
    from shardline.ops.roofline import RooflineResult
    from shardline.sharding.algebra import ShardedResult
    from shardline.sharding.compare import Comparison

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    ex = sub.add_parser(
        "explain",
        help="a Markdown answer: assumptions, the bound first, derivation, sanity check",
        description="Explain a matmul, einsum or sharded matmul as a strong written answer would. "
        "Takes exactly the arguments of the command it explains.",
    )
    ex_sub = ex.add_subparsers(dest="what", metavar="WHAT", parser_class=type(ex))
    ex_sub.required = True
    mm = ex_sub.add_parser(
        "matmul", help="explain C[M,N] = A[M,K] B[K,N] (same arguments as matmul)"
    )
    add_matmul_args(mm)
    add_md_output(mm)
    mm.set_defaults(func=run_matmul)
    es = ex_sub.add_parser("einsum", help="explain an einsum (same arguments as einsum)")
    add_einsum_args(es)
    add_md_output(es)
    es.set_defaults(func=run_einsum)
    sh = ex_sub.add_parser("shard", help="explain a sharded matmul (same arguments as shard)")
    add_shard_args(sh)
    add_md_output(sh)
    sh.set_defaults(func=run_shard)
    _register_plan(ex_sub)


def _register_plan(ex_sub: argparse._SubParsersAction) -> None:
    from shardline.cli.args import add_chip_args, add_json_arg, add_workload_args

    pl = ex_sub.add_parser(
        "plan",
        help="pipeline against tensor parallelism over D devices, in one paragraph",
        description="Compare tp=D with pp=D on a workload: latency, throughput, memory per "
        "device and communication per step with the workload's numbers, the winner on each, "
        "and the batch at which the latency winner flips.",
    )
    add_workload_args(pl)
    add_chip_args(pl, dtype=False)
    pl.add_argument("--devices", required=True, metavar="D", help="number of devices (>= 2)")
    add_json_arg(pl)
    add_md_output(pl)
    pl.set_defaults(func=run_plan)


def _check_out(args: argparse.Namespace) -> None:
    """The .md path is checked before the work."""
    if args.out:
        from shardline.io.sheets import check_output_path

        check_output_path(args.out, force=args.force, suffixes=(".md",))


def _emit(
    result: RooflineResult | ShardedResult,
    args: argparse.Namespace,
    comparison: Comparison | None = None,
) -> int:
    from shardline.answers.variants import roofline_variants, single_device
    from shardline.ops.roofline import RooflineResult
    from shardline.report.markdown import explain_roofline
    from shardline.report.markdown_sharded import explain_sharded

    if isinstance(result, RooflineResult):
        text = explain_roofline(result, roofline_variants(result))
    else:
        text = explain_sharded(result, comparison, single=single_device(result))
    if args.out:
        from shardline.io.sheets import check_output_path

        write_text(check_output_path(args.out, force=args.force, suffixes=(".md",)), text)
    sys.stdout.write(text)
    return 0


def run_matmul(args: argparse.Namespace) -> int:
    _check_out(args)
    return _emit(compute_matmul(args), args)


def run_einsum(args: argparse.Namespace) -> int:
    _check_out(args)
    return _emit(compute_einsum(args), args)


def run_shard(args: argparse.Namespace) -> int:
    _check_out(args)
    result = compute_shard(args)
    try:  # the best of every strategy for the same multiply, for "what would help"
        comparison = compute_compare(args)
    except InputError:
        comparison = None
    return _emit(result, args, comparison)


def run_plan(args: argparse.Namespace) -> int:
    from shardline.cli.common import emit_json, load_from_args, overrides_from_args, positive_arg
    from shardline.planning.compare_pp_tp import compare_pp_tp
    from shardline.report.explain_plan_text import paragraph, render_explain_plan

    _check_out(args)
    devices = positive_arg(args.devices, "--devices")
    workload = load_from_args(args)
    result = compare_pp_tp(workload, args.hw, devices, **overrides_from_args(args))
    if args.json:
        emit_json({**result.to_dict(), "paragraph": paragraph(result)})
        return 0
    text = render_explain_plan(result)
    if args.out:
        from shardline.io.sheets import check_output_path

        write_text(check_output_path(args.out, force=args.force, suffixes=(".md",)), text)
    sys.stdout.write(text)
    return 0
