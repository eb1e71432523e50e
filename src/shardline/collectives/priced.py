"""The realistic (library-level) time of a collective on a GPU group: which communicator the mesh
axes form (`group_for`), and the library's choice of algorithm and protocol (`library_choice`).

A collective over mesh axes is one communicator of n ranks on `nodes` nodes. Its bandwidths come
from the chip file: inside a node, the scale-up stage's all-gather bandwidth times the chip's
`achievable.collective_bus_efficiency` (the busbw nccl-tests reports at large sizes); between
nodes, the ranks' share of their node's NICs times `scale_out.efficiency`. The library's latencies
and protocol rules come from its data file (`library.py`). Chips whose library is "xla" or "none"
have no group: their realistic time is the bus-efficiency curve (`records.bus_efficiency`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from shardline.basics.values import Scalar
from shardline.collectives.library import PROTOCOLS, Group, Pair, load_library
from shardline.collectives.records import AxisNetwork, Stage
from shardline.collectives.vocabulary import library_pairs
from shardline.errors import InputError
from shardline.hardware import Chip

__all__ = ["LibraryChoice", "canonical_protocol", "group_for", "library_choice"]


@dataclass(frozen=True)
class LibraryChoice:
    """What the library runs and how long it takes (per element when V is an array)."""

    library: str  # "nccl 2.30.7"
    algorithm: str
    protocol: str
    t_s: Scalar
    latency_s: Scalar
    bus_bytes_per_s: Scalar
    group: Group
    candidates: tuple[tuple[Pair, Scalar], ...]  # each pair the library could run, and its seconds


def _gather_bandwidth(stage: Stage) -> float:
    """A stage's all-gather bandwidth B: t = (n-1)/n * V / B (ring 2W, line and switch W)."""
    return 2 * stage.bytes_per_s if stage.topology == "ring" else stage.bytes_per_s


def group_for(
    nets: Sequence[AxisNetwork],
    chip: Chip,
    in_switch: bool,
    gpus_per_process: int = 1,
    library_version: str | None = None,
    channels: int | None = None,
) -> Group | None:
    """The communicator the axes form, or None where no library model applies.

    `gpus_per_process` > 1 is one process driving several GPUs (nccl-tests `-g`): it launches
    their kernels one after another, so no collective is shorter than that many launches.
    `library_version` is the release that runs (None: the library file's own); `channels` the
    collective channels the run pins (None: the library file's typical count)."""
    ic = chip.interconnect
    if ic is None or ic.library not in ("nccl", "rccl"):
        return None
    stages = [s for net in nets for s in net.stages if s.devices > 1]
    if not stages:
        return None
    ranks = math.prod(s.devices for s in stages)
    nodes = math.prod(s.devices for s in stages if s.scale_out)
    up = [s for s in stages if not s.scale_out]
    out = [s for s in stages if s.scale_out]
    ppn = ranks // nodes
    eff = chip.achievable.collective_bus_efficiency or 1.0
    up_w = min(_gather_bandwidth(s) for s in up) if up else ic.egress_bytes_per_s
    inter = None
    sharp = False
    net_step = 0.0
    floor = chip.achievable.collective_latency_s or 0.0
    floor = max(floor, gpus_per_process * (chip.achievable.launch_overhead_s or 0.0))
    if out and ic.scale_out is not None:
        so = ic.scale_out
        share = min(s.bytes_per_s for s in out)
        # the ranks' NIC shares; a node's NICs cap them where the ranks sit in one node (a
        # scale-up domain of several nodes, an NVL72 rack, adds its nodes' NICs)
        node = so.node_bytes_per_s if so.nics_per_node and so.nic_bytes_per_s else math.inf
        if so.devices_per_node and ppn > so.devices_per_node:
            node = math.inf
        inter = min(ppn * share, node) * (so.efficiency or 1.0)
        sharp = so.in_network_reduction
        floor = max(floor, so.collective_latency_s or 0.0)
        lib_step = load_library(ic.library).network_step_s.get(so.fabric)
        net_step = lib_step if lib_step is not None else max(s.hop_latency_s for s in out)
    nvls = None
    # the scale-up switch reduces only where a node holds several of the group's ranks
    if ic.in_network_reduction and ic.topology == "switch" and ppn > 1 and (in_switch or nodes > 1):
        nvls = (chip.achievable.in_network_reduction_efficiency or eff) * up_w
    link = "pci" if any("pcie" in s.link.lower() for s in up) else "nvlink"
    lib = load_library(ic.library)
    generation = lib.generation(chip.name)
    so_ = ic.scale_out
    nic, cpu = (so_.nic_bytes_per_s, so_.host_cpu) if so_ is not None else (None, None)
    shape = (ranks, nodes, link, up_w * eff, inter, nvls, sharp, generation, net_step, floor)
    fabric = so_.fabric if so_ is not None and nodes > 1 else ""
    per_node = so_.devices_per_node if so_ is not None else None
    return Group(*shape, nic, cpu, library_version or lib.version, channels, fabric, per_node)


