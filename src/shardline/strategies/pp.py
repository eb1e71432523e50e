"""Pipeline parallel (pp): consecutive blocks form stages. A training step runs m microbatches
through P stages under 1F1B with V interleaved chunks per stage in `m + (P - 1)/V` stage times, a
bubble of `(P - 1) / (V m + P - 1)` (Narayanan et al. 2021); V = 1, and a forward pass, take
`m + P - 1`, a bubble of `(P - 1) / (m + P - 1)` (GPipe, Huang et al. 2019). Each microbatch sends
the boundary activation (and its gradient) point to point, on the critical path."""

from __future__ import annotations

from shardline.basics.units import parse_count
from shardline.errors import InputError
from shardline.strategies.base import CommTerm, Knob, MemorySplit, Network, StageView, Strategy
from shardline.workload.workload import Workload

__all__ = [
    "PipelineParallel",
    "STRATEGY",
    "MAX_STAGES",
    "SERVING_STAGES",
    "serving_stages_reason",
]

# At most 1,024 pipeline stages: each plan's evaluation and its report walk every stage, and
# published pipelines use far fewer (Megatron-LM's 1-trillion-parameter run: 64 stages,
# Narayanan et al. 2021).
MAX_STAGES = 1024
# The pipeline stages of a serving replica: 2 or 4 stages, each a node's tensor-parallel group
# (vLLM's and SGLang's multi-node recipes run tensor parallel inside a node and pipeline
# parallel across nodes; shardline.serving's search).
SERVING_STAGES = (1, 2, 4)


def serving_stages_reason(workload: Workload, degree: int, what: str) -> str | None:
    """Why `degree` pipeline stages cannot split a serving replica of `workload` (None: they
    can): each stage holds an equal share of the blocks (their weights and KV cache, as the
    engines split the layers by default), at most MAX_STAGES."""
    if degree > MAX_STAGES:
        return f"{what} {degree}: at most {MAX_STAGES:,} pipeline stages"
    if workload.repeat % degree:
        return (
            f"{what} {degree} does not divide the model's {workload.repeat} blocks: each "
            "pipeline stage holds an equal share of them"
        )
    return None


def _interleave(text: str) -> int:
    """--interleave: a positive whole number of model chunks per stage."""
    value = parse_count(text, "--interleave")
    if value < 1:
        raise InputError(f"--interleave must be a positive integer, got {text!r}")
    return value


class PipelineParallel(Strategy):
    name = "pp"
    word = "pp"
    help = "pipeline stages"
    splits = ("layers",)
    mesh_rank = 3
    serving = True  # a serving replica is tp x pp devices (shardline.serving)
    tier = "outermost: the scale-out network once the inner axes fill a node"
    comm_where = "critical path"
    memory = MemorySplit("stage", "stage", "stage", "stage", "stage")
    knobs = (
        Knob(
            "interleave",
            "--interleave",
            "model chunks per pipeline stage (interleaved 1F1B: bubble (P-1)/(V m)); default 1",
            metavar="V",
            parse=_interleave,
        ),
    )

    def bound(self, workload: Workload) -> int:
        return MAX_STAGES

    def valid(self, workload: Workload, degree: int) -> bool:
        return degree <= MAX_STAGES and workload.pipeline_splits(degree) is not None

    def serving_range(self, workload: Workload, max_devices: int) -> tuple[int, ...]:
        """The SERVING_STAGES up to `max_devices` that split a serving replica
        (`serving_stages_reason`: an equal share of the blocks a stage)."""
        return tuple(
            d
            for d in SERVING_STAGES
            if d <= max_devices and serving_stages_reason(workload, d, "pp") is None
        )

    def check(self, workload: Workload, degree: int) -> None:
        if degree > MAX_STAGES:
            raise InputError(f"{self.name}={degree}: at most {MAX_STAGES:,} pipeline stages")
        workload.pipeline_stages(degree)  # raises when pp divides neither blocks nor layers

    def stage_comm(self, view: StageView, degree: int, net: Network) -> list[CommTerm]:
        """V = the stage's last layer's output (local sizes): sent on to the next stage in the
        forward pass, its gradient sent back in the backward pass (training); critical."""
        v = view.last.operand_bytes(view.last.output.name, view.last_dims)
        t = net.time("send", v, self.name)
        p = net.predicted("send", v, self.name)
        out = []
        if view.index < view.stages - 1:
            out.append(CommTerm(self.name, "send", 2, 1, v, t, critical=True, predicted_s=p))
        if view.training and view.index > 0:
            out.append(
                CommTerm(
                    self.name, "send", 2, 1, v, t, critical=True, phase="backward", predicted_s=p
                )
            )
        return out


STRATEGY = PipelineParallel()
