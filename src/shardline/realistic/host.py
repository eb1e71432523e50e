"""The host (CPU) side of an eager PyTorch training step: what the CPU spends dispatching a
transformer block's ops, and the time of a stage when that dispatch, not the GPU, sets the pace.

In eager PyTorch the CPU runs every op (Python, the PyTorch dispatcher, the Transformer Engine or
Megatron-Core wrapper, the CUDA launch) and the GPU runs the kernels asynchronously behind it. A
stretch of work between two device-to-host synchronisations takes

    t_segment = max(t_cpu, t_first + t_gpu)

(`segment_s`): the GPU cannot run faster than the CPU hands it kernels, the CPU cannot pass the
synchronisation before the GPU has caught up, and after the synchronisation the GPU's queue is
empty, so it idles while the CPU dispatches the first op (`t_first`, one op's dispatch). Without
synchronisations the CPU runs ahead across phases and microbatches, and only the totals meet:
max(sum t_cpu, sum t_gpu).

Dropless MoE token dispatchers synchronise once per MoE layer forward: the per-expert token
counts go to the host to size the all-to-all and the grouped GEMM (NVIDIA/Megatron-LM
megatron/core/transformer/moe/token_dispatcher.py: the all-to-all dispatcher's
`_maybe_dtoh_and_synchronize` copies `tokens_per_expert` and the split sizes to the host and waits
on `self.d2h_event.synchronize()` at the "before_ep_alltoall" point; the flex dispatcher's HybridEP
backend passes `non_blocking = num_permuted_tokens is not None`, so a dropless run without a static
bound waits for the counts in pinned memory (fused_a2a.py), and DeepEP's `buffer.dispatch` makes
"the CPU wait for GPU's signal" and returns `num_recv_tokens_per_expert_list`; in fp8,
experts.py's TEGroupedMLP calls `tokens_per_expert.tolist()` for its padding). The backward pass
reuses the host-side split sizes and does not synchronise. `--moe-pad-expert-input-to-capacity`
(drop and pad: the sizes are static), HybridEP with `moe_expert_rank_capacity_factor` and
full-iteration CUDA graphs remove the synchronisation; CUDA graphs also remove the dispatch of the
captured ops (a block under a full-iteration graph has no dispatch time: cpu_s = 0). Source
read at NVIDIA/Megatron-LM commit d98e8a64 (2026-08-22).

The op counts (`OpCount`) are one entry per framework call in Megatron-Core's transformer layer
(the Transformer Engine layer spec), read from megatron/core/transformer: a Transformer Engine
module call (fused norm + linear, attention, grouped linear) is priced as one TE module, every
other call that launches kernels (rotary embedding, bias-dropout-add, router, top-k, aux loss,
dispatch, activation, combine) as one op, and the grouped GEMMs' per-expert kernels, which TE
launches in a C++ loop, at the driver's launch cost each. The backward pass runs one autograd
node per forward call and two GEMMs (data and weight gradients) per forward GEMM.
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = [
    "GRACE",
    "X86",
    "HostCpu",
    "OpCount",
    "attention_fwd",
    "backward",
    "dense_mlp_fwd",
    "host_cpu",
    "host_s",
    "moe_mlp_fwd",
    "segment_s",
    "stage_host_s",
]

# NVIDIA/TransformerEngine issue 2053 ("[PyTorch] High CPU overhead on Grace systems", 2025-08-11):
# CPU time of one Linear forward (bf16, hidden 2048, 8192 tokens), averaged over repeated calls.
_TE2053 = (
    "NVIDIA/TransformerEngine issue 2053, table of CPU runtime per Linear forward "
    "(bf16, 2048 hidden, 8192 tokens)"
)
TE_OVER_TORCH = 99.66 / 37.08  # a TE Linear over a torch.nn.Linear call, both on GB200's Grace


@dataclass(frozen=True)
class HostCpu:
    """A host CPU's dispatch cost: `op_s` one eager PyTorch call that launches one kernel
    (torch.nn.Linear forward: module call, dispatcher, cuBLAS launch), `te_module_s` one
    Transformer Engine module call."""

    name: str
    op_s: float
    te_module_s: float
    source: str


GRACE = HostCpu(
    "NVIDIA Grace (GB200)",
    37.08e-6,
    99.66e-6,
    f"{_TE2053}: GB200 torch 37.08 us, TE 99.66 us",
)
X86 = HostCpu(
    "x86 (Intel Xeon Platinum 8480C, DGX H100)",
    13.48e-6,
    13.48e-6 * TE_OVER_TORCH,
    f"{_TE2053}: H100 DGX (Xeon Platinum 8480C) torch 13.48 us; the TE module at GB200's measured "
    "TE / torch ratio 99.66 / 37.08 = 2.69 (the x86 TE figure is not in the published table)",
)
# GB200 superchip: two B200 GPUs and one Grace CPU (hardware/catalog/gb200.toml); DGX H100 and
# DGX B200 are Intel Xeon hosts (8480C in DGX H100, the machine the source measured)
_HOSTS = {"gb200": GRACE}


def host_cpu(chip_name: str) -> HostCpu:
    """The host CPU of a chip's systems: Grace for GB200, x86 (Xeon) for the rest."""
    return _HOSTS.get(chip_name, X86)


