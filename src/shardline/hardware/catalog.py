"""Loading chips: the shipped catalog (one TOML per chip) or a user's own file, validated.

The file form is documented in docs/chip-schema.md. Every number of a catalog file is
`{value, source}` (`unsourced_fields` finds those that are not; the test suite runs it over every
catalog file). A field left out is required (an error naming it) or filled from `DEFAULTS` and
recorded as an assumption."""

from __future__ import annotations

import math
import tomllib
from dataclasses import fields
from functools import cache
from importlib import resources
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import Any

from shardline.basics.dtypes import canonical_dtype
from shardline.basics.kinds import (
    CHIP_KINDS,
    CHIP_TOPOLOGIES,
    COLLECTIVE_LIBRARIES,
    SCALE_OUT_FABRICS,
    WRAPAROUNDS,
    Wraparound,
)
from shardline.basics.units import short
from shardline.errors import InputError
from shardline.hardware.chip import (
    ASSUMED,
    Achievable,
    Chip,
    Interconnect,
    OnChip,
    ScaleOut,
)
from shardline.hardware.datafile import SourcedReader, read_data_toml
from shardline.hardware.power import read_power, with_power_limit
from shardline.hardware.ranges import FRACTIONS, check_reported, field_range
from shardline.hardware.sources import unsourced_fields

__all__ = [
    "load_chip",
    "list_chips",
    "chip_from_dict",
    "resolve_chip",
    "catalog_files",
    "unsourced_fields",
    "DEFAULTS",
    "ChipReader",
    "opt_float",
    "name_and_aliases",
]

# What the loader fills when a chip file leaves a field out: dotted path -> (value, why). None of
# these is a fact about the chip in hand, so each filled field is recorded in `Chip.sources` as
# ASSUMED + why, and `shardline hw show` lists it under "assumptions". A catalog file should give
# the real figure with its source instead. (`display_name` defaults to the name and
# `on_chip.core_name` to "core": labels, not facts, so they are not listed.)
DEFAULTS: dict[str, tuple[object, str]] = {
    "vendor": ("unknown", "the file names no vendor"),
    "interconnect.link": ("link", "the file names no scale-up link"),
    "interconnect.topology": (
        "switch",
        "every pair of devices one hop apart, as through NVSwitch; the file names no topology",
    ),
    "interconnect.hop_latency_s": (
        1e-6,
        "the per-hop figure the catalog cites for NVLink 4 (fridayswithfaraday.com 'NVLink, "
        "NVSwitch, and GPU Interconnect': ~1-2 us intra-node, lower end) and for TPU ICI (How to "
        "Scale Your Model, sharding chapter: 'typically around 1us'); no figure found for this "
        "chip's link",
    ),
    "interconnect.scale_up_devices": (
        8,
        "one 8-GPU node (How to Scale Your Model, GPU chapter: an H100 node is 8 GPUs); the file "
        "gives no scale-up size",
    ),
    "interconnect.wraparound": (
        "full-axis",
        "the stricter rule, an axis wraps only at the full torus size (TPU v5e/v6e: How to Scale "
        "Your Model, TPU chapter); the file names none",
    ),
    "interconnect.in_network_reduction": (
        False,
        "no in-switch reduction unless the file says so",
    ),
    "interconnect.scale_out.link": ("scale-out", "the file names no scale-out link"),
    "interconnect.scale_out.hop_latency_s": (
        5e-6,
        "the InfiniBand NDR inter-node figure the catalog cites (fridayswithfaraday.com 'NVLink, "
        "NVSwitch, and GPU Interconnect': ~1-5 us, upper end); no figure found for this chip's "
        "scale-out network",
    ),
}


