"""The named-axis einsum notation: `A[M_X,K] * B[K,N_Y] -> C[M_X,N_Y]`, or one input:
`x[B,D] -> y[B,D]` (an elementwise map) or `x[B,D] -> y[B]` (a reduction).

A dimension is a name (letters and digits); `_` followed by upper-case mesh-axis letters says which
mesh axes split it (`M_XY` splits M over X and Y). Parsing checks the spec's own consistency; sizes
come separately (`parse_dims`, `check_dims`).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from math import prod

from shardline.basics.units import parse_count
from shardline.errors import InputError

__all__ = [
    "Operand",
    "EinsumSpec",
    "parse_einsum",
    "parse_dims",
    "check_dims",
    "require_two_operands",
    "MAX_DIM",
]

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
    """Two inputs (`lhs * rhs -> out`) or one (`lhs -> out`: `second` is None). Code that needs two
    operands reads `rhs`, which refuses a single-input spec with an InputError."""

    lhs: Operand
    second: Operand | None
    out: Operand

    @property
    def is_unary(self) -> bool:
        """One input: an elementwise map (`x[B,D] -> y[B,D]`) or a reduction (`x[B,D] -> y[B]`)."""
        return self.second is None

    @property
    def rhs(self) -> Operand:
        if self.second is None:
            raise _single_input_error(self, "this step")
        return self.second

    @cached_property
    def inputs(self) -> tuple[Operand, ...]:
        return (self.lhs,) if self.second is None else (self.lhs, self.second)

    @cached_property
    def operands(self) -> tuple[Operand, ...]:
        """The inputs, then the output."""
        return (*self.inputs, self.out)

    @cached_property
    def all_dims(self) -> tuple[str, ...]:
        seen: dict[str, None] = {}
        for op in self.operands:
            for d in op.dims:
                seen.setdefault(d, None)
        return tuple(seen)

    @cached_property
    def contracted(self) -> tuple[str, ...]:
        return tuple(d for d in self.all_dims if d not in self.out.dims)

    @cached_property
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
        return " * ".join(op.text() for op in self.inputs) + f" -> {self.out.text()}"

    @property
    def flop_factor(self) -> int:
        """FLOPs per element of the product of every distinct dim: 2 when a two-operand einsum
        contracts a dim (one multiply-add each); 1 for an outer or elementwise product, and for a
        single input (one FLOP per element of a map; one add per input element of a reduction)."""
        return 2 if self.contracted and not self.is_unary else 1

    @property
    def unary_convention(self) -> str:
        """The FLOP convention of a single-input einsum in words ("" for two inputs)."""
        if not self.is_unary:
            return ""
        if self.contracted:
            return f"a reduction over {','.join(self.contracted)}: one add per input element"
        return "an elementwise map: one FLOP per output element"

    def flops(self, dims: dict[str, int]) -> int:
        """flop_factor x the product of every distinct dim (docs/single-device.md)."""
        return self.flop_factor * prod(dims[d] for d in self.all_dims)

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


def require_two_operands(spec: EinsumSpec, what: str) -> EinsumSpec:
    """`spec`, or an InputError when it has a single input and `what` needs two operands."""
    if spec.second is None:
        raise _single_input_error(spec, what)
    return spec


def _single_input_error(spec: EinsumSpec, what: str) -> InputError:
    return InputError(
        f"{spec.text()} has a single input: {what} needs a two-operand einsum such as "
        "'A[M,K] * B[K,N] -> C[M,N]'; a single-input einsum is priced on one device only "
        "(shardline einsum, unsharded)"
    )


def parse_einsum(spec: str) -> EinsumSpec:
    """Parse `LHS[..] * RHS[..] -> OUT[..]` or `IN[..] -> OUT[..]` and check it is well formed."""
    if not isinstance(spec, str):
        raise InputError(f"an einsum spec must be a string, got {type(spec).__name__}")
    return _parse_einsum(spec)


@lru_cache(maxsize=4096)
def _parse_einsum(spec: str) -> EinsumSpec:
    """parse_einsum, once per distinct text (a stack of 10,000 layers has a few shapes)."""
    if "->" not in spec:
        raise InputError(
            f"malformed einsum {spec!r}: expected 'A[M,K] * B[K,N] -> C[M,N]' or 'x[B,D] -> y[B]'"
        )
    left, right = spec.split("->", 1)
    inputs = [part for part in re.split(r"[*·,](?![^\[]*\])", left) if part.strip()]
    if len(inputs) not in (1, 2):
        raise InputError(
            f"malformed einsum {spec!r}: expected one input (x[B,D] -> y[B]) or two joined by '*'"
        )
    ins = [_parse_operand(text, spec) for text in inputs]
    out = _parse_operand(right, spec)
    names = [op.name for op in (*ins, out)]
    for name in names:
        if names.count(name) > 1:
            raise InputError(
                f"operand name {name} is repeated in {spec!r}; give each operand its own name"
            )
    for dim in out.dims:
        if not any(dim in op.dims for op in ins):
            if len(ins) == 1:
                raise InputError(
                    f"output dimension {dim} of {out.name} is not a dimension of the input "
                    f"{ins[0].name}: a single-input einsum cannot broadcast to a new dim"
                )
            raise InputError(f"output dimension {dim} of {out.name} appears in neither input")
    return EinsumSpec(lhs=ins[0], second=ins[1] if len(ins) == 2 else None, out=out)


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


def check_dims(spec: EinsumSpec, dims: Mapping[str, object]) -> None:
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
