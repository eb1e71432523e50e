"""Tensor parallel (tp, Megatron-LM, Shoeybi et al. 2019): each layer's `tp_dims` are split; a
layer whose split dim is contracted ends with an all-reduce of its output (the row-parallel
matmul); in the backward pass the input gradient of a column-parallel matmul is all-reduced. Two
per transformer block forward, two more backward. A layer that leaves its output split along a dim
the next layer does not take split all-gathers it (and reduce-scatters its gradient). All on the
critical path: the next matmul needs the result."""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from math import ceil, prod

from shardline.basics.options import Precision
from shardline.errors import InputError
from shardline.ops.einsum import EinsumSpec, Operand, parse_einsum, require_two_operands
from shardline.sharding.layout import price_layout
from shardline.sharding.mesh import Mesh
from shardline.strategies.base import CommTerm, Knob, LayerView, MemorySplit, Network, Strategy
from shardline.workload.workload import Layer, Workload

__all__ = [
    "TensorParallel",
    "STRATEGY",
    "tp_split_dims",
    "tp_layer_collectives",
    "priced_collectives",
    "tensor_rooms",
    "tensor_room",
    "uneven_layer",
    "uneven_reason",
    "SERVING_DEGREES",
]


def tp_split_dims(layer: Layer, tp: int) -> tuple[str, ...]:
    """The dims that a tensor-parallel degree `tp` actually splits (factor > 1): the degree fills
    the first of `layer.tp_dims` up to its size, the rest goes to the next."""
    out: list[str] = []
    remaining = tp
    for dim in layer.tp_dims:
        if remaining <= 1:
            break
        factor = min(remaining, layer.dims[dim])
        if factor > 1:
            out.append(dim)
        remaining = ceil(remaining / factor)
    return tuple(out)


# The tensor-parallel degrees of a serving replica: inside one 8-GPU node, as the engines'
# published serving tables run (shardline.serving's search).
SERVING_DEGREES = (1, 2, 4, 8)


def tensor_rooms(workload: Workload) -> list[tuple[int, str]]:
    """Each layer's tensor-parallel room: the product of the sizes of its `tp_dims` (the degree
    fills them in order), with the layer's name."""
    return [
        (prod(layer.dims[d] for d in layer.tp_dims), layer.name)
        for layer, _ in workload.distinct_layers
        if layer.tp_dims
    ]


def tensor_room(workload: Workload) -> tuple[int, str] | None:
    """The largest tensor-parallel degree every layer can split, and the layer that sets it (a
    larger degree leaves devices with nothing to split); None when no layer has `tp_dims`."""
    return min(tensor_rooms(workload), default=None)


def _uneven_dim(layer: Layer, degree: int) -> tuple[str, int] | None:
    """Where `degree` fills the layer's `tp_dims` in order (as `split_dims` does) and a dim it
    reaches is not split exactly: (that dim, the ways left for it), when the ways do not divide
    the dim or the dim does not divide the ways. ("", ways) when the dims run out first."""
    remaining = degree
    for dim in layer.tp_dims:
        if remaining <= 1:
            return None
        size = layer.dims[dim]
        factor = min(remaining, size)
        if size % factor or remaining % factor:
            return dim, remaining
        remaining //= factor
    return None if remaining <= 1 else ("", remaining)


def uneven_layer(workload: Workload, degree: int) -> Layer | None:
    """The first layer that a tensor-parallel degree does not split evenly (`_uneven_dim`), None
    when it splits every layer evenly. THE tensor-parallel rule: the plan search and the training
    search try only even degrees (`TensorParallel.tries`), and so does the serving search
    (`serving_range`), as the engines need (vLLM: the heads divisible by tp, the KV heads
    divisible by it or replicated). A degree the user fixes in `plan` may be uneven up to the
    room (`TensorParallel.valid`, `check`); the split rounds up."""
    if degree == 1:
        return None
    return next(
        (
            layer
            for layer, _ in workload.distinct_layers
            if layer.tp_dims and _uneven_dim(layer, degree) is not None
        ),
        None,
    )


def uneven_reason(workload: Workload, degree: int, what: str | None = None) -> str | None:
    """Why `degree` is not an even tensor-parallel split of the workload (None when it is): the
    first layer it does not split evenly, the dim where it goes wrong and the ways left for it.
    `what` names the degree as the user gave it (default "tp=N"; serving: "--tp N")."""
    layer = uneven_layer(workload, degree)
    if layer is None:
        return None
    dim, ways = _uneven_dim(layer, degree) or ("", degree)
    sizes = " x ".join(f"{d}={layer.dims[d]:,}" for d in layer.tp_dims)
    where = f"layer {layer.name!r} of {workload.name}"
    head = f"{what or f'tp={degree}'} does not split {where} evenly: its tensor-parallel dims"
    if not dim:
        return f"{head} ({sizes}) give fewer than {degree:,} ways"
    size = layer.dims[dim]
    which = "which do not divide it" if size % min(ways, size) else "which it does not divide"
    return f"{head} ({sizes}) are filled in order and {dim}={size:,} is left {ways:,} ways, {which}"