class ChipReader(SourcedReader):
    """Reads typed values out of a parsed chip file, recording sources and naming bad fields."""

    value_word = "number"

    def assume(self, path: str) -> object:
        """The default for a field the file left out, recorded as an assumption."""
        value, why = DEFAULTS[path]
        self.sources[path] = ASSUMED + why
        return value

    def number(self, path: str, *, required: bool = False, integer: bool = False) -> Any:
        if self.raw(path) is None:
            if required:
                raise self.fail(path, "is missing")
            return None
        raw = self.sourced(path)
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise self.fail(path, f"must be a number, got {raw!r}")
        if not raw > 0 or not math.isfinite(raw):
            raise self.fail(path, f"must be a positive finite number, got {raw!r}")
        kind, low, high = field_range(path, integer=integer)
        if not low <= raw <= high:
            raise self.fail(path, f"is {kind}: from {low:g} to {high:g}, got {short(raw)}")
        if integer:
            if raw != int(raw):
                raise self.fail(path, f"must be an integer, got {raw!r}")
            raw = int(raw)
        return raw

    def number_or_assumed(self, path: str, *, integer: bool = False) -> Any:
        value = self.number(path, integer=integer)
        return self.assume(path) if value is None else value

    def text(self, path: str, default: str | None = None, choices: tuple[str, ...] = ()) -> Any:
        raw = self.raw(path)
        if raw is None:
            if default is None:
                raise self.fail(path, "is missing")
            return default
        if not isinstance(raw, str):
            raise self.fail(path, f"must be a string, got {raw!r}")
        if choices and raw not in choices:
            raise self.fail(path, f"must be one of {', '.join(choices)}, got {raw!r}")
        return raw

    def text_or_assumed(self, path: str, choices: tuple[str, ...] = ()) -> Any:
        if self.raw(path) is None:
            return self.assume(path)
        return self.text(path, choices=choices)

    def table(self, path: str) -> dict[str, object]:
        raw = self.raw(path)
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            raise self.fail(path, "must be a table")
        return raw


# The chip-file format versions this loader reads (`schema = 1`; a file may leave it out).
SCHEMA_VERSIONS = (1,)


def _check_schema(r: ChipReader) -> None:
    version = r.data.get("schema")
    if version is not None and (isinstance(version, bool) or version not in SCHEMA_VERSIONS):
        raise r.fail(
            "schema",
            f"is {version!r}, a format version this shardline does not read (it reads "
            f"{', '.join(map(str, SCHEMA_VERSIONS))}); update shardline or fix the file",
        )


def _check_achievable(r: ChipReader, peaks: dict[str, float], mem: float, ach: Achievable) -> None:
    """An achievable rate above its peak would predict times below the hard lower bound."""
    for dtype, rate in ach.matmul_flops_per_s.items():
        if dtype in peaks and rate > peaks[dtype]:
            raise r.fail(
                f"achievable.matmul_flops_per_s.{dtype}",
                f"({rate:.4g} FLOP/s) is above peak_flops_per_s.{dtype} ({peaks[dtype]:.4g}): "
                "an achievable rate cannot exceed the peak",
            )
    if ach.mem_bytes_per_s is not None and ach.mem_bytes_per_s > mem:
        raise r.fail(
            "achievable.mem_bytes_per_s",
            f"({ach.mem_bytes_per_s:.4g} B/s) is above memory.bytes_per_s ({mem:.4g}): an "
            "achievable rate cannot exceed the peak",
        )


# Integer work on the vector units (index arithmetic, routing, an int32 matmul) has a rate of its
# own; int32 is no tensor-core dtype, so only the vector table names it (`Chip.peak` falls back
# to it for an int32 matmul).
VECTOR_ONLY_KEYS = ("int32",)


def _peaks(reader: ChipReader, path: str, *, required: bool) -> dict[str, float]:
    peaks: dict[str, float] = {}
    for key in reader.table(path):
        try:
            dtype = canonical_dtype(key)
        except InputError as exc:
            raise reader.fail(f"{path}.{key}", f"is not a known dtype ({exc})") from None
        if dtype in VECTOR_ONLY_KEYS and path != "vector_flops_per_s":
            raise reader.fail(
                f"{path}.{key}",
                f"{dtype} runs on the vector units only: give it in vector_flops_per_s",
            )
        if dtype in peaks:
            raise reader.fail(f"{path}.{key}", f"names {dtype} a second time")
        peaks[dtype] = float(reader.number(f"{path}.{key}"))
    if required and not peaks:
        raise reader.fail(path, "must list at least one dtype's dense peak")
    return peaks


