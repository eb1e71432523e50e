"""shardline: first-principles performance modeling of ML workloads.

The core (counting, roofline, collectives, sharding, pipelines) is pure: no printing, no files.
"""

from shardline.errors import InputError
from shardline.hardware import Chip, list_chips, load_chip
from shardline.plan import plan, sweep_batch
from shardline.report.notebook import install as _install_notebook_views
from shardline.roofline import RooflineResult, critical_m, einsum, matmul
from shardline.stack import stack
from shardline.workload import Layer, Workload, ffn, transformer  # noqa: I001

_install_notebook_views()  # _repr_html_ and to_pandas on RooflineResult and SheetResult

__all__ = [
    "Chip",
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
