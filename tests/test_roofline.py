"""Single-device counting and roofline (docs/model.md section 2), values derived by hand here."""

from __future__ import annotations

import math

import numpy as np
import pytest

import shardline
from shardline.basics.options import Precision, RateOverrides
from shardline.errors import InputError
from shardline.ops.roofline import critical_m

# Seed 001's textbook rates for a TPU v5e: int8 and bf16 peaks, HBM bytes/s.
INT8_V5E = RateOverrides(flops_per_s=3.94e14, mem_bytes_per_s=8.2e11)
BF16_V5E = RateOverrides(flops_per_s=1.97e14, mem_bytes_per_s=8.2e11)

H100_BF16 = 989.4e12  # NVIDIA H100 SXM5 datasheet, dense bf16 (catalog h100-sxm)
H100_HBM = 3.35e12  # NVIDIA H100 SXM5 datasheet


def test_large_square_bf16_on_h100_by_hand() -> None:
    n = 8192
    r = shardline.matmul(n, n, n, hw="h100-sxm", dtype="bf16")
    flops = 2 * n * n * n  # F = 2MKN
    q = 2 * n * n * 3  # Q = sA*M*K + sB*K*N + sC*M*N with s = 2 B
    assert r.flops == flops == 1_099_511_627_776
    assert r.bytes == {"a": 2 * n * n, "b": 2 * n * n, "out": 2 * n * n, "total": q}
    assert r.intensity_flop_per_byte == pytest.approx(2 * n / (3 * 2))  # I = 2n/(3s)
    assert r.ridge_flop_per_byte == pytest.approx(H100_BF16 / H100_HBM)  # ~295.3
    assert r.t_compute_s == pytest.approx(flops / H100_BF16)
    assert r.t_memory_s == pytest.approx(q / H100_HBM)
    assert r.t_lower_s == pytest.approx(flops / H100_BF16)
    assert r.t_upper_s == pytest.approx(flops / H100_BF16 + q / H100_HBM)
    assert r.bound == "compute"
    assert isinstance(r.flops, int) and isinstance(r.bytes["total"], int)


def _brute_critical(k: int, n: int, sa: float, sb: float, sc: float, p: float, w: float) -> int:
    """Smallest M with 2MKN/P >= (sa*M*K + sb*K*N + sc*M*N)/W, by direct search."""
    m = 1
    while 2 * m * k * n / p < (sa * m * k + sb * k * n + sc * m * n) / w:
        m += 1
    return m


def test_seed001_q1_int8_matmul_textbook_numbers() -> None:
    # Seed 001 Q1: int8 X[B,D] . Y[D,F], HBM 8.2e11 B/s, int8 peak 3.94e14 OP/s.
    b, d, f = 64, 4096, 4096
    r = shardline.matmul(b, d, f, hw="tpu-v5e", dtype="int8", rates=INT8_V5E)
    assert r.bytes["a"] + r.bytes["b"] == b * d + d * f  # loaded: BD + DF
    assert r.bytes["out"] == b * f  # written: BF
    assert r.flops == 2 * b * d * f
    assert r.intensity_flop_per_byte == pytest.approx(2 * b * d * f / (b * d + d * f + b * f))
    assert r.t_compute_s == pytest.approx(2 * b * d * f / 3.94e14)
    assert r.t_memory_s == pytest.approx((b * d + d * f + b * f) / 8.2e11)
    assert r.bound == "memory"
    # Compute-bound once 2B > 3.94e14 / 8.2e11 = 480.5 -> B > 240 when B << D, F; exactly:
    assert r.critical_m == _brute_critical(d, f, 1, 1, 1, 3.94e14, 8.2e11) == 273
    huge = shardline.matmul(1, 2**22, 2**22, hw="tpu-v5e", dtype="int8", rates=INT8_V5E)
    assert huge.critical_m == 241  # the B > 240 of the textbook answer, in the D, F -> inf limit


