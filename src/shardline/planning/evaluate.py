"""Evaluating one plan: each stage's phases from the registry's strategies, then the pipeline.

The step: `(m + P - 1) * max over stages (t_fwd + t_bwd)` (GPipe), plus whatever of the
once-per-step communication (the data-parallel gradient all-reduce) the last backward pass cannot
hide. No strategy is named here: each registered strategy adds its own communication per layer
(`Strategy.layer_comm`) and per stage (`Strategy.stage_comm`)."""

from __future__ import annotations

from collections.abc import Mapping
from math import ceil
from typing import Any

from shardline.cost import ZERO_COST, Cost
from shardline.hardware import Chip
from shardline.planning.network import MeshNetwork
from shardline.planning.phases import Stage
from shardline.planning.results import PlanResult, bubble_fraction
from shardline.stack import LayerCost, MemoryCheck, layer_cost, memory_check
from shardline.strategies import (
    CommTerm,
    Degrees,
    LayerView,
    StageView,
    by_mesh,
    device_share,
    local_dims,
)
from shardline.workload import Layer, Workload, backward_layers

__all__ = ["Context", "evaluate_plan"]

StageLayers = list[tuple[Layer, int]]


class Context:
    """One search's caches: local sizes, layer Costs, networks, stages and memory checks."""

    def __init__(self, workload: Workload, chip: Chip) -> None:
        self.workload = workload
        self.chip = chip
        self.backward = {id(layer): backward_layers(layer) for layer in workload.layers}
        self._dims: dict[tuple[int, tuple[tuple[str, int], ...], int], dict[str, int]] = {}
        self._costs: dict[tuple[int, tuple[tuple[str, int], ...]], LayerCost] = {}
        self._networks: dict[Degrees, MeshNetwork] = {}
        self._priced: dict[Any, Any] = {}  # shared by the networks: keys name their mesh axis
        self._stage_layers: dict[int, list[tuple[StageLayers, Layer]]] = {}
        self._stages: dict[tuple[Any, ...], Stage] = {}
        self._memory: dict[tuple[Any, ...], MemoryCheck] = {}

    def network(self, deg: Degrees) -> MeshNetwork:
        if deg not in self._networks:
            self._networks[deg] = MeshNetwork(self.chip, deg, self._priced)
        return self._networks[deg]

    def local(self, layer: Layer, deg: Mapping[str, int], m: int) -> dict[str, int]:
        """The layer's sizes on one device under `deg` with `m` microbatches."""
        key = (id(layer), tuple(deg.items()), m)
        if key not in self._dims:
            self._dims[key] = local_dims(
                layer, deg, batch_dim=self.workload.batch_dim, microbatches=m
            )
        return self._dims[key]

    def cost(self, layer: Layer, dims: Mapping[str, int]) -> LayerCost:
        key = (id(layer), tuple(dims.items()))
        if key not in self._costs:
            self._costs[key] = layer_cost(layer, self.chip, dims)
        return self._costs[key]

    def following(self, layer: Layer) -> Layer:
        """The layer after this one: itself when it repeats (count > 1), else the next in the
        block, wrapping to the next block."""
        layers = self.workload.layers
        return layer if layer.count > 1 else layers[(layers.index(layer) + 1) % len(layers)]

    def view(self, layer: Layer, n: int, deg: Degrees, m: int) -> LayerView:
        grads = self.backward[id(layer)] if self.workload.training else []
        return LayerView(
            layer=layer,
            count=n,
            dims=self.local(layer, deg, m),
            grads=tuple((g, self.local(g, deg, m)) for g in grads),
            following=self.following(layer),
            degrees=deg,
            local=lambda other, degrees: self.local(other, degrees, m),
            training=self.workload.training,
            gradient_ways=device_share(self.workload, deg, m).gradients_ways,
        )

    def stages(self, pp: int) -> list[tuple[StageLayers, Layer]]:
        if pp not in self._stage_layers:
            self._stage_layers[pp] = self.workload.pipeline_stages(pp)
        return self._stage_layers[pp]

    def stage(self, deg: Degrees, m: int, index: int, layers: StageLayers, last: Layer) -> Stage:
        """A stage's times, shared between stages with the same layers and the same neighbours."""
        ends = (index < deg.stages - 1, index > 0)
        key = (deg, m, ends, tuple((id(layer), n) for layer, n in layers), id(last))
        if key not in self._stages:
            self._stages[key] = _stage(self, deg, m, (index, layers, last))
        return self._stages[key]

    def memory(self, layers: StageLayers, deg: Degrees, m: int, in_flight: int) -> MemoryCheck:
        key = (tuple((id(layer), n) for layer, n in layers), deg, m, in_flight)
        if key not in self._memory:
            self._memory[key] = memory_check(
                self.workload,
                self.chip.capacity_bytes,
                layers=layers,
                share=device_share(self.workload, deg, m),
                in_flight=in_flight,
            )
        return self._memory[key]


