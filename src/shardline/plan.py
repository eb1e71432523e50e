"""Parallel plans: data parallel, FSDP, tensor parallel, pipeline parallel and their combinations.

MODEL.md section 6; the communication of each strategy follows "How to Scale Your Model", Part 5
("How to Parallelize a Transformer for Training") and Megatron-LM (Shoeybi et al. 2019):

- Data parallel (dp): the batch is split; every device holds all weights; training all-reduces the
  weight gradients once per step, overlapped with the backward pass ("not on the critical path").
- FSDP / ZeRO-3 (fsdp): the batch is split and weights, gradients and optimizer state are sharded;
  each layer's weights are all-gathered before its forward and again before its backward matmul,
  and its gradient is reduce-scattered, overlapped with that layer's compute.
- Tensor parallel (tp, Megatron): each layer's `tp_dims` are split; a layer whose split dim is
  contracted ends with an all-reduce of its output (the row-parallel matmul); in the backward pass
  the input gradient of a column-parallel matmul is all-reduced. Two per transformer block forward,
  two more backward.
- Pipeline parallel (pp): consecutive blocks form stages; m microbatches run through P stages in
  `(m + P - 1)` stage times, so the bubble fraction is `(P - 1) / (m + P - 1)` (GPipe, Huang et al.
  2019), with a point-to-point send of the boundary activation (and its gradient) per microbatch.

Devices are laid out tp fastest, then fsdp, dp, pp (Megatron's order: tensor parallelism inside a
node); a group that spans nodes uses the scale-out network for its inter-node level.

Time of one stage for one microbatch, per phase (forward; backward when training):
`max(sum of per-layer max(t_compute, t_memory), t_network)`, i.e. communication overlaps with the
phase's compute (the lower bound). The step: `(m + P - 1) * max over stages (t_fwd + t_bwd)`, plus
whatever of the data-parallel gradient all-reduce the last backward pass cannot hide.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from math import ceil
from typing import Any

from shardline.collectives import AxisNetwork, collective_over, mesh_networks
from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip
from shardline.serialize import jsonable
from shardline.stack import (
    LayerCost,
    MemoryCheck,
    apply_overrides,
    layer_cost,
    local_dims,
    memory_check,
    tp_split_dims,
)
from shardline.units import fmt_bytes, fmt_time
from shardline.workload import Layer, Workload, backward_layers

__all__ = [
    "Degrees",
    "PlanResult",
    "PlanSet",
    "plan",
    "evaluate_plan",
    "bubble_fraction",
    "OBJECTIVES",
    "STRATEGIES",
    "sweep_batch",
    "BatchSweep",
    "SweepPoint",
    "Crossover",
    "CommTerm",
]

OBJECTIVES = ("latency", "throughput")
STRATEGIES = ("tp", "pp", "dp", "fsdp")


def bubble_fraction(stages: int, microbatches: int) -> float:
    """Idle fraction of a pipeline flush: (P - 1) / (m + P - 1) (GPipe, Huang et al. 2019)."""
    return (stages - 1) / (microbatches + stages - 1)


@dataclass(frozen=True)
class Degrees:
    tp: int = 1
    pp: int = 1
    dp: int = 1
    fsdp: int = 1

    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.dp * self.fsdp

    @property
    def replicas(self) -> int:
        """Ways the batch is split: data-parallel replicas times FSDP shards."""
        return self.dp * self.fsdp

    @property
    def name(self) -> str:
        parts = [f"{k}{v}" for k, v in self.as_dict().items() if v > 1]
        return "-".join(parts) if parts else "single"

    def as_dict(self) -> dict[str, int]:
        return {"tp": self.tp, "pp": self.pp, "dp": self.dp, "fsdp": self.fsdp}


@dataclass(frozen=True)
class CommTerm:
    """One kind of communication of a plan, per device per step."""

    purpose: str  # "tp", "fsdp", "dp" or "pp"
    kind: str  # "all_reduce", "all_gather", "reduce_scatter" or "send"
    devices: int
    calls: float  # per step
    bytes: (
        float  # V summed over the calls (the whole array of each collective, the message of a send)
    )
    t_s: float  # summed over the calls


@dataclass(frozen=True)
class PlanResult:
    name: str
    degrees: dict[str, int]
    microbatches: int
    microbatch_size: int  # batch items per device per microbatch
    latency_s: float  # time to finish the whole batch (one training step, or one forward pass)
    latency_upper_s: float  # the same with no overlap of communication and computation
    throughput_per_s: float  # batch items per second (training: per step; inference: steady state)
    tokens_per_s: float | None
    memory_per_device_bytes: float
    fits: bool
    comm_bytes: float  # bytes moved by this device's collectives and sends per step
    bottleneck: str  # "compute", "memory" (HBM bandwidth), "network" or "bubble"
    t_compute_s: float
    t_memory_s: float
    t_network_s: float  # all communication time, overlapped or not
    t_stage_s: float  # one microbatch through the slowest stage
    t_bubble_s: float
    bubble_fraction: float
    time_by_bound_s: dict[str, float]
    memory: MemoryCheck
    comm: list[CommTerm] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = jsonable(self)
        return out


@dataclass(frozen=True)
class PlanSet:
    workload: Workload
    chip: Chip
    devices: int
    objective: str
    plans: list[PlanResult]  # best first: plans that fit, by the objective, then those that do not
    recommended: str | None
    reason: str

    def to_dict(self) -> dict[str, Any]:
        w = self.workload
        return jsonable(
            {
                "workload": {
                    **w.identity(),
                    "batch": w.batch,
                    "params": w.params(),
                    "layer_instances": w.layer_count,
                    "blocks": w.repeat,
                },
                "hardware": {
                    "name": self.chip.name,
                    "capacity_bytes": self.chip.capacity_bytes,
                    "scale_up_devices": (
                        self.chip.interconnect.scale_up_devices if self.chip.interconnect else 1
                    ),
                },
                "devices": self.devices,
                "objective": self.objective,
                "plans": [p.to_dict() for p in self.plans],
                "recommended": self.recommended,
                "reason": self.reason,
            }
        )

    def best(self) -> PlanResult | None:
        return self.plans[0] if self.plans and self.plans[0].fits else None


# ----------------------------------------------------------------------------------------------
# Communication: collective times from shardline.collectives, placed on the device layout


class _Network:
    """Collective times of one plan (shardline.collectives). The plan's axes form a mesh
    pp x dp x fsdp x tp with tp innermost (Megatron's order: tensor parallelism inside a node), laid
    onto the chip's fabric by `mesh_networks`: an axis that spans nodes runs hierarchically (NVLink
    inside, the scale-out NICs between), a TPU axis rides its torus dimensions."""

    def __init__(self, chip: Chip, deg: Degrees) -> None:
        self.chip = chip
        self.nets: dict[str, AxisNetwork] = {}
        if deg.devices > 1:
            if chip.interconnect is None:
                raise InputError(
                    f"{chip.name} has no interconnect in its chip file; a plan over "
                    "several devices needs one"
                )
            self.nets = mesh_networks(
                chip, [("pp", deg.pp), ("dp", deg.dp), ("fsdp", deg.fsdp), ("tp", deg.tp)]
            )
        self._cache: dict[tuple[str, float, str], float] = {}

    def time(self, kind: str, nbytes: float, axis: str) -> float:
        """Seconds for `kind` ("all_reduce", "all_gather", "reduce_scatter", "send") of a V-byte
        array over the plan's `axis`: alpha-beta at line rate (the lower bound)."""
        net = self.nets.get(axis)
        if net is None or net.devices <= 1 or nbytes <= 0:
            return 0.0
        key = (kind, float(nbytes), axis)
        if key not in self._cache:
            self._cache[key] = float(collective_over(kind, float(nbytes), [net], self.chip).t_s)
        return self._cache[key]


