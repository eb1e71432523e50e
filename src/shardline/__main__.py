"""`python -m shardline ...`: the same as the `shardline` command."""

import sys

try:
    from shardline.cli.main import main
except KeyboardInterrupt:  # Ctrl-C while the command is still starting
    sys.stderr.write("error: interrupted\n")
    raise SystemExit(130) from None

raise SystemExit(main())
