"""The cluster flags every multi-device command shares: `--system NAME|FILE` and the fields a user
most often changes (`--gpus-per-node`, `--nics-per-node`, `--nic-bw`, `--scale-out`, `--sharp`),
and the collective library's choices (`--algorithm`, `--protocol`, `--multi-axis`).

`resolve_hardware(args)` runs once before a command: where any system flag is given it replaces
`args.hw` with the Chip the system makes of it (a Chip is accepted wherever a chip name is), so
every command downstream prices the user's cluster without knowing about systems.
"""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from shardline.errors import InputError

if TYPE_CHECKING:
    from shardline.hardware import Chip

__all__ = ["add_system_args", "power_capped", "resolve_hardware", "SYSTEM_FLAGS"]

SYSTEM_FLAGS = (
    "system",
    "gpus_per_node",
    "nics_per_node",
    "nic_bw",
    "scale_out",
    "sharp",
    "host_cpu",
)


def add_system_args(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--system",
        default=None,
        metavar="NAME|FILE",
        help="a cluster from `shardline system list` or a system .toml file: chip, GPUs per "
        "node, scale-up domain, NICs and fabric (default: the chip's own figures)",
    )
    group.add_argument("--gpus-per-node", default=None, metavar="G", help="GPUs in one node")
    group.add_argument("--nics-per-node", default=None, metavar="K", help="NICs in one node")
    group.add_argument(
        "--nic-bw", default=None, metavar="B/S", help="one NIC's one-way rate, e.g. '400 Gb/s'"
    )
    group.add_argument(
        "--scale-out",
        default=None,
        metavar="WORD",
        help="the network between nodes: ib, roce, efa, tcpx, tcpxo, dcn, ethernet",
    )
    group.add_argument(
        "--sharp",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="the scale-out switches reduce (SHARP / CollNet) or not",
    )
    group.add_argument(
        "--host-cpu",
        default=None,
        choices=("intel", "amd", "arm"),
        help="the nodes' CPU vendor; NCCL and RCCL cap the LL protocol across nodes by it",
    )
    group.add_argument(
        "--protocol",
        default=None,
        metavar="NAME",
        help="force the library's protocol: LL, LL128 or Simple (default: its own choice)",
    )
    group.add_argument(
        "--multi-axis",
        default="simultaneous",
        choices=("simultaneous", "sequential"),
        help="a collective over several torus axes uses all their links at once (default, as "
        "XLA does on TPU) or runs axis after axis",
    )


def _overrides(args: argparse.Namespace) -> dict[str, object]:
    from shardline.basics.units import check_rate, parse_count, parse_quantity

    out: dict[str, object] = {}
    if getattr(args, "gpus_per_node", None) is not None:
        out["gpus_per_node"] = parse_count(args.gpus_per_node, "--gpus-per-node")
    if getattr(args, "nics_per_node", None) is not None:
        out["nics_per_node"] = parse_count(args.nics_per_node, "--nics-per-node")
    if getattr(args, "nic_bw", None) is not None:
        out["nic_bytes_per_s"] = check_rate(parse_quantity(args.nic_bw, "B/s"), "--nic-bw", "B/s")
    if getattr(args, "scale_out", None) is not None:
        out["scale_out"] = str(args.scale_out).strip().lower()
    if getattr(args, "sharp", None) is not None:
        out["sharp"] = bool(args.sharp)
    if getattr(args, "host_cpu", None) is not None:
        out["host_cpu"] = str(args.host_cpu)
    for name, value in out.items():
        if isinstance(value, int) and not isinstance(value, bool) and value < 1:
            raise InputError(f"--{name.replace('_', '-')} must be at least 1")
    return out


def resolve_hardware(args: argparse.Namespace) -> None:
    """Apply --system and its field flags, then --power-cap, to the chip (see the module
    docstring)."""
    _resolve_system(args)
    if getattr(args, "power_cap", None) is None or getattr(args, "hw_is_list", False):
        return  # search reads a list of chips and caps each (cmd_search)
    args.hw = power_capped(args.hw or "h100-sxm", args.power_cap)


def power_capped(hw: str | Chip, text: str) -> Chip:
    """The chip `hw` (a name, a file or a Chip) under the power limit --power-cap `text` gives."""
    from shardline.basics.units import parse_quantity
    from shardline.hardware import load_chip
    from shardline.hardware.power import with_power_limit

    return with_power_limit(load_chip(hw), parse_quantity(text, "W"))


def _resolve_system(args: argparse.Namespace) -> None:
    if not any(getattr(args, flag, None) is not None for flag in SYSTEM_FLAGS):
        if getattr(args, "hw", "unset") is None:
            args.hw = getattr(args, "hw_fallback", None)
        return
    from shardline.hardware import load_chip
    from shardline.hardware.cluster import chip_with_cluster, system_chip
    from shardline.hardware.systems import load_system

    hw = getattr(args, "hw", None)
    flags = _overrides(args)
    if args.system is not None:
        system = load_system(args.system)
        chip = load_chip(hw) if hw is not None else load_chip(system.chip)
        args.hw = system_chip(chip, system, **flags)
    else:
        args.hw = chip_with_cluster(load_chip(hw or "h100-sxm"), **flags)  # type: ignore[arg-type]
