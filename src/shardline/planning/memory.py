"""Memory of one pipeline stage on one device, as the plan's execution choices make it: one
formula over arrays, which the plan engine calls for one layout and the training search for every
layout at once.

A stage i of P holds, per device:

    total = states + blocks x activation_per_block x held + logits

- `states` (`stage_states`): weights, gradients and optimizer state of the stage's einsum layers
  (`shardline.workload.stack.memory_check`, sharded as the strategies and the ZeRO stage say), the
  KV cache and FSDP's gathered buffers (below); with a vocabulary, the first stage holds the
  embedding table and the last the LM head (untied: each its own weights, gradients and
  optimizer state, split over tensor parallelism; tied, a stage holding both holds the shared
  table once, and a pipeline keeps a copy on each end); with expert parallelism and ZeRO >= 1,
  the dense (non-expert) weights' optimizer state is sharded over the expert-parallel ranks too:
  Megatron-Core's distributed optimizer shards the dense parameters over the whole
  data-parallel group (the ep ranks are data-parallel ranks for them) and the experts' over the
  expert-data-parallel group (dp here); NVIDIA/Megatron-LM megatron/core/optimizer/__init__.py,
  get_megatron_optimizer: `data_parallel_group=intra_dp_cp_group` for the dense parameter
  groups, `intra_expt_dp_group` for the experts'; MoE decode holds the experts the batch does
  not touch (split over tp and ep), unread;
- `activation_per_block`: transformer training keeps the activations of Korthikanti et al. 2022
  per block and microbatch (`shardline.realistic.activations`), which follow recompute and
  sequence parallelism, less the tensors `offload` holds in host memory (counted apart:
  `host_offload_bytes`, not in the total); `held` = min(m, P - i) microbatches in flight under
  1F1B, times 1 + (P - 1)/(P V) with V interleaved chunks (`in_flight`);
- `logits`: the last stage keeps one microbatch's fp32 logits for the loss's backward;
- the buffers: FSDP (or ZeRO-3 over dp) holds two gathered blocks of weights (the one in use
  and the one prefetched).

A workload without a transformer model keeps the stack's own activation count instead (every
saved input per microbatch in flight plus the largest output: `memory_check`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from math import prod

import numpy as np

from shardline.basics.dtypes import dtype_bits
from shardline.basics.options import RECOMPUTE_MODES, Execution
from shardline.basics.values import Scalar
from shardline.realistic.activations import layer_activation_bytes
from shardline.realistic.block import LOSS_BYTES
from shardline.strategies import Degrees, device_share, local_dims
from shardline.strategies.cp import query_ways
from shardline.workload.dense_first import moe_blocks_in
from shardline.workload.device_memory import TermsMemo
from shardline.workload.moe import EXPERT_AXIS, idle_params_per_rank
from shardline.workload.stack import DeviceShare, MemoryCheck, memory_check
from shardline.workload.workload import Layer, Workload

__all__ = [
    "StageStates",
    "StageSums",
    "Shards",
    "Candidates",
    "stage_memory",
    "stage_states",
    "stage_sums",
    "states_of",
    "shards",
    "in_flight",
    "total_bytes",
    "layouts_bytes",
    "candidate_stages",
    "candidate_states",
    "undominated",
    "block_weights_bytes",
    "gathered_buffers_bytes",
    "dense_optimizer_bytes",
    "microbatch_sequences",
    "activation_per_block",
    "logits_bytes",
    "activation_table",
]

StageLayers = list[tuple[Layer, int]]


@dataclass(frozen=True)
class StageStates:
    """What a stage holds on one device whatever the microbatches: parameters (count), weights,
    gradients, optimizer state, KV cache and FSDP's gathered buffers (bytes)."""

    params: float
    weights_bytes: float
    gradients_bytes: float
    optimizer_bytes: float
    kv_cache_bytes: float
    buffers_bytes: float

    @property
    def total_bytes(self) -> float:
        return (
            self.weights_bytes
            + self.gradients_bytes
            + self.optimizer_bytes
            + self.kv_cache_bytes
            + self.buffers_bytes
        )


