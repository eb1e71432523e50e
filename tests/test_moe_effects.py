"""The expert-parallel effects behind the MoE end-to-end rows (docs/moe.md, "Accuracy"): the
pipeline send of a MoE block, the all-to-all overlapped with another microbatch's compute
(--ep-overlap) and the hierarchical dispatch across nodes (--ep-dispatch hierarchical). Every
value is derived by hand below."""

from __future__ import annotations

from math import prod

import pytest

from shardline.basics.options import Execution
from shardline.hardware import resolve_chip
from shardline.planning.api import plan
from shardline.planning.evaluate import Context
from shardline.planning.network import MeshNetwork
from shardline.strategies import Degrees
from shardline.strategies.ep_dispatch import hierarchical_a2a_s, remote_nodes, scale_out_share
from shardline.workload.moe import boundary_layer
from shardline.workload.templates import transformer

D, S = 512, 256  # a small MoE: 8 blocks, 16 experts of width 256, top-2, no shared expert
SMALL = dict(d_model=D, d_ff=1024, heads=8, kv_heads=8, layers=8, seq_len=S, vocab=None)
MOE = {"experts": 16, "experts_per_token": 2, "expert_d_ff": 256}


def _small(batch: int = 16, **moe: object):  # type: ignore[no-untyped-def]
    return transformer(batch=batch, moe=MOE | moe, **SMALL)


def test_remote_nodes_and_the_scale_out_share() -> None:
    # DeepSeek-V3 on 4 nodes: 256 experts, 64 per node, top-8. A node holds none of a token's
    # experts with probability C(192, 8) / C(256, 8) = prod over i < 8 of (192 - i) / (256 - i)
    miss = prod((192 - i) / (256 - i) for i in range(8))
    assert miss == pytest.approx(0.0964, abs=1e-4)
    r = 3 * (1 - miss)  # the 3 remote nodes, each hit with probability 1 - miss
    assert remote_nodes(256, 8, 4) == pytest.approx(r)
    # the plain all-to-all sends 8 x 3/4 = 6 copies of a token off the node
    assert scale_out_share(256, 8, 4) == pytest.approx(r / 6)
    # Qwen3-30B-A3B on 2 nodes (128 experts, top-8): almost every token needs the other node
    # once, against 8 x 1/2 = 4 copies
    miss2 = prod((64 - i) / (128 - i) for i in range(8))
    assert scale_out_share(128, 8, 2) == pytest.approx((1 - miss2) / 4)
    # top-1 gains nothing: one copy either way; one node: no scale-out at all
    assert scale_out_share(64, 1, 8) == pytest.approx(1.0)
    assert scale_out_share(64, 8, 1) == 1.0


def test_hierarchical_all_to_all_takes_the_slower_phase() -> None:
    """ep 16 over two 8-GPU H100 nodes: the plain all-to-all's phases move V x 8/16 (NVLink)
    and V x 2/16 (InfiniBand) and overlap; the hierarchical one scales the second by the share."""
    chip = resolve_chip("h100-sxm")
    net = MeshNetwork(chip, {"ep": 16})
    axis = net.axis_network("ep")
    assert axis is not None and [s.devices for s in axis.stages if s.devices > 1] == [8, 2]
    v = 16 * 64e6  # each GPU holds 64 MB of routed tokens
    plain, _ = hierarchical_a2a_s(axis, v, chip, 1.0) or (0.0, 0.0)
    assert plain == pytest.approx(net.time("all_to_all", v, "ep"), rel=0.02)
    quarter, _ = hierarchical_a2a_s(axis, v, chip, 0.25) or (0.0, 0.0)
    out_stage = next(s for s in axis.stages if s.scale_out)
    # the InfiniBand phase dominates: each GPU sends 1/2 of 64 MB x 0.25 at its NIC's rate
    assert quarter == pytest.approx(0.5 * 64e6 * 0.25 / out_stage.bytes_per_s, rel=0.05)


def test_a_pipeline_stage_ending_in_experts_sends_the_hidden_state() -> None:
    w = _small()
    assert w.layers[-1].name == "expert_down"  # its output: the k routed copies, y[B,X,C,D]
    assert boundary_layer(w.layers, w.layers[-1]).name == "attn_out"  # y[B,S,D]
    # pp 2, 8 microbatches of 2 sequences: each stage sends one microbatch's hidden state
    # forward (or its gradient back), 2 x 256 x 512 x 2 bytes (bf16), once per microbatch
    result = plan(w, "h100-sxm", 2, pp=2, microbatches=8, require_fit=False)
    p = result.plans[0]
    sends = [c for c in p.comm if c.purpose == "pp"]
    assert sends and sends[0].bytes / sends[0].calls == 2 * S * D * 2
    shared = _small(shared_experts=1)
    assert boundary_layer(shared.layers, shared.layers[-1]).name == "shared_down"


def _a2a_s(w, ex: Execution, deg: Degrees, m: int) -> float:  # type: ignore[no-untyped-def]
    """The realistic seconds of one stage's expert-parallel all-to-alls for one microbatch."""
    ctx = Context(w, resolve_chip("h100-sxm"), ex)
    layers, last = ctx.stages(1)[0]
    stage = ctx.stage(deg, m, 0, layers, last)
    return sum(
        float(t.cost.predicted_s) for t in stage.terms if t.purpose == "ep" and not t.once_per_step
    )


def test_ep_overlap_takes_the_all_to_alls_off_the_critical_path() -> None:
    """exposed = critical + max(0, overlapped - compute) per phase: moving the all-to-alls off
    the critical path removes them from the exposed time while the compute is longer."""
    # a batch whose compute outlasts the all-to-alls (NCCL's p2p all-to-all costs ~12 us and
    # the p2p chunk ramp at these sizes, so a smaller batch would leave some of them exposed)
    w = _small(batch=1024)
    deg, m = Degrees(ep=8), 4
    a2a = _a2a_s(w, Execution(), deg, m)
    assert a2a > 0
    base = plan(w, "h100-sxm", 8, ep=8, microbatches=m).plans[0]
    over = plan(w, "h100-sxm", 8, ep=8, microbatches=m, ep_overlap=True).plans[0]
    gained = (
        base.predicted_breakdown_s["exposed_comm_s"] - over.predicted_breakdown_s["exposed_comm_s"]
    )
    # Megatron-Core's combined 1F1B runs the first forward and the last backward alone
    # (step.ep_unpaired_passes): one microbatch's all-to-alls stay exposed, m - 1 are hidden
    assert gained == pytest.approx((m - 1) * a2a, rel=1e-6)
    assert over.predicted_s == pytest.approx(base.predicted_s - (m - 1) * a2a, rel=1e-6)


def test_bad_ep_dispatch_is_an_input_error() -> None:
    from shardline.errors import InputError

    with pytest.raises(InputError, match="ep_dispatch must be one of all-to-all, hierarchical"):
        Execution(ep_dispatch="deepep")
