"""The rest of the chip for the three chip files that came last: Trainium2's vector engines and
engine fields, and the TPU v6e / TPU7x fields Google publishes (VMEM, MXU count and width). The
values are re-derived here by hand from the figures their sources give; the TPU VPU rates are
absent because neither chip's VPU ALU count nor clock is published."""

from __future__ import annotations

import pytest

from shardline.hardware import load_chip
from shardline.ops.roofline import einsum

MIB = 2**20

# AWS Neuron docs, NeuronCore-v3 page: per-chip totals of the engines beside the Tensor Engine
VECTOR_ENGINE_FP32 = 1.0e12  # "Vector Engines ... deliver a total of 1 TFLOPS of FP32"
SCALAR_ENGINE_FP32 = 1.2e12  # "Scalar Engines ... deliver a total of 1.2 TFLOPS of FP32"
# NKI Trainium2 guide, compute engine table (and the Trainium/Inferentia2 guide: 128 lanes each)
NEURON_CORES, LANES = 8, 128
VECTOR_HZ, SCALAR_HZ, TENSOR_HZ = 0.96e9, 1.2e9, 2.4e9


def test_trainium2_vector_rate_is_vector_plus_scalar_engines() -> None:
    trn2 = load_chip("trainium2")
    assert trn2.vector_rate("fp32") == VECTOR_ENGINE_FP32 + SCALAR_ENGINE_FP32 == 2.2e12
    # bf16 takes the fp32 rate: the Vector Engine computes in fp32 whatever the dtype
    assert trn2.vector_rate("bf16") == 2.2e12
    # the published totals agree with lanes x clock over the 8 NeuronCores (one op per lane-cycle)
    vector = NEURON_CORES * LANES * VECTOR_HZ  # 0.983e12
    scalar = NEURON_CORES * LANES * SCALAR_HZ  # 1.229e12
    assert vector == pytest.approx(VECTOR_ENGINE_FP32, rel=0.02)
    assert scalar == pytest.approx(SCALAR_ENGINE_FP32, rel=0.03)
    assert vector + scalar == pytest.approx(2.2e12, rel=0.01)
    assert trn2.sources["vector_flops_per_s.fp32"].startswith("AWS Neuron docs")


def test_trainium2_engine_fields() -> None:
    oc = load_chip("trainium2").on_chip
    assert oc.cores == NEURON_CORES
    assert oc.clock_hz == TENSOR_HZ
    assert oc.vector_lanes_per_core == LANES
    assert oc.tensor_cores_per_core == 1
    assert oc.shared_bytes_per_core == 128 * 224 * 1024 == 28 * MIB  # 128 partitions x 224 KiB
    # the Tensor Engine clock reproduces AWS's 79 BF16 TFLOPS per NeuronCore-v3 (667 per chip):
    # 128 x 128 processing elements x 2 FLOPs per multiply-add x 2.4 GHz
    per_core = 128 * 128 * 2 * TENSOR_HZ
    assert per_core == pytest.approx(79e12, rel=0.01)
    # AWS's chip figure (667e12) is 6% above 8 x its own per-core 79e12 (632e12);
    # 8 x 78.6e12 = 629e12
    assert NEURON_CORES * per_core == pytest.approx(667e12, rel=0.06)


def test_tpu_v6e_and_v7_fields_from_jax_tpu_info() -> None:
    """jax tpu_info, per TensorCore: v6e 128 MiB VMEM, 2 MXUs of 256; TPU7x 64 MiB, 2 of 256."""
    v6e, v7 = load_chip("tpu-v6e").on_chip, load_chip("tpu-v7").on_chip
    assert (v6e.cores, v6e.shared_bytes_per_core, v6e.tensor_cores_per_core) == (1, 128 * MIB, 2)
    assert (v7.cores, v7.shared_bytes_per_core, v7.tensor_cores_per_core) == (2, 64 * MIB, 2)
    assert v6e.matrix_unit_elements == v7.matrix_unit_elements == 256
    assert v7.align_bytes == 256 * 2  # 256 bf16 elements, as on v6e
    # chip totals: v6e 2 MXUs and 128 MiB VMEM; TPU7x 4 MXUs and 128 MiB VMEM over 2 TensorCores
    assert v7.cores * v7.tensor_cores_per_core == 4
    assert v7.cores * v7.shared_bytes_per_core == 128 * MIB


@pytest.mark.parametrize("name", ["tpu-v6e", "tpu-v7"])
def test_tpu_vpu_rate_not_published(name: str) -> None:
    chip = load_chip(name)
    assert chip.vector_flops_per_s == {} and chip.vector_rate("fp32") is None
    assert chip.on_chip.clock_hz is None and chip.on_chip.vector_lanes_per_core is None


def test_elementwise_einsum_on_trainium2_prices_on_the_vector_engines() -> None:
    """x[B,D] * g[D] -> y[B,D]: B*D FLOPs at 2.2e12, bytes at 2.9e12 B/s (bf16: 2 B each)."""
    b, d = 4096, 8192
    r = einsum("x[B,D] * g[D] -> y[B,D]", {"B": b, "D": d}, "trainium2", "bf16")
    assert r.compute_unit == "vector"
    assert r.hardware.flops_per_s == 2.2e12
    assert r.t_compute_s == pytest.approx(b * d / 2.2e12)  # 15.3 us, not 50 ns on the Tensor Engine
    assert r.t_lower_s == pytest.approx((2 * b * d * 2 + 2 * d) / 2.9e12)  # memory-bound: 46.3 us
