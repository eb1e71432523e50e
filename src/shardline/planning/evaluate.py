"""Evaluating one plan: each stage's phases from the registry's strategies, then the pipeline.

The step: `cycles * max over stages (t_fwd + t_bwd)` with the schedule's cycles
(`planning.combine.cycles`: `m + (P - 1)/V` under 1F1B with V interleaved chunks in training),
plus whatever of the once-per-step communication (the data-parallel gradient all-reduce) the last
backward pass cannot hide. No strategy is named here: each registered strategy adds its own
communication per layer (`Strategy.layer_comm`) and per stage (`Strategy.stage_comm`)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from math import ceil
from typing import Any

from shardline.basics.framework import attention_kernel_of
from shardline.basics.options import Execution
from shardline.collectives import NetworkOptions
from shardline.hardware import Chip
from shardline.ops.cost import ZERO_COST, Cost
from shardline.planning.combine import cycles, slowest_stage
from shardline.planning.fsdp_copies import add_fsdp_copies
from shardline.planning.memory import stage_memory
from shardline.planning.network import MeshNetwork
from shardline.planning.phases import Einsums, Stage
from shardline.planning.results import PlanResult
from shardline.planning.stage_extras import (
    add_block_extras,
    add_end_extras,
    add_interleave_wrap,
    add_recompute,
    tp_variants,
)
from shardline.planning.step import gap_s, realistic_step, recompute_answer, tokens_answers
from shardline.realistic.block import head_layer
from shardline.realistic.kernels import causal_lower_bound, einsum_time_s, shape_key
from shardline.realistic.sustained import sustained_chip, with_attention_kernel
from shardline.strategies import (
    CommTerm,
    Degrees,
    LayerView,
    StageView,
    Strategy,
    by_mesh,
    device_share,
    local_dims,
    sizes_key,
)
from shardline.workload.dense_first import after
from shardline.workload.moe import EXPERT_AXIS, boundary_layer
from shardline.workload.stack import LayerCost, MemoryCheck, layer_cost
from shardline.workload.workload import Layer, Workload, backward_layers

__all__ = ["Context", "LayerPart", "communicating", "evaluate_plan", "layer_key"]

StageLayers = list[tuple[Layer, int]]


def layer_key(layer: Layer) -> tuple[str, tuple[object, ...]]:
    """A layer's key in the caches: its name and its content (by value, never by identity)."""
    return (layer.name, layer.content_key)


