"""The rest of the chip: vector-unit rates, SM (or TensorCore) internals and the memory the device
reports. The first six tests reproduce worked answers of "How to Scale Your Model" (jax-ml
scaling-book), GPU chapter Quiz 1 and the TPU chapter's VPU quiz, from the chip files' fields;
the rest check the loader, the pricing of elementwise work on the vector units, and the fits
checks against the reported capacity."""

from __future__ import annotations

import copy
import math
from typing import Any

import pytest

from shardline.errors import InputError
from shardline.hardware import chip_from_dict, load_chip
from shardline.ops.einsum import parse_einsum
from shardline.ops.roofline import einsum, on_vector_units
from shardline.realistic.block import VECTOR_FLOPS, MemOp
from shardline.realistic.kernels import mem_rate, vector_kernel_s

FMA_FLOPS = 2  # a GPU datasheet counts a fused multiply-add as two FLOPs


def _alus(name: str) -> int:
    chip = load_chip(name)
    lanes = chip.on_chip.vector_lanes_per_core
    assert chip.on_chip.cores is not None and lanes is not None
    return chip.on_chip.cores * lanes


def test_book_gpu_q1_cuda_cores() -> None:
    """GPU chapter, Quiz 1 Q1: H100 has 132 x 4 x 32 = 16896 fp32 CUDA cores, B200 148 x 4 x 32 =
    18944, and a TPU v5p 2 TensorCores x 4 x 8 x 128 = 8192 VPU ALUs."""
    assert _alus("h100") == 132 * 4 * 32 == 16896
    assert _alus("b200") == 148 * 4 * 32 == 18944
    assert _alus("tpu-v5p") == 2 * 4 * 8 * 128 == 8192


def test_book_gpu_q2_vector_flops() -> None:
    """GPU chapter, Quiz 1 Q2: one vector op per ALU per cycle, 132 x 4 x 32 x 1.98e9 = 33.5
    TFLOP/s with boost, half the datasheet's 67 (which counts an FMA as two); the bf16 Tensor
    Cores do about 30x more."""
    h100 = load_chip("h100")
    per_op = _alus("h100") * (h100.on_chip.clock_hz or 0)
    assert per_op == pytest.approx(33.5e12, rel=2e-3)  # 33.45e12
    fp32 = h100.vector_rate("fp32")
    assert fp32 is not None and fp32 / FMA_FLOPS == pytest.approx(per_op, rel=2e-3)
    assert h100.peak("bf16") / per_op == pytest.approx(30, rel=0.02)  # 29.6


def test_book_gpu_q5_smem_and_registers() -> None:
    """GPU chapter, Quiz 1 Q5: 256kB of SMEM and 256kB of registers per SM, about 33 MB of each
    over 132 SMs and about 66 MB together (the book's kB: 132 x 256 KiB = 34.6e6 B each)."""
    oc = load_chip("h100").on_chip
    assert oc.cores == 132 and oc.l1_bytes_per_core == oc.registers_bytes_per_core == 256 * 1024
    smem = oc.cores * oc.l1_bytes_per_core
    regs = oc.cores * oc.registers_bytes_per_core
    assert smem == regs == 34_603_008
    assert smem + regs == pytest.approx(66e6, rel=0.05)


def test_book_gpu_q6_b200_clock() -> None:
    """GPU chapter, Quiz 1 Q6: 80 TFLOP/s of vector fp32 (NVIDIA's Blackwell page, given by the
    question) over 18944 CUDA cores x 2 FLOPs per FMA = 37888 FLOPs/cycle -> 2.1 GHz."""
    per_cycle = _alus("b200") * FMA_FLOPS
    assert per_cycle == 37888
    assert 80e12 / per_cycle == pytest.approx(2.11e9, rel=1e-3)


