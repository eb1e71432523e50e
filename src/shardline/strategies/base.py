"""What a parallel strategy is: a record of what it splits, the communication it adds, how it
splits memory and where it sits on the device mesh.

A strategy is data plus two small pricing rules (`layer_comm` for one layer, `stage_comm` for a
pipeline stage's boundary). It declares its own knobs: the degree's flag and help (`word`, `help`;
the API keyword is `name`), its execution flags (`knobs`), the degrees it can run (`valid`,
`check`, `bound`), the degrees the searches try (`tries`, `search_range`, `searched`), whether it
applies to serving (`serving`) and its memory split (`memory`). The CLI, the plan engine, both
searches and the docs' strategy table read them from the registry (`registry.py`) and never name
a strategy, so adding one is one new module and one registry line.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property, lru_cache
from types import MappingProxyType
from typing import Any, Literal, Protocol

from shardline.collectives import AxisNetwork
from shardline.hardware import Chip
from shardline.ops.cost import Cost
from shardline.ops.layer import LOGICAL_AXES
from shardline.realistic.modelshape import ModelShape
from shardline.workload.workload import Layer, Workload

__all__ = [
    "LOGICAL_AXES",
    "CommTerm",
    "MemorySplit",
    "LayerView",
    "StageView",
    "Network",
    "Strategy",
    "Split",
    "Knob",
    "divisors",
    "reduced_gradient_bytes",
]

# The logical axes a strategy can split ("layers": whole layers, i.e. pipeline stages; "tensor":
# the layer's own tensor-parallel dims, `Layer.tp_dims`). Layers name their dims by these axes
# (`Layer.axes`); see layer.LOGICAL_AXES (re-exported here).

Split = Literal["replicated", "dims", "sharded", "stage"]
# "replicated": every device holds all of it; "dims": smaller because the dims it spans are split
# (it follows `split_dims`); "sharded": divided by the degree (ZeRO-3); "stage": only the layers of
# the device's pipeline stage.


@dataclass(frozen=True)
class CommTerm:
    """One kind of communication, per device. For one layer (`Strategy.layer_comm`): `calls`
    instances, each moving `bytes` (the whole array V of the collective, the message of a send) in
    `t_s`. In a plan's result: `calls`, `bytes` and `t_s` summed over one step.

    `once_per_step`: runs once per step (the data-parallel gradient all-reduce) instead of once per
    microbatch; `critical`: the next op needs its result (else it overlaps the phase's compute);
    `phase`: "forward" or "backward"; `step`: its place in the layer's schedule (0 the forward
    pass, 1 the output gradient, 2 + i the i-th backward einsum): the order the terms run in.
    """

    purpose: str  # the strategy's name
    kind: str  # "all_reduce", "all_gather", "reduce_scatter" or "send"
    devices: int
    calls: float
    bytes: float
    t_s: float
    once_per_step: bool = False
    critical: bool = False
    phase: str = "forward"
    step: int = 0
    predicted_s: float | None = None  # realistic time of one call (None: the line-rate t_s)
    # the share of the chip's SMs its kernels hold while it runs beside compute (HybridEP and
    # DeepEP run the all-to-all on SMs of their own): the compute beside it loses that share
    sm_share: float = 0.0
    # tensor parallelism: the realistic time of one call of the GEMM beside which an overlapped
    # (decomposed) collective runs (`shardline.planning.stage_extras.tp_variants`); None: not set
    paired_s: float | None = None

    @property
    def t_pred_s(self) -> float:
        return self.t_s if self.predicted_s is None else self.predicted_s

    @cached_property
    def cost(self) -> Cost:
        """All `calls` of it as a Cost (network bytes, line-rate and realistic time)."""
        return Cost.network(
            self.calls * self.bytes, self.calls * self.t_s, self.calls * self.t_pred_s
        )

    def to_dict(self) -> dict[str, object]:
        """The JSON of a plan's communication term (the keys `shardline plan --json` prints)."""
        return {
            "purpose": self.purpose,
            "kind": self.kind,
            "devices": self.devices,
            "calls": self.calls,
            "bytes": self.bytes,
            "t_s": self.t_s,
            "predicted_s": self.t_pred_s,
        }


@dataclass(frozen=True)
class MemorySplit:
    """How a strategy splits each memory term on one device (see `Split`)."""

    weights: Split
    gradients: Split
    optimizer: Split
    activations: Split
    kv_cache: Split