class Context:
    """One search's caches: local sizes, layer Costs, networks, stages and memory checks."""

    def __init__(
        self,
        workload: Workload,
        chip: Chip,
        execution: Execution | None = None,
        network: NetworkOptions | None = None,
    ) -> None:
        self.workload = workload
        self.chip = chip
        self.network_options = network
        self.execution = execution or Execution()
        # the realistic kernel times: the attention kernel the run names (or the default
        # framework's), and in a training step matmul rates held at the power limit
        self.attention_kernel = attention_kernel_of(
            self.execution.attention_kernel, workload.training
        )
        fused = with_attention_kernel(chip, self.attention_kernel)
        self.kernel_chip = sustained_chip(fused) if workload.training else fused
        # strategies whose communication a caller prices apart and the stages leave out (the
        # training search's block probes: dp's and fsdp's, priced per assignment)
        self.priced_apart: frozenset[str] = frozenset()
        model = workload.model
        self.head = head_layer(model, workload.training) if model is not None else None
        self.head_grads = (
            backward_layers(self.head) if self.head is not None and workload.training else []
        )
        self._backward: dict[tuple[str, tuple[object, ...]], list[Layer]] = {}
        self._index = {layer_key(layer): i for i, layer in enumerate(workload.layers)}
        self._dims: dict[tuple[object, ...], dict[str, int]] = {}
        self._sizes_keys: dict[Degrees, object] = {}
        self._costs: dict[tuple[object, ...], LayerCost] = {}
        # realistic einsum times found before their Costs, by the same key (the training
        # search's floors price a matmul from its merged shape): `cost` takes them
        self.einsum_times: dict[tuple[object, ...], float] = {}
        self._networks: dict[Degrees, MeshNetwork] = {}
        self._priced: dict[object, Any] = {}  # shared by the networks: keys name their mesh axis
        self._stage_layers: dict[int, list[tuple[StageLayers, Layer]]] = {}
        self._stages: dict[tuple[object, ...], Stage] = {}
        self._memory: dict[tuple[object, ...], MemoryCheck] = {}
        self._once: dict[str, object] = {}
        self._gradient_ways: dict[Degrees, int] = {}
        self._parts: dict[tuple[object, ...], LayerPart] = {}
        # what a layer's part depends on of the execution: all of it but the knobs that only
        # change how the stage runs the terms (`tp_variants`, `add_recompute`), so that contexts
        # that differ in those alone may share `_parts`
        self._part_execution = replace(
            self.execution, sequence_parallel=False, recompute="none", tp_overlap=False
        )
        # a stage before its recompute (`_prefix`) depends on all of the execution but that
        self._prefixes: dict[tuple[object, ...], Stage] = {}
        self._prefix_execution = replace(self.execution, recompute="none")
        self._shapes: dict[tuple[object, ...], LayerCost] = {}  # `cost` by shape (`sweep`)

    def share_caches(self, base: Context) -> None:
        """Use `base`'s caches that do not depend on the execution or that key by it (local
        sizes, layer Costs, backward layers, networks and priced collectives, layer parts and
        stage prefixes): `base` must be of the same workload, chip and network options, and
        kernel launch mode (the Costs do not key by it)."""
        assert base.workload is self.workload and base.chip is self.chip
        assert base.network_options == self.network_options
        assert base.execution.cuda_graphs == self.execution.cuda_graphs
        assert base.attention_kernel == self.attention_kernel  # kernel_chip carries it
        self._dims, self._costs, self._backward = base._dims, base._costs, base._backward
        self._sizes_keys, self.einsum_times = base._sizes_keys, base.einsum_times
        self._networks, self._priced = base._networks, base._priced
        self.kernel_chip = base.kernel_chip  # one object: the einsum memo keys by its id
        self._parts = base._parts  # keyed by the execution but sp, recompute and overlap
        self._prefixes = base._prefixes  # keyed by the execution but recompute
        self._gradient_ways = base._gradient_ways

    def once(self, name: str, compute: Callable[[], object]) -> object:
        """A value that depends on the search alone (not the plan), computed once."""
        if name not in self._once:
            self._once[name] = compute()
        return self._once[name]

    def network(self, deg: Degrees) -> MeshNetwork:
        if deg not in self._networks:
            self._networks[deg] = MeshNetwork(self.chip, deg, self._priced, self.network_options)
        return self._networks[deg]

    def local(self, layer: Layer, deg: Mapping[str, int], m: int) -> dict[str, int]:
        """The layer's sizes on one device under `deg` with `m` microbatches."""
        # a Degrees keys by what its sizes read of it (`sizes_key`), any other mapping by its
        # items
        degrees = self.sizes_key(deg) if isinstance(deg, Degrees) else tuple(deg.items())
        key = (layer.content_key, degrees, m)
        found = self._dims.get(key)
        if found is None:
            found = self._dims[key] = local_dims(
                layer, deg, batch_dim=self.workload.batch_dim, microbatches=m
            )
        return found

    def sizes_key(self, deg: Degrees) -> Any:
        """What a layer's local sizes read of `deg` (`strategies.sizes_key`), once per Degrees."""
        found = self._sizes_keys.get(deg)
        if found is None:
            found = self._sizes_keys[deg] = sizes_key(deg)
        return found

    def cost(self, layer: Layer, dims: Mapping[str, int]) -> LayerCost:
        """The layer's roofline Cost at these sizes, with its realistic time as predicted_s."""
        key = (layer.content_key, tuple(dims.items()))
        if key not in self._costs:
            t = self.einsum_times.get(key)
            shape = (shape_key(layer, dims, self.workload.model), t)  # what the Cost reads
            if shape not in self._shapes:
                base = layer_cost(layer, self.chip, dims)
                if t is None:
                    model, graphs = self.workload.model, self.execution.cuda_graphs
                    t = einsum_time_s(layer, self.kernel_chip, dims, model, graphs)
                cost = causal_lower_bound(base.cost, layer, self.workload.model)
                self._shapes[shape] = LayerCost(replace(cost, predicted_s=t), base.flops_per_s)
            self._costs[key] = self._shapes[shape]
        return self._costs[key]

    def following(self, layer: Layer) -> Layer:
        """The layer after this one: itself when it repeats (count > 1), else the next in the
        block, wrapping to the next block."""
        layers = self.workload.layers
        key = layer_key(layer)
        if key not in self._index:  # a dense first block's FFN (shardline.workload.dense_first)
            return after(self.workload, layer)
        return layer if layer.count > 1 else layers[(self._index[key] + 1) % len(layers)]

    def backward(self, layer: Layer) -> list[Layer]:
        key = layer_key(layer)
        if key not in self._backward:
            self._backward[key] = backward_layers(layer)
        return self._backward[key]

    def gradient_ways(self, deg: Degrees) -> int:
        """The ways the weight gradients are sharded under `deg` (`device_share`; not the ZeRO
        stage's: the strategies' gradient terms shard by FSDP alone)."""
        if deg not in self._gradient_ways:
            self._gradient_ways[deg] = device_share(self.workload, deg).gradients_ways
        return self._gradient_ways[deg]

    def view(self, layer: Layer, n: int, deg: Degrees, m: int) -> LayerView:
        grads = self.backward(layer) if self.workload.training else []
        return LayerView(
            layer=layer,
            count=n,
            dims=self.local(layer, deg, m),
            grads=tuple((g, self.local(g, deg, m)) for g in grads),
            following=self.following(layer),
            degrees=deg,
            local=lambda other, degrees: self.local(other, degrees, m),
            training=self.workload.training,
            gradient_ways=self.gradient_ways(deg),
            zero=self.execution.zero,
            cp_kind=self.execution.cp_kind,
            ep_dispatch=self.execution.ep_dispatch,
            ep_comm_sms=self.execution.ep_comm_sms,
            model=self.workload.model,
            grad_reduce_dtype=self.execution.grad_reduce_dtype,
            attention_kernel=self.attention_kernel,
        )

    def part(self, layer: Layer, n: int, deg: Degrees, m: int) -> LayerPart:
        """n instances of one layer in a stage (`LayerPart`), shared by the stages (and the
        contexts sharing `_parts`) that hold it under the same degrees and microbatches."""
        key = (layer_key(layer), n, deg, m, self._part_execution, self.priced_apart)
        found = self._parts.get(key)
        if found is None:
            found = self._parts[key] = _layer_part(self, layer, n, deg, m)
        return found

    def stages(self, pp: int) -> list[tuple[StageLayers, Layer]]:
        """The stages of `pp`, each stage's layers merged where they cost the same: one entry per
        (layer content, following layer's content), so that 10,000 layers of two shapes are
        priced as two."""
        if pp not in self._stage_layers:
            self._stage_layers[pp] = [
                (self._merged(layers), boundary_layer(self.workload.layers, last))
                for layers, last in self.workload.pipeline_stages(pp)
            ]
        return self._stage_layers[pp]

    def _merged(self, layers: StageLayers) -> StageLayers:
        merged: dict[tuple[object, ...], list[Any]] = {}
        for layer, n in layers:
            key = (layer.content_key, self.following(layer).content_key)
            merged.setdefault(key, [layer, 0])[1] += n
        return [(layer, n) for layer, n in merged.values()]

    def stage(self, deg: Degrees, m: int, index: int, layers: StageLayers, last: Layer) -> Stage:
        """A stage's times, shared between stages with the same layers and the same neighbours."""
        ends = (index < deg.stages - 1, index > 0)
        key = (deg, m, ends, tuple((layer_key(x), n) for x, n in layers), layer_key(last))
        if key not in self._stages:
            self._stages[key] = _stage(self, deg, m, (index, layers, last))
        return self._stages[key]

    def memory(self, layers: StageLayers, deg: Degrees, m: int, index: int) -> MemoryCheck:
        ends = (index == 0, index == deg.stages - 1)
        held = min(m, deg.stages - index)  # what the memory depends on besides the ends
        key = (tuple((layer_key(x), n) for x, n in layers), deg, m, held, ends)
        if key not in self._memory:
            self._memory[key] = stage_memory(
                self.workload,
                self.chip.usable_capacity_bytes,
                layers,
                deg,
                (index, m),
                self.execution,
            )
        return self._memory[key]