def test_book_gpu_q7_fp32_add_on_h100() -> None:
    """GPU chapter, Quiz 1 Q7: adding two fp32[N] vectors does N FLOPs over 12N bytes
    (intensity 1/12), far below the vector units' intensity (33.5e12 / 3.35e12 = 10); for
    N = 2**30 the roofline is 12N / 3.35e12 = 3.85 ms (the book measured 4.1 ms)."""
    n = 2**30
    r = einsum("x[N] * y[N] -> z[N]", {"N": n}, "h100", "fp32")
    assert r.compute_unit == "vector"
    assert r.flops == n and r.bytes["total"] == 12 * n
    assert r.intensity_flop_per_byte == pytest.approx(1 / 12)
    h100 = load_chip("h100")
    assert (h100.vector_rate("fp32") or 0) / FMA_FLOPS / h100.mem_bytes_per_s == pytest.approx(
        10, rel=0.01
    )
    assert r.t_compute_s == pytest.approx(n / 66.9e12)  # the CUDA cores, not 989e12 or 67e12
    assert r.t_lower_s == pytest.approx(12 * n / 3.35e12) == pytest.approx(3.846e-3, rel=1e-3)


def test_book_tpu_vpu_quiz() -> None:
    """TPU chapter, appendix (VPU) quiz: a TPU v5p does 8 x 128 x 4 x 2 FLOPs/cycle over its two
    TensorCores at about 1.75 GHz: 1.4e13 vector FLOP/s, far below its MXUs."""
    v5p = load_chip("tpu-v5p")
    per_cycle = _alus("tpu-v5p")
    assert per_cycle == 8 * 128 * 4 * 2
    assert per_cycle * (v5p.on_chip.clock_hz or 0) == pytest.approx(1.4e13, rel=0.03)
    assert v5p.vector_rate("fp32") == 1.4e13
    assert v5p.vector_rate("bf16") == 1.4e13  # the VPU works in fp32: bf16 takes that rate
    assert v5p.peak("bf16") / 1.4e13 > 10


def test_vector_rate_falls_back_to_fp32_and_none() -> None:
    h100 = load_chip("h100")
    assert h100.vector_rate("bf16") == 133.8e12 and h100.vector_rate("int32") == 33.5e12
    assert load_chip("b200").vector_rate("bf16") == 75e12  # only fp32 given
    assert load_chip("tpu-v6e").vector_rate("bf16") is None  # no source found: none


def test_non_matrix_einsums() -> None:
    assert on_vector_units(parse_einsum("x[B,D] * g[D] -> y[B,D]"))  # elementwise
    assert on_vector_units(parse_einsum("x[B,D] * y[B,D] -> z[B]"))  # batched dot product
    assert not on_vector_units(parse_einsum("x[B,D] * w[D,F] -> y[B,F]"))
    assert not on_vector_units(parse_einsum("x[B,D] * w[D] -> y[B]"))  # matrix-vector: matrix path
    # on a TPU v5e, fp32 has no MXU peak but the VPU runs it: 1 TensorCore x 4096 ALUs x 1.5 GHz
    r = einsum("x[B,D] * y[B,D] -> z[B,D]", {"B": 1024, "D": 1024}, "tpu-v5e", "fp32")
    assert r.hardware.flops_per_s == pytest.approx(4096 * 1.5e9)
    assert r.to_dict()["compute_unit"] == "vector"
    mm = einsum("x[B,D] * w[D,F] -> y[B,F]", {"B": 64, "D": 64, "F": 64}, "h100")
    assert "compute_unit" not in mm.to_dict() and mm.hardware.flops_per_s == 989.4e12


def _user_chip(**extra: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "name": "slow-vpu",
        "kind": "tpu",
        "peak_flops_per_s": {"bf16": 100e12},
        "memory": {"capacity_bytes": 16e9, "bytes_per_s": 1e12},
        "vector_flops_per_s": {"fp32": 1e12, "int32": 5e11},
    }
    data.update(extra)
    return data


def test_vector_kernel_is_the_longer_of_bytes_and_flops() -> None:
    chip = chip_from_dict(_user_chip())
    floor = vector_kernel_s(chip, 0.0, 0.0, "bf16", cuda_graphs=False)
    # 1 MB at 1e12 B/s = 1 us; 1e7 FLOPs at 1e12 (bf16 takes the fp32 rate) = 10 us: FLOP-bound
    t = vector_kernel_s(chip, 1e6, 1e7, "bf16", cuda_graphs=False)
    assert t - floor == pytest.approx(10e-6)
    t = vector_kernel_s(chip, 1e7, 1e6, "bf16", cuda_graphs=False)
    assert t - floor == pytest.approx(1e7 / mem_rate(chip))  # 10 us of bytes
    assert vector_kernel_s(chip, 0.0, 1e6, "int32", cuda_graphs=False) - floor == pytest.approx(
        2e-6
    )


