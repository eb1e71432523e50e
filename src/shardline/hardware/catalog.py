"""Loading chips: the shipped catalog (one TOML per chip) or a user's own file, validated.

The file form is documented in docs/chip-schema.md. Every numeric leaf is `{value, source}`.
"""

from __future__ import annotations

import math
import tomllib
from dataclasses import fields
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

from shardline.dtypes import canonical_dtype
from shardline.errors import InputError
from shardline.hardware.chip import Achievable, Chip, Interconnect, OnChip, ScaleOut

__all__ = ["load_chip", "list_chips", "chip_from_dict", "resolve_chip"]

_KINDS = ("gpu", "tpu", "cpu")
_TOPOLOGIES = ("switch", "torus")
_WRAP = ("full-axis", "multiple-of-4")


class _Reader:
    """Reads typed values out of a parsed TOML table, recording sources and naming bad fields."""

    def __init__(self, data: dict[str, Any], origin: str) -> None:
        self.data = data
        self.origin = origin
        self.sources: dict[str, str] = {}

    def fail(self, path: str, why: str) -> InputError:
        return InputError(f"{self.origin}: field '{path}' {why}")

    def _raw(self, path: str) -> Any:
        node: Any = self.data
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    def number(self, path: str, *, required: bool = False, integer: bool = False) -> Any:
        raw = self._raw(path)
        if raw is None:
            if required:
                raise self.fail(path, "is missing")
            return None
        source = "user file"
        if isinstance(raw, dict):
            unknown = set(raw) - {"value", "source", "note"}
            if "value" not in raw or unknown:
                raise self.fail(path, 'must be a number or a table {value = ..., source = "..."}')
            source = str(raw.get("source", source))
            raw = raw["value"]
        if isinstance(raw, bool) or not isinstance(raw, int | float):
            raise self.fail(path, f"must be a number, got {raw!r}")
        if not raw > 0 or not math.isfinite(raw):
            raise self.fail(path, f"must be a positive finite number, got {raw!r}")
        if integer:
            if raw != int(raw):
                raise self.fail(path, f"must be an integer, got {raw!r}")
            raw = int(raw)
        self.sources[path] = source
        return raw

    def text(self, path: str, default: str | None = None, choices: tuple[str, ...] = ()) -> Any:
        raw = self._raw(path)
        if raw is None:
            if default is None:
                raise self.fail(path, "is missing")
            return default
        if not isinstance(raw, str):
            raise self.fail(path, f"must be a string, got {raw!r}")
        if choices and raw not in choices:
            raise self.fail(path, f"must be one of {', '.join(choices)}, got {raw!r}")
        return raw

    def table(self, path: str) -> dict[str, Any]:
        raw = self._raw(path)
        if raw is None:
            return {}
        if not isinstance(raw, dict):
            raise self.fail(path, "must be a table")
        return raw


def _peaks(reader: _Reader, path: str, *, required: bool) -> dict[str, float]:
    peaks: dict[str, float] = {}
    for key in reader.table(path):
        try:
            dtype = canonical_dtype(key)
        except InputError as exc:
            raise reader.fail(f"{path}.{key}", f"is not a known dtype ({exc})") from None
        if dtype in peaks:
            raise reader.fail(f"{path}.{key}", f"names {dtype} a second time")
        peaks[dtype] = float(reader.number(f"{path}.{key}"))
    if required and not peaks:
        raise reader.fail(path, "must list at least one dtype's dense peak")
    return peaks


def _interconnect(r: _Reader) -> Interconnect | None:
    if not r.table("interconnect"):
        return None
    scale_out = None
    if r.table("interconnect.scale_out"):
        scale_out = ScaleOut(
            link=r.text("interconnect.scale_out.link", default="scale-out"),
            bytes_per_s_per_device=float(
                r.number("interconnect.scale_out.bytes_per_s_per_device", required=True)
            ),
            hop_latency_s=float(r.number("interconnect.scale_out.hop_latency_s") or 5e-6),
        )
    topology = r.text("interconnect.topology", default="switch", choices=_TOPOLOGIES)
    dims = r._raw("interconnect.torus_dims") or []
    if not isinstance(dims, list) or not all(isinstance(d, int) and d > 0 for d in dims):
        raise r.fail("interconnect.torus_dims", "must be a list of positive integers")
    if topology == "torus" and not dims:
        raise r.fail("interconnect.torus_dims", "is required when topology is 'torus'")
    reduction = r._raw("interconnect.in_network_reduction") or False
    if not isinstance(reduction, bool):
        raise r.fail("interconnect.in_network_reduction", "must be true or false")
    return Interconnect(
        link=r.text("interconnect.link", default="link"),
        topology=topology,
        link_bytes_per_s=float(r.number("interconnect.link_bytes_per_s", required=True)),
        links_per_chip=r.number("interconnect.links_per_chip", required=True, integer=True),
        hop_latency_s=float(r.number("interconnect.hop_latency_s") or 1e-6),
        scale_up_devices=r.number("interconnect.scale_up_devices", integer=True) or 8,
        torus_dims=tuple(dims),
        wraparound=r.text("interconnect.wraparound", default="full-axis", choices=_WRAP),
        in_network_reduction=reduction,
        scale_out=scale_out,
    )