def test_seed001_q2_int8_weights_bf16_math_become_compute_bound_near_120() -> None:
    # bf16[B,D] * int8[D,F] -> bf16[B,F] at 1.97e14 FLOP/s: I ~ 2B/sB with sB = 1 -> B > 120.
    r = shardline.matmul(
        1,
        2**22,
        2**22,
        hw="tpu-v5e",
        dtype="bf16",
        b_dtype="int8",
        rates=BF16_V5E,
    )
    assert r.dtypes == {"a": "bf16", "b": "int8", "out": "bf16", "compute": "bf16"}
    assert r.critical_m == 121  # 1.97e14 / 8.2e11 / 2 = 120.1 -> smallest integer above
    exact = shardline.matmul(
        64,
        4096,
        4096,
        hw="tpu-v5e",
        dtype="bf16",
        b_dtype="int8",
        rates=BF16_V5E,
    )
    assert exact.bytes["total"] == 2 * 64 * 4096 + 4096 * 4096 + 2 * 64 * 4096
    assert exact.critical_m == _brute_critical(4096, 4096, 2, 1, 2, 1.97e14, 8.2e11)


def test_seed001_q4_per_example_weights_intensity_is_about_two() -> None:
    # int8[B,D] * int8[B,D,F] -> int8[B,F]: F = 2BDF, Q = BD + BDF + BF, I -> 2 (docs/model.md s.2).
    b, d, f = 64, 4096, 4096
    r = shardline.einsum(
        "X[B,D] * W[B,D,F] -> Y[B,F]", {"B": b, "D": d, "F": f}, hw="tpu-v5e", dtype="int8"
    )
    assert r.flops == 2 * b * d * f
    assert r.bytes == {"X": b * d, "W": b * d * f, "Y": b * f, "total": b * d + b * d * f + b * f}
    assert r.intensity_flop_per_byte == pytest.approx(2 * d * f / (d + d * f + f))
    assert 1.99 < r.intensity_flop_per_byte < 2
    assert r.bound == "memory"


def test_outer_product_counts_one_flop_per_element() -> None:
    r = shardline.einsum("A[M] * B[N] -> C[M,N]", {"M": 100, "N": 30}, hw="h100")
    assert r.flops == 100 * 30  # no contraction: one multiply per output element


def test_int4_bytes_round_up_to_whole_bytes() -> None:
    r = shardline.matmul(3, 3, 4, hw="a100-80gb", dtype="int4", compute_dtype="int4")
    assert r.bytes["a"] == math.ceil(3 * 3 * 4 / 8)  # 9 values x 4 bits = 36 bits -> 5 bytes
    assert r.bytes["b"] == 3 * 4 // 2


def test_accumulate_reads_the_output_too() -> None:
    plain = shardline.matmul(1024, 1024, 1024, hw="h100")
    acc = shardline.matmul(1024, 1024, 1024, hw="h100", accumulate=True)
    assert acc.bytes["out"] == 2 * plain.bytes["out"] == 2 * 2 * 1024 * 1024


def test_critical_m_none_when_no_m_is_compute_bound() -> None:
    # K = N = 64 on H100 bf16: 2KN/P - (2K + 2N)/W = 8.28e-12 - 7.64e-11 < 0.
    assert 2 * 64 * 64 / H100_BF16 - (2 * 64 + 2 * 64) / H100_HBM < 0
    assert shardline.matmul(100_000, 64, 64, hw="h100").critical_m is None


def test_vectorized_matches_scalar_loop() -> None:
    m = np.array([1, 64, 512, 4096, 3000])
    k = np.array([4096, 4096, 1024, 4096, 77])
    n = np.array([4096, 14336, 1024, 4096, 123])
    vec = shardline.matmul(m, k, n, hw="h100", dtype="bf16")
    for i in range(len(m)):
        one = shardline.matmul(int(m[i]), int(k[i]), int(n[i]), hw="h100", dtype="bf16")
        assert vec.flops[i] == one.flops
        assert vec.bytes["total"][i] == one.bytes["total"]
        assert vec.t_lower_s[i] == pytest.approx(one.t_lower_s)
        assert vec.bound[i] == one.bound
        expected = np.nan if one.critical_m is None else one.critical_m
        np.testing.assert_equal(vec.critical_m[i], expected)


