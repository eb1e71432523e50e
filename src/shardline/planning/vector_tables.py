"""The tables the vectorized training search reads, priced once by the plan engine itself.

A layout's step splits into parts that depend on few of its choices (docs/search.md):
- one piece's forward and backward for one microbatch (compute, tensor-parallel and any other
  per-layer critical communication, the memory-bound ops, recompute) depends on the "inner"
  degrees (`inner_names`: tp, cp, and ep, which splits the experts as well as the batch; with ep
  on, the fsdp inside it on the mesh too: `probe_key`), the microbatch's sequences b, sequence
  parallelism and the recompute mode: the engine's own stage (`Context.stage`) of one piece and
  of none gives the piece (the difference) and the ends (embedding, LM head and loss). A piece
  is a block, a dense block (DeepSeek-V3's first blocks) or a single layer (what a pipeline
  that cuts the blocks leaves over); each stage is the sum of its pieces (`vector_stages`),
  and the engine's stage is the sum of its layers' parts, so the sums are the engine's;
- the pipeline send, the data-parallel gradient traffic and FSDP's gathers depend on the whole
  assignment of degrees: priced per assignment on its mesh (`vector_assign`), as the strategies
  price them. Which probes and which assignments are needed at all: `vector_bound`.
The vectorized evaluator (`vector_eval`) combines the tables over microbatches, interleave,
recompute, sequence parallelism and the ZeRO stage.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from itertools import product
from typing import Any

import numpy as np

from shardline.basics.dtypes import dtype_bits
from shardline.basics.options import RECOMPUTE_MODES, Execution
from shardline.hardware import Chip
from shardline.planning.evaluate import Context
from shardline.planning.memory import activation_table
from shardline.planning.phases import decomposed_exposed_s
from shardline.planning.stage_extras import embedding_s, gather_sm_share
from shardline.planning.step import ep_overlapped_s, grad_reduce_hidden
from shardline.planning.vector_floors import batch_splits, inner_degrees, pair_floor, probe_degrees
from shardline.planning.vector_stages import Candidate, StageLayers, floor_pieces
from shardline.strategies import Degrees, plain_batch_split, strategies
from shardline.strategies.ep import experts_of
from shardline.workload.workload import Workload

__all__ = [
    "Tables",
    "BlockTimes",
    "inner_names",
    "batch_names",
    "layer_names",
    "block_times",
    "inner_grad_terms",
    "build_tables",
    "probe_blocks",
    "empty_probes",
    "piece_at",
    "contexts",
]

ZERO_STAGES = (0, 1, 2, 3)


def batch_names() -> tuple[str, ...]:
    return tuple(s.name for s in strategies() if "batch" in s.splits)


def layer_names() -> tuple[str, ...]:
    return tuple(s.name for s in strategies() if "layers" in s.splits)


def _plain(s: Any) -> bool:
    """dp, fsdp: the batch split alone."""
    return plain_batch_split(s)


def inner_names() -> tuple[str, ...]:
    """Strategies priced inside the block probe: those that change one device's block beyond
    its count of sequences: every strategy that splits neither the batch nor the layers (tp, cp)
    and the batch splits that also split other dims (ep: the experts)."""
    return tuple(s.name for s in strategies() if "layers" not in s.splits and not _plain(s))


def probe_names() -> tuple[str, ...]:
    """The inner names, then the plain batch splits inside an inner batch split on the mesh
    (fsdp inside ep): they place its network (`probe_key`); then a folded layout's etp."""
    from shardline.planning.vector_floors import FOLD_NAME
    from shardline.strategies import by_mesh

    mesh = [s for s in by_mesh() if "layers" not in s.splits]
    splits = [i for i, s in enumerate(mesh) if "batch" in s.splits and not _plain(s)]
    inside = [s.name for i, s in enumerate(mesh) if _plain(s) and splits and i < max(splits)]
    return (*inner_names(), *inside, FOLD_NAME)


def probe_key(deg: Any, names: tuple[str, ...]) -> tuple[int, ...]:
    """An assignment's probe: its inner degrees, and the plain batch splits inside an inner
    batch split where that split is on (> 1), else 1 (a dense model's fsdp changes no probe)."""
    from shardline.planning.vector_floors import FOLD_NAME, fold_key  # a folded layout's etp

    inner = inner_names()
    on = any(deg[n] > 1 for n in inner if "batch" in batch_splits(n))
    return tuple(
        fold_key(deg) if n == FOLD_NAME else deg[n] if n in inner or on else 1 for n in names
    )


