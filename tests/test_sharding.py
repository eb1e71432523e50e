"""The named-axis algebra: the four cases, output requests, residency, padding, conservation,
the seed's 1D strategies (docs/model.md section 5) and the book's K-sharding threshold."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardline.collectives import NetworkOptions
from shardline.errors import InputError
from shardline.hardware import load_chip
from shardline.sharding.algebra import ShardOptions, parse_mesh, shard_einsum, shard_matmul

H100 = load_chip("h100-sxm")  # P = 989.4e12 bf16, W_mem = 3.35e12, NVSwitch egress 450e9
P, W_MEM, W_NV, ALPHA = 989.4e12, 3.35e12, 450e9, 1e-6
M = K = N = 8192
DIMS = {"M": M, "K": K, "N": N}


def kinds(r):  # type: ignore[no-untyped-def]
    return [(c.kind, c.operand, c.axes) for c in r.collectives]


# --- the four cases ("How to Scale Your Model", sharding chapter) -----------------------------


def test_case_1_no_contracting_dim_sharded_needs_no_communication() -> None:
    r = shard_einsum("A[M_X,K] * B[K,N_Y] -> C[M_X,N_Y]", DIMS, "X=4,Y=2", H100)
    assert r.collectives == () and r.t_network_s == 0 and r.bound == "compute"
    assert r.per_device.flops == 2 * M * K * N // 8
    assert r.per_device.shapes == {"A": [M // 4, K], "B": [K, N // 2], "C": [M // 4, N // 2]}
    # bytes: s (M/4 K + K N/2 + M/4 N/2)
    assert r.per_device.bytes["total"] == 2 * (M // 4 * K + K * N // 2 + M // 4 * N // 2)


def test_case_2_gather_or_slice_whichever_is_cheaper() -> None:
    # A[M, K_X] . B[K, N]: all-gather A (V = 2MK, compute replicated) or slice B for free and
    # all-reduce the partial sums (V = 4MN fp32, SHARP: V/W). Square: the all-reduce wins.
    r = shard_einsum("A[M,K_X] * B[K,N] -> C[M,N]", DIMS, "X=8", H100)
    assert kinds(r) == [("all_reduce", "C", ("X",))]
    assert r.collectives[0].bytes == 4 * M * N
    assert r.t_network_s == pytest.approx(4 * M * N / W_NV + 2 * ALPHA)
    # a short K makes gathering A cheap: 7/8 * 2MK / W = 33 us < compute 2MKN/P = 139 us, while
    # the all-reduce would still move 4MN = 268 MB
    k = 1024
    g = shard_einsum("A[M,K_X] * B[K,N] -> C[M,N]", {"M": M, "K": k, "N": N}, "X=8", H100)
    assert kinds(g) == [("all_gather", "A", ("X",))]
    assert g.collectives[0].bytes == 2 * M * k
    assert g.per_device.flops == 2 * M * k * N  # the multiply is replicated
    assert g.bound == "compute" and g.t_s == pytest.approx(2 * M * k * N / P)
    assert {a["choice"]: a["chosen"] for a in g.alternatives} == {
        "X->replicated": True,
        "X->K": False,
    }


def test_case_3_all_reduce_or_reduce_scatter_from_the_output_spec() -> None:
    ar = shard_einsum("A[M,K_X] * B[K_X,N] -> C[M,N]", DIMS, "X=8", H100)
    rs = shard_einsum("A[M,K_X] * B[K_X,N] -> C[M,N_X]", DIMS, "X=8", H100)
    assert kinds(ar) == [("all_reduce", "C", ("X",))]
    assert kinds(rs) == [("reduce_scatter", "C", ("X",))]
    v = 4 * M * N  # fp32 partial sums of the whole C
    assert rs.collectives[0].bytes == v
    assert rs.t_network_s == pytest.approx(7 / 8 * v / W_NV + ALPHA)
    assert rs.per_device.shapes["C"] == [M, N]  # the local partial product is the whole C
    assert rs.per_device.flops == 2 * M * K * N // 8


def test_case_4_same_axis_on_two_different_dims() -> None:
    # A[M_X, K] . B[K, N_X]: gather one of them; B (K N = 16 MB at N = 1024) beats A (134 MB)
    n = 1024
    r = shard_einsum("A[M_X,K] * B[K,N_X] -> C[M_X,N]", {"M": M, "K": K, "N": n}, "X=8", H100)
    assert kinds(r) == [("all_gather", "B", ("X",))]
    assert r.collectives[0].bytes == 2 * K * n
    assert r.t_network_s == pytest.approx(7 / 8 * 2 * K * n / W_NV + ALPHA)
    wide = shard_einsum("A[M_X,K] * B[K,N_X] -> C[M,N_X]", {"M": 1024, "K": K, "N": N}, "X=8", H100)
    assert kinds(wide) == [("all_gather", "A", ("X",))]


def test_output_moves_with_all_to_all() -> None:
    # the multiply leaves C[M_X, N]; the output asks for C[M, N_X]: one all-to-all over X of the
    # whole C (V = 2MN), switch: (n-1)/n^2 V / W
    r = shard_einsum("A[M_X,K] * B[K,N] -> C[M,N_X]", DIMS, "X=8", H100)
    assert kinds(r) == [("all_to_all", "C", ("X",))]
    assert r.t_network_s == pytest.approx(7 / 64 * 2 * M * N / W_NV + ALPHA)


def test_output_gather_and_unreduced() -> None:
    r = shard_einsum("A[M_X,K] * B[K,N] -> C[M,N]", DIMS, "X=8", H100)
    assert kinds(r) == [("all_gather", "C", ("X",))] and r.collectives[0].bytes == 2 * M * N
    kept = shard_einsum(
        "A[M,K_XY] * B[K_XY,N] -> C[M,N]",
        DIMS,
        "X=4,Y=2",
        H100,
        options=ShardOptions(unreduced=("Y",)),
    )
    assert kinds(kept) == [("all_reduce", "C", ("X",))]  # Y's partial sums stay {U_Y}
    with pytest.raises(InputError, match="unreduced"):
        shard_einsum(
            "A[M,K_X] * B[K_X,N] -> C[M,N_X]",
            DIMS,
            "X=8",
            H100,
            options=ShardOptions(unreduced=("X",)),
        )


def test_output_only_axis_slices_the_inputs_for_free() -> None:
    r = shard_einsum("A[M,K] * B[K,N] -> C[M_X,N]", DIMS, "X=8", H100)
    assert r.collectives == () and r.per_device.flops == 2 * M * K * N // 8


def test_two_axis_reduce_scatter_runs_axis_by_axis() -> None:
    v5e = load_chip("tpu-v5e")
    seq = NetworkOptions(multi_axis="sequential")
    r = shard_einsum("A[M,K_XY] * B[K_XY,N] -> C[M,N_XY]", DIMS, "X=4,Y=16", v5e, network=seq)
    assert kinds(r) == [("reduce_scatter", "C", ("X", "Y"))]
    # Y (16, ring) is inner, X (4, line): slowest per byte first on the smaller array:
    # line on V/16, then the ring on V
    v = 4 * M * N
    expect = 3 / 4 * (v / 16) / 4.5e10 + 15 / 16 * v / (2 * 4.5e10) + (3 + 8) * 1e-6
    assert r.t_network_s == pytest.approx(expect, rel=1e-12)
    # by default both axes' links work at once: (N-1)/N x V / (W + 2W), same latencies
    both = shard_einsum("A[M,K_XY] * B[K_XY,N] -> C[M,N_XY]", DIMS, "X=4,Y=16", v5e)
    at_once = 63 / 64 * v / (3 * 4.5e10) + (3 + 8) * 1e-6
    assert both.t_network_s == pytest.approx(at_once, rel=1e-12)


# --- residency, padding, overlap --------------------------------------------------------------


def test_not_resident_weights_are_gathered_first() -> None:
    r = shard_einsum(
        "A[M_X,K] * B[K,N] -> C[M_X,N]",
        DIMS,
        "X=8",
        H100,
        options=ShardOptions(resident=frozenset({"A"})),
    )
    assert kinds(r) == [("all_gather", "B", ("X",))] and r.collectives[0].bytes == 2 * K * N
    # nothing resident: each input starts 1/8 per device and is gathered over the axes its
    # spec layout does not split: A[M_X, K] over Y (V = 2 M/4 K), B[K, N_Y] over X (V = 2 K N/2)
    none = shard_einsum(
        "A[M_X,K] * B[K,N_Y] -> C[M_X,N_Y]",
        DIMS,
        "X=4,Y=2",
        H100,
        options=ShardOptions(resident=frozenset()),
    )
    assert kinds(none) == [("all_gather", "A", ("Y",)), ("all_gather", "B", ("X",))]
    assert [c.bytes for c in none.collectives] == [2 * M // 4 * K, 2 * K * N // 2]
    assert none.t_network_s == pytest.approx(
        (1 / 2 * 2 * M // 4 * K + 3 / 4 * 2 * K * N // 2) / W_NV + 2 * ALPHA
    )


def test_padding_is_never_silent() -> None:
    dims = {"M": 1000, "K": 64, "N": 64}
    with pytest.raises(InputError, match="not divisible.*--pad to pad it to 1,002"):
        shard_einsum("A[M_X,K] * B[K,N] -> C[M_X,N]", dims, "X=3", H100)
    r = shard_einsum(
        "A[M_X,K] * B[K,N] -> C[M_X,N]", dims, "X=3", H100, options=ShardOptions(pad=True)
    )
    assert r.padded == {"M": [1000, 1002]} and r.per_device.shapes["A"] == [334, 64]


def test_overlap_rule() -> None:
    on = shard_matmul(M, K, N, 8, "k", H100)
    off = shard_matmul(M, K, N, 8, "k", H100, options=ShardOptions(overlap=False))
    tc, tm, tn = on.per_device.t_compute_s, on.per_device.t_memory_s, on.t_network_s
    assert on.t_s == max(tc, tm, tn) == on.t_lower_s
    assert off.t_s == pytest.approx(max(tc, tm) + tn)
    # docs/model.md section 5: t_lower_s (overlapped) = max of the three; t_upper_s is the serial
    # bound of every Cost, t_compute + t_memory + t_network, above the --no-overlap step.
    serial = tc + tm + tn
    assert on.t_lower_s <= off.t_s <= on.t_upper_s == off.t_upper_s == pytest.approx(serial)


# --- conservation -----------------------------------------------------------------------------


@settings(max_examples=40, deadline=None)
@given(
    x=st.sampled_from([1, 2, 4]),
    y=st.sampled_from([1, 2, 8]),
    spec=st.sampled_from(
        [
            "A[M_X,K_Y] * B[K_Y,N] -> C[M_X,N]",
            "A[M_X,K] * B[K,N_Y] -> C[M_X,N_Y]",
            "A[M,K_XY] * B[K_XY,N] -> C[M,N_XY]",
            "A[M_Y,K_X] * B[K_X,N] -> C[M_YX,N]",
        ]
    ),
    m=st.sampled_from([64, 192]),
    k=st.sampled_from([128, 512]),
    n=st.sampled_from([32, 256]),
)
def test_flops_are_conserved_when_nothing_is_replicated(
    x: int, y: int, spec: str, m: int, k: int, n: int
) -> None:
    r = shard_einsum(spec, {"M": m, "K": k, "N": n}, f"X={x},Y={y}", H100)
    assert r.per_device.flops * r.devices == r.total_flops == 2 * m * k * n
    assert r.t_lower_s <= r.t_s <= r.t_upper_s


# --- seed 000 Part 2: the three 1D strategies (docs/model.md section 5) ---------------


@pytest.mark.parametrize("d", [2, 8])
def test_seed_1d_strategies(d: int) -> None:
    s = 2
    along_m = shard_matmul(M, K, N, d, "m", H100)
    assert along_m.per_device.bytes["total"] == s * (M * K // d + K * N + M * N // d)
    assert along_m.collectives == ()
    along_n = shard_matmul(M, K, N, d, "n", H100)
    assert along_n.per_device.bytes["total"] == s * (M * K + K * N // d + M * N // d)
    along_k = shard_matmul(M, K, N, d, "k", H100)
    # the local C is the fp32 partial sums the reduce-scatter sums (s_acc = 4 B), not bf16
    # (issue 28: it was counted at 2 B while its partial sums travelled in fp32)
    s_acc = 4
    assert along_k.per_device.bytes["C"] == s_acc * M * N
    assert along_k.per_device.bytes["total"] == s * (M * K // d + K * N // d) + s_acc * M * N
    assert kinds(along_k) == [("reduce_scatter", "C", ("X",))]
    assert along_k.collectives[0].bytes == 4 * M * N  # s_acc = 4 (fp32 partial sums)
    whole = shard_matmul(M, K, N, d, "k", H100, output="replicated")
    assert kinds(whole) == [("all_reduce", "C", ("X",))]
    for r in (along_m, along_n, along_k):
        assert r.per_device.flops == 2 * M * K * N // d


def test_k_threshold_on_a_switch() -> None:
    # docs/model.md: on a switch, K-sharding with reduce-scatter is network-bound when
    # K < s_acc P (D-1) / (2W), independent of M and N; alpha adds alpha D P / (2 M N)
    d = 8
    r = shard_matmul(M, K, N, d, "k", H100)
    bandwidth_only, t = r.thresholds
    # first docs/model.md's bandwidth-only form, then the same with the per-hop latency
    assert bandwidth_only.name == "K_network_bound_below"
    assert bandwidth_only.formula == "K < s_fp32·P·(D-1)/(2·W)"
    assert bandwidth_only.value == pytest.approx(4 * P * (d - 1) / (2 * W_NV), rel=1e-12)
    expect = 4 * P * (d - 1) / (2 * W_NV) + ALPHA * d * P / (2 * M * N)
    assert t.name == "K_network_bound_below_with_latency"
    assert t.dim == "K" and t.value == pytest.approx(expect, rel=1e-12)
    assert t.formula.startswith("K < s_fp32·P·(D-1)/(2·W)")
    assert t.network_bound and r.bound == "network"
    above = shard_matmul(M, 32768, N, d, "k", H100)  # K above the threshold: compute-bound
    assert above.bound == "compute"
    # the same threshold for other M, N (only the tiny latency part moves)
    other = shard_matmul(4096, K, 2048, d, "k", H100).thresholds[1].value
    assert other == pytest.approx(4 * P * (d - 1) / (2 * W_NV) + ALPHA * d * P / (2 * 4096 * 2048))


def test_book_question_4_k_sharded_all_reduce_threshold() -> None:
    # "How to Scale Your Model", sharding chapter, Question 4: A[B,D] . B[D_X,F] computed locally
    # then AllReduced in bf16 is compute-bound when D / (2X) > C / W_ici ~ 2550 on TPU v5p
    # (C = 4.59e14, W_ici = 1.8e11 bidirectional), i.e. D > 5100 X. Our ring all-reduce keeps the
    # (X-1)/X factor: D* = s P (X-1) / (2 W) = 2 * 4.59e14 * (X-1) / (2 * 9e10) = 5100.
    v5p = load_chip("tpu-v5p")
    x, b, f = 4, 4096, 32768
    r = shard_matmul(
        b, 8192, f, x, "k", v5p, output="replicated", options=ShardOptions(reduce_dtype="bf16")
    )
    assert r.networks["X"].name == "ring"  # 4 chips on v5p: a multiple of 4 wraps
    bandwidth_only, t = r.thresholds
    assert bandwidth_only.value == pytest.approx(5100 * (x - 1), rel=1e-9)
    latency = 2 * 1e-6 * (x // 2) * x * 4.59e14 / (2 * b * f)
    assert t.value == pytest.approx(5100 * (x - 1) + latency, rel=1e-9)
    assert pytest.approx(2550) == 4.59e14 / 1.8e11


def test_threshold_for_m_when_weights_are_not_resident() -> None:
    d = 8
    r = shard_matmul(M, K, N, d, "m", H100, options=ShardOptions(resident=frozenset({"A"})))
    _, t = r.thresholds
    # all-gather of B (V = 2KN) on the switch: M < s_B P (D-1)/(2W) + alpha D P/(2KN)
    assert t.dim == "M"
    assert t.value == pytest.approx(2 * P * (d - 1) / (2 * W_NV) + ALPHA * d * P / (2 * K * N))


# --- bad input --------------------------------------------------------------------------------


def test_bad_specs_and_meshes() -> None:
    with pytest.raises(InputError, match="not declared"):
        shard_einsum("A[M_Z,K] * B[K,N] -> C[M_Z,N]", DIMS, "X=2", H100)
    with pytest.raises(InputError, match="line up"):
        shard_einsum("A[M,K_XY] * B[K_YX,N] -> C[M,N]", DIMS, "X=2,Y=2", H100)
    with pytest.raises(InputError, match="single upper-case"):
        parse_mesh("xx=2")
    with pytest.raises(InputError, match="declared twice"):
        parse_mesh("X=2,X=4")
    with pytest.raises(InputError, match="positive"):
        parse_mesh("X=0")
    with pytest.raises(InputError, match="--resident"):
        shard_einsum(
            "A[M_X,K] * B[K,N] -> C[M_X,N]",
            DIMS,
            "X=2",
            H100,
            options=ShardOptions(resident=frozenset({"Q"})),
        )
    with pytest.raises(InputError, match="--along"):
        shard_matmul(M, K, N, 8, "q", H100)
    with pytest.raises(InputError, match="scale-out"):
        no_scale_out = dataclasses.replace(
            H100, interconnect=dataclasses.replace(H100.interconnect, scale_out=None)
        )
        shard_matmul(M, K, N, 16, "k", no_scale_out)
    with pytest.raises(InputError, match="link-bw"):
        shard_matmul(M, K, N, 8, "k", H100, network=NetworkOptions(link_bytes_per_s=-1.0))
