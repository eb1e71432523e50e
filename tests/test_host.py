"""shardline.realistic.host: the CPU's dispatch time of a block and the host-bound stage time.

Every expected value is worked out by hand here from the per-op costs of NVIDIA/TransformerEngine
issue 2053 (CPU time of one Linear forward: torch 37.08 us and TE 99.66 us on GB200's Grace, torch
13.48 us on DGX H100's Xeon Platinum 8480C) and the chip files' launch overhead (4 us).
"""

from __future__ import annotations

import pytest

from shardline.realistic import host

LAUNCH_S = 4e-6


def test_host_cpu_by_chip() -> None:
    assert host.host_cpu("gb200") is host.GRACE
    assert host.host_cpu("h100-sxm") is host.X86
    assert host.host_cpu("b200") is host.X86  # DGX B200: Xeon hosts
    assert host.GRACE.op_s == 37.08e-6 and host.GRACE.te_module_s == 99.66e-6
    # x86 TE module at Grace's measured TE / torch ratio: 13.48 x 99.66 / 37.08 = 36.23 us
    assert host.X86.te_module_s == pytest.approx(36.2306e-6, rel=1e-4)
    assert "2053" in host.GRACE.source and "2053" in host.X86.source


def test_moe_op_counts() -> None:
    # router 2 + aux loss 6 + dispatch 4 + activation 1 + combine 2 + bias-dropout-add 1 = 16
    assert host.moe_mlp_fwd(16) == host.OpCount(te_modules=3, ops=16, launches=32)
    assert host.moe_mlp_fwd(16, aux_loss=False).ops == 10
    assert host.moe_mlp_fwd(16, fp8=True).ops == 19  # + padding, probs padding, unpadding
    assert host.attention_fwd() + host.dense_mlp_fwd() == host.OpCount(5, 5, 0)
    assert host.attention_fwd(qk_norm=True).ops == 5
    # backward: one node per forward call, data and weight gradient GEMMs per expert GEMM
    assert host.backward(host.moe_mlp_fwd(4)) == host.OpCount(3, 16, 16)


def test_qwen3_30b_block_on_grace() -> None:
    """Qwen3-30B-A3B in fp8 over EP 8: 128 / 8 = 16 local experts. Forward: 6 TE modules, 5 + 19
    = 24 ops, 32 launches = 6 x 99.66 + 24 x 37.08 + 32 x 4 = 597.96 + 889.92 + 128 = 1615.88 us;
    backward 64 launches: 1615.88 + 128 = 1743.88 us."""
    fwd = host.attention_fwd(qk_norm=True) + host.moe_mlp_fwd(16, fp8=True)
    assert host.host_s(fwd, host.GRACE, LAUNCH_S) == pytest.approx(1615.88e-6)
    assert host.host_s(host.backward(fwd), host.GRACE, LAUNCH_S) == pytest.approx(1743.88e-6)


def test_dense_block_on_x86() -> None:
    """5 TE modules x 36.2306 + 5 ops x 13.48 = 181.15 + 67.40 = 248.55 us."""
    fwd = host.attention_fwd() + host.dense_mlp_fwd()
    assert host.host_s(fwd, host.X86, LAUNCH_S) == pytest.approx(248.553e-6, rel=1e-4)


def test_segment() -> None:
    # GPU-bound: the first op's dispatch, then the GPU's work: 37.08 us + 2 ms
    assert host.segment_s(2e-3, 1e-3, 37.08e-6) == pytest.approx(2.03708e-3)
    # host-bound: the CPU's dispatch
    assert host.segment_s(1e-3, 2e-3, 37.08e-6) == pytest.approx(2e-3)


def test_stage_synced_and_free() -> None:
    """2 blocks, GPU (3, 4) ms, CPU (1, 5) ms per block (forward, backward).
    Synced: 2 x max(1, 0.03708 + 3) + max(2 x 5, 2 x 4) = 6.07416 + 10 = 16.07416 ms.
    Free: the CPU runs ahead over the microbatch: 2 x max(1 + 5, 3 + 4) = 14 ms."""
    gpu, cpu = (3e-3, 4e-3), (1e-3, 5e-3)
    synced = host.stage_host_s(gpu, cpu, 2, host.GRACE, synced=True)
    assert synced == pytest.approx(16.07416e-3)
    assert host.stage_host_s(gpu, cpu, 2, host.GRACE, synced=False) == pytest.approx(14e-3)


def test_never_below_the_gpu() -> None:
    gpu, cpu = (3e-3, 4e-3), (0.0, 0.0)
    assert host.stage_host_s(gpu, cpu, 5, host.X86, synced=False) == pytest.approx(35e-3)
    assert host.stage_host_s(gpu, cpu, 5, host.X86, synced=True) >= 35e-3
