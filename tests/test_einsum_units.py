"""The einsum notation and quantity parsing."""

from __future__ import annotations

import pytest

from shardline.basics.units import (
    GB,
    GiB,
    fmt_bytes,
    fmt_capacity,
    fmt_num,
    fmt_time,
    parse_count,
    parse_quantity,
)
from shardline.errors import InputError
from shardline.ops.einsum import check_dims, parse_dims, parse_einsum


def test_parse_sharded_spec() -> None:
    spec = parse_einsum("A[M_X,K] * B[K,N_Y] -> C[M_X,N_Y]")
    assert spec.lhs.dims == ("M", "K") and spec.lhs.shards == (("X",), ())
    assert spec.contracted == ("K",)
    assert spec.mesh_axes == ("X", "Y")
    assert parse_einsum("A[M_XY,K] * B[K,N] -> C[M_XY,N]").lhs.shards[0] == ("X", "Y")
    assert spec.text() == "A[M_X,K] * B[K,N_Y] -> C[M_X,N_Y]"


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("A[M,K] * A[K,N] -> C[M,N]", "repeated"),
        ("A[M,K] * B[K,N]", "malformed einsum"),
        # one input is a map or a reduction (tests/test_unary_einsum.py); three are too many
        ("A[M,K] * B[K] * D[M] -> C[M]", "one input .* or two joined"),
        ("A[M,K] * B[K,N] -> C[M,Z]", "appears in neither input"),
        ("A[M_X,K_X] * B[K,N] -> C[M,N]", "shards two dimensions"),
        ("A[M,M] * B[M,N] -> C[M,N]", "appears twice"),
        ("A[M,K * B[K,N] -> C[M,N]", "malformed"),
        ("A[M_x,K] * B[K,N] -> C[M,N]", "malformed dimension"),
    ],
)
def test_malformed_specs(spec: str, message: str) -> None:
    with pytest.raises(InputError, match=message):
        parse_einsum(spec)


def test_dims_used_and_sized() -> None:
    spec = parse_einsum("X[B,D] * W[D,F] -> Y[B,F]")
    check_dims(spec, parse_dims("B=64,D=4k,F=4Ki"))
    assert parse_dims("B=64,D=4k,F=4Ki") == {"B": 64, "D": 4000, "F": 4096}
    with pytest.raises(InputError, match="F used in the spec but not sized"):
        check_dims(spec, parse_dims("B=1,D=2"))
    with pytest.raises(InputError, match="Z sized in --dims but not used"):
        check_dims(spec, parse_dims("B=1,D=2,F=3,Z=4"))
    for bad in ("B=0", "B=-1", "B=1.5", "B", "B=1,B=2", "B=1e30"):
        with pytest.raises(InputError):
            parse_dims(bad)


def test_quantities() -> None:
    assert parse_quantity("3.35 TB/s", "B/s") == pytest.approx(3.35e12)
    assert parse_quantity("989 TFLOP/s", "FLOP/s") == pytest.approx(989e12)
    assert parse_quantity("8.2e11", "B/s") == 8.2e11
    assert parse_quantity("16 GiB", "B") == 16 * GiB
    assert parse_quantity("1 us", "s") == pytest.approx(1e-6)
    with pytest.raises(InputError):
        parse_quantity("fast", "B/s")
    for infinite in ("1e400", "1e400 TB/s", "-1e999"):  # float() gives +-inf: not a quantity
        with pytest.raises(InputError, match="not a finite number"):
            parse_quantity(infinite, "B/s")
    assert parse_count("4_096", "M") == 4096
    assert GB == 1e9 and GiB == 2**30


def test_formatting() -> None:
    assert fmt_bytes(402_653_184) == "403 MB"  # decimal: GB = 1e9 B
    assert fmt_time(1.1e-3) == "1.1 ms"
    assert fmt_time(2.5e-6) == "2.5 µs"
    assert fmt_num(float("inf")) == "inf"


def test_capacity_says_gib_where_the_maker_does() -> None:
    # TPU v4 HBM is 32 GiB = 32 * 2**30 = 34,359,738,368 B = 34.36 GB; H100 HBM is 80 GB = 80e9 B
    # (80e9 is a multiple of 1024 too, but not a round number of GiB: 74.51)
    assert fmt_capacity(32 * GiB) == "32 GiB = 34.36 GB"
    assert fmt_capacity(80 * GB) == "80 GB"
    assert fmt_capacity(228 * 1024) == "228 KiB = 233.5 kB"  # H100 shared memory per SM
    assert fmt_capacity(50e6) == "50 MB"
