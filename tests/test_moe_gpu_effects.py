"""The GPU-side MoE effects of docs/moe.md ("Accuracy"): the SMs the expert-parallel dispatch
holds beside overlapped compute, and the distributed optimizer's sharding of the dense weights'
state over the expert-parallel ranks. Every value is derived by hand below."""

from __future__ import annotations

import pytest

from shardline.basics.options import Execution
from shardline.errors import InputError
from shardline.hardware import resolve_chip
from shardline.ops.cost import Cost
from shardline.planning.evaluate import Context
from shardline.planning.memory import dense_optimizer_bytes
from shardline.planning.phases import Phase
from shardline.strategies import CommTerm, Degrees, device_share
from shardline.workload.dense_first import stack_layers
from shardline.workload.templates import transformer

D, S = 512, 256  # a small MoE: 8 blocks, 16 experts of width 256, top-2, no shared expert
SMALL = dict(d_model=D, d_ff=1024, heads=8, kv_heads=8, layers=8, seq_len=S, vocab=None)
MOE = {"experts": 16, "experts_per_token": 2, "expert_d_ff": 256}


def _term(seconds: float, share: float) -> CommTerm:
    return CommTerm("ep", "all_to_all", 8, 1, 1e6, seconds, predicted_s=seconds, sm_share=share)


def test_dispatch_sms_slow_the_compute_beside_it() -> None:
    # W = 10 ms of compute beside an A = 4 ms all-to-all holding r = 32 of 148 SMs: for 4 ms
    # the compute runs on 116 / 148 of the chip, so the phase takes W + A r = 10 + 4 x 32/148 ms
    r = 32 / 148
    ph = Phase()
    ph.add_predicted("gemm", 10e-3)
    ph.add_comm(_term(4e-3, r))
    assert ph.contention_s == pytest.approx(4e-3 * r)
    assert ph.exposed_comm_pred_s == pytest.approx(4e-3 * 32 / 148)  # 0.865 ms
    assert ph.predicted_s == pytest.approx(10e-3 + 0.8649e-3, rel=1e-4)
    # W = 1 ms: the compute ends inside the all-to-all (W < A (1 - r) = 3.14 ms): the phase is A
    short = Phase()
    short.add_predicted("gemm", 1e-3)
    short.add_comm(_term(4e-3, r))
    assert short.predicted_s == pytest.approx(4e-3)
    # no SMs held: the old rule, max(W, A)
    free = Phase()
    free.add_predicted("gemm", 10e-3)
    free.add_comm(_term(4e-3, 0.0))
    assert free.predicted_s == pytest.approx(10e-3)
    assert isinstance(free.overlapped, Cost)


def test_overlapped_all_to_all_gets_the_recipes_sm_share() -> None:
    # H100 SXM: 132 SMs; DeepEP's 20 of them: share 20 / 132 on each overlapped all-to-all
    w = transformer(batch=64, moe=MOE, **SMALL)
    ex = Execution(ep_overlap=True, ep_comm_sms=20)
    ctx = Context(w, resolve_chip("h100-sxm"), ex)
    layers, last = ctx.stages(1)[0]
    stage = ctx.stage(Degrees(ep=8), 4, 0, layers, last)
    a2a = [t for t in stage.terms if t.purpose == "ep" and t.kind == "all_to_all"]
    assert a2a and all(t.sm_share == pytest.approx(20 / 132) for t in a2a)
    lost = sum(t.calls * t.t_pred_s for t in a2a if t.phase == "forward") * 20 / 132
    assert stage.fwd.contention_s == pytest.approx(lost)
    # without the overlap the all-to-all is on the critical path and holds no compute's SMs
    plain = Context(w, resolve_chip("h100-sxm"), Execution(ep_comm_sms=20))
    st = plain.stage(Degrees(ep=8), 4, 0, *plain.stages(1)[0])
    assert st.fwd.contention_s == 0.0


def test_bad_ep_comm_sms_is_an_input_error() -> None:
    with pytest.raises(InputError, match="ep_comm_sms must be a whole number >= 0"):
        Execution(ep_comm_sms=-1)


def test_dense_optimizer_state_is_sharded_over_ep_under_zero() -> None:
    # Per block the dense weights are attention's q, k, v, o (4 D^2 with 8 heads of 64 and
    # 8 kv heads) and the router (D x 16); Adam in mixed precision keeps 12 bytes per parameter
    # (fp32 master, m, v), so 8 blocks hold 8 x (4 x 512^2 + 512 x 16) x 12 bytes.
    w = transformer(batch=64, moe=MOE, **SMALL)
    dense_params = 8 * (4 * D * D + D * 16)
    deg = Degrees(ep=4)
    share = device_share(w, deg, 1, zero=1)
    layers = stack_layers(w)
    assert dense_optimizer_bytes(layers, share) == pytest.approx(dense_params * 12)
    ctx0 = Context(w, resolve_chip("h100-sxm"), Execution(zero=0))
    ctx1 = Context(w, resolve_chip("h100-sxm"), Execution(zero=1))
    m0 = ctx0.memory(layers, deg, 1, 0)
    m1 = ctx1.memory(layers, deg, 1, 0)
    # dp = 1: ZeRO-1 shards nothing over dp, but the dense state is split over the 4 ep ranks
    # (Megatron-Core's dense data-parallel group holds them); the experts' stays (dp = 1)
    assert m0.optimizer_bytes - m1.optimizer_bytes == pytest.approx(dense_params * 12 * 3 / 4)


def _plan_s(*extra: str) -> float:
    from shardline.planning.api import plan

    w = transformer(batch=64, moe=MOE, **SMALL)
    opts = {"ep_overlap": True} | ({"ep_comm_sms": int(extra[0])} if extra else {})
    return float(plan(w, "h100-sxm", 8, ep=8, microbatches=4, **opts).plans[0].predicted_s)


def test_cli_ep_comm_sms(capsys: pytest.CaptureFixture[str]) -> None:
    from shardline.cli.main import main

    argv = ["plan", "--model", "mixtral-8x7b", "--hw", "h100-sxm", "--devices", "8", "--ep", "8"]
    argv += ["--batch", "8", "--phase", "prefill", "--ep-overlap", "--json"]
    assert main([*argv, "--ep-comm-sms", "20"]) == 0
    capsys.readouterr()
    assert main([*argv, "--ep-comm-sms", "x"]) == 2
    assert "--ep-comm-sms must be a whole number >= 0, got 'x'" in capsys.readouterr().err
    for bad in ("-1", "nan", "1.5"):  # one message for every kind of wrong
        assert main([*argv, "--ep-comm-sms", bad]) == 2
        assert "--ep-comm-sms must be a whole number >= 0" in capsys.readouterr().err
    # holding SMs never makes the step faster
    assert _plan_s("20") >= _plan_s()