def test_vectorized_dtype_array() -> None:
    dtypes = np.array(["bf16", "fp8", "fp32"])
    r = shardline.matmul(np.full(3, 2048), 2048, 2048, hw="h100", dtype=dtypes)
    assert list(r.bytes["a"]) == [2 * 2048**2, 2048**2, 4 * 2048**2]
    assert list(r.hardware.flops_per_s) == [989.4e12, 1979e12, 67e12]


def test_dtype_the_chip_lacks_is_an_error() -> None:
    with pytest.raises(InputError, match="cannot compute in fp8"):
        shardline.matmul(8, 8, 8, hw="a100-40gb", dtype="fp8")


@pytest.mark.parametrize(
    "bad",
    [
        0,
        -5,
        2.5,
        "12",
        True,
        2**41,
        np.array([8, 0]),
        np.array([1.5]),
        np.array([2**41]),
        np.array([np.inf]),
        np.array([np.nan]),
    ],
)
def test_bad_dimensions(bad: object) -> None:
    with pytest.raises(InputError):
        shardline.matmul(bad, 8, 8)


def test_critical_m_function_matches_formula() -> None:
    # M * (2KN/P - (sA*K + sC*N)/W) >= sB*K*N/W with everything bf16 on H100.
    k, n = 8192, 8192
    bracket = 2 * k * n / H100_BF16 - (2 * k + 2 * n) / H100_HBM
    closed = math.ceil(2 * k * n / H100_HBM / bracket)
    got = critical_m(k, n, {"a": "bf16", "b": "bf16", "out": "bf16"}, H100_BF16, H100_HBM)
    assert got == closed == _brute_critical(k, n, 2, 2, 2, H100_BF16, H100_HBM)


def test_dtype_keywords_and_precision_give_the_same_multiply() -> None:
    """`b_dtype="int8"` and `precision=Precision("bf16", {"b": "int8"})` are one multiply:
    bytes 2*64*4096 (A) + 4096*4096 (B, one byte each) + 2*64*4096 (C)."""
    by_keyword = shardline.matmul(64, 4096, 4096, hw="tpu-v5e", dtype="bf16", b_dtype="int8")
    by_group = shardline.matmul(
        64, 4096, 4096, hw="tpu-v5e", precision=Precision("bf16", {"b": "int8"})
    )
    assert by_keyword.to_dict() == by_group.to_dict()
    assert by_group.bytes["total"] == 2 * 64 * 4096 + 4096 * 4096 + 2 * 64 * 4096
    # a keyword wins over the same field of the group: b in fp8 is one byte too, a in fp32 four
    mixed = shardline.matmul(
        64, 4096, 4096, hw="h100", precision=Precision("bf16", {"b": "int8"}), a_dtype="fp32"
    )
    assert mixed.bytes["a"] == 4 * 64 * 4096 and mixed.bytes["b"] == 4096 * 4096


def test_unknown_dtype_keyword_is_a_clear_error() -> None:
    with pytest.raises(TypeError, match="c_dtype.*a_dtype, b_dtype, out_dtype"):
        shardline.matmul(8, 8, 8, c_dtype="int8")
    with pytest.raises(InputError, match="unknown operand"):
        shardline.matmul(8, 8, 8, precision=Precision("bf16", {"w": "int8"}))


def test_einsum_precision_and_rates() -> None:
    """compute_dtype and the rates come as groups: int8 inputs computed in bf16 at 1.97e14 FLOP/s
    over 8.2e11 B/s: t_compute = 2*B*D*F / 1.97e14, t_memory = (BD + DF + BF) / 8.2e11."""
    b, d, f = 64, 4096, 4096
    r = shardline.einsum(
        "X[B,D] * W[D,F] -> Y[B,F]",
        {"B": b, "D": d, "F": f},
        "tpu-v5e",
        "int8",
        precision=Precision(compute="bf16"),
        rates=BF16_V5E,
    )
    assert r.dtypes["compute"] == "bf16"
    assert r.t_compute_s == pytest.approx(2 * b * d * f / 1.97e14)
    assert r.t_memory_s == pytest.approx((b * d + d * f + b * f) / 8.2e11)
    assert r.cost.t_lower_s == max(r.t_compute_s, r.t_memory_s) == r.t_lower_s
