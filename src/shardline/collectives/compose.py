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
from typing import Any

import numpy as np

from shardline.collectives.algorithms import Algorithm, canonical_algorithm, choose
from shardline.collectives.networks import axis_network
from shardline.collectives.records import (
    AxisNetwork,
    CollectiveCost,
    CollectiveStep,
    NetworkOptions,
    Stage,
    bus_efficiency,
    canonical_kind,
)
from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip

__all__ = ["collective_cost", "collective_over"]


def _step(stage: Stage, array: Any, record: Algorithm, grouped: bool = False) -> CollectiveStep:
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


def _ordered_for_gather(stages: list[Stage], records: list[Algorithm]) -> list[Stage]:
    """Order that minimises sum_j a_j * V / prod(n of later stages), a_j = coef_j / W_j.

    Exchange argument: stage i goes before j when a_i*n_i/(n_i-1) > a_j*n_j/(n_j-1), i.e. the
    stage that is slowest per byte goes first, while the array is still small. For the ring,
    line and switch formulas a*n/(n-1) is 1/(2W) or 1/W, so: slow links first. The slowness is
    that of the all-gather (an all-reduce's second half).
    """

    def slowness(pair: tuple[Stage, Algorithm]) -> float:
        stage, record = pair
        gather = record.halves[1] if record.halves else record
        n = stage.devices
        return gather.coefficient(n) * n / (n - 1) / stage.bytes_per_s

    ranked = sorted(zip(stages, records, strict=True), key=slowness, reverse=True)
    return [stage for stage, _ in ranked]


def _grouped_record(kind: str, stage: Stage, algorithm: str | None) -> Algorithm:
    """The record one stage of a stage-by-stage composition runs."""
    record = choose(kind, stage.topology, False, algorithm)
    if kind == "all_reduce" and record.halves is None:
        raise InputError(
            f"algorithm {record.name!r} prices an all-reduce over one stage; this group runs "
            "stage by stage (reduce-scatter + all-gather on each): name a stage algorithm "
            "(ring, line, unidirectional-ring, switch)"
        )
    return record