@dataclass(frozen=True)
class OpCount:
    """Framework calls of part of a block: Transformer Engine module calls, other kernel-launching
    calls, and kernels launched from C++ inside one call (the grouped GEMMs' per-expert GEMMs)."""

    te_modules: float = 0.0
    ops: float = 0.0
    launches: float = 0.0

    def __add__(self, other: OpCount) -> OpCount:
        return OpCount(
            self.te_modules + other.te_modules,
            self.ops + other.ops,
            self.launches + other.launches,
        )


def attention_fwd(qk_norm: bool = False) -> OpCount:
    """Self-attention half of a block, forward (transformer_layer.py, attention.py): fused norm +
    QKV linear, attention and output projection (3 TE modules); rotary embedding of q and of k and
    the bias-dropout-add (3 ops); with qk-norm (Qwen3) the norms of q and of k (2 ops)."""
    return OpCount(te_modules=3, ops=3 + (2 if qk_norm else 0))


def dense_mlp_fwd() -> OpCount:
    """Dense MLP half, forward (mlp.py): fused norm + fc1 and fc2 (2 TE modules); activation and
    bias-dropout-add (2 ops)."""
    return OpCount(te_modules=2, ops=2)


def moe_mlp_fwd(local_experts: int, aux_loss: bool = True, fp8: bool = False) -> OpCount:
    """MoE half, forward (moe_layer.py, router.py, moe_utils.py, token_dispatcher.py, experts.py):
    pre-MLP norm and the two grouped linears (3 TE modules); router gating linear and fused top-k
    (2 ops); with the load-balancing loss, fused aux scores, token counts and their all-reduce, the
    fused loss, the metrics record and the autoscaler (6 ops); dispatch preprocess (the flex
    dispatcher's two contiguous copies of the routing map and probabilities), dispatch and
    token-count sum (4 ops); in fp8, TEGroupedMLP's quantization padding of the tokens and of the
    probabilities and the unpadding (3 ops); activation with the routing probabilities (1 op);
    combine preprocess and combine (2 ops); bias-dropout-add (1 op); one GEMM per local expert in
    each grouped linear."""
    ops = 2 + (6 if aux_loss else 0) + 4 + (3 if fp8 else 0) + 1 + 2 + 1
    return OpCount(te_modules=3, ops=ops, launches=2 * local_experts)


def backward(fwd: OpCount) -> OpCount:
    """One autograd node per forward call; two GEMMs (data and weight gradients) per forward
    per-expert GEMM."""
    return OpCount(fwd.te_modules, fwd.ops, 2 * fwd.launches)


def host_s(count: OpCount, cpu: HostCpu, launch_s: float) -> float:
    """The CPU time of dispatching `count`: TE modules, ops, and C++ launches at `launch_s`."""
    return count.te_modules * cpu.te_module_s + count.ops * cpu.op_s + count.launches * launch_s


def segment_s(gpu_s: float, cpu_s: float, first_s: float) -> float:
    """Time of a stretch between two synchronisations: max(t_cpu, t_first + t_gpu)."""
    return max(cpu_s, first_s + gpu_s)


def stage_host_s(
    gpu_s: tuple[float, float],
    cpu_s: tuple[float, float],
    blocks: float,
    cpu: HostCpu,
    *,
    synced: bool,
) -> float:
    """One microbatch through a stage of `blocks` alike blocks, given one block's GPU time and
    CPU dispatch time, (forward, backward) each.

    synced (a dropless MoE dispatcher, one synchronisation per block forward): each block's
    forward is a segment, max(cpu_f, t_first + gpu_f), and the backward, free of synchronisations,
    max(blocks cpu_b, blocks gpu_b). Not synced: the CPU runs ahead over the whole microbatch,
    max(blocks (cpu_f + cpu_b), blocks (gpu_f + gpu_b)). Never less than the GPU time."""
    (gpu_f, gpu_b), (cpu_f, cpu_b) = gpu_s, cpu_s
    if not synced:
        return blocks * max(cpu_f + cpu_b, gpu_f + gpu_b)
    fwd = blocks * segment_s(gpu_f, cpu_f, cpu.op_s)
    return fwd + blocks * max(cpu_b, gpu_b)
