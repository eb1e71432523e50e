"""A stage's phases (forward, backward) as sums of Cost, and a stage's communication.

Lower bound of one stage for one microbatch, per phase: `max(local, compute + critical,
busiest links)`, where local is the sum over layers of max(t_compute, t_memory) (each layer's own
roofline), compute the layers' einsums at peak compute alone, critical the communication the next
op waits for (tensor-parallel all-reduces, pipeline sends) and the busiest links carry it with the
overlapped communication (FSDP gathers and reduce-scatters: "not on critical path" in "How to
Scale Your Model", Part 5; below). A collective's result holds up the compute that consumes it,
but not the HBM traffic of the layers (their weights, the KV cache), which does not depend on it
and streams beside it: so the critical communication adds to the compute, and a memory-bound
phase (decode) hides it behind its HBM time as the book's roofline max(T_math, T_mem, T_comms)
does (LLaMA-3-70B decode on a 4x4 v5e: the HBM time, not HBM + the TP collectives).

The realistic time of the same phase sums each op's predicted time by category (`PARTS`: GEMMs,
the attention kernel, the memory-bound ops between them, recompute), then adds the critical
communication at its realistic time and whatever of the overlapped communication the compute
cannot hide: `compute + critical + max(0, overlapped - compute)`.

Overlapped communication whose kernels hold SMs of their own (`CommTerm.sm_share`: the
expert-parallel dispatch of HybridEP or DeepEP beside another microbatch's compute) slows the
compute beside it: for the A seconds it runs, the compute runs on the other 1 - r of the SMs. A
phase of W seconds of compute then takes W + A r when the compute outlasts the communication
(W >= A (1 - r)), else A: `compute + critical + max(contention, overlapped - compute)` with
contention = sum of A r over those terms.

Overlapped tensor-parallel communication (`--tp-overlap`) is split into tp steps beside the one
GEMM it feeds or follows (`CommTerm.paired_s`): only that GEMM can hide it, so each call leaves
`decomposed_exposed_s` exposed (what outlasts all of its GEMM's chunks but one), which the phase
waits for like critical communication (`pinned_s`); the rest joins the overlapped traffic.

Concurrent mesh axes (the lower bound and what binds a phase): collectives on axes whose links
are disjoint (`MeshNetwork.links`: tensor parallelism on NVLink beside FSDP over the NICs, or on
two torus dimensions) move their bytes at the same time; axes that share a link compete for it.
Per group g of axes joined by shared links (`shardline.collectives.concurrent_s`) the links
carry its overlapped traffic and its critical traffic one after the other, so the phase takes
`max(local, compute + critical, max_g(overlapped_g + critical_g))`; and it is network-bound
when `max_g(overlapped_g + critical_g)` exceeds `local` ("How to Scale Your Model", Part 5:
compute-bound while T_math exceeds both the FSDP and the TP communication times)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace

from shardline.basics.values import as_number
from shardline.collectives import concurrent_s
from shardline.ops.cost import ZERO_COST, Cost
from shardline.planning.combine import exposed_comm_s
from shardline.strategies import CommTerm
from shardline.workload.stack import LayerCost
from shardline.workload.workload import Layer

__all__ = ["Einsums", "Phase", "Stage", "PARTS"]

# The categories of a phase's realistic compute time (seconds), in the order reports show them.
PARTS = ("gemm", "attention", "other_ops", "recompute")


def _zero_parts() -> dict[str, float]:
    return dict.fromkeys(PARTS, 0.0)


def _add_to(into: dict[str, float], axis: str, seconds: float) -> dict[str, float]:
    out = dict(into)
    out[axis] = out.get(axis, 0.0) + seconds
    return out


@dataclass(frozen=True)
class Einsums:
    """n instances of one einsum as a phase adds them: their roofline Cost (n times one's),
    whether one is compute-bound, n times its lower bound and its realistic time, and the part
    of the phase the time goes to."""

    local: Cost
    compute_bound: bool
    lower_s: float
    predicted_s: float
    part: str

    @staticmethod
    def of(cost: LayerCost, n: float, part: str = "gemm") -> Einsums:
        return Einsums(
            cost.cost * n,
            cost.bound == "compute",
            n * cost.t_lower_s,
            n * float(cost.cost.predicted_s),
            part,
        )


def decomposed_exposed_s(comm_s: float, gemm_s: float, ranks: int) -> float:
    """What of one overlapped tensor-parallel collective its GEMM cannot hide. Overlap splits the
    pair into steps over the t = `ranks` shards (PyTorch's async TP,
    torch.distributed._symmetric_memory fused_all_gather_matmul and fused_matmul_reduce_scatter;
    Transformer Engine's userbuffers ring exchange): the GEMM runs on the local shard while the
    first remote shard arrives, then on each remote shard while the next arrives, so t - 1
    transfers of C / (t - 1) each run beside t - 1 of the t GEMM chunks of G / t (the reduce-
    scatter is the same schedule reversed). The step takes
    (t - 1) max(G / t, C / (t - 1)) + G / t, of which

        exposed = max(C - G (t - 1) / t, 0)

    is communication: the collective hides behind its own GEMM only, less the one chunk that
    has nothing to overlap, and not behind the rest of the phase (attention, norms, other
    layers' GEMMs), which runs before or after the pair."""
    t = max(int(ranks), 2)
    return max(comm_s - gemm_s * (t - 1) / t, 0.0)


@dataclass
class Phase:
    """Per-microbatch Costs of one phase (forward or backward) of one stage: `local` the layers'
    roofline Costs, `critical` and `overlapped` the communication; `parts` the realistic compute
    seconds by category and `lower_parts` the lower bound of the einsums by category."""

    local: Cost = ZERO_COST
    critical: Cost = ZERO_COST
    overlapped: Cost = ZERO_COST
    contention_s: float = 0.0  # compute lost to the SMs overlapped communication holds
    # what decomposed tensor-parallel collectives leave exposed beside their own GEMMs
    # (`decomposed_exposed_s`): waited for like critical communication
    pinned_s: float = 0.0
    compute_bound_s: float = 0.0  # time of the layers that are compute-bound
    memory_bound_s: float = 0.0
    parts: dict[str, float] = field(default_factory=_zero_parts)
    lower_parts: dict[str, float] = field(default_factory=_zero_parts)
    # line-rate seconds of the critical and the overlapped traffic by mesh axis, and the links
    # each axis sends over (`MeshNetwork.links`; empty: every axis shares one group)
    crit_by_axis: dict[str, float] = field(default_factory=dict)
    async_by_axis: dict[str, float] = field(default_factory=dict)
    links: Mapping[str, frozenset[str]] = field(default_factory=dict)

    @property
    def local_s(self) -> float:
        return as_number(self.local.t_lower_s)

    @property
    def crit_s(self) -> float:
        return as_number(self.critical.t_network_s)

    @property
    def async_s(self) -> float:
        return as_number(self.overlapped.t_network_s)

    def copy(self) -> Phase:
        """A copy to add to (the Costs are immutable; the part sums are copied)."""
        return replace(
            self,
            parts=dict(self.parts),
            lower_parts=dict(self.lower_parts),
            crit_by_axis=dict(self.crit_by_axis),
            async_by_axis=dict(self.async_by_axis),
        )

    def add(self, cost: LayerCost, n: float, part: str = "gemm") -> None:
        """n instances of one einsum: its lower bound and its realistic time (in `part`)."""
        self.add_einsums(Einsums.of(cost, n, part))

    def add_einsums(self, e: Einsums) -> None:
        """What `add` adds, computed ahead (`Einsums.of`)."""
        self.local = self.local + e.local
        if e.compute_bound:
            self.compute_bound_s += e.lower_s
        else:
            self.memory_bound_s += e.lower_s
        self.parts[e.part] += e.predicted_s
        self.lower_parts[e.part] += e.lower_s

    def add_predicted(self, part: str, seconds: float) -> None:
        """Realistic time with no lower-bound counterpart (memory-bound ops, recompute)."""
        self.parts[part] += seconds

    def add_comm(self, term: CommTerm) -> None:
        seconds = float(term.cost.t_network_s)
        if term.critical:
            self.critical = self.critical + term.cost
            self.crit_by_axis = _add_to(self.crit_by_axis, term.purpose, seconds)
        else:
            cost = term.cost
            if term.paired_s is not None:  # decomposed beside its GEMM: only that can hide it
                exposed = decomposed_exposed_s(term.t_pred_s, term.paired_s, term.devices)
                self.pinned_s += term.calls * exposed
                cost = replace(cost, predicted_s=term.calls * (term.t_pred_s - exposed))
            self.overlapped = self.overlapped + cost
            self.async_by_axis = _add_to(self.async_by_axis, term.purpose, seconds)
            self.contention_s += term.calls * term.t_pred_s * term.sm_share

    def link_busy_s(self, extra: Mapping[str, float] | None = None) -> float:
        """The busiest group of links: `max_g(overlapped_g + critical_g)` (module docstring),
        with `extra` more overlapped seconds by axis (the once-per-step gradient traffic)."""
        ov = dict(self.async_by_axis)
        for axis, seconds in (extra or {}).items():
            ov = _add_to(ov, axis, seconds)
        axes = sorted(set(ov) | set(self.crit_by_axis))
        return as_number(
            concurrent_s(
                (self.links.get(a, frozenset()), ov.get(a, 0.0) + self.crit_by_axis.get(a, 0.0))
                for a in axes
            )
        )

    @property
    def compute_s(self) -> float:
        """The phase's einsums at peak compute alone (their memory traffic left out)."""
        return float(self.local.t_compute_s)

    def time_s(self, extra: Mapping[str, float] | None = None) -> float:
        """The phase's lower bound: `max(local, compute + critical, busiest links)` (module
        docstring)."""
        return max(self.local_s, self.compute_s + self.crit_s, self.link_busy_s(extra))

    def serial_s(self) -> float:
        return self.local_s + self.async_s + self.crit_s

    @property
    def compute_pred_s(self) -> float:
        return sum(self.parts.values())

    @property
    def exposed_comm_pred_s(self) -> float:
        """Realistic communication the phase waits for: the critical part, and what of the
        overlapped part outlasts the compute."""
        return exposed_comm_s(
            self.compute_pred_s,
            float(self.critical.predicted_s) + self.pinned_s,
            float(self.overlapped.predicted_s),
            self.contention_s,
        )

    @property
    def predicted_s(self) -> float:
        return self.compute_pred_s + self.exposed_comm_pred_s

    def attribute(
        self, into: dict[str, float], times: float, extra: Mapping[str, float] | None = None
    ) -> None:
        """Charge this phase's time to what binds it: the network when its busiest group of links
        carries more than its local compute (the book's T_comms > T_math), else compute and memory
        by layer, plus to the network what of the critical-path communication the layers' own
        rooflines do not cover (`time - local`)."""
        t = self.time_s(extra)
        if self.link_busy_s(extra) > self.local_s:
            into["network"] += times * t
            return
        into["compute"] += times * self.compute_bound_s
        into["memory"] += times * self.memory_bound_s
        into["network"] += times * (t - self.local_s)


@dataclass
class Stage:
    """One pipeline stage for one microbatch; `grad` the communication that runs once per step
    and overlaps the last backward pass (the data-parallel gradient all-reduce)."""

    layers: list[tuple[Layer, int]]
    training: bool
    fwd: Phase = field(default_factory=Phase)
    bwd: Phase = field(default_factory=Phase)
    grad: Cost = ZERO_COST
    terms: list[CommTerm] = field(default_factory=list)
    grad_by_axis: dict[str, float] = field(default_factory=dict)  # line-rate seconds

    @staticmethod
    def on(
        layers: list[tuple[Layer, int]], training: bool, links: Mapping[str, frozenset[str]]
    ) -> Stage:
        """A stage whose phases know the links each mesh axis sends over."""
        return Stage(layers, training, Phase(links=links), Phase(links=links))

    @property
    def grad_s(self) -> float:
        return as_number(self.grad.t_network_s)

    def copy(self) -> Stage:
        """A copy to add to (its phases and its list of terms copied)."""
        return replace(
            self,
            fwd=self.fwd.copy(),
            bwd=self.bwd.copy(),
            terms=list(self.terms),
            grad_by_axis=dict(self.grad_by_axis),
        )

    def add_comm(self, term: CommTerm) -> None:
        """Place one communication term: once per step, or in its phase (critical or not)."""
        self.terms.append(term)
        if term.once_per_step:
            self.grad = self.grad + term.cost
            self.grad_by_axis = _add_to(
                self.grad_by_axis, term.purpose, float(term.cost.t_network_s)
            )
        elif term.phase == "forward":
            self.fwd.add_comm(term)
        else:
            self.bwd.add_comm(term)

    @property
    def t_s(self) -> float:
        """One microbatch through this stage (forward, and backward when training)."""
        return self.fwd.time_s() + (self.bwd.time_s() if self.training else 0.0)

    @property
    def t_pred_s(self) -> float:
        """The same, realistic."""
        return self.fwd.predicted_s + (self.bwd.predicted_s if self.training else 0.0)

    @property
    def last_extra_s(self) -> float:
        """What the once-per-step gradient traffic adds to the last microbatch's backward pass at
        line rate: what of it outlasts the whole backward phase, `max(0, grad - backward)`. It
        overlaps the phase's compute and its other traffic alike, as the realistic step has it
        (`planning.combine.exposed_gradient_s`), so that the bound stays below the realistic
        step (adding it to the phase's overlapped traffic instead put the bound of
        gpt-oss-120b's dp2-fsdp8-ep4 on 64 H100 at 0.709 s, above its 0.692 s prediction)."""
        return max(0.0, self.grad_s - self.bwd.time_s()) if self.training else 0.0

    @property
    def serial_s(self) -> float:
        return self.fwd.serial_s() + (self.bwd.serial_s() if self.training else 0.0)

    def parts_s(self) -> dict[str, float]:
        """Realistic seconds of one microbatch by category, plus the exposed communication."""
        phases = [self.fwd, self.bwd] if self.training else [self.fwd]
        out = {k: sum(ph.parts[k] for ph in phases) for k in PARTS}
        out["exposed_comm"] = sum(ph.exposed_comm_pred_s for ph in phases)
        return out