# ----------------------------------------------------------------------------------------------
# Evaluating one plan


@dataclass
class _Phase:
    """Per-microbatch times of one phase (forward or backward) of one stage.

    `crit_s`: communication on the critical path (tensor-parallel all-reduces, pipeline sends: the
    next matmul needs their result). `async_s`: communication that overlaps the phase's compute
    (FSDP weight gathers and gradient reduce-scatters: "not on critical path" in the book's
    algorithms). Phase time = max(local, async) + crit.
    """

    local_s: float = 0.0  # sum over layers of max(t_compute, t_memory)
    compute_s: float = 0.0
    memory_s: float = 0.0
    compute_bound_s: float = 0.0  # time of the layers that are compute-bound
    memory_bound_s: float = 0.0
    crit_s: float = 0.0
    async_s: float = 0.0

    def add(self, cost: LayerCost, n: int) -> None:
        self.local_s += n * cost.t_lower_s
        self.compute_s += n * cost.t_compute_s
        self.memory_s += n * cost.t_memory_s
        if cost.bound == "compute":
            self.compute_bound_s += n * cost.t_lower_s
        else:
            self.memory_bound_s += n * cost.t_lower_s

    def time_s(self, extra_async_s: float = 0.0) -> float:
        return max(self.local_s, self.async_s + extra_async_s) + self.crit_s

    def serial_s(self, extra_async_s: float = 0.0) -> float:
        return self.local_s + self.async_s + extra_async_s + self.crit_s

    def attribute(self, into: dict[str, float], times: float, extra_async_s: float = 0.0) -> None:
        """Charge this phase's time to what binds it: the network when all its communication
        exceeds its local compute (the book's T_comms > T_math), else compute and memory by layer,
        plus the critical-path communication to the network."""
        network = self.crit_s + self.async_s + extra_async_s
        if network > self.local_s:
            into["network"] += times * self.time_s(extra_async_s)
            return
        into["compute"] += times * self.compute_bound_s
        into["memory"] += times * self.memory_bound_s
        into["network"] += times * self.crit_s