def in_flight(stages: Scalar, microbatches: Scalar, interleave: Scalar, index: Scalar) -> Scalar:
    """Microbatches whose activations stage `index` holds under 1F1B: min(m, P - index), times
    1 + (P - 1) / (P V) with V interleaved chunks (Korthikanti et al. 2022, section 4.2.3;
    Narayanan et al. 2021). Scalars or numpy arrays."""
    P, V = np.asarray(stages, dtype=float), np.asarray(interleave, dtype=float)
    held = np.minimum(microbatches, P - index)
    scale = np.where((V > 1) & (P > 1), 1 + (P - 1) / (P * V), 1.0)
    return held * scale


def total_bytes(
    states: Scalar, blocks: Scalar, per_block: Scalar, held: Scalar, logits: Scalar
) -> Scalar:
    """A stage's bytes per device (module docstring): states + blocks x per_block x held +
    logits. Scalars or numpy arrays."""
    return states + blocks * per_block * held + logits


def _zero_ep(workload: Workload, deg: Degrees, zero: int) -> int:
    """The extra ways the dense optimizer state is sharded: ep under ZeRO >= 1 in training."""
    return deg.get("ep", 1) if workload.training and zero >= 1 else 1


def dense_optimizer_bytes(layers: StageLayers, share: DeviceShare) -> float:
    """The optimizer state of the stage's non-expert einsum weights on one device, as
    `shardline.workload.stack.memory_check` counts it (sharded `share.optimizer_ways` ways)."""
    total = 0.0
    for layer, n in layers:
        if layer.axis_dims(EXPERT_AXIS):
            continue
        dims = share.dims(layer)
        for w in layer.weights:
            elements = prod(dims[d] for d in layer.operand(w).dims)
            total += n * elements * share.state_bytes(layer.dtypes[w])
    return total / share.optimizer_ways


def block_weights_bytes(workload: Workload, deg: Degrees) -> float:
    """One block's weights on one device, every copy (what FSDP gathers before using them)."""
    block = 0.0
    for layer, count in workload.distinct_layers:
        dims = local_dims(layer, deg, batch_dim=workload.batch_dim)
        block += count * sum(layer.operand_bytes(w, dims) for w in layer.weights)
    return block


def gathers(deg: Degrees, zero: int) -> bool:
    """Whether a device gathers its weights before using them: FSDP, or ZeRO-3 over dp."""
    return deg["fsdp"] > 1 or (zero == 3 and deg["dp"] > 1)


def gathered_buffers_bytes(workload: Workload, deg: Degrees, zero: int) -> float:
    """Two gathered blocks of weights (the one in use and the one prefetched) where the device
    gathers them; 0 otherwise."""
    return 2 * block_weights_bytes(workload, deg) if gathers(deg, zero) else 0.0


def _share(workload: Workload, deg: Degrees, m: int, ex: Execution) -> DeviceShare:
    return device_share(
        workload,
        deg,
        m,
        zero=ex.zero,
        state_bytes=lambda dt: ex.state_bytes_per_param(dtype_bits(dt)),
    )


@dataclass(frozen=True)
class StageSums:
    """A stage's states on one device before the ways the ZeRO stage shards them: weight and
    optimizer-state bytes of its einsums (all, and the dense ones'), the weight bytes of the
    vocabulary tables it holds and of the idle experts, parameters, and the KV cache."""

    params: float
    weights_bytes: float  # einsum weights, idle experts and tables: every copy of the weights
    optimizer_bytes: float  # einsum optimizer state (all)
    dense_optimizer_bytes: float  # einsum optimizer state of the non-expert weights
    tables_state_bytes: float  # the tables' optimizer state
    kv_cache_bytes: float
    gradients_held: bool = True  # a full gradient buffer (Execution.gradients_held)


