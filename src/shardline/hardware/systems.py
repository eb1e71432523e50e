"""Systems as data: a cluster described by a TOML file beside the chip catalog.

A system names a catalog chip and says how many of them share a node, how large the scale-up
domain is (an NVLink node, an NVL72 rack, a TPU pod), how many NICs a node has and how fast each
is, and which scale-out fabric joins the nodes. `apply_system` turns a chip into a copy whose
interconnect says all that, for the collective model. The file form is documented in
docs/systems.md; the fabric table (`systems/fabrics.toml`) gives each fabric word its latency
floor and achievable efficiency. Every number keeps its source (`System.sources`, keyed by the
dotted TOML path). Pure: reads only the shipped data and the file it is given.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass, field, replace
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from shardline.basics.kinds import (
    COLLECTIVE_LIBRARIES,
    SCALE_OUT_FABRICS,
    CollectiveLibrary,
    HostCpu,
    ScaleOutFabric,
)
from shardline.basics.units import check_rate
from shardline.errors import InputError
from shardline.hardware.catalog import ChipReader, load_chip, name_and_aliases, opt_float
from shardline.hardware.chip import Chip, ScaleOut, host_cpu_word
from shardline.hardware.datafile import read_data_toml
from shardline.hardware.switches import switch_fields, with_switch_levels

__all__ = [
    "Fabric",
    "System",
    "MAX_GPUS_PER_NODE",
    "apply_system",
    "default_system_for",
    "fabric_table",
    "list_systems",
    "load_system",
    "override_system",
    "scale_up_bytes_per_s_per_device",
    "system_files",
    "system_from_dict",
]

# The largest node the file form takes: a GB200 NVL72 rack is 72 GPUs in one NVLink domain.
MAX_GPUS_PER_NODE = 72


@dataclass(frozen=True)
class Fabric:
    """One scale-out fabric word's defaults: its per-message latency floor and the achievable
    fraction of the NIC line rate for large collectives (None where no figure is published)."""

    name: ScaleOutFabric
    display_name: str
    hop_latency_s: float
    efficiency: float | None
    sources: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class System:
    """A cluster: `gpus_per_node` accelerators of catalog chip `chip` share a node's
    `nics_per_node` NICs of `nic_bytes_per_s` each (one way); `scale_up_domain_devices` of them
    are joined by the chip's scale-up fabric (NVLink, xGMI, ICI)."""

    name: str
    display_name: str
    chip: str
    gpus_per_node: int
    scale_up_domain_devices: int
    fabric: ScaleOutFabric
    nics_per_node: int
    nic_bytes_per_s: float  # one NIC, one way
    scale_out_hop_latency_s: float
    aliases: tuple[str, ...] = ()
    scale_up_link: str | None = None
    # per device, one way, over all its links; None: the chip's links x link rate
    scale_up_bytes_per_s_per_device: float | None = None
    scale_up_hop_latency_s: float | None = None  # None: the chip's
    in_network_reduction: bool | None = None  # NVLink SHARP (NVLS) in the scale-up switches
    scale_out_link: str | None = None
    scale_out_efficiency: float | None = None
    sharp: bool = False  # reduction in the scale-out switches (SHARP / CollNet)
    host_cpu: HostCpu | None = None  # the nodes' CPU vendor; None: not known
    library: CollectiveLibrary | None = None  # None: the chip's
    nodes: int | None = None  # a default node count (a rack, a pod); None: any
    default_for_chip: bool = False
    switch_bytes_per_s: float | None = None  # switch levels: hardware.switches
    oversubscription: float = 1.0
    nodes_per_leaf: int | None = None
    sources: dict[str, str] = field(default_factory=dict)
    path: str | None = None

    @property
    def node_bytes_per_s(self) -> float:
        """One-way bytes/s out of one node over all its NICs."""
        return self.nics_per_node * self.nic_bytes_per_s

    @property
    def scale_out_bytes_per_s_per_device(self) -> float:
        """Each accelerator's one-way share of its node's NICs."""
        return self.node_bytes_per_s / self.gpus_per_node

    @property
    def domain_bytes_per_s(self) -> float:
        """One-way bytes/s out of one scale-up domain over the NICs of all its nodes (a rack-scale
        domain spans several nodes; a domain smaller than a node counts its share)."""
        return self.scale_out_bytes_per_s_per_device * self.scale_up_domain_devices


