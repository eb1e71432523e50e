"""Strategy comparison: enumeration, agreement with the general planner strategy by strategy,
the 2D-versus-1D verdict, and speed."""

from __future__ import annotations

import time

import pytest

from shardline.compare import compare, compare_strategies, divisors
from shardline.errors import InputError
from shardline.sharding import ShardOptions, shard_einsum


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
