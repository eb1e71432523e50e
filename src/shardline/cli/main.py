"""`shardline` entry point: a thin adapter. Each command lives in its own module (`cmd_*.py`) with
`register(subparsers)`; argument groups are built in `args.py`, arguments become core values in
`common.py` and `compute.py`, text comes from `shardline.report`. Heavy imports (numpy, matplotlib,
openpyxl, torch) stay inside the handlers."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import os
import signal
import sys
from collections.abc import Iterator
from typing import NoReturn

from shardline import __version__
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
    "framework",
    "system",
    "model",
    "what_if",
    "search",
    "serve",
    "solve",
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
    parser.add_argument("--version", action="version", version=f"shardline {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    sub.required = True
    for name in COMMANDS:
        importlib.import_module(f"shardline.cli.cmd_{name}").register(sub)
    return parser


class Terminated(BaseException):
    """SIGTERM, raised where the program is (like KeyboardInterrupt for Ctrl-C), so that `finally`
    blocks run: a temporary output file is removed, never left behind."""


def _on_sigterm(signum: int, frame: object) -> None:
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # a second SIGTERM must not stop the cleanup
    raise Terminated


@contextlib.contextmanager
def _sigterm_raises() -> Iterator[None]:
    """SIGTERM raises `Terminated` inside the block (restored after; left alone where it is
    ignored, as under nohup, or outside the main thread)."""
    try:
        previous = signal.getsignal(signal.SIGTERM)
        if previous is signal.SIG_IGN:
            yield
            return
        signal.signal(signal.SIGTERM, _on_sigterm)
    except ValueError:  # not the main thread
        yield
        return
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _fail(message: str, status: int = 2) -> int:
    sys.stderr.write(f"error: {message}\n")
    return status


def _exit_interrupted(signum: int, frame: object) -> None:
    """Ctrl-C outside a command's run (Python exiting): one line and status 130, no traceback."""
    os.write(2, b"error: interrupted\n")
    os._exit(130)


def entry() -> int:
    """The `shardline` command (and `python -m shardline`): `main`, and a Ctrl-C that lands after
    it (while Python shuts down) ends as one line and status 130 as well."""
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        return main()
    finally:
        signal.signal(signal.SIGINT, _exit_interrupted)


def main(argv: list[str] | None = None) -> int:
    """Run one command. Every failure is one `error:` line on stderr: exit status 2 for bad input
    or an unusable file, 130 for Ctrl-C, 143 for SIGTERM (never a traceback for these)."""
    with _sigterm_raises():
        try:
            return run_command(argv)
        except InputError as exc:
            return _fail(str(exc))
        except BrokenPipeError:  # `shardline ... | head`: stop quietly, no complaint at exit
            with contextlib.suppress(OSError, ValueError):
                os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return 0
        except KeyboardInterrupt:
            return _fail("interrupted", 130)
        except Terminated:
            return _fail("terminated (SIGTERM)", 143)
        except RecursionError:
            return _fail("the input is nested too deeply to read")
        except MemoryError:
            return _fail("out of memory (the input is too large)")
        except OSError as exc:  # a file the commands did not check (a chip file, a directory)
            where = f"{exc.filename}: " if exc.filename else ""
            return _fail(f"{where}{exc.strerror or exc}")
        except RuntimeError as exc:
            # Ctrl-C inside a class body's __set_name__ (a dataclass defined by a module imported
            # lazily) arrives wrapped, its cause the KeyboardInterrupt
            if isinstance(exc.__cause__, KeyboardInterrupt):
                return _fail("interrupted", 130)
            raise


def run_command(argv: list[str] | None) -> int:
    """Parse `argv` and run its command; the exit status (`main` turns failures into one line)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    fill_default_dtype(args)
    return int(args.func(args) or 0)


if __name__ == "__main__":
    raise SystemExit(main())
