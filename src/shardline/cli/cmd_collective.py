"""`shardline collective KIND --bytes V --devices X`: one collective on a topology."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from shardline.cli.args import (
    add_chip_args,
    add_collective_mesh_arg,
    add_json_arg,
    add_network_args,
)
from shardline.cli.common import emit_json, network_from_args, positive_count
from shardline.errors import InputError

if TYPE_CHECKING:
    from shardline.collectives import CollectiveCost
    from shardline.hardware import Chip

__all__ = ["compute_collective", "register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
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
    co.add_argument("--devices", default=None, metavar="X", help="devices on the axis")
    co.add_argument(
        "--hops",
        type=int,
        default=None,
        metavar="H",
        help="send only: hops to the receiver (default 1, a neighbour); t = V/(P W) + H alpha",
    )
    co.add_argument(
        "--ports",
        type=int,
        default=None,
        metavar="P",
        help="send only: links the message is split over at once (default 1; e.g. 2 for both "
        "directions of a ring)",
    )
    add_collective_mesh_arg(co)
    add_chip_args(co, dtype=False)
    add_network_args(co.add_argument_group("network"), per_axis=False)
    add_json_arg(co)
    co.set_defaults(func=run)


def compute_collective(args: argparse.Namespace) -> CollectiveCost:
    from shardline.basics.units import parse_quantity
    from shardline.collectives import canonical_kind
    from shardline.hardware import resolve_chip

    kind = canonical_kind(args.kind)
    nbytes = parse_quantity(args.bytes, "B")
    if not nbytes > 0:
        raise InputError(f"--bytes must be positive, got {args.bytes!r}")
    chip = resolve_chip(args.hw)
    cost = _priced(args, kind, nbytes, chip)
    if args.hops is None and args.ports is None:
        return cost
    from shardline.collectives import routed_send

    hops = 1 if args.hops is None else args.hops
    return routed_send(cost, hops, 1 if args.ports is None else args.ports, chip)


def _priced(args: argparse.Namespace, kind: str, nbytes: float, chip: Chip) -> CollectiveCost:
    if args.mesh is not None:
        return _over_mesh(args, kind, nbytes, chip)
    if args.devices is None:
        raise InputError("give --devices X (one axis) or --mesh X=..,Y=.. (several axes)")
    from shardline.collectives import collective_cost, parse_topology

    devices = positive_count(args.devices, "--devices")
    _check_whole_nodes(args, devices, chip)
    network = network_from_args(args, ["X"])
    words = parse_topology(args.topology, ["X"])
    return collective_cost(
        kind, nbytes, devices, chip, words.get("X"), algorithm=args.algorithm, options=network
    )


def _check_whole_nodes(args: argparse.Namespace, devices: int, chip: Chip) -> None:
    """With --gpus-per-node given, X devices fill whole scale-up domains (X at most one domain,
    or a multiple of it): the model prices equal domains, and X = 6 on nodes of 4 would
    otherwise be priced as 2 nodes of 3 without a word. (An NVL72 rack keeps its 72.)"""
    ic = chip.interconnect
    if getattr(args, "gpus_per_node", None) is None or ic is None or ic.scale_out is None:
        return
    per_domain = ic.scale_up_devices
    if devices > per_domain and devices % per_domain:
        raise InputError(
            f"--devices {devices} does not fill nodes of {per_domain} GPUs "
            f"({devices // per_domain} full node(s) and {devices % per_domain} device(s) left "
            f"over); give a multiple of {per_domain}, or the GPUs each node uses (--gpus-per-node)"
        )


def _over_mesh(args: argparse.Namespace, kind: str, nbytes: float, chip: Chip) -> CollectiveCost:
    """One collective spanning every axis of --mesh (outer axis first)."""
    from shardline.collectives import collective_over, mesh_networks
    from shardline.sharding.mesh import parse_mesh

    mesh = parse_mesh(args.mesh)
    if args.devices is not None and positive_count(args.devices, "--devices") != mesh.devices:
        raise InputError(
            f"--devices {args.devices} is not the product of --mesh {mesh.text()} ({mesh.devices})"
        )
    nets = mesh_networks(chip, mesh.axes, network_from_args(args, list(mesh.names)))
    return collective_over(kind, nbytes, [nets[a] for a in mesh.names], chip)


def run(args: argparse.Namespace) -> int:
    cost = compute_collective(args)
    if args.json:
        emit_json(cost.to_dict())
    else:
        from shardline.report.sharding_text import render_collective

        sys.stdout.write(render_collective(cost))
    return 0