def contracts_split(layer: Layer, tp: int) -> bool:
    """Does tensor parallelism of degree `tp` split a dim this einsum contracts?"""
    return bool(set(tp_split_dims(layer, tp)) & set(layer.parsed.contracted))


def gathers_output(layer: Layer, following: Layer, tp: int) -> bool:
    """Does this layer leave its output split along a tensor-parallel dim that the layer after it
    does not take split (Megatron pairs a column-parallel layer with a row-parallel one so that it
    never has to)? Then the output is all-gathered before the next layer."""
    sharded = set(tp_split_dims(layer, tp)) & set(layer.output.dims)
    taken = set(tp_split_dims(following, tp)) & {
        d
        for op in following.inputs
        if following.role(op.name) != "weight"  # activation, on-chip scores or cache
        for d in op.dims
    }
    return bool(sharded - taken)


@lru_cache(maxsize=4096)
def _annotated(spec: str, split: str, keep_output: bool) -> EinsumSpec:
    """The einsum with the split dim over mesh axis T in every operand, the output's only when it
    keeps the split (`keep_output`)."""
    p = require_two_operands(parse_einsum(spec), "a tensor-parallel split by a weight")

    def text(op: Operand, annotate: bool) -> str:
        dims = [f"{d}_T" if d == split and annotate else d for d in op.dims]
        return f"{op.name}[{','.join(dims)}]"

    return parse_einsum(f"{text(p.lhs, True)} * {text(p.rhs, True)} -> {text(p.out, keep_output)}")


Priced = tuple[str, float, float, float]  # kind, V bytes, line-rate seconds, realistic seconds


def priced_collectives(
    layer: Layer, full: Mapping[str, int], tp: int, keep_output: bool, net: Network
) -> tuple[Priced, ...] | None:
    """(kind, V bytes, seconds, realistic seconds) of each collective that
    `shardline.sharding.layout.price_layout` plans for the layer's einsum at sizes `full` (before
    tensor parallelism) with its one split dim over a mesh axis of `tp` devices, partial sums
    reduced in the output's dtype. None when the split is not one dim divided evenly by the whole
    degree (then Megatron's rule, `_rule`, prices it)."""
    axis = net.axis_network("tp")
    key = (axis, layer.spec, tuple(full.items()), tp, keep_output, tuple(layer.dtypes.items()))
    if key not in net.memo:
        net.memo[key] = _price(layer, full, tp, keep_output, net)
    return net.memo[key]


def _price(
    layer: Layer, full: Mapping[str, int], tp: int, keep_output: bool, net: Network
) -> tuple[Priced, ...] | None:
    split = tp_split_dims(layer, tp)
    axis = net.axis_network("tp")
    if len(split) != 1 or full[split[0]] % tp or axis is None:
        return None
    precision = Precision(
        operands=dict(layer.dtypes),
        compute=layer.compute_dtype,
        reduce=layer.dtypes[layer.output.name],
    )
    price = price_layout(
        _annotated(layer.spec, split[0], keep_output),
        full,
        Mesh((("T", tp),)),
        {"T": axis},
        net.chip,
        precision,
    )
    return tuple(
        (c.kind, float(c.bytes), float(c.t_s), float(c.cost.predicted_s)) for c in price.collectives
    )


def _rule(
    layer: Layer, full: Mapping[str, int], local: Mapping[str, int], tp: int, gather: bool
) -> list[tuple[str, float]]:
    """Megatron's rule: all-reduce the output (local sizes) when a split dim is contracted;
    all-gather it (full sizes) when it keeps a split dim the next layer does not take."""
    out: list[tuple[str, float]] = []
    if contracts_split(layer, tp):
        out.append(("all_reduce", layer.operand_bytes(layer.output.name, local)))
    if gather:
        out.append(("all_gather", layer.operand_bytes(layer.output.name, full)))
    return out


def _layer_collectives(
    layer: Layer,
    full: Mapping[str, int],
    local: Mapping[str, int],
    tp: int,
    gather: bool,
    net: Network,
) -> list[Priced]:
    priced = priced_collectives(layer, full, tp, not gather, net)
    if priced is not None:
        return list(priced)
    return [
        (kind, v, net.time(kind, v, "tp"), net.predicted(kind, v, "tp"))
        for kind, v in _rule(layer, full, local, tp, gather)
    ]


