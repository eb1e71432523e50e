"""Parallel plans: the bubble, the collectives of each strategy, memory per device, and one
published figure per strategy ("How to Scale Your Model", Part 5; Narayanan et al. 2021)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardline.errors import InputError
from shardline.io.workload_toml import load_workload
from shardline.planning.api import bubble_fraction, plan, sweep_batch
from shardline.workload.stack import stack
from shardline.workload.templates import ffn, transformer
from shardline.workload.workload import Workload, matmul_layer

ROOT = Path(__file__).resolve().parent.parent
SEED003 = ROOT / "examples" / "seed003_stack.toml"
A100_BF16 = 312e12
A100_NVLINK_EGRESS = 12 * 25e9  # 12 NVLink 3 links x 25 GB/s one-way (catalog a100-40gb)
A100_HOP_S = 1e-6
# TPU v5p (catalog tpu-v5p; the book's training chapter uses C = 4.6e14 and W = 2 x 9e10):
V5P_BF16 = 459e12
V5P_ICI_ONE_WAY = 9e10
V5P_HOP_S = 1e-6
BOOK_V5P_CRITICAL = 2550  # "our batch size per chip must be at least 2,550" (C / W_ici)


def test_bubble_fraction_formula() -> None:
    # GPipe (Huang et al. 2019): bubble (K-1)/(M+K-1) for K stages and M microbatches.
    assert bubble_fraction(1, 8) == 0
    assert bubble_fraction(4, 1) == pytest.approx(3 / 4)
    assert bubble_fraction(4, 16) == pytest.approx(3 / 19)
    assert bubble_fraction(8, 32) == pytest.approx(7 / 39)


def test_pipeline_latency_and_bubble_by_hand() -> None:
    # Seed 003 over 2 A100s, pipeline of 2 stages (18 blocks = 36 layers each), 4 microbatches of
    # 2,048 rows. One microbatch through a stage: 36 compute-bound layers plus one send of the
    # boundary activation z[2048, 8192] in bf16: V/W + alpha over the NVSwitch.
    m_rows, n, k, micro = 8192, 8192, 32768, 4
    ps = plan(load_workload(SEED003), "a100-40gb", 2, pp=2, microbatches=micro)
    p = ps.plans[0]
    b = m_rows // micro
    t_layers = 36 * 2 * b * n * k / A100_BF16
    send_bytes = 2 * b * n
    t_send = send_bytes / A100_NVLINK_EGRESS + A100_HOP_S
    t_stage = t_layers + t_send
    assert p.t_stage_s == pytest.approx(t_stage)
    assert p.latency_s == pytest.approx((micro + 2 - 1) * t_stage)
    assert p.bubble_fraction == pytest.approx((2 - 1) / (micro + 2 - 1))
    assert p.t_bubble_s == pytest.approx((2 - 1) * t_stage)
    # Narayanan et al. 2021 (Megatron-LM at scale, section 2.2.1): bubble time / ideal time
    # = (p - 1) / m.
    assert p.t_bubble_s / (p.latency_s - p.t_bubble_s) == pytest.approx((2 - 1) / micro)
    sends = next(c for c in p.comm if c.purpose == "pp")
    assert sends.calls == micro and sends.bytes == micro * send_bytes
    # each GPU holds half the weights
    assert p.memory.weights_bytes == 36 * n * k * 2


def test_seed003_tensor_parallel_all_reduces_by_hand() -> None:
    # Megatron: type 1 splits its output columns (k), type 2 contracts over the split k and
    # all-reduces z[m, n]: 36 all-reduces of 2*m*n bytes; on a switch 2(X-1)/X * V/W + 2 alpha.
    m_rows, n, k = 8192, 8192, 32768
    ps = plan(load_workload(SEED003), "a100-40gb", 2, tp=2)
    p = ps.plans[0]
    v = 2 * m_rows * n
    t_ar = 2 * (2 - 1) / 2 * v / A100_NVLINK_EGRESS + 2 * A100_HOP_S
    (tp_comm,) = p.comm
    assert (tp_comm.purpose, tp_comm.kind, tp_comm.calls) == ("tp", "all_reduce", 36)
    assert tp_comm.bytes == 36 * v and tp_comm.t_s == pytest.approx(36 * t_ar)
    t_compute = 72 * 2 * m_rows * n * (k // 2) / A100_BF16
    assert p.latency_s == pytest.approx(t_compute + 36 * t_ar)  # all-reduces on the critical path
    assert p.memory.weights_bytes == 72 * n * (k // 2) * 2
    assert p.memory.activations_bytes == 2 * (m_rows * n + m_rows * k // 2)


def test_unpaired_column_parallel_layers_all_gather_their_outputs() -> None:
    # Rows of a sheet are independent matmuls x[M,K] * w[K,N] -> y[M,N]: tensor parallelism splits
    # N (the larger), and with no row-parallel layer after it each output is all-gathered:
    # on the A100 switch (X-1)/X * V/W + alpha with V = 2*M*N.
    m, k, n = 4096, 4096, 16384
    w = Workload("rows", (matmul_layer("up", m, k, n, count=3),), batch_dim="M")
    p = plan(w, "a100-40gb", 2, tp=2).plans[0]
    (gather,) = p.comm
    v = 2 * m * n
    assert (gather.kind, gather.calls, gather.bytes) == ("all_gather", 3, 3 * v)
    assert gather.t_s == pytest.approx(3 * ((2 - 1) / 2 * v / A100_NVLINK_EGRESS + A100_HOP_S))
    assert p.latency_s == pytest.approx(3 * 2 * m * k * (n // 2) / A100_BF16 + gather.t_s)


def test_transformer_training_has_four_all_reduces_per_block() -> None:
    # docs/model.md section 6: two all-reduces of the activation per block forward (attention
    # output, FFN down projection), two backward (dX of the QKV and of the FFN input projections).
    layers, b, s, d = 4, 2, 256, 512
    w = transformer(
        d_model=d, d_ff=4 * d, heads=8, batch=b, seq_len=s, layers=layers, phase="training"
    )
    p = plan(w, "h100-sxm", 4, tp=4, microbatches=1).plans[0]
    (tp_comm,) = [c for c in p.comm if c.purpose == "tp"]
    assert tp_comm.calls == 4 * layers
    assert tp_comm.bytes == 4 * layers * 2 * b * s * d  # each on a bf16 [B, S, D] activation


@pytest.mark.parametrize("phase", ["decode", "prefill"])
def test_transformer_inference_has_two_all_reduces_per_block_and_no_gather(phase: str) -> None:
    # Megatron inference: the attention output and FFN down projections all-reduce [B, S, D]
    # (S = 1 in decode); nothing else moves. The scores p stay split by head into attn_values,
    # whose other input is the (head-split) V cache, so p is never all-gathered.
    layers, b, s, d, kv_heads, head_dim = 3, 4, 512, 1024, 4, 64
    w = transformer(
        d_model=d,
        d_ff=4 * d,
        heads=16,
        kv_heads=kv_heads,
        head_dim=head_dim,
        batch=b,
        seq_len=s,
        layers=layers,
        phase=phase,
    )
    p = plan(w, "h100-sxm", 4, tp=4).plans[0]
    q_len = 1 if phase == "decode" else s
    assert [(c.purpose, c.kind) for c in p.comm] == [("tp", "all_reduce")]
    (ar,) = p.comm
    assert ar.calls == 2 * layers and ar.bytes == 2 * layers * 2 * b * q_len * d
    # the KV cache, 2*L*n_kv*d_head*S*B*s_kv, split over the 4 kv heads' devices
    assert p.memory.kv_cache_bytes == 2 * layers * kv_heads * head_dim * s * b * 2 / 4


def test_fsdp_memory_and_traffic_by_hand() -> None:
    d, f, tokens, layers, x = 1024, 4096, 4096, 2, 8
    w = ffn(d_model=d, d_ff=f, batch=tokens, gated=False, layers=layers, phase="training")
    p = plan(w, "h100-sxm", x, fsdp=x, microbatches=1).plans[0]
    params = layers * 2 * d * f
    # ZeRO-3: weights, gradients and Adam state sharded 8 ways: 16 B per parameter / 8
    mem = p.memory
    assert mem.weights_bytes + mem.gradients_bytes + mem.optimizer_bytes == pytest.approx(
        16 * params / x
    )
    traffic = {c.kind: c for c in p.comm}
    # all-gather each weight before its forward and again before its dX matmul; reduce-scatter
    # each gradient: per layer 2 matrices x 2*D*F bytes
    assert traffic["all_gather"].calls == 2 * 2 * layers
    assert traffic["all_gather"].bytes == 2 * 2 * layers * 2 * d * f
    assert traffic["reduce_scatter"].bytes == 2 * layers * 2 * d * f


def _ffn_plan(
    chip: str, devices: int, *, d: int, f: int, tokens: int, phase: str, **degrees: int
) -> str:
    w = ffn(d_model=d, d_ff=f, batch=tokens, seq_len=1, gated=False, layers=1, phase=phase)
    return plan(w, chip, devices, microbatches=1, **degrees).plans[0].bottleneck


def test_data_parallel_critical_batch_matches_the_book() -> None:
    # "How to Scale Your Model", Part 5 (training), Data Parallelism: compute-bound when
    # B/X > C/W_ici = 2,550 tokens per chip on TPU v5p. Here, by hand, for X = 16 on one torus
    # axis (a bidirectional ring): the gradient all-reduce of the two matrices (2*D*F bytes each),
    # 2 * ((X-1)/X * V/(2W) + alpha*floor(X/2)), against the backward pass, 8*b*D*F/C.
    d, f, x = 8192, 32768, 16
    v = 2 * d * f
    t_comm = 2 * (2 * ((x - 1) / x * v / (2 * V5P_ICI_ONE_WAY) + V5P_HOP_S * (x // 2)))
    b_star = t_comm / (8 * d * f / V5P_BF16)
    assert b_star * x / (x - 1) == pytest.approx(BOOK_V5P_CRITICAL, rel=0.005)  # book drops (X-1)/X
    for frac, bound in ((0.97, "network"), (1.03, "compute")):
        tokens = int(frac * b_star) * x
        assert (
            _ffn_plan(
                "tpu-v5p", x, d=d, f=f, tokens=tokens, phase="training", dp=x, tp=1, pp=1, fsdp=1
            )
            == bound
        )


def test_fsdp_critical_batch_matches_the_book() -> None:
    # Same chapter, FSDP: "the same as data parallelism": B/X > C/W = 2,550 on TPU v5p. Forward:
    # all-gather each matrix, 2 * ((X-1)/X * V/(2W) + alpha*floor(X/2)) against 4*b*D*F/C.
    d, f, x = 8192, 32768, 16
    v = 2 * d * f
    t_comm = 2 * ((x - 1) / x * v / (2 * V5P_ICI_ONE_WAY) + V5P_HOP_S * (x // 2))
    b_star = t_comm / (4 * d * f / V5P_BF16)
    assert b_star * x / (x - 1) == pytest.approx(BOOK_V5P_CRITICAL, rel=0.005)
    for frac, bound in ((0.97, "network"), (1.03, "compute")):
        tokens = int(frac * b_star) * x
        assert (
            _ffn_plan(
                "tpu-v5p", x, d=d, f=f, tokens=tokens, phase="training", fsdp=x, tp=1, pp=1, dp=1
            )
            == bound
        )


def test_tensor_parallel_limit_matches_the_book() -> None:
    # Same chapter, Tensor Parallelism: communication-bound when Y > F / 2,550 on TPU v5p
    # (F > Y * C / W). Forward pass by hand for Y = 16 on a torus ring: one all-reduce of
    # Out[B, D] (V = 2*B*D), 2*((Y-1)/Y * V/(2W) + alpha*floor(Y/2)), against 4*B*D*F/(Y*C).
    d, tokens, y = 8192, 65536, 16
    v = 2 * tokens * d
    t_comm = 2 * ((y - 1) / y * v / (2 * V5P_ICI_ONE_WAY) + V5P_HOP_S * (y // 2))
    f_star = t_comm * y * V5P_BF16 / (4 * tokens * d)
    assert f_star * y / (y - 1) / y == pytest.approx(BOOK_V5P_CRITICAL, rel=0.005)
    for frac, bound in ((0.97, "network"), (1.03, "compute")):
        f = int(frac * f_star) // y * y
        assert _ffn_plan("tpu-v5p", y, d=d, f=f, tokens=tokens, phase="forward", tp=y) == bound


def test_plans_sorted_best_first_and_recommended() -> None:
    ps = plan(load_workload(SEED003), "a100-40gb", 2)
    names = [p.name for p in ps.plans]
    assert set(names) == {"dp2", "fsdp2", "tp2", "pp2"}
    assert all(p.fits for p in ps.plans)
    latencies = [p.latency_s for p in ps.plans]
    assert latencies == sorted(latencies)
    assert ps.recommended == names[0] and ps.recommended in ps.reason
    for p in ps.plans:
        assert p.degrees["tp"] * p.degrees["pp"] * p.degrees["dp"] * p.degrees["fsdp"] == 2


def test_plans_that_do_not_fit_come_last_and_a_workload_that_fits_nowhere() -> None:
    # 72 layers of 8192 x 32768 bf16 weights: 38.7 GB; training needs 16 B/param = 309 GB.
    w = load_workload(SEED003, phase="training")
    with pytest.raises(
        InputError,
        match=r"fits on no plan over 2 x a100-40gb: the smallest needs "
        r".* per device",
    ):
        plan(w, "a100-40gb", 2)
    ps = plan(w, "a100-40gb", 2, require_fit=False)
    assert ps.recommended is None and not any(p.fits for p in ps.plans)
    small = Workload("w", (matmul_layer("a", 64, 8192, 8192),), repeat=4, batch_dim="M")
    ps = plan(small, "a100-40gb", 4, objective="throughput")
    fits = [p.fits for p in ps.plans]
    assert fits == sorted(fits, reverse=True)


def test_bad_degrees_are_input_errors() -> None:
    w = load_workload(SEED003)
    with pytest.raises(InputError, match="tp=3 does not divide the 8 devices"):
        plan(w, "a100-40gb", 8, tp=3)
    with pytest.raises(InputError, match=r"pp=48 is more than the 36 blocks"):
        plan(w, "a100-40gb", 48, pp=48)
    # 36 blocks on 16 stages: uneven, divmod(36, 16) = (2, 4): 4 stages of 3 blocks, 12 of 2
    assert w.stage_blocks(16) == [3] * 4 + [2] * 12
    # 8 stages of 9 layers: the stages no longer all end on a type 2 layer
    eight = plan(w, "a100-40gb", 8, pp=8, microbatches=8).plans[0]
    assert eight.degrees["pp"] == 8 and eight.memory.weights_bytes == 9 * 8192 * 32768 * 2
    with pytest.raises(InputError, match="more than the batch"):
        plan(w, "a100-40gb", 2, microbatches=10_000)
    with pytest.raises(InputError, match="multiply to 16"):
        plan(w, "a100-40gb", 8, tp=4, pp=4)
    with pytest.raises(InputError, match="objective"):
        plan(w, "a100-40gb", 2, objective="cost")


def test_ffn_decode_wants_tensor_parallelism_at_low_batch_and_data_parallel_at_large() -> None:
    # Seed 000 follow-up. Decode reads every weight once per step: at a few tokens, splitting the
    # weights (tp) divides the bytes each device reads; data parallelism cannot split 1 token and
    # re-reads all weights on every device. At large batch both are compute-bound and data
    # parallelism has no all-reduce on the critical path.
    w = ffn(d_model=8192, d_ff=28672, batch=1, seq_len=1, layers=1, phase="decode")
    sweep = sweep_batch(w, "h100-sxm", 8, [1, 16, 65536])
    by_batch = {p.batch: p.recommended for p in sweep.points}
    assert by_batch[1] == "tp8" and by_batch[16] == "tp8" and by_batch[65536] == "dp8"
    assert sweep.crossovers and sweep.crossovers[0].from_plan == "tp8"
    first = sweep.crossovers[0].batch
    assert plan(w.with_batch(first - 1), "h100-sxm", 8).recommended == "tp8"
    assert plan(w.with_batch(first), "h100-sxm", 8).recommended != "tp8"


@settings(max_examples=20, deadline=None)
@given(
    tp=st.sampled_from([1, 2, 4]),
    dp=st.sampled_from([1, 2, 4]),
    fsdp=st.sampled_from([1, 2]),
    m=st.sampled_from([64, 256, 1024]),
    k=st.sampled_from([512, 2048]),
    n=st.sampled_from([512, 4096]),
    training=st.booleans(),
)
def test_sharding_conserves_flops(
    tp: int, dp: int, fsdp: int, m: int, k: int, n: int, training: bool
) -> None:
    # Nothing is replicated when every split divides evenly: per-device compute time x devices
    # equals the single-device compute time.
    w = Workload(
        "w",
        (matmul_layer("a", m, k, n), matmul_layer("b", m, n, k)),
        repeat=2,
        batch_dim="M",
        phase="training" if training else "forward",
    )
    devices = tp * dp * fsdp
    single = stack(w, "h100-sxm").totals.t_compute_s
    p = plan(
        w, "h100-sxm", devices, tp=tp, dp=dp, fsdp=fsdp, pp=1, microbatches=1, require_fit=False
    ).plans[0]
    assert p.t_compute_s * devices == pytest.approx(single)


def test_recommended_by_the_prediction_and_one_throughput_convention_per_row() -> None:
    # issue 28 item 1: `plan examples/ffn_70b.toml --devices 8` recommended dp8 (predicted
    # 66.3 ms) over fsdp8 (61.1 ms) because it ranked by the lower bound (35 ms for both)
    w = load_workload(ROOT / "examples" / "ffn_70b.toml")
    ps = plan(w, "h100-sxm", 8)
    assert ps.objective == "predicted"
    fits = [p for p in ps.plans if p.fits]
    assert ps.recommended == min(fits, key=lambda p: p.predicted_s).name == "fsdp8"
    assert [p.predicted_s for p in fits] == sorted(p.predicted_s for p in fits)
    assert "lowest predicted time" in ps.reason and "lower bound" in ps.reason
    # one convention per row: throughput_per_s and tokens_per_s from the prediction,
    # throughput_bound_per_s from the lower bound (batch / latency, training: one flush per step)
    row = ps.to_dict()["plans"][0]
    assert row["throughput_per_s"] == pytest.approx(w.batch / row["predicted_s"], rel=1e-12)
    assert row["tokens_per_s"] == pytest.approx(
        row["throughput_per_s"] * w.tokens_per_item, rel=1e-12
    )
    assert row["throughput_bound_per_s"] == pytest.approx(w.batch / row["latency_s"], rel=1e-12)
    # the lower bound stays available as an objective
    assert plan(w, "h100-sxm", 8, objective="latency").reason.startswith(
        "dp8 has the lowest latency bound"
    )