def _stage(ctx: Context, deg: Degrees, m: int, where: tuple[int, StageLayers, Layer]) -> Stage:
    """One stage for one microbatch: each layer's roofline Cost (forward; backward einsums when
    training), then each strategy's communication for the layer, innermost strategy first, in the
    order the terms run; then the stage boundary (pipeline sends)."""
    index, layers, last = where
    net = ctx.network(deg)
    active = [s for s in by_mesh() if deg[s.name] > 1]
    stage = Stage(layers, ctx.workload.training)
    for layer, n in layers:
        view = ctx.view(layer, n, deg, m)
        stage.fwd.add(ctx.cost(layer, view.dims), n)
        for grad, gdims in view.grads:
            stage.bwd.add(ctx.cost(grad, gdims), n)
        terms = [t for s in active for t in s.layer_comm(view, deg[s.name], net)]
        for term in sorted(terms, key=lambda t: t.step):
            stage.add_comm(term)
    boundary = StageView(last, ctx.local(last, deg, m), index, deg.stages, ctx.workload.training)
    for s in active:
        for term in s.stage_comm(boundary, deg[s.name], net):
            stage.add_comm(term)
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
        crit.bwd.attribute(by_bound, 1, crit.grad_s)
    return by_bound


def evaluate_plan(ctx: Context, deg: Degrees, microbatches: int) -> PlanResult:
    """Latency, throughput, memory and communication of one plan with `microbatches` microbatches.

    Step time: `(m + P - 1) * t_stage + extra`, with t_stage the slowest stage's time for one
    microbatch and `extra` what the once-per-step communication adds to the last backward.
    """
    w = ctx.workload
    m, P = microbatches, deg.stages
    stages = [ctx.stage(deg, m, i, layers, last) for i, (layers, last) in enumerate(ctx.stages(P))]
    crit = max(stages, key=lambda st: st.t_s)
    t_stage = crit.t_s
    latency = (m + P - 1) * t_stage + max(st.last_extra_s for st in stages)
    latency_upper = (m + P - 1) * max(st.serial_s for st in stages) + max(
        st.grad_s for st in stages
    )
    comm = _comm_per_step(crit.terms, m)
    # Inference through a pipeline: a stream of batches keeps every stage busy, one microbatch
    # leaves per stage time. Training flushes the pipeline every step.
    throughput = w.batch / latency if w.training or P == 1 else w.batch / (m * t_stage)
    by_bound = _by_bound(crit, m, (P - 1) * t_stage)
    in_flight = min(m, P) if w.training else 1
    memory = max(
        (ctx.memory(st.layers, deg, m, in_flight) for st in stages), key=lambda mc: mc.total_bytes
    )
    return PlanResult(
        name=deg.name,
        degrees=deg.as_dict(),
        microbatches=m,
        microbatch_size=ceil(w.batch / (deg.replicas * m)),
        latency_s=latency,
        latency_upper_s=latency_upper,
        throughput_per_s=throughput,
        tokens_per_s=throughput * w.tokens_per_item if w.kind != "stack" else None,
        memory_per_device_bytes=memory.total_bytes,
        fits=memory.fits,
        bottleneck=max(by_bound, key=lambda k: (by_bound[k], k == "compute")),
        cost=_step_cost(crit, m, comm),
        t_stage_s=t_stage,
        t_bubble_s=(P - 1) * t_stage,
        bubble_fraction=bubble_fraction(P, m),
        time_by_bound_s=by_bound,
        memory=memory,
        comm=comm,
    )


def _step_cost(crit: Stage, m: int, comm: list[CommTerm]) -> Cost:
    """The slowest stage's step on one device: m x its phases' layer Costs, plus its network
    (bytes summed over the step's terms; time m x the phases' communication plus the
    once-per-step part)."""
    phases = [crit.fwd, crit.bwd] if crit.training else [crit.fwd]
    local = sum((ph.local for ph in phases), ZERO_COST) * m
    t_network_s = m * sum(ph.crit_s + ph.async_s for ph in phases) + crit.grad_s
    return local + Cost.network(sum(term.bytes for term in comm), t_network_s)
