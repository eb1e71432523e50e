"""All-to-all as NCCL and RCCL run it: grouped point-to-point sends, outside the tuner.

`ncclAllToAll` (and nccl-tests' alltoall, PyTorch's all_to_all_single) is a group of n-1
`ncclSend` / `ncclRecv` pairs, one per peer; NCCL schedules them as p2p work (NVIDIA/nccl
src/enqueue.cc, `scheduleP2pTasksToPlan` and `addP2pToPlan`) and its tuner never prices them.
Each rank's buffer of V/n bytes splits into n messages of m = V/n^2 bytes.

    t(V) = latency + max(t_network, t_scale_up)

- **protocol**: a message of at most NCCL_P2P_LL_THRESHOLD bytes (16 KiB) per channel goes
  by LL (8-byte lines with 4 bytes of data: half the rate), larger ones by Simple. Messages
  under 64 KiB travel on one channel, so the rule is m <= 16 KiB.
- **latency** = the kernel's base latency + one scale-up step (NVLink or PCIe) per round of
  local peers + for remote peers one network step per round and the network proxy's overhead
  for each remote peer: one proxy thread per GPU posts every send and receive in turn
  (src/proxy.cc), NCCL's `getNetOverhead` (1 us on Intel and other hosts, 2 us on AMD; tripled
  for Simple, as the tuner does for a network step). A round is as many peers as run at once:
  p2p channels / channels per peer x 8 (NCCL_MAX_DEV_WORK_P2P_PER_BATCH).
- **bandwidth**: the (n - ppn) x m bytes a rank sends to other nodes cross its share of the
  node's NICs (inter_bus / ppn, the fabric's efficiency included); the (ppn - 1) x m bytes to
  its node's peers cross its scale-up link at the in-node bus rate. The two run at once.
- **ramp** (Simple): a rank's traffic moves through its p2p channels one chunk each at a time
  (NCCL_P2P_NET_CHUNKSIZE 128 KiB across nodes, NCCL_P2P_NVL_CHUNKSIZE 512 KiB inside an NVLink
  node), so each link reaches half its rate when the rank has channels x chunk bytes for it:
  t = (bytes + channels x chunk) / rate, the same form as the collectives' network ramp.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from shardline.basics.values import Scalar
from shardline.collectives.library import Group, Library, Pair

__all__ = ["P2pPair", "all_to_all_pairs", "p2p_channels", "p2p_rounds"]

_US = 1e-6


@dataclass(frozen=True)
class P2pPair(Pair):
    """The p2p all-to-all under one protocol. `time_s` takes V (the whole array, nccl-tests'
    size x ranks); the protocol runs where NCCL picks it (`selected`)."""

    ranks: int = 1
    ppn: int = 1
    net_bytes_per_s: float = math.inf  # one rank's share of its node's NICs
    link_bytes_per_s: float = math.inf  # one rank's scale-up rate to its node's peers
    net_ramp_bytes: float = 0.0  # channels x network chunk (Simple)
    link_ramp_bytes: float = 0.0  # channels x scale-up chunk (Simple)
    ll_threshold_bytes: float = 16384.0

    def parts_s(self, nbytes: Scalar) -> tuple[Scalar, Scalar]:
        """(network seconds, scale-up seconds) of the bandwidth term."""
        v = np.asarray(nbytes, dtype=np.float64)
        n = self.ranks
        remote = v / n * (n - self.ppn) / n
        local = v / n * (self.ppn - 1) / n
        t_net = np.where(remote > 0, (remote + self.net_ramp_bytes) / self.net_bytes_per_s, 0.0)
        t_link = np.where(local > 0, (local + self.link_ramp_bytes) / self.link_bytes_per_s, 0.0)
        return t_net, t_link

    def time_s(self, nbytes: Scalar) -> Scalar:
        t_net, t_link = self.parts_s(nbytes)
        t = self.latency_s + np.maximum(t_net, t_link)
        return t if isinstance(nbytes, np.ndarray) else float(t)

    def selected(self, nbytes: Scalar) -> object:
        """Where NCCL runs this protocol: LL for messages of at most the LL threshold."""
        message = np.asarray(nbytes, dtype=np.float64) / self.ranks**2
        small = message <= self.ll_threshold_bytes
        return small if self.protocol == "LL" else ~small


def p2p_channels(lib: Library, group: Group) -> int:
    """The channels NCCL gives p2p work: a power of two at or above its collective channels
    (src/graph/paths.cc, `ncclTopoComputeP2pChannels`)."""
    table = lib.p2p
    return int(table["channels_one_node"] if group.nodes <= 1 else table["channels_nodes"])


def _channels_per_peer(lib: Library, group: Group) -> int:
    """Channels one message uses at least: across nodes NCCL's per-network-peer count; inside a
    node the largest power of two with channels x ranks <= p2p channels (`nChannelsMin`)."""
    if group.nodes > 1:
        return int(lib.p2p["channels_per_net_peer"])
    channels = p2p_channels(lib, group)
    per_peer = channels
    while per_peer > 1 and per_peer * group.ranks > channels:
        per_peer //= 2
    return per_peer


def p2p_rounds(lib: Library, group: Group, peers: int) -> int:
    """How many rounds `peers` messages take: p2p channels / channels per peer x 8 run at once."""
    if peers <= 0:
        return 0
    at_once = p2p_channels(lib, group) // _channels_per_peer(lib, group)
    at_once *= int(lib.p2p["ops_per_channel"])
    return math.ceil(peers / max(at_once, 1))


def _net_overhead_s(lib: Library, group: Group, protocol: str) -> float:
    """The proxy's cost of one network message (NCCL getNetOverhead, x3 for Simple)."""
    table = lib.p2p["net_overhead_us"]
    per = table["amd"] if group.host_cpu == "amd" else table["other"]
    return float(per) * _US * (3 if protocol == "Simple" else 1)


