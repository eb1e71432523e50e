"""The table of collective algorithms: one frozen record per (kind, algorithm).

Each record says, for a stage of n devices with one-way bandwidth W (per link for rings and
lines, per-device egress for a switch) and per-hop latency alpha, on an array of V bytes:

- `coefficient(n)`: t_bandwidth = coefficient * V / W;
- `hops(n)`: t_latency = hops * alpha;
- `sent(n)`: the bytes each device sends, as a fraction of V;
- its formula text (bandwidth part and latency part) and the source of the formula.

The topology of a stage (ring, line, unidirectional-ring, switch) says which records can run
there (`algorithms_for`); `choose` takes the one the user names, else the topology's default.
An all-reduce without a record of its own is reduce-scatter + all-gather (`compose_all_reduce`,
the one place where that rule is written): coefficient, hops and bytes add, and the formula of
two equal halves reads `2·bandwidth + 2·latency`.

The automatic choice is the topology's algorithm of today (ring on a wrapped ring, line,
unidirectional ring, direct through a switch, in-switch reduction where the switch reduces):
for every n and V it is also the cheapest at line rate among the records a stage allows
(in-switch V/W <= direct 2(n-1)/n·V/W < tree 2·V/W, and its latency is never larger), so the
choice does not depend on the size. A size-dependent choice in the manner of NCCL's tuner
(tree for small messages on many nodes) needs the per-algorithm efficiencies of issue 11.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from shardline.errors import InputError

__all__ = [
    "ALGORITHMS",
    "Algorithm",
    "TABLE",
    "algorithms_for",
    "canonical_algorithm",
    "choose",
    "compose_all_reduce",
]

_BOOK = "How to Scale Your Model (Austin et al. 2025), sharding chapter"
_BOOK_GPU = "How to Scale Your Model (Austin et al. 2025), GPU chapter"


@dataclass(frozen=True)
class Algorithm:
    """One way to run one collective kind on one stage (see the module docstring)."""

    kind: str  # all_gather | reduce_scatter | all_reduce | all_to_all | send
    name: str  # ring | unidirectional-ring | line | switch | in-switch | tree | p2p
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
    halves: tuple[Algorithm, Algorithm] | None = None  # (reduce-scatter, all-gather) composed

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


def _two(n: int) -> float:
    return 2.0


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


def _gather_records(kind: str) -> list[Algorithm]:
    return [
        Algorithm(
            kind, "ring", ("ring",), _ring_ag, _half_n, _one_way,
            "(n-1)/n·V/(2W)", "α·⌊n/2⌋", _GATHER_SRC,
        ),
        Algorithm(
            kind, "line", ("line",), _one_way, _n_minus_1, _one_way,
            "(n-1)/n·V/W", "α·(n-1)", _GATHER_SRC,
        ),
        Algorithm(
            kind, "unidirectional-ring", ("unidirectional-ring",), _one_way, _n_minus_1,
            _one_way, "(n-1)/n·V/W", "α·(n-1)", _GATHER_SRC,
        ),
        Algorithm(
            kind, "switch", ("switch",), _one_way, _one, _one_way,
            "(n-1)/n·V/W", "α", _GATHER_SRC,
        ),
    ]  # fmt: skip


_OWN_ALL_REDUCE = [
    Algorithm(
        "all_reduce", "in-switch", ("switch",), _one, _two, _one,
        "V/W", "2·α",
        _BOOK_GPU + " (NVLink SHARP / NVLS: each GPU egresses and ingresses exactly V bytes; "
        "the switch reduces)",
        in_switch=True, note="(in-switch reduction)",
    ),
    Algorithm(
        "all_reduce", "tree", ("switch",), _two, _tree_hops, _two,
        "2·V/W", "2·α·⌈log2 n⌉", _TREE_SRC, default=False,
    ),
]  # fmt: skip

_OTHERS = [
    Algorithm(
        "all_to_all", "ring", ("ring",), _ring_a2a, _half_n, _switch_a2a,
        "⌊n²/8⌋·V/(n²W)", "α·⌊n/2⌋", _A2A_SRC,
    ),
    Algorithm(
        "all_to_all", "line", ("line",), _line_a2a, _n_minus_1, _switch_a2a,
        "⌊n/2⌋⌈n/2⌉·V/(n²W)", "α·(n-1)", _A2A_SRC,
    ),
    Algorithm(
        "all_to_all", "unidirectional-ring", ("unidirectional-ring",), _ring_ag, _n_minus_1,
        _switch_a2a, "(n-1)/(2n)·V/W", "α·(n-1)", _A2A_SRC,
    ),
    Algorithm(
        "all_to_all", "switch", ("switch",), _switch_a2a, _one, _switch_a2a,
        "(n-1)/n²·V/W", "α", _A2A_SRC,
    ),
    Algorithm(
        "send", "p2p", ("ring", "line", "unidirectional-ring", "switch"), _one, _one, _one,
        "V/W", "α", "point-to-point to a neighbour: V over one link, one hop",
    ),
]  # fmt: skip


def compose_all_reduce(rs: Algorithm, ag: Algorithm) -> Algorithm:
    """All-reduce = reduce-scatter then all-gather on the same stage: the terms add.

    The one place where this rule is written ("How to Scale Your Model", sharding chapter:
    an all-reduce is a reduce-scatter followed by an all-gather, twice the one-way cost).
    """
    if rs.topologies != ag.topologies or rs.name != ag.name:
        raise ValueError("an all-reduce composes two halves of one algorithm on one topology")
    same = rs.bandwidth_text == ag.bandwidth_text and rs.latency_text == ag.latency_text
    bw = f"2·{rs.bandwidth_text}" if same else f"{rs.bandwidth_text} + {ag.bandwidth_text}"
    lat = f"2·{rs.latency_text}" if same else f"{rs.latency_text} + {ag.latency_text}"
    return Algorithm(
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


def _build() -> dict[tuple[str, str], Algorithm]:
    rs = _gather_records("reduce_scatter")
    ag = _gather_records("all_gather")
    composed = [compose_all_reduce(r, a) for r, a in zip(rs, ag, strict=True)]
    records = rs + ag + _OWN_ALL_REDUCE + composed + _OTHERS
    return {(r.kind, r.name): r for r in records}


TABLE: dict[tuple[str, str], Algorithm] = _build()
ALGORITHMS: tuple[str, ...] = tuple(dict.fromkeys(name for _, name in TABLE))

_ALIASES = {
    "bidirectional-ring": "ring",
    "uni-ring": "unidirectional-ring",
    "unidirectional": "unidirectional-ring",
    "direct": "switch",
    "nvls": "in-switch",
    "sharp": "in-switch",
    "double-binary-tree": "tree",
    "send": "p2p",
}


def canonical_algorithm(name: str) -> str:
    """'NVLS' -> 'in-switch', 'double_binary_tree' -> 'tree'; an unknown name is an error."""
    key = str(name).strip().lower().replace("_", "-")
    key = _ALIASES.get(key, key)
    if key not in ALGORITHMS:
        raise InputError(f"unknown algorithm {name!r}; valid: {', '.join(ALGORITHMS)}")
    return key


def algorithms_for(kind: str, topology: str, in_network_reduction: bool) -> list[Algorithm]:
    """The records that can run `kind` on a stage of `topology`, defaults first."""
    found = [
        r
        for r in TABLE.values()
        if r.kind == kind and topology in r.topologies and (in_network_reduction or not r.in_switch)
    ]
    return sorted(found, key=lambda r: (not r.default, not r.in_switch))


def choose(
    kind: str, topology: str, in_network_reduction: bool, name: str | None = None
) -> Algorithm:
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
