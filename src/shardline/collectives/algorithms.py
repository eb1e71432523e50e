"""The collective vocabulary: one record per algorithm, the only place an algorithm is named.

A record (`CollectiveAlgorithm`) carries everything shardline knows about one algorithm:

- its name and the other words `--algorithm` accepts for it (NCCL's spelling among them);
- its line-rate bound, one `LineRate` per collective kind it runs: for a stage of n devices with
  one-way bandwidth W (per link for rings and lines, per-device egress for a switch) and
  per-hop latency alpha, on an array of V bytes, `coefficient(n)` (t_bandwidth =
  coefficient * V / W), `hops(n)` (t_latency = hops * alpha), `sent(n)` (the bytes each device
  sends, as a fraction of V), the formula text and the source; none where only a library runs it;
- its library pricing (`LibraryPricing`): the kinds NCCL and RCCL run it for and its
  (algorithm, protocol) pairs on a communicator, t(V) = latency + V / algbw with the library's
  constants (`libraries/*.toml`, read by `library.py`); None where no library runs it (the
  library then makes its own choice for the prediction).

The same name is the one the command line takes, the text and JSON print and the errors list.

The topology of a stage (ring, line, unidirectional-ring, switch) says which line-rate records
can run there (`algorithms_for`); `choose` takes the one the user names, else the topology's
default. An all-reduce without a line-rate record of its own is reduce-scatter + all-gather
(`compose_all_reduce`, the one place where that rule is written): coefficient, hops and bytes
add, and the formula of two equal halves reads `2·bandwidth + 2·latency`.

The automatic choice is the topology's algorithm of today (ring on a wrapped ring, line,
unidirectional ring, direct through a switch, in-switch reduction where the switch reduces):
for every n and V it is also the cheapest at line rate among the records a stage allows
(in-switch V/W <= direct 2(n-1)/n·V/W < tree 2·V/W, and its latency is never larger), so the
choice does not depend on the size. The size-dependent choice is the library's (`priced.py`):
it weighs every pair of every record it runs and takes the fastest.

Adding an algorithm is one record in `VOCABULARY` below and its test in
tests/test_collective_algorithms.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from shardline.collectives.library import (
    PROTOCOLS,
    Group,
    Library,
    Pair,
    inter_latency,
    log2i,
    protocol_bus,
    protocols_for,
    ramp,
)
from shardline.collectives.p2p import all_to_all_pairs
from shardline.errors import InputError

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "CollectiveAlgorithm",
    "LibraryPricing",
    "LineRate",
    "TABLE",
    "VOCABULARY",
    "algorithm_named",
    "algorithms_for",
    "canonical_algorithm",
    "choose",
    "compose_all_reduce",
    "library_pairs",
    "nvls_channels",
    "scale_up_share",
    "tree_net_share",
]

_BOOK = "How to Scale Your Model (Austin et al. 2025), sharding chapter"
_BOOK_GPU = "How to Scale Your Model (Austin et al. 2025), GPU chapter"
_TUNING = "NVIDIA/nccl src/graph/tuning.cc (commit 5067397), ncclTopoTuneModel"
_US = 1e-6  # the library file's microseconds


@dataclass(frozen=True)
class LineRate:
    """One algorithm's line-rate bound for one collective kind (see the module docstring)."""

    kind: str  # all_gather | reduce_scatter | all_reduce | all_to_all | send
    name: str  # the algorithm's name (its record's)
    topologies: tuple[str, ...]  # the stage topologies it runs on
    coefficient: Callable[[int], float]  # t_bandwidth = coefficient(n) * V / W
    hops: Callable[[int], float]  # t_latency = hops(n) * alpha
    sent: Callable[[int], float]  # bytes each device sends / V
    bandwidth_text: str  # the bandwidth term, symbolic in n, V, W
    latency_text: str  # the latency term, symbolic in n, alpha
    source: str
    default: bool = True  # the automatic choice on its topologies
    in_switch: bool = False  # reduced inside the switch (needs the chip's in-network reduction)
    note: str = ""  # appended to the formula, e.g. "(in-switch reduction)"
    halves: tuple[LineRate, LineRate] | None = None  # (reduce-scatter, all-gather) composed
    # an all-reduce over several stages runs as one stage of the whole group at the slowest
    # stage (a tree spans every rank); the words say so. "": stage by stage
    over_stages: str = ""

    @property
    def formula(self) -> str:
        text = f"{self.bandwidth_text} + {self.latency_text}"
        return f"{text}  {self.note}" if self.note else text

    @property
    def stage_formula(self) -> str:
        """The formula of one stage inside a stage-by-stage composition: a composed all-reduce
        reads `2·(one half)` there, its two halves priced on that stage's array."""
        if self.halves and self.halves[0].formula == self.halves[1].formula:
            return f"2·({self.halves[0].formula})"
        if self.halves:
            return f"({self.halves[0].formula}) + ({self.halves[1].formula})"
        return self.formula


