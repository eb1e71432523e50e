"""Collectives over device-mesh axes: all-gather, reduce-scatter, all-reduce, all-to-all, send.

MODEL.md section 4. V is the bytes of the whole array (the gathered result, or one full copy
being reduced); each device holds V/X. W is one-way bytes/s: per link for rings and lines,
per-device egress for a switch. alpha is the per-hop latency. Time = latency term + bandwidth term
(alpha-beta).

An axis of the mesh runs over one or more *stages* (physical levels it spans): a ring of 16 chips
on a TPU torus dimension, an 8-GPU NVSwitch node, the scale-out NICs between nodes. A collective
over several stages (or several mesh axes) runs stage by stage ("axis by axis", MODEL.md section 4),
each stage on the array as large as it is at that step, in the order that minimises time; the
scale-out level overlaps the scale-up levels, so the two are combined with max (the hierarchical
rule `T = V * max_i((D_i - 1) / (D_i * W_i))` of the "How to Scale Your Model" GPU chapter).

The realistic prediction divides the bandwidth term by a size-dependent bus efficiency
`eff(V) = eff_max * V / (V + V_half)` (`bus_efficiency`), whose two parameters are the chip's
`achievable.collective_bus_efficiency` and `achievable.collective_half_efficiency_bytes`.
Everything is vectorized over `bytes` (a numpy array broadcasts).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip
from shardline.serialize import jsonable
from shardline.units import fmt_rate

__all__ = [
    "KINDS",
    "TOPOLOGIES",
    "Stage",
    "AxisNetwork",
    "NetworkOptions",
    "CollectiveStep",
    "CollectiveCost",
    "bus_efficiency",
    "canonical_kind",
    "canonical_topology",
    "collective_cost",
    "axis_network",
    "mesh_networks",
    "parse_topology",
    "collective_over",
]

KINDS: tuple[str, ...] = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "send")
TOPOLOGIES: tuple[str, ...] = (
    "ring",
    "line",
    "unidirectional-ring",
    "switch",
    "torus",
    "hierarchical",
)
_STAGE_TOPOLOGIES = ("ring", "line", "unidirectional-ring", "switch")

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

    def describe(self) -> str:
        return f"{self.topology} of {self.devices} ({self.link})"


@dataclass(frozen=True)
class AxisNetwork:
    """The stages one mesh axis runs over, and where that layout came from."""

    devices: int
    stages: tuple[Stage, ...]
    in_network_reduction: bool = False
    source: str = "chip default"

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
    """The user's overrides: per-axis topology words, link bandwidth, per-hop latency."""

    topology: Mapping[str, str] | None = None  # axis -> word
    link_bytes_per_s: float | None = None  # one-way per link
    hop_latency_s: float | None = None


@dataclass(frozen=True)
class CollectiveStep:
    """One stage of a collective: the array it moves at that step and the time it takes."""

    stage: Stage
    array_bytes: Any  # V at this step
    coefficient: float  # t_bandwidth = coefficient * array_bytes / W
    hops: float  # t_latency = hops * alpha
    t_bandwidth_s: Any
    t_latency_s: float
    formula: str  # symbolic, in n (this stage's devices), V, W, alpha
    in_switch: bool = False  # an all-reduce reduced inside the switch (NVLink SHARP)


@dataclass(frozen=True)
class CollectiveCost:
    """A priced collective. Field names are the JSON keys (`to_dict`)."""

    kind: str
    bytes: Any  # V, the whole array
    devices: int
    topology: str  # the topology word: ring, line, switch, torus, hierarchical, ...
    t_s: Any  # alpha-beta: t_latency_s + t_bandwidth_s
    t_bandwidth_s: Any
    t_latency_s: Any
    predicted_s: Any  # t_latency_s + t_bandwidth_s / bus_efficiency(V)
    bus_efficiency: Any
    formula: str
    combine: str  # how the steps add up: "sum" or "max(scale-up, scale-out)"
    steps: tuple[CollectiveStep, ...] = ()
    topology_detail: str = ""  # the stages in words, e.g. "switch of 8 (NVLink 4)"

    def to_dict(self) -> dict[str, Any]:
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
            )
        }
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
            }
            for s in self.steps
        ]
        return jsonable(out)


# --- efficiency ------------------------------------------------------------------------------


