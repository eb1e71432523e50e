"""What one device holds: weights, gradients, optimizer state, activations and the KV cache of
the layers it runs, cut as a `DeviceShare` says (the parallel strategies produce one).

docs/stack-and-plans.md. Weights `params*s_w`; activations; KV cache `2*L*n_kv*d_head*S*B*s_kv`;
training adds gradients and Adam state (fp32 master weights and two moments: 12 B per parameter,
so 16 B per parameter with bf16 weights and gradients; fp32 weights are their own master copy:
4 + 4 + 8 = 16 B). `shardline.workload.stack` checks a whole stack on one device with it, the
planner (`shardline.planning.memory`) a pipeline stage's share.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from shardline.basics.dtypes import dtype_bits
from shardline.workload.workload import Layer, Workload

__all__ = [
    "TermsMemo",
    "ADAM_MOMENTS_BYTES_PER_PARAM",
    "OPTIMIZER_BYTES_PER_PARAM",
    "optimizer_bytes_per_param",
    "DeviceShare",
    "MemoryCheck",
    "memory_check",
]

# Mixed-precision Adam keeps an fp32 master copy of each weight plus two fp32 moments:
# 4 + 4 + 4 = 12 B per parameter (ZeRO, Rajbhandari et al. 2020, section 3.1: "K = 12"). With bf16
# weights (2 B) and bf16 gradients (2 B) that is the 16 B per parameter of docs/stack-and-plans.md.
# Weights already stored in fp32 (or wider) are their own master copy: only the two moments,
# 8 B, so fp32 training is 4 + 4 + 8 = 16 B per parameter too (ZeRO, section 3.1).
ADAM_MOMENTS_BYTES_PER_PARAM = 8
FP32_MASTER_BYTES_PER_PARAM = 4
OPTIMIZER_BYTES_PER_PARAM = ADAM_MOMENTS_BYTES_PER_PARAM + FP32_MASTER_BYTES_PER_PARAM


def optimizer_bytes_per_param(weight_dtype: str) -> int:
    """Adam state per parameter: two fp32 moments, plus an fp32 master copy when the weight is
    stored narrower than fp32."""
    master = FP32_MASTER_BYTES_PER_PARAM if dtype_bits(weight_dtype) < 32 else 0
    return ADAM_MOMENTS_BYTES_PER_PARAM + master


def _own_dims(layer: Layer) -> Mapping[str, int]:
    return layer.dims


@dataclass(frozen=True)
class DeviceShare:
    """How one device's share of a stack is cut (the parallel strategies produce it:
    `shardline.strategies.device_share`): each layer's local sizes, and the ways weights, gradients
    and optimizer state are sharded (ZeRO-3). The default: the whole stack on one device."""

    dims: Callable[[Layer], Mapping[str, int]] = _own_dims
    weights_ways: int = 1
    gradients_ways: int = 1
    optimizer_ways: int = 1
    # sizes of the resident state (the KV cache): every sequence's cache stays on the device
    # whatever the microbatching, so only the batch splits between devices apply
    cache_dims: Callable[[Layer], Mapping[str, int]] | None = None
    # optimizer state in bytes per parameter, by the weight's dtype (default: mixed-precision Adam)
    state_bytes: Callable[[str], float] = optimizer_bytes_per_param


@dataclass(frozen=True)
class MemoryCheck:
    """Bytes held on one device. `activations_bytes`: for a forward pass, the largest live set of
    one layer (its activation inputs and output); for training, every activation input saved for the
    backward pass (per microbatch in flight) plus the largest output."""

    params: float
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    activations_bytes: float
    kv_cache_bytes: float
    total_bytes: float
    capacity_bytes: float
    fits: bool
    headroom_bytes: float
    working_set_bytes: float  # the seed 003 question: one input + one output + the layer's weight
    working_set_layer: str
    working_set_fits: bool
    buffers_bytes: float = 0.0  # gathered weights under FSDP (the layer in use and the next)
    # activations held in host memory (Execution.offload), not in total_bytes
    host_offload_bytes: float = 0.0

    def with_total(self, total_bytes: float, **changes: Any) -> MemoryCheck:
        """A copy with some terms changed and their new total, whether it fits and the headroom
        worked out again from it."""
        return replace(
            self,
            total_bytes=total_bytes,
            fits=total_bytes <= self.capacity_bytes,
            headroom_bytes=self.capacity_bytes - total_bytes,
            **changes,
        )


def _activation_bytes(layer: Layer, dims: Mapping[str, int], which: Iterable[str]) -> int:
    return sum(
        layer.operand_bytes(name, dims) for name in which if layer.role(name) == "activation"
    )


def memory_check(
    workload: Workload,
    capacity_bytes: float,
    *,
    layers: Sequence[tuple[Layer, int]] | None = None,
    share: DeviceShare | None = None,
    in_flight: float = 1,
    memo: TermsMemo | None = None,
) -> MemoryCheck:
    """Memory on one device holding `layers` [(layer, instances)] (default: the whole stack) cut
    as `share` says (local sizes per layer; weights, gradients and optimizer state sharded so
    many ways), with `in_flight` microbatches whose activations are kept; `memo`: the layers'
    terms, kept across calls whose shares cut the layers alike (`TermsMemo`)."""
    share = share or DeviceShare()
    if layers is None:
        from shardline.workload.dense_first import stack_layers

        layers = stack_layers(workload)
    params = weights = kv = saved = adam = 0.0
    live = biggest_out = 0
    working, working_layer = 0, layers[0][0].name if layers else ""
    terms: dict[tuple[object, ...], _MemoryTerms] = {} if memo is None else memo
    for layer, n in layers:
        one = terms.get(layer.content_key)
        if one is None:
            one = terms[layer.content_key] = _memory_terms(layer, share)
        params_one, weights_one, adam_one, kv_one, ins, out = one
        params += n * params_one
        adam += n * adam_one
        weights += n * weights_one
        kv += n * kv_one
        saved += n * ins
        live = max(live, ins + out)
        biggest_out = max(biggest_out, out)
        if ins + out + weights_one > working:
            working, working_layer = ins + out + weights_one, layer.name
    weights_dev = weights / share.weights_ways
    if workload.training:
        gradients = weights / share.gradients_ways  # gradients in the weights' dtype
        optimizer = adam / share.optimizer_ways
        activations = in_flight * saved + biggest_out
    else:
        gradients = optimizer = 0.0
        activations = float(live)
    total = weights_dev + gradients + optimizer + activations + kv
    return MemoryCheck(
        params=params,
        weights_bytes=weights_dev,
        gradients_bytes=gradients,
        optimizer_bytes=optimizer,
        activations_bytes=activations,
        kv_cache_bytes=kv,
        total_bytes=total,
        capacity_bytes=capacity_bytes,
        fits=total <= capacity_bytes,
        headroom_bytes=capacity_bytes - total,
        working_set_bytes=float(working),
        working_set_layer=working_layer,
        working_set_fits=working <= capacity_bytes,
    )


# one instance's parameters, weight bytes, optimizer-state bytes, KV-cache bytes, activation
# input bytes and activation output bytes
_MemoryTerms = tuple[int, int, float, int, int, int]
# `memory_check`'s terms of each layer by its content, kept across calls that cut layers alike
TermsMemo = dict[tuple[object, ...], _MemoryTerms]


def _memory_terms(layer: Layer, share: DeviceShare) -> _MemoryTerms:
    """What one instance of `layer` holds on the device `share` cuts (the share cuts a layer by
    its content, never its name: layers of the same content hold the same)."""
    dims = share.dims(layer)
    cache_dims = share.cache_dims(layer) if share.cache_dims is not None else dims
    return (
        sum(_elements(layer, w, dims) for w in layer.weights),
        sum(layer.operand_bytes(w, dims) for w in layer.weights),
        sum(_elements(layer, w, dims) * share.state_bytes(layer.dtypes[w]) for w in layer.weights),
        sum(layer.operand_bytes(c, cache_dims) for c in layer.cache),
        _activation_bytes(layer, dims, (op.name for op in layer.inputs)),
        _activation_bytes(layer, dims, (layer.output.name,)),
    )


def _elements(layer: Layer, name: str, dims: Mapping[str, int]) -> int:
    total = 1
    for d in layer.operand(name).dims:
        total *= dims[d]
    return total