# The fields of a system file, table by table (docs/systems.md), and of a fabric table entry.
_TOP = {"schema", "name", "display_name", "aliases", "chip", "library", "gpus_per_node"}
_TOP |= {"nodes", "default_for_chip", "notes", "scale_up", "scale_out"}
_SCALE_UP = {"link", "domain_devices", "bytes_per_s_per_device", "hop_latency_s", "notes"}
_SCALE_UP |= {"in_network_reduction", "switch_bytes_per_s"}
_SCALE_OUT = {"fabric", "link", "nics_per_node", "nic_bytes_per_s", "hop_latency_s", "efficiency"}
_SCALE_OUT |= {"sharp", "host_cpu", "notes", "oversubscription", "nodes_per_leaf"}
_FABRIC_FIELDS = {"display_name", "hop_latency_s", "efficiency", "notes"}


def _check_known(r: ChipReader) -> None:
    for table, known in (("", _TOP), ("scale_up", _SCALE_UP), ("scale_out", _SCALE_OUT)):
        node = r.table(table) if table else r.data
        for key in node:
            if key not in known:
                where = f"{table}.{key}" if table else key
                raise r.fail(where, f"is not a system field (known: {', '.join(sorted(known))})")


def _fraction(r: ChipReader, path: str) -> float | None:
    value = r.number(path)
    if value is not None and value > 1:
        raise r.fail(path, f"must be at most 1, got {value}")
    return None if value is None else float(value)


def _read_fabric(word: str, data: object) -> Fabric:
    if word not in SCALE_OUT_FABRICS:
        raise InputError(f"fabrics.toml: '{word}' is not a fabric word ({SCALE_OUT_FABRICS})")
    if not isinstance(data, dict):
        raise InputError(f"fabrics.toml: '{word}' must be a table")
    r = ChipReader(data, f"fabrics.toml [{word}]")
    for key in data:
        if key not in _FABRIC_FIELDS:
            raise r.fail(key, f"is not a fabric field (known: {', '.join(sorted(_FABRIC_FIELDS))})")
    return Fabric(
        name=word,  # checked against SCALE_OUT_FABRICS above
        display_name=r.text("display_name", default=word),
        hop_latency_s=float(r.number("hop_latency_s", required=True)),
        efficiency=_fraction(r, "efficiency"),
        sources=r.sources,
    )


@cache
def fabric_table() -> dict[str, Fabric]:
    """The shipped fabric table: fabric word -> its latency floor and efficiency, with sources."""
    entry = resources.files("shardline.hardware") / "systems" / "fabrics.toml"
    data = tomllib.loads(entry.read_text(encoding="utf-8"))
    return {word: _read_fabric(word, table) for word, table in data.items() if word != "schema"}


def _scale_up(r: ChipReader, gpus: int) -> dict[str, Any]:
    domain = r.number("scale_up.domain_devices", integer=True)
    if domain is None:
        domain = gpus
        r.sources["scale_up.domain_devices"] = "the node: the file gives no scale-up domain"
    link = r.raw("scale_up.link")
    if link is not None and not isinstance(link, str):
        raise r.fail("scale_up.link", "must be a string")
    return {
        "scale_up_link": link,
        "scale_up_domain_devices": domain,
        "scale_up_bytes_per_s_per_device": opt_float(r.number("scale_up.bytes_per_s_per_device")),
        "scale_up_hop_latency_s": opt_float(r.number("scale_up.hop_latency_s")),
        "in_network_reduction": _switch(r, "scale_up.in_network_reduction"),
    }


def _switch(r: ChipReader, path: str) -> bool | None:
    """A true/false switch: a word, not a measurement, so no source is recorded."""
    value = r.raw(path)
    if value is not None and not isinstance(value, bool):
        raise r.fail(path, "must be true or false")
    return value


def _from_fabric(r: ChipReader, fabric: Fabric, key: str) -> Any:
    """A scale-out number the file gives, else the fabric table's, with the table's source."""
    path = f"scale_out.{key}"
    value = _fraction(r, path) if key == "efficiency" else opt_float(r.number(path))
    if value is None:
        value = getattr(fabric, key)
        if value is not None:
            r.sources[path] = f"fabric {fabric.name}: {fabric.sources[key]}"
    return value