@dataclass(frozen=True)
class LayerPart:
    """What n instances of one layer bring to a stage: its einsum (forward) and its backward
    einsums (training) as the phases add them, and every strategy's communication terms for the
    layer, innermost strategy first, in the order they run; `variants`: the terms as each
    execution runs them (`tp_variants`), filled as executions ask."""

    fwd: tuple[Einsums, ...]
    bwd: tuple[Einsums, ...]
    terms: tuple[CommTerm, ...]
    variants: dict[Execution, tuple[CommTerm, ...]] = field(default_factory=dict, compare=False)

    def run(self, ctx: Context, deg: Degrees) -> tuple[CommTerm, ...]:
        """The terms as `ctx`'s execution runs them (its degrees `deg`, those of the part)."""
        found = self.variants.get(ctx.execution)
        if found is None:
            found = tuple(v for term in self.terms for v in tp_variants(term, ctx, deg))
            self.variants[ctx.execution] = found
        return found


def layer_degrees(deg: Degrees, layer: Layer) -> Degrees:
    """The degrees a layer runs on: parallel folding runs an expert einsum, its all-to-all
    (over the experts' ep ranks, laid on the mesh inside etp), its etp traffic and its
    gradients' reduction (over edp) on the experts' degrees, the same devices
    (`Degrees.experts`); every other layer on `deg`."""
    return deg.experts if deg.folded and layer.axis_dims(EXPERT_AXIS) else deg