def _usable(
    found: list[Pair], algorithm: str | None, protocol: str | None, kind: str
) -> list[Pair]:
    keep = [
        p
        for p in found
        if (algorithm is None or p.algorithm == algorithm)
        and (protocol is None or p.protocol == protocol)
    ]
    if not keep:
        what = " ".join(x for x in (algorithm, protocol) if x)
        valid = ", ".join(dict.fromkeys(f"{p.algorithm}/{p.protocol}" for p in found))
        raise InputError(
            f"{what} cannot run {kind.replace('_', '-')} on this group; valid here: {valid}"
        )
    return keep


def _selected(pair: Pair, nbytes: Scalar) -> Scalar:
    """Where the library would run `pair` (everywhere, unless the pair says otherwise)."""
    where = getattr(pair, "selected", None)
    return where(nbytes) if where is not None else np.ones(np.shape(nbytes), dtype=bool)


def canonical_protocol(word: str | None) -> str | None:
    """'ll128' -> 'LL128'; None stays None."""
    if word is None:
        return None
    for p in PROTOCOLS:
        if p.lower() == str(word).strip().lower():
            return p
    raise InputError(f"unknown protocol {word!r}; valid: {', '.join(PROTOCOLS)}")


@lru_cache(maxsize=4096)
def _pairs(library: str, kind: str, group: Group) -> list[Pair]:
    """`library_pairs` of one communicator, built once (a search prices many sizes on each)."""
    return library_pairs(load_library(library), kind, group)


def library_choice(
    kind: str,
    nbytes: Scalar,
    group: Group,
    library: str,
    algorithm: str | None = None,
    protocol: str | None = None,
) -> LibraryChoice:
    """The library's fastest (algorithm, protocol) for V bytes, or the one the user forces
    (`algorithm`: a record's name in `algorithms.VOCABULARY` that the library runs)."""
    lib = load_library(library)
    every = _pairs(library, kind, group)
    if kind == "all_to_all":
        # sends are not collectives: NCCL_ALGO does not reach them and LL128 has no p2p path,
        # so a collective's forced algorithm or LL128 (a plan's --algorithm ring) leaves them be
        algorithm = algorithm if any(p.algorithm == algorithm for p in every) else None
        protocol = protocol if any(p.protocol == protocol for p in every) else None
    found = _usable(every, algorithm, protocol, kind)
    times = [np.maximum(p.time_s(nbytes), group.floor_s) for p in found]
    scalar = not isinstance(nbytes, np.ndarray)
    stacked = np.vstack([np.atleast_1d(t) for t in times])
    if len(found) > 1:
        # a library that picks by size, not by its cost model (p2p: LL up to the threshold)
        runs = np.vstack([np.atleast_1d(_selected(p, nbytes)) for p in found])
        stacked = np.where(runs, stacked, np.inf)
    best = np.argmin(stacked, axis=0)
    t_best = stacked[best, np.arange(stacked.shape[1])]
    first = found[int(best[0])]
    names = dict.fromkeys(f"{found[i].algorithm}" for i in best)
    protos = dict.fromkeys(f"{found[i].protocol}" for i in best)
    lat = np.array([found[i].latency_s for i in best])
    bus = np.array([found[i].bus_bytes_per_s for i in best])
    return LibraryChoice(
        library=f"{lib.name} {lib.version}",
        algorithm=first.algorithm if scalar else " / ".join(names),
        protocol=first.protocol if scalar else " / ".join(protos),
        t_s=float(t_best[0]) if scalar else t_best,
        latency_s=float(lat[0]) if scalar else lat,
        bus_bytes_per_s=float(bus[0]) if scalar else bus,
        group=group,
        candidates=tuple(zip(found, times, strict=True)),
    )
