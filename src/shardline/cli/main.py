"""`shardline` entry point: a thin adapter. Each command lives in its own module with
`register(subparsers)`; heavy imports stay inside the handlers."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn

from shardline.cli.common import fill_default_dtype
from shardline.errors import InputError

# Command modules, in the order `shardline --help` lists them.
COMMAND_MODULES = (
    "shardline.cli.cmd_roofline",  # matmul, einsum
    "shardline.cli.cmd_shard",  # shard, collective, compare
    "shardline.cli.cmd_predict",  # tile, calibrate, validate
    "shardline.cli.cmd_stack",  # stack, plan
    "shardline.cli.cmd_sheet",  # sheet, template, explain, plot, report
    "shardline.cli.cmd_hw",  # hw list, hw show
)


class _Parser(argparse.ArgumentParser):
    """argparse that reports a usage mistake as one `error:` line and exit status 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"error: {message} (see `{self.prog} --help`)\n")
        raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="shardline",
        description="First-principles performance modeling: rooflines, sharding, collectives, "
        "plans.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in COMMAND_MODULES:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:  # TEMPORARY while the command modules are written
            if exc.name != name:
                raise
            continue
        module.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        fill_default_dtype(args)
        code = args.func(args)
    except InputError as exc:
        sys.stderr.write(f"error: {exc}\n")
        return 2
    except BrokenPipeError:
        return 0
    except KeyboardInterrupt:
        sys.stderr.write("error: interrupted\n")
        return 130
    return int(code or 0)


if __name__ == "__main__":
    raise SystemExit(main())