def communicating(
    ctx: Context, deg: Degrees, leave: frozenset[str] = frozenset()
) -> list[Strategy]:
    """The strategies on (degree > 1) in mesh order, innermost first, but the ones the context
    prices apart and `leave`: those whose terms a layer's part holds."""
    gone = ctx.priced_apart | leave
    return [s for s in by_mesh() if deg[s.name] > 1 and s.name not in gone]


def _layer_part(ctx: Context, layer: Layer, n: int, deg: Degrees, m: int) -> LayerPart:
    deg = layer_degrees(deg, layer)
    net = ctx.network(deg)
    active = communicating(ctx, deg)
    view = ctx.view(layer, n, deg, m)
    fwd = (Einsums.of(ctx.cost(layer, view.dims), n, layer.kernel),)
    bwd = tuple(Einsums.of(ctx.cost(grad, gdims), n, grad.kernel) for grad, gdims in view.grads)
    terms = [t for s in active for t in s.layer_comm(view, deg[s.name], net)]
    terms = [_paired(t, fwd, bwd, n) if t.purpose == "tp" else t for t in terms]
    return LayerPart(fwd, bwd, tuple(sorted(terms, key=lambda t: t.step)))


def _paired(term: CommTerm, fwd: tuple[Einsums, ...], bwd: tuple[Einsums, ...], n: int) -> CommTerm:
    """A tensor-parallel term with the per-call time of the GEMM it runs beside when overlapped:
    a forward term its layer's forward einsum; a backward term the backward einsum its step names
    (step 2 + i: einsum i), the input gradient's (einsum 0) for the output gradient's (step 1)."""
    if term.phase == "forward":
        gemm = fwd[0] if fwd else None
    else:
        i = term.step - 2 if term.step >= 2 else 0
        gemm = bwd[i] if i < len(bwd) else (bwd[0] if bwd else None)
    if gemm is None or n <= 0:
        return term
    return replace(term, paired_s=gemm.predicted_s / n)


