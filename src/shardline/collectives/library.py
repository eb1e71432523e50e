"""The collective library's own cost model (NCCL's tuner; RCCL's fork of it), as data.

A library runs one collective as one (algorithm, protocol) pair and picks the pair it predicts
fastest for the message size and the group (NVIDIA/nccl src/graph/tuning.cc, `ncclTopoTuneModel`
and `ncclTopoGetAlgoTime`). For each pair the time is

    t(V) = latency + V / algbw,    algbw = busbw x ratio,

- latency = the pair's base latency + its steps, each at the per-step latency of the link it
  crosses (NVLink or PCIe inside a node, the network between nodes);
- busbw = the group's achievable bus bandwidth (the Simple protocol's, from the chip or system
  file) scaled by the protocol (LL sends 8-byte lines with 4 bytes of data; LL128 120 of 128) and
  capped per chip generation;
- ratio turns bus bandwidth into the algorithm's own (ring all-reduce n / (2(n-1)), tree 1/2).

The library's constants live in `libraries/<name>.toml` with their source (every algorithm NCCL
has, by NCCL's own key: ring, tree, nvls, nvls_tree, collnet_direct, collnet_chain, pat); the
group's bandwidths come from the chip's interconnect (`Group`). This module holds what every
algorithm's pricing shares (the communicator, a pair, the protocol and latency rules, the
network ramp); each algorithm's own pricing is part of its record in `algorithms.py`. Everything
here is pure: numbers in, seconds out. The ring's bandwidth lives here too: the tree and PAT
scale it, and the ring's own record prices with it.
"""

from __future__ import annotations

import math
import re
import tomllib
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from typing import Any

import numpy as np

from shardline.basics.values import Scalar
from shardline.errors import InputError

__all__ = [
    "PROTOCOLS",
    "collective_channels",
    "collective_sm_share",
    "Group",
    "Library",
    "Pair",
    "inter_latency",
    "load_library",
    "log2i",
    "nvls_channels",
    "plugin_setting",
    "protocol_bus",
    "protocols_for",
    "ramp",
    "ring_alg_bytes_per_s",
    "ring_bus_bytes_per_s",
    "ring_steps",
    "scale_up_share",
    "version_at_least",
]

PROTOCOLS = ("LL", "LL128", "Simple")
_US = 1e-6  # the library file's microseconds
_GB = 1e9  # the library file's GB/s


@dataclass(frozen=True)
class Library:
    """One library's constants (seconds and bytes/s), read from its data file."""

    name: str
    version: str
    base_latency_s: dict[str, tuple[float, float, float]]
    hw_latency_s: dict[str, dict[str, tuple[float, float, float]]]  # link -> algorithm -> proto
    ll_max_bytes_per_s: dict[str, tuple[float, float, float]]  # generation -> [1, 2, >2 nodes]
    factors: dict[str, Any]
    generations: dict[str, str]  # chip name -> generation
    sources: dict[str, str]
    network_step_s: dict[str, float] = field(default_factory=dict)  # fabric -> one network step
    # across nodes the LL caps go by the host CPU: "amd" and "other" -> [1, 2, >2 nodes]
    ll_max_by_host_bytes_per_s: dict[str, tuple[float, float, float]] = field(default_factory=dict)
    p2p: dict[str, Any] = field(default_factory=dict)  # point-to-point (all-to-all) parameters
    # fabric -> what the network plugin that runs the library over it sets (`net_plugin`)
    net_plugin: dict[str, dict[str, Any]] = field(default_factory=dict)

    def generation(self, chip_name: str) -> str:
        return self.generations.get(chip_name, self.factors.get("default_generation", "hopper"))

    def ll_max(self, group: Group) -> float:
        """The LL protocol's bus-bandwidth cap (tuning.cc, llMaxBws[index1][index2]): in one
        node the GPU generation's row; across nodes the host CPU's, the AMD row for AMD hosts and
        the other row for every other host (Intel, Arm, unknown), 2 nodes or more than 2."""
        column = _node_index(group.nodes)
        if group.nodes <= 1 or not self.ll_max_by_host_bytes_per_s:
            return self.ll_max_bytes_per_s[group.generation][column]
        host = "amd" if group.host_cpu == "amd" else "other"
        return self.ll_max_by_host_bytes_per_s[host][column]