@dataclass(frozen=True)
class BlockTimes:
    """Per microbatch (seconds): each probed piece's realistic compute, critical, overlapped
    communication and contention (compute its overlapped kernels' SMs take), forward and
    backward (arrays over `Tables.pieces`), its overlapped all-to-alls and the compute they hold
    (`step.ep_overlapped_s`); the same of the ends (embedding, LM head, loss: no blocks)."""

    fwd_compute_s: np.ndarray
    fwd_crit_s: np.ndarray
    fwd_ov_s: np.ndarray
    fwd_held_s: np.ndarray
    bwd_compute_s: np.ndarray
    bwd_crit_s: np.ndarray
    bwd_ov_s: np.ndarray
    bwd_held_s: np.ndarray
    fwd_ep_s: np.ndarray
    fwd_ep_held_s: np.ndarray
    bwd_ep_s: np.ndarray
    bwd_ep_held_s: np.ndarray
    ends_fwd_compute_s: float
    ends_fwd_crit_s: float
    ends_fwd_ov_s: float
    ends_fwd_held_s: float
    ends_bwd_compute_s: float
    ends_bwd_crit_s: float
    ends_bwd_ov_s: float
    ends_bwd_held_s: float
    emb_fwd_compute_s: float  # of the ends' compute: the embedding's, which the first stage runs
    emb_bwd_compute_s: float


PROBED = tuple(BlockTimes.__dataclass_fields__)
PIECE_FIELDS = PROBED[:12]  # summed over a stage's pieces (`Tables.contents`)
ENDS_FIELDS = PROBED[12:]


def _phase(ph: Any, shift: float = 0.0) -> tuple[float, ...]:
    """(compute, critical, overlapped, contention) realistic seconds of a stage's phase, `shift`
    seconds of the critical communication moved to the overlapped."""
    crit = float(ph.critical.predicted_s) + ph.pinned_s
    ov = float(ph.overlapped.predicted_s)
    return ph.compute_pred_s, crit - shift, ov + shift, ph.contention_s


def _less(a: tuple[float, ...], b: tuple[float, ...]) -> tuple[float, ...]:
    return tuple(x - y for x, y in zip(a, b, strict=True))


# their traffic is priced per assignment (vector_assign); the probes' stages leave it out
PER_ASSIGNMENT = frozenset(("dp", "fsdp"))


def _tp_critical_s(stage: Any, phase: str) -> float:
    """The phase's critical tensor-parallel seconds that `--tp-overlap` makes overlapped (it
    clears their critical flag: `stage_extras.tp_variants`, `add_end_extras`): all of a term's
    time, less what a term decomposed beside its GEMM leaves exposed
    (`phases.decomposed_exposed_s`, which the phase keeps waiting for)."""
    return sum(
        t.calls * (t.t_pred_s - _exposed(t))
        for t in stage.terms
        if t.purpose == "tp" and t.critical and not t.once_per_step and t.phase == phase
    )


def _exposed(t: Any) -> float:
    return 0.0 if t.paired_s is None else decomposed_exposed_s(t.t_pred_s, t.paired_s, t.devices)


def _values(stage: Any, overlap: bool) -> tuple[float, ...]:
    fwd = _tp_critical_s(stage, "forward") if overlap else 0.0
    bwd = _tp_critical_s(stage, "backward") if overlap else 0.0
    ep = (*ep_overlapped_s(stage.terms, "forward"), *ep_overlapped_s(stage.terms, "backward"))
    return (*_phase(stage.fwd, fwd), *_phase(stage.bwd, bwd), *ep)


def _probe_stages(
    ctx: Context, inner: dict[str, int], sequences: int, pieces: list[StageLayers]
) -> tuple[Any, list[Any]]:
    """The engine's stage of no block (the ends alone) and of each piece, pp = 1, the batch
    split so that each device holds `sequences` sequences per microbatch."""
    w = ctx.workload
    deg = probe_degrees(w, inner, sequences)
    s0 = ctx.stage(deg, 1, 0, [], w.layers[-1])
    return s0, [ctx.stage(deg, 1, 0, list(piece), w.layers[-1]) for piece in pieces]


