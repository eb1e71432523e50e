"""The collective vocabulary: one record per algorithm, the only place an algorithm is named.

Each `CollectiveAlgorithm` (records.py says what one holds) gives an algorithm's name and the
other words `--algorithm` takes for it; its line-rate bound, one `LineRate` per kind it runs
(t = coefficient(n)·V/W + hops(n)·alpha, the bytes each device sends, the formula and its
source; none where only a library runs it); and how NCCL and RCCL price it (`LibraryPricing`:
the kinds and the (algorithm, protocol) pairs it builds from the library's constants, read by
`library.py`), or None where no library runs it and the library makes its own choice. That name
is the one the command line takes and the text, JSON and errors print; `vocabulary.py` looks
words, stages and pairs up in `VOCABULARY`.

A stage algorithm (ring, line, unidirectional ring, switch) gives its all-gather and
reduce-scatter, and its all-reduce is the two composed (`records.compose_all_reduce`). The
automatic line-rate choice is the topology's algorithm of today (ring on a wrapped ring, line,
unidirectional ring, direct through a switch, in-switch reduction where the switch reduces):
for every n and V it is also the cheapest at line rate among the records a stage allows
(in-switch V/W <= direct 2(n-1)/n·V/W < tree 2·V/W, and its latency is never larger). The
size-dependent choice is the library's (`priced.py`): it weighs every pair of every record it
runs, in this order, and takes the fastest.

Adding an algorithm is one record in `VOCABULARY` below (its helpers beside it) and its test in
tests/test_collective_algorithms.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from shardline.collectives.library import (
    PROTOCOLS,
    Group,
    Library,
    Pair,
    collective_channels,
    inter_latency,
    log2i,
    nvls_channels,
    protocols_for,
    ramp,
    ring_alg_bytes_per_s,
    ring_bus_bytes_per_s,
    ring_steps,
    version_at_least,
)
from shardline.collectives.p2p import all_to_all_pairs
from shardline.collectives.records import (
    CollectiveAlgorithm,
    LibraryPricing,
    LineRate,
    compose_all_reduce,
)

__all__ = ["ALGORITHMS", "Algorithm", "TABLE", "VOCABULARY", "tree_net_share"]

_BOOK = "How to Scale Your Model (Austin et al. 2025), sharding chapter"
_BOOK_GPU = "How to Scale Your Model (Austin et al. 2025), GPU chapter"
_TUNING = "NVIDIA/nccl src/graph/tuning.cc (commit 5067397), ncclTopoTuneModel"
_US = 1e-6  # the library file's microseconds


# --- line-rate coefficients, hops and bytes sent ---------------------------------------------


def _ring_ag(n: int) -> float:
    return (n - 1) / (2 * n)


def _one_way(n: int) -> float:
    return (n - 1) / n


def _half_n(n: int) -> float:
    return float(n // 2)


def _n_minus_1(n: int) -> float:
    return float(n - 1)


def _one(n: int) -> float:
    return 1.0


def _two(n: int) -> float:
    return 2.0


def _ring_a2a(n: int) -> float:
    # chunks to the antipode (even n) are split between the two directions, so a directed link
    # carries 1+2+..+(h-1) + h/2 = n²/8 chunks (even n), h(h+1)/2 = (n²-1)/8 (odd n)
    return (n * n - n % 2) / 8 / n**2


def _line_a2a(n: int) -> float:
    return (n // 2) * ((n + 1) // 2) / n**2


def _switch_a2a(n: int) -> float:
    return (n - 1) / n**2


def _tree_hops(n: int) -> float:
    return 2.0 * math.ceil(math.log2(n))


_GATHER_SRC = (
    _BOOK + " (all-gather on a ring, line and unidirectional ring); " + _BOOK_GPU + " (switch)"
)
_A2A_SRC = (
    "per directed link, V/n per device cut into n chunks of V/n², chunk d travels d hops; "
    + _BOOK
    + " (ring V/(8W) = a quarter of the all-gather; unidirectional ring half, Q10); "
    + _BOOK_GPU
    + " (switch: each device sends n-1 chunks)"
)
_TREE_SRC = (
    "NCCL double binary tree (Sanders, Speck, Träff 2009, 'Two-tree algorithms for full "
    "bandwidth broadcast, reduction and scan'; Jeaugey 2019, 'Massively Scale Your Deep "
    "Learning Training with NCCL 2.4'): each half of V is reduced up one tree and broadcast "
    "down it; a rank is inner in one tree and a leaf in the other, so it sends V/2 + V + V/2 = "
    "2V (NCCL src/graph/tuning.cc: tree algbw = 0.5 x busbw). Depth ⌈log2 n⌉ (NCCL "
    "src/graph/trees.cc ncclGetBtree), up and down: 2·⌈log2 n⌉ hops (tuning.cc: "
    "2·log2i(nNodes)·interLat)"
)


def _stage_algorithm(
    name: str,
    topology: str,
    gather: tuple[Callable[[int], float], Callable[[int], float], str, str],
    all_to_all: tuple[Callable[[int], float], Callable[[int], float], str, str],
) -> tuple[LineRate, ...]:
    """The line-rate records of an algorithm that runs every kind on one stage topology: its
    all-gather and reduce-scatter (the same figures, mirrored), the all-reduce composed of the
    two, and its all-to-all; each given as (coefficient, hops, bandwidth text, latency text)."""
    coef, hops, bw, lat = gather
    rs, ag = (
        LineRate(kind, name, (topology,), coef, hops, _one_way, bw, lat, _GATHER_SRC)
        for kind in ("reduce_scatter", "all_gather")
    )
    coef, hops, bw, lat = all_to_all
    a2a = LineRate("all_to_all", name, (topology,), coef, hops, _switch_a2a, bw, lat, _A2A_SRC)
    return rs, ag, compose_all_reduce(rs, ag), a2a


# --- library pricing: the ring ---------------------------------------------------------------


def _network_step(lib: Library, group: Group, key: str, p: int) -> float:
    """One network step of the algorithm whose constants are under `key` in the library file;
    NCCL's tuner takes the tree's when each node has one rank (tuning.cc)."""
    return inter_latency(lib, group, "tree" if group.ppn == 1 else key, p)


def _ring_pair(lib: Library, kind: str, group: Group, p: int) -> Pair:
    n, nodes = group.ranks, group.nodes
    steps, inter_steps = ring_steps(kind, n, nodes)
    intra = lib.hw_latency_s[group.intra_link]["ring"][p]
    if nodes > 1:
        overhead = lib.factors["net_overhead_us"] * _US * (3 if PROTOCOLS[p] == "Simple" else 1)
        intra = max(intra, overhead)
    latency = lib.base_latency_s["ring"][p] + (steps - inter_steps) * intra
    latency += inter_steps * _network_step(lib, group, "ring", p)
    alg = ring_alg_bytes_per_s(lib, kind, group, p)
    plateau = None
    if nodes > 1 and kind == "all_reduce" and PROTOCOLS[p] == "Simple":
        plateau = latency * lib.factors["ring_plateau_latency"]
    # NCCL raises the latency once each channel's chunk reaches 64 B (V >= 64 x channels x n)
    start = 64.0 * collective_channels(lib, group) * n
    return Pair("ring", PROTOCOLS[p], latency, alg * steps / n, alg, (), plateau, start)


def _ring_pairs(lib: Library, kind: str, group: Group) -> list[Pair]:
    return [ramp(lib, _ring_pair(lib, kind, group, p), group) for p in protocols_for(group)]


# --- library pricing: trees, in-switch and in-network reduction, PAT, sends ------------------


def _tree_bus(lib: Library, group: Group) -> float:
    """The tree all-reduce's Simple bus bandwidth before NCCL's 0.92: the ring's, except on two
    nodes from the release that reads a tree's intra-node bandwidth there and lets its search
    raise it to `tree_two_node_intra_max` x the network's (library file, protocol_factors): the
    node's scale-up bus rate, at most that many times its network's. Capped at channels x
    NCCL's per-channel tree bandwidth (perChMaxTreeBws) where the file gives it."""
    f = lib.factors
    bus = ring_bus_bytes_per_s(lib, "all_reduce", group, 2)
    inter = group.inter_bus_bytes_per_s
    since = f.get("tree_two_node_since")
    if (
        group.nodes == 2
        and group.ppn > 1
        and inter is not None
        and since is not None
        and version_at_least(group.library_version, since)
    ):
        bus = min(group.intra_bus_bytes_per_s, f["tree_two_node_intra_max"] * inter)
    per_channel = f.get("tree_max_per_channel_gb_s", {}).get(group.generation)
    if per_channel is not None:
        column = 0 if group.nodes <= 1 else (1 if group.nodes == 2 else 2)
        channels = collective_channels(lib, group)
        bus = min(bus * f["tree"], channels * per_channel[column] * 1e9) / f["tree"]
    return bus