def _scale_out(r: ChipReader) -> dict[str, Any]:
    word = r.text("scale_out.fabric", choices=SCALE_OUT_FABRICS)
    fabric = fabric_table().get(word)
    if fabric is None:
        raise r.fail("scale_out.fabric", f"'{word}' has no entry in the fabric table")
    link = r.raw("scale_out.link")
    if link is not None and not isinstance(link, str):
        raise r.fail("scale_out.link", "must be a string")
    return {
        "fabric": word,
        "scale_out_link": link or fabric.display_name,
        "nics_per_node": r.number("scale_out.nics_per_node", required=True, integer=True),
        "nic_bytes_per_s": float(r.number("scale_out.nic_bytes_per_s", required=True)),
        "scale_out_hop_latency_s": float(_from_fabric(r, fabric, "hop_latency_s")),
        "scale_out_efficiency": _from_fabric(r, fabric, "efficiency"),
        "sharp": bool(_switch(r, "scale_out.sharp")),
        "host_cpu": host_cpu_word(r.sourced("scale_out.host_cpu"), "scale_out.host_cpu"),
        **switch_fields(r),
    }


def _check_shape(origin: str, gpus: int, domain: int) -> None:
    """GPUs per node in 1..72, and the scale-up domain a whole number of nodes or of domains per
    node (an NVL72 rack is 18 nodes of 4; two NVLink pairs in a node of 4 are 2 domains)."""
    if not 1 <= gpus <= MAX_GPUS_PER_NODE:
        raise InputError(
            f"{origin}: field 'gpus_per_node' must be between 1 and {MAX_GPUS_PER_NODE}, got {gpus}"
        )
    if domain % gpus and gpus % domain:
        raise InputError(
            f"{origin}: field 'scale_up.domain_devices' ({domain}) must be a multiple or a "
            f"divisor of gpus_per_node ({gpus})"
        )


def system_from_dict(
    data: dict[str, object], origin: str = "system file", path: str | None = None
) -> System:
    """Validate a parsed system table and build the System; errors name the bad field. A scale-out
    latency or efficiency the file leaves out comes from the fabric table, with its source."""
    r = ChipReader(data, origin)
    _check_known(r)
    name, aliases = name_and_aliases(r)
    gpus = r.number("gpus_per_node", required=True, integer=True)
    up, out = _scale_up(r, gpus), _scale_out(r)
    _check_shape(origin, gpus, up["scale_up_domain_devices"])
    library = r.raw("library")
    if library is not None:
        library = r.text("library", choices=COLLECTIVE_LIBRARIES)
    return System(
        name=name,
        display_name=r.text("display_name", default=name),
        chip=r.text("chip").strip().lower(),
        gpus_per_node=gpus,
        aliases=aliases,
        library=library,
        nodes=r.number("nodes", integer=True),
        default_for_chip=bool(_switch(r, "default_for_chip")),
        sources=r.sources,
        path=path,
        **up,
        **out,
    )


def system_files() -> list[Traversable]:
    """The shipped systems (every `*.toml` in the systems folder but the fabric table)."""
    folder = resources.files("shardline.hardware") / "systems"
    entries = (e for e in folder.iterdir() if e.name.endswith(".toml"))
    return sorted((e for e in entries if e.name != "fabrics.toml"), key=lambda e: e.name)


def _read_toml(path: Path) -> dict[str, object]:
    return read_data_toml(path, "system file")


@cache
def _catalog() -> dict[str, System]:
    systems: dict[str, System] = {}
    for entry in system_files():
        data = tomllib.loads(entry.read_text(encoding="utf-8"))
        system = system_from_dict(data, origin=f"systems/{entry.name}", path=str(entry))
        systems[system.name] = system
    return systems


@cache
def _index() -> dict[str, str]:
    index: dict[str, str] = {}
    for system in _catalog().values():
        for key in (system.name, *system.aliases):
            index[key.lower()] = system.name
    return index


def list_systems() -> list[System]:
    return list(_catalog().values())


def load_system(name_or_path: str) -> System:
    """A catalog system by name or alias (case-insensitive), or a user's TOML file by path."""
    if name_or_path.endswith(".toml") or "/" in name_or_path or "\\" in name_or_path:
        path = Path(name_or_path)
        return system_from_dict(_read_toml(path), origin=str(path), path=str(path))
    key = name_or_path.strip().lower().replace("_", "-").replace(" ", "-")
    canonical = _index().get(key)
    if canonical is None:
        valid = ", ".join(sorted(_catalog()))
        raise InputError(
            f"unknown system {name_or_path!r}; valid: {valid} (or a path to a .toml system file)"
        )
    return _catalog()[canonical]


