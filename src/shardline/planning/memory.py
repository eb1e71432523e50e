"""Memory of one pipeline stage on one device, as the plan's execution choices make it.

On top of `shardline.stack.memory_check` (weights, gradients, optimizer state and KV cache of the
stage's einsum layers, sharded as the strategies and the ZeRO stage say):
- transformer training keeps the activations of Korthikanti et al. 2022 per block and microbatch
  in flight (`shardline.realistic.activations`), which follow recompute and sequence parallelism;
- stage i of P holds min(m, P - i) microbatches in flight under 1F1B, times 1 + (P - 1)/(P V)
  with V interleaved chunks;
- with a vocabulary, the first stage holds the embedding table and the last the LM head (untied:
  each its own weights, gradients and optimizer state; split over tensor parallelism; tied, a
  stage holding both holds the shared table once, and a pipeline keeps a copy on each end) and, in
  training, the fp32 logits the loss keeps for the backward pass;
- FSDP (or ZeRO-3 over dp) holds two gathered blocks of weights (the one in use and the one
  prefetched);
- with expert parallelism and ZeRO >= 1, the dense (non-expert) weights' optimizer state is
  sharded over the expert-parallel ranks too: Megatron-Core's distributed optimizer shards the
  dense parameters over the whole data-parallel group (the ep ranks are data-parallel ranks for
  them) and the experts' over the expert-data-parallel group (dp here); NVIDIA/Megatron-LM
  megatron/core/optimizer/__init__.py, get_megatron_optimizer: `data_parallel_group=
  intra_dp_cp_group` for the dense parameter groups, `intra_expt_dp_group` for the experts'.
"""

from __future__ import annotations

from dataclasses import replace
from math import prod

from shardline.dense_first import moe_blocks_in
from shardline.dtypes import dtype_bits
from shardline.moe import EXPERT_AXIS, idle_params_per_rank
from shardline.realistic.activations import in_flight_microbatches, layer_activation_bytes
from shardline.realistic.block import LOSS_BYTES
from shardline.stack import DeviceShare, MemoryCheck, memory_check
from shardline.strategies import Degrees, device_share, local_dims
from shardline.strategies.cp import query_ways
from shardline.workload import Layer, Workload

__all__ = ["stage_memory"]

StageLayers = list[tuple[Layer, int]]


def stage_memory(
    workload: Workload,
    capacity_bytes: float,
    layers: StageLayers,
    deg: Degrees,
    where: tuple[int, int],
    execution: object,
) -> MemoryCheck:
    """`where` = (stage index, microbatches m); `execution` a shardline.options.Execution."""
    from shardline.options import Execution

    ex = execution if isinstance(execution, Execution) else Execution()
    (index, m), P = where, deg.stages
    share = device_share(
        workload, deg, m, zero=ex.zero,
        state_bytes=lambda dt: ex.state_bytes_per_param(dtype_bits(dt)),
    )  # fmt: skip
    held = in_flight_microbatches(P, m, ex.interleave, index) if workload.training else 1.0
    base = memory_check(workload, capacity_bytes, layers=layers, share=share, in_flight=held)
    model = workload.model
    gathers = deg["fsdp"] > 1 or (ex.zero == 3 and deg["dp"] > 1)
    if model is None:
        return _with_buffers(base, workload, deg, m, gathers)
    tp = deg["tp"]
    sp = ex.sequence_parallel and tp > 1
    first = workload.layers[0]
    local = local_dims(first, deg, batch_dim=workload.batch_dim, microbatches=m).get("B", 1)
    seqs = local / query_ways(workload, deg)  # cp: each device holds S / cp tokens of each
    activations = base.activations_bytes
    kv_cache = base.kv_cache_bytes / query_ways(workload, deg)  # T whole in einsums, but decode
    if workload.training:
        per_block = layer_activation_bytes(model, seqs, tp=tp, sp=sp, recompute=ex.recompute)
        activations = workload.blocks_in(layers) * per_block * held
    weights, grads, opt = base.weights_bytes, base.gradients_bytes, base.optimizer_bytes
    opt -= dense_optimizer_bytes(layers, share) * (1 - 1 / (ep := _zero_ep(workload, deg, ex.zero)))
    ends = (index == 0) + (index == P - 1)
    # MoE decode: the experts the batch does not touch, held (split over tp and ep), not read
    params = moe_blocks_in(workload, layers) * idle_params_per_rank(workload, deg) / tp
    bits = dtype_bits(model.weights_dtype)
    weights += params * bits / 8 / share.weights_ways
    if model.vocab and ends:
        # tied embeddings: one stage holding both ends holds the shared table once
        head = (1 if model.tied_embeddings else ends) * model.vocab * model.d_model / tp
        params += head
        weights += head * bits / 8 / share.weights_ways
        if workload.training:
            grads += head * bits / 8 / share.gradients_ways
            opt += head * ex.state_bytes_per_param(bits) / (share.optimizer_ways * ep)
            if index == P - 1:  # one microbatch's logits: the last stage runs its backward next
                activations += seqs * model.q_len * model.vocab / tp * LOSS_BYTES
    out = replace(
        base,
        params=base.params + params,
        weights_bytes=weights,
        gradients_bytes=grads,
        optimizer_bytes=opt,
        activations_bytes=activations,
        kv_cache_bytes=kv_cache,
    )
    return _with_buffers(out, workload, deg, m, gathers)


def _zero_ep(workload: Workload, deg: Degrees, zero: int) -> int:
    """The extra ways the dense optimizer state is sharded: ep under ZeRO >= 1 in training."""
    return deg.get("ep", 1) if workload.training and zero >= 1 else 1


def dense_optimizer_bytes(layers: StageLayers, share: DeviceShare) -> float:
    """The optimizer state of the stage's non-expert einsum weights on one device, as
    `shardline.stack.memory_check` counts it (sharded `share.optimizer_ways` ways)."""
    total = 0.0
    for layer, n in layers:
        if layer.axis_dims(EXPERT_AXIS):
            continue
        dims = share.dims(layer)
        for w in layer.weights:
            elements = prod(dims[d] for d in layer.operand(w).dims)
            total += n * elements * share.state_bytes(layer.dtypes[w])
    return total / share.optimizer_ways


def _with_buffers(
    mc: MemoryCheck, workload: Workload, deg: Degrees, m: int, gathers: bool
) -> MemoryCheck:
    """Add the two gathered blocks of weights of FSDP or ZeRO-3 and recompute the total."""
    buffers = 0.0
    if gathers:
        block = 0.0
        for layer, count in workload.distinct_layers:
            dims = local_dims(layer, deg, batch_dim=workload.batch_dim, microbatches=m)
            block += count * sum(layer.operand_bytes(w, dims) for w in layer.weights)
        buffers = 2 * block
    total = (
        mc.weights_bytes
        + mc.gradients_bytes
        + mc.optimizer_bytes
        + mc.activations_bytes
        + mc.kv_cache_bytes
        + buffers
    )
    return mc.with_total(total, buffers_bytes=buffers)
