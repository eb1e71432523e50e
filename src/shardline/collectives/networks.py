"""The networks of a mesh: which stages (physical levels) each mesh axis runs over, from the
chip's default placement or the user's --topology words."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from shardline.basics.units import check_rate, check_time, fmt_rate
from shardline.basics.values import Scalar
from shardline.collectives.records import (
    AxisNetwork,
    NetworkOptions,
    Stage,
    canonical_topology,
)
from shardline.errors import InputError
from shardline.hardware import Chip


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
    """W of a switch is the device's one-way egress into it (docs/sharding.md): the chip's
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
    ic = chip.interconnect
    egress, note = link_w * links, f"egress = {links} links × {fmt_rate(link_w, 'B/s')}"
    if ic is not None and ic.switch_bytes_per_s is not None:
        # the switches carry at most their capacity, shared by every device of the domain
        share = ic.switch_bytes_per_s / ic.scale_up_devices
        if share < egress:
            egress = share
            note = (
                f"the switches' {fmt_rate(ic.switch_bytes_per_s, 'B/s')} over "
                f"{ic.scale_up_devices} devices (less than {links} links' egress)"
            )
    return Stage(
        "switch",
        n,
        egress,
        _alpha(chip, options),
        link_name,
        w_note=note,
        reduces=bool(ic and ic.topology == "switch" and ic.in_network_reduction),
    )


