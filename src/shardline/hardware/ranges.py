"""The range each number of a chip or system file must lie in, by its kind (which its key name
tells: a rate, a time, a size in bytes, a fraction, a count), and the check that a chip's
reported capacity agrees with its marketed one. The ranges themselves are in
`shardline.basics.units`; docs/chip-schema.md has the table."""

from __future__ import annotations

from shardline.basics.units import (
    MAX_BYTES,
    MAX_COUNT,
    MAX_RATE,
    MAX_TIME_S,
    MIN_BYTES,
    MIN_FRACTION,
    MIN_RATE,
)
from shardline.hardware.datafile import SourcedReader

__all__ = ["FRACTIONS", "REPORTED_FACTOR", "check_reported", "field_range", "is_rate"]

# Achievable figures that are fractions of a line rate or peak: at most 1.
FRACTIONS = (
    "collective_bus_efficiency",
    "in_network_reduction_efficiency",
    "unaligned_matmul_efficiency",
    "attention_fwd_efficiency",
    "attention_bwd_efficiency",
    "sustained_matmul_fraction",
)


def is_rate(path: str) -> bool:
    """A per-second rate field (FLOP/s, bytes/s, Hz), as opposed to a time, a size or a
    fraction."""
    return "flops_per_s" in path or "bytes_per_s" in path or path.endswith("_hz")


def field_range(path: str, *, integer: bool = False) -> tuple[str, float, float]:
    """The kind of a chip or system file's number, by its field name, and the range it must lie
    in (`shardline.basics.units`: rates 1 to 1e30 per second, times up to 1e6 s, sizes 1 B to
    1e30 B, fractions 1e-3 to 1, counts 1 to 1e9; docs/chip-schema.md)."""
    last = path.rsplit(".", 1)[-1]
    if is_rate(path):
        return "a rate per second", MIN_RATE, MAX_RATE
    if last.endswith("_s"):
        return "a time in seconds", 0.0, MAX_TIME_S
    if last in FRACTIONS or last.endswith("efficiency"):
        return "a fraction", MIN_FRACTION, 1.0
    if integer:
        return "a count", 1, MAX_COUNT
    if "bytes" in last:
        return "a size in bytes", MIN_BYTES, MAX_BYTES
    return "a number", 0.0, MAX_RATE


# How far the reported capacity may be from the marketed one: both are the device's memory (the
# catalog's differ by 0.6% to 7.4%: GB against GiB, and the driver's view), so a factor of 2
# apart means one of them is wrong, and the fits checks would use the other without a word.
REPORTED_FACTOR = 2.0


def check_reported(r: SourcedReader, capacity: float, reported: float | None) -> None:
    if reported is None or capacity / REPORTED_FACTOR <= reported <= capacity * REPORTED_FACTOR:
        return
    raise r.fail(
        "memory.reported_bytes",
        f"({reported:.4g} B) is more than {REPORTED_FACTOR:g}x away from memory.capacity_bytes "
        f"({capacity:.4g} B): both are this device's memory, and the fits checks use the "
        "reported one; fix the one that is wrong",
    )