class _Context:
    def __init__(self, workload: Workload, chip: Chip) -> None:
        self.workload = workload
        self.chip = chip
        self.backward = {id(layer): backward_layers(layer) for layer in workload.layers}
        self._costs: dict[tuple[int, int, int], tuple[LayerCost, dict[str, int]]] = {}
        self._networks: dict[Degrees, _Network] = {}
        self._contracts: dict[tuple[int, int], bool] = {}
        self._gathers: dict[tuple[int, int], bool] = {}
        self._stage_layers: dict[int, list[tuple[list[tuple[Layer, int]], Layer]]] = {}
        self._stages: dict[tuple[Any, ...], _Stage] = {}
        self._memory: dict[tuple[Any, ...], MemoryCheck] = {}

    def network(self, deg: Degrees) -> _Network:
        if deg not in self._networks:
            self._networks[deg] = _Network(self.chip, deg)
        return self._networks[deg]

    def contracts_split(self, layer: Layer, tp: int) -> bool:
        """Does tensor parallelism of degree `tp` split a dim this einsum contracts?"""
        key = (id(layer), tp)
        if key not in self._contracts:
            split = tp_split_dims(layer, tp)
            self._contracts[key] = bool(set(split) & set(layer.parsed.contracted))
        return self._contracts[key]

    def gathers_output(self, layer: Layer, tp: int) -> bool:
        """Does this layer leave its output split along a tensor-parallel dim that the layer after
        it does not take split (Megatron pairs a column-parallel layer with a row-parallel one so
        that it never has to)? Then the output is all-gathered before the next layer. The next
        layer is the following one in the block (wrapping to the next block), or the layer itself
        when it repeats (count > 1)."""
        key = (id(layer), tp)
        if key not in self._gathers:
            sharded = set(tp_split_dims(layer, tp)) & set(layer.output.dims)
            layers = self.workload.layers
            following = (
                layer if layer.count > 1 else layers[(layers.index(layer) + 1) % len(layers)]
            )
            taken = set(tp_split_dims(following, tp)) & {
                d
                for op in following.inputs
                if following.role(op.name) != "weight"  # activation, on-chip scores or cache
                for d in op.dims
            }
            self._gathers[key] = bool(sharded - taken)
        return self._gathers[key]

    @staticmethod
    def _signature(layers: list[tuple[Layer, int]]) -> tuple[tuple[int, int], ...]:
        return tuple((id(layer), n) for layer, n in layers)

    def stage(
        self, deg: Degrees, split: int, s_index: int, layers: list[tuple[Layer, int]], last: Layer
    ) -> _Stage:
        """A stage's times, shared between stages with the same layers and the same sends."""
        sends = (s_index < deg.pp - 1, s_index > 0)
        key = (deg, split, sends, self._signature(layers), id(last))
        if key not in self._stages:
            self._stages[key] = _stage(self, deg, split, s_index, layers, last)
        return self._stages[key]

    def memory(
        self, layers: list[tuple[Layer, int]], deg: Degrees, split: int, in_flight: int
    ) -> MemoryCheck:
        key = (self._signature(layers), deg.tp, split, in_flight, deg.fsdp)
        if key not in self._memory:
            self._memory[key] = memory_check(
                self.workload,
                self.chip.capacity_bytes,
                layers=layers,
                tp=deg.tp,
                batch_split=split,
                in_flight=in_flight,
                fsdp=deg.fsdp,
            )
        return self._memory[key]

    def cost(self, layer: Layer, tp: int, split: int) -> tuple[LayerCost, dict[str, int]]:
        key = (id(layer), tp, split)
        if key not in self._costs:
            dims = local_dims(layer, tp=tp, batch_dim=self.workload.batch_dim, batch_split=split)
            self._costs[key] = (layer_cost(layer, self.chip, dims), dims)
        return self._costs[key]

    def stages(self, pp: int) -> list[tuple[list[tuple[Layer, int]], Layer]]:
        if pp not in self._stage_layers:
            self._stage_layers[pp] = self.workload.pipeline_stages(pp)
        return self._stage_layers[pp]


