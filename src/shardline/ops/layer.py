"""A layer: one two-operand einsum with sizes, per-operand dtypes and the role of each operand.

A *weight* (a parameter, resident on the device), a *cache* (the KV cache), *on-chip* (never
written to HBM, e.g. attention scores inside a flash-attention kernel) or, by default, an
*activation*. Dims can be named by logical axis (`Layer.axes`: batch, seq, heads, ...) so that
parallel strategies split logical axes. `backward_layers` derives the backward einsums.

docs/stack-and-plans.md. Pure: no printing, no files.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from itertools import accumulate
from math import prod
from typing import Any

from shardline.basics.dtypes import canonical_dtype, dtype_bits
from shardline.basics.kinds import KERNELS, LAYER_PHASES, Kernel, LayerPhase
from shardline.basics.units import short
from shardline.errors import InputError
from shardline.ops.einsum import (
    EinsumSpec,
    Operand,
    check_dims,
    check_size,
    parse_einsum,
    require_two_operands,
)

__all__ = [
    "Layer",
    "LOGICAL_AXES",
    "backward_layers",
    "backward_stack",
    "distinct",
    "layer_range",
    "matmul_layer",
]

# Logical axes a layer can name its dims by (`Layer.axes`); strategies split logical axes.
LOGICAL_AXES = (
    "batch",
    "seq",
    "heads",
    "kv_heads",
    "head_dim",
    "model",
    "ffn",
    "vocab",
    "experts",
    "expert_tokens",  # a MoE layer's experts and one expert's token slots (workload/moe.py)
)


def _names(value: Sequence[str] | str | None, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, Sequence) or not all(isinstance(v, str) for v in value):
        raise InputError(f"{what} must be a name or a list of names, got {short(value)}")
    out = tuple(value)
    if len(set(out)) != len(out):
        raise InputError(f"{what} lists an operand twice: {', '.join(out)}")
    return out


def _sizes(where: str, parsed: EinsumSpec, raw: Mapping[str, object]) -> dict[str, int]:
    """Positive integer sizes (an integral float is accepted) that cover the einsum's dims."""
    dims: dict[str, int] = {}
    for dim, size in dict(raw).items():
        if isinstance(size, bool) or not isinstance(size, int):
            if isinstance(size, float) and size.is_integer():
                size = int(size)
            else:
                raise InputError(
                    f"{where}: dimension {dim} must be a positive integer, got {size!r}"
                )
        dims[str(dim)] = check_size(int(size), f"{where}: dimension {dim}")
    try:
        check_dims(parsed, dims)
    except InputError as exc:
        raise InputError(f"{where} ({parsed.text()}): {exc}".replace(" in --dims", "")) from None
    return dims


def _dtypes(
    where: str, operand_names: list[str], base: str, given: Mapping[str, str]
) -> dict[str, str]:
    unknown = set(given) - set(operand_names)
    if unknown:
        raise InputError(
            f"{where}: dtypes name unknown operand(s) {', '.join(sorted(unknown))}; "
            f"operands are {', '.join(operand_names)}"
        )
    return {name: canonical_dtype(given.get(name, base)) for name in operand_names}


def _roles(
    where: str, operand_names: list[str], *given: Sequence[str] | str | None
) -> tuple[tuple[str, ...], ...]:
    """(weights, cache, onchip): each names operands, and no operand has two roles."""
    weights, cache, onchip = (
        _names(v, f"{where}: {role}") for v, role in zip(given, ROLES, strict=True)
    )
    for role, names in zip(ROLES, (weights, cache, onchip), strict=True):
        bad = [n for n in names if n not in operand_names]
        if bad:
            raise InputError(
                f"{where}: {role} names unknown operand(s) {', '.join(bad)}; "
                f"operands are {', '.join(operand_names)}"
            )
    for a_role, a, b_role, b in (
        ("weights", weights, "cache", cache),
        ("weights", weights, "onchip", onchip),
        ("cache", cache, "onchip", onchip),
    ):
        both = set(a) & set(b)
        if both:
            raise InputError(
                f"{where}: operand {', '.join(sorted(both))} is both {a_role} and {b_role}"
            )
    return weights, cache, onchip


