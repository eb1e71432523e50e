"""One block's weights on one device under a probe key's degrees, as the training search's
vectorized model counts them: each weight layer's count, gathered bytes and weight-gradient
bytes as reduced (the FSDP gathers, the gradient reduction and FSDP2's copies read them), and
the block's parameters and bytes."""

from __future__ import annotations

from dataclasses import dataclass
from math import prod
from typing import Any

from shardline.strategies import Degrees
from shardline.workload.workload import Workload, backward_layers

__all__ = ["BlockWeights", "block_weights"]


@dataclass(frozen=True)
class BlockWeights:
    """One block's weight layers on one device under the inner degrees: (count, weight bytes,
    [(has weights, weight-gradient bytes as reduced, or 0) per backward einsum]), its parameters
    and bytes."""

    layers: tuple[tuple[int, float, tuple[tuple[bool, float], ...]], ...]
    params: float
    nbytes: float


def block_weights(
    w: Workload,
    inner: Degrees,
    grads_memo: dict[Any, list[Any]] | None = None,
    layers: Any = None,
    reduce_dtype: str | None = None,
) -> BlockWeights:
    """`inner`: a probe key's degrees (`inner_degrees`); `layers`: [(layer, instances)] (default
    the block's distinct layers); `grads_memo`: each layer's backward einsums (kept across calls,
    by name and content); gradients in `reduce_dtype` (`base.reduced_gradient_bytes`)."""
    from shardline.strategies import local_dims
    from shardline.strategies.base import reduced_gradient_bytes

    memo = {} if grads_memo is None else grads_memo
    out = []
    params = nbytes = 0.0
    for layer, count in w.distinct_layers if layers is None else layers:
        dims = local_dims(layer, inner, batch_dim=w.batch_dim)
        wbytes = float(sum(layer.operand_bytes(x, dims) for x in layer.weights))
        if not wbytes:
            continue
        nbytes += count * wbytes
        params += count * sum(prod(dims[d] for d in layer.operand(x).dims) for x in layer.weights)
        grads = []
        key = (layer.name, layer.content_key)
        if key not in memo:
            memo[key] = backward_layers(layer)
        for grad in memo[key]:
            gbytes = 0.0
            if grad.grad_of is not None:
                gdims = local_dims(grad, inner, batch_dim=w.batch_dim)
                gbytes = float(reduced_gradient_bytes(grad, gdims, reduce_dtype))
            grads.append((bool(grad.weights), gbytes))
        out.append((count, wbytes, tuple(grads)))
    return BlockWeights(tuple(out), params, nbytes)
