"""The named-axis einsum notation: `A[M_X,K] * B[K,N_Y] -> C[M_X,N_Y]`.

A dimension is a name (letters and digits); `_` followed by upper-case mesh-axis letters says which
mesh axes split it (`M_XY` splits M over X and Y). Parsing checks the spec's own consistency; sizes
come separately (`parse_dims`, `check_dims`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from math import prod

from shardline.errors import InputError
from shardline.units import parse_count

__all__ = ["Operand", "EinsumSpec", "parse_einsum", "parse_dims", "check_dims", "MAX_DIM"]

# Larger than any real tensor dimension; catches typos such as an extra zero run.
MAX_DIM = 2**40

_OPERAND = re.compile(r"^\s*([A-Za-z][A-Za-z0-9]*)\s*\[\s*([^\]]*)\]\s*$")
_DIM = re.compile(r"^([A-Za-z][A-Za-z0-9]*)(?:_([A-Z]+))?$")


@dataclass(frozen=True)
class Operand:
    name: str
    dims: tuple[str, ...]
    shards: tuple[tuple[str, ...], ...]  # mesh axes splitting each dim; () = not split

    def axes(self) -> tuple[str, ...]:
        return tuple(axis for dim_axes in self.shards for axis in dim_axes)

    def shard_of(self, dim: str) -> tuple[str, ...]:
        return self.shards[self.dims.index(dim)] if dim in self.dims else ()

    def text(self) -> str:
        parts = [
            d + ("_" + "".join(a) if a else "") for d, a in zip(self.dims, self.shards, strict=True)
        ]
        return f"{self.name}[{','.join(parts)}]"


@dataclass(frozen=True)
class EinsumSpec:
    lhs: Operand
    rhs: Operand
    out: Operand

    @property
    def operands(self) -> tuple[Operand, Operand, Operand]:
        return (self.lhs, self.rhs, self.out)

    @property
    def all_dims(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for op in self.operands:
            for d in op.dims:
                seen.setdefault(d, None)
        return tuple(seen)

    @property
    def contracted(self) -> tuple[str, ...]:
        return tuple(d for d in self.all_dims if d not in self.out.dims)

    @property
    def mesh_axes(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for op in self.operands:
            for a in op.axes():
                seen.setdefault(a, None)
        return tuple(seen)

    @property
    def is_sharded(self) -> bool:
        return bool(self.mesh_axes)

    def text(self) -> str:
        return f"{self.lhs.text()} * {self.rhs.text()} -> {self.out.text()}"

    def flops(self, dims: dict[str, int]) -> int:
        """2 x the product of every distinct dim when a dim is contracted (one multiply-add each);
        1 x that product for a pure outer or elementwise product (docs/single-device.md)."""
        count = prod(dims[d] for d in self.all_dims)
        return 2 * count if self.contracted else count

    def elements(self, operand: Operand, dims: dict[str, int]) -> int:
        return prod(dims[d] for d in operand.dims)


def _parse_operand(text: str, where: str) -> Operand:
    match = _OPERAND.match(text)
    if not match:
        raise InputError(
            f"malformed operand {text.strip()!r} in {where}: expected NAME[DIM,DIM,...]"
        )
    name, body = match.group(1), match.group(2)
    dims: list[str] = []
    shards: list[tuple[str, ...]] = []
    for raw in body.split(","):
        token = raw.strip()
        dim_match = _DIM.match(token)
        if not dim_match:
            raise InputError(
                f"malformed dimension {token!r} in {name}: expected a name such as K, or M_X "
                "(M split over mesh axis X)"
            )
        dim, axes = dim_match.group(1), tuple(dim_match.group(2) or "")
        if dim in dims:
            raise InputError(f"dimension {dim} appears twice in operand {name}")
        dims.append(dim)
        shards.append(axes)
    op = Operand(name=name, dims=tuple(dims), shards=tuple(shards))
    axes_used = op.axes()
    for axis in set(axes_used):
        if axes_used.count(axis) > 1:
            raise InputError(f"mesh axis {axis} shards two dimensions of operand {name}")
    return op


def parse_einsum(spec: str) -> EinsumSpec:
    """Parse `LHS[..] * RHS[..] -> OUT[..]` and check it is a well-formed two-operand einsum."""
    if not isinstance(spec, str):
        raise InputError(f"an einsum spec must be a string, got {type(spec).__name__}")
    return _parse_einsum(spec)


@lru_cache(maxsize=4096)
def _parse_einsum(spec: str) -> EinsumSpec:
    """parse_einsum, once per distinct text (a stack of 10,000 layers has a few shapes)."""
    if "->" not in spec:
        raise InputError(f"malformed einsum {spec!r}: expected 'A[M,K] * B[K,N] -> C[M,N]'")
    left, right = spec.split("->", 1)
    inputs = [part for part in re.split(r"[*·,](?![^\[]*\])", left) if part.strip()]
    if len(inputs) != 2:
        raise InputError(f"malformed einsum {spec!r}: expected exactly two operands joined by '*'")
    lhs = _parse_operand(inputs[0], spec)
    rhs = _parse_operand(inputs[1], spec)
    out = _parse_operand(right, spec)
    names = [lhs.name, rhs.name, out.name]
    for name in names:
        if names.count(name) > 1:
            raise InputError(
                f"operand name {name} is repeated in {spec!r}; give each operand its own name"
            )
    for dim in out.dims:
        if dim not in lhs.dims and dim not in rhs.dims:
            raise InputError(f"output dimension {dim} of {out.name} appears in neither input")
    return EinsumSpec(lhs=lhs, rhs=rhs, out=out)


def parse_dims(text: str) -> dict[str, int]:
    """Parse `B=64,D=4096,F=4k` into sizes; each must be a positive integer below MAX_DIM."""
    dims: dict[str, int] = {}
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        if "=" not in item:
            raise InputError(f"malformed --dims entry {item!r}: expected NAME=SIZE")
        name, size = (s.strip() for s in item.split("=", 1))
        if not re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", name):
            raise InputError(f"malformed dimension name {name!r} in --dims")
        if name in dims:
            raise InputError(f"dimension {name} is sized twice in --dims")
        dims[name] = check_size(parse_count(size, f"dimension {name}"), f"dimension {name}")
    return dims


def check_size(value: int, what: str) -> int:
    if value <= 0:
        raise InputError(f"{what} must be a positive integer, got {value}")
    if value > MAX_DIM:
        shown = f"{value:.4g}" if value < 10**300 else f"a {len(str(value)):,}-digit number"
        raise InputError(f"{what} = {shown} is absurdly large (limit {MAX_DIM:,})")
    return value


def check_dims(spec: EinsumSpec, dims: dict[str, int]) -> None:
    """Every dim used is sized, and every dim sized is used."""
    missing = [d for d in spec.all_dims if d not in dims]
    if missing:
        raise InputError(
            f"dimension(s) {', '.join(missing)} used in the spec but not sized in --dims"
        )
    extra = [d for d in dims if d not in spec.all_dims]
    if extra:
        raise InputError(
            f"dimension(s) {', '.join(extra)} sized in --dims but not used in the spec"
        )