def _named_dims(
    where: str,
    parsed: EinsumSpec,
    dims: Mapping[str, int],
    tp_given: Sequence[str] | str | None,
    axes_given: Mapping[str, str],
) -> tuple[tuple[str, ...], dict[str, str]]:
    """The tensor-parallel dims and the logical-axis names: each a dimension of the layer."""
    tp_dims = _names(tp_given, f"{where}: tp_dims")
    bad_tp = [d for d in tp_dims if d not in dims]
    if bad_tp:
        raise InputError(
            f"{where}: tp_dim {', '.join(bad_tp)} is not a dimension of {parsed.text()}"
        )
    axes = {str(k): str(v) for k, v in dict(axes_given).items()}
    bad_axes = [f"{d}={a}" for d, a in axes.items() if d not in dims or a not in LOGICAL_AXES]
    if bad_axes:
        raise InputError(
            f"{where}: axes {', '.join(bad_axes)}: each key must be a dimension and each "
            f"value one of {', '.join(LOGICAL_AXES)}"
        )
    return tp_dims, axes


ROLES = ("weights", "cache", "onchip")


class HashedKey(tuple[object, ...]):
    """A tuple that computes its hash once (the plain tuple's hash, and equal to it): a nested
    key the caches hash on every lookup."""

    def __hash__(self) -> int:
        try:
            return self._hash
        except AttributeError:
            self._hash: int = tuple.__hash__(self)
            return self._hash

    def __reduce__(self) -> tuple[object, ...]:
        # pickled without the hash: a string's hash differs from one process to the next
        return (HashedKey, (tuple(self),))


