"""A chip placed in a cluster: the chip's own figures read as a system, changed by the user's
flags (`--gpus-per-node`, `--nics-per-node`, `--nic-bw`, `--scale-out`, `--sharp`, `--host-cpu`).

`system_for_chip` reads a chip file's interconnect as a System (so a flag changes only what it
names; a catalog system with other figures is applied only when the user asks for it with
`--system`); `chip_with_cluster` applies the flags and returns the chip to price with.
"""

from __future__ import annotations

from dataclasses import replace

from shardline.errors import InputError
from shardline.hardware.chip import Chip
from shardline.hardware.systems import System, apply_system, override_system

__all__ = ["chip_with_cluster", "system_for_chip", "system_chip"]


def system_for_chip(chip: Chip) -> System:
    """The chip's own interconnect as a system (one node = its scale-up domain where it has no
    scale-out figures of its own)."""
    ic = chip.interconnect
    if ic is None:
        raise InputError(f"{chip.name} has no interconnect in its chip file; a cluster needs one")
    so = ic.scale_out
    gpus = (so.devices_per_node if so is not None else None) or ic.scale_up_devices
    if so is not None and so.nics_per_node and so.nic_bytes_per_s:
        nics, nic = so.nics_per_node, so.nic_bytes_per_s
    elif so is not None:  # the file gives each device's share: one NIC per device at that rate
        nics, nic = gpus, so.bytes_per_s_per_device
    else:
        nics, nic = 1, 0.0
    return System(
        name=chip.name,
        display_name=f"{chip.display_name} (its chip file)",
        chip=chip.name,
        gpus_per_node=gpus,
        scale_up_domain_devices=ic.scale_up_devices,
        fabric=so.fabric if so is not None else "unknown",
        nics_per_node=nics,
        nic_bytes_per_s=nic,
        scale_out_hop_latency_s=so.hop_latency_s if so is not None else 0.0,
        scale_out_link=so.link if so is not None else None,
        scale_out_efficiency=so.efficiency if so is not None else None,
        sharp=so.in_network_reduction if so is not None else False,
        library=ic.library,
        sources={"gpus_per_node": f"chip file {chip.name}"},
    )


def chip_with_cluster(
    chip: Chip,
    *,
    nvls: bool = True,
    gpus_per_node: int | None = None,
    nics_per_node: int | None = None,
    nic_bytes_per_s: float | None = None,
    scale_out: str | None = None,
    sharp: bool | None = None,
    host_cpu: str | None = None,
) -> Chip:
    """The chip with the flags given put in; `nvls=False` turns the scale-up switches'
    reduction off (NCCL_NVLS_ENABLE=0)."""
    flags = {
        "gpus_per_node": gpus_per_node,
        "nics_per_node": nics_per_node,
        "nic_bytes_per_s": nic_bytes_per_s,
        "scale_out": scale_out,
        "sharp": sharp,
        "host_cpu": host_cpu,
    }
    if any(v is not None for v in flags.values()):
        chip = system_chip(chip, system_for_chip(chip), **flags)
    if not nvls and chip.interconnect is not None and chip.interconnect.in_network_reduction:
        chip = replace(chip, interconnect=replace(chip.interconnect, in_network_reduction=False))
    return chip


def system_chip(chip: Chip, system: System, **flags: object) -> Chip:
    """`system` with the flags put in, applied to `chip` (the scale-out figures the chip file
    had and the system does not replace, such as the smallest collective, are kept)."""
    changed = override_system(system, **flags)  # type: ignore[arg-type]
    placed = apply_system(chip, changed)
    before = chip.interconnect.scale_out if chip.interconnect else None
    after = placed.interconnect.scale_out if placed.interconnect else None
    if before is not None and after is not None and changed.fabric == before.fabric:
        after = replace(after, collective_latency_s=before.collective_latency_s)
        assert placed.interconnect is not None
        placed = replace(placed, interconnect=replace(placed.interconnect, scale_out=after))
    return placed
