"""shardline: first-principles performance modeling of ML workloads.

The core (counting, roofline, collectives, sharding, pipelines) is pure: no printing, no files.
"""

from shardline.errors import InputError
from shardline.hardware import Chip, list_chips, load_chip
from shardline.roofline import RooflineResult, critical_m, einsum, matmul

__all__ = [
    "Chip", "InputError", "RooflineResult", "critical_m", "einsum", "list_chips", "load_chip",
    "matmul",
]
__version__ = "0.1.0"