@dataclass(frozen=True)
class Group:
    """One communicator: who is in it and what joins them.

    `intra_bus_bytes_per_s` is the achievable bus bandwidth of a Simple-protocol ring inside a
    node (nccl-tests' busbw at large messages); `inter_bus_bytes_per_s` that of the network for
    this group's ranks on one node (their NIC share times the fabric's efficiency);
    `nvls_alg_bytes_per_s` the in-switch all-reduce's algorithm bandwidth where the switch
    reduces (NVLink SHARP), else None.
    """

    ranks: int
    nodes: int
    intra_link: str  # "nvlink" | "pci"
    intra_bus_bytes_per_s: float
    inter_bus_bytes_per_s: float | None
    nvls_alg_bytes_per_s: float | None
    sharp: bool
    generation: str
    net_latency_s: float = 0.0  # the fabric's own latency of one network step
    floor_s: float = 0.0  # the shortest collective this group runs (measured; 0: none known)
    nic_bytes_per_s: float | None = None  # one NIC's line rate, one way (None: not known)
    host_cpu: str | None = None  # the nodes' CPU vendor: intel, amd, arm (None: not known)
    library_version: str = ""  # the library release that runs ("": not known, the current one)
    channels: int | None = None  # collective channels pinned by the run (None: the library's)
    fabric: str = ""  # the scale-out fabric word (ib, roce, efa, ...; "": none or not known)
    gpus_per_node: int | None = None  # GPUs one node holds, in the group or not (None: not known)

    @property
    def ppn(self) -> int:
        return self.ranks // max(self.nodes, 1)


@dataclass(frozen=True)
class Pair:
    """One (algorithm, protocol) the library could run: t(V) = latency_s + V / alg_bytes_per_s
    (times a size-dependent correction for trees, `size_factor`)."""

    algorithm: str
    protocol: str
    latency_s: float
    bus_bytes_per_s: float
    alg_bytes_per_s: float
    tree_correction: tuple[float, ...] = ()  # NCCL's treeCorrectionFactor by log2(V/64)
    plateau_latency_s: float | None = None  # multi-node Simple ring all-reduce, large V
    plateau_from_bytes: float = math.inf

    net_half_bytes: float = 0.0  # the network reaches half its bandwidth at this size

    def time_s(self, nbytes: Scalar) -> Scalar:
        """t(V) = latency(V) + V / (alg_bytes_per_s x ramp(V))."""
        v = np.asarray(nbytes, dtype=np.float64)
        t = self.latency_at(v) + v / (self.alg_bytes_per_s * self.ramp(v))
        return t if isinstance(nbytes, np.ndarray) else float(t)

    def latency_at(self, v: Scalar) -> Scalar:
        """The latency at V bytes: the multi-node Simple ring's plateau from its size on."""
        if self.plateau_latency_s is None:
            return self.latency_s
        return np.where(v >= self.plateau_from_bytes, self.plateau_latency_s, self.latency_s)

    def ramp(self, v: Scalar) -> Scalar:
        """The share of alg_bytes_per_s reached at V bytes: the tree correction (`size_factor`)
        times the network's ramp V / (V + V_half), V_half the size at half bandwidth."""
        share = self.size_factor(v)
        if self.net_half_bytes > 0:
            share = share * v / (v + self.net_half_bytes)
        return share

    def size_factor(self, v: Scalar) -> Scalar:
        if not self.tree_correction:
            return 1.0
        table = np.asarray(self.tree_correction)
        safe = np.maximum(v, 64.0)
        index = np.floor(np.log2(safe / 64.0)).astype(int)
        inside = (v >= 64.0) & (index < len(table))
        return np.where(inside, table[np.clip(index, 0, len(table) - 1)], 1.0)


# --- loading -----------------------------------------------------------------------------------


