"""Collective costs: every formula against a hand derivation, the book's worked examples, topology
defaults from the catalog, the realistic efficiency model, and vectorization."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from shardline.collectives import (
    NetworkOptions,
    bus_efficiency,
    canonical_kind,
    canonical_topology,
    collective_cost,
    collective_over,
    mesh_networks,
    parse_topology,
)
from shardline.errors import InputError
from shardline.hardware import load_chip

H100 = load_chip("h100-sxm")
V5E = load_chip("tpu-v5e")
V4 = load_chip("tpu-v4")
W = 4.5e10  # one-way per link, bytes/s (the test's own number)
ALPHA = 1e-6


def cost(kind: str, v: float, n: int, topo: str, chip=V5E):  # type: ignore[no-untyped-def]
    return collective_cost(
        kind, v, n, chip, topo, options=NetworkOptions(link_bytes_per_s=W, hop_latency_s=ALPHA)
    )


# --- docs/model.md section 4, formula by formula --------------------------------------------------


@pytest.mark.parametrize("n", [3, 4, 7, 8, 16])
def test_ring_all_gather_and_reduce_scatter(n: int) -> None:
    v = 1e9
    # bidirectional ring with wraparound: each device receives (n-1)/n V, half from each side,
    # each side at W: (n-1)/n * V / (2W); the farthest shard is floor(n/2) hops away (a ring of
    # 2 is one link pair, a line: tests/test_collective_physics.py)
    for kind in ("all_gather", "reduce_scatter"):
        c = cost(kind, v, n, "ring")
        assert c.t_bandwidth_s == pytest.approx((n - 1) / n * v / (2 * W), rel=1e-12)
        assert c.t_latency_s == pytest.approx(ALPHA * (n // 2))
        assert c.t_s == pytest.approx(c.t_bandwidth_s + c.t_latency_s)


@pytest.mark.parametrize("topo", ["line", "unidirectional-ring"])
@pytest.mark.parametrize("n", [2, 5, 8])
def test_line_and_unidirectional_ring(topo: str, n: int) -> None:
    v = 3e8
    # an end device of a line has one link in: (n-1)/n V at W; a unidirectional ring also
    # receives everything from one neighbour. Both need n-1 hops.
    c = cost("all_gather", v, n, topo)
    assert c.t_bandwidth_s == pytest.approx((n - 1) / n * v / W, rel=1e-12)
    assert c.t_latency_s == pytest.approx(ALPHA * (n - 1))


def test_switch_uses_per_device_egress() -> None:
    # H100: 18 NVLink 4 links x 25e9 = 450e9 one-way egress; a switch is one hop
    c = collective_cost("all-gather", 1e9, 8, H100)
    assert c.t_bandwidth_s == pytest.approx(7 / 8 * 1e9 / 450e9, rel=1e-12)
    assert c.t_latency_s == pytest.approx(1e-6)
    assert c.topology == "switch" and c.topology_detail == "switch of 8 (NVLink 4)"


@pytest.mark.parametrize("topo", ["ring", "line", "unidirectional-ring"])
def test_all_reduce_is_reduce_scatter_plus_all_gather(topo: str) -> None:
    v, n = 5e8, 8
    rs, ar = cost("reduce_scatter", v, n, topo), cost("all_reduce", v, n, topo)
    assert ar.t_bandwidth_s == pytest.approx(2 * rs.t_bandwidth_s, rel=1e-12)
    assert ar.t_latency_s == pytest.approx(2 * rs.t_latency_s)


def test_all_reduce_in_switch_reduction() -> None:
    # "How to Scale Your Model", GPU chapter: with NVLink SHARP each GPU egresses and ingresses
    # exactly V bytes, T = V / W_egress (instead of 2 (n-1)/n V / W)
    v = 1e9
    sharp = collective_cost("all_reduce", v, 8, H100)
    assert sharp.t_bandwidth_s == pytest.approx(v / 450e9, rel=1e-12)
    a100 = collective_cost("all_reduce", v, 8, load_chip("a100-80gb"))  # no SHARP on A100
    assert a100.t_bandwidth_s == pytest.approx(2 * 7 / 8 * v / 300e9, rel=1e-12)


def test_all_to_all_per_topology() -> None:
    v, n = 1e9, 8
    # switch: each device sends n-1 chunks of V/n^2 (GPU chapter: B (N-1) / (W N^2))
    sw = collective_cost("all_to_all", v, n, H100)
    assert sw.t_bandwidth_s == pytest.approx((n - 1) / n**2 * v / 450e9, rel=1e-12)
    # bidirectional ring, n = 8: right-going chunks travel 1..3 hops, the antipodal (4-hop) chunk
    # is split between the two directions, so one directed link carries 1+2+3 + 4/2 = 8 chunks
    # of V/64 (= n^2/8)
    ring = cost("all_to_all", v, n, "ring")
    assert ring.t_bandwidth_s == pytest.approx(8 * v / 64 / W, rel=1e-12)
    # odd n = 7: right-going chunks travel 1..3 hops: 1+2+3 = 6 = (49-1)/8 chunks of V/49
    odd = cost("all_to_all", v, 7, "ring")
    assert odd.t_bandwidth_s == pytest.approx(6 * v / 49 / W, rel=1e-12)
    # line, n = 8: the middle link is crossed by 4 x 4 = 16 (source, destination) pairs
    line = cost("all_to_all", v, n, "line")
    assert line.t_bandwidth_s == pytest.approx(16 * v / 64 / W, rel=1e-12)
    # unidirectional ring: 1+2+...+7 = 28 chunks per link
    uni = cost("all_to_all", v, n, "unidirectional-ring")
    assert uni.t_bandwidth_s == pytest.approx(28 * v / 64 / W, rel=1e-12)


def test_all_to_all_ratios_from_the_book() -> None:
    # sharding chapter, Q10: on a unidirectional ring an AllToAll costs (n-1)/(2n) V/W, half the
    # AllGather; on a bidirectional ring it tends to a quarter of the AllGather
    n, v = 256, 1e9
    uni_ratio = (
        cost("all_to_all", v, n, "unidirectional-ring").t_bandwidth_s
        / cost("all_gather", v, n, "unidirectional-ring").t_bandwidth_s
    )
    assert uni_ratio == pytest.approx(0.5)
    ring_ratio = (
        cost("all_to_all", v, n, "ring").t_bandwidth_s
        / cost("all_gather", v, n, "ring").t_bandwidth_s
    )
    # even n: (n^2/8)/n^2 V/W over (n-1)/n V/(2W) = n / (4(n-1)) -> 1/4
    assert ring_ratio == pytest.approx(n / (4 * (n - 1)))
    assert ring_ratio == pytest.approx(0.25, abs=0.005)


def test_send_is_one_hop() -> None:
    c = cost("send", 2e6, 2, "line")
    assert c.t_bandwidth_s == pytest.approx(2e6 / W) and c.t_latency_s == pytest.approx(ALPHA)


def test_one_device_costs_nothing() -> None:
    c = collective_cost("all_reduce", 1e9, 1, H100)
    assert c.t_s == 0 and c.t_bandwidth_s == 0


# --- "How to Scale Your Model", sharding chapter (Part 3), worked examples --------------------


def test_book_pop_quiz_2_all_gather_on_v5e_without_wraparound() -> None:
    # Pop Quiz 2: AllGather_Y([E_Y, F]) on a TPU v5e mesh {'X': 8, 'Y': 4}, E=2048, F=8192 bf16.
    # "TPU v5e only has a wraparound connection when one axis has size 16 ... 3 * 8.4e6 / 4.5e10
    # = 560us". The catalog's v5e puts the inner axis Y (4 chips) on a torus dimension of 16:
    # a line, so (4-1)/4 * V / W with V = 2048*8192*2.
    nets = mesh_networks(V5E, [("X", 8), ("Y", 4)])
    assert nets["Y"].name == "line"
    v = 2048 * 8192 * 2
    c = collective_over("all_gather", v, [nets["Y"]], V5E)
    assert c.t_bandwidth_s == pytest.approx(3 / 4 * v / 4.5e10, rel=1e-12)
    assert c.t_bandwidth_s == pytest.approx(560e-6, rel=2e-3)  # the book's 560 us
    assert c.t_latency_s == pytest.approx(3e-6)  # "at most 3 hops ... something like 3us"
    # part (2): E = F = 256 is latency-bound: 32 kB shards, 3 hops of ~1 us
    small = collective_over("all_gather", 256 * 256 * 2, [nets["Y"]], V5E)
    assert small.t_latency_s == pytest.approx(3e-6) and small.t_latency_s > small.t_bandwidth_s


def test_book_full_ring_limit_is_v_over_bidirectional_bandwidth() -> None:
    # "T_total = V / W_ici" with W_ici the bidirectional 9e10 on v5e, reached on a full 16-chip
    # (wraparound) axis up to the (X-1)/X factor the chapter's summary table carries
    nets = mesh_networks(V5E, [("X", 16)])
    assert nets["X"].name == "ring"
    v = 34e6
    c = collective_over("all_gather", v, [nets["X"]], V5E)
    assert c.t_bandwidth_s == pytest.approx(15 / 16 * v / 9e10, rel=1e-12)
    assert c.t_bandwidth_s * 16 / 15 == pytest.approx(377e-6, rel=3e-3)  # the book: 377 us


def test_book_question_2_v4_cube_has_wraparound() -> None:
    # Question 2: AllGather_X([B_X, D_Y]) on a TPU v4p 4x4x4, B=1024, D=4096 bf16: the array
    # gathered over X is 2BD/Y bytes; "we have a full wraparound on the 4 axes", 9e10 B/s
    # bidirectional -> 2BD/(9e10 Y) = 23 us (without the (X-1)/X factor).
    nets = mesh_networks(V4, [("X", 4), ("Y", 4), ("Z", 4)])
    assert {a: n.name for a, n in nets.items()} == {"X": "ring", "Y": "ring", "Z": "ring"}
    v = 2 * 1024 * 4096 / 4
    c = collective_over("all_gather", v, [nets["X"]], V4)
    assert c.t_bandwidth_s == pytest.approx(3 / 4 * v / 9e10, rel=1e-12)
    assert c.t_bandwidth_s * 4 / 3 == pytest.approx(23e-6, rel=0.02)


def test_book_question_3_latency_bound_gather_takes_two_hops() -> None:
    # Question 3: AllGather_X([B_X]) with B = 128 bf16 on the v4p 4x4x4: wraparound, so 2 hops,
    # "roughly 2us"
    nets = mesh_networks(V4, [("X", 4), ("Y", 4), ("Z", 4)])
    c = collective_over("all_gather", 128 * 2, [nets["X"]], V4)
    assert c.t_latency_s == pytest.approx(2e-6)
    assert c.t_bandwidth_s < 1e-8


def test_book_latency_bound_size_on_v5e() -> None:
    # "sending any buffer under 4.5e10 * 1e-6 = 45kB will be latency bound": one hop of a
    # unidirectional send takes as long on the link as in latency at 45 kB
    c = collective_cost("send", 45e3, 2, V5E, "line")
    assert c.t_bandwidth_s == pytest.approx(c.t_latency_s)


# --- "How to Scale Your Model", GPU chapter (Part 12) -----------------------------------------


def test_gpu_pop_quiz_1_node_all_gather() -> None:
    # 8xH100, AllGather(bf16[B_X, F]), B=1024, F=16384: (2BF (8-1)) / (8 * 450e9) = 65us
    c = collective_cost("all_gather", 2 * 1024 * 16384, 8, H100)
    assert c.t_bandwidth_s == pytest.approx(2 * 1024 * 16384 * 7 / (8 * 450e9), rel=1e-12)
    assert c.t_bandwidth_s == pytest.approx(65e-6, rel=0.01)


def test_gpu_question_5_two_nodes_bound_by_the_node() -> None:
    # "At the node level B*7/(8*450e9) = B/514e9 while beyond B*(2-1)/(2*400e9) = B/800e9:
    # we're actually bounded by the node level reduction"
    v = 1e9
    c = collective_cost("all_gather", v, 16, H100)
    assert c.topology == "hierarchical"
    assert c.t_bandwidth_s == pytest.approx(v * 7 / (8 * 450e9), rel=1e-12)


def test_gpu_scalable_unit_all_gather_bandwidth() -> None:
    # 256 H100s = 32 nodes: T = B * max(7/(8*450e9), 31/(32*400e9)) -> B / 413 GB/s
    v = 1e9
    c = collective_cost("all_gather", v, 256, H100)
    assert c.t_bandwidth_s == pytest.approx(v * 31 / (32 * 400e9), rel=1e-12)
    assert v / c.t_bandwidth_s == pytest.approx(413e9, rel=2e-3)


def test_gpu_cross_node_all_to_all() -> None:
    # "an N-way AllToAll that spans M = N/8 nodes costs B (M-1) / (M^2 W_node egress)"
    v = 1e9
    c = collective_cost("all_to_all", v, 16, H100)
    assert c.t_bandwidth_s == pytest.approx(v * 1 / (4 * 400e9), rel=1e-12)


# --- default topologies from the catalog ------------------------------------------------------


def test_catalog_topology_rules() -> None:
    def name(chip, n):  # type: ignore[no-untyped-def]
        return mesh_networks(chip, [("X", n)])["X"].name

    assert name(V5E, 16) == "ring" and name(V5E, 8) == "line"  # v5e wraps only at 16
    assert name(V4, 8) == "ring" and name(V4, 6) == "line"  # v4 wraps at multiples of 4
    assert name(H100, 8) == "switch" and name(H100, 64) == "hierarchical"
    assert name(V5E, 64) == "torus"  # 16 (ring) x 4 (line), axis by axis
    assert name(V5E, 512) == "hierarchical"  # beyond the 256-chip pod: DCN


@pytest.mark.parametrize("n", [20, 24, 28])
def test_v5p_axis_that_fits_one_torus_dimension_wraps(n: int) -> None:
    # v5p's torus is 16 x 20 x 28 and wraps on multiples of 4: n = 20, 24 or 28 chips fit one
    # dimension whole (the smallest that holds them), a bidirectional ring:
    # (n-1)/n * V / (2W) with W = 9e10, latency alpha * floor(n/2)
    v5p = load_chip("tpu-v5p")
    c = collective_cost("all_gather", 1e9, n, v5p)
    assert c.topology == "ring" and c.topology_detail == f"ring of {n} (ICI)"
    assert c.t_bandwidth_s == pytest.approx((n - 1) / n * 1e9 / (2 * 9e10), rel=1e-12)
    assert c.t_latency_s == pytest.approx(1e-6 * (n // 2))
    # 6 is not a multiple of 4: a line, (n-1)/n * V / W and n-1 hops
    c = collective_cost("all_gather", 1e9, 6, v5p)
    assert c.topology == "line" and c.t_bandwidth_s == pytest.approx(5 / 6 * 1e9 / 9e10)
    assert c.t_latency_s == pytest.approx(5e-6)


def test_in_switch_all_reduce_over_two_axes_of_one_node() -> None:
    # K_XY on X=4, Y=2 of one 8-GPU H100 node: NVLink SHARP reduces over all 8 at once,
    # V / W + 2 alpha with W = 450e9, not two axis-by-axis all-reduces
    nets = mesh_networks(H100, [("X", 4), ("Y", 2)])
    v = 2**27
    c = collective_over("all_reduce", v, [nets["X"], nets["Y"]], H100)
    assert c.t_bandwidth_s == pytest.approx(v / 450e9, rel=1e-12)
    assert c.t_latency_s == pytest.approx(2e-6) and c.topology == "switch"
    # A100 has no in-switch reduction: RS + AG axis by axis, 2 * (3/4 + 1/2 * 1/4) V / W
    # = 2 * 7/8 V / W, the same as one flat 8-GPU switch
    a100 = load_chip("a100-80gb")
    nets = mesh_networks(a100, [("X", 4), ("Y", 2)])
    c = collective_over("all_reduce", v, [nets["X"], nets["Y"]], a100)
    assert c.t_bandwidth_s == pytest.approx(2 * 7 / 8 * v / 300e9, rel=1e-12)
    # across nodes (X=2 spills over the NICs, no SHARP there): the hierarchical max of NVLS
    # inside the node (V / W, as NCCL's NVLS runs it across nodes too) and the nodes' ring on
    # the V/8 shard, 2 (n-1)/n V/8 / 50e9 = V / 400e9
    nets = mesh_networks(H100, [("X", 2), ("Y", 8)])
    c = collective_over("all_reduce", v, [nets["X"], nets["Y"]], H100)
    assert c.t_bandwidth_s == pytest.approx(v * max(1 / 450e9, 1 / 400e9))


def test_multi_dimension_axis_runs_axis_by_axis() -> None:
    # 64 chips on v5e: a 4-chip line then a 16-chip ring. Sequentially, slowest per byte first
    # while the array is small: the line gathers V/16, then the ring gathers V.
    v = 1e9
    seq = NetworkOptions(multi_axis="sequential")
    c = collective_cost("all_gather", v, 64, V5E, options=seq)
    expect = 3 / 4 * (v / 16) / 4.5e10 + 15 / 16 * v / (2 * 4.5e10)
    assert c.t_bandwidth_s == pytest.approx(expect, rel=1e-12)
    assert c.t_latency_s == pytest.approx((3 + 8) * 1e-6)


def test_multi_dimension_axis_runs_at_once_by_default() -> None:
    # the book's multi-axis form: both dimensions' links carry the gather at once, so their
    # all-gather bandwidths add (line W, bidirectional ring 2W):
    # T = (N-1)/N x V / (W + 2W) = 63/64 x 1e9 / 1.35e11 = 7.29 ms; latencies as before
    v = 1e9
    c = collective_cost("all_gather", v, 64, V5E)
    assert c.t_bandwidth_s == pytest.approx(63 / 64 * v / (3 * 4.5e10), rel=1e-12)
    assert c.t_latency_s == pytest.approx((3 + 8) * 1e-6)
    assert c.combine == "at once" and c.multi_axis == "simultaneous"


def test_inner_axis_shrinks_the_outer_scale_out_gather() -> None:
    # GPU chapter: AllGather_X(bf16[D_X, F_Y]) with Y the inner axis of 8 (a whole node): the X
    # axis is all scale-out at 50 GB/s per GPU on the 2DF/Y array
    nets = mesh_networks(H100, [("X", 4), ("Y", 8)])
    assert nets["Y"].name == "switch" and nets["X"].stages[0].scale_out
    d, f = 8192, 32768
    v = 2 * d * f / 8
    c = collective_over("all_gather", v, [nets["X"]], H100)
    assert c.t_bandwidth_s == pytest.approx(3 / 4 * v / 50e9, rel=1e-12)


def test_topology_overrides() -> None:
    nets = mesh_networks(
        H100,
        [("X", 4), ("Y", 2)],
        NetworkOptions(parse_topology("X=ring,Y=line", ["X", "Y"]), 1e10, 2e-6),
    )
    assert nets["X"].name == "ring" and nets["Y"].name == "line"
    assert nets["X"].stages[0].bytes_per_s == 1e10 and nets["Y"].stages[0].hop_latency_s == 2e-6
    assert parse_topology("ring", ["X", "Y"]) == {"X": "ring", "Y": "ring"}
    with pytest.raises(InputError, match="not in the mesh"):
        parse_topology("Z=ring", ["X"])
    with pytest.raises(InputError, match="torus interconnect"):
        collective_cost("all_gather", 1e6, 4, H100, "torus")
    with pytest.raises(InputError, match="unknown topology"):
        canonical_topology("star")
    assert canonical_kind("All-Gather") == "all_gather"
    assert canonical_kind("allreduce") == "all_reduce"
    with pytest.raises(InputError):
        canonical_kind("all-smash")


def test_hierarchical_word_on_one_axis() -> None:
    c = collective_cost("all_gather", 1e9, 32, H100, "hierarchical")
    assert c.t_bandwidth_s == pytest.approx(max(7 / 8 / 450e9, 3 / 4 / 400e9) * 1e9, rel=1e-12)
    assert V5E.interconnect is not None
    no_dcn = dataclasses.replace(
        V5E, interconnect=dataclasses.replace(V5E.interconnect, scale_out=None)
    )
    with pytest.raises(InputError, match="scale-out"):
        collective_cost("all_gather", 1e9, 32, no_dcn, "hierarchical")


# --- the realistic prediction -----------------------------------------------------------------


def test_bus_efficiency_model() -> None:
    eff_max = H100.achievable.collective_bus_efficiency
    v_half = H100.achievable.collective_half_efficiency_bytes
    assert eff_max is not None and v_half is not None
    # eff(V) = eff_max V / (V + V_half): half of eff_max at V_half, -> eff_max for large V
    assert bus_efficiency(v_half, H100) == pytest.approx(eff_max / 2)
    assert bus_efficiency(1e15, H100) == pytest.approx(eff_max, rel=1e-6)
    # the curve prices a chip whose collectives no library model runs (library "none")
    assert H100.interconnect is not None
    plain = dataclasses.replace(
        H100, interconnect=dataclasses.replace(H100.interconnect, library="none")
    )
    c = collective_cost("all_gather", 64e6, 8, plain)
    eff = eff_max * 64e6 / (64e6 + v_half)
    assert c.predicted_s == pytest.approx(c.t_latency_s + c.t_bandwidth_s / eff, rel=1e-12)
    # a chip without the two fields runs at line rate
    mi = load_chip("mi300x")
    if mi.achievable.collective_bus_efficiency is None:
        assert bus_efficiency(1e6, mi) == 1.0


def test_vectorized_over_bytes_matches_scalars() -> None:
    sizes = np.array([1e3, 1e6, 3.3e7, 1e9])
    for kind in ("all_gather", "all_reduce", "all_to_all"):
        vec = collective_cost(kind, sizes, 64, V5E)
        for i, v in enumerate(sizes):
            one = collective_cost(kind, float(v), 64, V5E)
            assert vec.t_s[i] == pytest.approx(one.t_s, rel=1e-12)
            assert vec.predicted_s[i] == pytest.approx(one.predicted_s, rel=1e-12)


@given(
    v=st.floats(1.0, 1e12),
    n=st.integers(2, 64),
    topo=st.sampled_from(["ring", "line", "unidirectional-ring", "switch"]),
)
def test_properties(v: float, n: int, topo: str) -> None:
    ag = cost("all_gather", v, n, topo)
    big = cost("all_gather", 2 * v, n, topo)
    assert ag.t_bandwidth_s >= 0 and big.t_s > ag.t_s  # more bytes take longer
    assert math.isclose(big.t_bandwidth_s, 2 * ag.t_bandwidth_s, rel_tol=1e-12)  # linear in V
    assert cost("all_to_all", v, n, topo).t_bandwidth_s <= ag.t_bandwidth_s  # all-to-all cheaper
    if topo != "switch":
        ring = cost("all_gather", v, n, "ring")
        assert ring.t_s <= ag.t_s  # wraparound never hurts
    assert ag.predicted_s >= ag.t_s  # efficiency <= 1


def test_bad_input() -> None:
    with pytest.raises(InputError):
        collective_cost("all_gather", -1.0, 4, H100)
    with pytest.raises(InputError):
        collective_cost("all_gather", 1e6, 0, H100)
    bare = dataclasses.replace(V5E, interconnect=None)
    with pytest.raises(InputError, match="link-bw"):
        collective_cost("all_gather", 1e6, 4, bare)
    # a chip without an interconnect is a flat switch of the given link
    flat = collective_cost(
        "all_gather", 1e6, 4, bare, options=NetworkOptions(link_bytes_per_s=1e10)
    )
    assert flat.t_bandwidth_s == pytest.approx(3 / 4 * 1e6 / 1e10) and flat.t_latency_s == 0


def test_link_bw_on_a_switch_is_the_formula_w() -> None:
    # docs/model.md section 4, switch: (X-1)/X * V / W + alpha with W the device's link into
    # the switch;
    # --link-bw gives that W directly (no multiplication by the chip's NVLink count)
    v, x, w, alpha = 3e9, 8, 2e11, 2e-6
    c = collective_cost(
        "all_gather",
        v,
        x,
        H100,
        "switch",
        options=NetworkOptions(link_bytes_per_s=w, hop_latency_s=alpha),
    )
    assert c.t_bandwidth_s == pytest.approx((x - 1) / x * v / w, rel=1e-12)
    assert c.t_latency_s == pytest.approx(alpha)


def test_predicted_matches_nccl_tests_on_8_h100() -> None:
    # NVIDIA/nccl-tests issue 212 (NCCL maintainers), 8x H100 at GB sizes: ring collectives reach
    # busbw ~370e9, all-reduce with NVLink SHARP ~480e9. nccl-tests: algbw = S / t and
    # busbw = algbw * (n-1)/n (all-gather) or * 2(n-1)/n (all-reduce), so for S = 1 GB, n = 8:
    v, n = 1e9, 8
    t_all_gather = v / (370e9 * n / (n - 1))
    t_all_reduce = v / (480e9 * n / (2 * (n - 1)))
    ag = collective_cost("all_gather", v, n, H100)
    ar = collective_cost("all_reduce", v, n, H100)
    assert ag.predicted_s == pytest.approx(t_all_gather, rel=0.03)
    assert ar.predicted_s == pytest.approx(t_all_reduce, rel=0.03)
    # the lower bounds stay the line-rate alpha-beta times (in-switch all-reduce: V/W + 2 alpha)
    assert ar.t_s == pytest.approx(v / 450e9 + 2e-6)