@dataclass(frozen=True)
class Knob:
    """One execution flag a strategy owns beyond its degree: `--FLAG` on the command line (`plan`,
    `what-if precision plan`, `report`, `stack`), the keyword and field `field` of plan() and
    shardline.basics.options.Execution. `switch`: a flag without a value (sets True); `choices`: the
    words it takes; `parse`: text -> value (None: the text itself)."""

    field: str
    flag: str
    help: str
    switch: bool = False
    choices: tuple[str, ...] | None = None
    metavar: str | None = None
    parse: Callable[[str], object] | None = None


@lru_cache(maxsize=1024)
def divisors(n: int) -> tuple[int, ...]:
    """The divisors of n, ascending (from its prime factors)."""
    factors: dict[int, int] = {}
    rest, p = n, 2
    while p * p <= rest:  # trial division: at most sqrt(n) steps, fewer as factors come out
        while rest % p == 0:
            factors[p] = factors.get(p, 0) + 1
            rest //= p
        p += 1 if p == 2 else 2
    if rest > 1:
        factors[rest] = factors.get(rest, 0) + 1
    out = [1]
    for prime, power in factors.items():
        out = [d * prime**k for d in out for k in range(power + 1)]
    return tuple(sorted(out))


class Network(Protocol):
    chip: Chip
    memo: dict[object, Any]  # a strategy's own memo of priced work on this network

    def time(self, kind: str, nbytes: float, axis: str) -> float:
        """Seconds for collective `kind` of a V-byte array over the mesh axis `axis`."""
        ...

    def predicted(self, kind: str, nbytes: float, axis: str) -> float:
        """The same collective's realistic seconds (bus efficiency, latency)."""
        ...

    def axis_network(self, axis: str) -> AxisNetwork | None:
        """The network of mesh axis `axis` (None when it has one device)."""
        ...


@dataclass(frozen=True)
class LayerView:
    """One layer as a strategy sees it on one device: `count` instances at local sizes `dims`
    (every strategy's split applied), its backward einsums with their local sizes (training), the
    layer that runs after it, and `local`: the local sizes of any layer under other degrees
    (`local(layer, degrees)`)."""

    layer: Layer
    count: int
    dims: Mapping[str, int]
    grads: tuple[tuple[Layer, Mapping[str, int]], ...]
    following: Layer
    degrees: Mapping[str, int]
    local: Callable[[Layer, Mapping[str, int]], dict[str, int]]
    training: bool
    gradient_ways: int = 1  # ways the weight gradients are sharded (product of those degrees)
    zero: int = 0  # the ZeRO stage of the data-parallel axis (shardline.basics.options.Execution)
    cp_kind: str = "ring"  # context parallelism's K/V exchange (shardline.basics.options.Execution)
    ep_dispatch: str = (
        "all-to-all"  # the expert-parallel dispatch (shardline.basics.options.Execution)
    )
    ep_comm_sms: int = 0  # SMs the dispatch kernels run on (0: unstated)
    model: ModelShape | None = None  # the whole model's shape (attention kernel, causal mask)
    grad_reduce_dtype: str | None = None  # dtype of reduced gradients (None: their own)
    attention_kernel: str | None = None  # the fused attention kernel the run uses (its figures)

    def gradient_bytes(self, grad: Layer, dims: Mapping[str, int]) -> float:
        """Bytes of the weight gradient `grad` computes (at local sizes `dims`) as the gradient
        reduction moves it (`reduced_gradient_bytes`)."""
        return reduced_gradient_bytes(grad, dims, self.grad_reduce_dtype)


def reduced_gradient_bytes(grad: Layer, dims: Mapping[str, int], reduce_dtype: str | None) -> float:
    """Bytes of the weight gradient `grad` computes (at local sizes `dims`) as the gradient
    reduction moves it: in `reduce_dtype` when one is set (the run's `grad_reduce_dtype`: a
    bf16 gradient reduced in fp32 moves twice its own bytes), else in its own dtype. The plan
    engine's strategies (`LayerView.gradient_bytes`) and the vectorized search's block weights
    (`planning.vector_weights.block_weights`) both size gradients here."""
    nbytes = grad.operand_bytes(grad.output.name, dims)
    if reduce_dtype is None:
        return nbytes
    from shardline.basics.dtypes import dtype_bits

    own = dtype_bits(grad.dtypes.get(grad.output.name, grad.dtype))
    return nbytes * dtype_bits(reduce_dtype) / own


