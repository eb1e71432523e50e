"""Strategy comparison: enumeration, agreement with the general planner strategy by strategy,
the 2D-versus-1D verdict, and speed."""

from __future__ import annotations

import time
from typing import Any

import numpy as np
import pytest

from shardline.basics.options import Precision
from shardline.collectives import NetworkOptions, mesh_networks
from shardline.errors import InputError
from shardline.hardware import load_chip
from shardline.ops.einsum import parse_einsum
from shardline.sharding.algebra import ShardOptions, shard_einsum
from shardline.sharding.compare import compare, compare_strategies, divisors
from shardline.sharding.layout import price_layout
from shardline.sharding.mesh import parse_mesh


def test_enumerates_every_1d_and_2d_assignment() -> None:
    # D = 8: 1D (3 dims) + meshes 2x4 and 4x2, each axis on M, N or K (9 each) = 21
    s = compare(8192, 8192, 8192, 8, "h100-sxm")
    assert len(s) == 3 + 2 * 9
    assert sum(x.shape == "1D" for x in s) == 3
    assert [x.t_s for x in s] == sorted(x.t_s for x in s)
    # a prime count has no 2D mesh
    assert {x.shape for x in compare(8192, 8192, 8192, 7, "h100-sxm", pad=True)} == {"1D"}
    assert divisors(4096) == [2**i for i in range(13)]


@pytest.mark.parametrize("hw", ["h100-sxm", "tpu-v5e", "tpu-v4"])
@pytest.mark.parametrize("output", ["split", "replicated"])
@pytest.mark.parametrize("resident", [None, ["A"], []])
def test_every_strategy_matches_the_general_planner(
    hw: str, output: str, resident: list[str] | None
) -> None:
    # two independent derivations: compare's vectorized closed forms and the named-axis planner
    m, k, n, d = 2048, 1024, 4096, 16
    for s in compare(m, k, n, d, hw, output=output, resident=resident):
        r = shard_einsum(
            s.spec,
            {"M": m, "K": k, "N": n},
            s.mesh,
            hw,
            options=ShardOptions(resident=None if resident is None else frozenset(resident)),
        )
        assert s.t_compute_s == pytest.approx(r.per_device.t_compute_s, rel=1e-12)
        assert s.t_memory_s == pytest.approx(r.per_device.t_memory_s, rel=1e-12)
        assert s.t_network_s == pytest.approx(r.t_network_s, rel=1e-12, abs=1e-18)
        assert s.bound == r.bound and s.t_s == pytest.approx(r.t_s, rel=1e-12)


def test_two_d_beats_one_d_when_replicated_weights_bind_memory() -> None:
    # 64 TPU v5e, square 8192, resident inputs, C left split: along M every chip reads the whole
    # B (134 MB / 8.19e11 B/s = 164 us) for 2*128*8192*8192 / 1.97e14 = 87 us of math:
    # memory-bound. X=8, Y=8 on M and N reads A/8 and B/8 and is compute-bound at the same 87 us.
    c = compare_strategies(8192, 8192, 8192, 64, "tpu-v5e")
    assert c.best_1d is not None and c.best_2d is not None
    assert c.best_1d.bound == "memory"
    assert c.best_1d.t_s == pytest.approx(2 * 8192 * 8192 / 8.19e11 * (1 + 2 / 64), rel=1e-9)
    assert c.best_2d.bound == "compute"
    assert c.best_2d.t_s == pytest.approx(2 * 8192**3 / 64 / 1.97e14, rel=1e-9)
    assert c.two_d_wins and c.speedup_2d_over_1d == pytest.approx(c.best_1d.t_s / c.best_2d.t_s)
    assert c.crossover_devices is not None and c.crossover_devices <= 64
    for row in c.sweep:
        assert row["two_d_wins"] == (row["devices"] >= c.crossover_devices)


def test_one_d_wins_when_nothing_binds_memory() -> None:
    c = compare_strategies(8192, 8192, 8192, 8, "h100-sxm")
    assert not c.two_d_wins and c.best_1d is not None and c.best_1d.bound == "compute"