def _weight_bytes(layer: Layer, dims: dict[str, int]) -> int:
    return sum(layer.operand_bytes(w, dims) for w in layer.weights)


@dataclass
class _Stage:
    layers: list[tuple[Layer, int]]
    fwd: _Phase
    bwd: _Phase
    grad_s: float  # data-parallel gradient all-reduce, once per step (overlaps the last backward)
    terms: list[tuple[str, str, int, float, float, float, bool]]  # ..., once per step?
    training: bool

    @property
    def t_s(self) -> float:
        """One microbatch through this stage (forward, and backward when training)."""
        return self.fwd.time_s() + (self.bwd.time_s() if self.training else 0.0)

    @property
    def last_extra_s(self) -> float:
        """What the gradient all-reduce adds to the last microbatch's backward pass."""
        return self.bwd.time_s(self.grad_s) - self.bwd.time_s() if self.training else 0.0

    @property
    def serial_s(self) -> float:
        return self.fwd.serial_s() + (self.bwd.serial_s() if self.training else 0.0)


def _stage(
    ctx: _Context,
    deg: Degrees,
    split: int,
    s_index: int,
    layers: list[tuple[Layer, int]],
    last_layer: Layer,
) -> _Stage:
    w, net = ctx.workload, ctx.network(deg)
    fwd, bwd = _Phase(), _Phase()
    grad_s = 0.0
    terms: list[tuple[str, str, int, float, float, float, bool]] = []
    for layer, n in layers:
        cost, dims = ctx.cost(layer, deg.tp, split)
        fwd.add(cost, n)
        if deg.tp > 1 and ctx.contracts_split(layer, deg.tp):  # row-parallel: all-reduce the output
            v = layer.operand_bytes(layer.output.name, dims)
            t = net.time("all_reduce", v, "tp")
            fwd.crit_s += n * t
            terms.append(("tp", "all_reduce", deg.tp, n, v, t, False))
        gather_t = gather_v = 0.0
        if deg.tp > 1 and ctx.gathers_output(layer, deg.tp):  # column-parallel, nothing to pair
            full = local_dims(layer, batch_dim=w.batch_dim, batch_split=split)
            gather_v = layer.operand_bytes(layer.output.name, full)
            gather_t = net.time("all_gather", gather_v, "tp")
            fwd.crit_s += n * gather_t
            terms.append(("tp", "all_gather", deg.tp, n, gather_v, gather_t, False))
        wbytes = _weight_bytes(layer, dims)
        if deg.fsdp > 1 and wbytes:  # gather this layer's weights before its forward matmul
            t = net.time("all_gather", wbytes, "fsdp")
            fwd.async_s += n * t
            terms.append(("fsdp", "all_gather", deg.fsdp, n, wbytes, t, False))
        if not w.training:
            continue
        if gather_v:  # backward of the all-gather: reduce-scatter the output's gradient
            t = net.time("reduce_scatter", gather_v, "tp")
            bwd.crit_s += n * t
            terms.append(("tp", "reduce_scatter", deg.tp, n, gather_v, t, False))
        for grad in ctx.backward[id(layer)]:
            gcost, gdims = ctx.cost(grad, deg.tp, split)
            bwd.add(gcost, n)
            if deg.tp > 1 and ctx.contracts_split(grad, deg.tp):  # column-parallel dX: all-reduce
                v = grad.operand_bytes(grad.output.name, gdims)
                t = net.time("all_reduce", v, "tp")
                bwd.crit_s += n * t
                terms.append(("tp", "all_reduce", deg.tp, n, v, t, False))
            if deg.fsdp > 1 and grad.weights:  # gather the weights again for dX = dY . W
                t = net.time("all_gather", wbytes, "fsdp")
                bwd.async_s += n * t
                terms.append(("fsdp", "all_gather", deg.fsdp, n, wbytes, t, False))
            if grad.grad_of is not None:
                gbytes = grad.operand_bytes(grad.output.name, gdims)
                if deg.fsdp > 1:
                    t = net.time("reduce_scatter", gbytes, "fsdp")
                    bwd.async_s += n * t
                    terms.append(("fsdp", "reduce_scatter", deg.fsdp, n, gbytes, t, False))
                if deg.dp > 1:  # once per step, on the FSDP shard when both are used
                    shard = gbytes / deg.fsdp
                    t = net.time("all_reduce", shard, "dp")
                    grad_s += n * t
                    terms.append(("dp", "all_reduce", deg.dp, n, shard, t, True))
    if deg.pp > 1:  # send the boundary activation on (and its gradient back when training)
        _, dims = ctx.cost(last_layer, deg.tp, split)
        v = last_layer.operand_bytes(last_layer.output.name, dims)
        t = net.time("send", v, "pp")
        sends_fwd = 1 if s_index < deg.pp - 1 else 0
        sends_bwd = 1 if (w.training and s_index > 0) else 0
        fwd.crit_s += sends_fwd * t
        bwd.crit_s += sends_bwd * t
        if sends_fwd + sends_bwd:
            terms.append(("pp", "send", 2, sends_fwd + sends_bwd, v, t, False))
    return _Stage(layers, fwd, bwd, grad_s, terms, w.training)


