"""`shardline` entry point: a thin adapter. Each command lives in its own module (`cmd_*.py`) with
`register(subparsers)`; argument groups are built in `args.py`, arguments become core values in
`common.py` and `compute.py`, text comes from `shardline.report`. Heavy imports (numpy, matplotlib,
openpyxl, torch) stay inside the handlers."""

from __future__ import annotations

import argparse
import importlib
import sys
from typing import NoReturn

from shardline.cli.common import fill_default_dtype
from shardline.errors import InputError

# One module per command (shardline.cli.cmd_NAME), in the order `shardline --help` lists them.
# Each has `register(subparsers)`; cmd_stack registers `stack` and `plan`, cmd_hw `hw list` and
# `hw show`. They are imported when the parser is built, so `import shardline.cli.main` stays
# cheap.
COMMANDS = (
    "matmul",
    "einsum",
    "shard",
    "collective",
    "compare",
    "tile",
    "calibrate",
    "validate",
    "stack",
    "sheet",
    "template",
    "explain",
    "drill",
    "plot",
    "report",
    "hw",
    "system",
    "what_if",
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
    for name in COMMANDS:
        importlib.import_module(f"shardline.cli.cmd_{name}").register(sub)
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