def _staged(
    kind: str, nbytes: Any, stages: list[Stage], algorithm: str | None
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


def _combine(nbytes: Any, steps: list[CollectiveStep]) -> tuple[Any, float, str]:
    """Bandwidth time, latency time and the rule: scale-up and scale-out overlap (max)."""
    up = [s for s in steps if not s.stage.scale_out]
    out = [s for s in steps if s.stage.scale_out]
    t_lat = sum(s.t_latency_s for s in steps)
    up_bw = sum((s.t_bandwidth_s for s in up), nbytes * 0.0)
    out_bw = sum((s.t_bandwidth_s for s in out), nbytes * 0.0)
    if up and out:
        # hierarchical: the levels pipeline ("How to Scale Your Model", GPU chapter:
        # T = max(T_node, T_scale-out)); latencies still add.
        t_bw = np.maximum(up_bw, out_bw) if isinstance(nbytes, np.ndarray) else max(up_bw, out_bw)
        return t_bw, t_lat, "max(scale-up, scale-out)"
    return up_bw + out_bw, t_lat, "sum"


def _compose(
    kind: str, nbytes: Any, nets: Sequence[AxisNetwork], algorithm: str | None = None
) -> tuple[Any, float, list[CollectiveStep], str]:
    """Bandwidth time, latency time, the steps, and how they combine, for `kind` over `nets`."""
    stages = [s for net in nets for s in net.stages if s.devices > 1]
    active_nets = [net for net in nets if any(s.devices > 1 for s in net.stages)]
    # in-switch reduction applies when every axis involved is a scale-up switch that has it
    # (mesh_networks sets the flag only for those), i.e. the whole group sits in one node
    sharp = bool(active_nets) and all(net.in_network_reduction for net in active_nets)
    if not stages:
        return nbytes * 0.0, 0.0, [], "sum"
    if kind == "send":  # crosses the slowest stage once
        slowest = min(stages, key=lambda s: s.bytes_per_s)
        one = _step(slowest, nbytes, choose("send", slowest.topology, False, algorithm))
        return one.t_bandwidth_s, one.t_latency_s, [one], "one hop over the slowest stage"
    if kind == "all_reduce" and len(stages) == 1:
        record = choose(kind, stages[0].topology, sharp, algorithm)
        one = _step(stages[0], nbytes, record)
        return one.t_bandwidth_s, one.t_latency_s, [one], "sum"
    if kind == "all_reduce" and sharp and algorithm in (None, "in-switch", "tree"):
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
    if kind == "all_reduce" and algorithm is not None and canonical_algorithm(algorithm) == "tree":
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
        one = _step(merged, nbytes, choose(kind, "switch", False, "tree"))
        return one.t_bandwidth_s, one.t_latency_s, [one], "one tree over the slowest stage"
    steps = _staged(kind, nbytes, stages, algorithm)
    t_bw, t_lat, combine = _combine(nbytes, steps)
    return t_bw, t_lat, steps, combine


def _bytes_sent(kind: str, nbytes: Any, steps: list[CollectiveStep], devices: int) -> Any:
    """Bytes each device sends: the table's fraction of V for the whole group.

    One step: that step's figure. Several stages: the fraction of the first stage's record at
    the group's n (for all-gather, reduce-scatter and all-reduce the stage-by-stage schedule
    sends exactly that; a hierarchical all-to-all forwards more, not counted here).
    """
    if not steps:
        return nbytes * 0.0
    if len(steps) == 1:
        return steps[0].bytes_sent
    record = choose(kind, steps[0].stage.topology, False, steps[0].algorithm)
    return record.sent(devices) * nbytes


def _check_bytes(nbytes: Any) -> Any:
    if isinstance(nbytes, np.ndarray):
        if np.any(nbytes < 0):
            raise InputError("collective bytes must not be negative")
        return nbytes.astype(np.float64)
    if not float(nbytes) >= 0:
        raise InputError(f"collective bytes must not be negative, got {nbytes!r}")
    return nbytes


def collective_over(
    kind: str,
    nbytes: Any,
    nets: Sequence[AxisNetwork],
    chip: Chip,
    algorithm: str | None = None,
) -> CollectiveCost:
    """Price `kind` of a V-byte array over one or more mesh axes (their networks, in mesh order).

    `algorithm` names a table entry (`shardline.collectives.algorithms.ALGORITHMS`); None takes
    each stage's default. A name that cannot run on a stage is an InputError listing the valid.
    """
    kind = canonical_kind(kind)
    nbytes = _check_bytes(nbytes)
    if algorithm is not None:
        algorithm = canonical_algorithm(algorithm)
    t_bw, t_lat, steps, combine = _compose(kind, nbytes, nets, algorithm)
    in_switch = any(step.in_switch for step in steps)
    eff = bus_efficiency(nbytes, chip, in_switch=in_switch)
    devices = math.prod(net.devices for net in nets)
    detail = " + ".join(net.describe() for net in nets) if nets else "a single device"
    words = [net.name for net in nets if net.name != "none"] or ["none"]
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
        formula=_formula(steps, combine),
        combine=combine,
        steps=tuple(steps),
        algorithm=" + ".join(dict.fromkeys(s.algorithm for s in steps)) or "none",
        bytes_sent=_bytes_sent(kind, nbytes, steps, devices),
        in_switch=in_switch,
    )


def _formula(steps: list[CollectiveStep], combine: str) -> str:
    if not steps:
        return "0 (one device)"
    if len(steps) == 1:
        return steps[0].formula
    parts = [f"[{s.stage.topology} n={s.stage.devices}: {s.formula}]" for s in steps]
    return f"{combine} of " + ", ".join(parts)


def collective_cost(
    kind: str,
    bytes: Any,  # noqa: A002 - the JSON key and the interface name
    devices: int,
    chip: Chip | str,
    topology: str | None = None,
    *,
    link_bytes_per_s: float | None = None,
    hop_latency_s: float | None = None,
    algorithm: str | None = None,
) -> CollectiveCost:
    """One collective of a V-byte array over `devices` on one axis.

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
    options = NetworkOptions(None, link_bytes_per_s, hop_latency_s, algorithm)
    net = axis_network(resolved, int(devices), topology, options)
    return collective_over(kind, bytes, [net], resolved, options.algorithm)
