"""`shardline framework list` and `shardline framework show NAME`: the training frameworks whose
defaults `plan --framework NAME` starts from, each default with its source."""

from __future__ import annotations

import argparse
import sys

from shardline.cli.args import add_json_arg
from shardline.cli.common import emit_json

__all__ = ["register"]


def register(sub: argparse._SubParsersAction) -> None:
    fw = sub.add_parser(
        "framework",
        help="training frameworks: the execution defaults each one sets, with sources",
        description="The frameworks `plan`, `report` and the API take as --framework NAME "
        "(framework=NAME): the execution fields each one sets when a run leaves them out.",
    )
    fw_sub = fw.add_subparsers(dest="framework_command", metavar="ACTION", parser_class=type(fw))
    fw_sub.required = True
    ls = fw_sub.add_parser("list", help="every framework and its defaults")
    add_json_arg(ls)
    ls.set_defaults(func=run_list)
    show = fw_sub.add_parser("show", help="one framework: each default with its source")
    show.add_argument("name", help="a framework name (see `shardline framework list`)")
    add_json_arg(show)
    show.set_defaults(func=run_show)


def _defaults_text(defaults: dict[str, object]) -> str:
    return ", ".join(f"{k} {v}" for k, v in defaults.items()) or "(Execution's own)"


def run_list(args: argparse.Namespace) -> int:
    from shardline.basics.framework import framework_names, load_framework

    frameworks = [load_framework(name) for name in framework_names()]
    if args.json:
        emit_json({fw.name: fw.defaults for fw in frameworks})
        return 0
    for fw in frameworks:
        sys.stdout.write(
            f"{fw.name:<12} {fw.display_name}\n{'':<12} {_defaults_text(fw.defaults)}\n"
        )
    return 0


def run_show(args: argparse.Namespace) -> int:
    from shardline.basics.framework import load_framework

    fw = load_framework(args.name)
    if args.json:
        emit_json(
            {
                "name": fw.name,
                "display_name": fw.display_name,
                "defaults": fw.defaults,
                "sources": fw.sources,
            }
        )
        return 0
    lines = [f"{fw.name}: {fw.display_name}"]
    lines += [f"  {k} = {v}  [{fw.sources[k]}]" for k, v in fw.defaults.items()]
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
