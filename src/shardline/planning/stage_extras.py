"""What a stage runs besides its einsum layers, for the realistic time (and, where it is einsum
work, the lower bound too):

- the memory-bound ops between a transformer block's matmuls, per block in the stage;
- recompute in the backward pass: "full" runs the stage's forward again (its einsums, ops and
  tensor-parallel collectives), "selective" the attention core when the scores go through HBM
  (FlashAttention's backward recomputes them anyway, and its time already counts that); the
  other policies (shardline.basics.recompute) the ops they do not keep the outputs of;
- the embedding on the first stage; the LM head (an einsum, vocab split by tensor parallelism),
  the final norm and the loss on the last;
- the execution's variants of the tensor-parallel collectives: sequence parallelism turns each
  all-reduce into a reduce-scatter and an all-gather of the same array; `tp_overlap` moves them
  off the critical path, each beside its own GEMM (`CommTerm.paired_s`, set where the layer's
  part is built: what that GEMM cannot hide stays exposed, `phases.decomposed_exposed_s`; a term
  without one is hidden behind the phase's compute up to the compute time); interleaving sends
  each microbatch V times between stages; `ep_overlap` moves the expert-parallel all-to-alls
  off the critical path (hidden behind the phase's compute up to the compute time).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any, Protocol

from shardline.basics.framework import load_framework
from shardline.basics.options import Execution
from shardline.basics.recompute import Policy, kept_tensors, policy, rerun_ops
from shardline.collectives.library import collective_sm_share
from shardline.hardware import Chip
from shardline.ops.predict import kernel_overhead_s
from shardline.planning.moe_stage import moe_kernels_s, random_routing_s
from shardline.planning.network import MeshNetwork
from shardline.planning.phases import Einsums, Stage
from shardline.realistic.activations import checkpointed_share
from shardline.realistic.block import (
    MemOp,
    activation_dtype,
    block_ops,
    embedding_ops,
    head_ops,
)
from shardline.realistic.flops import matmul_params
from shardline.realistic.kernels import vector_kernel_s
from shardline.realistic.modelshape import ModelShape
from shardline.strategies import CommTerm, Degrees
from shardline.strategies.cp import query_ways
from shardline.workload.moe import ROUTED_EXPERT_LAYERS
from shardline.workload.stack import LayerCost
from shardline.workload.workload import Layer, Workload

__all__ = [
    "Context",
    "tp_variants",
    "rerun_by_recompute",
    "add_block_extras",
    "add_end_extras",
    "add_recompute",
    "add_interleave_wrap",
]

StageLayers = list[tuple[Layer, int]]


class Context(Protocol):
    """What the stage extras and the step read of a search's context
    (`shardline.planning.evaluate.Context`)."""

    workload: Workload
    chip: Chip
    execution: Execution
    head: Layer | None
    head_grads: list[Layer]

    def network(self, deg: Degrees) -> MeshNetwork: ...

    def local(self, layer: Layer, deg: Mapping[str, int], m: int) -> dict[str, int]: ...

    def cost(self, layer: Layer, dims: Mapping[str, int]) -> LayerCost: ...

    def once(self, name: str, compute: Callable[[], object]) -> Any: ...

    def part(self, layer: Layer, n: int, deg: Degrees, m: int) -> Any: ...


def gather_sm_share(chip: Chip) -> float:
    """The share of the chip's SMs an overlapped FSDP / ZeRO-3 collective holds
    (collectives.library.collective_sm_share of the chip's library)."""
    net = chip.interconnect
    if chip.kind != "gpu" or net is None:
        return 0.0
    return collective_sm_share(net.library, chip.on_chip.cores or 0)


def _holds_sms(term: CommTerm) -> bool:
    """FSDP's gathers and reduce-scatters and ZeRO-3's gathers run beside the compute."""
    if term.critical or term.sm_share:
        return False
    if term.purpose == "fsdp":
        return term.kind in ("all_gather", "reduce_scatter")
    return term.purpose == "dp" and term.kind == "all_gather"


def tp_variants(term: CommTerm, ctx: Context, deg: Degrees) -> list[CommTerm]:
    """A strategy's term as the execution runs it (sequence parallelism, overlap, interleave)."""
    ex = ctx.execution
    if term.purpose == "pp" and ex.interleave > 1 and ctx.workload.training:
        return [replace(term, calls=term.calls * ex.interleave)]
    if term.purpose == "ep" and term.kind in ("all_to_all", "all_gather") and ex.ep_overlap:
        # beside another microbatch's compute, on SMs of its own
        cores = ctx.chip.on_chip.cores
        share = min(ex.ep_comm_sms / cores, 1.0) if cores else 0.0
        return [replace(term, critical=False, sm_share=share)]
    if _holds_sms(term):  # beside the compute, on SMs of its own (NCCL: one block a channel)
        return [replace(term, sm_share=gather_sm_share(ctx.chip))]
    if term.purpose != "tp":
        return [term]
    out = [term]
    if ex.sequence_parallel and term.kind == "all_reduce":
        net = ctx.network(deg)
        out = [
            replace(
                term,
                kind=kind,
                t_s=net.time(kind, term.bytes, "tp"),
                predicted_s=net.predicted(kind, term.bytes, "tp"),
            )
            for kind in ("reduce_scatter", "all_gather")
        ]
    if ex.tp_overlap:  # decomposed beside its GEMM where it has one (phases.decomposed_exposed_s)
        out = [replace(t, critical=False) for t in out]
    return out


def _ops_s(ctx: Context, ops: list[MemOp], backward: bool) -> float:
    """The ops' time: each its bytes at HBM bandwidth or its FLOPs on the vector units, and the
    launch cost of each kernel beyond its first (an eager op runs several)."""
    graphs = ctx.execution.cuda_graphs
    model = ctx.workload.model
    act = activation_dtype(model) if model is not None else "bf16"
    launches = sum(op.kernels - 1 for op in ops)
    return launches * kernel_overhead_s(ctx.chip, cuda_graphs=graphs) + sum(
        vector_kernel_s(
            ctx.chip,
            op.backward_bytes if backward else op.forward_bytes,
            op.backward_flops if backward else op.forward_flops,
            op.dtype or act,
            cuda_graphs=graphs,
        )
        for op in ops
    )


def _sequences(ctx: Context, deg: Degrees, m: int) -> float:
    """Sequences of one microbatch on one device (the batch dim's local size), over the ways
    the sequence is split (context parallelism: S / cp tokens of each; decode: every cp rank
    runs the new token, strategies/cp.query_ways)."""
    first = ctx.workload.layers[0]
    local = float(ctx.local(first, deg, m).get(ctx.workload.batch_dim or "", 1))
    return local / query_ways(ctx.workload, deg)


class OpBuilder(Protocol):
    """block_ops, embedding_ops or head_ops of shardline.realistic.block."""

    __name__: str  # a function's name (`_ops_seconds` keys its memo by it)

    def __call__(
        self,
        model: ModelShape,
        sequences: float,
        *,
        tp: int,
        sp: bool,
        training: bool,
        eager: bool = False,
    ) -> list[MemOp]: ...


def _ops(ctx: Context, builder: OpBuilder, deg: Degrees, m: int) -> list[MemOp]:
    """The builder's memory-bound ops for one microbatch on one device of this plan."""
    model = ctx.workload.model
    assert model is not None
    tp = deg["tp"]
    sp = ctx.execution.sequence_parallel and tp > 1
    seqs = _sequences(ctx, deg, m)
    eager = ctx.execution.op_fusion == "eager"
    return builder(model, seqs, tp=tp, sp=sp, training=ctx.workload.training, eager=eager)


SCORES = ("softmax", "attention_dropout")  # what selective recompute runs again


def _ops_seconds(
    ctx: Context, builder: OpBuilder, deg: Degrees, m: int, backward: bool, only: bool = False
) -> float:
    """`_ops_s` of the builder's ops (`only`: the attention scores' alone) for this plan: they
    depend on the plan through the sequences on one device, tp and sequence parallelism alone,
    so that the stages of one search price each set once (memo in `ctx.once`)."""
    tp = deg["tp"]
    sp = ctx.execution.sequence_parallel and tp > 1
    seqs = _sequences(ctx, deg, m)
    ex = ctx.execution
    key = (builder.__name__, seqs, tp, sp, backward, only, ex.cuda_graphs, ex.op_fusion)
    memo: dict[tuple[object, ...], float] = ctx.once("memory-bound ops", dict)
    found = memo.get(key)
    if found is None:
        ops = _ops(ctx, builder, deg, m)
        if only:
            ops = [op for op in ops if op.name in SCORES]
        found = memo[key] = _ops_s(ctx, ops, backward)
    return found


def add_block_extras(ctx: Context, stage: Stage, deg: Degrees, m: int) -> None:
    """The memory-bound ops of the stage's blocks, forward and (training) backward."""
    if ctx.workload.model is None:
        return
    blocks = ctx.workload.blocks_in(stage.layers)
    stage.fwd.add_predicted("other_ops", blocks * _ops_seconds(ctx, block_ops, deg, m, False))
    if ctx.workload.training:
        stage.bwd.add_predicted("other_ops", blocks * _ops_seconds(ctx, block_ops, deg, m, True))
    small_s, gemms_fwd_s, gemms_bwd_s = moe_kernels_s(ctx, stage.layers, deg, m)
    stage.fwd.add_predicted("other_ops", small_s + gemms_fwd_s)
    if ctx.workload.training:
        stage.bwd.add_predicted("other_ops", small_s + gemms_bwd_s)
    busiest_fwd_s, busiest_bwd_s = random_routing_s(ctx, stage.layers, deg, m)
    stage.fwd.add_predicted("gemm", busiest_fwd_s)
    stage.bwd.add_predicted("gemm", busiest_bwd_s)


def add_recompute(ctx: Context, stage: Stage, deg: Degrees, m: int) -> None:
    """Recompute in the backward pass under the execution's policy (call before the stage's
    boundary sends are added): a policy that reruns every op of the block ("full", `layer-N` on
    its share of the blocks, `full-block:N` on the first N of each of the stage's virtual
    stages) runs the stage's forward again, collectives included; any other the
    ops `rerun_ops` names (`_partial_rerun_s`)."""
    if not ctx.workload.training:
        return
    model = ctx.workload.model
    p = policy(ctx.execution.recompute)
    flash = model is None or model.attention != "standard"
    gated = model is None or model.gated
    rerun = rerun_ops(p, gated=gated, flash=flash)
    if not rerun:
        return
    if rerun == rerun_ops(policy("full"), gated=gated, flash=flash):
        blocks = ctx.workload.blocks_in(stage.layers)
        chunks = ctx.execution.interleave
        share = 1.0 if model is None else checkpointed_share(model, p, blocks, chunks)
        if share:  # layer-N with N above the layers: no block is checkpointed
            _rerun_forward(stage, share)
        return
    if model is None:
        return
    again = _partial_rerun_s(ctx, stage, deg, m, p)
    if again:
        stage.bwd.add_predicted("recompute", again)
    _rerun_expert_collectives(ctx, stage, deg, m, p)


def _rerun_expert_collectives(ctx: Context, stage: Stage, deg: Degrees, m: int, p: Policy) -> None:
    """Under a framework whose rematerialization reruns collectives (`remat_collectives`,
    frameworks/*.toml: JAX's remat recomputes every output the policy does not save), a rerun
    expert einsum routes its tokens again: the forward expert-parallel terms of each expert
    layer the policy reruns (the dispatch with the gate and up projections, the combine with
    the down projection, `_layer_matmuls`) run once more in the backward pass, as the
    execution runs them, on the checkpointed share of the blocks."""
    model = ctx.workload.model
    if model is None or not load_framework(ctx.execution.framework).remat_collectives:
        return
    rerun = set(rerun_ops(p, gated=model.gated, flash=model.attention != "standard"))
    share = checkpointed_share(model, p)
    for layer, n in stage.layers:
        if layer.name not in ROUTED_EXPERT_LAYERS or not rerun & set(
            _layer_matmuls(layer, model.gated)
        ):
            continue
        for term in ctx.part(layer, n, deg, m).run(ctx, deg):
            if term.purpose == "ep" and term.phase == "forward" and not term.once_per_step:
                stage.add_comm(replace(term, phase="backward", calls=term.calls * share))


def _rerun_forward(stage: Stage, share: float) -> None:
    """The stage's forward again in its backward (on `share` of its blocks), with the
    collectives that run inside its blocks: tp's, and a MoE layer's expert-parallel dispatch
    and combine (`_rerun_terms`)."""
    fwd = stage.fwd
    rerun = _rerun_terms(stage)
    if share == 1.0:
        stage.bwd.local = stage.bwd.local + fwd.local
        for term in rerun:  # the recomputed forward runs its collectives again
            stage.add_comm(replace(term, phase="backward"))
        stage.bwd.add_predicted("recompute", fwd.compute_pred_s)
        stage.bwd.lower_parts["recompute"] += fwd.local_s
        return
    stage.bwd.local = stage.bwd.local + fwd.local * share
    for term in rerun:
        stage.add_comm(replace(term, phase="backward", calls=term.calls * share))
    stage.bwd.add_predicted("recompute", share * fwd.compute_pred_s)
    stage.bwd.lower_parts["recompute"] += share * fwd.local_s


def _rerun_terms(stage: Stage) -> list[CommTerm]:
    """The forward collectives a recomputed block runs again: tensor parallelism's, and the
    expert-parallel dispatch and combine of each MoE layer (its per-microbatch all-to-alls;
    not the once-per-step gradient terms). Megatron-Core checkpoints whole transformer layers
    under --recompute-granularity full (`TransformerBlock._checkpointed_forward`), and a MoE
    layer's forward is route -> dispatch -> experts -> combine in one function
    (megatron/core/transformer/moe/moe_layer.py, `MoELayer.forward`'s `custom_forward`, commit
    001199898c), so its recompute reruns the token dispatcher's all-to-alls."""
    return [t for t in stage.terms if rerun_by_recompute(t)]


def rerun_by_recompute(term: CommTerm) -> bool:
    """Whether a recomputed block runs `term` again (`_rerun_terms`; the training search's
    communication floor asks the same, `vector_floors.critical_comm_s`)."""
    ep = term.purpose == "ep" and not term.once_per_step
    return term.phase == "forward" and (term.purpose == "tp" or ep)


# each block layer's share of the work of the block's matmuls (shardline.basics.recompute.MATMULS)
_GATE_UP = {"gate_proj": 0.5, "up_proj": 0.5}
_KV = {"k_proj": 0.5, "v_proj": 0.5}
_LAYER_MATMULS: dict[str, dict[str, float]] = {
    "mla_q_up": {"q_proj": 1.0},
    "mla_down": _KV,
    "mla_up": _KV,
    "mla_absorb": _KV,
    "attn_out": {"out_proj": 1.0},
    "ffn_in": _GATE_UP,
    "shared_in": _GATE_UP,
    "expert_in": _GATE_UP,
    "ffn_up": {"up_proj": 1.0},
    "shared_up": {"up_proj": 1.0},
    "expert_up": {"up_proj": 1.0},
    "ffn_down": {"down_proj": 1.0},
    "shared_down": {"down_proj": 1.0},
    "expert_down": {"down_proj": 1.0},
    "moe_combine": {"down_proj": 1.0},  # the down projection's output through the combine mask
}
# the memory-bound ops of a training block (shardline.realistic.block.block_ops) by the op of
# the block that runs them: (name, occurrence) -> ops; the fp8 casts go with the matmuls
_MEMOP_OWNERS: dict[tuple[str, int], tuple[str, ...]] = {
    ("layer_norm", 0): ("norm1",),
    ("layer_norm", 1): ("norm2",),
    ("bias_dropout_add", 0): ("residual1",),
    ("bias_dropout_add", 1): ("residual2",),
    ("swiglu", 0): ("activation",),
    ("gelu", 0): ("activation",),
    ("rotary", 0): ("q_proj", "k_proj"),
    ("repeat_kv", 0): ("k_proj", "v_proj"),
    ("qk_norm", 0): ("q_proj", "k_proj"),
    ("moe_permute", 0): ("gate_proj", "up_proj"),
    ("moe_unpermute", 0): ("down_proj",),
}


def _layer_matmuls(layer: Layer, gated: bool) -> dict[str, float]:
    """The block matmuls one layer does, each with its share of the layer's work (the fused QKV
    projection: q R/(R+2), k and v 1/(R+2) each, R query heads per kv head; the dense first
    blocks' FFN of a MoE, "dense_ffn_in" and "dense_ffn_down", as the FFN's)."""
    name = layer.name.removeprefix("dense_")
    if name == "attn_qkv":
        j = layer.dims["J"]
        return {"q_proj": (j - 2) / j, "k_proj": 1 / j, "v_proj": 1 / j}
    if name in ("router", "moe_dispatch"):  # on the MLP's input, as the gate and up projections
        return {"gate_proj" if gated else "up_proj": 1.0}
    return _LAYER_MATMULS.get(name, {})


def _partial_rerun_s(ctx: Context, stage: Stage, deg: Degrees, m: int, p: Policy) -> float:
    """Seconds the backward spends rerunning what p does not keep, one microbatch: the rerun
    matmuls' share of each layer's forward time; the attention core's forward time (and, with
    standard attention, its softmax and dropout) unless FlashAttention only has to rebuild the
    scores, which its backward recomputes anyway and its time already counts; the memory-bound
    ops of the rerun ops (the fp8 casts in proportion to the matmul weights rerun). Tensor-parallel
    collectives are not rerun (their outputs count as kept: torchtitan's _save_list keeps
    reduce-scatter outputs)."""
    model = ctx.workload.model
    assert model is not None
    flash = model.attention != "standard"
    rerun = set(rerun_ops(p, gated=model.gated, flash=flash))
    kept = kept_tensors(p, gated=model.gated, flash=flash)
    again = 0.0
    for layer, n in stage.layers:
        share = sum(v for op, v in _layer_matmuls(layer, model.gated).items() if op in rerun)
        if share:
            cost = ctx.cost(layer, ctx.local(layer, deg, m))
            again += share * n * float(cost.cost.predicted_s)
    blocks = ctx.workload.blocks_in(stage.layers)
    ops = _ops(ctx, block_ops, deg, m)
    if "attention" in rerun and not (flash and "context" in kept):
        scores = [op for op in ops if op.name in ("softmax", "attention_dropout")]
        again += stage.fwd.parts["attention"] + blocks * _ops_s(ctx, scores, False)
    params = matmul_params(model)
    cast_share = sum(params[op] for op in rerun if op in params) / model.block_params
    seen: dict[str, int] = {}
    for op in ops:
        k = seen[op.name] = seen.get(op.name, -1) + 1
        if op.name == "fp8_cast_transpose":
            again += blocks * cast_share * _ops_s(ctx, [op], False)
        elif rerun.intersection(_MEMOP_OWNERS.get((op.name, k), ())):
            again += blocks * _ops_s(ctx, [op], False)
    # the MoE kernels: the router's and the dispatch's with the router (the gate projection's
    # input), each grouped linear's per-expert GEMMs with its projection
    small_s, gemms_s, _ = moe_kernels_s(ctx, stage.layers, deg, m)
    up = "gate_proj" if model.gated else "up_proj"
    again += (small_s + gemms_s / 2) * (up in rerun) + gemms_s / 2 * ("down_proj" in rerun)
    return again * checkpointed_share(model, p)


def embedding_s(ctx: Context, deg: Degrees, m: int, backward: bool) -> float:
    """The first stage's embedding ops, one phase (what `add_end_extras` adds there)."""
    return _ops_seconds(ctx, embedding_ops, deg, m, backward) if ctx.workload.model else 0.0


def add_end_extras(ctx: Context, stage: Stage, deg: Degrees, m: int, index: int) -> None:
    """The embedding (first stage) and the LM head, final norm and loss (last stage)."""
    model = ctx.workload.model
    if model is None:
        return
    training = ctx.workload.training
    if index == 0:
        stage.fwd.add_predicted("other_ops", _ops_seconds(ctx, embedding_ops, deg, m, False))
        if training:
            stage.bwd.add_predicted("other_ops", _ops_seconds(ctx, embedding_ops, deg, m, True))
    if index != deg.stages - 1:
        return
    stage.fwd.add_predicted("other_ops", _ops_seconds(ctx, head_ops, deg, m, False))
    if training:
        stage.bwd.add_predicted("other_ops", _ops_seconds(ctx, head_ops, deg, m, True))
    _add_head(ctx, stage, deg, m)


def _add_head(ctx: Context, stage: Stage, deg: Degrees, m: int) -> None:
    """The LM head einsum (and its backward) with its tensor-parallel collectives: with sequence
    parallelism the input is all-gathered first; the input gradient is all-reduced (reduce-
    scattered with sequence parallelism)."""
    if ctx.head is None:
        return
    ex = ctx.execution
    key = (deg, m, ex.sequence_parallel, ex.tp_overlap)
    memo: dict[tuple[object, ...], HeadPart] = ctx.once("head parts", dict)
    part = memo.get(key)
    if part is None:
        part = memo[key] = _head_part(ctx, deg, m)
    fwd, bwd, terms = part
    stage.fwd.add_einsums(fwd)
    for e in bwd:
        stage.bwd.add_einsums(e)
    for term in terms:
        stage.add_comm(term)


HeadPart = tuple[Einsums, tuple[Einsums, ...], tuple[CommTerm, ...]]


def _head_part(ctx: Context, deg: Degrees, m: int) -> HeadPart:
    """`_add_head`'s einsums and terms for these degrees and microbatches (and the context's
    sequence parallelism and tp overlap: the memo's key)."""
    head = ctx.head
    assert head is not None
    dims = ctx.local(head, deg, m)
    fwd = Einsums.of(ctx.cost(head, dims), 1)
    bwd = tuple(Einsums.of(ctx.cost(g, ctx.local(g, deg, m)), 1) for g in ctx.head_grads)
    tp = deg["tp"]
    if tp == 1:
        return fwd, bwd, ()
    x_bytes = head.operand_bytes(head.inputs[0].name, {**dims, "V": 1})
    net = ctx.network(deg)
    sp = ctx.execution.sequence_parallel
    kinds = [("all_gather", "forward")] if sp else []
    if ctx.workload.training:
        kinds.append(("reduce_scatter" if sp else "all_reduce", "backward"))
    terms = []
    for kind, phase in kinds:
        t, p = net.time(kind, x_bytes, "tp"), net.predicted(kind, x_bytes, "tp")
        critical = not ctx.execution.tp_overlap
        terms.append(
            CommTerm("tp", kind, tp, 1, x_bytes, t, critical=critical, phase=phase, predicted_s=p)
        )
    return fwd, bwd, tuple(terms)


def add_interleave_wrap(ctx: Context, stage: Stage, deg: Degrees, index: int) -> None:
    """With V > 1 chunks per stage the first and the last device also send the other way: the
    last device passes chunk v's output on to the first device's chunk v + 1, V - 1 times per
    microbatch (and the gradients come back the same way), so an end stage sends V - 1 more
    times in the direction it otherwise would not (Narayanan et al. 2021, interleaved 1F1B)."""
    V, P = ctx.execution.interleave, deg.stages
    if not ctx.workload.training or V <= 1 or P <= 1 or index not in (0, P - 1):
        return
    sends = [t for t in stage.terms if t.purpose == "pp"]
    if not sends:
        return
    one = sends[0]
    other = "backward" if one.phase == "forward" else "forward"
    stage.add_comm(replace(one, phase=other, calls=one.calls / V * (V - 1)))