Algorithm = LineRate  # the name calibrate/collectives.py imports


@dataclass(frozen=True)
class LibraryPricing:
    """How NCCL and RCCL price one algorithm: its (algorithm, protocol) pairs on a communicator.

    `pairs(lib, kind, group)` gives every pair the library may run for `kind` on `group` (none
    where it cannot). `own_bound` says which line-rate bound goes beside the library's time
    when the user names the algorithm: its own record (it moves other bytes than the stage's
    default: tree 2V, in-switch V), or else the stage's default (the library's ring on an
    NVSwitch moves what the switch's direct all-gather moves)."""

    kinds: tuple[str, ...]
    pairs: Callable[[Library, str, Group], list[Pair]]
    own_bound: bool
    source: str


@dataclass(frozen=True)
class CollectiveAlgorithm:
    """One algorithm: its name, its line-rate bound per kind and how a library prices it."""

    name: str
    summary: str
    aliases: tuple[str, ...] = ()
    line_rate: tuple[LineRate, ...] = ()  # none: only a library runs it
    library: LibraryPricing | None = None  # None: no library runs it

    @property
    def words(self) -> tuple[str, ...]:
        """Every word `--algorithm` takes for it: its name, then its aliases."""
        return (self.name, *self.aliases)


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


def compose_all_reduce(rs: LineRate, ag: LineRate) -> LineRate:
    """All-reduce = reduce-scatter then all-gather on the same stage: the terms add.

    The one place where this rule is written ("How to Scale Your Model", sharding chapter:
    an all-reduce is a reduce-scatter followed by an all-gather, twice the one-way cost).
    """
    if rs.topologies != ag.topologies or rs.name != ag.name:
        raise ValueError("an all-reduce composes two halves of one algorithm on one topology")
    same = rs.bandwidth_text == ag.bandwidth_text and rs.latency_text == ag.latency_text
    bw = f"2·{rs.bandwidth_text}" if same else f"{rs.bandwidth_text} + {ag.bandwidth_text}"
    lat = f"2·{rs.latency_text}" if same else f"{rs.latency_text} + {ag.latency_text}"
    return LineRate(
        "all_reduce",
        rs.name,
        rs.topologies,
        lambda n: rs.coefficient(n) + ag.coefficient(n),
        lambda n: rs.hops(n) + ag.hops(n),
        lambda n: rs.sent(n) + ag.sent(n),
        bw,
        lat,
        "reduce-scatter + all-gather; " + rs.source,
        default=rs.default,
        halves=(rs, ag),
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


def _steps(kind: str, ranks: int, nodes: int) -> tuple[int, int]:
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


def _ring_alg(lib: Library, kind: str, group: Group, p: int) -> float:
    """The ring's algorithm bandwidth: every rank passes 2(n-1)/n x V (all-reduce; (n-1)/n for
    gather and scatter). Of that, scale_up_share goes over its scale-up link, whose bus rate in
    a node is `intra_bus_bytes_per_s`, so the link allows intra / share; the node's NICs carry
    the crossings at `inter_bus_bytes_per_s`. The bus rate is the slower of the two."""
    n, nodes = group.ranks, group.nodes
    steps, _ = _steps(kind, n, 1)
    share = scale_up_share(group.ppn, nodes)
    bus = group.intra_bus_bytes_per_s / share if share > 0 else math.inf
    if nodes > 1 and group.inter_bus_bytes_per_s is not None:
        bus = min(bus, group.inter_bus_bytes_per_s)
    return protocol_bus(lib, group, bus, p) * n / steps


def _ring_bus(lib: Library, kind: str, group: Group, p: int) -> float:
    """The ring's bus bandwidth (nccl-tests' busbw): its algorithm bandwidth x steps / n."""
    steps, _ = _steps(kind, group.ranks, 1)
    return _ring_alg(lib, kind, group, p) * steps / group.ranks


def _ring_pair(lib: Library, kind: str, group: Group, p: int) -> Pair:
    n, nodes = group.ranks, group.nodes
    steps, inter_steps = _steps(kind, n, nodes)
    intra = lib.hw_latency_s[group.intra_link]["ring"][p]
    if nodes > 1:
        overhead = lib.factors["net_overhead_us"] * _US * (3 if PROTOCOLS[p] == "Simple" else 1)
        intra = max(intra, overhead)
    latency = lib.base_latency_s["ring"][p] + (steps - inter_steps) * intra
    latency += inter_steps * _network_step(lib, group, "ring", p)
    alg = _ring_alg(lib, kind, group, p)
    plateau = None
    if nodes > 1 and kind == "all_reduce" and PROTOCOLS[p] == "Simple":
        plateau = latency * lib.factors["ring_plateau_latency"]
    # NCCL raises the latency once each channel's chunk reaches 64 B (V >= 64 x channels x n)
    start = 64.0 * lib.factors["channels"] * n
    return Pair("ring", PROTOCOLS[p], latency, alg * steps / n, alg, (), plateau, start)


def _ring_pairs(lib: Library, kind: str, group: Group) -> list[Pair]:
    return [ramp(lib, _ring_pair(lib, kind, group, p), group) for p in protocols_for(group)]


# --- library pricing: trees, in-switch and in-network reduction, PAT, sends ------------------


def _tree_pair(lib: Library, group: Group, p: int) -> Pair:
    f = lib.factors
    bus = _ring_bus(lib, "all_reduce", group, 2) * f["tree"]
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
    bus = _ring_bus(lib, kind, group, 2) * lib.factors["pat"]
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
_BY_WORD: dict[str, CollectiveAlgorithm] = {
    word: record for record in VOCABULARY for word in record.words
}


def _key(word: str) -> str:
    return str(word).strip().lower().replace("_", "-")


def algorithm_named(name: str) -> CollectiveAlgorithm:
    """The record `name` names ('NVLS' -> in-switch, 'nvls_tree' -> nvls-tree); an unknown name
    is an error that lists every valid one."""
    record = _BY_WORD.get(_key(name))
    if record is None:
        raise InputError(f"unknown algorithm {name!r}; valid: {', '.join(ALGORITHMS)}")
    return record


def canonical_algorithm(name: str) -> str:
    """'NVLS' -> 'in-switch', 'double_binary_tree' -> 'tree'; an unknown name is an error."""
    return algorithm_named(name).name


def algorithms_for(kind: str, topology: str, in_network_reduction: bool) -> list[LineRate]:
    """The line-rate records that can run `kind` on a stage of `topology`, defaults first."""
    found = [
        r
        for r in TABLE.values()
        if r.kind == kind and topology in r.topologies and (in_network_reduction or not r.in_switch)
    ]
    return sorted(found, key=lambda r: (not r.default, not r.in_switch))


def choose(
    kind: str, topology: str, in_network_reduction: bool, name: str | None = None
) -> LineRate:
    """The named record (an error when it cannot run here), else the topology's default."""
    options = algorithms_for(kind, topology, in_network_reduction)
    if name is None:
        return options[0]
    wanted = canonical_algorithm(name)
    for record in options:
        if record.name == wanted:
            return record
    valid = ", ".join(r.name for r in options)
    raise InputError(
        f"algorithm {wanted!r} cannot run {kind.replace('_', '-')} on a {topology} stage; "
        f"valid there: {valid}"
    )


def library_pairs(
    lib: Library, kind: str, group: Group, records: Sequence[CollectiveAlgorithm] = VOCABULARY
) -> list[Pair]:
    """Every (algorithm, protocol) the library may run for `kind` on `group`, record by record
    in the vocabulary's order."""
    return [
        pair
        for record in records
        if record.library is not None and kind in record.library.kinds
        for pair in record.library.pairs(lib, kind, group)
    ]
