"""FSDP / ZeRO-3 (fsdp): the batch is split and weights, gradients and optimizer state are sharded;
each layer's weights are all-gathered before its forward and again before its backward matmul,
and its gradient is reduce-scattered, overlapped with that layer's compute ("How to Scale Your
Model", Part 5; ZeRO, Rajbhandari et al. 2020)."""

from __future__ import annotations

from shardline.strategies.base import CommTerm, LayerView, MemorySplit, Network
from shardline.strategies.dp import BatchSplit


class FullySharded(BatchSplit):
    name = "fsdp"
    word = "fsdp"
    help = "FSDP (ZeRO-3) shards"
    splits = ("batch",)
    mesh_rank = 1
    tier = "just outside tp: inside a node when tp x fsdp fits in one"
    comm_where = "overlapped"
    memory = MemorySplit("sharded", "sharded", "sharded", "dims", "dims")

    def layer_comm(self, view: LayerView, degree: int, net: Network) -> list[CommTerm]:
        """W = the layer's weight bytes on this device (before sharding): all-gather W before the
        forward and before dX = dY . W; reduce-scatter each dW. All overlapped with compute."""
        layer, n = view.layer, view.count
        wbytes = sum(layer.operand_bytes(w, view.dims) for w in layer.weights)
        out = []
        if wbytes:
            t = net.time("all_gather", wbytes, self.name)
            p = net.predicted("all_gather", wbytes, self.name)
            out.append(CommTerm(self.name, "all_gather", degree, n, wbytes, t, predicted_s=p))
        if not view.training:
            return out
        for i, (grad, gdims) in enumerate(view.grads):
            if grad.weights:
                t = net.time("all_gather", wbytes, self.name)
                out.append(
                    CommTerm(
                        self.name,
                        "all_gather",
                        degree,
                        n,
                        wbytes,
                        t,
                        phase="backward",
                        step=2 + i,
                        predicted_s=net.predicted("all_gather", wbytes, self.name),
                    )
                )
            if grad.grad_of is not None:
                gbytes = view.gradient_bytes(grad, gdims)
                t = net.time("reduce_scatter", gbytes, self.name)
                out.append(
                    CommTerm(
                        self.name,
                        "reduce_scatter",
                        degree,
                        n,
                        gbytes,
                        t,
                        phase="backward",
                        step=2 + i,
                        predicted_s=net.predicted("reduce_scatter", gbytes, self.name),
                    )
                )
        return out


STRATEGY = FullySharded()