def default_system_for(chip_name: str) -> System | None:
    """The catalog system marked `default_for_chip` for a chip (name or alias), if any: the
    cluster a chip is usually bought in (h100-sxm -> dgx-h100)."""
    try:
        name = load_chip(chip_name).name
    except InputError:
        name = chip_name.strip().lower()
    for system in _catalog().values():
        if system.default_for_chip and system.chip == name:
            return system
    return None


def scale_up_bytes_per_s_per_device(system: System, chip: Chip | None = None) -> float | None:
    """One device's one-way scale-up bandwidth: the system's figure, else the chip's links x link
    rate (the system's catalog chip when none is given; None when that chip is unknown)."""
    if system.scale_up_bytes_per_s_per_device is not None:
        return system.scale_up_bytes_per_s_per_device
    if chip is None:
        try:
            chip = load_chip(system.chip)
        except InputError:
            return None
    return chip.interconnect.egress_bytes_per_s if chip.interconnect else None


def _source(system: System, path: str) -> str:
    return f"system {system.name}: {system.sources.get(path, 'the system file')}"


def apply_system(chip: Chip, system: System) -> Chip:
    """A copy of `chip` whose interconnect is the system's: the scale-up domain (and link rate and
    latency where the system gives them), the scale-out network of its NICs (each device's share
    nics_per_node x nic_bytes_per_s / gpus_per_node), and the collective library."""
    ic = chip.interconnect
    if ic is None:
        raise InputError(f"chip {chip.name} has no interconnect; system {system.name} needs one")
    s = dict(chip.sources)
    link_bytes_per_s = ic.link_bytes_per_s
    if system.scale_up_bytes_per_s_per_device is not None:
        link_bytes_per_s = system.scale_up_bytes_per_s_per_device / ic.links_per_chip
        s["interconnect.link_bytes_per_s"] = (
            _source(system, "scale_up.bytes_per_s_per_device") + " (divided over the links)"
        )
    s["interconnect.scale_up_devices"] = _source(system, "scale_up.domain_devices")
    if system.scale_up_hop_latency_s is not None:
        s["interconnect.hop_latency_s"] = _source(system, "scale_up.hop_latency_s")
    share = system.scale_out_bytes_per_s_per_device
    s["interconnect.scale_out.bytes_per_s_per_device"] = (
        f"system {system.name}: nics_per_node x nic_bytes_per_s / gpus_per_node = "
        f"{system.nics_per_node} x {system.nic_bytes_per_s:.4g} / {system.gpus_per_node}"
    )
    for key, path in (
        ("hop_latency_s", "scale_out.hop_latency_s"),
        ("nics_per_node", "scale_out.nics_per_node"),
        ("nic_bytes_per_s", "scale_out.nic_bytes_per_s"),
        ("devices_per_node", "gpus_per_node"),
        ("efficiency", "scale_out.efficiency"),
    ):
        if path in system.sources:
            s[f"interconnect.scale_out.{key}"] = _source(system, path)
        else:  # the system has no such figure: the chip's source no longer applies
            s.pop(f"interconnect.scale_out.{key}", None)
    scale_out = ScaleOut(
        link=system.scale_out_link or system.fabric,
        bytes_per_s_per_device=share,
        hop_latency_s=system.scale_out_hop_latency_s,
        fabric=system.fabric,
        nics_per_node=system.nics_per_node,
        nic_bytes_per_s=system.nic_bytes_per_s,
        devices_per_node=system.gpus_per_node,
        efficiency=system.scale_out_efficiency,
        in_network_reduction=system.sharp,
        host_cpu=system.host_cpu,
    )
    interconnect = replace(
        ic,
        link_bytes_per_s=link_bytes_per_s,
        hop_latency_s=system.scale_up_hop_latency_s or ic.hop_latency_s,
        scale_up_devices=system.scale_up_domain_devices,
        in_network_reduction=(
            ic.in_network_reduction
            if system.in_network_reduction is None
            else system.in_network_reduction
        ),
        scale_out=scale_out,
        library=system.library or ic.library,
    )
    return with_switch_levels(replace(chip, interconnect=interconnect, sources=s), system)


def _domain_for(system: System, gpus: int) -> int:
    """The scale-up domain once a node holds `gpus` GPUs: one GPU per node is its own domain; a
    domain that was the node follows the node; a larger domain (an NVL72 rack, a TPU pod) stays,
    grown to the node if the node outgrows it."""
    if gpus == 1:
        return 1
    if system.scale_up_domain_devices == system.gpus_per_node:
        return gpus
    return max(system.scale_up_domain_devices, gpus)