def test_excluded_and_padded() -> None:
    c = compare_strategies(1000, 1000, 1000, 16, "h100-sxm")
    assert c.excluded > 0
    padded = compare_strategies(1000, 1000, 1000, 16, "h100-sxm", pad=True)
    assert padded.excluded == 0 and len(padded.strategies) > len(c.strategies)
    with pytest.raises(InputError, match="--pad"):
        compare_strategies(1001, 1001, 1001, 16, "h100-sxm")
    with pytest.raises(InputError, match="--output"):
        compare(8, 8, 8, 2, "h100-sxm", output="sideways")


def test_fast_for_thousands_of_devices() -> None:
    start = time.perf_counter()
    c = compare_strategies(16384, 16384, 16384, 4096, "h100-sxm")
    elapsed = time.perf_counter() - start
    assert len(c.strategies) == 3 + 11 * 9
    assert elapsed < 0.5, f"compare took {elapsed:.3f} s for D = 4096"


def test_vectorized_compare_equals_price_layout_on_random_layouts() -> None:
    # the fast path prices strategies of one spec together over numpy arrays with t = c·V + L
    # per mesh; the scalar layout pricer prices each with collective_over: every number agrees
    rng = np.random.default_rng(9)
    chips = ["h100-sxm", "tpu-v5e", "tpu-v4", "tpu-v5p"]
    checked = 0
    for _ in range(24):
        m, k, n = (int(x) for x in rng.choice([96, 512, 1000, 2048, 3000, 8192], size=3))
        devices = int(rng.choice([2, 4, 6, 8, 12, 16, 32, 64]))
        hw = load_chip(str(rng.choice(chips)))
        output = str(rng.choice(["split", "replicated"]))
        resident = [["A", "B"], ["A"], ["B"], []][int(rng.integers(4))]
        overlap, pad = bool(rng.integers(2)), bool(rng.integers(2))
        precision = Precision(dtype="bf16", reduce=str(rng.choice(["fp32", "bf16"])))
        ring = rng.integers(3) == 0  # a --topology ring on both axes, else the chip's own
        network = NetworkOptions({"X": "ring", "Y": "ring"}) if ring else None
        run: dict[str, Any] = {"resident": resident, "overlap": overlap, "pad": pad}
        for s in compare(
            m, k, n, devices, hw, output=output, precision=precision, **run, network=network
        ):
            mesh = parse_mesh(s.mesh)
            words = NetworkOptions(dict.fromkeys(mesh.names, "ring")) if ring else None
            nets = mesh_networks(hw, mesh.axes, words)
            options = ShardOptions(overlap=overlap, resident=frozenset(resident), pad=pad)
            p = price_layout(
                parse_einsum(s.spec), {"M": m, "K": k, "N": n}, mesh, nets, hw, precision, options
            )
            for name in ("flops", "hbm_bytes", "net_bytes", "t_compute_s", "t_memory_s"):
                assert getattr(s.cost, name) == pytest.approx(getattr(p.cost, name), rel=1e-12)
            for name in ("t_network_s", "t_lower_s", "t_upper_s"):
                assert getattr(s.cost, name) == pytest.approx(getattr(p.cost, name), rel=1e-12)
            assert s.t_s == pytest.approx(p.t_s, rel=1e-12) and s.bound == p.cost.bound
            assert s.collectives == tuple(
                f"{c.kind} {c.operand} over {''.join(c.axes)}" for c in p.collectives
            )
            checked += 1
    assert checked > 200


def test_padding_matches_the_planner() -> None:
    # N = 1000 does not divide by 16 and C[M,N_X] asks for N split 16 ways (K's partial sums
    # reduce-scattered onto N), so --pad rounds N up to 1008, as `shardline einsum --pad` does:
    # the local multiply is M x K/16 x N = 1000 x 63 x 1008 per device, and the reduce-scatter
    # moves the padded 1000 x 1008 block
    s = next(
        x
        for x in compare(1000, 1008, 1000, 16, "h100-sxm", pad=True)
        if x.spec == "A[M,K_X] * B[K_X,N] -> C[M,N_X]"
    )
    r = shard_einsum(
        s.spec,
        {"M": 1000, "K": 1008, "N": 1000},
        s.mesh,
        "h100-sxm",
        options=ShardOptions(pad=True),
    )
    assert r.padded == {"N": [1000, 1008]}
    assert s.flops == r.per_device.flops == 2 * 1000 * (1008 // 16) * 1008
    assert s.t_network_s == pytest.approx(r.t_network_s, rel=1e-12)
