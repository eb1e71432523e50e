"""What a stage's MoE blocks run besides their einsums and memory-bound ops, for the realistic
time (shardline.planning.stage_extras adds them): Megatron-Core's router, dispatch-bookkeeping,
per-expert GEMM and per-expert quantization kernels (`moe_kernels_s`), and the busiest
expert-parallel rank's extra tokens under random routing (`random_routing_s`). docs/moe.md.
"""

from __future__ import annotations

from math import prod
from typing import Any, Protocol

from shardline.basics.dtypes import dtype_bits
from shardline.basics.options import Execution
from shardline.hardware import Chip
from shardline.ops.predict import kernel_overhead_s
from shardline.realistic.block import moe_layer_kernels
from shardline.strategies import Degrees
from shardline.workload.moe import (
    EXPERT_AXIS,
    ROUTED_EXPERT_LAYERS,
    SLOT_AXIS,
    random_routing_load,
)
from shardline.workload.workload import Layer, Workload


class Context(Protocol):
    """What the MoE extras read of a search's context (`shardline.planning.evaluate.Context`)."""

    workload: Workload
    chip: Chip
    execution: Execution

    def local(self, layer: Layer, deg: Degrees, m: int) -> dict[str, int]: ...

    def part(self, layer: Layer, n: int, deg: Degrees, m: int) -> Any: ...


__all__ = ["MOE_KERNEL_FRAMEWORKS", "moe_kernels_s", "random_routing_s"]

StageLayers = list[tuple[Layer, int]]


def random_routing_s(
    ctx: Context, layers: StageLayers, deg: Degrees, m: int
) -> tuple[float, float]:
    """Under random routing (`Execution.random_routing`) the expert einsums of one microbatch
    run the busiest expert-parallel rank's tokens, `random_routing_load` times the mean (each
    MoE layer's all-to-alls wait for it): (forward, backward) seconds beyond the mean's. The
    pairs a rank receives: its expert einsum's rows x slots x local experts."""
    model = ctx.workload.model
    if model is None or not ctx.execution.random_routing or not model.router_experts:
        return 0.0, 0.0
    fwd = bwd = 0.0
    ranks = deg.experts.get("ep", 1)
    for layer, n in layers:
        if layer.name not in ROUTED_EXPERT_LAYERS:
            continue
        dims = ctx.local(layer, deg.experts, m)
        rows = prod(dims[d] for d in layer.axis_dims("batch"))
        slots = prod(dims[d] for d in layer.axis_dims(SLOT_AXIS))
        pairs = rows * slots * prod(dims[d] for d in layer.axis_dims(EXPERT_AXIS))
        extra = random_routing_load(pairs, model.router_experts, model.expert_copies, ranks) - 1
        part = ctx.part(layer, n, deg, m)
        fwd += extra * sum(e.predicted_s for e in part.fwd)
        bwd += extra * sum(e.predicted_s for e in part.bwd)
    return fwd, bwd


MOE_KERNEL_FRAMEWORKS = ("megatron",)  # whose MoE layer realistic.block.moe_layer_kernels counts


def moe_kernels_s(
    ctx: Context, layers: StageLayers, deg: Degrees, m: int
) -> tuple[float, float, float]:
    """The MoE blocks' kernels that their einsums and ops leave out (realistic.block.
    moe_layer_kernels), seconds of one microbatch through `layers`: (the small kernels' in each
    pass, the extra per-expert GEMMs' and quantizations' forward, and backward). Each small or
    quantization kernel at the chip's per-kernel cost, each extra per-expert GEMM at a GEMM
    kernel's;
    the per-expert GEMMs only where the experts run eagerly (no full-iteration CUDA graph, which
    needs the single grouped GEMM). One MoE block per expert_down einsum; local experts from
    that einsum's X on the degrees the experts run on (parallel folding: Degrees.experts).
    Training only: `framework` names the training framework, and an inference step (prefill,
    decode) runs an inference engine's fused MoE, one grouped kernel over every local expert
    for each of the two projections with the routing and permutation fused around them
    (vLLM's fused_moe, model_executor/layers/fused_moe/fused_moe.py: `invoke_fused_moe_kernel`
    once per projection over all experts; TensorRT-LLM's CUTLASS fused MoE; the permutation is
    priced by the block's moe_permute and moe_unpermute ops), not Megatron-Core's layer."""
    model = ctx.workload.model
    ex = ctx.execution
    if model is None or not model.expert_copies or ex.framework not in MOE_KERNEL_FRAMEWORKS:
        return 0.0, 0.0, 0.0
    if not ctx.workload.training:
        return 0.0, 0.0, 0.0
    found = [(layer, n) for layer, n in layers if layer.name == "expert_down"]
    if not found:
        return 0.0, 0.0, 0.0
    layer = found[0][0]
    blocks = sum(n for _, n in found) / layer.count
    local = int(ctx.local(layer, deg.experts, m).get("X", 1))
    fp8 = dtype_bits(model.dtype) < 16
    training = ctx.workload.training
    k = moe_layer_kernels(
        local,
        fp8=fp8,
        per_expert_gemms=not ex.cuda_graphs,
        training=training,
        fp8_recipe=ex.fp8_recipe,
    )
    kernel = kernel_overhead_s(ctx.chip, cuda_graphs=ex.cuda_graphs)
    gemm = kernel_overhead_s(ctx.chip, cuda_graphs=ex.cuda_graphs, gemm=True)
    # each grouped linear's per-expert quantization runs with its GEMMs, in either pass
    fwd, bwd = k.gemms_fwd * gemm + k.quantize * kernel, k.gemms_bwd * gemm + k.quantize * kernel
    return blocks * k.small * kernel, blocks * fwd, blocks * bwd
