"""`shardline shard`, `shardline collective`, `shardline compare`, and the mesh options of
`shardline einsum` (a spec that names mesh axes).

This module is imported when the einsum parser is built: its top level imports only argparse and
the light CLI helpers; the model is imported inside the functions.
`add_shard_args`/`compute_shard` are reused by `shardline explain`.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from shardline.cli.common import (
    add_chip_args,
    add_json_arg,
    dim_arg,
    emit_json,
    overrides_from_args,
)
from shardline.errors import InputError

__all__ = [
    "add_mesh_args",
    "add_shard_args",
    "add_compare_args",
    "compute_sharded_einsum",
    "compute_shard",
    "compute_collective",
    "compute_compare",
    "register",
]


def _add_output_layout(parser: argparse.ArgumentParser) -> None:
    """`--output split|replicated` (also `--output-layout`), stored as `args.shard_output`
    so that commands reusing these arguments (`explain shard`, `plot strategies`) keep
    `args.out`/`args.output` free for their files."""
    parser.add_argument(
        "--output",
        "--output-layout",
        dest="shard_output",
        default="split",
        type=str.lower,
        choices=("split", "replicated"),
        help="C stays split over the devices (default) or ends whole on each",
    )


def _add_network_args(group: argparse._ArgumentGroup, *, per_axis: bool) -> None:
    words = "ring, line, unidirectional-ring, switch, torus, hierarchical"
    example = "X=ring,Y=line (or one word for every axis)" if per_axis else "one word"
    group.add_argument(
        "--topology", default=None, help=f"{example}: {words} (default: the chip's own layout)"
    )
    group.add_argument(
        "--link-bw",
        default=None,
        metavar="B/S",
        help="one-way bytes/s per link, e.g. 4.5e10 or '45 GB/s' (a switch's "
        "egress is this times the chip's links)",
    )
    group.add_argument(
        "--latency", default=None, metavar="S", help="seconds per hop, e.g. 1e-6 or '1 us'"
    )


def _add_run_args(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--overlap",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="communication overlaps compute: time = max (default); "
        "--no-overlap: max(t_compute, t_memory) + t_network",
    )
    group.add_argument(
        "--resident",
        default=None,
        metavar="OPERAND[,..]",
        help="inputs already laid out as the spec says (e.g. weights); the others "
        "start 1/D per device and are all-gathered first "
        "(default: every input is resident; 'none' for none)",
    )
    group.add_argument(
        "--pad",
        action="store_true",
        help="pad dimensions that do not divide by their shards (never silent)",
    )
    group.add_argument(
        "--reduce-dtype",
        default=None,
        metavar="DTYPE",
        help="dtype of the partial sums that are reduced over the network "
        "(default fp32, the accumulator)",
    )


def add_mesh_args(parser: argparse.ArgumentParser) -> None:
    """--mesh and friends, for `shardline einsum` with a sharded spec."""
    group = parser.add_argument_group("mesh (sharded specs such as A[M_X,K])")
    group.add_argument(
        "--mesh",
        default=None,
        metavar="X=4,Y=2",
        help="named mesh axes (single upper-case letters) and their sizes",
    )
    group.add_argument(
        "--devices",
        default=None,
        metavar="D",
        help="total devices; must equal the product of the mesh",
    )
    _add_network_args(group, per_axis=True)
    _add_run_args(group)
    group.add_argument(
        "--unreduced",
        default=None,
        metavar="AXIS[,..]",
        help="leave the output's partial sums over these axes unreduced ({U_X})",
    )


def add_shard_args(parser: argparse.ArgumentParser) -> None:
    """Arguments of `shardline shard M K N --devices D --along m|n|k`."""
    parser.add_argument("m", metavar="M")
    parser.add_argument("k", metavar="K")
    parser.add_argument("n", metavar="N")
    parser.add_argument("--devices", required=True, metavar="D", help="devices to split over")
    parser.add_argument(
        "--along",
        required=True,
        type=str.lower,
        choices=("m", "n", "k"),
        help="the dimension to split: m, n or k",
    )
    _add_output_layout(parser)
    add_chip_args(parser)
    group = parser.add_argument_group("network and run")
    _add_network_args(group, per_axis=False)
    _add_run_args(group)


def add_compare_args(parser: argparse.ArgumentParser) -> None:
    """Arguments of `shardline compare M K N --devices D` (also `plot strategies`)."""
    parser.add_argument("m", metavar="M")
    parser.add_argument("k", metavar="K")
    parser.add_argument("n", metavar="N")
    parser.add_argument("--devices", required=True, metavar="D", help="devices to split over")
    _add_output_layout(parser)
    add_chip_args(parser)
    group = parser.add_argument_group("network and run")
    _add_network_args(group, per_axis=False)
    _add_run_args(group)


# --- turning arguments into core values ------------------------------------------------------


def _network(args: argparse.Namespace, axes: list[str]) -> Any:
    from shardline.collectives import NetworkOptions, parse_topology
    from shardline.units import parse_quantity

    link = parse_quantity(args.link_bw, "B/s") if getattr(args, "link_bw", None) else None
    latency = parse_quantity(args.latency, "s") if getattr(args, "latency", None) else None
    if link is not None and not link > 0:
        raise InputError("--link-bw must be positive")
    if latency is not None and latency < 0:
        raise InputError("--latency must not be negative")
    return NetworkOptions(parse_topology(getattr(args, "topology", None), axes), link, latency)


def _resident(text: str | None, inputs: tuple[str, str]) -> frozenset[str] | None:
    if text is None:
        return None
    if text.strip().lower() == "none":
        return frozenset()
    by_lower = {name.lower(): name for name in inputs}
    names = set()
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        if item.lower() not in by_lower:
            raise InputError(
                f"--resident names {item}, which is not an input (inputs: {', '.join(inputs)})"
            )
        names.add(by_lower[item.lower()])
    return frozenset(names)


def _options(args: argparse.Namespace, inputs: tuple[str, str], axes: list[str]) -> Any:
    from shardline.sharding import DEFAULT_REDUCE_DTYPE, ShardOptions

    unreduced: tuple[str, ...] = ()
    text = getattr(args, "unreduced", None)
    if text:
        unreduced = tuple(a.strip() for a in text.replace(",", " ").split() if a.strip())
    return ShardOptions(
        overlap=args.overlap,
        resident=_resident(args.resident, inputs),
        unreduced=unreduced,
        pad=args.pad,
        reduce_dtype=args.reduce_dtype or DEFAULT_REDUCE_DTYPE,
        accumulate=bool(getattr(args, "accumulate", False)),
    )


def _positive_count(text: str, what: str) -> int:
    from shardline.einsum import check_size
    from shardline.units import parse_count

    return check_size(parse_count(str(text), what), what)


def compute_sharded_einsum(args: argparse.Namespace, spec: Any) -> Any:
    """`shardline einsum SPEC --dims ... --mesh X=4,Y=2`: a ShardedResult."""
    from shardline.cli.common import dtype_map
    from shardline.einsum import parse_dims
    from shardline.hardware import load_chip
    from shardline.options import Precision
    from shardline.roofline import resolve_dtypes
    from shardline.sharding import parse_mesh, plan_sharded

    if not args.mesh:
        axes = ", ".join(spec.mesh_axes)
        raise InputError(
            f"the spec splits dimensions over mesh axes ({axes}) but no --mesh was "
            f"given; e.g. --mesh {','.join(a + '=2' for a in spec.mesh_axes)}"
        )
    mesh = parse_mesh(args.mesh)
    if args.devices is not None:
        devices = _positive_count(args.devices, "--devices")
        if devices != mesh.devices:
            raise InputError(
                f"the mesh {mesh.text()} has {mesh.devices} devices but --devices is {devices}"
            )
    names = (spec.lhs.name, spec.rhs.name, spec.out.name)
    overrides: dict[str, str | None] = dict(dtype_map(args.dtypes))
    dtypes, compute = resolve_dtypes(names, args.dtype, overrides, args.compute_dtype)
    chip = load_chip(args.hw).with_overrides(compute_dtype=compute, **overrides_from_args(args))
    return plan_sharded(
        spec,
        parse_dims(args.dims),
        mesh,
        chip,
        Precision(operands=dtypes, compute=compute),
        _network(args, list(mesh.names)),
        _options(args, (spec.lhs.name, spec.rhs.name), list(mesh.names)),
    )


def compute_shard(args: argparse.Namespace) -> Any:
    """`shardline shard M K N --devices D --along m|n|k [--output split|replicated]`."""
    from shardline.options import Precision, RateOverrides
    from shardline.sharding import shard_matmul

    return shard_matmul(
        dim_arg(args.m, "M"),
        dim_arg(args.k, "K"),
        dim_arg(args.n, "N"),
        _positive_count(args.devices, "--devices"),
        args.along,
        hw=args.hw,
        output=args.shard_output,
        precision=Precision(dtype=args.dtype, compute=args.compute_dtype),
        rates=RateOverrides(**overrides_from_args(args)),
        network=_network(args, ["X"]),
        options=_options(args, ("A", "B"), ["X"]),
    )


def compute_collective(args: argparse.Namespace) -> Any:
    from shardline.collectives import canonical_kind, collective_cost, parse_topology
    from shardline.hardware import load_chip
    from shardline.units import parse_quantity

    kind = canonical_kind(args.kind)
    nbytes = parse_quantity(args.bytes, "B")
    if not nbytes > 0:
        raise InputError(f"--bytes must be positive, got {args.bytes!r}")
    devices = _positive_count(args.devices, "--devices")
    network = _network(args, ["X"])
    words = parse_topology(args.topology, ["X"])
    return collective_cost(
        kind,
        nbytes,
        devices,
        load_chip(args.hw),
        words.get("X"),
        link_bytes_per_s=network.link_bytes_per_s,
        hop_latency_s=network.hop_latency_s,
    )


def compute_compare(args: argparse.Namespace) -> Any:
    from shardline.compare import compare_strategies
    from shardline.sharding import DEFAULT_REDUCE_DTYPE

    resident = _resident(args.resident, ("A", "B"))
    rates = overrides_from_args(args)
    return compare_strategies(
        dim_arg(args.m, "M"),
        dim_arg(args.k, "K"),
        dim_arg(args.n, "N"),
        _positive_count(args.devices, "--devices"),
        args.hw,
        dtype=args.dtype,
        compute_dtype=args.compute_dtype,
        output=args.shard_output,
        resident=resident,
        network=_network(args, ["X", "Y"]),
        overlap=args.overlap,
        pad=args.pad,
        reduce_dtype=args.reduce_dtype or DEFAULT_REDUCE_DTYPE,
        flops_per_s=rates["flops_per_s"],
        mem_bytes_per_s=rates["mem_bytes_per_s"],
    )


# --- commands --------------------------------------------------------------------------------


def register(sub: argparse._SubParsersAction) -> None:
    sh = sub.add_parser(
        "shard",
        help="C = A.B split over D devices along M, N or K",
        description="The seed's 1D strategies: per-device compute, memory and network, the "
        "collectives, the bound and the closed-form threshold.",
    )
    add_shard_args(sh)
    add_json_arg(sh)
    sh.set_defaults(func=run_shard)

    co = sub.add_parser(
        "collective",
        help="price one collective on a topology",
        description="Time of an all-gather, reduce-scatter, all-reduce or all-to-all of V bytes "
        "over X devices (alpha-beta, plus the realistic prediction).",
    )
    co.add_argument(
        "kind", metavar="KIND", help="all-gather, reduce-scatter, all-reduce, all-to-all or send"
    )
    co.add_argument(
        "--bytes", required=True, metavar="V", help="bytes of the whole array, e.g. 1e9 or '64 MiB'"
    )
    co.add_argument("--devices", required=True, metavar="X", help="devices on the axis")
    add_chip_args(co, dtype=False)
    _add_network_args(co.add_argument_group("network"), per_axis=False)
    add_json_arg(co)
    co.set_defaults(func=run_collective)

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
    cp.set_defaults(func=run_compare)


def run_shard(args: argparse.Namespace) -> int:
    result = compute_shard(args)
    if args.json:
        emit_json(result.to_dict())
    else:
        from shardline.report.sharding_text import render_sharded

        sys.stdout.write(render_sharded(result))
    return 0


def run_collective(args: argparse.Namespace) -> int:
    cost = compute_collective(args)
    if args.json:
        emit_json(cost.to_dict())
    else:
        from shardline.report.sharding_text import render_collective

        sys.stdout.write(render_collective(cost))
    return 0


def run_compare(args: argparse.Namespace) -> int:
    if args.top < 1:
        raise InputError("--top must be at least 1")
    result = compute_compare(args)
    if args.json:
        emit_json(result.to_dict())
    else:
        from shardline.report.sharding_text import render_compare

        sys.stdout.write(render_compare(result, top=args.top))
    return 0