def evaluate_plan(ctx: _Context, deg: Degrees, microbatches: int) -> PlanResult:
    """Latency, throughput, memory and communication of one plan with `microbatches` microbatches.

    Step time: `(m + P - 1) * t_stage + extra`, with t_stage the slowest stage's time for one
    microbatch and `extra` what the data-parallel gradient all-reduce adds to the last backward.
    """
    w = ctx.workload
    m, P = microbatches, deg.pp
    split = deg.replicas * m
    stages = [
        ctx.stage(deg, split, i, layers, last) for i, (layers, last) in enumerate(ctx.stages(P))
    ]
    crit = max(stages, key=lambda st: st.t_s)
    t_stage = crit.t_s
    extra_s = max(st.last_extra_s for st in stages)
    latency = (m + P - 1) * t_stage + extra_s
    latency_upper = (m + P - 1) * max(st.serial_s for st in stages) + max(
        st.grad_s for st in stages
    )
    comm: dict[tuple[str, str], list[float]] = {}  # (purpose, kind) -> [devices, calls, bytes, t]
    for purpose, kind, devices, calls, nbytes, t, once in crit.terms:
        entry = comm.setdefault((purpose, kind), [devices, 0.0, 0.0, 0.0])
        per_step = calls if once else calls * m
        entry[1] += per_step
        entry[2] += per_step * nbytes
        entry[3] += per_step * t
    batch = w.batch
    # Inference through a pipeline: a stream of batches keeps every stage busy, one microbatch
    # leaves per stage time. Training flushes the pipeline every step.
    throughput = batch / latency if w.training or P == 1 else batch / (m * t_stage)
    bubble_s = (P - 1) * t_stage
    by_bound = {"compute": 0.0, "memory": 0.0, "network": 0.0, "bubble": bubble_s}
    crit.fwd.attribute(by_bound, m)
    if w.training:
        crit.bwd.attribute(by_bound, m - 1)
        crit.bwd.attribute(by_bound, 1, crit.grad_s)
    bottleneck = max(by_bound, key=lambda k: (by_bound[k], k == "compute"))
    in_flight = min(m, P) if w.training else 1
    memories = [ctx.memory(st.layers, deg, split, in_flight) for st in stages]
    memory = max(memories, key=lambda mc: mc.total_bytes)
    comm_terms = [
        CommTerm(purpose, kind, int(v[0]), v[1], v[2], v[3]) for (purpose, kind), v in comm.items()
    ]
    phases = [crit.fwd, crit.bwd] if w.training else [crit.fwd]
    return PlanResult(
        name=deg.name,
        degrees=deg.as_dict(),
        microbatches=m,
        microbatch_size=ceil(batch / split),
        latency_s=latency,
        latency_upper_s=latency_upper,
        throughput_per_s=throughput,
        tokens_per_s=throughput * w.tokens_per_item if w.kind != "stack" else None,
        memory_per_device_bytes=memory.total_bytes,
        fits=memory.fits,
        comm_bytes=sum(term.bytes for term in comm_terms),
        bottleneck=bottleneck,
        t_compute_s=m * sum(ph.compute_s for ph in phases),
        t_memory_s=m * sum(ph.memory_s for ph in phases),
        t_network_s=m * sum(ph.crit_s + ph.async_s for ph in phases) + crit.grad_s,
        t_stage_s=t_stage,
        t_bubble_s=bubble_s,
        bubble_fraction=bubble_fraction(P, m),
        time_by_bound_s=by_bound,
        memory=memory,
        comm=comm_terms,
    )


