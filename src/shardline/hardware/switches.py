"""Switch levels of a system (docs/systems.md, "Switch levels and bisection"): the scale-up
switches' aggregate capacity (NVSwitch chips x ports x port rate), and a two-level leaf/spine
scale-out fabric whose leaves join `nodes_per_leaf` nodes with `oversubscription` : 1 more
bandwidth down than up. The collective model reads them from the chip's interconnect
(collectives.networks); the bisection bandwidth is derived here."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from shardline.hardware.catalog import ChipReader, opt_float
from shardline.hardware.chip import Chip

__all__ = [
    "switch_fields",
    "with_switch_levels",
    "switch_share_bytes_per_s",
    "bisection_bytes_per_s",
]


def switch_fields(r: ChipReader) -> dict[str, object]:
    """A system file's `scale_up.switch_bytes_per_s` (the scale-up switches' aggregate one-way
    capacity), `scale_out.oversubscription` (>= 1; 1 non-blocking) and
    `scale_out.nodes_per_leaf` (beyond them traffic crosses the spine)."""
    ratio = opt_float(r.number("scale_out.oversubscription"))
    if ratio is not None and not ratio >= 1:
        raise r.fail("scale_out.oversubscription", f"must be at least 1, got {ratio}")
    per_leaf = r.number("scale_out.nodes_per_leaf", integer=True)
    if per_leaf is not None and per_leaf < 1:
        raise r.fail("scale_out.nodes_per_leaf", f"must be at least 1, got {per_leaf}")
    capacity = opt_float(r.number("scale_up.switch_bytes_per_s"))
    return {
        "switch_bytes_per_s": capacity,
        "oversubscription": ratio or 1.0,
        "nodes_per_leaf": per_leaf,
    }


def with_switch_levels(chip: Chip, system: Any) -> Chip:
    """The chip whose interconnect carries the system's switch levels."""
    ic = chip.interconnect
    if ic is None:
        return chip
    so = ic.scale_out
    if so is not None:
        so = replace(
            so, oversubscription=system.oversubscription, nodes_per_leaf=system.nodes_per_leaf
        )
    ic = replace(ic, switch_bytes_per_s=system.switch_bytes_per_s, scale_out=so)
    return replace(chip, interconnect=ic)


def switch_share_bytes_per_s(system: Any) -> float | None:
    """Each device's one-way share of its scale-up switches' capacity when every device of the
    domain sends at once (None: the file gives no capacity)."""
    if system.switch_bytes_per_s is None:
        return None
    return float(system.switch_bytes_per_s / system.scale_up_domain_devices)


def bisection_bytes_per_s(system: Any, nodes: int) -> float:
    """One-way bytes/s across a cut that halves `nodes` nodes: half the nodes' NIC egress,
    divided by the oversubscription where the halves sit under different leaves (more nodes
    than one leaf joins): `nodes / 2 x node egress / oversubscription`."""
    per_leaf = system.nodes_per_leaf
    ratio = system.oversubscription if per_leaf is None or nodes > per_leaf else 1.0
    return float(nodes / 2 * system.node_bytes_per_s / ratio)