def block_times(
    ctx: Context,
    inner: dict[str, int],
    sequences: int,
    overlap: bool = False,
    pieces: list[StageLayers] | None = None,
) -> BlockTimes:
    """Probe the engine: a stage of each piece (default the one block) less the stage of none
    (the ends alone), pp = 1. `overlap`: the same with tensor-parallel overlap, from a context
    without it (the terms turn overlapped)."""
    w = ctx.workload
    pieces = pieces or [tuple((layer, layer.count) for layer in w.layers)]
    s0, stages = _probe_stages(ctx, inner, sequences, pieces)
    ends = _values(s0, overlap)
    rows = [_less(_values(s, overlap), ends) for s in stages]
    each = np.array(rows).reshape(-1, len(PIECE_FIELDS))
    deg = probe_degrees(w, inner, sequences)
    emb = (embedding_s(ctx, deg, 1, False), embedding_s(ctx, deg, 1, True))
    values: dict[str, Any] = {k: each[:, f].copy() for f, k in enumerate(PIECE_FIELDS)}
    values |= dict(zip(ENDS_FIELDS, (*ends[:8], *emb), strict=True))  # the ends: no all-to-all
    return BlockTimes(**values)


# (axis, collective kind, bytes, the probe's gradient ways, calls)
GradTerm = tuple[str, str, float, int, float]


def inner_grad_terms(
    ctx: Context, inner: dict[str, int], sequences: int, pieces: list[StageLayers]
) -> list[list[GradTerm]]:
    """Each piece's once-per-step terms of the inner axes (cp's reduce-scatter and all-gather
    of the weight gradients, ep's all-reduce of the dense ones; dp's and fsdp's are priced per
    assignment), with the ways the probe shards the gradients: an assignment prices them on its
    own mesh at its own ways (`vector_assign`), as its stage's terms would be."""
    s0, stages = _probe_stages(ctx, inner, sequences, pieces)
    ways = ctx.gradient_ways(probe_degrees(ctx.workload, inner, sequences))

    def terms(stage: Any, sign: float) -> list[GradTerm]:
        return [
            (t.purpose, t.kind, t.bytes, ways, sign * t.calls)
            for t in stage.terms
            if t.once_per_step
        ]

    return [terms(s, 1.0) + terms(s0, -1.0) for s in stages]


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
    hardware_flops: dict[str, float]  # by recompute policy
    seq_b: np.ndarray  # the microbatch sizes (sequences) probed
    # PROBED name -> seconds: the ends' [inner index, b index, sp, recompute, tp overlap], the
    # pieces' sums [slot, sp, recompute, tp overlap, content], a slot per probed (inner, b)
    # (`slots`, -1 before its first probe: a few hundred of the many thousand pairs are probed)
    probed: dict[str, np.ndarray] = field(default_factory=dict)
    slots: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    act_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))  # one block, b seqs
    logits_bytes: np.ndarray = field(default_factory=lambda: np.zeros(0))  # [inner, b]
    assign: dict[str, np.ndarray] = field(default_factory=dict)  # per assignment
    inner_keys: list[tuple[int, ...]] = field(default_factory=list)
    names: tuple[str, ...] = ()
    extra: dict[str, Any] = field(default_factory=dict)
    priced: Any = None  # the collectives priced so far (`Priced`), shared by the chunks
    probes: int = 0  # engine probes run (block_times calls)
    # the recompute policies searched (the layouts' "rc" indexes them): Megatron's three, or the
    # one --recompute pins
    recomputes: tuple[str, ...] = RECOMPUTE_MODES
    # a mixture of experts runs tp > 1 only with sequence parallelism: Megatron-Core's
    # MoELayer.forward raises in training when tensor_model_parallel_size > 1 and not
    # sequence_parallel (megatron/core/transformer/moe/moe_layer.py); torchtitan and MaxText
    # shard the activations over the tensor axis anyway
    tp_needs_sp: bool = False
    # the execution fields the search does not try (a framework's: its gradient dtype, launch
    # mode, attention kernel, optimizer); every layout runs on them
    base: Execution = field(default_factory=Execution)
    # pair_floor's: by (inner index, b index) and by the einsums' local sizes
    floors: dict[tuple[Any, ...], tuple[float, float]] = field(default_factory=dict)
    # vector_bound's critical communication floors: by (part, inner, b[, sp, overlap])
    comm_floors: dict[tuple[Any, ...], tuple[float, float]] = field(default_factory=dict)
    # what a stage holds, as sums of probed pieces (`stage_candidates`): the pieces, each
    # stage content's count of each piece [content, piece], the pieces each inner key needs
    pieces: list[StageLayers] = field(default_factory=list)
    contents: np.ndarray = field(default_factory=lambda: np.zeros((0, 0)))
    piece_need: np.ndarray = field(default_factory=lambda: np.zeros((0, 0), dtype=bool))
    # pp -> the stages whose times can differ (`Candidate`); the inner once-per-step terms of
    # each (inner key, piece) probed (`inner_grad_terms`)
    plans: dict[int, list[Candidate]] = field(default_factory=dict)
    grad_terms: dict[tuple[int, int], list[GradTerm]] = field(default_factory=dict)


