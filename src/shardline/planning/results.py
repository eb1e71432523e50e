"""The records a plan search returns: one plan's result, the ranked set."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from shardline.basics.framework import attention_kernel_of
from shardline.basics.options import Execution
from shardline.basics.serialize import jsonable
from shardline.basics.values import JSONDict, as_number
from shardline.hardware import Chip
from shardline.ops.cost import Cost
from shardline.strategies import CommTerm
from shardline.workload.stack import MemoryCheck
from shardline.workload.workload import Workload

__all__ = ["OBJECTIVES", "PlanResult", "PlanSet", "bubble_fraction"]

OBJECTIVES = ("latency", "throughput", "predicted")


def bubble_fraction(stages: int, microbatches: int) -> float:
    """Idle fraction of a pipeline flush: (P - 1) / (m + P - 1) (GPipe, Huang et al. 2019)."""
    return (stages - 1) / (microbatches + stages - 1)


@dataclass(frozen=True)
class PlanResult:
    """One plan. `cost`: the step's work on one device (m x the stage's layers, forward and
    backward, plus its communication: net_bytes = comm_bytes, t_network_s all communication
    time, overlapped or not); latency and throughput come from the pipeline schedule."""

    name: str
    degrees: dict[str, int]
    microbatches: int
    microbatch_size: int  # batch items per device per microbatch
    latency_s: float  # time to finish the whole batch (one training step, or one forward pass)
    latency_upper_s: float  # the same with no overlap of communication and computation
    throughput_bound_per_s: float  # batch items per second at the lower bound (latency_s)
    memory_per_device_bytes: float
    fits: bool
    bottleneck: str  # "compute", "memory" (HBM bandwidth), "network" or "bubble"
    cost: Cost
    t_stage_s: float  # one microbatch through the slowest stage
    t_bubble_s: float
    bubble_fraction: float
    time_by_bound_s: dict[str, float]
    memory: MemoryCheck
    comm: list[CommTerm] = field(default_factory=list)
    # the realistic answers (shardline.planning.step)
    predicted_s: float = 0.0  # one step / the prompt (time to first token) / one output token
    throughput_per_s: float = 0.0  # batch items per second at the realistic time (predicted_s)
    predicted_breakdown_s: dict[str, float] = field(default_factory=dict)  # sums to predicted_s
    gap_s: dict[str, float] = field(default_factory=dict)  # sums to predicted_s - latency_s
    mfu: float = 0.0
    hfu: float = 0.0
    model_flops: float = 0.0
    hardware_flops: float = 0.0
    # training: the recompute policy, what it keeps and reruns (shardline.planning.step)
    recompute: dict[str, Any] = field(default_factory=dict)
    tokens_per_s: float | None = None  # the step's tokens over predicted_s (decode: batch / it)
    tokens_per_s_per_device: float | None = None
    days_to_train: float | None = None  # --tokens over tokens_per_s
    stages: list[dict[str, float]] = field(default_factory=list)  # per pipeline stage

    @property
    def bubble_over_ideal(self) -> float:
        """The bubble as a fraction of the ideal step (m microbatches, no bubble): (P - 1)/(V m)
        for interleaved 1F1B (Narayanan et al. 2021)."""
        busy = self.microbatches * self.t_stage_s
        return self.t_bubble_s / busy if busy > 0 else 0.0

    def _stage_times(self) -> list[float]:
        return [float(s.get("predicted_s", s["t_s"])) for s in self.stages]

    @property
    def slowest_stage(self) -> int | None:
        """The pipeline stage that sets the pace (realistic time per microbatch); None with one."""
        times = self._stage_times()
        return max(range(len(times)), key=times.__getitem__) if len(times) > 1 else None

    @property
    def stage_imbalance(self) -> float:
        """The slowest stage's time over the fastest's, less 1 (0.0 with one stage)."""
        times = self._stage_times()
        if len(times) < 2 or min(times) <= 0:
            return 0.0
        return max(times) / min(times) - 1.0

    @property
    def comm_bytes(self) -> float:
        """Bytes moved by this device's collectives and sends per step."""
        return as_number(self.cost.net_bytes)

    @property
    def t_compute_s(self) -> float:
        return as_number(self.cost.t_compute_s)

    @property
    def t_memory_s(self) -> float:
        return as_number(self.cost.t_memory_s)

    @property
    def t_network_s(self) -> float:
        """All communication time, overlapped or not."""
        return as_number(self.cost.t_network_s)

    def to_dict(self) -> JSONDict:
        head: tuple[str, ...] = ("name", "degrees", "microbatches", "microbatch_size")
        head += ("predicted_s", "latency_s")
        mid: tuple[str, ...] = ("latency_upper_s", "throughput_per_s", "throughput_bound_per_s")
        mid += ("tokens_per_s",)
        mid += ("tokens_per_s_per_device", "mfu", "hfu", "model_flops", "hardware_flops")
        mid += ("recompute",)
        mid += ("days_to_train", "predicted_breakdown_s", "gap_s", "memory_per_device_bytes")
        tail: tuple[str, ...] = ("t_stage_s", "t_bubble_s", "bubble_fraction", "bubble_over_ideal")
        tail += ("time_by_bound_s", "memory", "slowest_stage", "stage_imbalance", "stages")
        return jsonable(
            {
                **{k: getattr(self, k) for k in head + mid},
                "fits": self.fits,
                "comm_bytes": self.comm_bytes,
                "bottleneck": self.bottleneck,
                "t_compute_s": self.t_compute_s,
                "t_memory_s": self.t_memory_s,
                "t_network_s": self.t_network_s,
                **{k: getattr(self, k) for k in tail},
                "comm": [c.to_dict() for c in self.comm],
            }
        )


@dataclass(frozen=True)
class PlanSet:
    workload: Workload
    chip: Chip
    devices: int
    objective: str
    plans: list[PlanResult]  # best first: plans that fit, by the objective, then those that do not
    recommended: str | None
    reason: str
    execution: Execution | None = None

    def to_dict(self) -> JSONDict:
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
                    "power_limit_w": self.chip.power.limit_w if self.chip.power else None,
                    "scale_up_devices": (
                        self.chip.interconnect.scale_up_devices if self.chip.interconnect else 1
                    ),
                },
                "devices": self.devices,
                "objective": self.objective,
                "execution": self._execution_dict(),
                "plans": [p.to_dict() for p in self.plans],
                "recommended": self.recommended,
                "reason": self.reason,
            }
        )

    def _execution_dict(self) -> dict[str, object] | None:
        """The options used, with the attention kernel a run left unnamed resolved (the
        default framework's in training; None: the chip's generic figures)."""
        if self.execution is None:
            return None
        out = asdict(self.execution)
        out["attention_kernel"] = attention_kernel_of(
            self.execution.attention_kernel, self.workload.training
        )
        return out

    def best(self) -> PlanResult | None:
        return self.plans[0] if self.plans and self.plans[0].fits else None