# ----------------------------------------------------------------------------------------------
# The search


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _microbatch_candidates(per_replica: int, deg: Degrees, training: bool) -> list[int]:
    if deg.pp == 1 and not training:
        return [1]
    divisors = _divisors(per_replica)
    if len(divisors) > 24:  # keep the search small: powers of two, multiples of P, the largest
        keep = {d for d in divisors if d & (d - 1) == 0 or d % deg.pp == 0 and d <= 8 * deg.pp}
        keep.add(per_replica)
        divisors = sorted(keep)
    return divisors


def _close(value: float) -> float:
    """Times compared to 9 significant digits, so that float noise does not break a tie."""
    return float(f"{value:.9g}")


def _sort_key(objective: str) -> Callable[[PlanResult], tuple[float, ...]]:
    """Plans that fit first; then the objective; ties go to the faster plan without overlap, then
    to less memory per device."""
    if objective == "throughput":
        return lambda p: (
            0 if p.fits else 1,
            -_close(p.throughput_per_s),
            _close(p.latency_s),
            _close(p.latency_upper_s),
            p.memory_per_device_bytes,
        )
    return lambda p: (
        0 if p.fits else 1,
        _close(p.latency_s),
        _close(p.latency_upper_s),
        -_close(p.throughput_per_s),
        p.memory_per_device_bytes,
    )


def _check_degree(name: str, value: int | None, devices: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name} must be a positive integer, got {value!r}")
    if devices % value:
        raise InputError(f"{name}={value} does not divide the {devices} devices")