def _scale_out(r: ChipReader) -> ScaleOut | None:
    if not r.table("interconnect.scale_out"):
        return None
    base = "interconnect.scale_out"
    efficiency = opt_float(r.number(f"{base}.efficiency"))
    if efficiency is not None and efficiency > 1:
        raise r.fail(f"{base}.efficiency", f"must be at most 1, got {efficiency}")
    return ScaleOut(
        link=r.text_or_assumed(f"{base}.link"),
        bytes_per_s_per_device=float(r.number(f"{base}.bytes_per_s_per_device", required=True)),
        hop_latency_s=float(r.number_or_assumed(f"{base}.hop_latency_s")),
        fabric=r.text(f"{base}.fabric", default="unknown", choices=SCALE_OUT_FABRICS),
        nics_per_node=r.number(f"{base}.nics_per_node", integer=True),
        nic_bytes_per_s=opt_float(r.number(f"{base}.nic_bytes_per_s")),
        devices_per_node=r.number(f"{base}.devices_per_node", integer=True),
        efficiency=efficiency,
        in_network_reduction=bool(_opt_bool(r, f"{base}.in_network_reduction")),
        collective_latency_s=opt_float(r.number(f"{base}.collective_latency_s")),
    )


def _torus_dims(r: ChipReader, topology: str) -> tuple[int, ...]:
    path = "interconnect.torus_dims"
    dims = r.sourced(path) if r.raw(path) is not None else []
    if not isinstance(dims, list) or not all(
        isinstance(d, int) and not isinstance(d, bool) and d > 0 for d in dims
    ):
        raise r.fail(path, "must be a list of positive integers")
    if topology == "torus" and not dims:
        raise r.fail(path, "is required when topology is 'torus'")
    return tuple(dims)


def _interconnect(r: ChipReader) -> Interconnect | None:
    if not r.table("interconnect"):
        return None
    scale_out = _scale_out(r)  # read first: keeps the order of `sources` as it was
    topology = r.text_or_assumed("interconnect.topology", choices=CHIP_TOPOLOGIES)
    reduction = r.raw("interconnect.in_network_reduction")
    if reduction is None:
        reduction = r.assume("interconnect.in_network_reduction")
    if not isinstance(reduction, bool):
        raise r.fail("interconnect.in_network_reduction", "must be true or false")
    wraparound: Wraparound = "full-axis"  # only a torus wraps; a switch never reads it
    if topology == "torus":
        wraparound = r.text_or_assumed("interconnect.wraparound", choices=WRAPAROUNDS)
    elif r.raw("interconnect.wraparound") is not None:
        wraparound = r.text("interconnect.wraparound", choices=WRAPAROUNDS)
    return Interconnect(
        link=r.text_or_assumed("interconnect.link"),
        topology=topology,
        link_bytes_per_s=float(r.number("interconnect.link_bytes_per_s", required=True)),
        links_per_chip=r.number("interconnect.links_per_chip", required=True, integer=True),
        hop_latency_s=float(r.number_or_assumed("interconnect.hop_latency_s")),
        scale_up_devices=r.number_or_assumed("interconnect.scale_up_devices", integer=True),
        torus_dims=_torus_dims(r, topology),
        wraparound=wraparound,
        in_network_reduction=reduction,
        scale_out=scale_out,
        library=r.text("interconnect.library", default="none", choices=COLLECTIVE_LIBRARIES),
    )


def opt_float(value: float | None) -> float | None:
    return None if value is None else float(value)


_KNOWN_FIELDS: dict[str, set[str]] = {
    "": {
        "schema",
        "name",
        "display_name",
        "aliases",
        "vendor",
        "kind",
        "peak_flops_per_s",
        "vector_flops_per_s",
        "memory",
        "on_chip",
        "interconnect",
        "achievable",
        "measured_on",
        "notes",
        "calibration",
        "power",
    },  # calibration: how a calibrated file was measured (shardline.calibrate)
    "memory": {"capacity_bytes", "bytes_per_s", "reported_bytes"},
    "on_chip": {f.name for f in fields(OnChip)},
    "interconnect": {f.name for f in fields(Interconnect)},
    "interconnect.scale_out": {f.name for f in fields(ScaleOut)},
    "achievable": {f.name for f in fields(Achievable)} | {"notes"},
    "power": {"tdp_w", "static_w", "limit_w"},
}


