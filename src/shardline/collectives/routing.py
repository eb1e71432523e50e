"""A point-to-point send routed over several hops and split over several links (`collective
send --hops H --ports P`)."""

from __future__ import annotations

import dataclasses

from shardline.collectives.records import CollectiveCost, bus_curve_s
from shardline.errors import InputError
from shardline.hardware import Chip

__all__ = ["routed_send"]


def routed_send(cost: CollectiveCost, hops: int, ports: int, chip: Chip) -> CollectiveCost:
    """A send of V bytes (`cost`: the one-hop, one-link send) routed over `hops` hops and split
    over `ports` links that leave the device at once (disjoint paths: the two directions of a
    ring, the dimensions of a torus). Cut-through routing pays the hop latency per hop and the
    bandwidth once, on each path's V/ports share:
        t = V / (ports W) + hops alpha
    (How to Scale Your Model, sharding chapter: a message crosses the network at the rate of the
    links it uses; each hop adds the per-hop latency). The realistic time scales with the bound.
    """
    if cost.kind != "send":
        raise InputError("--hops and --ports apply to a send only")
    if isinstance(hops, bool) or not isinstance(hops, int) or hops < 1:
        raise InputError(f"--hops must be a whole number of at least 1, got {hops!r}")
    if isinstance(ports, bool) or not isinstance(ports, int) or ports < 1:
        raise InputError(f"--ports must be a whole number of at least 1, got {ports!r}")
    links = chip.interconnect.links_per_chip if chip.interconnect else 1
    if ports > links and cost.topology != "switch":
        raise InputError(f"--ports {ports} is more than the {links} links of {chip.name}")
    if cost.topology == "switch" and ports > 1:
        raise InputError(
            "a switch stage already counts every link of the device (its W is the egress); "
            "leave --ports out"
        )
    t_bw = cost.t_bandwidth_s / ports
    t_lat = cost.t_latency_s * hops
    t_s = t_bw + t_lat
    scale = t_s / cost.t_s if cost.t_s > 0 else 1.0
    if cost.choice is None:  # the bus-efficiency curve, as for any collective
        predicted = bus_curve_s(t_bw, t_lat, cost.bus_efficiency, chip)
    else:  # a library's send: its time scaled as the bound's
        predicted = max(t_s, cost.predicted_s * scale)
    steps = tuple(
        dataclasses.replace(
            step,
            coefficient=step.coefficient / ports,
            hops=step.hops * hops,
            t_bandwidth_s=step.t_bandwidth_s / ports,
            t_latency_s=step.t_latency_s * hops,
            formula=f"V/({ports}W) + {hops}α",
        )
        for step in cost.steps
    )
    return dataclasses.replace(
        cost,
        steps=steps,
        t_s=t_s,
        t_bandwidth_s=t_bw,
        t_latency_s=t_lat,
        predicted_s=predicted,
        combine=f"{hops} hop(s) over the slowest stage, {ports} link(s) at once",
        bytes_sent=cost.bytes_sent,
        formula=f"V/({ports}W) + {hops}α",
    )
