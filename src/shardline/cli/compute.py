"""One core call per kind of question, from parsed arguments. Several commands ask the same
question (`matmul` and `explain matmul`; `compare`, `explain shard` and `plot strategies`; `sheet`,
`plot roofline --from` and `report`), so the calls live here, once, and no command module imports
another. The model is imported inside the functions.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from shardline.basics.options import Precision, RateOverrides
from shardline.cli.common import (
    dim_arg,
    dtype_map,
    network_from_args,
    overrides_from_args,
    positive_count,
    resident_from_text,
    shard_options_from_args,
)
from shardline.errors import InputError

if TYPE_CHECKING:
    from shardline.io.sheet_results import SheetResult
    from shardline.ops.einsum import EinsumSpec
    from shardline.ops.roofline import RooflineResult
    from shardline.sharding.algebra import ShardedResult
    from shardline.sharding.compare import Comparison

__all__ = [
    "compute_compare",
    "compute_einsum",
    "compute_matmul",
    "compute_shard",
    "compute_sharded_einsum",
    "compute_sheet",
]


def _launch_mode(args: argparse.Namespace) -> str:
    """`--cuda-graphs`: kernels replayed from a CUDA graph; else launched eagerly."""
    return "graphs" if getattr(args, "cuda_graphs", False) else "eager"


def compute_matmul(args: argparse.Namespace) -> RooflineResult:
    """`matmul M K N`: the roofline with the realistic prediction."""
    from shardline.ops.predict import with_prediction
    from shardline.ops.roofline import matmul

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
    return with_prediction(
        result, launch=_launch_mode(args), warm_l2=bool(getattr(args, "warm_l2", False))
    )


def compute_einsum(args: argparse.Namespace) -> RooflineResult | ShardedResult:
    """A RooflineResult for an unsharded spec; the sharding result when the spec names mesh axes."""
    from shardline.ops.einsum import parse_dims, parse_einsum

    spec = parse_einsum(args.spec)
    if spec.is_sharded or getattr(args, "mesh", None):
        return compute_sharded_einsum(args, spec)
    from shardline.ops.predict import with_prediction
    from shardline.ops.roofline import einsum

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
    return with_prediction(
        result, launch=_launch_mode(args), warm_l2=bool(getattr(args, "warm_l2", False))
    )


def compute_sharded_einsum(args: argparse.Namespace, spec: EinsumSpec) -> ShardedResult:
    """`shardline einsum SPEC --dims ... --mesh X=4,Y=2`: a ShardedResult."""
    from shardline.hardware import load_chip
    from shardline.ops.einsum import parse_dims, require_two_operands
    from shardline.ops.roofline import resolve_dtypes
    from shardline.sharding.algebra import parse_mesh, plan_sharded

    require_two_operands(spec, "sharding over a mesh")
    if not args.mesh:
        axes = ", ".join(spec.mesh_axes)
        raise InputError(
            f"the spec splits dimensions over mesh axes ({axes}) but no --mesh was "
            f"given; e.g. --mesh {','.join(a + '=2' for a in spec.mesh_axes)}"
        )
    mesh = parse_mesh(args.mesh)
    if args.devices is not None:
        devices = positive_count(args.devices, "--devices")
        if devices != mesh.devices:
            raise InputError(
                f"the mesh {mesh.text()} has {mesh.devices} devices but --devices is {devices}"
            )
    names = (spec.lhs.name, spec.rhs.name, spec.out.name)
    overrides: dict[str, str | None] = dict(dtype_map(args.dtypes))
    dtypes, compute = resolve_dtypes(names, args.dtype, overrides, args.compute_dtype)
    compute = str(compute)  # one dtype name from the command line
    chip = load_chip(args.hw).with_overrides(compute_dtype=compute, **overrides_from_args(args))
    return plan_sharded(
        spec,
        parse_dims(args.dims),
        mesh,
        chip,
        Precision(operands={k: str(v) for k, v in dtypes.items()}, compute=compute),
        network_from_args(args, list(mesh.names)),
        shard_options_from_args(args, (spec.lhs.name, spec.rhs.name)),
    )


def compute_shard(args: argparse.Namespace) -> ShardedResult:
    """`shardline shard M K N --devices D --along m|n|k [--output split|replicated]`."""
    from shardline.sharding.algebra import shard_matmul

    return shard_matmul(
        dim_arg(args.m, "M"),
        dim_arg(args.k, "K"),
        dim_arg(args.n, "N"),
        positive_count(args.devices, "--devices"),
        args.along,
        hw=args.hw,
        output=args.shard_output,
        precision=Precision(dtype=args.dtype, compute=args.compute_dtype),
        network=network_from_args(args, ["X"]),
        options=shard_options_from_args(args, ("A", "B")),
        rates=RateOverrides(**overrides_from_args(args)),
    )


def compute_compare(args: argparse.Namespace) -> Comparison:
    """`shardline compare M K N --devices D`: every 1D and 2D strategy, ranked."""
    from shardline.sharding.algebra import DEFAULT_REDUCE_DTYPE
    from shardline.sharding.compare import compare_strategies

    resident = resident_from_text(args.resident, ("A", "B"))
    return compare_strategies(
        dim_arg(args.m, "M"),
        dim_arg(args.k, "K"),
        dim_arg(args.n, "N"),
        positive_count(args.devices, "--devices"),
        args.hw,
        output=args.shard_output,
        precision=Precision(
            dtype=args.dtype,
            compute=args.compute_dtype,
            reduce=args.reduce_dtype or DEFAULT_REDUCE_DTYPE,
        ),
        rates=RateOverrides(**overrides_from_args(args)),
        resident=resident,
        network=network_from_args(args, ["X", "Y"]),
        overlap=args.overlap,
        pad=args.pad,
    )


def compute_sheet(
    args: argparse.Namespace, source: str, *, accumulate: bool = False
) -> SheetResult:
    """Read the sheet `source` (worksheet `args.sheet`) and compute every row."""
    from shardline.io.sheet_results import DtypeChoice, roofline_rows
    from shardline.io.sheets import read_shape_rows

    table = read_shape_rows(source, args.sheet)
    overrides = overrides_from_args(args)
    choice = DtypeChoice(
        dtype=args.dtype,
        a_dtype=args.a_dtype,
        b_dtype=args.b_dtype,
        out_dtype=args.out_dtype,
        compute_dtype=args.compute_dtype,
    )
    return roofline_rows(
        table,
        args.hw,
        choice,
        accumulate=accumulate,
        flops_per_s=overrides["flops_per_s"],
        mem_bytes_per_s=overrides["mem_bytes_per_s"],
    )
