"""The records of the collectives model: kinds, topologies, stages, axis networks, the user's
network options, priced steps and costs, the size-dependent bus efficiency, and what one
algorithm of the vocabulary is (`CollectiveAlgorithm`: its `LineRate` bound per kind and its
`LibraryPricing`; the records themselves are `algorithms.VOCABULARY`).

V is the bytes of the whole array (the gathered result, or one full copy being reduced); each
device holds V/X. W is one-way bytes/s: per link for rings and lines, per-device egress for a
switch. alpha is the per-hop latency. The realistic prediction divides the bandwidth term by
`bus_efficiency`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardline.basics.kinds import COLLECTIVE_KINDS
from shardline.basics.kinds import TOPOLOGIES as AXIS_TOPOLOGIES
from shardline.basics.serialize import jsonable
from shardline.basics.values import JSONDict, Scalar
from shardline.collectives.library import Group, Library, Pair
from shardline.errors import InputError
from shardline.hardware import Chip

# the closed vocabularies live in shardline.basics.kinds (Literal types); these are their value
# tuples
KINDS: tuple[str, ...] = COLLECTIVE_KINDS
TOPOLOGIES: tuple[str, ...] = AXIS_TOPOLOGIES

_KIND_ALIASES = {
    "allgather": "all_gather",
    "gather": "all_gather",
    "reducescatter": "reduce_scatter",
    "allreduce": "all_reduce",
    "alltoall": "all_to_all",
    "p2p": "send",
    "point_to_point": "send",
    "permute": "send",
}
_TOPOLOGY_ALIASES = {
    "bidirectional-ring": "ring",
    "bi-ring": "ring",
    "uni-ring": "unidirectional-ring",
    "unidirectional": "unidirectional-ring",
    "nvswitch": "switch",
    "fat-tree": "switch",
}


def canonical_kind(kind: str) -> str:
    """'all-gather', 'AllGather', 'all_gather' -> 'all_gather'."""
    key = str(kind).strip().lower().replace("-", "_").replace(" ", "_")
    key = _KIND_ALIASES.get(key.replace("_", ""), key) if key not in KINDS else key
    if key not in KINDS:
        raise InputError(
            f"unknown collective {kind!r}; valid: all-gather, reduce-scatter, "
            "all-reduce, all-to-all, send"
        )
    return key


def canonical_topology(word: str) -> str:
    key = str(word).strip().lower().replace("_", "-")
    key = _TOPOLOGY_ALIASES.get(key, key)
    if key not in TOPOLOGIES:
        raise InputError(f"unknown topology {word!r}; valid: {', '.join(TOPOLOGIES)}")
    return key


@dataclass(frozen=True)
class Stage:
    """One physical level a mesh axis spans: `devices` of them joined by `topology`."""

    topology: str  # ring | line | unidirectional-ring | switch
    devices: int
    bytes_per_s: float  # W: one-way per link (ring, line, unidirectional-ring); egress (switch)
    hop_latency_s: float
    link: str  # "ICI", "NVLink 4", "InfiniBand NDR 400 Gb/s", ...
    scale_out: bool = False  # the level between nodes (NICs / DCN)
    hop_links: int = 1  # links one hop crosses (a ring strided over a torus dimension)
    w_note: str = ""  # how W was obtained, e.g. "18 links x 25 GB/s"
    # its switch reduces an all-reduce in the network (NVLink SHARP inside a node, InfiniBand
    # SHARP between nodes): its part of an all-reduce runs the in-switch record, V/W
    reduces: bool = False

    def describe(self) -> str:
        return f"{self.topology} of {self.devices} ({self.link})"


@dataclass(frozen=True)
class AxisNetwork:
    """The stages one mesh axis runs over, and where that layout came from."""

    devices: int
    stages: tuple[Stage, ...]
    in_network_reduction: bool = False
    source: str = "chip default"
    # the user's library choices (algorithm, protocol, multi-axis rule) for collectives on it
    options: NetworkOptions | None = None
    # the physical links it sends over (`networks.mesh_links`); axes with disjoint sets move
    # their bytes concurrently. Not part of its identity: collectives price by stages alone.
    links: frozenset[str] = field(default=frozenset(), compare=False)

    @property
    def name(self) -> str:
        """The topology word for the whole axis (one of TOPOLOGIES, or "none" for one device)."""
        active = [s for s in self.stages if s.devices > 1]
        if not active:
            return self.stages[0].topology if self.stages else "none"
        if any(s.scale_out for s in active) and len(active) > 1:
            return "hierarchical"
        if len(active) > 1:
            return "torus"
        return active[0].topology

    def describe(self) -> str:
        active = [s for s in self.stages if s.devices > 1]
        if not active:
            return "a single device"
        if len(active) == 1:
            return active[0].describe()
        return f"{self.name}: " + " x ".join(s.describe() for s in active)


@dataclass(frozen=True)
class NetworkOptions:
    """The user's overrides: per-axis topology words, link bandwidth, per-hop latency, and the
    collective algorithm (`shardline.collectives.algorithms`)."""

    topology: Mapping[str, str] | None = None  # axis -> word
    link_bytes_per_s: float | None = None  # one-way per link
    hop_latency_s: float | None = None
    algorithm: str | None = None  # a name from the algorithm table; None: each stage's default
    protocol: str | None = None  # the library's protocol (LL, LL128, Simple); None: its choice
    multi_axis: str = "simultaneous"  # torus stages of several axes at once, or "sequential"
    gpus_per_process: int = 1  # GPUs one process drives (nccl-tests -g): their launches serialize
    # the library release that runs ("2.9.9"); None: the library file's own (the current one)
    library_version: str | None = None
    # the library's collective channels where the run pins them (NCCL_MIN_NCHANNELS =
    # NCCL_MAX_NCHANNELS); None: the library file's typical count (`channels`)
    channels: int | None = None


@dataclass(frozen=True)
class CollectiveStep:
    """One stage of a collective: the array it moves at that step and the time it takes."""

    stage: Stage
    array_bytes: Scalar  # V at this step
    coefficient: float  # t_bandwidth = coefficient * array_bytes / W
    hops: float  # t_latency = hops * alpha
    t_bandwidth_s: Scalar
    t_latency_s: float
    formula: str  # symbolic, in n (this stage's devices), V, W, alpha
    in_switch: bool = False  # an all-reduce reduced inside the switch (NVLink SHARP)
    algorithm: str = ""  # the table entry this step runs (ring, line, switch, in-switch, tree, ..)
    bytes_sent: Scalar = 0.0  # bytes each device of this stage sends at this step


@dataclass(frozen=True)
class CollectiveCost:
    """A priced collective. Field names are the JSON keys (`to_dict`)."""

    kind: str
    bytes: Scalar  # V, the whole array
    devices: int
    topology: str  # the topology word: ring, line, switch, torus, hierarchical, ...
    t_s: Scalar  # alpha-beta: t_latency_s + t_bandwidth_s
    t_bandwidth_s: Scalar
    t_latency_s: Scalar
    predicted_s: Scalar  # t_latency_s + t_bandwidth_s / bus_efficiency(V)
    bus_efficiency: Scalar
    formula: str
    combine: str  # how the steps add up: "sum" or "max(scale-up, scale-out)"
    steps: tuple[CollectiveStep, ...] = ()
    topology_detail: str = ""  # the stages in words, e.g. "switch of 8 (NVLink 4)"
    algorithm: str = ""  # the table entry (or entries, "line + switch") the steps run
    bytes_sent: Scalar = 0.0  # bytes each device sends (the table's fraction of V)
    in_switch: bool = False  # reduced inside the switch (the table entry says so)
    line_rate_algorithm: str = ""  # the table entry (or entries) the bound t_s runs
    protocol: str = ""  # the library's protocol (LL, LL128, Simple); "" without a library
    library: str = "none"  # "nccl 2.30.7", "rccl ...", or the chip's word (xla, none)
    choice: Any = None  # the library's choice (collectives.priced.LibraryChoice) or None
    multi_axis: str = "simultaneous"  # how torus stages of several axes combine

    def to_dict(self) -> JSONDict:
        out = {
            k: getattr(self, k)
            for k in (
                "kind",
                "bytes",
                "devices",
                "topology",
                "topology_detail",
                "t_s",
                "t_bandwidth_s",
                "t_latency_s",
                "predicted_s",
                "bus_efficiency",
                "formula",
                "combine",
                "algorithm",
                "protocol",
                "library",
                "line_rate_algorithm",
                "multi_axis",
                "bytes_sent",
            )
        }
        out["tiers"] = self.tiers()
        if self.choice is not None:
            out["candidates"] = [
                {
                    "algorithm": pair.algorithm,
                    "protocol": pair.protocol,
                    "latency_s": pair.latency_s,
                    "bus_bytes_per_s": pair.bus_bytes_per_s,
                    "alg_bytes_per_s": pair.alg_bytes_per_s,
                    "t_s": t,
                }
                for pair, t in self.choice.candidates
            ]
        out["steps"] = [
            {
                "topology": s.stage.topology,
                "devices": s.stage.devices,
                "link": s.stage.link,
                "scale_out": s.stage.scale_out,
                "bytes_per_s": s.stage.bytes_per_s,
                "hop_latency_s": s.stage.hop_latency_s,
                "array_bytes": s.array_bytes,
                "t_bandwidth_s": s.t_bandwidth_s,
                "t_latency_s": s.t_latency_s,
                "formula": s.formula,
                "algorithm": s.algorithm,
            }
            for s in self.steps
        ]
        return jsonable(out)

    def tiers(self) -> list[dict[str, object]]:
        """Per tier (scale-up inside a node, scale-out between nodes): devices, the line-rate
        parts of the bound, and the library's bus bandwidth there."""
        group = self.choice.group if self.choice is not None else None
        out = []
        for scale_out in (False, True):
            steps = [s for s in self.steps if s.stage.scale_out == scale_out]
            if not steps:
                continue
            row: dict[str, object] = {
                "tier": "scale_out" if scale_out else "scale_up",
                "devices": math.prod(s.stage.devices for s in steps),
                "link": " + ".join(dict.fromkeys(s.stage.link for s in steps)),
                "t_bandwidth_s": sum(s.t_bandwidth_s for s in steps),
                "t_latency_s": sum(s.t_latency_s for s in steps),
            }
            if group is not None:
                bus = group.inter_bus_bytes_per_s if scale_out else group.intra_bus_bytes_per_s
                row["bus_bytes_per_s"] = bus
            out.append(row)
        return out


