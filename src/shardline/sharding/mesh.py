"""A device mesh: named axes (single upper-case letters) and their sizes, outer axis first."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

from shardline.basics.units import parse_count
from shardline.errors import InputError
from shardline.ops.einsum import check_size

__all__ = ["Mesh", "parse_mesh"]

_AXIS = re.compile(r"^[A-Z]$")


@dataclass(frozen=True)
class Mesh:
    """Named mesh axes in order (outer first), e.g. X=4, Y=2."""

    axes: tuple[tuple[str, int], ...]

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(name for name, _ in self.axes)

    @property
    def devices(self) -> int:
        return math.prod(size for _, size in self.axes)

    def size(self, axis: str) -> int:
        return dict(self.axes)[axis]

    def text(self) -> str:
        return ",".join(f"{name}={size}" for name, size in self.axes)


def _items(text: str | Mapping[str, int]) -> list[tuple[str, int | str]]:
    if isinstance(text, Mapping):
        return list(text.items())
    items: list[tuple[str, int | str]] = []
    for part in (p.strip() for p in str(text).split(",")):
        if not part:
            continue
        if "=" not in part:
            raise InputError(f"malformed --mesh entry {part!r}: expected AXIS=SIZE, e.g. X=4")
        name, size = (s.strip() for s in part.split("=", 1))
        items.append((name, size))
    return items


def parse_mesh(text: str | Mapping[str, int] | Mesh) -> Mesh:
    """`X=4,Y=2` (or a mapping) -> Mesh. Axis names are single upper-case letters."""
    if isinstance(text, Mesh):
        return text
    items = _items(text)
    if not items:
        raise InputError("the mesh is empty: give --mesh X=4 (or X=4,Y=2)")
    axes: list[tuple[str, int]] = []
    for name, raw in items:
        if not _AXIS.match(str(name)):
            raise InputError(
                f"mesh axis {name!r} must be a single upper-case letter (X, Y, Z, ...)"
            )
        if name in dict(axes):
            raise InputError(f"mesh axis {name} is declared twice")
        value = parse_count(raw, f"mesh axis {name}") if isinstance(raw, str) else raw
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"mesh axis {name} must have a positive integer size, got {raw!r}")
        axes.append((name, check_size(value, f"mesh axis {name}")))
    return Mesh(tuple(axes))