def _opt_float(value: Any) -> float | None:
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
        "memory",
        "on_chip",
        "interconnect",
        "achievable",
        "measured_on",
        "notes",
        "calibration",
    },  # calibration: how a calibrated file was measured (shardline.calibrate)
    "memory": {"capacity_bytes", "bytes_per_s"},
    "on_chip": {f.name for f in fields(OnChip)},
    "interconnect": {f.name for f in fields(Interconnect)},
    "interconnect.scale_out": {f.name for f in fields(ScaleOut)},
    "achievable": {f.name for f in fields(Achievable)} | {"notes"},
}


def _check_known_fields(r: _Reader) -> None:
    for table, known in _KNOWN_FIELDS.items():
        node = r.table(table) if table else r.data
        for key in node:
            if key not in known:
                where = f"{table}.{key}" if table else key
                raise r.fail(where, f"is not a chip field (known here: {', '.join(sorted(known))})")


def chip_from_dict(
    data: dict[str, Any], origin: str = "chip file", path: str | None = None
) -> Chip:
    """Validate a parsed chip table and build the Chip; errors name the bad field."""
    r = _Reader(data, origin)
    _check_known_fields(r)
    aliases = data.get("aliases", [])
    if not isinstance(aliases, list) or not all(isinstance(a, str) for a in aliases):
        raise r.fail("aliases", "must be a list of strings")
    on_chip = OnChip(
        core_name=r.text("on_chip.core_name", default="core"),
        cores=r.number("on_chip.cores", integer=True),
        shared_bytes_per_core=_opt_float(r.number("on_chip.shared_bytes_per_core")),
        l2_bytes=_opt_float(r.number("on_chip.l2_bytes")),
        l2_bytes_per_s=_opt_float(r.number("on_chip.l2_bytes_per_s")),
        shared_bytes_per_s=_opt_float(r.number("on_chip.shared_bytes_per_s")),
        clock_hz=_opt_float(r.number("on_chip.clock_hz")),
        align_bytes=r.number("on_chip.align_bytes", integer=True),
        matrix_unit_elements=r.number("on_chip.matrix_unit_elements", integer=True),
    )
    achievable = Achievable(
        matmul_flops_per_s=_peaks(r, "achievable.matmul_flops_per_s", required=False),
        mem_bytes_per_s=_opt_float(r.number("achievable.mem_bytes_per_s")),
        launch_overhead_s=_opt_float(r.number("achievable.launch_overhead_s")),
        collective_bus_efficiency=_opt_float(r.number("achievable.collective_bus_efficiency")),
        in_network_reduction_efficiency=_opt_float(
            r.number("achievable.in_network_reduction_efficiency")
        ),
        collective_half_efficiency_bytes=_opt_float(
            r.number("achievable.collective_half_efficiency_bytes")
        ),
        per_call_overhead_s=_opt_float(r.number("achievable.per_call_overhead_s")),
        pack_bytes_per_s=_opt_float(r.number("achievable.pack_bytes_per_s")),
        unaligned_matmul_efficiency=_opt_float(r.number("achievable.unaligned_matmul_efficiency")),
    )
    for key in (
        "collective_bus_efficiency",
        "in_network_reduction_efficiency",
        "unaligned_matmul_efficiency",
    ):
        eff = getattr(achievable, key)
        if eff is not None and eff > 1:
            raise r.fail(f"achievable.{key}", f"must be at most 1, got {eff}")
    name = r.text("name").strip().lower()
    if not name:
        raise r.fail("name", "must not be empty")
    measured_on = data.get("measured_on")
    if measured_on is not None and not isinstance(measured_on, str):
        raise r.fail("measured_on", f"must be a string, got {measured_on!r}")
    return Chip(
        name=name,
        display_name=r.text("display_name", default=name),
        kind=r.text("kind", choices=_KINDS),
        vendor=r.text("vendor", default="unknown"),
        peak_flops_per_s=_peaks(r, "peak_flops_per_s", required=True),
        capacity_bytes=float(r.number("memory.capacity_bytes", required=True)),
        mem_bytes_per_s=float(r.number("memory.bytes_per_s", required=True)),
        aliases=tuple(a.lower() for a in aliases),
        on_chip=on_chip,
        interconnect=_interconnect(r),
        achievable=achievable,
        sources=r.sources,
        path=path,
        measured_on=measured_on,
    )


def _read_toml(path: Path) -> dict[str, Any]:
    try:
        with path.open("rb") as handle:
            return tomllib.load(handle)
    except FileNotFoundError:
        raise InputError(f"chip file {str(path)!r} does not exist") from None
    except OSError as exc:
        raise InputError(f"cannot read chip file {str(path)!r}: {exc.strerror}") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"chip file {str(path)!r} is not valid TOML: {exc}") from None
    except UnicodeDecodeError:
        raise InputError(f"chip file {str(path)!r} is not valid TOML: not UTF-8 text") from None


@cache
def _catalog() -> dict[str, Chip]:
    chips: dict[str, Chip] = {}
    folder = resources.files("shardline.hardware") / "catalog"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.name.endswith(".toml"):
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


def load_chip(name: str) -> Chip:
    """A catalog chip by name or alias (case-insensitive), or a user's TOML file by path."""
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
