"""Tensor parallel (tp, Megatron-LM, Shoeybi et al. 2019): each layer's `tp_dims` are split; a
layer whose split dim is contracted ends with an all-reduce of its output (the row-parallel
matmul); in the backward pass the input gradient of a column-parallel matmul is all-reduced. Two
per transformer block forward, two more backward. A layer that leaves its output split along a dim
the next layer does not take split all-gathers it (and reduce-scatters its gradient). All on the
critical path: the next matmul needs the result."""

from __future__ import annotations

from math import ceil

from shardline.strategies.base import CommTerm, LayerView, MemorySplit, Network, Strategy
from shardline.workload import Layer

__all__ = ["TensorParallel", "STRATEGY", "tp_split_dims", "tp_layer_collectives"]


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


def tp_layer_collectives(view: LayerView, tp: int, net: Network) -> list[CommTerm]:
    """The tensor-parallel collectives of one layer, forward and backward (the one place that
    decides them). V = the output's bytes at local sizes for a row-parallel all-reduce (forward:
    the layer's output; backward: dX of a column-parallel matmul); V = the output at full tp sizes
    for the gather of an output the next layer does not take split, and its reduce-scatter."""
    layer, n = view.layer, view.count
    out: list[CommTerm] = []
    if contracts_split(layer, tp):  # row-parallel: all-reduce the output
        v = layer.operand_bytes(layer.output.name, view.dims)
        t = net.time("all_reduce", v, "tp")
        out.append(CommTerm("tp", "all_reduce", tp, n, v, t, critical=True))
    if gathers_output(layer, view.following, tp):  # column-parallel, nothing to pair
        full = view.local(layer, {**view.degrees, "tp": 1})
        gather_v = layer.operand_bytes(layer.output.name, full)
        t = net.time("all_gather", gather_v, "tp")
        out.append(CommTerm("tp", "all_gather", tp, n, gather_v, t, critical=True))
        if view.training:  # backward of the all-gather: reduce-scatter the output's gradient
            t = net.time("reduce_scatter", gather_v, "tp")
            out.append(
                CommTerm(
                    "tp",
                    "reduce_scatter",
                    tp,
                    n,
                    gather_v,
                    t,
                    critical=True,
                    phase="backward",
                    step=1,
                )
            )
    if not view.training:
        return out
    for i, (grad, gdims) in enumerate(view.grads):
        if contracts_split(grad, tp):  # column-parallel dX: all-reduce
            v = grad.operand_bytes(grad.output.name, gdims)
            t = net.time("all_reduce", v, "tp")
            out.append(
                CommTerm(
                    "tp", "all_reduce", tp, n, v, t, critical=True, phase="backward", step=2 + i
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