def hw_flops(
    ctx: Context, recomputes: tuple[str, ...] = RECOMPUTE_MODES
) -> tuple[float, dict[str, float]]:
    from shardline.realistic.flops import hardware_flops, model_flops

    model = ctx.workload.model
    assert model is not None
    return model_flops(model, True), {rc: hardware_flops(model, True, rc) for rc in recomputes}


def contexts(
    w: Workload,
    chip: Chip,
    recomputes: tuple[str, ...] = RECOMPUTE_MODES,
    base: Execution | None = None,
) -> dict[tuple[int, int, int], Context]:
    """One engine Context per (sp, recompute, tp overlap), sharing the caches that do not depend
    on the execution (local sizes, layer Costs, backward layers, priced collectives)."""
    out: dict[tuple[int, int, int], Context] = {}
    start = base or Execution()
    first: Context | None = None
    for sp, r, ov in product((0, 1), range(len(recomputes)), (0, 1)):
        ex = replace(
            start, sequence_parallel=bool(sp), recompute=recomputes[r], tp_overlap=bool(ov)
        )
        ctx = Context(w, chip, ex)
        ctx.priced_apart = PER_ASSIGNMENT
        if first is None:
            first = ctx
        else:
            ctx.share_caches(first)
        out[(sp, r, ov)] = ctx
    return out


def empty_probes(t: Tables) -> None:
    shape = (len(t.inner_keys), len(t.seq_b), 2, len(t.recomputes), 2)
    t.probed = {k: np.full(shape, np.inf) for k in ENDS_FIELDS}
    t.probed |= {k: np.full((0, *shape[2:], len(t.contents)), np.inf) for k in PIECE_FIELDS}
    t.slots = np.full(shape[:2], -1, dtype=np.int64)


def _add_slots(t: Tables, pairs: np.ndarray) -> None:
    """A slot of the pieces' arrays for each (inner, b) of `pairs` [inner, b] that has none."""
    new = pairs & (t.slots < 0)
    count = int(new.sum())
    if not count:
        return
    first = len(t.probed[PIECE_FIELDS[0]])
    t.slots[new] = np.arange(first, first + count)
    for k in PIECE_FIELDS:
        more = np.full((count, *t.probed[k].shape[1:]), np.inf)
        t.probed[k] = np.concatenate([t.probed[k], more])


def piece_at(t: Tables, at: tuple[np.ndarray, ...]) -> np.ndarray:
    """The flat index of (inner, b, sp, recompute, overlap) into the pieces' arrays, less their
    last axis (the content): its slot's (`Tables.slots`; every probed pair has one)."""
    inner, j, *rest = at
    shape = t.probed[PIECE_FIELDS[0]].shape[:-1]
    return np.ravel_multi_index((t.slots[inner, j], *rest), shape)


def _probe_one(t: Tables, ctx: Context, at: tuple[int, int, int, int], overlap: int) -> None:
    """The probe of one (inner key, b, sp, recompute) and tp overlap: its ends, and each stage
    content's sums (the pieces it needs, times their counts)."""
    i, j, sp, r = at
    inner = dict(zip(t.names, t.inner_keys[i], strict=True))
    need = np.flatnonzero(t.piece_need[i])
    bt = block_times(ctx, inner, int(t.seq_b[j]), bool(overlap), [t.pieces[k] for k in need])
    for name in ENDS_FIELDS:
        t.probed[name][i, j, sp, r, overlap] = getattr(bt, name)
    counts = t.contents[:, need]
    whole = (t.contents.sum(axis=1) == counts.sum(axis=1)) & (counts.sum(axis=1) > 0)
    slot = t.slots[i, j]
    for name in PIECE_FIELDS:
        t.probed[name][slot, sp, r, overlap] = np.where(whole, counts @ getattr(bt, name), np.inf)
    for k in (int(x) for x in need):
        if (i, k) not in t.grad_terms:
            terms = inner_grad_terms(ctx, inner, int(t.seq_b[j]), [t.pieces[k]])
            t.grad_terms[(i, k)] = terms[0]


