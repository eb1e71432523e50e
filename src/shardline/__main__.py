"""`python -m shardline ...`: the same as the `shardline` command."""

import os
import signal
import sys


def _interrupted(signum: int, frame: object) -> None:  # until the command runs (cli.main.entry)
    os.write(2, b"error: interrupted\n")
    os._exit(130)


signal.signal(signal.SIGINT, _interrupted)
try:
    from shardline.cli.main import entry
except KeyboardInterrupt:  # Ctrl-C while the command is still starting
    sys.stderr.write("error: interrupted\n")
    raise SystemExit(130) from None

raise SystemExit(entry())
