"""`calibrate --collectives`: measure all-gather, reduce-scatter, all-reduce and all-to-all with
torch.distributed from 8 B to 1 GiB (`collectives_run.py`) and fit the alpha-beta model with a
size-dependent bus efficiency, the latency floor, and (several nodes) the network between nodes.
docs/calibrate-collectives.md explains each field written.

Model (switch topology, X processes, V = bytes of the whole array): the "switch" records of the
algorithm table (`shardline.collectives.algorithms.TABLE`), t = hops * alpha + coefficient * V /
W / eff(V), which the sharding model evaluates too:

    all-gather, reduce-scatter: t = alpha     + (X-1)/X * V / W / eff(V)
    all-reduce (RS + AG):       t = 2 * alpha + 2 * (X-1)/X * V / W / eff(V)
    all-to-all:                 t = alpha     + (X-1)/X^2 * V / W / eff(V)
    eff(V) = eff_max * V / (V + V_half)

- alpha: half the round trip of a 4-byte send/recv between ranks 0 and 1 (ping-pong), at most 0.9 x
  the fastest measured collective per phase (a collective includes its hops' latency);
- W (the "line rate" of the link): one-way bandwidth of a large send/recv between two ranks;
- eff_max and V_half: least squares on `t - latency = t_line * (1/eff_max + V_half/(eff_max V))`
  over every measured (collective, size), t_line the bandwidth term at eff = 1: linear in
  1/eff_max and V_half/eff_max. A fitted eff_max above 1 (the collective beat the point-to-point
  rate) raises W to W*eff_max and sets eff_max = 1;
- collective_latency_s: the median of the repeats of the smallest all-reduce (no size is faster).

Several nodes (LOCAL_WORLD_SIZE < WORLD_SIZE): alpha and W come from ranks 0 and 1 inside the
first node, the scale-out rate and hop latency from rank 0 to the first rank of the next node, and
t_line / latency for the efficiency fit from shardline's own hierarchical pricing
(`collective_cost`) of the group on the fitted links, so the fit and the prediction agree.

Written into `interconnect.hop_latency_s`, `interconnect.link_bytes_per_s`,
`interconnect.scale_up_devices`, `achievable.collective_bus_efficiency`,
`achievable.collective_half_efficiency_bytes`, `achievable.collective_latency_s` and, several
nodes, `[interconnect.scale_out]`.
"""

from __future__ import annotations

import statistics
import tomllib
from pathlib import Path
from typing import Any

import numpy as np

from shardline.basics.values import Scalar
from shardline.calibrate.chipfile import Measured, render_toml, write_partial_csv
from shardline.calibrate.collectives_run import OPS, measured_or_refused, sizes
from shardline.collectives.algorithms import TABLE, Algorithm
from shardline.errors import InputError
from shardline.hardware import Chip

__all__ = [
    "calibrate_collectives",
    "fit_collectives",
    "fit_latency",
    "fit_scale_out",
    "model_time",
    "OPS",
    "sizes",
    "fit_nodes",
    "network_chip",
]


def _switch(op: str) -> Algorithm:
    """The table's record of `op` directly through a switch (what the processes run on)."""
    return TABLE[(op, "switch")]


def model_time(
    op: str,
    v_bytes: Scalar,
    processes: int,
    alpha_s: float,
    link_bytes_per_s: float,
    eff_max: float,
    half_bytes: float,
) -> Scalar:
    """Predicted seconds of one collective (the model in the module docstring)."""
    record = _switch(op)
    v = np.asarray(v_bytes, dtype=np.float64)
    eff = eff_max * v / (v + half_bytes)
    coef = record.coefficient(processes)
    return record.hops(processes) * alpha_s + coef * v / link_bytes_per_s / eff