def bus_efficiency(nbytes: Any, chip: Chip, *, in_switch: bool = False) -> Any:
    """Fraction of line rate a collective of V bytes reaches: `eff_max * V / (V + V_half)`.

    eff_max = achievable.collective_bus_efficiency (1 when absent), V_half =
    achievable.collective_half_efficiency_bytes (0 when absent): measured collectives reach less
    than line rate, and far less at small sizes (MODEL.md section 4; NCCL busbw ~0.8 of NVLink at
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


# --- one stage -------------------------------------------------------------------------------


def _stage_terms(kind: str, stage: Stage, in_network_reduction: bool) -> tuple[float, float, str]:
    """(coefficient, hops, formula): t_bandwidth = coefficient * V / W, t_latency = hops * alpha.

    MODEL.md section 4 table: all-gather = reduce-scatter; ring (wraparound, bidirectional)
    (n-1)/n * V/(2W), latency alpha*floor(n/2); line and unidirectional ring (n-1)/n * V/W,
    latency alpha*(n-1); switch (n-1)/n * V/W, latency alpha. All-reduce = reduce-scatter +
    all-gather; with in-switch reduction (NVLink SHARP) V/W ("How to Scale Your Model", GPU
    chapter: each GPU egresses and ingresses exactly V bytes).
    All-to-all, per directed link: each device's V/n is cut into n chunks of V/n^2 and chunk d
    travels d hops. Bidirectional ring: each chunk takes the shorter way (the antipodal one, for
    even n, half each way), so a directed link carries floor(n^2/8) chunks -> V/(8W) for large n,
    a quarter of the all-gather's V/(2W): the book's ratio.
    Line: the middle link carries floor(n/2)*ceil(n/2) chunks. Unidirectional ring: n(n-1)/2 chunks
    per link -> (n-1)/(2n) * V/W (half the all-gather, book sharding chapter Q10). Switch:
    (n-1)/n^2 * V/W (each device sends n-1 chunks, GPU chapter).
    Send (point-to-point to a neighbour): V/W + alpha.
    """
    n = stage.devices
    topo = stage.topology
    if n <= 1:
        return 0.0, 0.0, "0"
    if kind == "send":
        return 1.0, 1.0, "V/W + α"
    if kind in ("all_gather", "reduce_scatter", "all_reduce"):
        if kind == "all_reduce" and topo == "switch" and in_network_reduction:
            return 1.0, 2.0, "V/W + 2·α  (in-switch reduction)"
        if topo == "ring":
            coef, hops, text = (n - 1) / (2 * n), float(n // 2), ("(n-1)/n·V/(2W)", "α·⌊n/2⌋")
        elif topo == "switch":
            coef, hops, text = (n - 1) / n, 1.0, ("(n-1)/n·V/W", "α")
        else:  # line, unidirectional-ring
            coef, hops, text = (n - 1) / n, float(n - 1), ("(n-1)/n·V/W", "α·(n-1)")
        if kind == "all_reduce":
            return 2 * coef, 2 * hops, f"2·{text[0]} + 2·{text[1]}"
        return coef, hops, f"{text[0]} + {text[1]}"
    # all_to_all
    if topo == "ring":
        # chunks to the antipode (even n) are split between the two directions, so a directed
        # link carries 1+2+..+(h-1) + h/2 = n²/8 chunks (even n), h(h+1)/2 = (n²-1)/8 (odd n)
        chunks = (n * n - n % 2) / 8
        return chunks / n**2, float(n // 2), "⌊n²/8⌋·V/(n²W) + α·⌊n/2⌋"
    if topo == "line":
        return (n // 2) * ((n + 1) // 2) / n**2, float(n - 1), "⌊n/2⌋⌈n/2⌉·V/(n²W) + α·(n-1)"
    if topo == "unidirectional-ring":
        return (n - 1) / (2 * n), float(n - 1), "(n-1)/(2n)·V/W + α·(n-1)"
    return (n - 1) / n**2, 1.0, "(n-1)/n²·V/W + α"


def _scale(nbytes: Any, factor: float) -> Any:
    return nbytes * factor


# --- composing stages ------------------------------------------------------------------------


def _ordered_for_gather(stages: list[Stage]) -> list[Stage]:
    """Order that minimises sum_j a_j * V / prod(n of later stages), a_j = coef_j / W_j.

    Exchange argument: stage i goes before j when a_i*n_i/(n_i-1) > a_j*n_j/(n_j-1), i.e. the
    stage that is slowest per byte goes first, while the array is still small. For the ring,
    line and switch formulas a*n/(n-1) is 1/(2W) or 1/W, so: slow links first.
    """

    def slowness(stage: Stage) -> float:
        coef, _, _ = _stage_terms("all_gather", stage, False)
        n = stage.devices
        return coef * n / (n - 1) / stage.bytes_per_s

    return sorted(stages, key=slowness, reverse=True)


def _compose(
    kind: str, nbytes: Any, nets: Sequence[AxisNetwork]
) -> tuple[Any, float, list[CollectiveStep], str]:
    """Bandwidth time, latency time, the steps, and how they combine, for `kind` over `nets`."""
    stages = [s for net in nets for s in net.stages if s.devices > 1]
    active_nets = [net for net in nets if any(s.devices > 1 for s in net.stages)]
    # in-switch reduction applies when every axis involved is a scale-up switch that has it
    # (mesh_networks sets the flag only for those), i.e. the whole group sits in one node
    sharp = bool(active_nets) and all(net.in_network_reduction for net in active_nets)
    steps: list[CollectiveStep] = []
    if not stages:
        return _scale(nbytes, 0.0), 0.0, steps, "sum"
    total = math.prod(s.devices for s in stages)

    def step(stage: Stage, array: Any, which: str) -> CollectiveStep:
        coef, hops, formula = _stage_terms(which, stage, sharp)
        t_bw = _scale(array, coef / stage.bytes_per_s)
        t_lat = hops * stage.hop_latency_s * stage.hop_links
        in_switch = which == "all_reduce" and stage.topology == "switch" and sharp
        return CollectiveStep(stage, array, coef, hops, t_bw, t_lat, formula, in_switch)

    if kind == "send":  # crosses the slowest stage once
        slowest = min(stages, key=lambda s: s.bytes_per_s)
        one = step(slowest, nbytes, "send")
        return one.t_bandwidth_s, one.t_latency_s, [one], "one hop over the slowest stage"
    if kind == "all_reduce" and len(stages) == 1:
        one = step(stages[0], nbytes, "all_reduce")
        return one.t_bandwidth_s, one.t_latency_s, [one], "sum"
    if kind == "all_reduce" and sharp:
        # several mesh axes inside one NVSwitch node: the switch reduces over the whole group at
        # once, V/W + 2·alpha (as for one axis), not axis by axis
        merged = dataclasses.replace(
            stages[0],
            devices=total,
            bytes_per_s=min(s.bytes_per_s for s in stages),
            hop_latency_s=max(s.hop_latency_s for s in stages),
        )
        one = step(merged, nbytes, "all_reduce")
        return one.t_bandwidth_s, one.t_latency_s, [one], "sum"
    if kind == "all_to_all":
        # phase j is an all-to-all inside groups of n_j on the array those n_j devices hold,
        # V * n_j / n_total; the phases' order does not matter.
        steps = [step(s, _scale(nbytes, s.devices / total), "all_to_all") for s in stages]
    else:
        # all-gather (reduce-scatter mirrored): scale-out stages first (they see the smallest
        # array, V / (devices inside the node)), then scale-up stages slowest first.
        outer = [s for s in stages if s.scale_out]
        inner = _ordered_for_gather([s for s in stages if not s.scale_out])
        order = outer + inner
        for j, s in enumerate(order):
            later = math.prod(t.devices for t in order[j + 1 :])
            steps.append(step(s, _scale(nbytes, 1.0 / later), "all_gather"))
    up = [s for s in steps if not s.stage.scale_out]
    out = [s for s in steps if s.stage.scale_out]
    t_lat = sum(s.t_latency_s for s in steps)
    up_bw = sum((s.t_bandwidth_s for s in up), _scale(nbytes, 0.0))
    out_bw = sum((s.t_bandwidth_s for s in out), _scale(nbytes, 0.0))
    if up and out:
        # hierarchical: the levels pipeline ("How to Scale Your Model", GPU chapter:
        # T = max(T_node, T_scale-out)); latencies still add.
        t_bw = np.maximum(up_bw, out_bw) if isinstance(nbytes, np.ndarray) else max(up_bw, out_bw)
        combine = "max(scale-up, scale-out)"
    else:
        t_bw, combine = up_bw + out_bw, "sum"
    if kind == "all_reduce":  # reduce-scatter then all-gather: twice the one-way cost
        steps = [
            CollectiveStep(
                s.stage,
                s.array_bytes,
                2 * s.coefficient,
                2 * s.hops,
                2 * s.t_bandwidth_s,
                2 * s.t_latency_s,
                "2·(" + s.formula + ")",
            )
            for s in steps
        ]
        return 2 * t_bw, 2 * t_lat, steps, combine
    return t_bw, t_lat, steps, combine


def collective_over(
    kind: str, nbytes: Any, nets: Sequence[AxisNetwork], chip: Chip
) -> CollectiveCost:
    """Price `kind` of a V-byte array over one or more mesh axes (their networks, in mesh order)."""
    kind = canonical_kind(kind)
    if isinstance(nbytes, np.ndarray):
        if np.any(nbytes < 0):
            raise InputError("collective bytes must not be negative")
        nbytes = nbytes.astype(np.float64)
    elif not float(nbytes) >= 0:
        raise InputError(f"collective bytes must not be negative, got {nbytes!r}")
    t_bw, t_lat, steps, combine = _compose(kind, nbytes, nets)
    eff = bus_efficiency(nbytes, chip, in_switch=any(step.in_switch for step in steps))
    devices = math.prod(net.devices for net in nets)
    detail = " + ".join(net.describe() for net in nets) if nets else "a single device"
    words = [net.name for net in nets if net.name != "none"] or ["none"]
    formula = _formula(kind, steps, combine)
    return CollectiveCost(
        kind=kind,
        bytes=nbytes,
        devices=devices,
        topology=" + ".join(dict.fromkeys(words)),
        topology_detail=detail,
        t_s=t_lat + t_bw,
        t_bandwidth_s=t_bw,
        t_latency_s=t_lat,
        predicted_s=t_lat + t_bw / eff,
        bus_efficiency=eff,
        formula=formula,
        combine=combine,
        steps=tuple(steps),
    )


def _formula(kind: str, steps: list[CollectiveStep], combine: str) -> str:
    if not steps:
        return "0 (one device)"
    if len(steps) == 1:
        return steps[0].formula
    parts = [f"[{s.stage.topology} n={s.stage.devices}: {s.formula}]" for s in steps]
    return f"{combine} of " + ", ".join(parts)


# --- building the networks of a mesh ---------------------------------------------------------


def parse_topology(text: str | None, axes: Sequence[str]) -> dict[str, str]:
    """`X=ring,Y=line` -> per-axis words; a bare `ring` applies to every axis."""
    if text is None or not str(text).strip():
        return {}
    text = str(text).strip()
    if "=" not in text:
        word = canonical_topology(text)
        return {axis: word for axis in axes}
    words: dict[str, str] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if "=" not in item:
            raise InputError(
                f"malformed --topology entry {item!r}: expected AXIS=WORD, e.g. X=ring"
            )
        axis, word = (s.strip() for s in item.split("=", 1))
        if axis not in axes:
            raise InputError(
                f"--topology names mesh axis {axis}, which is not in the mesh "
                f"({', '.join(axes) or 'none'})"
            )
        if axis in words:
            raise InputError(f"--topology gives axis {axis} twice")
        words[axis] = canonical_topology(word)
    return words


def _largest_divisor_at_most(n: int, cap: int) -> int:
    best = 1
    for d in range(1, min(n, cap) + 1):
        if n % d == 0:
            best = d
    return best


def _link(chip: Chip, options: NetworkOptions) -> tuple[float, str, str]:
    """(one-way per-link bytes/s, link name, note) for the scale-up fabric."""
    ic = chip.interconnect
    if options.link_bytes_per_s is not None:
        return options.link_bytes_per_s, (ic.link if ic else "link"), "--link-bw"
    if ic is None:
        raise InputError(
            f"{chip.name} has no interconnect in its chip file; give --link-bw "
            "(one-way bytes/s per link) and --topology"
        )
    return ic.link_bytes_per_s, ic.link, "per link"


def _alpha(chip: Chip, options: NetworkOptions, scale_out: bool = False) -> float:
    if options.hop_latency_s is not None:
        return options.hop_latency_s
    ic = chip.interconnect
    if ic is None:
        return 0.0
    if scale_out and ic.scale_out is not None:
        return ic.scale_out.hop_latency_s
    return ic.hop_latency_s


def _switch_stage(chip: Chip, n: int, options: NetworkOptions) -> Stage:
    """W of a switch is the device's one-way egress into it (MODEL.md section 4): the chip's
    links x per-link bandwidth, or, given --link-bw, that figure itself (to the user a device has
    one logical link into a switch, so the formula's W is what they typed)."""
    link_w, link_name, _ = _link(chip, options)
    if options.link_bytes_per_s is not None:
        return Stage(
            "switch",
            n,
            link_w,
            _alpha(chip, options),
            link_name,
            w_note="--link-bw, the device's link into the switch",
        )
    links = chip.interconnect.links_per_chip if chip.interconnect else 1
    return Stage(
        "switch",
        n,
        link_w * links,
        _alpha(chip, options),
        link_name,
        w_note=f"egress = {links} links × {fmt_rate(link_w, 'B/s')}",
    )


def _scale_out_stage(chip: Chip, n: int, options: NetworkOptions, total: int) -> Stage:
    ic = chip.interconnect
    if ic is None or ic.scale_out is None:
        raise InputError(
            f"{total} devices do not fit {chip.name}'s scale-up domain of "
            f"{ic.scale_up_devices if ic else 1} and its chip file has no scale-out network "
            "([interconnect.scale_out])"
        )
    so = ic.scale_out
    return Stage(
        "switch",
        n,
        so.bytes_per_s_per_device,
        _alpha(chip, options, scale_out=True),
        so.link,
        scale_out=True,
        w_note="per device (NIC)",
    )


def _auto_layout(
    chip: Chip, sizes: Sequence[int], options: NetworkOptions
) -> list[tuple[Stage, ...]]:
    """The chip's default placement of mesh axes (outer first) onto its fabric.

    Devices are numbered with the last mesh axis innermost. A switch node (scale_up_devices) is
    filled from the innermost axis; what does not fit goes over the scale-out NICs. On a torus,
    each axis takes fresh torus dimensions (innermost axis on the first dimension), spilling onto
    the next when larger; an axis along a dimension wraps (bidirectional ring) when the extent
    used there qualifies (v5e/v6e: the full 16; v4/v5p: a multiple of 4), else it is a line.
    Beyond the pod, DCN. A chip without an interconnect is a flat switch of --link-bw.
    """
    total = math.prod(sizes)
    ic = chip.interconnect
    if ic is None:
        return [(_switch_stage(chip, n, options),) for n in sizes]
    link_w, link_name, _ = _link(chip, options)
    alpha = _alpha(chip, options)
    layout: list[tuple[Stage, ...]] = [() for _ in sizes]
    if ic.topology == "switch":
        cap = ic.scale_up_devices
        for idx in reversed(range(len(sizes))):
            rem = sizes[idx]
            stages: list[Stage] = []
            take = _largest_divisor_at_most(rem, cap)
            if take > 1:
                stages.append(_switch_stage(chip, take, options))
                cap //= take
                rem //= take
            if rem > 1:
                stages.append(_scale_out_stage(chip, rem, options, total))
                cap = 1
            layout[idx] = tuple(stages)
        return layout
    dims = list(ic.torus_dims)
    used = [1] * len(dims)
    placed: list[list[tuple[int, int, int]]] = [[] for _ in sizes]  # (dim, take, stride)
    spill: list[int] = [1] * len(sizes)
    for idx in reversed(range(len(sizes))):
        rem = sizes[idx]
        fresh = [i for i, u in enumerate(used) if u == 1]
        partial = [i for i, u in enumerate(used) if 1 < u < dims[i]]
        # an axis that fits one free torus dimension takes the smallest such dimension whole
        # (v5p: 20 chips on its 20-chip dimension, a ring, rather than 10 x 2 lines)
        whole = sorted((dims[i], i) for i in fresh if rem > 1 and dims[i] >= rem)
        if whole:
            fresh = [whole[0][1]]
            partial = []
        for i in fresh + partial:
            if rem == 1:
                break
            take = _largest_divisor_at_most(rem, dims[i] // used[i])
            if take <= 1:
                continue
            placed[idx].append((i, take, used[i]))
            used[i] *= take
            rem //= take
        spill[idx] = rem
    for idx in range(len(sizes)):
        stages = []
        for i, take, stride in placed[idx]:
            extent = used[i]
            qualifies = extent == dims[i] if ic.wraparound == "full-axis" else extent % 4 == 0
            wraps = stride * take == extent and qualifies
            stages.append(
                Stage(
                    "ring" if wraps else "line",
                    take,
                    link_w,
                    alpha,
                    link_name,
                    hop_links=stride,
                    w_note="per link",
                )
            )
        if spill[idx] > 1:
            stages.append(_scale_out_stage(chip, spill[idx], options, total))
        layout[idx] = tuple(stages)
    return layout


def _override(chip: Chip, word: str, n: int, options: NetworkOptions, axis: str) -> AxisNetwork:
    source = f"--topology {axis}={word}"
    ic = chip.interconnect
    if word in ("ring", "line", "unidirectional-ring"):
        link_w, link_name, note = _link(chip, options)
        stage = Stage(word, n, link_w, _alpha(chip, options), link_name, w_note=note)
        return AxisNetwork(n, (stage,), False, source)
    if word == "switch":
        reduction = bool(ic and ic.topology == "switch" and ic.in_network_reduction)
        return AxisNetwork(n, (_switch_stage(chip, n, options),), reduction, source)
    if word == "torus":
        if ic is None or ic.topology != "torus":
            raise InputError(
                f"topology 'torus' needs a chip with a torus interconnect; "
                f"{chip.name}'s is {'absent' if ic is None else ic.topology}"
            )
        return AxisNetwork(n, _auto_layout(chip, [n], options)[0], False, source)
    # hierarchical: the scale-up fabric inside a node (or pod), the scale-out network between
    if ic is None or ic.scale_out is None:
        raise InputError(
            f"topology 'hierarchical' needs a chip with a scale-out network; {chip.name} has none"
        )
    inside = _largest_divisor_at_most(n, ic.scale_up_devices)
    stages: tuple[Stage, ...] = _auto_layout(chip, [inside], options)[0]
    if n // inside > 1:
        stages = stages + (_scale_out_stage(chip, n // inside, options, n),)
    return AxisNetwork(n, stages, False, source)


def mesh_networks(
    chip: Chip, mesh: Sequence[tuple[str, int]], options: NetworkOptions | None = None
) -> dict[str, AxisNetwork]:
    """Each mesh axis's network: the user's --topology word, else the chip's default layout."""
    options = options or NetworkOptions()
    words = dict(options.topology or {})
    names = [name for name, _ in mesh]
    for axis in words:
        if axis not in names:
            raise InputError(
                f"--topology names mesh axis {axis}, which is not in the mesh ({', '.join(names)})"
            )
    if options.link_bytes_per_s is not None and not options.link_bytes_per_s > 0:
        raise InputError("--link-bw must be positive")
    if options.hop_latency_s is not None and not options.hop_latency_s >= 0:
        raise InputError("--latency must not be negative")
    auto: list[tuple[Stage, ...]] | None = None
    ic = chip.interconnect
    nets: dict[str, AxisNetwork] = {}
    for idx, (axis, n) in enumerate(mesh):
        word = words.get(axis)
        if word is not None:
            nets[axis] = _override(chip, word, n, options, axis)
            continue
        if auto is None:
            auto = _auto_layout(chip, [size for _, size in mesh], options)
        stages = auto[idx]
        active = [s for s in stages if s.devices > 1]
        reduction = bool(
            ic
            and ic.topology == "switch"
            and ic.in_network_reduction
            and len(active) == 1
            and not active[0].scale_out
        )
        nets[axis] = AxisNetwork(n, stages, reduction, "chip default")
    return nets


def axis_network(
    chip: Chip, devices: int, topology: str | None = None, options: NetworkOptions | None = None
) -> AxisNetwork:
    """The network of a single axis of `devices` (a bare topology word, or the chip default)."""
    base = options or NetworkOptions()
    words = {"X": canonical_topology(topology)} if topology else {}
    merged = NetworkOptions(words, base.link_bytes_per_s, base.hop_latency_s)
    return mesh_networks(chip, [("X", devices)], merged)["X"]


def collective_cost(
    kind: str,
    bytes: Any,  # noqa: A002 - the JSON key and the interface name
    devices: int,
    chip: Chip | str,
    topology: str | None = None,
    *,
    link_bytes_per_s: float | None = None,
    hop_latency_s: float | None = None,
) -> CollectiveCost:
    """One collective of a V-byte array over `devices` on one axis.

    >>> from shardline.hardware import load_chip
    >>> c = collective_cost("all-gather", 1e9, 8, load_chip("h100-sxm"))
    >>> round(c.t_bandwidth_s * 1e6, 1)  # (8-1)/8 * 1e9 / 450e9
    1944.4
    """
    if isinstance(devices, bool) or not isinstance(devices, int | np.integer) or devices < 1:
        raise InputError(f"devices must be a positive integer, got {devices!r}")
    resolved = resolve_chip(chip)
    options = NetworkOptions(None, link_bytes_per_s, hop_latency_s)
    net = axis_network(resolved, int(devices), topology, options)
    return collective_over(kind, bytes, [net], resolved)
