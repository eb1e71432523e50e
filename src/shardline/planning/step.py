"""The realistic step of one plan: the pipeline schedule over the slowest stage's realistic time,
the data-parallel gradient traffic the backward pass cannot hide, the optimizer step; and the
answers users ask of it (MFU, HFU, tokens/s, days to train).

The schedule (`planning.combine.cycles`) runs m microbatches and the bubble, each the slowest
stage's realistic microbatch time; the data-parallel gradient traffic is reduced in buckets while
the backward pass runs and what outlasts the last microbatch's backward shows
(`planning.combine.exposed_gradient_s`). A framework that states its bucket rule
(frameworks/*.toml [gradient_buckets]: Megatron-Core's max(40e6, 1e6 x dp) parameters) has its
gradient traffic priced as that many one-bucket collectives; without one, each weight gradient
is its own collective and the last bucket is PyTorch DDP's default, 25 MiB.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from shardline.basics.dtypes import dtype_bits
from shardline.basics.framework import (
    dp_bucket_params,
    grad_reduce_waited_on,
    optimizer_step_tensors,
)
from shardline.basics.options import Execution
from shardline.basics.recompute import policy, rerun_ops, stored_tensors
from shardline.basics.values import Scalar
from shardline.hardware import Chip
from shardline.planning.combine import exposed_comm_s, exposed_gather_s, exposed_gradient_s
from shardline.planning.memory import activation_per_block, microbatch_sequences
from shardline.planning.phases import PARTS, Phase, Stage
from shardline.planning.stage_extras import Context
from shardline.realistic.activations import checkpointed_share
from shardline.realistic.block import optimizer_bytes, optimizer_loop_bytes
from shardline.realistic.flops import hardware_flops, model_flops
from shardline.realistic.kernels import memory_kernel_s
from shardline.strategies import Degrees
from shardline.strategies.base import CommTerm
from shardline.workload.precision import weight_dtype_of
from shardline.workload.stack import MemoryCheck, layer_cost
from shardline.workload.workload import Workload

__all__ = [
    "RealisticStep",
    "realistic_step",
    "tokens_answers",
    "predicted_throughput_per_s",
    "recompute_answer",
    "gap_s",
    "DP_BUCKET_BYTES",
    "dp_bucket_bytes",
    "bucketed_s",
    "optimizer_step_s",
    "ep_unpaired_passes",
    "ep_overlapped_s",
    "unpaired_extra_s",
]

# torch.nn.parallel.DistributedDataParallel(bucket_cap_mb=25): gradients are all-reduced in
# 25 MiB buckets as the backward pass produces them (PyTorch documentation).
DP_BUCKET_BYTES = 25 * 2**20
SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True)
class RealisticStep:
    predicted_s: float
    breakdown_s: dict[str, float]  # sums to predicted_s
    lower_s: dict[str, float]  # the lower bound's GEMM, attention and critical comm (same step)
    model_flops: float
    hardware_flops: float
    mfu: float
    hfu: float


def dp_bucket_bytes(w: Workload, ex: Execution, dp: int) -> float | None:
    """Bytes of one data-parallel gradient bucket under the run's framework: its bucket rule's
    parameters (shardline.basics.framework.dp_bucket_params) at the bytes each gradient is
    reduced in (`grad_reduce_dtype`, else the weights' dtype); None: no rule, each weight
    gradient is its own collective."""
    params = dp_bucket_params(ex.framework, dp)
    if params is None:
        return None
    return params * dtype_bits(ex.grad_reduce_dtype or weight_dtype_of(w)) / 8


def bucketed_s(
    price: Callable[[str, float], float], grads: Iterable[tuple[str, float, float]], bucket: float
) -> float:
    """Gradient traffic cut into buckets, as Megatron-Core fills them (param_and_grad_buffer.py:
    parameters join the open bucket until it holds `bucket_size`, then it closes): `grads` =
    (collective kind, bytes of one gradient, calls). A gradient of at least a bucket closes one
    by itself, so it is one collective at its own size; the smaller ones share buckets, per kind
    `bytes / bucket` calls of one bucket each (`price(kind, bucket)`: the library's size ramp
    at the bucket's size)."""
    total = 0.0
    shared: dict[str, float] = {}
    for kind, nbytes, calls in grads:
        if nbytes >= bucket:
            total += calls * price(kind, nbytes)
        else:
            shared[kind] = shared.get(kind, 0.0) + calls * nbytes
    return total + sum(nbytes / bucket * price(kind, bucket) for kind, nbytes in shared.items())


def _dp_grad_s(ctx: Context, deg: Degrees, crit: Stage) -> tuple[float, float]:
    """(gradient traffic, parameter all-gather) of the stage, once per step. The gradient
    traffic: every once-per-step term but ZeRO's all-gather of the updated parameters, which
    follows the optimizer step. The data-parallel terms in the framework's buckets where it
    states a rule (`dp_bucket_bytes`), else one collective per gradient."""
    dp_terms = [t for t in crit.terms if t.once_per_step and t.purpose == "dp"]
    rest = float(crit.grad.predicted_s) - sum(t.calls * t.t_pred_s for t in dp_terms)
    bucket = dp_bucket_bytes(ctx.workload, ctx.execution, deg.get("dp", 1))
    net = ctx.network(deg)

    def traffic(terms: list[CommTerm]) -> float:
        if bucket is None:
            return sum(t.calls * t.t_pred_s for t in terms)
        grads = [(t.kind, t.bytes, t.calls) for t in terms]
        return bucketed_s(lambda k, b: net.predicted(k, b, "dp"), grads, bucket)

    gather = [t for t in dp_terms if t.kind == "all_gather"]
    reduce = [t for t in dp_terms if t.kind != "all_gather"]
    return rest + traffic(reduce), traffic(gather)


def grad_reduce_hidden(ex: Execution, chip: Chip) -> bool:
    """Whether the data-parallel gradient reduction runs behind the last backward pass: the
    run's `overlap_grad_reduce`, unless its framework waits for it on this kind of chip
    (shardline.basics.framework.grad_reduce_waited_on)."""
    return ex.overlap_grad_reduce and chip.kind not in grad_reduce_waited_on(ex.framework)


def _dp_exposed_s(ctx: Context, deg: Degrees, crit: Stage) -> float:
    grad_s, gather_s = _dp_grad_s(ctx, deg, crit)
    net = ctx.network(deg)
    rule = dp_bucket_bytes(ctx.workload, ctx.execution, deg.get("dp", 1))
    bucket = min(rule or DP_BUCKET_BYTES, float(crit.grad.net_bytes))
    last_bucket_s = net.predicted("all_reduce", bucket, "dp") if grad_s > 0 else 0.0
    forward_s = crit.fwd.predicted_s if ctx.execution.overlap_param_gather else 0.0
    backward_s = crit.bwd.predicted_s if grad_reduce_hidden(ctx.execution, ctx.chip) else 0.0
    return exposed_gradient_s(grad_s, last_bucket_s, backward_s) + exposed_gather_s(
        gather_s, forward_s
    )


def ep_unpaired_passes(stages: Scalar, interleave: Scalar, m: Scalar) -> Scalar:
    """Passes of model chunks (one of `interleave` per stage) that Megatron-Core's combined 1F1B
    schedule (overlap_moe_expert_parallel_comm) runs with no other microbatch beside them, in
    the forward (the warmup) and as many in the backward (the cooldown), on the pipeline's
    first stage. NVIDIA/Megatron-LM at commit d98e8a64: without a pipeline,
    `combined_1f1b_schedule_for_no_pipelining` (pipeline_parallel/combined_1f1b.py) runs "the
    forward step for the first microbatch ... alone, no a2a overlapping" and "the backward step
    for the last microbatch ... alone": 1. With one, `get_pp_rank_microbatches`
    (pipeline_parallel/schedules.py) gives rank r (P - r - 1) x 2 + (V - 1) x g warmup
    forwards, "one extra micro-batch forward step" with the overlap, g the microbatch group per
    virtual stage (`microbatch_group_size_per_vp_stage`, by default the pipeline size P,
    model_parallel_config.py); rank 0: 2 (P - 1) + (V - 1) P + 1, at most m V. Megatron-Core
    asserts a virtual pipeline for the overlap with P > 1 (transformer_config.py), so a plan
    with P > 1 and V = 1 runs another schedule (DeepSeek-V3's DualPipe pairs its chunks from
    both ends of the pipeline, arXiv 2412.19437 section 3.2.1): 0, as before. Numbers or
    arrays over layouts alike (the training search calls it for every layout at once)."""
    warmup = 2 * (np.asarray(stages) - 1) + (np.asarray(interleave) - 1) * stages + 1
    piped = np.where(np.asarray(interleave) <= 1, 0, np.minimum(warmup, m * interleave))
    out = np.where(np.asarray(stages) <= 1, np.minimum(1, m), piped)
    return out if out.ndim else int(out)


def ep_overlapped_s(terms: Iterable[CommTerm], phase: str) -> tuple[float, float]:
    """A phase's overlapped expert-parallel all-to-alls (not once per step): (their seconds,
    the compute seconds they hold: seconds x their SM share), what an unpaired pass moves onto
    the critical path (`unpaired_extra_s`)."""
    ep = [
        t
        for t in terms
        if t.purpose == "ep" and not t.critical and not t.once_per_step and t.phase == phase
    ]
    moved = sum(t.calls * t.t_pred_s for t in ep)
    return moved, sum(t.calls * t.t_pred_s * t.sm_share for t in ep)


def unpaired_extra_s(
    phase: tuple[Scalar, Scalar, Scalar, Scalar], moved: Scalar, held: Scalar
) -> Scalar:
    """What a phase's overlapped expert-parallel all-to-alls (`moved` seconds, holding `held`
    seconds of compute) add when no other microbatch's compute runs beside them: they wait on
    the critical path and hold no compute's SMs. `phase` = (compute, critical, overlapped,
    contention) seconds (`combine.exposed_comm_s`); numbers or arrays over layouts alike."""
    compute, critical, overlapped, contention = (np.asarray(x, dtype=float) for x in phase)
    alone = exposed_comm_s(compute, critical + moved, overlapped - moved, contention - held)
    paired = exposed_comm_s(compute, critical, overlapped, contention)
    out = np.where(moved > 0, alone - paired, 0.0)
    return out if out.ndim else float(out)


def _unpaired_extra_s(phase: Phase, moved_held: tuple[float, float]) -> float:
    crit = float(phase.critical.predicted_s) + phase.pinned_s
    sums = (phase.compute_pred_s, crit, float(phase.overlapped.predicted_s), phase.contention_s)
    return float(unpaired_extra_s(sums, *moved_held))


def ep_unpaired_s(ctx: Context, deg: Degrees, crit: Stage, m: int) -> float:
    """The overlapped expert-parallel all-to-alls of the chunk passes that have no partner
    (`ep_unpaired_passes`), exposed: per pass, one chunk's share (1 / V) of a microbatch's
    forward or backward phase run with its all-to-alls on the critical path."""
    ex = ctx.execution
    if not (ctx.workload.training and ex.ep_overlap):
        return 0.0
    v = max(ex.interleave, 1)
    passes = ep_unpaired_passes(deg.get("pp", 1), v, m)
    if not passes:
        return 0.0
    extra = sum(
        _unpaired_extra_s(phase, ep_overlapped_s(crit.terms, name))
        for name, phase in (("forward", crit.fwd), ("backward", crit.bwd))
    )
    return float(passes * extra / v)


def _optimizer_s(ctx: Context, deg: Degrees, memory: MemoryCheck) -> float:
    """One optimizer step over the device's shard of the slowest stage's parameters: memory-bound
    (shardline.realistic.block.optimizer_bytes)."""
    if not ctx.workload.training:
        return 0.0
    held = (memory.params, memory.optimizer_bytes)
    return optimizer_step_s(ctx.workload, ctx.chip, ctx.execution, deg, held)


def optimizer_step_s(
    w: Workload, chip: Chip, ex: Execution, deg: Degrees, held: tuple[float, float]
) -> float:
    """`_optimizer_s` from what the stage holds on one device: held = (parameters, optimizer
    state bytes); the parameters over the optimizer's ways, or, under ZeRO >= 1 with ep, the
    state's own parameters (the dense shard is also split over ep)."""
    params_held, state_bytes = held
    if params_held <= 0:
        return 0.0
    from shardline.strategies import device_share

    ways = device_share(w, deg, zero=ex.zero).optimizer_ways
    bits = dtype_bits(weight_dtype_of(w))
    state = ex.state_bytes_per_param(bits)
    params = params_held / ways
    if ex.zero >= 1 and deg.get("ep", 1) > 1 and state > 0:
        params = state_bytes / state
    # the framework's op-by-op step counts Adam's two moments: another optimizer runs fused
    loop = optimizer_step_tensors(ex.framework) if ex.optimizer == "adam" else None
    if loop is None:  # a fused multi-tensor Adam: one pass
        nbytes = optimizer_bytes(params, bits, state)
    else:  # the framework's optimizer op by op (frameworks/*.toml [optimizer_step])
        nbytes = optimizer_loop_bytes(params, *loop)
    return memory_kernel_s(chip, nbytes, cuda_graphs=ex.cuda_graphs)


def _flops(ctx: Context, chunks: int) -> tuple[float, float]:
    """(model FLOPs, hardware FLOPs) of one step over all devices, the blocks cut into `chunks`
    (virtual) pipeline stages (what a `full-block:N` policy's share depends on)."""
    w, ex = ctx.workload, ctx.execution
    if w.model is not None:
        hardware = hardware_flops(w.model, w.training, ex.recompute, chunks)
        return model_flops(w.model, w.training), hardware
    forward = sum(
        float(layer_cost(layer, ctx.chip).flops) * count * w.repeat
        for layer, count in w.distinct_layers
    )
    total = forward * (3 if w.training else 1)
    extra = forward if w.training and ex.recompute == "full" else 0.0
    return total, total + extra


def realistic_step(
    ctx: Context, deg: Degrees, schedule: tuple[int, float], crit: Stage, memory: MemoryCheck
) -> RealisticStep:
    """The plan's realistic step from its slowest stage (`crit`), with `schedule` = (m
    microbatches, n stage times per step: `cycles`)."""
    w = ctx.workload
    m, n = schedule
    t_stage = crit.t_pred_s
    parts = crit.parts_s()
    breakdown = {f"{k}_s": m * v for k, v in parts.items()}
    breakdown["bubble_s"] = (n - m) * t_stage
    breakdown["exposed_comm_s"] += _dp_exposed_s(ctx, deg, crit) if w.training else 0.0
    breakdown["exposed_comm_s"] += ep_unpaired_s(ctx, deg, crit, m)
    breakdown["optimizer_s"] = _optimizer_s(ctx, deg, memory)
    predicted = sum(breakdown.values())
    phases = [crit.fwd, crit.bwd] if w.training else [crit.fwd]
    lower = {
        "gemm_s": m * sum(ph.lower_parts["gemm"] for ph in phases),
        "attention_s": m * sum(ph.lower_parts["attention"] for ph in phases),
        "recompute_s": m * sum(ph.lower_parts["recompute"] for ph in phases),
        "exposed_comm_s": m * sum(ph.crit_s for ph in phases),
    }
    chunks = deg.stages * ctx.execution.interleave
    key = f"flops/{chunks}" if policy(ctx.execution.recompute).first else "flops"
    model, hardware = ctx.once(key, lambda: _flops(ctx, chunks))
    peak = ctx.chip.peak(w.layers[0].compute_dtype or w.layers[0].dtype)
    capacity = deg.devices * peak * predicted
    return RealisticStep(
        predicted_s=predicted,
        breakdown_s=breakdown,
        lower_s=lower,
        model_flops=model,
        hardware_flops=hardware,
        mfu=model / capacity if capacity > 0 else 0.0,
        hfu=hardware / capacity if capacity > 0 else 0.0,
    )


def predicted_throughput_per_s(ctx: Context, deg: Degrees, step: RealisticStep) -> float:
    """Batch items per second at the realistic time: batch / predicted_s (0 when there is no
    realistic time). Prefill through a pipeline serves a stream of batches: one leaves per m
    stage times (the bubble is paid once per stream, not per batch), as the lower bound's
    throughput counts it."""
    w = ctx.workload
    if step.predicted_s <= 0:
        return 0.0
    busy = step.predicted_s
    if not w.training and not w.decode and deg.stages > 1:
        busy = step.predicted_s - step.breakdown_s["bubble_s"]
    return w.batch / busy


def tokens_answers(ctx: Context, deg: Degrees, step: RealisticStep) -> dict[str, Any]:
    """Batch items/s and tokens/s (the step's over its realistic time), tokens/s per device, and
    days to train."""
    w = ctx.workload
    items_per_s = predicted_throughput_per_s(ctx, deg, step)
    if w.kind == "stack" or step.predicted_s <= 0:
        empty = {"tokens_per_s": None, "tokens_per_s_per_device": None, "days_to_train": None}
        return {"throughput_per_s": items_per_s, **empty}
    tokens_per_s = items_per_s * w.tokens_per_item
    days = None
    if w.training and ctx.execution.tokens is not None:
        days = ctx.execution.tokens / tokens_per_s / SECONDS_PER_DAY
    return {
        "throughput_per_s": items_per_s,
        "tokens_per_s": tokens_per_s,
        "tokens_per_s_per_device": tokens_per_s / deg.devices,
        "days_to_train": days,
    }


def recompute_answer(ctx: Context, deg: Degrees, m: int, step: RealisticStep) -> dict[str, object]:
    """The recompute policy of a training plan (shardline.basics.recompute): its name and
    source, the tensors one block keeps and the ops it reruns, the FLOPs it runs again (and
    their share of the model FLOPs), and the bytes one block keeps per microbatch on one device
    (and their share of what it keeps without recompute; `layer-N`: the mean over the blocks)."""
    w = ctx.workload
    if not w.training or w.model is None:
        return {}
    ex = ctx.execution
    p = policy(ex.recompute)
    flash = w.model.attention != "standard"
    seqs = microbatch_sequences(w, deg, m)
    kept = activation_per_block(w, deg, seqs, ex)
    everything = activation_per_block(w, deg, seqs, replace(ex, recompute="none"))
    again = step.hardware_flops - step.model_flops
    rerun = rerun_ops(p, gated=w.model.gated, flash=flash)
    keeps = stored_tensors(p, gated=w.model.gated, flash=flash)
    return {
        "policy": p.name,
        "keeps": list(keeps),
        "offloaded": [t for t in keeps if t in ex.offload],  # held in host memory
        "reruns": list(rerun),
        "whole_block": rerun == rerun_ops(policy("full"), gated=w.model.gated, flash=flash),
        "blocks_share": checkpointed_share(w.model, p, chunks=deg.stages * ex.interleave),
        "recomputed_flops": again,
        "recomputed_share": again / step.model_flops if step.model_flops else 0.0,
        "kept_bytes_per_block": kept,
        "kept_share": kept / everything if everything else 0.0,
        "source": p.source,
    }


PART_KEYS = tuple(f"{k}_s" for k in PARTS)


def gap_s(step: RealisticStep, latency_s: float, lower_bubble_s: float) -> dict[str, float]:
    """Where the gap between the lower bound and the realistic step goes: each component's
    realistic time less its lower-bound counterpart (GEMMs, attention, critical communication,
    bubble); the ops the lower bound leaves out in full; `overlap_s` the rest (what the lower
    bound's perfect overlap of compute and traffic hid). Sums to predicted_s - latency_s."""
    b, lo = step.breakdown_s, step.lower_s
    gap = {
        "gemm_inefficiency_s": b["gemm_s"] - lo["gemm_s"],
        "attention_s": b["attention_s"] - lo["attention_s"],
        "other_ops_s": b["other_ops_s"],
        "recompute_s": b["recompute_s"] - lo["recompute_s"],
        "exposed_comm_s": b["exposed_comm_s"] - lo["exposed_comm_s"],
        "bubble_s": b["bubble_s"] - lower_bubble_s,
        "optimizer_s": b["optimizer_s"],
    }
    gap["overlap_s"] = step.predicted_s - latency_s - sum(gap.values())
    return gap