def _check_known_fields(r: ChipReader) -> None:
    for table, known in _KNOWN_FIELDS.items():
        node = r.table(table) if table else r.data
        for key in node:
            if key not in known:
                where = f"{table}.{key}" if table else key
                raise r.fail(where, f"is not a chip field (known here: {', '.join(sorted(known))})")


def _on_chip(r: ChipReader) -> OnChip:
    return OnChip(
        core_name=r.text("on_chip.core_name", default="core"),
        cores=r.number("on_chip.cores", integer=True),
        shared_bytes_per_core=opt_float(r.number("on_chip.shared_bytes_per_core")),
        l2_bytes=opt_float(r.number("on_chip.l2_bytes")),
        l2_bytes_per_s=opt_float(r.number("on_chip.l2_bytes_per_s")),
        shared_bytes_per_s=opt_float(r.number("on_chip.shared_bytes_per_s")),
        clock_hz=opt_float(r.number("on_chip.clock_hz")),
        align_bytes=r.number("on_chip.align_bytes", integer=True),
        matrix_unit_elements=r.number("on_chip.matrix_unit_elements", integer=True),
        vector_lanes_per_core=r.number("on_chip.vector_lanes_per_core", integer=True),
        tensor_cores_per_core=r.number("on_chip.tensor_cores_per_core", integer=True),
        l1_bytes_per_core=opt_float(r.number("on_chip.l1_bytes_per_core")),
        registers_bytes_per_core=opt_float(r.number("on_chip.registers_bytes_per_core")),
        gemm_epilogue_overlapped=_opt_bool(r, "on_chip.gemm_epilogue_overlapped"),
        matrix_vector_tiled=_opt_bool(r, "on_chip.matrix_vector_tiled"),
        tile_feed_bytes_per_s=opt_float(r.number("on_chip.tile_feed_bytes_per_s")),
        l2_read_bytes_per_s=opt_float(r.number("on_chip.l2_read_bytes_per_s")),
        l2_resident_bytes=opt_float(r.number("on_chip.l2_resident_bytes")),
    )


def _opt_bool(r: ChipReader, path: str) -> bool | None:
    value = r.sourced(path)
    if value is not None and not isinstance(value, bool):
        raise r.fail(path, "must be true or false")
    return value


# [achievable.attention_kernels.NAME]: fwd_efficiency and bwd_efficiency of one named kernel
KERNEL_FIELDS = ("fwd_efficiency", "bwd_efficiency")


def _attention_kernels(r: ChipReader) -> dict[str, tuple[float, float]]:
    out: dict[str, tuple[float, float]] = {}
    for name in r.table("achievable.attention_kernels"):
        where = f"achievable.attention_kernels.{name}"
        extra = set(r.table(where)) - set(KERNEL_FIELDS)
        if extra:
            raise r.fail(f"{where}.{sorted(extra)[0]}", f"is not one of {', '.join(KERNEL_FIELDS)}")
        fwd, bwd = (r.number(f"{where}.{key}", required=True) for key in KERNEL_FIELDS)
        out[name.lower()] = (float(fwd), float(bwd))
    return out


def _achievable(r: ChipReader) -> Achievable:
    rates = _peaks(r, "achievable.matmul_flops_per_s", required=False)
    optional = {
        f.name: opt_float(r.number(f"achievable.{f.name}"))
        for f in fields(Achievable)
        if f.name not in ("matmul_flops_per_s", "attention_kernels")
    }
    for key in FRACTIONS:
        eff = optional[key]
        if eff is not None and eff > 1:
            raise r.fail(f"achievable.{key}", f"must be at most 1, got {eff}")
    return Achievable(matmul_flops_per_s=rates, attention_kernels=_attention_kernels(r), **optional)


def name_and_aliases(r: ChipReader) -> tuple[str, tuple[str, ...]]:
    aliases = r.data.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise r.fail("aliases", "must be a list of strings")
    name = r.text("name").strip().lower()
    if not name:
        raise r.fail("name", "must not be empty")
    return name, tuple(a.lower() for a in aliases)