def _candidates(workload: Workload, devices: int, fixed: dict[str, int | None]) -> list[Degrees]:
    batch = workload.batch
    pp_fixed = fixed["pp"]
    if pp_fixed is not None:
        workload.pipeline_stages(pp_fixed)  # raises when pp divides neither blocks nor layers
    given = [v for v in fixed.values() if v is not None]
    product = 1
    for v in given:
        product *= v
    if devices % product:
        raise InputError(
            f"the degrees given ({', '.join(f'{k}={v}' for k, v in fixed.items() if v)}) "
            f"multiply to {product}, which does not divide the {devices} devices"
        )
    if len(given) == 4 and product != devices:
        raise InputError(f"tp x pp x dp x fsdp = {product}, not the {devices} devices")
    replicas_fixed = (fixed["dp"] or 1) * (fixed["fsdp"] or 1)
    if replicas_fixed > batch:
        raise InputError(
            f"dp x fsdp = {replicas_fixed} splits a batch of only {batch} "
            f"{workload.batch_dim or 'items'}"
        )
    out: list[Degrees] = []
    for tp in _divisors(devices):
        for pp in _divisors(devices // tp):
            if workload.pipeline_splits(pp) is None:
                continue
            for dp in _divisors(devices // (tp * pp)):
                fsdp = devices // (tp * pp * dp)
                deg = Degrees(tp, pp, dp, fsdp)
                if any(v is not None and getattr(deg, k) != v for k, v in fixed.items()):
                    continue
                if deg.replicas > batch:
                    continue
                if deg.replicas > 1 and workload.batch_dim is None:
                    continue
                out.append(deg)
    if not out:
        raise InputError(
            f"no plan over {devices} devices is possible: the batch ({batch}) is too "
            f"small to split and the {workload.layer_count} layers do not divide evenly"
        )
    return out


def plan(
    workload: Workload,
    hw: str | Chip = "h100-sxm",
    devices: int = 8,
    *,
    tp: int | None = None,
    pp: int | None = None,
    dp: int | None = None,
    fsdp: int | None = None,
    microbatches: int | None = None,
    objective: str = "latency",
    require_fit: bool = True,
    flops_per_s: float | None = None,
    mem_bytes_per_s: float | None = None,
) -> PlanSet:
    """Every combination of tensor, pipeline, data and fully-sharded data parallelism over `devices`
    (or those with the degrees given), each with its best microbatch count, sorted best first.

    With `require_fit` (the default) a workload that fits on no plan raises InputError naming the
    smallest memory per device it would need.
    """
    if not isinstance(workload, Workload):
        raise InputError(f"plan() needs a Workload, got {type(workload).__name__}")
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise InputError(f"devices must be a positive integer, got {devices!r}")
    if objective not in OBJECTIVES:
        raise InputError(f"objective must be one of {', '.join(OBJECTIVES)}, got {objective!r}")
    fixed = {"tp": tp, "pp": pp, "dp": dp, "fsdp": fsdp}
    for name, value in fixed.items():
        _check_degree(name, value, devices)
    if microbatches is not None:
        if isinstance(microbatches, bool) or not isinstance(microbatches, int) or microbatches < 1:
            raise InputError(f"microbatches must be a positive integer, got {microbatches!r}")
        if microbatches > workload.batch:
            raise InputError(
                f"{microbatches} microbatches is more than the batch of "
                f"{workload.batch} {workload.batch_dim or 'items'}"
            )
    chip = apply_overrides(resolve_chip(hw), workload, flops_per_s, mem_bytes_per_s)
    ctx = _Context(workload, chip)
    key = _sort_key(objective)
    results: list[PlanResult] = []
    for deg in _candidates(workload, devices, fixed):
        per_replica = ceil(workload.batch / deg.replicas)
        if microbatches is not None:
            if microbatches > per_replica:
                continue
            options = [microbatches]
        else:
            options = _microbatch_candidates(per_replica, deg, workload.training)
        evaluated = [evaluate_plan(ctx, deg, m) for m in options]
        fitting = [r for r in evaluated if r.fits]
        # the best microbatch count; on a tie the fewest microbatches (the simplest schedule)
        chosen = (
            min(fitting, key=lambda r: (*key(r)[:4], r.microbatches))
            if fitting
            else min(evaluated, key=lambda r: (r.memory_per_device_bytes, r.latency_s))
        )
        results.append(chosen)
    if not results:
        raise InputError(
            f"{microbatches} microbatches is more than the batch per replica of every "
            f"plan over {devices} devices"
        )
    results.sort(key=key)
    fits = [r for r in results if r.fits]
    if not fits:
        smallest = min(results, key=lambda r: r.memory_per_device_bytes)
        message = (
            f"the workload fits on no plan over {devices} x {chip.name}: the smallest needs "
            f"{fmt_bytes(smallest.memory_per_device_bytes)} per device ({smallest.name}, "
            f"{smallest.memory_per_device_bytes:.4g} B) but each has "
            f"{fmt_bytes(chip.capacity_bytes)}; add devices, shrink the batch or use a chip "
            "with more memory"
        )
        if require_fit:
            raise InputError(message)
        return PlanSet(workload, chip, devices, objective, results, None, message)
    return PlanSet(
        workload,
        chip,
        devices,
        objective,
        results,
        fits[0].name,
        _reason(fits, results, objective, chip),
    )


def _reason(
    fits: Sequence[PlanResult], results: Sequence[PlanResult], objective: str, chip: Chip
) -> str:
    best = fits[0]
    left_out = len(results) - len(fits)
    what = (
        f"the lowest latency ({fmt_time(best.latency_s)})"
        if objective == "latency"
        else f"the highest throughput ({best.throughput_per_s:.4g} items/s)"
    )
    text = (
        f"{best.name} has {what} of the {len(fits)} plan(s) that fit in "
        f"{fmt_bytes(chip.capacity_bytes)} per device"
        + (f" ({left_out} do not fit)" if left_out else "")
        + f"; it is {best.bottleneck}-bound"
    )
    if len(fits) > 1:
        second = fits[1]
        ratio = (
            second.latency_s / best.latency_s
            if objective == "latency"
            else best.throughput_per_s / second.throughput_per_s
        )
        if ratio < 1.0005:
            if second.latency_upper_s > best.latency_upper_s * 1.0005:
                why = (
                    f"is slower without overlap ({fmt_time(second.latency_upper_s)} vs "
                    f"{fmt_time(best.latency_upper_s)})"
                )
            elif second.memory_per_device_bytes > best.memory_per_device_bytes:
                why = (
                    f"needs more memory per device ({fmt_bytes(second.memory_per_device_bytes)}"
                    f" vs {fmt_bytes(best.memory_per_device_bytes)})"
                )
            else:
                why = "is otherwise equal"
            text += f"; the runner-up {second.name} ties on it but {why}"
        else:
            text += (
                f"; the runner-up {second.name} is {ratio:.3f}x "
                f"{'slower' if objective == 'latency' else 'lower'} "
                f"({second.bottleneck}-bound)"
            )
    return text


# ----------------------------------------------------------------------------------------------
# Sweeping the batch: where the recommended plan changes


@dataclass(frozen=True)
class SweepPoint:
    batch: int
    recommended: str | None
    latency_s: float | None
    throughput_per_s: float | None
    bottleneck: str | None
    memory_per_device_bytes: float | None
    latency_by_plan_s: dict[str, float]  # every plan that fits at this batch


@dataclass(frozen=True)
class Crossover:
    """The smallest batch at which the recommendation changes from `from_plan` to `to_plan`."""

    batch: int
    from_plan: str | None
    to_plan: str | None


@dataclass(frozen=True)
class BatchSweep:
    workload: Workload
    chip: Chip
    devices: int
    objective: str
    points: list[SweepPoint]
    crossovers: list[Crossover]

    def to_dict(self) -> dict[str, Any]:
        w = self.workload
        return jsonable(
            {
                "workload": {
                    **w.identity(),
                    "item": w.item,
                    "tokens_per_item": w.tokens_per_item,
                },
                "hardware": {"name": self.chip.name, "capacity_bytes": self.chip.capacity_bytes},
                "devices": self.devices,
                "objective": self.objective,
                "sweep": self.points,
                "crossovers": self.crossovers,
            }
        )


MAX_CROSSOVERS = 20


def sweep_batch(
    workload: Workload,
    hw: str | Chip,
    devices: int,
    batches: Sequence[int],
    **options: Any,
) -> BatchSweep:
    """`plan` at each batch size, and each crossover: between two neighbouring batches whose
    recommendations differ, the smallest batch at which the recommendation changes (bisection)."""
    if not batches:
        raise InputError("give at least one batch size")
    sizes = sorted({int(b) for b in batches})
    chip = apply_overrides(
        resolve_chip(hw),
        workload,
        options.pop("flops_per_s", None),
        options.pop("mem_bytes_per_s", None),
    )
    objective = str(options.get("objective", "latency"))
    memo: dict[int, PlanSet] = {}

    def at(batch: int) -> PlanSet:
        if batch not in memo:
            memo[batch] = plan(
                workload.with_batch(batch), chip, devices, require_fit=False, **options
            )
        return memo[batch]

    points = []
    for b in sizes:
        ps = at(b)
        best = ps.best()
        points.append(
            SweepPoint(
                batch=b,
                recommended=ps.recommended,
                latency_s=best.latency_s if best else None,
                throughput_per_s=best.throughput_per_s if best else None,
                bottleneck=best.bottleneck if best else None,
                memory_per_device_bytes=best.memory_per_device_bytes if best else None,
                latency_by_plan_s={p.name: p.latency_s for p in ps.plans if p.fits},
            )
        )
    crossovers: list[Crossover] = []
    for lo, hi in zip(sizes, sizes[1:], strict=False):
        a = lo
        while at(a).recommended != at(hi).recommended and len(crossovers) < MAX_CROSSOVERS:
            first = at(a).recommended
            left, right = a, hi  # rec(left) == first, rec(right) != first
            while right - left > 1:
                mid = (left + right) // 2
                if at(mid).recommended == first:
                    left = mid
                else:
                    right = mid
            crossovers.append(
                Crossover(batch=right, from_plan=first, to_plan=at(right).recommended)
            )
            a = right
    return BatchSweep(workload, chip, devices, objective, points, crossovers)
