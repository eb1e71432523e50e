"""The additive cost record and the roofline derivation of times from it.

Costs of layers, stages and shards are plain sums (`+`), as in tinygrad's cost record. Every
function here accepts Python numbers or numpy arrays that broadcast.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import overload

import numpy as np

from shardline.basics.kinds import Bound
from shardline.basics.values import JSONDict, Scalar

__all__ = [
    "Cost",
    "ZERO_COST",
    "Times",
    "roofline_times",
    "vmax",
    "bound_of",
    "TIE_RTOL",
    "is_tie",
    "strictly_less",
]


@dataclass(frozen=True)
class Cost:
    """What a piece of work costs one device: counts and times, all additive.

    Leaves come from `Cost.roofline` (one op on one chip) or `Cost.network` (a collective); a
    layer, a stage, a stack or a plan is their sum (`+`) and repeats scale them (`*`). Times are
    summed leaf by leaf, so `t_lower_s` of a sum is the sum of the leaves' lower bounds (each op's
    own max(compute, memory)), not the max of the summed columns.

    The three times, one meaning each wherever a Cost is made (`Cost.roofline`, `Cost.network`,
    the sharded layout pricer `shardline.sharding.layout.layout_cost`, the causal kernel):
    - `t_lower_s`: the overlapped bound, per leaf max(t_compute, t_memory, t_network);
    - `t_upper_s`: the serial bound, per leaf t_compute + t_memory + t_network, nothing
      overlapped (collectives on separate links one after another too);
    - `predicted_s`: the realistic time of the same work where a model for it exists, else the
      lower bound.
    Every field is a `Scalar`: a Python number, or a numpy array that broadcasts (one entry per
    layout priced at once).
    """

    flops: Scalar = 0
    hbm_bytes: Scalar = 0
    net_bytes: Scalar = 0  # bytes this device sends over the network
    t_compute_s: Scalar = 0.0
    t_memory_s: Scalar = 0.0
    t_network_s: Scalar = 0.0  # line-rate alpha-beta time of the collectives
    t_lower_s: Scalar = 0.0  # overlapped: per leaf max(t_compute, t_memory, t_network)
    t_upper_s: Scalar = 0.0  # serial: per leaf t_compute + t_memory + t_network, no overlap
    predicted_s: Scalar = 0.0  # realistic time (achievable rates, efficiencies)

    # field by field, written out (the hot path of every stage's sums)
    def __add__(self, other: Cost) -> Cost:
        if not isinstance(other, Cost):
            return NotImplemented
        return Cost(
            self.flops + other.flops,
            self.hbm_bytes + other.hbm_bytes,
            self.net_bytes + other.net_bytes,
            self.t_compute_s + other.t_compute_s,
            self.t_memory_s + other.t_memory_s,
            self.t_network_s + other.t_network_s,
            self.t_lower_s + other.t_lower_s,
            self.t_upper_s + other.t_upper_s,
            self.predicted_s + other.predicted_s,
        )

    def __mul__(self, count: Scalar) -> Cost:
        return Cost(
            self.flops * count,
            self.hbm_bytes * count,
            self.net_bytes * count,
            self.t_compute_s * count,
            self.t_memory_s * count,
            self.t_network_s * count,
            self.t_lower_s * count,
            self.t_upper_s * count,
            self.predicted_s * count,
        )

    __rmul__ = __mul__

    @property
    def bound(self) -> Bound | np.ndarray:
        """The largest of the three summed times (ties go to compute, then memory)."""
        return bound_of(self.t_compute_s, self.t_memory_s, self.t_network_s)

    @staticmethod
    def roofline(
        flops: Scalar,
        hbm_bytes: Scalar,
        flops_per_s: Scalar,
        mem_bytes_per_s: Scalar,
        predicted_s: Scalar | None = None,
    ) -> Cost:
        """One op: T_math = F / P, T_mem = Q / W, lower bound max, upper bound sum."""
        times = roofline_times(flops, hbm_bytes, flops_per_s, mem_bytes_per_s)
        return Cost(
            flops=flops,
            hbm_bytes=hbm_bytes,
            t_compute_s=times.t_compute_s,
            t_memory_s=times.t_memory_s,
            t_lower_s=times.t_lower_s,
            t_upper_s=times.t_upper_s,
            predicted_s=times.t_lower_s if predicted_s is None else predicted_s,
        )

    @staticmethod
    def network(net_bytes: Scalar, t_network_s: Scalar, predicted_s: Scalar | None = None) -> Cost:
        """One collective (or a send): bytes this device sends and its alpha-beta time."""
        return Cost(
            net_bytes=net_bytes,
            t_network_s=t_network_s,
            t_lower_s=t_network_s,
            t_upper_s=t_network_s,
            predicted_s=t_network_s if predicted_s is None else predicted_s,
        )

    def as_dict(self) -> JSONDict:
        """The fields by name (for JSON: the result records flatten their Cost with this)."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


ZERO_COST = Cost()


def _is_array(*values: object) -> bool:
    return any(isinstance(v, np.ndarray) for v in values)


def vmax(a: Scalar, b: Scalar) -> Scalar:
    """max() for scalars, np.maximum for arrays (keeps Python scalars as Python scalars)."""
    return np.maximum(a, b) if _is_array(a, b) else max(a, b)


@overload
def bound_of(t_compute_s: float, t_memory_s: float, t_network_s: float | None = None) -> Bound: ...


@overload
def bound_of(
    t_compute_s: Scalar, t_memory_s: Scalar, t_network_s: Scalar | None = None
) -> Bound | np.ndarray: ...


def bound_of(
    t_compute_s: Scalar, t_memory_s: Scalar, t_network_s: Scalar | None = None
) -> Bound | np.ndarray:
    """Which resource binds: the largest time. Ties go to compute (I >= R is compute-bound).
    Python or numpy scalars give a `Bound` word; numpy arrays give an array of them."""
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
    t_compute_s: Scalar
    t_memory_s: Scalar
    t_lower_s: Scalar  # max: perfect overlap of compute and memory
    t_upper_s: Scalar  # sum: no overlap
    bound: Bound | np.ndarray


def roofline_times(
    flops: Scalar, hbm_bytes: Scalar, flops_per_s: Scalar, mem_bytes_per_s: Scalar
) -> Times:
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


# Two times within this relative distance are a tie (ranking strategies, plans and choices):
# float sums of the same terms in another order differ by ~1e-16 relative, so 1e-9 separates
# real differences from rounding while staying far below anything a user could measure.
TIE_RTOL = 1e-9


def is_tie(a: float, b: float) -> bool:
    """True when a and b are equal within TIE_RTOL (relative to the larger)."""
    return abs(a - b) <= TIE_RTOL * max(abs(a), abs(b))


def strictly_less(a: float, b: float) -> bool:
    """a < b by more than a tie."""
    return a < b and not is_tie(a, b)