def _triples(table: dict[str, object], where: str) -> dict[str, tuple[float, float, float]]:
    out: dict[str, tuple[float, float, float]] = {}
    for algorithm, values in table.items():
        if algorithm == "source":
            continue
        if not isinstance(values, list) or len(values) != 3:
            raise InputError(f"library file: {where}.{algorithm} must list 3 numbers")
        a, b, c = (float(x) for x in values)
        out[algorithm] = (a, b, c)
    return out


def _scaled(triples: dict[str, tuple[float, float, float]], unit: float) -> dict[str, Any]:
    return {k: tuple(x * unit for x in v) for k, v in triples.items()}


def _library_from_dict(data: dict[str, Any]) -> Library:
    sources = {"version": data["version"]["source"]}
    base = _triples(data["base_latency_us"], "base_latency_us")
    sources["base_latency_us"] = data["base_latency_us"]["source"]
    hw: dict[str, dict[str, tuple[float, float, float]]] = {}
    for link, table in data["hw_latency_us"].items():
        hw[link] = _scaled(_triples(table, f"hw_latency_us.{link}"), _US)
        sources[f"hw_latency_us.{link}"] = table["source"]
    caps = data["generation_caps_gb_s"]
    sources["generation_caps_gb_s"] = caps["source"]
    ll_max = _scaled(_triples(caps["ll_max"], "ll_max"), _GB)
    by_host = _scaled(_triples(caps.get("ll_max_by_host", {}), "ll_max_by_host"), _GB)
    generations = {
        chip: gen for gen, chips in data["generations"].items() if gen != "source" for chip in chips
    }
    sources["generations"] = data["generations"]["source"]
    sources["protocol_factors"] = data["protocol_factors"]["source"]
    steps = data.get("network_step_us", {})
    sources["network_step_us"] = steps.get("source", "")
    p2p = {k: v for k, v in data.get("p2p", {}).items() if k != "source"}
    sources["p2p"] = data.get("p2p", {}).get("source", "")
    plugins = data.get("net_plugin", {})
    if plugins:
        sources["net_plugin"] = plugins["source"]
    return Library(
        name=data["name"],
        version=str(data["version"]["value"]),
        base_latency_s=_scaled(base, _US),
        hw_latency_s=hw,
        ll_max_bytes_per_s=ll_max,
        factors=dict(data["protocol_factors"]),
        generations=generations,
        sources=sources,
        network_step_s={k: float(v) * _US for k, v in steps.items() if k != "source"},
        ll_max_by_host_bytes_per_s=by_host,
        p2p=p2p,
        net_plugin={k: dict(v) for k, v in plugins.items() if k != "source"},
    )


@cache
def load_library(name: str) -> Library:
    """The shipped library model `name` (nccl, rccl)."""
    folder = resources.files("shardline.collectives") / "libraries"
    entry = folder / f"{name}.toml"
    if not entry.is_file():
        raise InputError(f"no collective library model named {name!r} (have: nccl, rccl)")
    return _library_from_dict(tomllib.loads(entry.read_text(encoding="utf-8")))


@cache
def collective_sm_share(library: str, cores: int) -> float:
    """The share of a GPU's SMs (CUs) a collective of `library` holds while it runs beside
    compute: NCCL and RCCL run one thread block per channel (their `channels`, 16 on an 8-GPU
    NVLink / xGMI node), so `channels / cores`; 0 for a library that holds none (XLA's on the
    TPU's ICI DMA engines) or a chip without a core count."""
    if library not in ("nccl", "rccl") or cores <= 0:
        return 0.0
    return min(float(load_library(library).factors["channels"]) / cores, 1.0)


# --- what every algorithm's pricing shares ------------------------------------------------------


def log2i(n: int) -> int:
    """NCCL's log2i: the floor of log2 n (0 for n < 1)."""
    return int(math.floor(math.log2(n))) if n >= 1 else 0


