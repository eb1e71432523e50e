"""The tables the vectorized training search reads, priced once by the plan engine itself.

A layout's step splits into parts that depend on few of its choices (docs/search.md):
- one block's forward and backward for one microbatch (compute, tensor-parallel and any other
  per-layer critical communication, the memory-bound ops, recompute) depends on the "inner"
  degrees (every strategy that splits neither the batch nor the layers: tp today), the
  microbatch's sequences b, sequence parallelism and the recompute mode: the engine's own stage
  (`Context.stage`) of one and of two blocks gives the block (the difference) and the ends
  (embedding, LM head and loss: the rest);
- the pipeline send, the data-parallel gradient traffic and FSDP's gathers depend on the whole
  assignment of degrees: priced per assignment on its mesh (`MeshNetwork`), as the strategies
  price them.
The vectorized evaluator (`vector_eval`) combines the tables over microbatches, interleave,
recompute, sequence parallelism and the ZeRO stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import product
from math import prod
from typing import Any

import numpy as np

from shardline.dtypes import dtype_bits
from shardline.errors import InputError
from shardline.hardware import Chip
from shardline.options import RECOMPUTE_MODES, Execution
from shardline.planning.evaluate import Context
from shardline.planning.network import MeshNetwork
from shardline.strategies import Degrees, strategies
from shardline.workload import Workload, backward_layers

__all__ = ["Tables", "BlockTimes", "inner_names", "batch_names", "layer_names", "block_times"]

ZERO_STAGES = (0, 1, 2, 3)
# The most (inner layout x microbatch size) block shapes probed with the plan engine, each tens
# of milliseconds: 2,048 sequences per step give 5 x 12 = 60; a batch with very many divisors
# (122,070,312 sequences: 192) would take minutes.
MAX_BLOCK_PROBES = 400


def batch_names() -> tuple[str, ...]:
    return tuple(s.name for s in strategies() if "batch" in s.splits)


def layer_names() -> tuple[str, ...]:
    return tuple(s.name for s in strategies() if "layers" in s.splits)


def inner_names() -> tuple[str, ...]:
    """Strategies priced inside the block probe: those that split neither batch nor layers."""
    skip = set(batch_names()) | set(layer_names())
    return tuple(s.name for s in strategies() if s.name not in skip)


@dataclass(frozen=True)
class BlockTimes:
    """Per microbatch (seconds): one block's realistic compute, critical communication and
    overlapped communication, forward and backward; the same of the ends (embedding, LM head and
    loss: a stage of no blocks)."""

    fwd_compute_s: float
    fwd_crit_s: float
    fwd_ov_s: float
    bwd_compute_s: float
    bwd_crit_s: float
    bwd_ov_s: float
    ends_fwd_compute_s: float
    ends_fwd_crit_s: float
    ends_fwd_ov_s: float
    ends_bwd_compute_s: float
    ends_bwd_crit_s: float
    ends_bwd_ov_s: float


PROBED = tuple(BlockTimes.__dataclass_fields__)


def _phase(ph: Any) -> tuple[float, float, float]:
    """(compute, critical, overlapped) realistic seconds of a stage's phase."""
    return ph.compute_pred_s, float(ph.critical.predicted_s), float(ph.overlapped.predicted_s)


