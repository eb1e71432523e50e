"""The additive cost record and the roofline derivation of times from it.

Costs of layers, stages and shards are plain sums (`+`), as in tinygrad's cost record. Every
function here accepts Python numbers or numpy arrays that broadcast.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = ["Cost", "Times", "roofline_times", "vmax", "bound_of"]


@dataclass(frozen=True)
class Cost:
    flops: Any = 0
    hbm_bytes: Any = 0
    net_bytes: Any = 0

    def __add__(self, other: Cost) -> Cost:
        return Cost(
            self.flops + other.flops,
            self.hbm_bytes + other.hbm_bytes,
            self.net_bytes + other.net_bytes,
        )

    def __mul__(self, count: Any) -> Cost:
        return Cost(self.flops * count, self.hbm_bytes * count, self.net_bytes * count)

    __rmul__ = __mul__


def _is_array(*values: Any) -> bool:
    return any(isinstance(v, np.ndarray) for v in values)


def vmax(a: Any, b: Any) -> Any:
    """max() for scalars, np.maximum for arrays (keeps Python scalars as Python scalars)."""
    return np.maximum(a, b) if _is_array(a, b) else max(a, b)


def bound_of(t_compute_s: Any, t_memory_s: Any, t_network_s: Any = None) -> Any:
    """Which resource binds: the largest time. Ties go to compute (I >= R is compute-bound)."""
    if t_network_s is None:
        if _is_array(t_compute_s, t_memory_s):
            return np.where(np.asarray(t_compute_s) >= t_memory_s, "compute", "memory")
        return "compute" if t_compute_s >= t_memory_s else "memory"
    if _is_array(t_compute_s, t_memory_s, t_network_s):
        local = np.where(np.asarray(t_compute_s) >= t_memory_s, "compute", "memory")
        return np.where(np.asarray(t_network_s) > vmax(t_compute_s, t_memory_s), "network", local)
    if t_network_s > max(t_compute_s, t_memory_s):
        return "network"
    return "compute" if t_compute_s >= t_memory_s else "memory"


@dataclass(frozen=True)
class Times:
    t_compute_s: Any
    t_memory_s: Any
    t_lower_s: Any  # max: perfect overlap of compute and memory
    t_upper_s: Any  # sum: no overlap
    bound: Any


def roofline_times(flops: Any, hbm_bytes: Any, flops_per_s: Any, mem_bytes_per_s: Any) -> Times:
    """T_math = F / P, T_mem = Q / W; lower bound max, upper bound sum.

    Source: "How to Scale Your Model", roofline chapter."""
    t_compute_s = flops / flops_per_s
    t_memory_s = hbm_bytes / mem_bytes_per_s
    return Times(
        t_compute_s=t_compute_s,
        t_memory_s=t_memory_s,
        t_lower_s=vmax(t_compute_s, t_memory_s),
        t_upper_s=t_compute_s + t_memory_s,
        bound=bound_of(t_compute_s, t_memory_s),
    )