def tp_layer_collectives(view: LayerView, tp: int, net: Network) -> list[CommTerm]:
    """The tensor-parallel collectives of one layer, forward and backward (the one place that
    decides them): each einsum priced by the layout pricer with the split dim over the tp axis
    (row-parallel: all-reduce of the output; an output split along a dim the next layer does not
    take: all-gather, and in the backward pass the reduce-scatter of its gradient, same V; a
    column-parallel dX: all-reduce). All on the critical path."""
    layer, n = view.layer, view.count
    full_degrees = {**view.degrees, "tp": 1}
    gather = gathers_output(layer, view.following, tp)
    out: list[CommTerm] = []
    found = _layer_collectives(layer, view.local(layer, full_degrees), view.dims, tp, gather, net)
    for kind, v, t, p in found:
        out.append(CommTerm("tp", kind, tp, n, v, t, critical=True, predicted_s=p))
        if kind == "all_gather" and view.training:  # its transpose: reduce-scatter the gradient
            t_rs = net.time("reduce_scatter", v, "tp")
            p_rs = net.predicted("reduce_scatter", v, "tp")
            out.append(
                CommTerm(
                    "tp",
                    "reduce_scatter",
                    tp,
                    n,
                    v,
                    t_rs,
                    critical=True,
                    phase="backward",
                    step=1,
                    predicted_s=p_rs,
                )
            )
    if not view.training:
        return out
    for i, (grad, gdims) in enumerate(view.grads):
        full = view.local(grad, full_degrees)
        for kind, v, t, p in _layer_collectives(grad, full, gdims, tp, False, net):
            out.append(
                CommTerm(
                    "tp",
                    kind,
                    tp,
                    n,
                    v,
                    t,
                    critical=True,
                    phase="backward",
                    step=2 + i,
                    predicted_s=p,
                )
            )
    return out


class TensorParallel(Strategy):
    name = "tp"
    word = "tp"
    help = "tensor-parallel"
    splits = ("tensor",)
    mesh_rank = 0
    tier = "innermost: the scale-up network (NVLink, ICI) inside a node"
    comm_where = "critical path"
    memory = MemorySplit("dims", "dims", "dims", "dims", "dims")
    serving = True  # a serving replica is tp devices (shardline.serving)
    knobs = (
        Knob(
            "sequence_parallel",
            "--sequence-parallel",
            "tensor parallelism with reduce-scatter + all-gather, norms and dropouts split",
            switch=True,
        ),
        Knob(
            "tp_overlap",
            "--tp-overlap",
            "hide tensor-parallel collectives behind the GEMMs (default: on the critical path)",
            switch=True,
        ),
    )

    def bound(self, workload: Workload) -> int | None:
        room = tensor_room(workload)
        return None if room is None else room[0]

    def valid(self, workload: Workload, degree: int) -> bool:
        """A degree no larger than every layer's room (an uneven split rounds up)."""
        room = tensor_room(workload)
        return degree == 1 or room is None or degree <= room[0]

    def tries(self, workload: Workload, degree: int) -> bool:
        """The search tries even splits only (`uneven_layer`): a split that leaves devices idle
        or uneven is never the one to pick blind."""
        return uneven_layer(workload, degree) is None

    def serving_range(self, workload: Workload, max_devices: int) -> tuple[int, ...]:
        """A replica inside one node: the SERVING_DEGREES up to `max_devices` that split every
        layer evenly (the same rule as the plan search's)."""
        return tuple(d for d in SERVING_DEGREES if d <= max_devices and self.tries(workload, d))

    def check(self, workload: Workload, degree: int) -> None:
        room = tensor_room(workload)
        if degree > 1 and room is not None and degree > room[0]:
            limit, layer = room
            raise InputError(
                f"{self.name}={degree} is more than layer {layer!r} can split: its "
                f"tensor-parallel dims give at most {limit} ways; some devices would hold nothing"
            )

    def split_dims(
        self, layer: Layer, dims: dict[str, int], degree: int, batch_dim: str | None
    ) -> dict[str, int]:
        """Divide `layer.tp_dims` by the degree in order (the degree fills the first dim up to its
        size, the rest goes to the next); uneven splits round up."""
        out = dict(dims)
        remaining = degree
        for dim in layer.tp_dims:
            if remaining <= 1:
                break
            factor = min(remaining, out[dim])
            out[dim] = ceil(out[dim] / factor)
            remaining = ceil(remaining / factor)
        return out

    def layer_comm(self, view: LayerView, degree: int, net: Network) -> list[CommTerm]:
        return tp_layer_collectives(view, degree, net)


STRATEGY = TensorParallel()