def _stage(ctx: Context, deg: Degrees, m: int, where: tuple[int, StageLayers, Layer]) -> Stage:
    """One stage for one microbatch: each layer's roofline Cost (forward; backward einsums when
    training), then each strategy's communication for the layer, innermost strategy first, in the
    order the terms run (`LayerPart`); then the stage boundary (pipeline sends)."""
    index, layers, last = where
    net = ctx.network(deg)
    active = [s for s in by_mesh() if deg[s.name] > 1 and s.name not in ctx.priced_apart]
    key = (
        deg,
        m,
        tuple((layer_key(x), n) for x, n in layers),
        ctx._prefix_execution,
        ctx.priced_apart,
    )
    prefix = ctx._prefixes.get(key)
    if prefix is None:
        prefix = ctx._prefixes[key] = _prefix(ctx, deg, m, layers)
    stage = prefix.copy()
    add_recompute(ctx, stage, deg, m)
    # after the recompute: a rerun forward gathers nothing again
    blocks = ctx.workload.blocks_in(stage.layers)
    add_fsdp_copies(ctx.chip, ctx.execution, ctx.workload.model, stage, blocks)
    add_end_extras(ctx, stage, deg, m, index)
    boundary = StageView(last, ctx.local(last, deg, m), index, deg.stages, ctx.workload.training)
    for s in active:
        for term in s.stage_comm(boundary, deg[s.name], net):
            for variant in tp_variants(term, ctx, deg):
                stage.add_comm(variant)
    add_interleave_wrap(ctx, stage, deg, index)
    return stage


def _prefix(ctx: Context, deg: Degrees, m: int, layers: StageLayers) -> Stage:
    """A stage up to its recompute: its layers' parts and its blocks' memory-bound ops. They
    do not depend on the stage's place in the pipeline nor on the recompute mode, so that the
    stages with the same layers share it (a copy each: `_stage` adds the rest)."""
    stage = Stage.on(layers, ctx.workload.training, ctx.network(deg).links)
    for layer, n in layers:
        part = ctx.part(layer, n, deg, m)
        for e in part.fwd:
            stage.fwd.add_einsums(e)
        for e in part.bwd:
            stage.bwd.add_einsums(e)
        for term in part.run(ctx, layer_degrees(deg, layer)):
            stage.add_comm(term)
    add_block_extras(ctx, stage, deg, m)
    return stage


def _comm_per_step(terms: list[CommTerm], m: int) -> list[CommTerm]:
    """The stage's terms summed by (purpose, kind) over one step: m microbatches, or once."""
    comm: dict[tuple[str, str], list[float]] = {}  # -> [devices, calls, bytes, t]
    for term in terms:
        entry = comm.setdefault((term.purpose, term.kind), [term.devices, 0.0, 0.0, 0.0])
        per_step = term.calls if term.once_per_step else term.calls * m
        entry[1] += per_step
        entry[2] += per_step * term.bytes
        entry[3] += per_step * term.t_s
    return [
        CommTerm(purpose, kind, int(v[0]), v[1], v[2], v[3]) for (purpose, kind), v in comm.items()
    ]


def _by_bound(crit: Stage, m: int, bubble_s: float) -> dict[str, float]:
    by_bound = {"compute": 0.0, "memory": 0.0, "network": 0.0, "bubble": bubble_s}
    crit.fwd.attribute(by_bound, m)
    if crit.training:
        crit.bwd.attribute(by_bound, m - 1)
        crit.bwd.attribute(by_bound, 1, crit.grad_by_axis)
    return by_bound


