"""`shardline system list` and `shardline system show NAME|FILE`: clusters as data."""

from __future__ import annotations

import argparse
import sys

from shardline.cli.args import add_json_arg
from shardline.cli.common import emit_json


def register(sub: argparse._SubParsersAction) -> None:
    system = sub.add_parser(
        "system",
        help="the system (cluster) catalog",
        description="List or show systems: a chip, its node, scale-up domain and NICs.",
    )
    system_sub = system.add_subparsers(
        dest="system_command", metavar="ACTION", parser_class=type(system)
    )
    system_sub.required = True
    ls = system_sub.add_parser("list", help="every catalog system with its headline numbers")
    add_json_arg(ls)
    ls.set_defaults(func=run_list)
    show = system_sub.add_parser(
        "show", help="one system, every field with its source, and the derived figures"
    )
    show.add_argument("name", help="system name, alias or .toml file")
    add_json_arg(show)
    show.set_defaults(func=run_show)


def run_list(args: argparse.Namespace) -> int:
    from shardline.hardware.systems import list_systems
    from shardline.report.system_text import render_system_list, system_summary

    systems = list_systems()
    if args.json:
        emit_json({"systems": [system_summary(s) for s in systems]})
    else:
        sys.stdout.write(render_system_list(systems))
    return 0


def run_show(args: argparse.Namespace) -> int:
    from shardline.hardware.systems import load_system
    from shardline.report.system_text import render_system, system_detail

    system = load_system(args.name)
    if args.json:
        emit_json(system_detail(system))
    else:
        sys.stdout.write(render_system(system))
    return 0