def chip_from_dict(
    data: dict[str, object], origin: str = "chip file", path: str | None = None
) -> Chip:
    """Validate a parsed chip table and build the Chip; errors name the bad field. Fields left out
    that the loader fills (DEFAULTS) are recorded in `Chip.sources` as assumptions."""
    r = ChipReader(data, origin)
    _check_schema(r)
    _check_known_fields(r)
    on_chip, achievable = _on_chip(r), _achievable(r)
    name, aliases = name_and_aliases(r)
    peaks = _peaks(r, "peak_flops_per_s", required=True)
    mem_bytes_per_s = float(r.number("memory.bytes_per_s", required=True))
    _check_achievable(r, peaks, mem_bytes_per_s, achievable)
    measured_on = data.get("measured_on")
    if measured_on is not None and not isinstance(measured_on, str):
        raise r.fail("measured_on", f"must be a string, got {measured_on!r}")
    # read in this order: `sources` keeps the order of the fields read
    display_name = r.text("display_name", default=name)
    kind = r.text("kind", choices=CHIP_KINDS)
    vendor = r.text_or_assumed("vendor")
    capacity = float(r.number("memory.capacity_bytes", required=True))
    reported = opt_float(r.number("memory.reported_bytes"))
    check_reported(r, capacity, reported)
    power = read_power(r)
    chip = Chip(
        name=name,
        display_name=display_name,
        kind=kind,
        vendor=vendor,
        peak_flops_per_s=peaks,
        capacity_bytes=capacity,
        reported_capacity_bytes=reported,
        vector_flops_per_s=_peaks(r, "vector_flops_per_s", required=False),
        mem_bytes_per_s=mem_bytes_per_s,
        aliases=aliases,
        on_chip=on_chip,
        interconnect=_interconnect(r),
        achievable=achievable,
        sources=r.sources,
        path=path,
        measured_on=measured_on,
        power=power,
    )
    limit = r.number("power.limit_w")
    if power is not None and limit is not None and limit < power.tdp_w:
        # the file's figures are the design power's; the limit lowers the clock from there
        return with_power_limit(chip, float(limit), r.sources.get("power.limit_w", "chip file"))
    return chip


def catalog_files() -> list[Traversable]:
    """The shipped catalog's chip files (every `*.toml` in the catalog folder), sorted by name."""
    folder = resources.files("shardline.hardware") / "catalog"
    return sorted((e for e in folder.iterdir() if e.name.endswith(".toml")), key=lambda e: e.name)


def _read_toml(path: Path) -> dict[str, object]:
    return read_data_toml(path, "chip file")


@cache
def _catalog() -> dict[str, Chip]:
    chips: dict[str, Chip] = {}
    for entry in catalog_files():
        data = tomllib.loads(entry.read_text(encoding="utf-8"))
        chip = chip_from_dict(data, origin=f"catalog/{entry.name}", path=str(entry))
        chips[chip.name] = chip
    return chips


@cache
def _index() -> dict[str, str]:
    index: dict[str, str] = {}
    for chip in _catalog().values():
        for key in (chip.name, *chip.aliases):
            index[key.lower()] = chip.name
    return index


def list_chips() -> list[Chip]:
    return list(_catalog().values())


def _looks_like_path(name: str) -> bool:
    return name.endswith(".toml") or "/" in name or "\\" in name


def load_chip(name: str | Chip) -> Chip:
    """A catalog chip by name or alias (case-insensitive), or a user's TOML file by path (a Chip
    already made, e.g. by the command line's cluster flags, is returned as it is)."""
    if isinstance(name, Chip):
        return name
    if not isinstance(name, str):
        raise InputError(f"a chip is a name or a .toml path (a string), got {short(name)}")
    if _looks_like_path(name):
        path = Path(name)
        return chip_from_dict(_read_toml(path), origin=str(path), path=str(path))
    key = name.strip().lower().replace("_", "-").replace(" ", "-")
    index = _index()
    canonical = index.get(key) or index.get(name.strip().lower())
    for vendor in ("nvidia-", "amd-", "google-"):  # "NVIDIA H100", "Google TPU v5e"
        if canonical is None and key.startswith(vendor):
            canonical = index.get(key[len(vendor) :])
    if canonical is None:
        valid = ", ".join(sorted(_catalog()))
        raise InputError(f"unknown chip {name!r}; valid: {valid} (or a path to a .toml chip file)")
    return _catalog()[canonical]


def resolve_chip(hw: str | Chip) -> Chip:
    return hw if isinstance(hw, Chip) else load_chip(hw)
