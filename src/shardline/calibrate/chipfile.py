"""Writing a measured chip as a TOML chip file (docs/chip-schema.md), atomically.

A chip file is written to a temporary file in the same directory and renamed into place, so a reader
never sees half a file and a failure leaves no file. Measurements that were taken before a failure
go to a side CSV (`<out>.partial.csv`) instead, so nothing measured is lost.
"""

from __future__ import annotations

import csv
import math
import os
import tomllib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from shardline.errors import InputError
from shardline.hardware import chip_from_dict
from shardline.io.safe_text import csv_safe
from shardline.io.tables import atomic_write, check_output_path

__all__ = [
    "Measured",
    "render_toml",
    "atomic_write",
    "check_output",
    "write_chip_file",
    "write_partial_csv",
    "partial_path",
]


class Measured:
    """A number with the source text the chip file keeps next to it."""

    def __init__(self, value: float, source: str) -> None:
        if hasattr(value, "item"):  # numpy scalars become Python numbers
            value = value.item()
        if not (isinstance(value, int | float) and math.isfinite(value) and value > 0):
            raise InputError(f"measured value {value!r} for {source!r} is not a positive number")
        self.value = value
        self.source = source


def _toml_value(value: object) -> str:
    if isinstance(value, Measured):
        return f"{{ value = {_toml_value(value.value)}, source = {_toml_value(value.source)} }}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        escaped = value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        return f'"{escaped}"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    raise TypeError(f"cannot write {value!r} to TOML")


def render_toml(data: dict[str, Any], header: str = "") -> str:
    """TOML text for nested dicts of scalars, lists and Measured values (tables after scalars)."""
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]

    def emit(table: dict[str, object], prefix: str) -> None:
        scalars = {k: v for k, v in table.items() if not isinstance(v, dict)}
        tables = {k: v for k, v in table.items() if isinstance(v, dict)}
        if prefix and scalars:
            lines.append("")
            lines.append(f"[{prefix}]")
        for key, value in scalars.items():
            lines.append(f"{key} = {_toml_value(value)}")
        for key, value in tables.items():
            emit(value, f"{prefix}.{key}" if prefix else key)

    emit(data, "")
    return "\n".join(lines) + "\n"


def check_output(
    path: str | Path,
    inputs: Iterable[str | Path] = (),
    *,
    force: bool = False,
    suffixes: tuple[str, ...] = (),
) -> Path:
    """An output path checked before any measurement starts, by the same rules as every other
    output (shardline.io.tables.check_output_path): not an input, in an existing directory, not
    an existing file unless `force`; the file is then placed exclusively unless `force`."""
    return check_output_path(path, inputs, force=force, suffixes=suffixes or (Path(path).suffix,))


def write_chip_file(path: Path, data: dict[str, object], header: str = "") -> None:
    """Validate `data` as a chip (the loader's own checks) and write it atomically."""
    text = render_toml(data, header)
    chip_from_dict(tomllib.loads(text), origin=str(path))  # never write a file the loader rejects

    def write(tmp: Path) -> None:
        tmp.write_text(text, encoding="utf-8")

    atomic_write(path, write)


def partial_path(out: Path) -> Path:
    return out.with_name(out.name + ".partial.csv")


MAX_PARTIAL_FILES = 100  # X.partial.csv, X.partial-2.csv, ... X.partial-100.csv


def free_partial_path(path: Path) -> Path:
    """`path` if nothing is there, else the first free X.partial-N.csv beside it: a file this run
    did not write (an earlier run's measurements, the user's own) is never replaced."""
    if not os.path.lexists(path):
        return path
    stem = path.name.removesuffix(".csv")
    for n in range(2, MAX_PARTIAL_FILES + 1):
        other = path.with_name(f"{stem}-{n}.csv")
        if not os.path.lexists(other):
            return other
    raise InputError(
        f"{path} and {MAX_PARTIAL_FILES - 1} more partial CSVs beside it exist; move them away"
    )


def write_partial_csv(path: Path, rows: list[dict[str, object]]) -> Path:
    """The measurements taken so far, one row each, raw SI numbers (atomic as well), in `path`
    or, where a file is there already, the next free name (free_partial_path): the path
    written."""
    path = free_partial_path(path)
    keys: list[str] = []
    for row in rows:
        keys.extend(k for k in row if k not in keys)

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=keys or ["kind"])
            writer.writeheader()
            writer.writerows({k: csv_safe(v) for k, v in row.items()} for row in rows)

    atomic_write(path, write)
    return path