def _scale_out_stage(chip: Chip, n: int, options: NetworkOptions, total: int) -> Stage:
    ic = chip.interconnect
    if ic is None or ic.scale_out is None:
        raise InputError(
            f"{total} devices do not fit {chip.name}'s scale-up domain of "
            f"{ic.scale_up_devices if ic else 1} and its chip file has no scale-out network "
            "([interconnect.scale_out]); describe the network between nodes with --nic-bw B/S "
            "(per device) or --system NAME|FILE"
        )
    so = ic.scale_out
    w, note = so.bytes_per_s_per_device, "per device (NIC)"
    if so.nodes_per_leaf is not None and n > so.nodes_per_leaf and so.oversubscription > 1:
        # more nodes than one leaf joins: the traffic crosses the spine, oversubscribed
        w /= so.oversubscription
        note = (
            f"per device (NIC) / {so.oversubscription:g} (leaf/spine oversubscribed beyond "
            f"{so.nodes_per_leaf} nodes per leaf)"
        )
    return Stage(
        "switch",
        n,
        w,
        _alpha(chip, options, scale_out=True),
        so.link,
        scale_out=True,
        w_note=note,
        reduces=bool(so.in_network_reduction),
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
    ic = chip.interconnect
    if ic is None:
        return [(_switch_stage(chip, n, options),) for n in sizes]
    if ic.topology == "switch":
        return _switch_layout(chip, sizes, options)
    return _torus_layout(chip, sizes, options)


def _switch_layout(
    chip: Chip, sizes: Sequence[int], options: NetworkOptions
) -> list[tuple[Stage, ...]]:
    """Switch nodes filled from the innermost axis; the rest over the scale-out NICs."""
    assert chip.interconnect is not None
    total = math.prod(sizes)
    layout: list[tuple[Stage, ...]] = [() for _ in sizes]
    cap = chip.interconnect.scale_up_devices
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


def _torus_placement(
    dims: Sequence[int], sizes: Sequence[int]
) -> tuple[list[list[tuple[int, int, int]]], list[int], list[int]]:
    """(per axis: (torus dim, devices taken, stride) list; devices used per dim; spill per axis)."""
    used = [1] * len(dims)
    placed: list[list[tuple[int, int, int]]] = [[] for _ in sizes]
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
    return placed, used, spill


def _torus_layout(
    chip: Chip, sizes: Sequence[int], options: NetworkOptions
) -> list[tuple[Stage, ...]]:
    """Torus dimensions per axis (ring where the extent wraps, else line), then DCN."""
    ic = chip.interconnect
    assert ic is not None
    total = math.prod(sizes)
    link_w, link_name, _ = _link(chip, options)
    alpha = _alpha(chip, options)
    dims = list(ic.torus_dims)
    placed, used, spill = _torus_placement(dims, sizes)
    layout: list[tuple[Stage, ...]] = []
    for idx in range(len(sizes)):
        stages = []
        for i, take, stride in placed[idx]:
            extent = used[i]
            qualifies = extent == dims[i] if ic.wraparound == "full-axis" else extent % 4 == 0
            wraps = stride * take == extent and qualifies
            topo = "ring" if wraps and take > 2 else "line"  # a ring of 2: one link pair
            stages.append(
                Stage(topo, take, link_w, alpha, link_name, hop_links=stride, w_note="per link")
            )
        if spill[idx] > 1:
            stages.append(_scale_out_stage(chip, spill[idx], options, total))
        layout.append(tuple(stages))
    return layout


def _override(chip: Chip, word: str, n: int, options: NetworkOptions, axis: str) -> AxisNetwork:
    source = f"--topology {axis}={word}"
    ic = chip.interconnect
    if word in ("ring", "line", "unidirectional-ring"):
        link_w, link_name, note = _link(chip, options)
        if word == "ring" and n == 2:
            # both directions of a ring of 2 reach the one neighbour over one link pair (a TPU v2
            # reduce-scatter over a wrapped axis of 2 takes the line's time: 1.13 ms measured
            # where the two-link ring gives 0.56 ms): the line's formula
            word, note = "line", note + "; a ring of 2 is one link pair, priced as a line"
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
    if options.link_bytes_per_s is not None:
        check_rate(options.link_bytes_per_s, "--link-bw", "B/s")
    if options.hop_latency_s is not None:
        check_time(options.hop_latency_s, "--latency")
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
    # the library choices ride on each axis (hashable: the topology words are already stages)
    choices = dataclasses.replace(options, topology=None)
    links = mesh_links(chip, mesh, options)
    return {
        axis: dataclasses.replace(net, options=choices, links=links[axis])
        for axis, net in nets.items()
    }


def mesh_links(
    chip: Chip, mesh: Sequence[tuple[str, int]], options: NetworkOptions | None = None
) -> dict[str, frozenset[str]]:
    """The physical links each mesh axis (outer first) sends over, by name: on a switch fabric
    "scale-up" (a device's NVLink ports into its node's switch, shared by every axis inside the
    node) and "scale-out" (its NIC); on a torus "torus-i" for each torus dimension i the axis
    rides (each dimension has links of its own) and "scale-out" (DCN) beyond the pod. Axes whose
    sets are disjoint move their bytes at the same time without slowing each other ("How to Scale
    Your Model", Part 5: FSDP over one ICI axis beside tensor parallelism over another); an axis
    placed by a --topology word counts as "scale-up" (and "scale-out" where it spans nodes)."""
    options = options or NetworkOptions()
    words = dict(options.topology or {})
    ic = chip.interconnect
    sizes = [n for _, n in mesh]
    out: dict[str, frozenset[str]] = {}
    placed: list[list[tuple[int, int, int]]] = [[] for _ in sizes]
    spill = list(sizes)
    if ic is not None and ic.topology != "switch":
        placed, _, spill = _torus_placement(list(ic.torus_dims), sizes)
    for idx, (axis, n) in enumerate(mesh):
        if n <= 1:
            out[axis] = frozenset()
        elif axis in words or ic is None:
            inside = n if ic is None else _largest_divisor_at_most(n, ic.scale_up_devices)
            out[axis] = frozenset({"scale-up"} | ({"scale-out"} if n > inside else set()))
        elif ic.topology == "switch":
            stages = _switch_layout(chip, sizes, options)[idx]
            out[axis] = frozenset(
                "scale-out" if s.scale_out else "scale-up" for s in stages if s.devices > 1
            )
        else:
            links = {f"torus-{i}" for i, _, _ in placed[idx]}
            out[axis] = frozenset(links | ({"scale-out"} if spill[idx] > 1 else set()))
    return out


def concurrent_s(traffic: Iterable[tuple[frozenset[str], Scalar]]) -> Scalar:
    """Seconds the network needs for traffic that may run at once, given as (links it uses,
    seconds) pairs: traffic that shares a link adds up (groups joined by shared links: connected
    components), separate groups run concurrently, so the answer is the busiest group's sum.
    Traffic whose links are unknown (an empty set) shares one group. 0 without traffic."""
    groups: list[tuple[set[str], Scalar]] = []
    for links, seconds in traffic:
        own, total = set(links or {"unknown"}), seconds
        for g in [g for g in groups if g[0] & own]:
            groups.remove(g)
            own |= g[0]
            total = total + g[1]
        groups.append((own, total))
    out: Scalar = 0.0
    for _, total in groups:
        out = np.maximum(out, total)
    return out if isinstance(out, np.ndarray) else float(out)


def links_of(nets: Mapping[str, AxisNetwork], axes: Iterable[str]) -> frozenset[str]:
    """The links a collective over `axes` sends over (each axis's `AxisNetwork.links`)."""
    return frozenset().union(*(nets[a].links for a in axes if a in nets))


def concurrent_rows(
    nets: Sequence[Mapping[str, AxisNetwork]],
    axes: Sequence[Iterable[str]],
    times: Sequence[np.ndarray],
) -> Scalar:
    """`concurrent_s` row by row: row i's networks `nets[i]`; collective j over `axes[j]` taking
    `times[j][i]` seconds there."""
    return np.array(
        [
            concurrent_s((links_of(row, a), float(t[i])) for a, t in zip(axes, times, strict=True))
            for i, row in enumerate(nets)
        ]
    )


def axis_network(
    chip: Chip, devices: int, topology: str | None = None, options: NetworkOptions | None = None
) -> AxisNetwork:
    """The network of a single axis of `devices` (a bare topology word, or the chip default)."""
    base = options or NetworkOptions()
    words = {"X": canonical_topology(topology)} if topology else {}
    merged = dataclasses.replace(base, topology=words)
    return mesh_networks(chip, [("X", devices)], merged)["X"]