def _latency_s(lib: Library, group: Group, p: int, protocol: str) -> float:
    remote = group.ranks - group.ppn
    local = group.ppn - 1
    latency = lib.base_latency_s["ring"][p]
    latency += p2p_rounds(lib, group, local) * lib.hw_latency_s[group.intra_link]["ring"][p]
    if remote > 0:
        step = max(lib.hw_latency_s["net"]["ring"][p], group.net_latency_s)
        latency += p2p_rounds(lib, group, remote) * step
        latency += remote * _net_overhead_s(lib, group, protocol)
    return latency


def _chunk_bytes(lib: Library, group: Group) -> tuple[float, float]:
    """(network chunk, scale-up chunk): NCCL_P2P_NET_CHUNKSIZE on a multi-node communicator,
    NCCL_P2P_NVL_CHUNKSIZE on an all-NVLink node, NCCL_P2P_PCI_CHUNKSIZE otherwise."""
    table = lib.p2p
    if group.nodes > 1:
        return float(table["net_chunk_bytes"]), float(table["net_chunk_bytes"])
    key = "nvl_chunk_bytes" if group.intra_link == "nvlink" else "pci_chunk_bytes"
    return float(table["net_chunk_bytes"]), float(table[key])


def all_to_all_pairs(lib: Library, group: Group, algorithm: str) -> list[Pair]:
    """The all-to-all's two p2p protocols (LL for small messages, Simple for the rest), named
    `algorithm` (the vocabulary's record that prices them)."""
    n, ppn = group.ranks, group.ppn
    net = math.inf
    if group.nodes > 1 and group.inter_bus_bytes_per_s is not None:
        net = group.inter_bus_bytes_per_s / ppn
    link = group.intra_bus_bytes_per_s
    channels = p2p_channels(lib, group)
    net_chunk, link_chunk = _chunk_bytes(lib, group)
    found: list[Pair] = []
    for p, protocol in ((0, "LL"), (2, "Simple")):
        scale = float(lib.factors["ring_ll"]) if protocol == "LL" else 1.0
        ramp = protocol == "Simple"
        # nccl-tests' busbw at large V: algbw x (n-1)/n, limited by the slower link
        bus = min(
            net * scale * (n - 1) / (n - ppn) if n > ppn else math.inf,
            link * scale * (n - 1) / (ppn - 1) if ppn > 1 else math.inf,
        )
        found.append(
            P2pPair(
                algorithm,
                protocol,
                _latency_s(lib, group, p, protocol),
                bus,
                bus * n / (n - 1),
                ranks=n,
                ppn=ppn,
                net_bytes_per_s=net * scale,
                link_bytes_per_s=link * scale,
                net_ramp_bytes=channels * net_chunk if ramp else 0.0,
                link_ramp_bytes=channels * link_chunk if ramp else 0.0,
                ll_threshold_bytes=float(lib.p2p["ll_threshold_bytes"]),
            )
        )
    return found
