"""Option groups that many entry points share, so that no function needs a long parameter list.

- `Precision`: the dtypes of a multiply: one default for every operand, per-operand overrides,
  the dtype the math runs in and the dtype partial sums cross the network in.
- `RateOverrides`: the user's replacements for the chip's peak FLOP/s and HBM bandwidth (to
  reproduce a textbook's numbers exactly).

The network's options (`NetworkOptions`: topology words, link bandwidth, hop latency) live with
the collectives that read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = [
    "Precision",
    "RateOverrides",
    "DEFAULT_REDUCE_DTYPE",
    "Execution",
    "RECOMPUTE_MODES",
    "CP_KINDS",
    "EP_DISPATCHES",
    "FP8_RECIPES",
    "OPTIMIZER_STATE_BYTES",
    "MEMORY_CONVENTIONS",
    "offloaded",
]

# Partial sums cross the network in the accumulator dtype unless told (docs/sharding.md, s_acc).
DEFAULT_REDUCE_DTYPE = "fp32"


@dataclass(frozen=True)
class Precision:
    """Dtypes by name ("bf16", "fp8", "int8", ...); None means "the chip's default"."""

    dtype: str | None = None  # every operand unless overridden
    operands: Mapping[str, str | None] = field(default_factory=dict)  # operand name -> dtype
    compute: str | None = None  # the dtype the multiply runs in (its peak FLOP/s)
    reduce: str = DEFAULT_REDUCE_DTYPE  # partial sums sent over the network

    def of(self, operand: str) -> str | None:
        """The dtype of one operand: its override, else the default."""
        return self.operands.get(operand) or self.dtype


@dataclass(frozen=True)
class RateOverrides:
    """Peak FLOP/s (for the compute dtype) and HBM bytes/s that replace the chip file's."""

    flops_per_s: float | None = None
    mem_bytes_per_s: float | None = None


# Megatron-LM's three recompute settings: the training search's candidates unless --recompute
# pins another policy (every policy: shardline.basics.recompute, recompute.toml)
RECOMPUTE_MODES = ("none", "selective", "full")
# context parallelism's K/V exchange (shardline.strategies.cp)
CP_KINDS = ("ring", "all-gather")
# the expert-parallel dispatch across nodes (shardline.strategies.ep_dispatch)
EP_DISPATCHES = ("all-to-all", "hierarchical", "hybridep")
# Transformer Engine's fp8 scaling recipes (transformer_engine/common/recipe/__init__.py:
# DelayedScaling, Float8CurrentScaling, MXFP8BlockScaling, Float8BlockScaling); "delayed" is
# its and Megatron-LM's default (--fp8-recipe delayed)
FP8_RECIPES = ("delayed", "current", "mxfp8", "blockwise")
# How the memory-bound ops between the matmuls run (shardline.realistic.block): "fused" as
# Megatron-LM's and Transformer Engine's fused kernels, torch.compile's generated kernels or XLA's
# fusions run them (one kernel per op, reading and writing HBM once); "eager" as PyTorch runs a
# model's reference code op by op (each tensor op its own kernel and HBM round trip).
OP_FUSIONS = ("fused", "eager")
# Optimizer state per parameter beyond the weights and gradients, as (bytes of moments, whether
# an fp32 master copy is kept for weights stored narrower than fp32) (ZeRO, Rajbhandari et al.
# 2020, section 3.1: mixed-precision Adam keeps an fp32 master copy and two fp32 moments, 12 B):
# "adam-bf16" keeps the two moments in bf16 and no master copy; "sgd" is momentum SGD (one fp32
# moment); "adafactor" keeps factored second moments, about 0 B per parameter of a large matrix;
# "sgd-plain" keeps nothing.
OPTIMIZER_STATE_BYTES: dict[str, tuple[float, bool]] = {
    "adam": (8.0, True),
    "adam-bf16": (4.0, False),
    "sgd": (4.0, True),
    "adafactor": (0.0, True),
    # Adam's two fp32 moments beside bf16 weights with no fp32 master copy (the 10 B per
    # parameter of `memory_convention` 10)
    "adam-no-master": (8.0, False),
    # plain SGD, the weights updated in their own dtype: no state at all. optax.sgd without
    # momentum (its default, momentum=None) keeps no state, and MaxText's opt_type "sgd" is
    # optax.sgd(learning_rate_schedule) (AI-Hypercomputer/maxtext MaxText/optimizers.py
    # get_optimizer, commit 3662540e); with weight_dtype bfloat16 there is no fp32 copy
    "sgd-plain": (0.0, False),
}
# Training memory per parameter: 16 B (bf16 weights 2 + bf16 gradients 2 + fp32 master 4 + fp32
# Adam moments 8: mixed-precision Adam, Megatron-LM and ZeRO's accounting) or 10 B (bf16 weights
# 2 + fp32 Adam moments 8, no master copy and no gradient buffer held: "How to Scale Your Model"'s
# count, gradients applied as they are produced)
MEMORY_CONVENTIONS = (16, 10)
FP32_MASTER_BYTES = 4.0


