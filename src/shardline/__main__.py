"""`python -m shardline ...`: the same as the `shardline` command."""

from shardline.cli.main import main

raise SystemExit(main())
