"""Run the command line in-process for a test: (exit status, stdout, stderr)."""

from __future__ import annotations

import pytest

from shardline.cli.main import main


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """`shardline ARGV...` as a test sees it; argparse's exit (--help, a usage error) counts as
    the status it carries."""
    try:
        code = main(list(argv))
    except SystemExit as exc:
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err