def version_at_least(version: str, since: str) -> bool:
    """Whether a release ("2.26.6 (gIB plugin v1.0.6)", "2.9.9") is `since` ("2.14.3") or
    later, by its leading dotted numbers; a text without them ("unknown", "") is taken as the
    current release, so True."""
    found = re.match(r"\s*(\d+(?:\.\d+)*)", version)
    if found is None:
        return True
    have = tuple(int(x) for x in found.group(1).split("."))
    return have >= tuple(int(x) for x in since.split("."))


def _node_index(nodes: int) -> int:
    return 0 if nodes <= 1 else (1 if nodes == 2 else 2)


def plugin_setting(lib: Library, group: Group, key: str) -> Any:
    """What the network plugin of the group's fabric sets (`net_plugin.<fabric>.<key>` in the
    library file) for the group's GPU generation, or None: a plugin setting that names
    generations (`{ ampere = ..., hopper = ... }`) applies to those only (a cloud's instance
    types differ by GPU: AWS's p4d/p4de are A100, p5 H100)."""
    if group.nodes <= 1:
        return None
    value = lib.net_plugin.get(group.fabric, {}).get(key)
    if isinstance(value, dict):
        return value.get(group.generation)
    return value


def protocols_for(group: Group) -> tuple[int, ...]:
    """The protocols (indices into PROTOCOLS) a ring or tree may run on `group`.

    LL128 only inside a node: NCCL enables it on NVLink and on network paths no longer than a
    PCIe switch (PXB/PXN) between GPU and NIC, which a cluster's file does not tell."""
    return (0, 1, 2) if group.nodes == 1 else (0, 2)


def inter_latency(lib: Library, group: Group, key: str, p: int) -> float:
    """One network step with the constants under `key` (the library file's row).

    Where the fabric's network plugin reports a latency of its own to NCCL's tuner
    (`net_plugin.<fabric>.latency_us`, ncclNetProperties_t.latency), the step is NCCL's:
    hwLatencies[NET] + that latency, twice that latency for Simple (its flush; tuning.cc,
    ncclTopoTuneModel: `interLat = hwLat[NET][a][p] + graphs[a]->latencyInter`, `if (p ==
    NCCL_PROTO_SIMPLE) interLat += graphs[a]->latencyInter`). Otherwise the library's per-step
    network latency, or the fabric's own where that is longer (a cloud transport such as EFA or
    TCPXO: aws-ofi-nccl's tuner charges 20 us a step on P5, where NCCL's constants assume
    RDMA)."""
    own = plugin_setting(lib, group, "latency_us")
    if own is not None:
        flushes = 2 if PROTOCOLS[p] == "Simple" else 1
        return lib.hw_latency_s["net"][key][p] + flushes * float(own) * _US
    return max(lib.hw_latency_s["net"][key][p], group.net_latency_s)


def protocol_bus(lib: Library, group: Group, bus: float, p: int) -> float:
    """A Simple-protocol bus bandwidth as protocol p moves it (LL: half, capped per generation;
    LL128: 120 of every 128 bytes)."""
    if PROTOCOLS[p] == "LL":
        return min(lib.ll_max(group), bus * lib.factors["ring_ll"])
    if PROTOCOLS[p] == "LL128":
        return bus * lib.factors["ring_ll128"]
    return bus


def collective_channels(lib: Library, group: Group) -> int:
    """The collective channels a group runs: the run's own where it pins them
    (NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS, e.g. 8 in Google's GPUDirect-TCPX nccl-tests script,
    google/nccl-plugin-gpudirecttcpx scripts/run-nccl.sh); across nodes that hold one GPU each,
    the count the library's topology search settles on there where its file gives one
    (`channels_one_gpu_per_node`: NCCL logs 4 on two nodes of one GPU and one NIC); else the
    library file's typical count for 8-GPU nodes. A group of one rank a node on nodes of several
    GPUs (a data-parallel group) keeps the typical count: its rank sees all the node's NICs,
    which the one-GPU log does not cover."""
    if group.channels:
        return int(group.channels)
    single = lib.factors.get("channels_one_gpu_per_node")
    if single is not None and group.nodes > 1 and group.ppn == 1 and group.gpus_per_node == 1:
        return int(single)
    return int(lib.factors["channels"])