def test_memop_flops_by_hand() -> None:
    """A layer norm over 4096 x 8192 bf16 elements: 7 FLOPs each forward, twice that backward."""
    e = 4096 * 8192
    op = MemOp("layer_norm", 2 * e, 2 * e, e)
    assert op.forward_flops == 7 * e == VECTOR_FLOPS["layer_norm"] * e
    assert op.backward_flops == 14 * e
    assert MemOp("embedding", 2 * e, 2 * e).forward_flops == 0


def test_loader_reads_the_new_fields_and_rejects_bad_ones() -> None:
    on_chip = {"cores": 2, "vector_lanes_per_core": 4096, "registers_bytes_per_core": 262144}
    chip = chip_from_dict(_user_chip(on_chip=on_chip))
    assert chip.on_chip.vector_lanes_per_core == 4096
    assert chip.on_chip.registers_bytes_per_core == 262144.0
    assert chip.vector_flops_per_s == {"fp32": 1e12, "int32": 5e11}
    bad = _user_chip()
    bad["peak_flops_per_s"] = {"bf16": 100e12, "int32": 1e12}  # int32 is a vector-only key
    with pytest.raises(InputError, match="int32"):
        chip_from_dict(bad)
    bad = copy.deepcopy(_user_chip())
    bad["memory"]["reported_bytes"] = -1
    with pytest.raises(InputError, match="reported_bytes"):
        chip_from_dict(bad)
    bad = _user_chip(on_chip={"vector_lanes_per_core": 1.5})
    with pytest.raises(InputError, match="vector_lanes_per_core"):
        chip_from_dict(bad)


# name -> MiB the device reports (nvidia-smi, rocminfo), as the chip files cite them
REPORTED_MIB = {
    "h100-sxm": 81559,
    "h200": 143771,
    "b200": 183359,
    "a100-80gb": 81920,
    "a100-40gb": 40960,
    "l40s": 46068,
    "mi300x": 196592,  # rocminfo: 201,310,208 KB = 206,141,652,992 B
}


@pytest.mark.parametrize(("name", "mib"), sorted(REPORTED_MIB.items()))
def test_reported_capacity(name: str, mib: int) -> None:
    chip = load_chip(name)
    assert chip.reported_capacity_bytes == mib * 2**20 == chip.usable_capacity_bytes
    assert chip.sources["memory.reported_bytes"]
    # within 10% of the marketed figure (the B200's is the 180 GB shipping figure)
    assert chip.reported_capacity_bytes == pytest.approx(chip.capacity_bytes, rel=0.1)


def test_unreported_capacity_is_the_marketed_one() -> None:
    v5e = load_chip("tpu-v5e")
    assert v5e.reported_capacity_bytes is None and v5e.usable_capacity_bytes == 16e9


def test_fits_check_uses_the_reported_capacity() -> None:
    """82 GB of weights (41e9 bf16 parameters) do not fit the marketed 80 GB of an H100 but do fit
    the 81,559 MiB = 85.52 GB it reports."""
    from shardline.workload.stack import memory_check
    from shardline.workload.workload import Workload, matmul_layer

    k = n = 202_485  # 2 B x k x n = 82.0e9 B of weights
    w = Workload("big", (matmul_layer("mm", 1, k, n),), batch_dim="M")
    h100 = load_chip("h100")
    check = memory_check(w, h100.usable_capacity_bytes)
    assert check.capacity_bytes == 81559 * 2**20 == 85_520_809_984
    assert check.fits and math.isclose(check.total_bytes, 2 * k * n + 2 * (k + n), rel_tol=0.01)
    assert check.total_bytes > h100.capacity_bytes


def test_hw_show_lists_both_capacities_and_the_vector_units(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from shardline.cli.main import main

    assert main(["hw", "show", "h100"]) == 0
    text = capsys.readouterr().out
    assert "HBM capacity (marketed)" in text and "80 GB" in text
    assert "HBM capacity (device reports)" in text and "81,559 MiB" in text
    assert "vector units" in text and "66.9 TFLOP/s" in text
