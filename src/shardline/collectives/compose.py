"""Pricing a collective over one or more mesh axes, stage by stage (hierarchical composition).

An axis of the mesh runs over one or more *stages* (physical levels it spans): a ring of 16 chips
on a TPU torus dimension, an 8-GPU NVSwitch node, the scale-out NICs between nodes. Each stage
runs one record of the algorithm table (`shardline.collectives.algorithms`). A collective over
several stages (or several mesh axes) runs stage by stage ("axis by axis"), each stage on the
array as large as it is at that step, in the order that minimises time; the scale-out level
overlaps the scale-up levels, so the two are combined with max (the hierarchical rule
`T = V * max_i((D_i - 1) / (D_i * W_i))` of the "How to Scale Your Model" GPU chapter).
Everything is vectorized over `bytes` (a numpy array broadcasts).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from shardline.basics.values import Scalar
from shardline.collectives.algorithms import TABLE, VOCABULARY
from shardline.collectives.networks import axis_network
from shardline.collectives.priced import (
    LibraryChoice,
    canonical_protocol,
    group_for,
    library_choice,
)
from shardline.collectives.records import (
    AxisNetwork,
    CollectiveCost,
    CollectiveStep,
    LineRate,
    NetworkOptions,
    Stage,
    bus_curve_s,
    bus_efficiency,
    canonical_kind,
)
from shardline.collectives.vocabulary import algorithm_named, choose
from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip

__all__ = ["collective_cost", "collective_over"]


def _step(stage: Stage, array: Scalar, record: LineRate, grouped: bool = False) -> CollectiveStep:
    """One stage running `record` on an array of `array` bytes."""
    n = stage.devices
    coef, hops = record.coefficient(n), record.hops(n)
    return CollectiveStep(
        stage,
        array,
        coef,
        hops,
        array * (coef / stage.bytes_per_s),
        hops * stage.hop_latency_s * stage.hop_links,
        record.stage_formula if grouped else record.formula,
        record.in_switch,
        record.name,
        array * record.sent(n),
    )


def _ordered_for_gather(stages: list[Stage], records: list[LineRate]) -> list[Stage]:
    """Order that minimises sum_j a_j * V / prod(n of later stages), a_j = coef_j / W_j.

    Exchange argument: stage i goes before j when a_i*n_i/(n_i-1) > a_j*n_j/(n_j-1), i.e. the
    stage that is slowest per byte goes first, while the array is still small. For the ring,
    line and switch formulas a*n/(n-1) is 1/(2W) or 1/W, so: slow links first. The slowness is
    that of the all-gather (an all-reduce's second half).
    """

    def slowness(pair: tuple[Stage, LineRate]) -> float:
        stage, record = pair
        gather = record.halves[1] if record.halves else record
        n = stage.devices
        return gather.coefficient(n) * n / (n - 1) / stage.bytes_per_s

    ranked = sorted(zip(stages, records, strict=True), key=slowness, reverse=True)
    return [stage for stage, _ in ranked]


def _grouped_record(kind: str, stage: Stage, algorithm: str | None) -> LineRate:
    """The record one stage of a stage-by-stage composition runs: an all-reduce's part on a
    switch that reduces (`Stage.reduces`: NVLS inside the node, SHARP between nodes) the
    in-switch V/W of the array it sees, as NCCL's NVLS and CollNet run it across nodes."""
    if kind == "all_reduce" and stage.reduces and algorithm is None:
        return choose(kind, stage.topology, True, None)
    record = choose(kind, stage.topology, False, algorithm)
    if kind == "all_reduce" and record.halves is None:
        staged = (a.name for a in VOCABULARY for r in a.line_rate if r.halves is not None)
        raise InputError(
            f"algorithm {record.name!r} prices an all-reduce over one stage; this group runs "
            "stage by stage (reduce-scatter + all-gather on each): name a stage algorithm "
            f"({', '.join(staged)})"
        )
    return record


def _staged(
    kind: str, nbytes: Scalar, stages: list[Stage], algorithm: str | None
) -> list[CollectiveStep]:
    """The steps of an all-gather, reduce-scatter, all-reduce or all-to-all over `stages`."""
    total = math.prod(s.devices for s in stages)
    records = [_grouped_record(kind, s, algorithm) for s in stages]
    if kind == "all_to_all":
        # phase j is an all-to-all inside groups of n_j on the array those n_j devices hold,
        # V * n_j / n_total; the phases' order does not matter.
        return [
            _step(s, nbytes * (s.devices / total), r, True)
            for s, r in zip(stages, records, strict=True)
        ]
    # all-gather (reduce-scatter mirrored; an all-reduce is both on each stage): scale-out stages
    # first (they see the smallest array, V / (devices inside the node)), then scale-up stages
    # slowest first.
    record_of = dict(zip(stages, records, strict=True))
    outer = [s for s in stages if s.scale_out]
    inner = [s for s in stages if not s.scale_out]
    order = outer + _ordered_for_gather(inner, [record_of[s] for s in inner])
    steps = []
    for j, s in enumerate(order):
        later = math.prod(t.devices for t in order[j + 1 :])
        steps.append(_step(s, nbytes * (1.0 / later), record_of[s], True))
    return steps


def _combine(
    nbytes: Scalar, steps: list[CollectiveStep], multi_axis: str = "sequential", kind: str = ""
) -> tuple[Scalar, float, str]:
    """Bandwidth time, latency time and the rule: scale-up and scale-out overlap (max)."""
    up = [s for s in steps if not s.stage.scale_out]
    out = [s for s in steps if s.stage.scale_out]
    t_lat = sum(s.t_latency_s for s in steps)
    up_bw = sum((s.t_bandwidth_s for s in up), nbytes * 0.0)
    rule = "sum"
    if multi_axis == "simultaneous" and kind != "all_to_all" and _runs_at_once(up):
        up_bw, rule = _simultaneous(up, 2.0 if kind == "all_reduce" else 1.0), "at once"
    out_bw = sum((s.t_bandwidth_s for s in out), nbytes * 0.0)
    if up and out:
        # hierarchical: the levels pipeline ("How to Scale Your Model", GPU chapter:
        # T = max(T_node, T_scale-out)); latencies still add.
        t_bw = np.maximum(up_bw, out_bw) if isinstance(nbytes, np.ndarray) else max(up_bw, out_bw)
        return t_bw, t_lat, f"max(scale-up{' at once' if rule != 'sum' else ''}, scale-out)"
    return up_bw + out_bw, t_lat, rule


def _runs_at_once(up: list[CollectiveStep]) -> bool:
    """Several torus stages (each its own links) can carry one collective at the same time; the
    stages of a switch share the device's one set of links, so they cannot."""
    return len(up) > 1 and all(s.stage.topology != "switch" for s in up)


def _simultaneous(up: list[CollectiveStep], halves: float) -> Scalar:
    """The book's multi-axis form ("How to Scale Your Model", sharding chapter: an AllGather over
    several axes gets the bandwidth of each, bytes / (bidirectional ICI bandwidth x n_axes)): the
    array is split so every stage's links work at once, each part crossing every stage,

        T = k x (N-1)/N x A / sum_i B_i,

    A the largest array the stages see, N the devices they span, B_i a stage's all-gather
    bandwidth (2W on a ring, W on a line), k = 2 for an all-reduce (both halves), 1 otherwise.
    """
    n_total = math.prod(s.stage.devices for s in up)
    array = up[0].array_bytes
    for s in up[1:]:
        array = np.maximum(array, s.array_bytes)
    bandwidth = 0.0
    for s in up:
        n = s.stage.devices
        gather = s.coefficient / halves  # one half's coefficient: (n-1)/(2n) ring, (n-1)/n line
        bandwidth += (n - 1) / n / gather * s.stage.bytes_per_s
    return halves * (n_total - 1) / n_total * array / bandwidth


def _compose(
    kind: str,
    nbytes: Scalar,
    nets: Sequence[AxisNetwork],
    algorithm: str | None = None,
    multi_axis: str = "simultaneous",
    in_switch_ok: bool = True,
) -> tuple[Scalar, float, list[CollectiveStep], str]:
    """Bandwidth time, latency time, the steps, and how they combine, for `kind` over `nets`.
    `in_switch_ok`: the switches that reduce may (`reduces_in_switch`)."""
    stages = [s for net in nets for s in net.stages if s.devices > 1]
    if not in_switch_ok:
        stages = [dataclasses.replace(s, reduces=False) for s in stages]
    active_nets = [net for net in nets if any(s.devices > 1 for s in net.stages)]
    # in-switch reduction applies when every axis involved is a scale-up switch that has it
    # (mesh_networks sets the flag only for those), i.e. the whole group sits in one node
    sharp = (
        in_switch_ok and bool(active_nets) and all(net.in_network_reduction for net in active_nets)
    )
    if not stages:
        return nbytes * 0.0, 0.0, [], "sum"
    if kind == "send":  # crosses the slowest stage once
        slowest = min(stages, key=lambda s: s.bytes_per_s)
        one = _step(slowest, nbytes, choose("send", slowest.topology, False, algorithm))
        return one.t_bandwidth_s, one.t_latency_s, [one], "one hop over the slowest stage"
    if kind == "all_reduce" and len(stages) == 1:
        record = choose(kind, stages[0].topology, sharp or stages[0].reduces, algorithm)
        one = _step(stages[0], nbytes, record)
        return one.t_bandwidth_s, one.t_latency_s, [one], "sum"
    # the named all-reduce when it spans the whole group as one stage (in-switch, tree)
    whole = TABLE.get(("all_reduce", algorithm or ""))
    if whole is not None and not (whole.in_switch or whole.over_stages):
        whole = None
    if kind == "all_reduce" and sharp and (algorithm is None or whole is not None):
        # several mesh axes inside one NVSwitch node: the switch reduces over the whole group at
        # once, V/W + 2·alpha (as for one axis), not axis by axis
        merged = dataclasses.replace(
            stages[0],
            devices=math.prod(s.devices for s in stages),
            bytes_per_s=min(s.bytes_per_s for s in stages),
            hop_latency_s=max(s.hop_latency_s for s in stages),
        )
        one = _step(merged, nbytes, choose(kind, "switch", True, algorithm))
        return one.t_bandwidth_s, one.t_latency_s, [one], "sum"
    if kind == "all_reduce" and whole is not None and whole.over_stages:
        # NCCL runs its double binary tree across the nodes (a chain inside each), so the
        # slowest stage (the NICs) bounds it: one tree over the whole group at the slowest
        # stage's per-device bandwidth and hop latency (a simplification; stated in the docs)
        slowest = min(stages, key=lambda s: s.bytes_per_s)
        merged = dataclasses.replace(
            slowest,
            topology="switch",
            devices=math.prod(s.devices for s in stages),
            hop_latency_s=max(s.hop_latency_s for s in stages),
        )
        one = _step(merged, nbytes, choose(kind, "switch", False, whole.name))
        return one.t_bandwidth_s, one.t_latency_s, [one], whole.over_stages
    steps = _staged(kind, nbytes, stages, algorithm)
    t_bw, t_lat, combine = _combine(nbytes, steps, multi_axis, kind)
    return t_bw, t_lat, steps, combine


def _bytes_sent(kind: str, nbytes: Scalar, steps: list[CollectiveStep], devices: int) -> Scalar:
    """Bytes each device sends: the table's fraction of V for the whole group.

    One step: that step's figure. Several stages: the fraction of the first stage's record at
    the group's n (for all-gather, reduce-scatter and all-reduce the stage-by-stage schedule
    sends exactly that; a hierarchical all-to-all forwards more, not counted here).
    """
    if not steps:
        return nbytes * 0.0
    if len(steps) == 1:
        return steps[0].bytes_sent
    if any(step.in_switch for step in steps):  # each stage's own figure, on its array
        return sum((step.bytes_sent for step in steps), nbytes * 0.0)
    record = choose(kind, steps[0].stage.topology, False, steps[0].algorithm)
    return record.sent(devices) * nbytes


def _check_bytes(nbytes: Scalar) -> Scalar:
    if isinstance(nbytes, np.ndarray):
        if np.any(nbytes < 0):
            raise InputError("collective bytes must not be negative")
        return nbytes.astype(np.float64)
    if not float(nbytes) >= 0:
        raise InputError(f"collective bytes must not be negative, got {nbytes!r}")
    return nbytes


def reduces_in_switch(algorithm: str | None) -> bool:
    """Whether the line-rate bound may reduce inside a switch under --algorithm: with none named
    (the stages' defaults), or one that reduces there; a named ring or tree does not, so its
    bound is the stages' own (reduce-scatter + all-gather) form, not the in-switch V/W."""
    return algorithm is None or algorithm_named(algorithm).switch_reduces


def _split_algorithm(algorithm: str | None, chip: Chip) -> tuple[str | None, str | None]:
    """(the algorithm the line-rate bound runs, the one the library runs) for the user's
    --algorithm: where a library runs the named record, the library prices it and the bound
    runs the record's own line-rate form or the stages' defaults (`LibraryPricing.own_bound`;
    the in-switch ones only for a record that reduces there, `reduces_in_switch`); elsewhere
    the bound runs the record and the library (if any) makes its own choice."""
    if algorithm is None:
        return None, None
    record = algorithm_named(algorithm)
    library = chip.interconnect is not None and chip.interconnect.library in ("nccl", "rccl")
    if library and record.library is not None:
        return (record.name if record.library.own_bound else None), record.name
    if not record.line_rate:
        own = ", ".join(a.name for a in VOCABULARY if a.line_rate)
        raise InputError(
            f"algorithm {record.name!r} is run only by a collective library (NCCL, RCCL), which "
            f"{chip.name}'s collectives do not use; valid there: {own}"
        )
    return record.name, None


def _realistic(
    kind: str, nbytes: Scalar, nets: Sequence[AxisNetwork], chip: Chip, wanted: _Wanted
) -> tuple[Scalar, Scalar, LibraryChoice | None]:
    """(predicted seconds, bandwidth efficiency, the library's choice or None)."""
    t_bw, t_lat, in_switch = wanted.t_bw, wanted.t_lat, wanted.in_switch
    active = [net for net in nets if any(s.devices > 1 for s in net.stages)]
    sharp = bool(active) and all(net.in_network_reduction for net in active)
    group = group_for(
        nets, chip, sharp, wanted.gpus_per_process, wanted.library_version, wanted.channels
    )
    if group is None or kind not in _LIBRARY_KINDS:
        if wanted.protocol is not None:
            raise InputError(
                f"--protocol needs a collective library (NCCL or RCCL); {chip.name}'s "
                f"collectives are priced by their bus efficiency"
            )
        eff = bus_efficiency(nbytes, chip, in_switch=in_switch)
        floor = group.floor_s if group is not None else _measured_floor(nets, chip)
        predicted = bus_curve_s(t_bw, t_lat, eff, chip)
        if isinstance(nbytes, np.ndarray):
            return np.maximum(predicted, floor), eff, None
        return max(predicted, floor), eff, None
    assert chip.interconnect is not None
    choice = library_choice(
        kind, nbytes, group, chip.interconnect.library, wanted.library, wanted.protocol
    )
    line = t_lat + t_bw
    predicted = (
        np.maximum(choice.t_s, line) if isinstance(nbytes, np.ndarray) else max(choice.t_s, line)
    )
    # the bandwidth term's efficiency: line-rate bandwidth time over the time the data moves
    moving = predicted - choice.latency_s
    eff = (
        np.minimum(1.0, t_bw / np.maximum(moving, 1e-30))
        if isinstance(nbytes, np.ndarray)
        else (min(1.0, float(t_bw) / moving) if moving > 0 else 1.0)
    )
    return predicted, eff, choice


def _measured_floor(nets: Sequence[AxisNetwork], chip: Chip) -> float:
    """The shortest collective a calibrated chip file measured: inside a node, and across nodes
    where the axes reach the scale-out network (0 where the file has none)."""
    floor = chip.achievable.collective_latency_s or 0.0
    ic = chip.interconnect
    spans = any(s.scale_out and s.devices > 1 for net in nets for s in net.stages)
    if spans and ic is not None and ic.scale_out is not None:
        floor = max(floor, ic.scale_out.collective_latency_s or 0.0)
    return floor


@dataclass(frozen=True)
class _Wanted:
    """The line-rate result and what the user asked the library for."""

    t_bw: Scalar
    t_lat: float
    in_switch: bool
    library: str | None
    protocol: str | None
    gpus_per_process: int = 1
    library_version: str | None = None
    channels: int | None = None


_LIBRARY_KINDS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")


def collective_over(
    kind: str,
    nbytes: Scalar,
    nets: Sequence[AxisNetwork],
    chip: Chip,
    algorithm: str | None = None,
    *,
    protocol: str | None = None,
    multi_axis: str | None = None,
    gpus_per_process: int | None = None,
) -> CollectiveCost:
    """Price `kind` of a V-byte array over one or more mesh axes (their networks, in mesh order).

    `algorithm` names a record of the vocabulary (`shardline.collectives.algorithms.VOCABULARY`,
    any of its words); None: each stage's default for the bound and the library's own choice
    for the prediction. `protocol`
    forces the library's LL, LL128 or Simple. `multi_axis` says whether the torus stages of
    several axes run at once ("simultaneous", the default) or one after another.
    """
    kind = canonical_kind(kind)
    nbytes = _check_bytes(nbytes)
    given = next((net.options for net in nets if net.options is not None), NetworkOptions())
    algorithm = algorithm if algorithm is not None else given.algorithm
    multi_axis = multi_axis or given.multi_axis
    gpus_per_process = gpus_per_process or given.gpus_per_process
    table_alg, lib_alg = _split_algorithm(algorithm, chip)
    in_switch_ok = reduces_in_switch(algorithm)
    t_bw, t_lat, steps, combine = _compose(kind, nbytes, nets, table_alg, multi_axis, in_switch_ok)
    in_switch = any(step.in_switch for step in steps)
    protocol = canonical_protocol(protocol if protocol is not None else given.protocol)
    pins = (gpus_per_process, given.library_version, given.channels)
    wanted = _Wanted(t_bw, t_lat, in_switch, lib_alg, protocol, *pins)
    predicted, eff, choice = _realistic(kind, nbytes, nets, chip, wanted)
    devices = math.prod(net.devices for net in nets)
    detail = " + ".join(net.describe() for net in nets) if nets else "a single device"
    words = [net.name for net in nets if net.name != "none"] or ["none"]
    line_alg = " + ".join(dict.fromkeys(s.algorithm for s in steps)) or "none"
    return CollectiveCost(
        kind=kind,
        bytes=nbytes,
        devices=devices,
        topology=" + ".join(dict.fromkeys(words)),
        topology_detail=detail,
        t_s=t_lat + t_bw,
        t_bandwidth_s=t_bw,
        t_latency_s=t_lat,
        predicted_s=predicted,
        bus_efficiency=eff,
        formula=_formula(steps, combine),
        combine=combine,
        steps=tuple(steps),
        algorithm=choice.algorithm if choice else line_alg,
        bytes_sent=_bytes_sent(kind, nbytes, steps, devices),
        in_switch=in_switch,
        line_rate_algorithm=line_alg,
        protocol=choice.protocol if choice else "",
        library=choice.library if choice else _plain_library(chip),
        choice=choice,
        multi_axis=multi_axis,
    )


def _plain_library(chip: Chip) -> str:
    return chip.interconnect.library if chip.interconnect else "none"


def _formula(steps: list[CollectiveStep], combine: str) -> str:
    if not steps:
        return "0 (one device)"
    if len(steps) == 1:
        return steps[0].formula
    parts = [f"[{s.stage.topology} n={s.stage.devices}: {s.formula}]" for s in steps]
    return f"{combine} of " + ", ".join(parts)


def collective_cost(
    kind: str,
    bytes: Scalar,  # noqa: A002 - the JSON key and the interface name
    devices: int,
    chip: Chip | str,
    topology: str | None = None,
    *,
    algorithm: str | None = None,
    options: NetworkOptions | None = None,
) -> CollectiveCost:
    """One collective of a V-byte array over `devices` on one axis.

    `options` carries the rest of the network choices: --link-bw, --latency, the library's
    protocol, the multi-axis rule and GPUs per process (`NetworkOptions`).

    >>> from shardline.hardware import load_chip
    >>> c = collective_cost("all-gather", 1e9, 8, load_chip("h100-sxm"))
    >>> round(c.t_bandwidth_s * 1e6, 1)  # (8-1)/8 * 1e9 / 450e9
    1944.4
    >>> t = collective_cost("all-reduce", 1e9, 8, "h100-sxm", algorithm="tree")
    >>> t.algorithm, round(t.t_bandwidth_s * 1e6, 1)  # 2 * 1e9 / 450e9
    ('tree', 4444.4)
    """
    if isinstance(devices, bool) or not isinstance(devices, int | np.integer) or devices < 1:
        raise InputError(f"devices must be a positive integer, got {devices!r}")
    resolved = resolve_chip(chip)
    base = options or NetworkOptions()
    if algorithm is not None:
        base = dataclasses.replace(base, algorithm=algorithm)
    net = axis_network(resolved, int(devices), topology, base)
    return collective_over(
        kind,
        bytes,
        [net],
        resolved,
        base.algorithm,
        protocol=base.protocol,
        multi_axis=base.multi_axis,
        gpus_per_process=base.gpus_per_process,
    )