def ramp(lib: Library, pair: Pair, group: Group, channels: int | None = None) -> Pair:
    """Across nodes the Simple protocol streams through the network proxies' buffers (NCCL:
    NCCL_BUFFSIZE per channel); a message reaches half the network's bandwidth when it fills
    them once, V_half = channels x buffer, so its bandwidth is bw x V / (V + V_half). The
    channels are the library's collective channels unless the algorithm runs its own count."""
    if group.nodes <= 1 or pair.protocol != "Simple":
        return pair
    half = (channels or collective_channels(lib, group)) * lib.factors["buffer_bytes"]
    return replace(pair, net_half_bytes=float(half))


def ring_steps(kind: str, ranks: int, nodes: int) -> tuple[int, int]:
    """(steps, network steps) of a ring: all-reduce 2(n-1), gather/scatter n-1."""
    if kind == "all_reduce":
        return 2 * (ranks - 1), (0 if nodes <= 1 else 2 * (nodes - 1))
    return ranks - 1, (0 if nodes <= 1 else nodes - 1)


def scale_up_share(ppn: int, nodes: int) -> float:
    """The fraction of a rank's ring traffic that crosses its scale-up link. In one node it is
    all of it. Across nodes each channel's ring runs through a node as a chain from the GPU
    whose NIC it enters by to the GPU whose NIC it leaves by: ppn - 1 of the node's ppn ranks
    send to their successor over NVLink / xGMI and one over its NIC, and the channels rotate
    which GPU that is (NCCL's ring graph: NET n -> GPU a -> ... -> GPU x -> NET m,
    src/graph/search.cc), so each rank sends (ppn-1)/ppn of its traffic over the scale-up link."""
    if nodes <= 1:
        return 1.0
    return (ppn - 1) / ppn if ppn > 1 else 0.0


def ring_alg_bytes_per_s(lib: Library, kind: str, group: Group, p: int) -> float:
    """The ring's algorithm bandwidth: every rank passes 2(n-1)/n x V (all-reduce; (n-1)/n for
    gather and scatter). Of that, scale_up_share goes over its scale-up link, whose bus rate in
    a node is `intra_bus_bytes_per_s`, so the link allows intra / share; the node's NICs carry
    the crossings at `inter_bus_bytes_per_s`. The bus rate is the slower of the two."""
    n, nodes = group.ranks, group.nodes
    steps, _ = ring_steps(kind, n, 1)
    share = scale_up_share(group.ppn, nodes)
    bus = group.intra_bus_bytes_per_s / share if share > 0 else math.inf
    if nodes > 1 and group.inter_bus_bytes_per_s is not None:
        bus = min(bus, group.inter_bus_bytes_per_s)
    return protocol_bus(lib, group, bus, p) * n / steps


def ring_bus_bytes_per_s(lib: Library, kind: str, group: Group, p: int) -> float:
    """The ring's bus bandwidth (nccl-tests' busbw): its algorithm bandwidth x steps / n."""
    steps, _ = ring_steps(kind, group.ranks, 1)
    return ring_alg_bytes_per_s(lib, kind, group, p) * steps / group.ranks


def nvls_channels(lib: Library, group: Group) -> int:
    """The channels NCCL gives NVLS and NVLS tree across nodes (src/transport/nvls.cc,
    `ncclNvlsTuning` and `ncclNvlsTreeSm100Tuning`): 16 on Hopper; 32 on Blackwell, lowered to
    24 on more than two nodes with NICs of 48 GB/s or more, unless the NICs reach 96 GB/s and
    a node holds more than 8 ranks."""
    table = lib.factors.get("nvls_channels", {})
    count = int(table.get(group.generation, lib.factors["channels"]))
    nic = group.nic_bytes_per_s or 0.0
    if group.generation == "blackwell" and group.nodes > 2 and nic >= 48e9:
        count = 32 if nic >= 96e9 and group.ppn > 8 else 24
    return count