def _tree_pair(lib: Library, group: Group, p: int) -> Pair:
    f = lib.factors
    bus = _tree_bus(lib, group) * f["tree"]
    if PROTOCOLS[p] == "LL":
        bus = min(bus * f["tree_ll"], lib.ll_max(group))
    elif PROTOCOLS[p] == "LL128":
        bus *= f["tree_ll128_one_node"] if group.nodes == 1 else f["tree_ll128_nodes"]
    intra = lib.hw_latency_s[group.intra_link]["tree"][p]
    inter = _network_step(lib, group, "tree", p)
    latency = lib.base_latency_s["tree"][p]
    latency += 2 * ((group.ppn - 1) * intra + log2i(group.nodes) * inter)
    table = tuple(f["tree_correction"][PROTOCOLS[p]]) if "tree_correction" in f else ()
    return Pair("tree", PROTOCOLS[p], latency, bus, bus * 0.5, table)


def _tree_pairs(lib: Library, kind: str, group: Group) -> list[Pair]:
    return [ramp(lib, _tree_pair(lib, group, p), group) for p in protocols_for(group)]


def _in_switch_pairs(lib: Library, kind: str, group: Group) -> list[Pair]:
    """All-reduce reduced in the NVSwitch (one node): its measured algorithm bandwidth and the
    library's per-step latency for NVLS (25 us on NVLink in NCCL 2.30)."""
    if group.nvls_alg_bytes_per_s is None or group.nodes != 1:
        return []
    latency = lib.base_latency_s["nvls"][2] + lib.hw_latency_s[group.intra_link]["nvls"][2]
    alg = group.nvls_alg_bytes_per_s
    bus = alg * 2 * (group.ranks - 1) / group.ranks
    return [ramp(lib, Pair("in-switch", "Simple", latency, bus, alg), group)]


