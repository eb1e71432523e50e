"""`shardline hw list` and `shardline hw show NAME`."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from shardline.cli.args import add_json_arg
from shardline.cli.common import emit_json

if TYPE_CHECKING:
    from shardline.hardware import Chip


def register(sub: argparse._SubParsersAction) -> None:
    hw = sub.add_parser("hw", help="the hardware catalog", description="List or show chips.")
    hw_sub = hw.add_subparsers(dest="hw_command", metavar="ACTION", parser_class=type(hw))
    hw_sub.required = True
    ls = hw_sub.add_parser("list", help="every catalog chip with its headline numbers")
    ls.add_argument(
        "names",
        nargs="*",
        metavar="NAME",
        help="only these chips (names or aliases), in the catalog's order; default every chip",
    )
    add_json_arg(ls)
    ls.set_defaults(func=run_list)
    show = hw_sub.add_parser(
        "show", help="one chip with sources, ridge points per dtype and assumed defaults"
    )
    show.add_argument("name", help="chip name, alias or .toml file")
    add_json_arg(show)
    show.set_defaults(func=run_show)
    totals = hw_sub.add_parser(
        "totals",
        help="a pod or cluster of one chip: peak FLOP/s, HBM, links, bisection bandwidth",
    )
    totals.add_argument("name", help="chip name, alias or .toml file")
    totals.add_argument("--devices", required=True, metavar="N", help="chips in the pod")
    totals.add_argument("--dtype", default=None, help="the dtype of the peak (default: bf16)")
    totals.add_argument(
        "--system",
        default=None,
        metavar="NAME|FILE",
        help="lay the chips out as this system's nodes (its scale-up domain and NICs)",
    )
    add_json_arg(totals)
    totals.set_defaults(func=run_totals)


def run_totals(args: argparse.Namespace) -> int:
    from shardline.cli.common import positive_count
    from shardline.hardware import load_chip
    from shardline.hardware.systems import apply_system, load_system
    from shardline.hardware.totals import pod_totals
    from shardline.report.hardware import render_totals

    chip = load_chip(args.name)
    if args.system is not None:
        chip = apply_system(chip, load_system(args.system))
    totals = pod_totals(chip, positive_count(args.devices, "--devices"), args.dtype)
    if args.json:
        emit_json(totals.to_dict())
    else:
        sys.stdout.write(render_totals(totals))
    return 0


def run_list(args: argparse.Namespace) -> int:
    from shardline.hardware import list_chips
    from shardline.report.hardware import chip_summary, render_chip_list

    chips = list_chips()
    if args.names:
        chips = _named(chips, args.names)
    if args.json:
        emit_json({"chips": [chip_summary(c) for c in chips]})
    else:
        sys.stdout.write(render_chip_list(chips))
    return 0


def run_show(args: argparse.Namespace) -> int:
    from shardline.hardware import load_chip
    from shardline.report.hardware import chip_detail, render_chip

    chip = load_chip(args.name)
    if args.json:
        emit_json(chip_detail(chip))
    else:
        sys.stdout.write(render_chip(chip))
    return 0


def _named(chips: list[Chip], names: list[str]) -> list[Chip]:
    """The chips `names` call for (a name, an alias or a chip file each): the catalog's in its
    order, then the files'."""
    from shardline.hardware import load_chip

    asked = [load_chip(name) for name in names]  # an unknown name: one error line
    wanted = {c.name for c in asked}
    out = [c for c in chips if c.name in wanted]
    for chip in asked:
        if chip.name not in {c.name for c in out}:
            out.append(chip)
    return out
