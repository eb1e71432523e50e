"""`shardline what-if precision (matmul M K N | einsum SPEC --dims ... | shard M K N ... |
plan WORKLOAD --devices D ...)
[--dtypes fp32,bf16,fp8,int8,fp4]`: the same multiply once per dtype or operand-dtype mix, as one
table (or `--json`, or a bar plot with `--plot OUT.png`)."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from shardline.cli.args import (
    add_chip_args,
    add_cuda_graphs_arg,
    add_force_arg,
    add_json_arg,
    add_network_args,
    add_output_layout,
    add_run_args,
    add_workload_args,
)
from shardline.cli.common import (
    dim_arg,
    emit_json,
    load_from_args,
    network_from_args,
    overrides_from_args,
    positive_count,
    shard_options_from_args,
)
from shardline.cli.execution_args import (
    add_degree_args,
    add_execution_args,
    plan_options_from_args,
)
from shardline.errors import InputError

if TYPE_CHECKING:
    from shardline.answers.whatif import PrecisionWhatIf, RowFn
    from shardline.hardware import Chip
    from shardline.planning.results import PlanSet
    from shardline.workload.workload import Workload

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    wi = sub.add_parser(
        "what-if",
        help="the same work under other choices: what-if precision",
        description="Compare one piece of work under other choices (for now: its dtypes).",
    )
    wi_sub = wi.add_subparsers(dest="question", metavar="QUESTION", parser_class=type(wi))
    wi_sub.required = True
    pr = wi_sub.add_parser(
        "precision",
        help="one row per dtype or operand-dtype mix: times, bound, critical M, memory",
        description="One row per dtype (or mix such as b:int8: operand b in int8, the others "
        "in the first row's dtype), with the change against the first row.",
    )
    pr_sub = pr.add_subparsers(dest="subject", metavar="SUBJECT", parser_class=type(wi))
    pr_sub.required = True
    _add_matmul(pr_sub)
    _add_einsum(pr_sub)
    _add_shard(pr_sub)
    _add_plan(pr_sub)


def _add_common(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--dtypes",
        default=None,
        metavar="LIST",
        help="rows, comma-separated: a dtype (every operand), OPERAND:DTYPE (that operand, the "
        "others in the first row's dtype), or both joined by '+' (bf16+b:int8) "
        "(default: fp32,bf16,fp8,int8,fp4)",
    )
    p.add_argument("--plot", default=None, metavar="OUT", help="also draw the times (.png or .svg)")
    add_force_arg(p, "the --plot file if it exists")
    add_json_arg(p)


def _add_mnk(p: argparse.ArgumentParser) -> None:
    p.add_argument("m", metavar="M")
    p.add_argument("k", metavar="K")
    p.add_argument("n", metavar="N")


def _add_matmul(pr_sub: argparse._SubParsersAction) -> None:
    mm = pr_sub.add_parser("matmul", help="C[M,N] = A[M,K] B[K,N] on one chip")
    _add_mnk(mm)
    add_chip_args(mm, dtype=False)
    mm.add_argument("--accumulate", action="store_true", help="C += A.B: the old C is read too")
    add_cuda_graphs_arg(mm)
    _add_common(mm)
    mm.set_defaults(func=run, build=_matmul)


def _add_einsum(pr_sub: argparse._SubParsersAction) -> None:
    es = pr_sub.add_parser("einsum", help="an unsharded two-operand einsum on one chip")
    es.add_argument("spec", help="e.g. 'X[B,D] * W[D,F] -> Y[B,F]' (operands: X, W, Y)")
    es.add_argument("--dims", required=True, help="sizes, e.g. B=64,D=4096,F=4096")
    add_chip_args(es, dtype=False)
    es.add_argument("--accumulate", action="store_true", help="the output is accumulated into")
    add_cuda_graphs_arg(es)
    _add_common(es)
    es.set_defaults(func=run, build=_einsum)


def _add_shard(pr_sub: argparse._SubParsersAction) -> None:
    sh = pr_sub.add_parser("shard", help="C = A.B split over D devices along M, N or K")
    _add_mnk(sh)
    sh.add_argument("--devices", required=True, metavar="D", help="devices to split over")
    sh.add_argument(
        "--along", required=True, type=str.lower, choices=("m", "n", "k"), help="m, n or k"
    )
    add_output_layout(sh)
    add_chip_args(sh, dtype=False)
    group = sh.add_argument_group("network and run")
    add_network_args(group, per_axis=False)
    add_run_args(group)
    _add_common(sh)
    sh.set_defaults(func=run, build=_shard)


def _add_plan(pr_sub: argparse._SubParsersAction) -> None:
    pl = pr_sub.add_parser(
        "plan",
        help="a workload's parallel plan over D devices (operands: x activations, w weights, "
        "out outputs)",
    )
    add_workload_args(pl)
    pl.add_argument("--devices", required=True, metavar="D", help="number of devices")
    add_degree_args(pl)
    add_execution_args(pl)
    add_chip_args(pl, dtype=False)
    _add_common(pl)
    pl.set_defaults(func=run, build=_plan)


def _plan(args: argparse.Namespace, chip: Chip) -> tuple[tuple[str, str, str], RowFn, str, bool]:
    """The recommended plan of the workload at each dtype (the degrees given stay fixed)."""
    from shardline.answers.whatif import PLAN_OPERANDS, plan_row
    from shardline.planning.api import plan

    workload = load_from_args(args)
    devices = positive_count(args.devices, "--devices")
    options = plan_options_from_args(args)

    def one(w: Workload) -> PlanSet:
        return plan(w, chip, devices, require_fit=False, **options)

    subject = f"plan {workload.name} over {devices} x {chip.name}"
    return PLAN_OPERANDS, plan_row(one, workload), subject, True


# --- one builder per subject: operand names, the row function, the title, has a network --------


def _matmul(args: argparse.Namespace, chip: Chip) -> tuple[tuple[str, str, str], RowFn, str, bool]:
    from shardline.answers.whatif import matmul_row

    mnk = (dim_arg(args.m, "M"), dim_arg(args.k, "K"), dim_arg(args.n, "N"))
    launch = "graphs" if args.cuda_graphs else "eager"
    row = matmul_row(mnk, chip, accumulate=args.accumulate, launch=launch)
    return ("a", "b", "out"), row, f"matmul M={mnk[0]}, K={mnk[1]}, N={mnk[2]}", False


def _einsum(args: argparse.Namespace, chip: Chip) -> tuple[tuple[str, str, str], RowFn, str, bool]:
    from shardline.answers.whatif import einsum_row
    from shardline.ops.einsum import parse_dims, parse_einsum, require_two_operands

    spec = require_two_operands(parse_einsum(args.spec), "what-if precision einsum")
    if spec.is_sharded:
        raise InputError("what-if precision einsum takes an unsharded spec (no M_X)")
    launch = "graphs" if args.cuda_graphs else "eager"
    row = einsum_row(spec, parse_dims(args.dims), chip, accumulate=args.accumulate, launch=launch)
    names = (spec.lhs.name, spec.rhs.name, spec.out.name)
    return names, row, f"einsum {spec.text()} with {args.dims}", False


def _shard(args: argparse.Namespace, chip: Chip) -> tuple[tuple[str, str, str], RowFn, str, bool]:
    from shardline.answers.whatif import shard_row
    from shardline.basics.options import Precision
    from shardline.sharding.algebra import ShardedResult, shard_matmul

    m, k, n = dim_arg(args.m, "M"), dim_arg(args.k, "K"), dim_arg(args.n, "N")
    devices = positive_count(args.devices, "--devices")
    network = network_from_args(args, ["X"])
    options = shard_options_from_args(args, ("A", "B"))

    def one(precision: Precision) -> ShardedResult:
        return shard_matmul(
            m,
            k,
            n,
            devices,
            args.along,
            hw=chip,
            output=args.shard_output,
            precision=precision,
            network=network,
            options=options,
        )

    subject = f"shard M={m}, K={k}, N={n} over {devices} devices along {args.along}"
    return ("A", "B", "C"), shard_row(one, chip), subject, True


# --- running ---------------------------------------------------------------------------------


def _chip(args: argparse.Namespace) -> Chip:
    from shardline.hardware import load_chip

    overrides = overrides_from_args(args)
    if overrides["flops_per_s"] is not None:
        raise InputError(
            "what-if precision compares the chip's own peaks per dtype; --flops-per-s would give "
            "every row one rate (write a chip .toml with the peaks instead)"
        )
    return load_chip(args.hw).with_overrides(mem_bytes_per_s=overrides["mem_bytes_per_s"])


def run(args: argparse.Namespace) -> int:
    from shardline.answers.whatif import DEFAULT_DTYPES, parse_dtype_mixes, what_if_precision

    out = None
    if args.plot is not None:
        from shardline.io.sheets import check_output_path
        from shardline.report.plots import PLOT_SUFFIXES

        out = check_output_path(args.plot, [], force=args.force, suffixes=PLOT_SUFFIXES)
    chip = _chip(args)
    names, row, subject, network = args.build(args, chip)
    mixes = parse_dtype_mixes(args.dtypes or DEFAULT_DTYPES, names, chip.default_dtype)
    table = what_if_precision(mixes, chip, names, row, subject=subject, network=network)
    if out is not None:
        _write_plot(table, out)
    if args.json:
        payload = table.to_dict()
        if out is not None:
            payload["plot"] = str(out)
        emit_json(payload)
    else:
        from shardline.report.whatif_text import render_precision

        sys.stdout.write(render_precision(table))
        if out is not None:
            sys.stdout.write(f"  plot: {out}\n")
    return 0


def _write_plot(table: PrecisionWhatIf, out: object) -> None:
    from pathlib import Path

    from shardline.io.sheets import atomic_write
    from shardline.report.plots import render_precision

    path = Path(str(out))
    keys = ("t_compute_s", "t_memory_s") + (("t_network_s",) if table.network else ())
    rows = [(r.dtype, {k: getattr(r, k) for k in keys}) for r in table.rows]
    title = f"{table.subject} on {table.hardware}"

    def render(tmp: Path) -> None:
        # the temporary file keeps the suffix so that matplotlib picks the format from it
        named = tmp.with_name(tmp.name + path.suffix)
        try:
            render_precision(rows, named, title=title)
            named.replace(tmp)
        finally:
            named.unlink(missing_ok=True)

    atomic_write(path, render)
