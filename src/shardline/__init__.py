"""shardline: first-principles performance modeling of ML workloads.

The core (counting, roofline, collectives, sharding, pipelines) is pure: no printing, no files.
Importing the package re-exports the public API and changes nothing else. In Jupyter,
`%load_ext shardline` shows results as tables (shardline.report.notebook).
"""

import sys as _sys

try:
    from shardline.errors import InputError
    from shardline.hardware import Chip, list_chips, load_chip
    from shardline.ops.roofline import RooflineResult, critical_m, einsum, matmul
    from shardline.planning.api import plan, sweep_batch
    from shardline.workload.dense_first import DenseFirstWorkload
    from shardline.workload.stack import stack
    from shardline.workload.templates import ffn, transformer
    from shardline.workload.workload import Layer, Workload
except (KeyboardInterrupt, RuntimeError) as _exc:
    # Ctrl-C while `python -m shardline` or the `shardline` script is starting (this import is
    # most of its start-up): one line and exit status 130, as once running; elsewhere re-raised.
    # A Ctrl-C that lands inside a class body's __set_name__ (a dataclass field) reaches here as
    # the RuntimeError Python wraps it in, with the KeyboardInterrupt as its cause.
    _interrupted = isinstance(_exc, KeyboardInterrupt) or isinstance(
        _exc.__cause__, KeyboardInterrupt
    )
    _cli = _sys.argv[:1] == ["-m"] or _sys.argv[0].endswith(("shardline", "shardline.exe"))
    if _interrupted and _cli:
        _sys.stderr.write("error: interrupted\n")
        raise SystemExit(130) from None
    raise

__all__ = [
    "Chip",
    "DenseFirstWorkload",
    "InputError",
    "Layer",
    "RooflineResult",
    "Workload",
    "critical_m",
    "einsum",
    "ffn",
    "list_chips",
    "load_chip",
    "matmul",
    "plan",
    "stack",
    "sweep_batch",
    "transformer",
]
__version__ = "0.1.0"


def load_ipython_extension(ipython: object) -> None:
    """`%load_ext shardline`: IPython shows results as HTML tables (shardline.report.notebook)."""
    from shardline.report.notebook import load_ipython_extension as load

    load(ipython)