@dataclass(frozen=True)
class Layer:
    """One einsum of a stack: `Layer("up", "x[B,S,D] * w[D,F] -> h[B,S,F]", dims, weights=("w",))`.

    `count` repeats the layer in place (count distinct layers of the same shape, each with its own
    weights). `tp_dims` are the dims tensor parallelism splits, in order (the degree fills the
    first, then the next). `grad_of` names the weight whose gradient a backward layer produces.
    `axes` names dims by logical axis ({"B": "batch", "F": "ffn"}), so that strategies split
    logical axes: data parallelism splits the dims named "batch".
    """

    name: str
    spec: str
    dims: Mapping[str, int]
    dtype: str = "bf16"
    dtypes: Mapping[str, str] = field(default_factory=dict)
    compute_dtype: str | None = None
    weights: tuple[str, ...] = ()
    cache: tuple[str, ...] = ()
    onchip: tuple[str, ...] = ()
    count: int = 1
    tp_dims: tuple[str, ...] = ()
    phase: LayerPhase = "forward"
    grad_of: str | None = None
    axes: Mapping[str, str] = field(default_factory=dict)  # dim -> logical axis (LOGICAL_AXES)
    kernel: Kernel = "gemm"  # or "attention": part of one fused attention kernel
    constant: tuple[str, ...] = ()  # inputs that take no gradient (a mask of routing decisions)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.strip():
            raise InputError(f"a layer needs a non-empty name (a string), got {short(self.name)}")
        where = f"layer {self.name!r}"
        for table in ("dims", "dtypes", "axes"):
            if not isinstance(getattr(self, table), Mapping):
                raise InputError(
                    f"{where}: {table} must be a mapping, got {short(getattr(self, table))}"
                )
        parsed = require_two_operands(parse_einsum(self.spec), "a workload layer")
        dims = _sizes(where, parsed, self.dims)
        operand_names = [op.name for op in parsed.operands]
        base = canonical_dtype(self.dtype)
        per_op = _dtypes(where, operand_names, base, self.dtypes)
        roles = _roles(where, operand_names, self.weights, self.cache, self.onchip)
        if self.phase == "forward" and parsed.out.name in roles[0]:
            raise InputError(f"{where}: the output {parsed.out.name} cannot be a weight")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise InputError(f"{where}: count must be a positive integer, got {short(self.count)}")
        check_size(self.count, f"{where}: count")
        tp_dims, axes = _named_dims(where, parsed, dims, self.tp_dims, self.axes)
        if self.kernel not in KERNELS:
            raise InputError(f"{where}: kernel must be gemm or attention, got {self.kernel!r}")
        if self.phase not in LAYER_PHASES:
            raise InputError(f"{where}: phase must be forward or backward, got {self.phase!r}")
        if self.compute_dtype is not None:
            compute = canonical_dtype(self.compute_dtype)
        else:  # the widest input's dtype (bf16 activations with int8 weights compute in bf16)
            lhs, rhs = per_op[parsed.lhs.name], per_op[parsed.rhs.name]
            compute = rhs if dtype_bits(rhs) > dtype_bits(lhs) else lhs
        fields = {"name": str(self.name).strip(), "spec": parsed.text(), "dims": dims}
        fields |= {"dtype": base, "dtypes": per_op, "compute_dtype": compute}
        fields |= dict(zip(("weights", "cache", "onchip"), roles, strict=True))
        fields |= {"tp_dims": tp_dims, "axes": axes, "constant": tuple(self.constant)}
        if any(c not in operand_names[:2] or c in self.weights for c in self.constant):
            raise InputError(f"{where}: constant names inputs that are not weights")
        for key, value in fields.items():
            object.__setattr__(self, key, value)

    @cached_property
    def parsed(self) -> EinsumSpec:
        return parse_einsum(self.spec)

    @cached_property
    def content_key(self) -> tuple[object, ...]:
        """Every field but the name: two layers with the same key cost the same (the plan search
        prices such layers once). Its hash is computed once (`HashedKey`): the caches look it up
        hundreds of thousands of times per search."""
        return HashedKey(
            (
                self.spec,
                tuple(self.dims.items()),
                self.dtype,
                tuple(self.dtypes.items()),
                self.compute_dtype,
                self.weights,
                self.cache,
                self.onchip,
                self.count,
                self.tp_dims,
                self.phase,
                self.grad_of,
                tuple(self.axes.items()),
                self.kernel,
                self.constant,
            )
        )

    def axis_dims(self, axis: str) -> tuple[str, ...]:
        """The dims this layer names as logical axis `axis`, in dim order."""
        return self._dims_by_axis.get(axis, ())

    @cached_property
    def _dims_by_axis(self) -> dict[str, tuple[str, ...]]:
        out: dict[str, tuple[str, ...]] = {}
        for d in self.dims:
            if d in self.axes:
                out[self.axes[d]] = (*out.get(self.axes[d], ()), d)
        return out

    def operand(self, name: str) -> Operand:
        for op in self.parsed.operands:
            if op.name == name:
                return op
        raise KeyError(name)

    def role(self, name: str) -> str:
        """ "weight", "cache", "onchip" or "activation"."""
        if name in self.weights:
            return "weight"
        if name in self.cache:
            return "cache"
        if name in self.onchip:
            return "onchip"
        return "activation"

    def operand_bytes(self, name: str, dims: Mapping[str, int] | None = None) -> int:
        """Bytes of one operand at these sizes (default: the layer's own), in whole bytes."""
        sizes = self.dims if dims is None else dims
        elements = prod(sizes[d] for d in self.operand(name).dims)
        return (elements * dtype_bits(self.dtypes[name]) + 7) // 8

    def operand_elements(self, name: str) -> int:
        return prod(self.dims[d] for d in self.operand(name).dims)

    @property
    def inputs(self) -> tuple[Operand, Operand]:
        return (self.parsed.lhs, self.parsed.rhs)

    @property
    def output(self) -> Operand:
        return self.parsed.out

    def params(self) -> int:
        """Parameters of one instance: elements of its weight operands (forward layers)."""
        if self.phase != "forward":
            return 0
        return sum(self.operand_elements(w) for w in self.weights)

    def weight_bytes(self) -> int:
        return sum(self.operand_bytes(w) for w in self.weights) if self.phase == "forward" else 0

    def renamed(self, name: str) -> Layer:
        """This layer under another name, sharing its checked content (every field but the name,
        and what is derived from them): layers that differ only in name are checked once."""
        if not isinstance(name, str) or not name.strip():
            raise InputError(f"a layer needs a non-empty name (a string), got {short(name)}")
        self.content_key, self.parsed, self._dims_by_axis  # worked out once, shared  # noqa: B018
        out = object.__new__(Layer)
        out.__dict__.update(self.__dict__)
        object.__setattr__(out, "name", name.strip())
        return out

    def with_dims(self, **sizes: int) -> Layer:
        dims = dict(self.dims)
        for name, size in sizes.items():
            if name in dims:
                dims[name] = size
        return replace(self, dims=dims)