def stage_sums(
    workload: Workload,
    layers: StageLayers,
    deg: Degrees,
    index: int,
    ex: Execution,
    memo: TermsMemo | None = None,
) -> StageSums:
    """`StageSums` of the stage `index` of `deg` (what `stage_states` shards); `memo`: the
    layers' terms (`memory_check`), kept across the stages of degrees that cut them alike."""
    P = deg.stages
    share = _share(workload, deg, 1, replace(ex, zero=0))
    base = memory_check(workload, 0.0, layers=layers, share=share, memo=memo)
    ways = share.weights_ways  # the ways every state is sharded without ZeRO (FSDP)
    weights, adam = base.weights_bytes * ways, base.optimizer_bytes * ways
    model = workload.model
    if model is None:
        return StageSums(
            base.params, weights, adam, 0.0, 0.0, base.kv_cache_bytes, ex.gradients_held
        )
    dense = dense_optimizer_bytes(layers, share) * ways
    tp = deg["tp"]
    kv_cache = base.kv_cache_bytes / query_ways(workload, deg)  # T whole in einsums, but decode
    # MoE decode: the experts the batch does not touch, held (split over tp and ep), not read
    params = moe_blocks_in(workload, layers) * idle_params_per_rank(workload, deg) / tp
    bits = dtype_bits(model.weights_dtype)
    weights += params * bits / 8
    tables_state = 0.0
    ends = (index == 0) + (index == P - 1)
    if model.vocab and ends:
        # tied embeddings: one stage holding both ends holds the shared table once
        head = (1 if model.tied_embeddings else ends) * model.vocab * model.d_model / tp
        params += head
        weights += head * bits / 8
        tables_state = head * ex.state_bytes_per_param(bits)
    return StageSums(
        base.params + params, weights, adam, dense, tables_state, kv_cache, ex.gradients_held
    )


@dataclass(frozen=True)
class Shards:
    """The ways a device's states are sharded (`device_share`, FSDP and the ZeRO stage) and the
    extra ways the dense optimizer state is (ep under ZeRO >= 1)."""

    weights: int
    gradients: int
    optimizer: int
    dense_ep: int


def shards(workload: Workload, deg: Degrees, zero: int) -> Shards:
    share = device_share(workload, deg, zero=zero)
    ep = _zero_ep(workload, deg, zero)
    return Shards(share.weights_ways, share.gradients_ways, share.optimizer_ways, ep)


def states_of(sums: StageSums, ways: Shards, training: bool, buffers_bytes: float) -> StageStates:
    """Shard `sums` `ways`: weights over the weights' ways, gradients (in the weights' dtype,
    training only) over the gradients' ways, optimizer state over the optimizer's ways, its
    dense part (and the tables') over ep as well under ZeRO >= 1 (module docstring)."""
    weights = sums.weights_bytes / ways.weights
    grads = opt = 0.0
    if training:
        ep = ways.dense_ep
        grads = sums.weights_bytes / ways.gradients if sums.gradients_held else 0.0
        opt = sums.optimizer_bytes / ways.optimizer
        opt -= sums.dense_optimizer_bytes / ways.optimizer * (1 - 1 / ep)
        opt += sums.tables_state_bytes / (ways.optimizer * ep)
    return StageStates(sums.params, weights, grads, opt, sums.kv_cache_bytes, buffers_bytes)


def stage_states(
    workload: Workload, layers: StageLayers, deg: Degrees, index: int, ex: Execution
) -> StageStates:
    """The stage's states on one device (module docstring); depends on the layers, the degrees,
    the stage's place (first, last) and the ZeRO stage and optimizer, not on the microbatches."""
    sums = stage_sums(workload, layers, deg, index, ex)
    buffers = gathered_buffers_bytes(workload, deg, ex.zero)
    return states_of(sums, shards(workload, deg, ex.zero), workload.training, buffers)


def microbatch_sequences(workload: Workload, deg: Degrees, m: int) -> float:
    """Sequences of one microbatch on one device, counted in whole sequences' activations: the
    local batch over the ways cp splits each sequence's tokens."""
    first = workload.layers[0]
    local = local_dims(first, deg, batch_dim=workload.batch_dim, microbatches=m).get("B", 1)
    return local / query_ways(workload, deg)


def logits_bytes(workload: Workload, deg: Degrees, sequences: float) -> float:
    """One microbatch's fp32 logits the last stage keeps for the loss's backward."""
    model = workload.model
    if model is None or not model.vocab or not workload.training:
        return 0.0
    return sequences * model.q_len * model.vocab / deg["tp"] * LOSS_BYTES


def activation_per_block(
    workload: Workload,
    deg: Degrees,
    sequences: float,
    ex: Execution,
    blocks: float | None = None,
) -> float:
    """One block's activations kept in device memory for the backward (Korthikanti et al. 2022)
    at `sequences`: the recompute policy's stored tensors less those `ex.offload` holds in host
    memory; a `full-block:N` policy's mean over a stage of `blocks` blocks in `ex.interleave`
    virtual stages (the model's blocks in pp x interleave when not given)."""
    model = workload.model
    assert model is not None
    tp = deg["tp"]
    sp = ex.sequence_parallel and tp > 1
    offload = frozenset(ex.offload)
    chunks = ex.interleave if blocks is not None else deg.stages * ex.interleave
    return layer_activation_bytes(
        model,
        sequences,
        tp=tp,
        sp=sp,
        recompute=ex.recompute,
        offload=offload,
        blocks=blocks,
        chunks=chunks,
    )