@dataclass(frozen=True)
class StageView:
    """A pipeline stage as a strategy sees it: its last layer at local sizes, its index of
    `stages`, and whether the step trains."""

    last: Layer
    last_dims: Mapping[str, int]
    index: int
    stages: int
    training: bool


class Strategy:
    """The record every strategy fills in; the methods default to "adds nothing"."""

    name: str = ""  # key of Degrees, JSON, the mesh axis and plan()'s keyword (`tp=2`)
    word: str = ""  # the CLI flag: --WORD N
    help: str = ""  # the CLI help text of --WORD
    knobs: tuple[
        Knob, ...
    ] = ()  # its execution flags (fields of shardline.basics.options.Execution)
    splits: tuple[str, ...] = ()  # logical axes: LOGICAL_AXES, "tensor" or "layers"
    mesh_rank: float = 0  # position on the device mesh, 0 = innermost (fastest varying)
    tier: str = ""  # which network it rides, in words
    comm_where: str = ""  # where its communication runs, for the plan's text ("critical path")
    # where one kind of its collectives runs instead, when that kind runs elsewhere
    comm_where_by_kind: Mapping[str, str] = MappingProxyType({})
    memory: MemorySplit = MemorySplit("replicated", "replicated", "replicated", "dims", "dims")
    # True for a strategy that applies to some workloads only (ep: mixture-of-experts) or only
    # when asked (cp): the plan table shows its column only when a plan uses it, and a layout is
    # whole without its flag
    optional: bool = False
    searched: bool = True  # False: the free search leaves it at 1; only a given degree uses it
    serving: bool = False  # True: a serving replica is split by it (shardline.serving)

    def valid(self, workload: Workload, degree: int) -> bool:
        """Can this workload be split `degree` ways by this strategy (a degree the user fixed)?"""
        return True

    def bound(self, workload: Workload) -> int | None:
        """The largest degree that splits this workload (None: no limit of its own)."""
        return None

    def tries(self, workload: Workload, degree: int) -> bool:
        """Does the search try this degree when the user left it free? Default: every valid one;
        a strategy may ask more of a blind pick (tp: an even split of every layer)."""
        return self.valid(workload, degree)

    def serving_range(self, workload: Workload, max_devices: int) -> tuple[int, ...]:
        """The degrees the serving search tries for one replica (`serving` False: 1 only)."""
        return (1,)

    def search_range(self, workload: Workload, devices: int) -> tuple[int, ...]:
        """The degrees the search tries for this strategy out of `devices` (1 always among them):
        the divisors of `devices` up to `bound` that `tries` accepts."""
        bound = self.bound(workload)
        return tuple(
            d
            for d in divisors(devices)
            if d == 1 or (bound is None or d <= bound) and self.tries(workload, d)
        )

    def check(self, workload: Workload, degree: int) -> None:
        """Raise InputError, saying why, when a degree the user fixed cannot work."""

    def split_dims(
        self, layer: Layer, dims: dict[str, int], degree: int, batch_dim: str | None
    ) -> dict[str, int]:
        """The layer's sizes on one device after this strategy's split (uneven splits round up)."""
        return dims

    def layer_comm(self, view: LayerView, degree: int, net: Network) -> list[CommTerm]:
        """The communication this strategy adds for one layer, forward and backward."""
        return []

    def stage_comm(self, view: StageView, degree: int, net: Network) -> list[CommTerm]:
        """The communication this strategy adds at a pipeline stage's boundary."""
        return []

    def term(
        self,
        net: Network,
        kind: str,
        degree: int,
        calls: int,
        nbytes: float,
        step: int,
        *,
        critical: bool = False,
        once: bool = False,
    ) -> CommTerm:
        """One collective of this strategy's axis, line-rate and realistic: `step` 0 is the
        forward pass, 2 + i the i-th backward einsum (CommTerm.step)."""
        return CommTerm(
            self.name,
            kind,
            degree,
            calls,
            nbytes,
            net.time(kind, nbytes, self.name),
            once_per_step=once,
            critical=critical,
            phase="forward" if step == 0 else "backward",
            step=step,
            predicted_s=net.predicted(kind, nbytes, self.name),
        )