def _less(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(x - y for x, y in zip(a, b, strict=True))


def block_times(ctx: Context, inner: dict[str, int], sequences: int) -> BlockTimes:
    """Probe the engine: a stage of one block and one of none (the ends alone), pp = 1, with the
    batch split so that each device holds `sequences` sequences per microbatch."""
    w = ctx.workload
    deg = Degrees({**inner, "dp": max(1, w.batch // sequences)})
    one = [(layer, layer.count) for layer in w.layers]
    s1 = ctx.stage(deg, 1, 0, one, w.layers[-1])
    s0 = ctx.stage(deg, 1, 0, [], w.layers[-1])  # the ends alone
    ends = (*_phase(s0.fwd), *_phase(s0.bwd))
    values = (*_less((*_phase(s1.fwd), *_phase(s1.bwd)), ends), *ends)
    return BlockTimes(**dict(zip(PROBED, values, strict=True)))


@dataclass
class Tables:
    """Everything the vectorized kernel needs, as plain numbers and numpy arrays (picklable)."""

    batch: int  # sequences per step
    tokens_per_item: int
    blocks: int  # repeats of the block
    devices: int
    capacity_bytes: float
    peak_flops_per_s: float
    model_flops: float  # one step, all devices
    hardware_flops: dict[str, float]  # by recompute mode
    seq_b: np.ndarray  # the microbatch sizes (sequences) probed
    # PROBED name -> [inner index, b index, sp, recompute, tp overlap] -> seconds
    probed: dict[str, np.ndarray] = field(default_factory=dict)
    act_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))  # one block, b seqs
    logits_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))  # [inner, b]
    assign: dict[str, np.ndarray] = field(default_factory=dict)  # per assignment
    inner_keys: list[tuple[int, ...]] = field(default_factory=list)
    names: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)


def hw_flops(ctx: Context) -> tuple[float, dict[str, float]]:
    from shardline.realistic.flops import hardware_flops, model_flops

    model = ctx.workload.model
    assert model is not None
    return model_flops(model, True), {rc: hardware_flops(model, True, rc) for rc in RECOMPUTE_MODES}


def _contexts(w: Workload, chip: Chip) -> dict[tuple[int, int, int], Context]:
    """One engine Context per (sp, recompute, tp overlap), sharing the caches that do not depend
    on the execution (local sizes, layer Costs, backward layers, priced collectives)."""
    out: dict[tuple[int, int, int], Context] = {}
    base: Context | None = None
    for sp, r, ov in product((0, 1), range(len(RECOMPUTE_MODES)), (0, 1)):
        ex = Execution(
            sequence_parallel=bool(sp), recompute=RECOMPUTE_MODES[r], tp_overlap=bool(ov)
        )
        ctx = Context(w, chip, ex)
        if base is None:
            base = ctx
        else:
            ctx._dims, ctx._costs, ctx._backward = base._dims, base._costs, base._backward
            ctx._networks, ctx._priced = base._networks, base._priced
        out[(sp, r, ov)] = ctx
    return out


def probe_blocks(
    w: Workload, chip: Chip, inner_keys: list[tuple[int, ...]], seq_b: list[int]
) -> dict[str, np.ndarray]:
    """The PROBED times of every inner key x b x sp x recompute x tp overlap (sequence
    parallelism and overlap only where tp > 1)."""
    names = inner_names()
    shape = (len(inner_keys), len(seq_b), 2, len(RECOMPUTE_MODES), 2)
    out = {k: np.full(shape, np.inf) for k in PROBED}
    for (sp, r, ov), ctx in _contexts(w, chip).items():
        for i, key in enumerate(inner_keys):
            inner = dict(zip(names, key, strict=True))
            if (sp or ov) and inner.get("tp", 1) == 1:
                continue
            for j, b in enumerate(seq_b):
                bt = block_times(ctx, inner, b)
                for k in PROBED:
                    out[k][i, j, sp, r, ov] = getattr(bt, k)
    return out