def tree_net_share(nodes: int) -> float:
    """The fraction of a node's network bandwidth a double binary tree all-reduce reaches as
    algbw. Each of the two trees carries V/2. On two nodes every node is one tree's root with
    one child and the other's leaf: it sends V/2 + V/2 = V a direction, so algbw = network.
    From three nodes on, a node inside one tree has two children: it receives 2 x V/2 and sends
    V/2 up while reducing, then receives V/2 and sends 2 x V/2 down while broadcasting, and as
    the other tree's leaf sends and receives V/2 more: 2V a direction, so algbw = network / 2.
    NCCL's tuner says the same (src/graph/tuning.cc: NVLS tree `interBw x 2` when nNodes <= 2)."""
    return 1.0 if nodes <= 2 else 0.5


def _nvls_tree_pairs(lib: Library, kind: str, group: Group) -> list[Pair]:
    """All-reduce over nodes of NVSwitch nodes (NCCL's NVLS tree): reduce-scatter inside each
    node in the switch, a tree all-reduce of each rank's 1/ppn between the nodes (one tree per
    NIC rail), all-gather in the switch. The node's NICs carry the tree's traffic, so

        algbw = min(in-switch algbw, network bytes/s x tree_net_share(N)),

    network on two nodes and network / 2 from three on. Latency: NVLS's step in the node and a
    tree's 2 log2(N) network steps. It streams over NCCL's NVLS channels (`nvls_channels`)."""
    nvls = group.nvls_alg_bytes_per_s
    if nvls is None or group.nodes <= 1 or group.inter_bus_bytes_per_s is None:
        return []
    n = group.nodes
    alg = min(nvls, group.inter_bus_bytes_per_s * tree_net_share(n))
    inter = _network_step(lib, group, "nvls_tree", 2)
    latency = (
        lib.base_latency_s["nvls_tree"][2] + lib.hw_latency_s[group.intra_link]["nvls_tree"][2]
    )
    latency += 2 * log2i(n) * inter
    bus = alg * 2 * (group.ranks - 1) / group.ranks
    pair = Pair("nvls-tree", "Simple", latency, bus, alg)
    return [ramp(lib, pair, group, nvls_channels(lib, group))]