@dataclass(frozen=True)
class Execution:
    """How a plan runs, beyond its degrees (the choices of Megatron-LM and its peers).

    `interleave`: V model chunks per pipeline stage (interleaved 1F1B; 1 = plain 1F1B);
    `recompute`: a recompute policy (shardline.basics.recompute, recompute.toml): "none",
    "selective" (the attention core is recomputed in the backward pass), "full" (every layer's
    forward is run again; Korthikanti et al. 2022), torchtitan's "op" and "layer-N", MaxText's
    remat policies ("minimal", "save_dot_except_mlp", ...) or "keep:T1,T2,..."; `sequence_parallel`:
    tensor parallelism with reduce-scatter + all-gather and the norms and dropouts split too;
    `tp_overlap`: tensor-parallel collectives hidden behind the GEMMs; `zero`: ZeRO stage of the
    data-parallel axis (1 optimizer state, 2 + gradients, 3 + weights sharded over dp);
    `overlap_param_gather`: with ZeRO >= 1 the updated parameters are all-gathered over dp
    after the optimizer step, so never behind the backward pass: True overlaps that all-gather
    with the next step's first forward pass (Megatron-Core's --overlap-param-gather), False
    waits for it; `overlap_grad_reduce`: the once-per-step data-parallel gradient reduction
    runs behind the last backward pass (Megatron-Core's --overlap-grad-reduce, PyTorch DDP's
    buckets): True hides all of it but the last bucket and what outlasts the backward pass,
    False waits for all of it after the backward pass (planning.combine.exposed_gradient_s
    with no backward pass to hide behind);
    `optimizer`: a name of OPTIMIZER_STATE_BYTES or bytes of state per parameter; `cuda_graphs`:
    kernels replayed from a CUDA graph (no per-kernel launch overhead); `tokens`: tokens to train
    on, for the days-to-train answer; `ep_overlap`: the expert-parallel all-to-alls run beside
    the compute of another microbatch (Megatron-Core's overlap_moe_expert_parallel_comm, the
    DualPipe idea of DeepSeek-V3) instead of on the critical path; `ep_dispatch`: "all-to-all"
    (one collective), "hierarchical" (one copy of a token per destination node across the
    scale-out network: DeepEP, HybridEP; shardline.strategies.ep_dispatch) or "hybridep" (the
    hierarchical dispatch with HybridEP's routing-map all-gather before each MoE layer's
    dispatch); `grad_reduce_dtype`:
    the dtype the weight gradients travel in over the data-parallel axes (None: the gradients'
    own dtype; "fp32" as Megatron-LM's grad_reduce_in_fp32 and accumulate_allreduce_grads_in_fp32
    do, twice a bf16 gradient's bytes); `ep_comm_sms`: SMs the expert-parallel dispatch and
    combine kernels hold while they run (HybridEP's and DeepEP's num_sms): with `ep_overlap` the
    compute beside them runs on the rest of the chip's SMs (0: none held); `framework`: the
    training framework whose defaults filled the fields the run left out
    (shardline.basics.framework; "megatron", whose defaults are these); `attention_kernel`:
    the fused attention kernel ("fa2", "cudnn", "fa3") whose measured efficiencies the chip
    file gives (`achievable.attention_kernels`); None: in training the default framework's
    (Megatron-Core runs cuDNN's through Transformer Engine), otherwise the chip's generic
    figures; `op_fusion`: "fused" or "eager" (OP_FUSIONS): how the memory-bound ops between the
    matmuls run; `offload`: tensors of a block (shardline.basics.recompute.TENSORS) the recompute
    policy keeps, held in host memory between the forward and the backward pass instead of the
    device's (MaxText's remat_policy 'custom' with the tensor set to 'offload': JAX's
    save_and_offload_only_these_names to pinned_host): they leave the device's memory; their
    copies over the host link are taken as hidden behind the compute, not priced;
    `fp8_recipe`: Transformer Engine's fp8 scaling recipe (FP8_RECIPES) of an 8-bit training
    run; it sets how many kernels quantize each local expert's GEMM inputs in an eager MoE layer
    (shardline.realistic.block.quantize_kernels), nothing else; `random_routing`: the router's
    logits are random (Megatron-Core's moe_router_force_load_balancing, the benchmarks'
    "force-balanced" routing): balanced only on average, so each MoE layer waits for the
    expert-parallel rank that drew the most tokens (shardline.workload.moe.random_routing_load)."""

    interleave: int = 1
    recompute: str = "none"
    sequence_parallel: bool = False
    tp_overlap: bool = False
    zero: int = 0
    optimizer: str | float = "adam"
    cuda_graphs: bool = False
    tokens: float | None = None
    cp_kind: str = "ring"
    ep_overlap: bool = False
    ep_dispatch: str = "all-to-all"
    grad_reduce_dtype: str | None = None
    ep_comm_sms: int = 0
    framework: str = "megatron"
    attention_kernel: str | None = None
    op_fusion: str = "fused"
    memory_convention: int = 16  # bytes per parameter of training state (MEMORY_CONVENTIONS)
    overlap_param_gather: bool = True
    overlap_grad_reduce: bool = True
    # block tensors the recompute policy keeps that are held in host memory, not the device's
    # (MaxText's remat_policy 'custom' with a tensor set to 'offload')
    offload: tuple[str, ...] = ()
    fp8_recipe: str = "delayed"
    random_routing: bool = False

    @property
    def gradients_held(self) -> bool:
        """Whether a full gradient buffer is held (not under the 10 B convention)."""
        return self.memory_convention != 10

    def __post_init__(self) -> None:
        from shardline.errors import InputError

        v = self.interleave
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise InputError(f"interleave must be a positive integer, got {v!r}")
        from shardline.basics.recompute import policy

        policy(self.recompute)  # InputError naming the policies if unknown
        n = self.ep_comm_sms
        if isinstance(n, bool) or not isinstance(n, int) or n < 0:
            raise InputError(f"ep_comm_sms must be a whole number >= 0, got {n!r}")
        from shardline.basics.framework import ATTENTION_KERNELS, load_framework
        from shardline.basics.units import short

        load_framework(self.framework)  # an unknown name: one error listing the known
        if self.attention_kernel is not None and self.attention_kernel not in ATTENTION_KERNELS:
            raise InputError(
                f"attention_kernel must be one of {', '.join(ATTENTION_KERNELS)}, got "
                f"{short(self.attention_kernel)}"
            )
        if self.zero not in (0, 1, 2, 3):
            raise InputError(f"zero must be 0, 1, 2 or 3, got {self.zero!r}")
        if self.memory_convention not in MEMORY_CONVENTIONS:
            raise InputError(
                f"memory_convention must be 16 or 10 (bytes per parameter), got "
                f"{self.memory_convention!r}"
            )
        if self.memory_convention == 10 and self.optimizer not in ("adam", "adam-no-master"):
            raise InputError(
                "memory_convention 10 is bf16 weights + fp32 Adam moments: it takes the adam "
                f"optimizer, not {self.optimizer!r}"
            )
        self.state_bytes_per_param(16)  # validates the optimizer
        object.__setattr__(self, "offload", offloaded(self.offload))
        if self.ep_dispatch not in EP_DISPATCHES:
            raise InputError(
                f"ep_dispatch must be one of {', '.join(EP_DISPATCHES)}, got {self.ep_dispatch!r}"
            )
        if self.fp8_recipe not in FP8_RECIPES:
            raise InputError(
                f"fp8_recipe must be one of {', '.join(FP8_RECIPES)}, got {short(self.fp8_recipe)}"
            )
        if self.op_fusion not in OP_FUSIONS:
            raise InputError(
                f"op_fusion must be one of {', '.join(OP_FUSIONS)}, got {short(self.op_fusion)}"
            )
        if self.cp_kind not in CP_KINDS:
            raise InputError(f"cp_kind must be one of {', '.join(CP_KINDS)}, got {self.cp_kind!r}")
        if self.grad_reduce_dtype is not None:
            from shardline.basics.dtypes import canonical_dtype

            object.__setattr__(self, "grad_reduce_dtype", canonical_dtype(self.grad_reduce_dtype))
        t = self.tokens
        if t is not None and not (isinstance(t, int | float) and t > 0 and t < float("inf")):
            raise InputError(f"tokens must be a positive finite number, got {t!r}")

    @property
    def optimizer_state_bytes(self) -> float:
        """Bytes of optimizer state per bf16 parameter (beyond weights and gradients)."""
        return self.state_bytes_per_param(16)

    def state_bytes_per_param(self, weight_bits: int) -> float:
        """Optimizer state per parameter for weights of `weight_bits` bits: the moments, plus
        an fp32 master copy where the optimizer keeps one and the weights are narrower; a number
        given as the optimizer is the whole state per parameter."""
        from shardline.errors import InputError

        opt = "adam-no-master" if self.memory_convention == 10 else self.optimizer
        if isinstance(opt, str):
            if opt not in OPTIMIZER_STATE_BYTES:
                raise InputError(
                    f"optimizer must be one of {', '.join(OPTIMIZER_STATE_BYTES)} or bytes per "
                    f"parameter, got {opt!r}"
                )
            moments, master = OPTIMIZER_STATE_BYTES[opt]
            return moments + (FP32_MASTER_BYTES if master and weight_bits < 32 else 0.0)
        if isinstance(opt, bool) or not isinstance(opt, int | float) or not 0 <= opt < 1e6:
            raise InputError(f"optimizer bytes per parameter must be in [0, 1e6), got {opt!r}")
        return float(opt)


def offloaded(names: object) -> tuple[str, ...]:
    """`offload` checked: block tensors (a tuple, or one string "x,q,k,v"), in the block's
    order; InputError naming what is wrong. A tensor the recompute policy does not keep is not
    held anywhere: offloading it changes nothing."""
    from shardline.basics.recompute import TENSORS
    from shardline.basics.units import short
    from shardline.errors import InputError

    if isinstance(names, str):
        names = [n.strip() for n in names.split(",") if n.strip()]
    if not isinstance(names, list | tuple) or not all(isinstance(n, str) for n in names):
        raise InputError(f"offload must be block tensor names, got {short(names)}")
    unknown = [n for n in names if n not in TENSORS]
    if unknown:
        raise InputError(
            f"offload: unknown tensor {short(unknown[0])}; the block's tensors: "
            f"{', '.join(TENSORS)}"
        )
    return tuple(t for t in TENSORS if t in names)