def probe_blocks(
    t: Tables, contexts: dict[tuple[int, int, int], Context], needed: np.ndarray
) -> int:
    """Fill `t.probed` (from `empty_probes`): the PROBED times of each inner key x b x sp x
    recompute (x tp overlap) that `needed` [inner, b, sp, recompute] marks and that is not
    probed yet. Sequence parallelism and overlap only where tp > 1. The probes run."""
    out, runs = t.probed, 0
    model = next(iter(contexts.values())).workload.model
    twin = model is not None and model.attention != "standard"
    twin = twin and t.recomputes[:2] == ("none", "selective")
    if twin:  # selective recompute changes nothing here (stage_extras.add_recompute): copy none
        needed = needed.copy()
        needed[:, :, :, 0] |= needed[:, :, :, 1]
        needed[:, :, :, 1] = False
    _add_slots(t, np.asarray(needed.any(axis=(2, 3))))
    for (sp, r, ov), ctx in contexts.items():
        if ov:  # from the context without overlap (`block_times`): its stages are cached
            continue
        todo = needed[:, :, sp, r] & np.isinf(out["ends_fwd_compute_s"][:, :, sp, r, 0])
        for i, j in zip(*np.nonzero(todo), strict=True):
            inner = dict(zip(t.names, t.inner_keys[i], strict=True))
            if sp and inner.get("tp", 1) == 1:
                continue
            for layers in floor_pieces(ctx.workload):  # the matmuls from their merged shapes
                pair_floor(t, ctx, int(i), int(j), layers)
            runs += 1
            for o in (0, 1) if inner.get("tp", 1) > 1 else (0,):
                _probe_one(t, ctx, (int(i), int(j), sp, r), o)
    if twin:
        for k in ENDS_FIELDS:
            out[k][:, :, :, 1] = out[k][:, :, :, 0]
        for k in PIECE_FIELDS:
            out[k][:, :, 1] = out[k][:, :, 0]
    return runs


def build_tables(
    w: Workload,
    chip: Chip,
    assignments: list[Degrees],
    devices: int,
    recomputes: tuple[str, ...] = RECOMPUTE_MODES,
    base: Execution | None = None,
) -> Tables:
    """The shared tables but the probes (`probe_blocks`, once the layouts that fit in memory
    say which) and the assignments' columns (`vector_assign`), for the recompute policies
    `recomputes`."""
    from shardline.planning.search import divisors

    base = base or Execution()
    names = probe_names()
    inner_keys = sorted({probe_key(d, names) for d in assignments})
    seq_b = divisors(w.batch)
    model_flops, hardware = hw_flops(Context(w, chip, base), recomputes)
    first = w.layers[0]
    t = Tables(
        batch=w.batch,
        tokens_per_item=w.tokens_per_item,
        blocks=w.repeat,
        devices=devices,
        capacity_bytes=chip.usable_capacity_bytes,
        peak_flops_per_s=chip.peak(first.compute_dtype or first.dtype),
        model_flops=model_flops,
        hardware_flops=hardware,
        seq_b=np.array(seq_b, dtype=float),
        inner_keys=inner_keys,
        names=names,
        recomputes=recomputes,
        tp_needs_sp=experts_of(w) is not None,
        base=base,
    )
    t.act_bytes, t.logits_bytes = activation_table(
        w,
        [inner_degrees(dict(zip(names, key, strict=True))) for key in inner_keys],
        seq_b,
        recomputes,
        base,
    )
    model = w.model
    assert model is not None
    bits = dtype_bits(
        model.weights_dtype
    )  # the weights' storage dtype (shardline.workload.precision)
    t.extra = {
        "end_params": (model.vocab or 0) * model.d_model,
        "tables_one_stage": 1 if model.tied_embeddings else 2,  # tied: one shared table
        "bytes_per_param": bits / 8,
        "state_bytes": base.state_bytes_per_param(bits),
        # the SM share FSDP's and ZeRO-3's overlapped collectives hold (stage_extras)
        "gather_sm_share": gather_sm_share(chip),
        # 1: the dp gradient reduction runs behind the last backward pass (step.grad_reduce_hidden)
        "grad_reduce_hidden": 1.0 if grad_reduce_hidden(base, chip) else 0.0,
    }
    return t
