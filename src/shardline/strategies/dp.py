"""Data parallel (dp): the batch is split; every device holds all weights; training all-reduces
the weight gradients once per step, overlapped with the backward pass ("How to Scale Your Model",
Part 5: "not on the critical path"). On the FSDP shard when both are used."""

from __future__ import annotations

from math import ceil
from types import MappingProxyType

from shardline.strategies.base import (
    CommTerm,
    Knob,
    LayerView,
    MemorySplit,
    Network,
    Strategy,
)
from shardline.workload.workload import Layer, Workload


def batch_dims(layer: Layer, batch_dim: str | None) -> tuple[str, ...]:
    """The layer's dims on the logical axis "batch" (`Layer.axes`), else the workload's
    `batch_dim` when the layer has it."""
    named = layer.axis_dims("batch")
    if named:
        return named
    return (batch_dim,) if batch_dim is not None and batch_dim in layer.dims else ()


def split_batch(
    layer: Layer, dims: dict[str, int], degree: int, batch_dim: str | None
) -> dict[str, int]:
    """Divide the batch dims by `degree`, rounding up (the slowest device sets the pace)."""
    out = dict(dims)
    for dim in batch_dims(layer, batch_dim):
        out[dim] = ceil(out[dim] / degree)
    return out


def batch_degree_ok(workload: Workload, degree: int) -> bool:
    """A batch split needs a batch dim and at least one item per device."""
    return degree == 1 or (workload.batch_dim is not None and degree <= workload.batch)


def plain_batch_split(s: Strategy) -> bool:
    """A strategy that splits the batch dims alone, as `split_batch` (dp, fsdp): a layer's local
    sizes read its degree only through the product of such degrees (`local_dims` rounds each
    split up, and ceil(ceil(x / a) / b) = ceil(x / (a b)))."""
    return "batch" in s.splits and type(s).split_dims is BatchSplit.split_dims


class BatchSplit(Strategy):
    """A strategy that splits the batch (dp, fsdp): valid with a batch dim and one item per
    device, and each layer's batch dims divided by the degree."""

    def valid(self, workload: Workload, degree: int) -> bool:
        return batch_degree_ok(workload, degree)

    def split_dims(
        self, layer: Layer, dims: dict[str, int], degree: int, batch_dim: str | None
    ) -> dict[str, int]:
        return split_batch(layer, dims, degree, batch_dim)


class DataParallel(BatchSplit):
    name = "dp"
    word = "dp"
    help = "data-parallel replicas"
    splits = ("batch",)
    mesh_rank = 2
    tier = "outside tp and fsdp: scale-out between nodes once tp x fsdp fills one"
    comm_where = "overlaps the last backward pass"
    # ZeRO's all-gather of the updated parameters (planning.combine.exposed_gather_s)
    comm_where_by_kind = MappingProxyType(
        {"all_gather": "after the optimizer step; ZeRO-3 also before each layer"}
    )
    memory = MemorySplit("replicated", "replicated", "replicated", "dims", "dims")
    knobs = (
        Knob(
            "zero",
            "--zero",
            "ZeRO stage over dp: 1 shards optimizer state, 2 also gradients, 3 also weights",
            choices=("0", "1", "2", "3"),
            parse=int,
        ),
        Knob(
            "overlap_param_gather",
            "--overlap-param-gather",
            "with --zero >= 1: all-gather the updated parameters behind the next step's first "
            "forward pass (default: on; --no-overlap-param-gather waits for it)",
            switch=True,
        ),
        Knob(
            "overlap_grad_reduce",
            "--overlap-grad-reduce",
            "reduce the gradients over dp behind the last backward pass (default: on, but where "
            "the framework waits for it: MaxText on GPUs; --no-overlap-grad-reduce waits for it)",
            switch=True,
        ),
    )

    def layer_comm(self, view: LayerView, degree: int, net: Network) -> list[CommTerm]:
        """Per weight gradient dW (V bytes): one all-reduce of V / (ways the gradients are
        sharded) over the dp axis, once per step. With ZeRO (Rajbhandari et al. 2020) the
        all-reduce becomes a reduce-scatter of the gradients and an all-gather of the updated
        weights (the same volume); ZeRO-3 also all-gathers each layer's weights before its
        forward and its backward, per microbatch, overlapped like FSDP's (1.5x the volume)."""
        if not view.training:
            return []
        out = []
        kinds = ("reduce_scatter", "all_gather") if view.zero else ("all_reduce",)
        for i, (grad, gdims) in enumerate(view.grads):
            if grad.grad_of is None:
                continue
            shard = view.gradient_bytes(grad, gdims) / view.gradient_ways
            shard /= view.degrees.get("cp", 1)  # cp reduce-scattered it first (strategies/cp.py)
            for kind in kinds:
                out.append(self.term(net, kind, degree, view.count, shard, 2 + i, once=True))
        if view.zero == 3:
            wbytes = sum(view.layer.operand_bytes(w, view.dims) for w in view.layer.weights)
            if wbytes:
                out.append(self.term(net, "all_gather", degree, view.count, wbytes, 0))
                out.append(self.term(net, "all_gather", degree, view.count, wbytes, 2))
        return out


STRATEGY = DataParallel()