def _by_kind(rows: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_kind.setdefault(r["op"], []).append(r)
    return by_kind


def _link(by_kind: dict[str, list[dict[str, Any]]], ping: str, p2p: str) -> tuple[float, float]:
    """(alpha, one-way bytes/s) of a ping-pong pair: half the 4-byte round trip, and the large
    transfer's bytes over its one-way time less alpha."""
    if ping not in by_kind or p2p not in by_kind:
        raise InputError("the collective measurements lack the point-to-point runs")
    alpha = statistics.median(r["seconds"] for r in by_kind[ping]) / 2
    big = max(by_kind[p2p], key=lambda r: r["bytes"])
    one_way = max(big["seconds"] / 2 - alpha, 1e-12)
    return alpha, big["bytes"] / one_way


def _efficiency(points: list[tuple[float, float, float]]) -> tuple[float, float]:
    """eff_max and V_half from (bytes, t_line at eff 1, measured - latency) points: least squares
    on relative error of `left = t_line/eff_max + t_line/V * V_half/eff_max`."""
    design = [[t_line, t_line / v] for v, t_line, _ in points]
    target = [left for _, _, left in points]
    if len(design) < 2:
        raise InputError("too few collective measurements above the latency to fit")
    from shardline.calibrate.fit import least_squares

    inv_eff, half_over_eff = (float(x) for x in least_squares(design, target))
    if inv_eff > 0 and half_over_eff > 0:
        return 1.0 / inv_eff, half_over_eff / inv_eff
    # noise hides the size dependence: the efficiency of the largest messages, no V_half
    top = max(v for v, _, _ in points)
    ratios = [t_line / left for v, t_line, left in points if v == top]
    return (float(np.median(ratios)) if ratios else 1.0), 1.0


def fit_collectives(rows: list[dict[str, Any]], processes: int) -> dict[str, float]:
    """alpha, W, eff_max and V_half from measured rows on one node (the module docstring)."""
    by_kind = _by_kind(rows)
    alpha, link = _link(by_kind, "ping", "p2p")
    # a collective includes at least its hops' latency: on a busy machine a slow ping-pong cannot
    # make alpha exceed (the fastest collective / its phases), kept 10% below it
    floor = min(
        (r["seconds"] / _switch(op).hops(processes) for op in OPS for r in by_kind.get(op, [])),
        default=alpha / 0.9,
    )
    alpha = min(alpha, 0.9 * floor)
    points = []
    for op in OPS:
        record = _switch(op)
        for r in by_kind.get(op, []):
            left = r["seconds"] - record.hops(processes) * alpha
            if left > 0:
                points.append((r["bytes"], record.coefficient(processes) * r["bytes"] / link, left))
    eff_max, half = _efficiency(points)
    return _fitted(alpha, link, eff_max, half, processes)


def _fitted(
    alpha: float, link: float, eff_max: float, half: float, processes: int
) -> dict[str, float]:
    if eff_max <= 0:
        raise InputError("the collective measurements do not determine a bus efficiency")
    if eff_max > 1.0:
        link, eff_max = link * eff_max, 1.0
    return {
        "alpha_s": alpha,
        "link_bytes_per_s": link,
        "eff_max": eff_max,
        "half_bytes": half,
        "processes": processes,
    }


def fit_latency(rows: list[dict[str, Any]], op: str = "all_reduce") -> float:
    """The shortest collective: the median time of `op` at its smallest measured size (the rows
    of one size are its repeats, or one row that is already their median)."""
    mine = [r for r in rows if r["op"] == op]
    if not mine:
        raise InputError(f"the collective measurements have no {op.replace('_', '-')}")
    smallest = min(r["bytes"] for r in mine)
    return float(statistics.median(r["seconds"] for r in mine if r["bytes"] == smallest))


def fit_scale_out(rows: list[dict[str, object]]) -> dict[str, float]:
    """The network between nodes: alpha and one-way bytes/s of rank 0 to the next node's first
    rank, and the shortest all-reduce over every rank."""
    alpha, link = _link(_by_kind(rows), "ping_node", "p2p_node")
    return {"alpha_s": alpha, "bytes_per_s": link, "latency_s": fit_latency(rows)}


def fit_nodes(rows: list[dict[str, object]], processes: int, local: int) -> dict[str, object]:
    """The fit of a run over several nodes (module docstring): in-node link, scale-out, and the
    efficiency against shardline's own hierarchical line rate."""
    from shardline.collectives import collective_cost

    by_kind = _by_kind(rows)
    out = fit_scale_out(rows)
    alpha, link = (
        _link(by_kind, "ping", "p2p") if local > 1 else (out["alpha_s"], out["bytes_per_s"])
    )
    chip = network_chip(alpha, link, local, out)
    points = []
    for op in OPS:
        for r in by_kind.get(op, []):
            line = collective_cost(op, float(r["bytes"]), processes, chip)
            left = r["seconds"] - float(line.t_latency_s)
            if left > 0 and float(line.t_bandwidth_s) > 0:
                points.append((r["bytes"], float(line.t_bandwidth_s), left))
    eff_max, half = _efficiency(points)
    # the bandwidth term spans both levels: an efficiency above 1 cannot be put on one link
    eff_max = min(eff_max, 1.0)
    return {**_fitted(alpha, link, eff_max, half, processes), "scale_out": out, "local": local}


def network_chip(alpha: float, link: float, local: int, out: dict[str, float]) -> Chip:
    """A chip with only the fitted network (its compute numbers are placeholders, never read)."""
    from shardline.hardware import chip_from_dict

    one = Measured(1.0, "placeholder: only the network is priced")
    data = {
        "name": "collective-fit",
        "kind": "cpu",
        "peak_flops_per_s": {"fp32": one},
        "memory": {"capacity_bytes": one, "bytes_per_s": one},
        "interconnect": {
            "topology": "switch",
            "link_bytes_per_s": Measured(link, "fitted"),
            "links_per_chip": Measured(1, "fitted"),
            "hop_latency_s": Measured(alpha, "fitted"),
            "scale_up_devices": Measured(local, "fitted"),
            "scale_out": {
                "bytes_per_s_per_device": Measured(out["bytes_per_s"], "fitted"),
                "hop_latency_s": Measured(out["alpha_s"], "fitted"),
            },
        },
    }
    return chip_from_dict(tomllib.loads(render_toml(data)), origin="collective fit")


def calibrate_collectives(
    *,
    processes: int,
    device: str,
    quick: bool,
    progress: bool | None,
    partial: Path | None,
    done: list[dict[str, object]],
    repeats: int | None = None,
    processes_per_node: int | None = None,
) -> tuple[dict[str, object], list[dict[str, object]]]:
    """Measure and fit; returns the chip-file tables and the measured rows."""

    def saved() -> str:
        if partial is None:
            return ""
        kept_in = write_partial_csv(partial, done)
        return f"the {len(done)} earlier measurements are in {kept_in}; "

    rows, backend = measured_or_refused(
        "no chip file was written",
        saved,
        processes=processes,
        device=device,
        quick=quick,
        repeats=repeats,
        progress=progress,
        processes_per_node=processes_per_node,
    )
    world, local = int(rows[0]["processes"]), int(rows[0]["processes_per_node"])
    fit: dict[str, Any] = (
        fit_nodes(rows, world, local) if local < world else fit_collectives(rows, world)
    )
    fitted = _chip_tables(fit, rows, backend, world)
    return fitted, [{"kind": "collective", **r} for r in rows]


def _chip_tables(
    fit: dict[str, Any], rows: list[dict[str, Any]], backend: str, processes: int
) -> dict[str, Any]:
    """The chip-file tables (interconnect, achievable) of a collective fit."""
    local = int(fit.get("local", processes))
    where = (
        f"fitted to {len(rows)} torch.distributed {backend} runs over {processes} "
        f"processes, {local} per node (shardline calibrate --collectives)"
    )
    p2p = max((r["bytes"] for r in rows if r["op"] in ("p2p", "p2p_node")), default=0)
    if local == 1:  # one process per node: no link inside a node, the one between nodes stands in
        where += "; one process per node, so these are rank 0 to rank 1 on the next node"
    interconnect: dict[str, Any] = {
        "link": f"torch.distributed {backend}, {local} processes per node",
        "topology": "switch",
        "link_bytes_per_s": Measured(
            fit["link_bytes_per_s"], f"one-way bandwidth of a {p2p:,}-byte send/recv; {where}"
        ),
        "links_per_chip": Measured(1, "one logical link per process"),
        "hop_latency_s": Measured(fit["alpha_s"], f"half a 4-byte ping-pong; {where}"),
        "scale_up_devices": Measured(local, "processes per node measured (LOCAL_WORLD_SIZE)"),
    }
    achievable: dict[str, object] = {
        "collective_bus_efficiency": Measured(fit["eff_max"], where),
        "collective_half_efficiency_bytes": Measured(fit["half_bytes"], where),
    }
    inside = "all_reduce_node" if "scale_out" in fit else "all_reduce"
    if any(r["op"] == inside for r in rows):
        smallest = min(r["bytes"] for r in rows if r["op"] == inside)
        achievable["collective_latency_s"] = Measured(
            fit_latency(rows, inside),
            f"median of the timed repeats of a {smallest}-byte all-reduce over the {local} "
            f"processes of one node, the smallest size measured; {where}",
        )
    if "scale_out" in fit:
        interconnect["scale_out"] = _scale_out_table(fit["scale_out"], rows, backend, local, where)
    return {"interconnect": interconnect, "achievable": achievable}


def _scale_out_table(
    out: dict[str, float], rows: list[dict[str, Any]], backend: str, local: int, where: str
) -> dict[str, object]:
    p2p = max(r["bytes"] for r in rows if r["op"] == "p2p_node")
    smallest = min(r["bytes"] for r in rows if r["op"] == "all_reduce")
    return {
        "link": f"torch.distributed {backend} between nodes",
        "bytes_per_s_per_device": Measured(
            out["bytes_per_s"],
            f"one-way bandwidth of a {p2p:,}-byte send/recv from rank 0 to rank {local} (the "
            f"first rank of the next node); {where}",
        ),
        "hop_latency_s": Measured(
            out["alpha_s"], f"half a 4-byte ping-pong from rank 0 to rank {local}; {where}"
        ),
        "devices_per_node": Measured(local, "processes per node measured (LOCAL_WORLD_SIZE)"),
        "collective_latency_s": Measured(
            out["latency_s"],
            f"median of the timed repeats of a {smallest}-byte all-reduce over every rank of "
            f"every node, the smallest size measured; {where}",
        ),
    }