def stage_memory(
    workload: Workload,
    capacity_bytes: float,
    layers: StageLayers,
    deg: Degrees,
    where: tuple[int, int],
    execution: Execution | None = None,
) -> MemoryCheck:
    """`where` = (stage index, microbatches m): the stage's MemoryCheck (module docstring)."""
    ex = execution or Execution()
    (index, m), P = where, deg.stages
    states = stage_states(workload, layers, deg, index, ex)
    held = float(in_flight(P, m, ex.interleave, index)) if workload.training else 1.0
    base = memory_check(
        workload, capacity_bytes, layers=layers, share=_share(workload, deg, m, ex), in_flight=held
    )
    if workload.training and workload.model is not None:
        seqs = microbatch_sequences(workload, deg, m)
        blocks = workload.blocks_in(layers)
        per_block = activation_per_block(workload, deg, seqs, ex, blocks)
        logits = logits_bytes(workload, deg, seqs) if index == P - 1 else 0.0
        total = float(total_bytes(states.total_bytes, blocks, per_block, held, logits))
        activations = total - states.total_bytes
        everything = activation_per_block(workload, deg, seqs, replace(ex, offload=()), blocks)
        on_host = everything - per_block
        host = blocks * on_host * held
    else:  # the stack's own count (module docstring)
        activations = base.activations_bytes
        total = states.total_bytes + activations
        host = 0.0
    out = replace(
        base,
        params=states.params,
        weights_bytes=states.weights_bytes,
        gradients_bytes=states.gradients_bytes,
        optimizer_bytes=states.optimizer_bytes,
        activations_bytes=activations,
        kv_cache_bytes=states.kv_cache_bytes,
    )
    return out.with_total(total, buffers_bytes=states.buffers_bytes, host_offload_bytes=host)


@dataclass(frozen=True)
class Candidates:
    """The stages that can hold the most (`candidate_stages`), before the ZeRO stage."""

    index: list[int]
    sums: list[StageSums]
    blocks: list[float]
    block_weights_bytes: float  # one block's weights on one device, all copies (FSDP gathers)


def candidate_stages(
    workload: Workload,
    stages: list[StageLayers],
    deg: Degrees,
    ex: Execution | None = None,
    picked: list[int] | None = None,
    memo: TermsMemo | None = None,
) -> Candidates:
    """The stages of `deg` (`stages`: their layers) that can hold the most, with their sums.

    Stage i holds `total_bytes(states_i, blocks_i, per_block, in_flight(P, m, V, i), logits_i)`,
    and `in_flight` never grows with i; so among stages with the same layers and ends (the same
    states and blocks) the first holds the most, and only the first of each run of equal stages
    and the last stage (which keeps the logits) can be the largest. `picked`: these stages
    instead (the training search's step candidates, `vector_stages.stage_candidates`); `memo`
    as `stage_sums` takes it."""
    P = deg.stages
    if picked is None:
        keys = [_stage_key(layers, i, P) for i, layers in enumerate(stages)]
        picked = [i for i in range(P) if i in (0, P - 1) or keys[i] != keys[i - 1]]
    ex = ex or Execution()
    sums = [stage_sums(workload, stages[i], deg, i, ex, memo) for i in picked]
    blocks = [workload.blocks_in(stages[i]) for i in picked]
    return Candidates(picked, sums, blocks, block_weights_bytes(workload, deg))


def candidate_states(workload: Workload, found: Candidates, deg: Degrees, zero: int) -> np.ndarray:
    """The candidates' states (bytes) under ZeRO stage `zero` (`states_of`)."""
    return np.array([s.total_bytes for s in candidate_held(workload, found, deg, zero)])


def candidate_held(
    workload: Workload, found: Candidates, deg: Degrees, zero: int
) -> list[StageStates]:
    """What each candidate holds on one device under ZeRO stage `zero` (`states_of`)."""
    buffers = 2 * found.block_weights_bytes if gathers(deg, zero) else 0.0
    ways, training = shards(workload, deg, zero), workload.training
    return [states_of(s, ways, training, buffers) for s in found.sums]