def activation_table(
    w: Workload, inner_keys: list[tuple[int, ...]], seq_b: list[int]
) -> tuple[np.ndarray, np.ndarray]:
    """Activation bytes of one block (inner x b x sp x recompute) and one microbatch's fp32
    logits on the last stage (inner x b), as the engine's memory check counts them."""
    from shardline.realistic.activations import layer_activation_bytes
    from shardline.realistic.block import LOSS_BYTES

    model = w.model
    assert model is not None
    names = inner_names()
    act = np.zeros((len(inner_keys), len(seq_b), 2, len(RECOMPUTE_MODES)))
    logits = np.zeros((len(inner_keys), len(seq_b)))
    for i, key in enumerate(inner_keys):
        tp = dict(zip(names, key, strict=True)).get("tp", 1)
        for j, b in enumerate(seq_b):
            logits[i, j] = b * model.q_len * (model.vocab or 0) / tp * LOSS_BYTES
            for sp in (0, 1):
                for r, rc in enumerate(RECOMPUTE_MODES):
                    act[i, j, sp, r] = layer_activation_bytes(
                        model, b, tp=tp, sp=bool(sp and tp > 1), recompute=rc
                    )
    return act, logits


def bytes_per_element(w: Workload) -> float:
    return dtype_bits(w.layers[0].dtype) / 8


def _stage_blocks(w: Workload, pp: int) -> tuple[float, float]:
    """Blocks on the first (fullest) and the last stage of `pp`."""
    if pp == 1:
        return float(w.repeat), float(w.repeat)
    how = w.pipeline_splits(pp)
    if how == "layers":
        k = w.layer_count / pp / w.block_instances
        return k, k
    sizes = w.stage_blocks(pp)
    return float(max(sizes)), float(sizes[-1])


@dataclass(frozen=True)
class BlockWeights:
    """One block's weight layers on one device under the inner degrees: (count, weight bytes,
    [(has weights, weight-gradient bytes or 0) per backward einsum]), its parameters and bytes."""

    layers: tuple[tuple[int, float, tuple[tuple[bool, float], ...]], ...]
    params: float
    nbytes: float


def block_weights(w: Workload, inner: dict[str, int]) -> BlockWeights:
    from shardline.strategies import local_dims

    out = []
    params = nbytes = 0.0
    for layer, count in w.distinct_layers:
        dims = local_dims(layer, inner, batch_dim=w.batch_dim)
        wbytes = float(sum(layer.operand_bytes(x, dims) for x in layer.weights))
        if not wbytes:
            continue
        nbytes += count * wbytes
        params += count * sum(prod(dims[d] for d in layer.operand(x).dims) for x in layer.weights)
        grads = []
        for grad in backward_layers(layer):
            gbytes = 0.0
            if grad.grad_of is not None:
                gdims = local_dims(grad, inner, batch_dim=w.batch_dim)
                gbytes = float(grad.operand_bytes(grad.output.name, gdims))
            grads.append((bool(grad.weights), gbytes))
        out.append((count, wbytes, tuple(grads)))
    return BlockWeights(tuple(out), params, nbytes)


class Priced:
    """Collective times shared by the assignments: an axis's network depends on its own degree
    and the degrees inside it on the mesh, so the key is those and the message."""

    def __init__(self, chip: Chip) -> None:
        self.chip = chip
        self.memo: dict[tuple[Any, ...], float] = {}

    def __call__(self, deg: Degrees, kind: str, nbytes: float, axis: str) -> float:
        from shardline.strategies import by_mesh

        upto = []
        for s in by_mesh():
            upto.append(deg[s.name])
            if s.name == axis:
                break
        key = (tuple(upto), kind, float(nbytes), axis)
        if key not in self.memo:
            self.memo[key] = MeshNetwork(self.chip, deg).predicted(kind, nbytes, axis)
        return self.memo[key]


def _grad_s(price: Priced, deg: Degrees, bw: BlockWeights, ways: float, zero: int) -> float:
    """The data-parallel gradient traffic of one block (once per step), as dp.layer_comm."""
    kinds = ("reduce_scatter", "all_gather") if zero else ("all_reduce",)
    total = 0.0
    for count, _, grads in bw.layers:
        for _, gbytes in grads:
            if gbytes:
                total += count * sum(price(deg, k, gbytes / ways, "dp") for k in kinds)
    return total