def _collnet_pairs(lib: Library, kind: str, group: Group) -> list[Pair]:
    """All-reduce with the reduction in the network switches (SHARP, CollNet Direct): each
    node's ranks reduce locally and one in-network reduction joins the nodes."""
    if not group.sharp or group.nodes <= 1 or group.inter_bus_bytes_per_s is None:
        return []
    intra = lib.hw_latency_s[group.intra_link]["collnet_direct"][2]
    inter = _network_step(lib, group, "collnet_direct", 2)
    ppn = group.ppn
    latency = lib.base_latency_s["collnet_direct"][2]
    latency += 2 * (min(1, ppn - 1) * intra + (ppn - 1) * 0.4 * _US) + inter
    bus = min(group.intra_bus_bytes_per_s, group.inter_bus_bytes_per_s)
    return [ramp(lib, Pair("collnet-direct", "Simple", latency, bus, bus * 0.5), group)]


def _pat_pairs(lib: Library, kind: str, group: Group) -> list[Pair]:
    """All-gather / reduce-scatter with one rank per node (NCCL's PAT): log-depth latency."""
    if group.ppn != 1 or group.nodes <= 1:
        return []
    inter = _network_step(lib, group, "pat", 2)
    latency = lib.base_latency_s["pat"][2] + log2i(group.nodes) * inter / 3.5
    latency += group.ranks * 2.8 * _US
    bus = ring_bus_bytes_per_s(lib, kind, group, 2) * lib.factors["pat"]
    return [ramp(lib, Pair("pat", "Simple", latency, bus, bus), group)]


def _p2p_pairs(lib: Library, kind: str, group: Group) -> list[Pair]:
    return all_to_all_pairs(lib, group, "p2p")


# --- the vocabulary --------------------------------------------------------------------------

_GATHERS = ("all_gather", "reduce_scatter", "all_reduce")