def undominated(
    index: list[int], states: np.ndarray, blocks: list[float], stages: int
) -> np.ndarray:
    """Which candidates (`candidate_stages`, `states` [zero stage, candidate]) can hold the most
    for some microbatch count and activation size: a candidate is dropped when another sits no
    later in the pipeline (at least as many microbatches in flight), has at least as many blocks
    and at least its states under every ZeRO stage; the last stage (it keeps the logits) is
    always kept. Exact: `total_bytes` grows with each of the three."""
    i, b = np.asarray(index), np.asarray(blocks)
    earlier = i[:, None] < i[None, :]  # [other, candidate]
    more = (b[:, None] >= b[None, :]) & np.all(states[:, :, None] >= states[:, None, :], axis=0)
    dominated = (earlier & more).any(axis=0)
    return ~dominated | (i == stages - 1)


def _stage_key(layers: StageLayers, index: int, stages: int) -> tuple[object, ...]:
    content = tuple((layer.content_key, n) for layer, n in layers)
    return (content, index == 0, index == stages - 1)


def layouts_bytes(
    states: np.ndarray,
    blocks: np.ndarray,
    index: np.ndarray,
    layout: dict[str, np.ndarray],
) -> np.ndarray:
    """Bytes per device of many layouts at once: the largest of their candidate stages.

    `states` [layout, candidate], `blocks` [layout, candidate] and `index` [layout, candidate]
    (-1 where a layout has fewer candidates) from `candidate_stages`; `layout` holds per layout
    `stages` P, `microbatches` m, `interleave` V, `per_block` (activation bytes of one block) and
    `logits` (the last stage's)."""
    P, m, V = layout["stages"], layout["microbatches"], layout["interleave"]
    best = np.full(len(P), -np.inf)
    for c in range(index.shape[1]):
        i = index[:, c]
        held = in_flight(P, m, V, i)
        logits = np.where(i == P - 1, layout["logits"], 0.0)
        total = total_bytes(states[:, c], blocks[:, c], layout["per_block"], held, logits)
        best = np.where(i >= 0, np.maximum(best, total), best)
    return best


def activation_table(
    w: Workload,
    inners: list[Degrees],
    seq_b: list[int],
    recomputes: tuple[str, ...] = RECOMPUTE_MODES,
    base: Execution | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """The training search's table of `activation_per_block` (one block, [inner key x b x sp x
    recompute]) and of `logits_bytes` (one microbatch's fp32 logits on the last stage, [inner
    key x b]): `inners` the degrees of each inner key (`vector_floors.inner_degrees`), `seq_b`
    the microbatch sizes (sequences)."""
    base = base or Execution()
    act = np.zeros((len(inners), len(seq_b), 2, len(recomputes)))
    logits = np.zeros((len(inners), len(seq_b)))
    runs = {
        (sp, r): replace(base, sequence_parallel=bool(sp), recompute=rc)
        for sp in (0, 1)
        for r, rc in enumerate(recomputes)
    }
    # both read of the degrees tp, a fold's etp and the stages alone (`activation_per_block`,
    # `logits_bytes`): the inner keys that share them and cp's split share the rows
    done: dict[tuple[int, int, int, int], tuple[np.ndarray, np.ndarray]] = {}
    for i, inner in enumerate(inners):
        seq = inner.of("seq")  # cp: S / cp tokens per device
        same = (inner["tp"], inner.etp if inner.folded else 0, inner.stages, seq)
        if same not in done:
            done[same] = _activation_rows(w, inner, [b / seq for b in seq_b], runs)
        act[i], logits[i] = done[same]
    return act, logits


def _activation_rows(
    w: Workload, inner: Degrees, sequences: list[float], runs: dict[tuple[int, int], Execution]
) -> tuple[np.ndarray, np.ndarray]:
    """`activation_table`'s rows of one inner key: [b, sp, recompute] and [b]."""
    act = np.zeros((len(sequences), 2, len(runs) // 2))
    logits = np.zeros(len(sequences))
    for j, seqs in enumerate(sequences):
        logits[j] = logits_bytes(w, inner, seqs)
        for (sp, r), ex in runs.items():
            act[j, sp, r] = activation_per_block(w, inner, seqs, ex)
    return act, logits