def _fsdp_s(price: Priced, deg: Degrees, bw: BlockWeights, axis: str) -> tuple[float, float]:
    """One block's FSDP (or ZeRO-3) traffic per microbatch, forward and backward (overlapped):
    all-gather each weight before its forward and its input-gradient matmul, reduce-scatter each
    weight gradient (the reduce-scatter only for fsdp, as the strategies price it)."""
    fwd = bwd = 0.0
    for count, wbytes, grads in bw.layers:
        fwd += count * price(deg, "all_gather", wbytes, axis)
        for has_weights, gbytes in grads:
            if has_weights:
                bwd += count * price(deg, "all_gather", wbytes, axis)
            if gbytes and axis == "fsdp":
                bwd += count * price(deg, "reduce_scatter", gbytes, axis)
    return fwd, bwd


ASSIGN_KEYS = (
    "tp", "pp", "dp", "replicas", "weight_ways", "inner", "k_first", "k_last", "params_block",
    "wbytes_block", "fsdp_fwd_s", "fsdp_bwd_s", "z3_fwd_s", "z3_bwd_s", "bucket_s", "opt_s",
)  # fmt: skip


@dataclass(frozen=True)
class Probe:
    """What one search prices once: the workload, chip, microbatch sizes and the collectives."""

    w: Workload
    chip: Chip
    seq_b: list[int]
    price: Priced


def _traffic(pr: Probe, deg: Degrees, bw: BlockWeights, weight_ways: int) -> dict[str, Any]:
    """FSDP and ZeRO-3 gathers per block, the last gradient bucket, pipeline sends per b and the
    gradient traffic per ZeRO stage."""
    from shardline.planning.step import DP_BUCKET_BYTES

    dp = deg.get("dp", 1)
    fs = _fsdp_s(pr.price, deg, bw, "fsdp") if deg.get("fsdp", 1) > 1 else (0.0, 0.0)
    z3 = _fsdp_s(pr.price, deg, bw, "dp") if dp > 1 else (0.0, 0.0)
    model = pr.w.model
    assert model is not None
    per_seq = model.q_len * model.d_model * bytes_per_element(pr.w)
    bucket = min(DP_BUCKET_BYTES, bw.nbytes / weight_ways)
    return {
        "fsdp_fwd_s": fs[0], "fsdp_bwd_s": fs[1], "z3_fwd_s": z3[0], "z3_bwd_s": z3[1],
        "bucket_s": pr.price(deg, "all_reduce", bucket, "dp") if dp > 1 else 0.0,
        "send_s": [pr.price(deg, "send", b * per_seq, "pp") for b in pr.seq_b],
        # the gradients sharded by the strategies alone (the engine's LayerView.gradient_ways)
        "grad_s": [
            _grad_s(pr.price, deg, bw, weight_ways, z) if dp > 1 else 0.0 for z in ZERO_STAGES
        ],
    }  # fmt: skip


def _optimizer_s(pr: Probe, p_first: float, ways: int, dp: int) -> list[float]:
    """One optimizer step over the first stage's parameters per ZeRO stage (memory-bound)."""
    from shardline.realistic.block import optimizer_bytes
    from shardline.realistic.kernels import memory_kernel_s

    bits = dtype_bits(pr.w.layers[0].dtype)
    state = Execution().state_bytes_per_param(bits)
    return [
        memory_kernel_s(
            pr.chip,
            optimizer_bytes(p_first / (ways * (dp if z >= 1 else 1)), bits, state),
            cuda_graphs=False,
        )
        for z in ZERO_STAGES
    ]


