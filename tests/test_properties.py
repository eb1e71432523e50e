"""Invariants of the physics, checked over many random shapes (hypothesis)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import shardline

dims = st.integers(min_value=1, max_value=1 << 16)
dtypes = st.sampled_from(["bf16", "fp16", "int8", "fp32", "tf32"])  # every chip below has these
chips = st.sampled_from(["h100-sxm", "a100-80gb", "b200", "h200", "mi300x"])


@settings(max_examples=200, deadline=None)
@given(dims, dims, dims, dtypes)
def test_doubling_m_k_n_multiplies_flops_by_8(m: int, k: int, n: int, dtype: str) -> None:
    one = shardline.matmul(m, k, n, hw="h100", dtype=dtype)
    two = shardline.matmul(2 * m, 2 * k, 2 * n, hw="h100", dtype=dtype)
    assert two.flops == 8 * one.flops
    assert two.bytes["total"] == 4 * one.bytes["total"]  # every operand is 2-D


@settings(max_examples=200, deadline=None)
@given(dims, dims, dims, dtypes, chips)
def test_lower_le_upper_le_twice_lower(m: int, k: int, n: int, dtype: str, chip: str) -> None:
    r = shardline.matmul(m, k, n, hw=chip, dtype=dtype)
    assert r.t_lower_s <= r.t_upper_s <= 2 * r.t_lower_s
    assert r.t_lower_s == max(r.t_compute_s, r.t_memory_s)


@settings(max_examples=200, deadline=None)
@given(
    dims, dims, st.sampled_from(["bf16", "int8", "fp32"]), st.sampled_from([None, "int8", "int4"])
)
def test_bound_flips_exactly_at_critical_m(k: int, n: int, dtype: str, weight: str | None) -> None:
    crit = shardline.matmul(1, k, n, hw="h100", dtype=dtype, b_dtype=weight).critical_m
    if crit is None:
        assert (
            shardline.matmul(1 << 30, k, n, hw="h100", dtype=dtype, b_dtype=weight).bound
            == "memory"
        )
        return
    at = shardline.matmul(crit, k, n, hw="h100", dtype=dtype, b_dtype=weight)
    assert at.bound == "compute"
    if crit > 1:
        below = shardline.matmul(crit - 1, k, n, hw="h100", dtype=dtype, b_dtype=weight)
        assert below.bound == "memory"
