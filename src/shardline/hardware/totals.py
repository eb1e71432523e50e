"""What a pod or a cluster of one chip adds up to: peak FLOP/s, HBM capacity and bandwidth,
the scale-up links and their bandwidth, and the bisection bandwidth of its fabric.

Sums over N devices ("How to Scale Your Model", TPU chapter: a pod's FLOP/s and HBM are the
chip's times its chips); links: a torus of N chips with L ports each has N L / 2 chip-to-chip
links (a port is one end of a link), a switch fabric N L chip-to-switch links. The bisection is
the one-way bandwidth across a cut into two halves: on a torus whose longest used dimension has
extent d, the cut crosses N / d links per plane, two planes when that dimension wraps (a ring);
in a switch node the switch is non-blocking, N / 2 devices' egress; across nodes N / 2 devices'
NIC share (a system's leaf/spine oversubscription divides it: hardware.systems).
"""

from __future__ import annotations

from dataclasses import dataclass

from shardline.basics.serialize import json_object
from shardline.basics.values import JSONDict
from shardline.errors import InputError
from shardline.hardware.chip import Chip

__all__ = ["PodTotals", "pod_totals"]


@dataclass(frozen=True)
class PodTotals:
    chip: str
    devices: int
    dtype: str
    peak_flops_per_s: float
    hbm_bytes: float
    hbm_bytes_per_s: float
    links_per_chip: int
    link_bytes_per_s: float  # one link, one way
    links: int
    egress_bytes_per_s: float  # every device's scale-up egress, one way, summed
    bisection_bytes_per_s: float | None
    bisection_note: str

    def to_dict(self) -> JSONDict:
        return json_object(self)


def _torus_bisection(chip: Chip, devices: int) -> tuple[float, str]:
    """The torus filled one dimension after another (as the chip's default layout fills it):
    the cut halves the longest dimension in use."""
    ic = chip.interconnect
    assert ic is not None
    extents, rest = [], devices
    for size in ic.torus_dims:
        take = min(size, rest)
        while rest % take:
            take -= 1
        extents.append(take)
        rest //= take
    if rest > 1:
        raise InputError(
            f"{devices} devices do not fit {chip.name}'s torus {'x'.join(map(str, ic.torus_dims))}"
        )
    d = max(extents)
    i = extents.index(d)
    wraps = d == ic.torus_dims[i] if ic.wraparound == "full-axis" else d % 4 == 0
    planes = 2 if wraps and d > 2 else 1
    crossing = planes * devices // d
    return crossing * ic.link_bytes_per_s, (
        f"{crossing} links across the cut of the {d}-chip dimension "
        f"({'a ring: two planes' if planes == 2 else 'a line: one plane'}) x link rate"
    )


def pod_totals(chip: Chip, devices: int, dtype: str | None = None) -> PodTotals:
    """The totals of `devices` chips (module docstring)."""
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise InputError(f"devices must be a positive whole number, got {devices!r}")
    dtype = dtype or chip.default_dtype
    ic = chip.interconnect
    links_per_chip = ic.links_per_chip if ic else 0
    link_w = ic.link_bytes_per_s if ic else 0.0
    bisection: float | None = None
    note = "no interconnect in the chip file"
    if ic is not None and devices > 1:
        if ic.topology == "switch":
            inside = devices <= ic.scale_up_devices
            per_device = ic.egress_bytes_per_s
            if not inside:
                so = ic.scale_out
                per_device = so.bytes_per_s_per_device if so is not None else 0.0
            bisection = devices / 2 * per_device
            note = (
                f"{devices} / 2 devices x their "
                f"{'scale-up egress (one non-blocking switch node)' if inside else 'NIC share'}"
            )
        else:
            bisection, note = _torus_bisection(chip, devices)
    ports = devices * links_per_chip
    links = ports if ic and ic.topology == "switch" else ports // 2  # a link has two ends
    return PodTotals(
        chip=chip.name,
        devices=devices,
        dtype=dtype,
        peak_flops_per_s=devices * chip.peak(dtype),
        hbm_bytes=devices * chip.capacity_bytes,
        hbm_bytes_per_s=devices * chip.mem_bytes_per_s,
        links_per_chip=links_per_chip,
        link_bytes_per_s=link_w,
        links=links,
        egress_bytes_per_s=devices * links_per_chip * link_w,
        bisection_bytes_per_s=bisection,
        bisection_note=note,
    )