def evaluate_plan(ctx: Context, deg: Degrees, microbatches: int) -> PlanResult:
    """Latency (the lower bound), the realistic step, throughput, memory and communication of one
    plan with `microbatches` microbatches.

    Lower bound: `cycles * t_stage + extra`, with t_stage the slowest stage's time for one
    microbatch at peak rates, cycles the schedule's (`shardline.planning.step.cycles`) and
    `extra` what the once-per-step communication adds to the last backward. The realistic step
    (`predicted_s`) runs the same schedule over each stage's realistic time.
    """
    w = ctx.workload
    m, P = microbatches, deg.stages
    stages = [ctx.stage(deg, m, i, layers, last) for i, (layers, last) in enumerate(ctx.stages(P))]
    crit = max(stages, key=lambda st: st.t_s)
    t_stage = crit.t_s
    decode = w.decode
    n = cycles(w.training, decode, m, P, ctx.execution.interleave)
    latency = n * t_stage + max(st.last_extra_s for st in stages)
    latency_upper = n * max(st.serial_s for st in stages) + max(st.grad_s for st in stages)
    comm = _comm_per_step(crit.terms, m)
    # Prefill through a pipeline: a stream of batches keeps every stage busy, one microbatch
    # leaves per stage time. Training flushes the pipeline every step; decode waits a full pass.
    stream = not w.training and not decode and P > 1
    throughput = w.batch / (m * t_stage) if stream else w.batch / latency
    by_bound = _by_bound(crit, m, (n - m) * t_stage)
    memories = [ctx.memory(st.layers, deg, m, i) for i, st in enumerate(stages)]
    memory = max(memories, key=lambda mc: mc.total_bytes)
    slowest = slowest_stage([st.t_pred_s for st in stages])
    step = realistic_step(ctx, deg, (m, n), stages[slowest], memories[slowest])
    return PlanResult(
        name=deg.name,
        degrees=deg.as_dict(),
        microbatches=m,
        microbatch_size=ceil(w.batch / (deg.replicas * m)),
        latency_s=latency,
        latency_upper_s=latency_upper,
        throughput_bound_per_s=throughput,
        memory_per_device_bytes=memory.total_bytes,
        fits=memory.fits,
        bottleneck=max(by_bound, key=lambda k: (by_bound[k], k == "compute", k == "bubble")),
        cost=_step_cost(crit, m, comm),
        t_stage_s=t_stage,
        t_bubble_s=(n - m) * t_stage,
        bubble_fraction=(n - m) / n if n > 0 else 0.0,
        time_by_bound_s=by_bound,
        memory=memory,
        comm=comm,
        predicted_s=step.predicted_s,
        predicted_breakdown_s=step.breakdown_s,
        gap_s=gap_s(step, latency, (n - m) * t_stage),
        stages=[
            _stage_summary(i, st, mc)
            for i, (st, mc) in enumerate(zip(stages, memories, strict=True))
        ],
        mfu=step.mfu,
        hfu=step.hfu,
        model_flops=step.model_flops,
        hardware_flops=step.hardware_flops,
        recompute=recompute_answer(ctx, deg, m, step),
        **tokens_answers(ctx, deg, step),
    )


def _stage_summary(index: int, st: Stage, memory: MemoryCheck) -> dict[str, float]:
    """One stage of the pipeline: its layer instances, one microbatch's lower bound and realistic
    time (forward and backward), and its memory per device."""
    return {
        "index": index,
        "layer_instances": sum(n for _, n in st.layers),
        "t_s": st.t_s,
        "predicted_s": st.t_pred_s,
        "memory_bytes": memory.total_bytes,
        # the realistic time split by phase (sums to predicted_s): for the step's timeline
        "fwd_compute_s": st.fwd.compute_pred_s,
        "fwd_comm_s": st.fwd.exposed_comm_pred_s,
        "bwd_compute_s": st.bwd.compute_pred_s if st.training else 0.0,
        "bwd_comm_s": st.bwd.exposed_comm_pred_s if st.training else 0.0,
    }


def _step_cost(crit: Stage, m: int, comm: list[CommTerm]) -> Cost:
    """The slowest stage's step on one device: m x its phases' layer Costs, plus its network
    (bytes summed over the step's terms; time m x the phases' communication plus the
    once-per-step part)."""
    phases = [crit.fwd, crit.bwd] if crit.training else [crit.fwd]
    local = sum((ph.local for ph in phases), ZERO_COST) * m
    t_network_s = m * sum(ph.crit_s + ph.async_s for ph in phases) + crit.grad_s
    return local + Cost.network(sum(term.bytes for term in comm), t_network_s)