def assignment_row(pr: Probe, deg: Degrees, inner_index: int, bw: BlockWeights) -> dict[str, Any]:
    """Everything of one assignment of degrees that the knobs do not change (scalars), and its
    per-b pipeline send and per-ZeRO-stage gradient traffic and optimizer step."""
    w = pr.w
    tp, dp = deg.get("tp", 1), deg.get("dp", 1)
    weight_ways = prod(deg[s.name] for s in strategies() if s.memory.weights == "sharded")
    k_first, k_last = _stage_blocks(w, deg.stages)
    model = w.model
    assert model is not None
    end = (model.vocab or 0) * model.d_model / tp
    p_first = k_first * bw.params + end * (2 if deg.stages == 1 else 1)
    return {
        "tp": tp, "pp": deg.stages, "dp": dp, "replicas": deg.replicas,
        "weight_ways": weight_ways, "inner": inner_index, "k_first": k_first, "k_last": k_last,
        "params_block": bw.params, "wbytes_block": bw.nbytes,
        "v_max": max(v for v in (1, 2, 4, 8) if deg.stages > 1 and w.chunks_fit(deg.stages, v))
        if deg.stages > 1
        else 1,
        "opt_s": _optimizer_s(pr, p_first, weight_ways, dp),
        **_traffic(pr, deg, bw, weight_ways),
    }  # fmt: skip


def build_tables(w: Workload, chip: Chip, assignments: list[Degrees], devices: int) -> Tables:
    """Probe the engine for every inner key and microbatch size (the shared tables); the
    assignments are priced per chunk (`price_assignments`)."""
    from shardline.planning.search import divisors

    names = inner_names()
    inner_keys = sorted({tuple(d[n] for n in names) for d in assignments})
    seq_b = divisors(w.batch)
    if len(inner_keys) * len(seq_b) > MAX_BLOCK_PROBES:
        raise InputError(
            f"the search would probe {len(inner_keys) * len(seq_b):,} block shapes "
            f"({len(inner_keys)} inner layouts x {len(seq_b)} microbatch sizes, the divisors of "
            f"{w.batch:,} sequences per step); the limit is {MAX_BLOCK_PROBES}: give a "
            "--global-batch with fewer divisors (a power of two) or hold degrees with --fix"
        )
    model_flops, hardware = hw_flops(Context(w, chip, Execution()))
    first = w.layers[0]
    t = Tables(
        batch=w.batch, tokens_per_item=w.tokens_per_item, blocks=w.repeat, devices=devices,
        capacity_bytes=chip.capacity_bytes,
        peak_flops_per_s=chip.peak(first.compute_dtype or first.dtype),
        model_flops=model_flops, hardware_flops=hardware, seq_b=np.array(seq_b, dtype=float),
        inner_keys=inner_keys, names=names,
    )  # fmt: skip
    probed = probe_blocks(w, chip, inner_keys, seq_b)
    t.probed = probed
    t.act_bytes, t.logits_bytes = activation_table(w, inner_keys, seq_b)
    model = w.model
    assert model is not None
    bits = dtype_bits(model.weights_dtype)  # the weights' storage dtype (shardline.precision)
    t.extra = {
        "end_params": (model.vocab or 0) * model.d_model,
        "tables_one_stage": 1 if model.tied_embeddings else 2,  # tied: one shared table
        "bytes_per_param": bits / 8,
        "state_bytes": Execution().state_bytes_per_param(bits),
    }
    return t


def price_assignments(
    t: Tables, w: Workload, chip: Chip, assignments: list[Degrees]
) -> dict[str, np.ndarray]:
    """The per-assignment columns (`ASSIGN_KEYS`, send_s, grad_s, opt_s) of these assignments."""
    index = {key: i for i, key in enumerate(t.inner_keys)}
    pr = Probe(w, chip, [int(b) for b in t.seq_b], Priced(chip))
    weights: dict[tuple[int, ...], BlockWeights] = {}
    rows = []
    for d in assignments:
        key = tuple(d[n] for n in t.names)
        if key not in weights:
            weights[key] = block_weights(w, dict(zip(t.names, key, strict=True)))
        rows.append(assignment_row(pr, d, index[key], weights[key]))
    return {k: np.array([r[k] for r in rows], dtype=float) for k in rows[0]} if rows else {}