# --- algorithms: what one record of the vocabulary is ------------------------------------


@dataclass(frozen=True)
class LineRate:
    """One algorithm's line-rate bound for one collective kind on a stage of n devices with
    one-way bandwidth W (per link for rings and lines, per-device egress for a switch) and
    per-hop latency alpha: t = coefficient(n)·V/W + hops(n)·alpha for an array of V bytes."""

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
    switch_reduces: bool = False  # it reduces inside a switch (NVLS, SHARP / CollNet)

    @property
    def words(self) -> tuple[str, ...]:
        """Every word `--algorithm` takes for it: its name, then its aliases."""
        return (self.name, *self.aliases)


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


# --- efficiency ------------------------------------------------------------------------------


def bus_efficiency(nbytes: Scalar, chip: Chip, *, in_switch: bool = False) -> Scalar:
    """Fraction of line rate a collective of V bytes reaches: `eff_max * V / (V + V_half)`.

    eff_max = achievable.collective_bus_efficiency (1 when absent), V_half =
    achievable.collective_half_efficiency_bytes (0 when absent): measured collectives reach less
    than line rate, and far less at small sizes (docs/sharding.md; NCCL busbw ~0.8 of NVLink at
    GB sizes). `shardline calibrate --collectives` fits exactly these two numbers. An all-reduce
    reduced inside the switch (`in_switch`) is measured against its own V/W bound, so it takes
    `achievable.in_network_reduction_efficiency` as eff_max where the chip file has it.
    """
    ach = chip.achievable
    eff_max = (in_switch and ach.in_network_reduction_efficiency) or ach.collective_bus_efficiency
    eff_max = eff_max or 1.0
    v_half = chip.achievable.collective_half_efficiency_bytes or 0.0
    if isinstance(nbytes, np.ndarray):
        v = nbytes.astype(np.float64)
        safe = np.where(v > 0, v, 1.0)
        return np.where(v > 0, eff_max * safe / (safe + v_half), eff_max)
    v_scalar = float(nbytes)
    if v_scalar <= 0:
        return eff_max
    return eff_max * v_scalar / (v_scalar + v_half)


def end_to_end_efficiency(chip: Chip) -> bool:
    """Whether the chip's bus efficiency is an end-to-end figure (time over the whole collective,
    latency included: XLA's ICI collectives as "How to Scale Your Model" measures them, ~95% of
    the link rate from 10 MB up) rather than a fit with the latency taken out first (`shardline
    calibrate --collectives`, nccl-tests)."""
    return chip.interconnect is not None and chip.interconnect.library == "xla"


def bus_curve_s(t_bw: Scalar, t_lat: Scalar, eff: Scalar, chip: Chip) -> Scalar:
    """Realistic seconds from the bus-efficiency curve: `t_latency + t_bandwidth / eff` for a
    fitted curve; for an end-to-end figure the latency is already inside it, so the time is the
    slower of the line-rate bound and the curve, `max(t_latency + t_bandwidth, t_bandwidth /
    eff)` (adding the latency on top counted it twice: 84% of the link rate at 10 MB on v5e where
    ~95% is measured)."""
    if not end_to_end_efficiency(chip):
        return t_lat + t_bw / eff
    line, curve = t_lat + t_bw, t_bw / eff
    if isinstance(line, np.ndarray) or isinstance(curve, np.ndarray):
        return np.maximum(line, curve)
    return max(line, curve)