def backward_layers(layer: Layer) -> list[Layer]:
    """The backward einsums of `C = A (x) B`: dA = dC (x) B -> A and dB = A (x) dC -> B, one per
    input that needs a gradient (activations and weights; a cache and a `constant` need none).
    Each has the same
    set of dims, so the same FLOPs: backward = 2 x forward ("How to Scale Your Model", Part 4:
    training FLOPs ~ 6 x params x tokens, forward 2)."""
    a, b, c = layer.parsed.lhs, layer.parsed.rhs, layer.parsed.out
    dc = f"d{c.name}"
    grad_onchip = c.name in layer.onchip
    out: list[Layer] = []
    for target, other in ((a, b), (b, a)):
        if layer.role(target.name) == "cache" or target.name in layer.constant:
            continue
        d_target = f"d{target.name}"
        grad_in = f"{dc}[{','.join(c.dims)}]"
        kept = f"{other.name}[{','.join(other.dims)}]"
        result = f"{d_target}[{','.join(target.dims)}]"
        spec = (
            f"{grad_in} * {kept} -> {result}" if other is b else f"{kept} * {grad_in} -> {result}"
        )
        weights = tuple(w for w in (other.name,) if w in layer.weights)
        cache = tuple(x for x in (other.name,) if x in layer.cache)
        onchip = tuple(
            x
            for x, on in (
                (dc, grad_onchip),
                (other.name, other.name in layer.onchip),
                (d_target, target.name in layer.onchip),
            )
            if on
        )
        is_weight = target.name in layer.weights
        out.append(
            Layer(
                name=f"{layer.name}.grad_{target.name}",
                spec=spec,
                dims=layer.dims,
                dtype=layer.dtype,
                dtypes={
                    dc: layer.dtypes[c.name],
                    other.name: layer.dtypes[other.name],
                    d_target: layer.dtypes[target.name],
                },
                compute_dtype=layer.compute_dtype,
                weights=weights,
                cache=cache,
                onchip=onchip,
                count=layer.count,
                tp_dims=layer.tp_dims,
                axes=layer.axes,
                kernel=layer.kernel,
                phase="backward",
                grad_of=target.name if is_weight else None,
            )
        )
    return out


def backward_stack(layers: Sequence[Layer]) -> list[Layer]:
    """`backward_layers` of each layer, the last layer's first (the backward pass's order).
    Layers of the same content derive theirs once; the others are renamed copies (a backward
    layer is named after its forward layer: "up.grad_w")."""
    derived: dict[tuple[object, ...], tuple[Layer, list[Layer]]] = {}
    out: list[Layer] = []
    for layer in reversed(layers):
        hit = derived.get(layer.content_key)
        if hit is None:
            grads = backward_layers(layer)
            derived[layer.content_key] = (layer, grads)
            out.extend(grads)
        else:
            first, grads = hit
            out.extend(g.renamed(layer.name + g.name[len(first.name) :]) for g in grads)
    return out


def distinct(layers: Sequence[Layer]) -> list[tuple[Layer, int]]:
    """The layers, those of the same content (all but the name) merged: [(the first such layer,
    the sum of their counts)], in order of first appearance."""
    merged: dict[tuple[object, ...], list[Any]] = {}
    for layer in layers:
        merged.setdefault(layer.content_key, [layer, 0])[1] += layer.count
    return [(layer, n) for layer, n in merged.values()]


def layer_range(layers: Sequence[Layer], a: int, b: int) -> tuple[list[tuple[Layer, int]], Layer]:
    """The layer instances at positions [a, b) of a flat stack (the block `layers`, each `count`
    times, repeated without end) as [(layer, instances)] in order of first appearance, and the
    layer at position b - 1. Arithmetic on the counts, never the flat list: a count of 1e9 costs
    what a count of 1 does."""
    counts = [layer.count for layer in layers]
    starts = [0, *accumulate(counts)][:-1]
    size = sum(counts)

    def before(j: int, x: int) -> int:  # instances of layer j at positions [0, x)
        blocks, offset = divmod(x, size)
        return blocks * counts[j] + min(max(offset - starts[j], 0), counts[j])

    first = bisect_right(starts, a % size) - 1
    found: dict[int, int] = {}
    if b - a >= size:  # every layer appears: count each in closed form
        for step in range(len(layers)):
            j = (first + step) % len(layers)
            found[j] = before(j, b) - before(j, a)
    else:  # less than a block: walk the runs from a to b (at most one wrap)
        pos, j = a, first
        while pos < b:
            end = pos - pos % size + starts[j] + counts[j]
            found[j] = found.get(j, 0) + min(end, b) - pos
            pos, j = min(end, b), (j + 1) % len(layers)
    last = layers[bisect_right(starts, (b - 1) % size) - 1]
    return [(layers[j], n) for j, n in found.items() if n > 0], last


def matmul_layer(
    name: str,
    m: int,
    k: int,
    n: int,
    *,
    dtype: str = "bf16",
    count: int = 1,
    tp_dim: str | None = None,
    **kwargs: Any,
) -> Layer:
    """x[M,K] * w[K,N] -> y[M,N] with w a weight; tensor parallelism splits the larger of K, N."""
    if tp_dim is None:
        tp_dim = "N" if n >= k else "K"
    return Layer(
        name,
        "x[M,K] * w[K,N] -> y[M,N]",
        {"M": m, "K": k, "N": n},
        dtype=dtype,
        weights=("w",),
        count=count,
        tp_dims=(tp_dim,),
        **kwargs,
    )
