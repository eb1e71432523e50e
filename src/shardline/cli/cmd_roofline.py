"""`shardline matmul` and `shardline einsum` (single device; a sharded spec goes to sharding).

`add_matmul_args`/`compute_matmul` and `add_einsum_args`/`compute_einsum` are reused by
`shardline explain`, so that both commands take exactly the same arguments.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from shardline.cli.common import (
    add_chip_args,
    add_json_arg,
    dim_arg,
    dtype_map,
    emit_json,
    overrides_from_args,
)
from shardline.options import Precision, RateOverrides
from shardline.roofline import RooflineResult


def add_matmul_args(mm: argparse.ArgumentParser) -> None:
    mm.add_argument("m", metavar="M")
    mm.add_argument("k", metavar="K")
    mm.add_argument("n", metavar="N")
    add_chip_args(mm)
    mm.add_argument("--a-dtype", help="storage dtype of A (activations)")
    mm.add_argument("--b-dtype", help="storage dtype of B (weights)")
    mm.add_argument("--out-dtype", help="storage dtype of C")
    mm.add_argument(
        "--accumulate",
        action="store_true",
        help="C += A.B (beta != 0): the old C is read as well as written",
    )


def add_einsum_args(es: argparse.ArgumentParser) -> None:
    es.add_argument("spec", help="e.g. 'X[B,D] * W[D,F] -> Y[B,F]'; M_X splits M over mesh axis X")
    es.add_argument("--dims", required=True, help="sizes, e.g. B=64,D=4096,F=4096")
    es.add_argument("--dtypes", default=None, help="per-operand dtypes, e.g. X=bf16,W=int8")
    add_chip_args(es)
    es.add_argument("--accumulate", action="store_true", help="the output is accumulated into")
    try:  # mesh options apply when the spec names mesh axes
        from shardline.cli.cmd_shard import add_mesh_args
    except ImportError:
        return
    add_mesh_args(es)


def register(sub: argparse._SubParsersAction) -> None:
    mm = sub.add_parser(
        "matmul",
        help="one matmul C[M,N] = A[M,K] B[K,N] on one chip",
        description="Roofline of C[M,N] = A[M,K] . B[K,N] on one chip.",
    )
    add_matmul_args(mm)
    add_json_arg(mm)
    mm.set_defaults(func=run_matmul)

    es = sub.add_parser(
        "einsum",
        help="any two-operand einsum in named notation",
        description="Roofline of a two-operand einsum such as "
        "'X[B,D] * W[B,D,F] -> Y[B,F]', or its sharding over a mesh.",
    )
    add_einsum_args(es)
    add_json_arg(es)
    es.set_defaults(func=run_einsum)


def compute_matmul(args: argparse.Namespace) -> RooflineResult:
    from shardline.predict import with_prediction
    from shardline.roofline import matmul

    result = matmul(
        dim_arg(args.m, "M"),
        dim_arg(args.k, "K"),
        dim_arg(args.n, "N"),
        hw=args.hw,
        dtype=args.dtype,
        a_dtype=args.a_dtype,
        b_dtype=args.b_dtype,
        out_dtype=args.out_dtype,
        compute_dtype=args.compute_dtype,
        accumulate=args.accumulate,
        rates=RateOverrides(**overrides_from_args(args)),
    )
    return with_prediction(result)


def compute_einsum(args: argparse.Namespace) -> Any:
    """A RooflineResult for an unsharded spec; the sharding result when the spec names mesh axes."""
    from shardline.einsum import parse_dims, parse_einsum

    spec = parse_einsum(args.spec)
    if spec.is_sharded or getattr(args, "mesh", None):
        from shardline.cli.cmd_shard import compute_sharded_einsum

        return compute_sharded_einsum(args, spec)
    from shardline.predict import with_prediction
    from shardline.roofline import einsum

    result = einsum(
        spec,
        parse_dims(args.dims),
        hw=args.hw,
        dtype=args.dtype,
        dtypes=dtype_map(args.dtypes),
        precision=Precision(compute=args.compute_dtype),
        accumulate=args.accumulate,
        rates=RateOverrides(**overrides_from_args(args)),
    )
    return with_prediction(result)


def _show(result: Any, args: argparse.Namespace) -> int:
    if args.json:
        emit_json(result.to_dict())
    elif isinstance(result, RooflineResult):
        from shardline.report.text import render_roofline

        sys.stdout.write(render_roofline(result))
    else:
        from shardline.report.sharding_text import render_sharded

        sys.stdout.write(render_sharded(result))
    return 0


def run_matmul(args: argparse.Namespace) -> int:
    return _show(compute_matmul(args), args)


def run_einsum(args: argparse.Namespace) -> int:
    return _show(compute_einsum(args), args)