def _nics_for(system: System, gpus: int) -> int:
    """NICs per node once a node holds `gpus` GPUs, keeping each GPU's share of the NICs."""
    nics = system.nics_per_node * gpus / system.gpus_per_node
    if nics < 1 or nics != int(nics):
        raise InputError(
            f"--gpus-per-node {gpus} on {system.name} ({system.nics_per_node} NICs per "
            f"{system.gpus_per_node} GPUs) leaves {nics:g} NICs per node; give --nics-per-node"
        )
    return int(nics)


def _with_gpus(system: System, gpus: int, s: dict[str, str]) -> dict[str, object]:
    if isinstance(gpus, bool) or not isinstance(gpus, int):
        raise InputError(f"--gpus-per-node must be a whole number, got {gpus!r}")
    domain = _domain_for(system, gpus)
    _check_shape("--gpus-per-node", gpus, domain)
    s["gpus_per_node"] = "user override (--gpus-per-node)"
    if domain != system.scale_up_domain_devices:
        s["scale_up.domain_devices"] = "follows --gpus-per-node (the domain was the node)"
    return {"gpus_per_node": gpus, "scale_up_domain_devices": domain}


def _with_fabric(word: str, s: dict[str, str]) -> dict[str, object]:
    fabric = fabric_table().get(word)
    if fabric is None:
        valid = ", ".join(fabric_table())
        raise InputError(f"unknown scale-out fabric {word!r}; valid: {valid}")
    s["scale_out.fabric"] = "user override (--scale-out)"
    s["scale_out.hop_latency_s"] = f"fabric {word}: {fabric.sources['hop_latency_s']}"
    if fabric.efficiency is not None:
        s["scale_out.efficiency"] = f"fabric {word}: {fabric.sources['efficiency']}"
    return {
        "fabric": fabric.name,
        "scale_out_link": fabric.display_name,
        "scale_out_hop_latency_s": fabric.hop_latency_s,
        "scale_out_efficiency": fabric.efficiency,
    }


def override_system(
    system: System,
    *,
    gpus_per_node: int | None = None,
    nics_per_node: int | None = None,
    nic_bytes_per_s: float | None = None,
    scale_out: str | None = None,
    sharp: bool | None = None,
    host_cpu: str | None = None,
) -> System:
    """A copy of the system with the command line's flags put in (docs/systems.md, "Flags"):
    `gpus_per_node` also moves a node-sized scale-up domain (1: every GPU its own domain) and,
    unless `nics_per_node` is given, the NIC count, so that each GPU keeps its NIC share; a new
    fabric word brings that fabric's latency floor and efficiency from the fabric table."""
    s = dict(system.sources)
    changes: dict[str, Any] = {}
    if gpus_per_node is not None:
        changes |= _with_gpus(system, gpus_per_node, s)
        if nics_per_node is None and gpus_per_node != system.gpus_per_node:
            changes["nics_per_node"] = _nics_for(system, gpus_per_node)
            s["scale_out.nics_per_node"] = "follows --gpus-per-node (same NIC share per GPU)"
    if nics_per_node is not None:
        if isinstance(nics_per_node, bool) or not isinstance(nics_per_node, int):
            raise InputError(f"--nics-per-node must be a whole number, got {nics_per_node!r}")
        if nics_per_node < 1:
            raise InputError(f"--nics-per-node must be at least 1, got {nics_per_node}")
        changes["nics_per_node"] = nics_per_node
        s["scale_out.nics_per_node"] = "user override (--nics-per-node)"
    if nic_bytes_per_s is not None:
        changes["nic_bytes_per_s"] = check_rate(nic_bytes_per_s, "--nic-bw", "B/s")
        s["scale_out.nic_bytes_per_s"] = "user override (--nic-bw)"
    if scale_out is not None and scale_out != system.fabric:
        changes |= _with_fabric(scale_out, s)
    if sharp is not None:
        changes["sharp"] = bool(sharp)
        s["scale_out.sharp"] = "user override"
    if host_cpu is not None:
        changes["host_cpu"] = host_cpu_word(host_cpu, "--host-cpu")
        s["scale_out.host_cpu"] = "user override (--host-cpu)"
    return replace(system, sources=s, **changes) if changes else system
