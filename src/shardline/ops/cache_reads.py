"""Reading bytes through a cache: a stream that the cache holds in part, a pass that needs all of
it, and a GPU kernel whose operands the previous call left in the L2 (shardline.ops.predict;
docs/prediction.md, "Warm L2")."""

from __future__ import annotations

from typing import Any

import numpy as np

from shardline.basics.values import Scalar
from shardline.hardware import Chip

__all__ = ["gpu_read_time", "pack_read_time", "stream_time"]


def stream_time(
    q_bytes: Any, cache_bytes: float | None, cache_bytes_per_s: float | None, mem_bytes_per_s: float
) -> Scalar:
    """Seconds to stream Q bytes once: the part that the cache holds at the cache rate, the rest at
    the memory rate, `min(Q, C)/W_cache + max(Q - C, 0)/W_mem` (no cache: `Q/W_mem`)."""
    q = np.asarray(q_bytes, dtype=np.float64)
    if not cache_bytes or not cache_bytes_per_s:
        return q / mem_bytes_per_s
    return (
        np.minimum(q, cache_bytes) / cache_bytes_per_s
        + np.maximum(q - cache_bytes, 0.0) / mem_bytes_per_s
    )


def pack_read_time(
    input_bytes: Scalar,
    cache_bytes: float | None,
    cache_bytes_per_s: float | None,
    mem_bytes_per_s: float,
) -> Scalar:
    """Seconds to read a BLAS call's inputs for packing: from the cache when they fit it, else all
    from memory (a packing pass over more than the cache evicts its own data before reuse)."""
    q = np.asarray(input_bytes, dtype=np.float64)
    if not cache_bytes or not cache_bytes_per_s:
        return q / mem_bytes_per_s
    return np.where(q <= cache_bytes, q / cache_bytes_per_s, q / mem_bytes_per_s)


def gpu_read_time(chip: Chip, q_bytes: Any, mem_rate: float, *, warm_l2: bool) -> Scalar:
    """Seconds a GPU kernel takes to move Q bytes: from HBM at `mem_rate`, or, with a warm L2
    (the previous call left the operands there), all at the L2's resident-read rate
    (`on_chip.resident_read_bytes_per_s`) where Q fits what it holds at speed
    (`on_chip.l2_resident_bytes`, else `l2_bytes`); a larger Q evicts itself (`pack_read_time`)."""
    oc = chip.on_chip
    held = oc.l2_resident_bytes or oc.l2_bytes
    if not warm_l2 or not held or not oc.resident_read_bytes_per_s:
        return q_bytes / mem_rate
    return pack_read_time(q_bytes, held, oc.resident_read_bytes_per_s, mem_rate)