VOCABULARY: tuple[CollectiveAlgorithm, ...] = (
    CollectiveAlgorithm(
        "ring",
        "a bidirectional ring (a wrapped torus dimension); the library's ring on any group",
        aliases=("bidirectional-ring", "bi-ring"),
        line_rate=_stage_algorithm(
            "ring",
            "ring",
            (_ring_ag, _half_n, "(n-1)/n·V/(2W)", "α·⌊n/2⌋"),
            (_ring_a2a, _half_n, "⌊n²/8⌋·V/(n²W)", "α·⌊n/2⌋"),
        ),
        library=LibraryPricing(
            _GATHERS,
            _ring_pairs,
            own_bound=False,
            source=_TUNING + " (ring: 2(n-1) steps of an all-reduce, n-1 of a gather)",
        ),
    ),
    CollectiveAlgorithm(
        "line",
        "a line (an unwrapped torus dimension)",
        line_rate=_stage_algorithm(
            "line",
            "line",
            (_one_way, _n_minus_1, "(n-1)/n·V/W", "α·(n-1)"),
            (_line_a2a, _n_minus_1, "⌊n/2⌋⌈n/2⌉·V/(n²W)", "α·(n-1)"),
        ),
    ),
    CollectiveAlgorithm(
        "unidirectional-ring",
        "a ring that sends one way only",
        aliases=("uni-ring", "unidirectional"),
        line_rate=_stage_algorithm(
            "unidirectional-ring",
            "unidirectional-ring",
            (_one_way, _n_minus_1, "(n-1)/n·V/W", "α·(n-1)"),
            (_ring_ag, _n_minus_1, "(n-1)/(2n)·V/W", "α·(n-1)"),
        ),
    ),
    CollectiveAlgorithm(
        "switch",
        "direct through a switch: each device sends to every other at its egress rate",
        aliases=("direct",),
        line_rate=_stage_algorithm(
            "switch",
            "switch",
            (_one_way, _one, "(n-1)/n·V/W", "α"),
            (_switch_a2a, _one, "(n-1)/n²·V/W", "α"),
        ),
    ),
    CollectiveAlgorithm(
        "tree",
        "NCCL's double binary tree all-reduce",
        aliases=("double-binary-tree",),
        line_rate=(
            LineRate(
                "all_reduce",
                "tree",
                ("switch",),
                _two,
                _tree_hops,
                _two,
                "2·V/W",
                "2·α·⌈log2 n⌉",
                _TREE_SRC,
                default=False,
                over_stages="one tree over the slowest stage",
            ),
        ),
        library=LibraryPricing(
            ("all_reduce",),
            _tree_pairs,
            own_bound=True,
            source=_TUNING + " (tree: busbw x 0.92, algbw = busbw / 2, treeCorrectionFactor)",
        ),
    ),
    CollectiveAlgorithm(
        "in-switch",
        "all-reduce reduced inside the scale-up switch (NVLink SHARP, NCCL's NVLS)",
        aliases=("nvls", "nvlink-sharp"),
        line_rate=(
            LineRate(
                "all_reduce",
                "in-switch",
                ("switch",),
                _one,
                _two,
                _one,
                "V/W",
                "2·α",
                _BOOK_GPU + " (NVLink SHARP / NVLS: each GPU egresses and ingresses exactly V "
                "bytes; the switch reduces)",
                in_switch=True,
                note="(in-switch reduction)",
            ),
        ),
        library=LibraryPricing(
            ("all_reduce",),
            _in_switch_pairs,
            own_bound=True,
            source=_TUNING + " (NVLS: one node, the chip's measured in-switch algbw)",
        ),
        switch_reduces=True,
    ),
    CollectiveAlgorithm(
        "nvls-tree",
        "NCCL's NVLS tree: in-switch inside each node, a tree between the nodes",
        aliases=("nvlstree",),
        library=LibraryPricing(
            ("all_reduce",),
            _nvls_tree_pairs,
            own_bound=False,
            source=_TUNING + " (NVLS tree); src/transport/nvls.cc (its channels)",
        ),
        switch_reduces=True,
    ),
    CollectiveAlgorithm(
        "collnet-direct",
        "NCCL's CollNet Direct: the reduction in the network switches (InfiniBand SHARP)",
        aliases=("collnet", "collnetdirect", "sharp"),
        library=LibraryPricing(
            ("all_reduce",),
            _collnet_pairs,
            own_bound=False,
            source=_TUNING + " (CollNet Direct)",
        ),
        switch_reduces=True,
    ),
    CollectiveAlgorithm(
        "pat",
        "NCCL's PAT all-gather and reduce-scatter with one rank per node",
        library=LibraryPricing(
            ("all_gather", "reduce_scatter"),
            _pat_pairs,
            own_bound=False,
            source=_TUNING + " (PAT: one rank per node, busbw x 0.75)",
        ),
    ),
    CollectiveAlgorithm(
        "p2p",
        "point to point: a send to a neighbour; the library's all-to-all as grouped sends",
        aliases=("send",),
        line_rate=(
            LineRate(
                "send",
                "p2p",
                ("ring", "line", "unidirectional-ring", "switch"),
                _one,
                _one,
                _one,
                "V/W",
                "α",
                "point-to-point to a neighbour: V over one link, one hop",
            ),
        ),
        library=LibraryPricing(
            ("all_to_all",),
            _p2p_pairs,
            own_bound=False,
            source="NVIDIA/nccl src/enqueue.cc (p2p scheduling; collectives/p2p.py)",
        ),
    ),
)

TABLE: dict[tuple[str, str], LineRate] = {
    (line.kind, line.name): line for record in VOCABULARY for line in record.line_rate
}
ALGORITHMS: tuple[str, ...] = tuple(record.name for record in VOCABULARY)
Algorithm = LineRate  # the name calibrate/collectives.py imports
