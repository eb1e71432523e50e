"""The closed vocabularies of shardline as `Literal` types, with the tuples of valid values.

A `Literal` is a plain `str` at run time, so JSON and text output stay exactly as they were; the
type checker catches a misspelt word. Each tuple is derived from its type (`typing.get_args`), so
the two cannot drift apart. Pure: no I/O.
"""

from __future__ import annotations

from typing import Literal, get_args

__all__ = [
    "Bound",
    "BOUNDS",
    "PredictedBound",
    "PREDICTED_BOUNDS",
    "Bottleneck",
    "BOTTLENECKS",
    "CollectiveKind",
    "COLLECTIVE_KINDS",
    "Topology",
    "TOPOLOGIES",
    "StageTopology",
    "STAGE_TOPOLOGIES",
    "ChipTopology",
    "CHIP_TOPOLOGIES",
    "Wraparound",
    "WRAPAROUNDS",
    "LayerPhase",
    "LAYER_PHASES",
    "Phase",
    "PHASES",
    "TemplatePhase",
    "TEMPLATE_PHASES",
    "ChipKind",
    "CHIP_KINDS",
    "CollectiveLibrary",
    "COLLECTIVE_LIBRARIES",
    "ScaleOutFabric",
    "SCALE_OUT_FABRICS",
    "HostCpu",
    "HOST_CPUS",
    "Kernel",
    "KERNELS",
]

# Which resource binds a piece of work: the largest of t_compute, t_memory, t_network.
Bound = Literal["compute", "memory", "network"]
BOUNDS: tuple[Bound, ...] = get_args(Bound)

# The realistic prediction's bound (`predict`): a fixed per-call overhead can outweigh the work.
PredictedBound = Literal["compute", "memory", "network", "overhead"]
PREDICTED_BOUNDS: tuple[PredictedBound, ...] = get_args(PredictedBound)

# What a plan's step time is mostly made of (`plan`): the pipeline bubble is its own column.
Bottleneck = Literal["compute", "memory", "network", "bubble"]
BOTTLENECKS: tuple[Bottleneck, ...] = get_args(Bottleneck)

# Collectives, in their canonical spelling (`collectives.canonical_kind` maps the aliases).
CollectiveKind = Literal["all_gather", "reduce_scatter", "all_reduce", "all_to_all", "send"]
COLLECTIVE_KINDS: tuple[CollectiveKind, ...] = get_args(CollectiveKind)

# The network of one mesh axis, as the user may name it (`collectives.canonical_topology`).
Topology = Literal["ring", "line", "unidirectional-ring", "switch", "torus", "hierarchical"]
TOPOLOGIES: tuple[Topology, ...] = get_args(Topology)

# One stage of a resolved network (a torus axis or a hierarchy is a sequence of these).
StageTopology = Literal["ring", "line", "unidirectional-ring", "switch"]
STAGE_TOPOLOGIES: tuple[StageTopology, ...] = get_args(StageTopology)

# A chip file's scale-up fabric (`interconnect.topology`).
ChipTopology = Literal["switch", "torus"]
CHIP_TOPOLOGIES: tuple[ChipTopology, ...] = get_args(ChipTopology)

# When a torus axis shorter than the full torus dimension still wraps around.
Wraparound = Literal["full-axis", "multiple-of-4"]
WRAPAROUNDS: tuple[Wraparound, ...] = get_args(Wraparound)

# One layer's pass.
LayerPhase = Literal["forward", "backward"]
LAYER_PHASES: tuple[LayerPhase, ...] = get_args(LayerPhase)

# What a layer stack is run for (`workload.PHASES`).
Phase = Literal["forward", "training"]
PHASES: tuple[Phase, ...] = get_args(Phase)

# What a transformer template is run for (`templates.TEMPLATE_PHASES`, in that order).
TemplatePhase = Literal["training", "prefill", "decode", "forward"]
TEMPLATE_PHASES: tuple[TemplatePhase, ...] = get_args(TemplatePhase)

# What a chip is.
ChipKind = Literal["gpu", "tpu", "cpu"]
CHIP_KINDS: tuple[ChipKind, ...] = get_args(ChipKind)

# The communication library that runs a chip's collectives (`collectives.library`): NCCL and RCCL
# price by their own tuning model; "xla" (TPU ICI) and "none" use the bus-efficiency curve.
CollectiveLibrary = Literal["nccl", "rccl", "xla", "none"]
COLLECTIVE_LIBRARIES: tuple[CollectiveLibrary, ...] = get_args(CollectiveLibrary)

# The network between nodes (`interconnect.scale_out.fabric`).
ScaleOutFabric = Literal["ib", "roce", "efa", "tcpx", "tcpxo", "dcn", "ethernet", "unknown"]
SCALE_OUT_FABRICS: tuple[ScaleOutFabric, ...] = get_args(ScaleOutFabric)

# The CPU vendor of a node (`scale_out.host_cpu`): NCCL and RCCL cap the LL protocol across nodes
# by it (src/graph/tuning.cc, llMaxBws: AMD hosts one row, every other host another).
HostCpu = Literal["intel", "amd", "arm"]
HOST_CPUS: tuple[HostCpu, ...] = get_args(HostCpu)

# The kernel a layer's einsum runs in (`Layer.kernel`): a GEMM of its own, or its share of one
# fused attention kernel.
Kernel = Literal["gemm", "attention"]
KERNELS: tuple[Kernel, ...] = get_args(Kernel)
