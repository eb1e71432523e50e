"""The chips added to the catalog in 2026: each loads, its bf16 dense peak and HBM bandwidth are the
cited figures (written out here with their source and arithmetic), and every number has a source."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

import shardline.hardware
from shardline.calibrate import catalog_match
from shardline.hardware import load_chip, unsourced_fields

CATALOG_DIR = Path(shardline.hardware.__file__).parent / "catalog"

# name -> (bf16 dense FLOP/s, HBM bytes/s), each from the source named beside it.
CITED: dict[str, tuple[float, float]] = {
    # NVIDIA GB200 NVL72: FP16/BF16 360 PFLOPS sparse per rack -> 360e15 / 72 / 2; 576 TB/s / 72
    "gb200": (360e15 / 72 / 2, 576e12 / 72),
    # NVIDIA HGX B300: FP16/BF16 36 PFLOPS sparse per 8 GPUs -> 36e15 / 8 / 2; 8 TB/s per GPU
    "b300": (36e15 / 8 / 2, 8.0e12),
    # NVIDIA H100 datasheet, PCIe: BF16 1,513 TFLOPS sparse -> 756e12 dense; 2 TB/s
    "h100-pcie": (756e12, 2.0e12),
    # NVIDIA H800 SXM5 (H100 SXM5 compute): 1,979 TFLOPS sparse -> 989.4e12; 3.35 TB/s HBM3
    "h800": (989.4e12, 3.35e12),
    # NVIDIA H20: 148 TFLOPS BF16 dense; 4.0 TB/s HBM3
    "h20": (148e12, 4.0e12),
    # NVIDIA L40S datasheet: BF16 362.05 TFLOPS dense (733 sparse); 864 GB/s GDDR6
    "l40s": (362e12, 864e9),
    # ROCm MI300 peak table (same CDNA 3 compute): 1307.4 TFLOPS; AMD MI325X 6 TB/s HBM3E
    "mi325x": (1307.4e12, 6.0e12),
    # MI355X: 2.4 GHz x 1024 Matrix Cores x 512 FMA x 2 (AMD: 2.5 PFLOPS); 8 TB/s HBM3E
    "mi355x": (2.4e9 * 1024 * 512 * 2, 8.0e12),
    # Google Cloud TPU7x docs: 2307 TFLOPs BF16 per chip; 7380 GB/s HBM per chip
    "tpu-v7": (2307e12, 7380e9),
    # AWS Neuron docs, Trainium2: 667 BF16 TFLOPS; 2.9 TB/s
    "trainium2": (667e12, 2.9e12),
}


@pytest.mark.parametrize("name", sorted(CITED))
def test_new_chip_loads_with_cited_bf16_peak_and_hbm_bandwidth(name: str) -> None:
    chip = load_chip(name)
    bf16, hbm = CITED[name]
    assert chip.name == name
    assert chip.peak("bf16") == pytest.approx(bf16, rel=1e-4)
    assert chip.mem_bytes_per_s == pytest.approx(hbm, rel=1e-12)


@pytest.mark.parametrize("name", sorted(CITED))
def test_every_number_of_a_new_chip_has_a_source(name: str) -> None:
    data = tomllib.loads((CATALOG_DIR / f"{name}.toml").read_text(encoding="utf-8"))
    assert data["schema"] == 1 and data["name"] == name
    assert unsourced_fields(data) == []


def test_capacities_are_the_vendor_figures() -> None:
    # GB = 1e9 B; Trainium2's 96 GiB is binary, as the Neuron docs write it
    caps = {n: load_chip(n).capacity_bytes for n in CITED}
    assert caps == {
        "gb200": 186e9,
        "b300": 288e9,
        "h100-pcie": 80e9,
        "h800": 80e9,
        "h20": 96e9,
        "l40s": 48e9,
        "mi325x": 256e9,
        "mi355x": 288e9,
        "tpu-v7": 192e9,
        "trainium2": 96 * 2**30,
    }


def test_scale_up_domains() -> None:
    gb200 = load_chip("gb200").interconnect
    assert gb200 is not None and gb200.scale_up_devices == 72 and gb200.in_network_reduction
    # NVLink 5: 18 links x 50 GB/s one-way = 900 GB/s (1.8 TB/s both ways)
    assert gb200.egress_bytes_per_s == pytest.approx(18 * 50e9)
    h800 = load_chip("h800").interconnect
    # 400 GB/s bidirectional = 8 links x 25 GB/s one-way x 2
    assert h800 is not None and h800.egress_bytes_per_s * 2 == pytest.approx(400e9)
    h20 = load_chip("h20").interconnect
    assert h20 is not None and h20.egress_bytes_per_s * 2 == pytest.approx(900e9)
    for name, one_way in (("l40s", 64e9 / 2), ("h100-pcie", 128e9 / 2)):  # PCIe Gen4 / Gen5 x16
        ic = load_chip(name).interconnect
        assert ic is not None and (ic.topology, ic.links_per_chip) == ("switch", 1)
        assert ic.link_bytes_per_s == one_way


def test_tpu_v7_ironwood_torus() -> None:
    chip = load_chip("ironwood")
    ic = chip.interconnect
    assert chip.name == "tpu-v7" and chip.peak("fp8") == 4614e12
    assert ic is not None and ic.topology == "torus" and ic.torus_dims == (16, 24, 24)
    assert ic.scale_up_devices == 16 * 24 * 24 == 9216  # Cloud TPU7x docs: 9,216 chips per pod
    # 1200 GB/s bidirectional ICI per chip over the 6 links of a 3D torus
    assert ic.link_bytes_per_s == pytest.approx(1200e9 / 2 / 6)
    assert ic.scale_out is not None and ic.scale_out.bytes_per_s_per_device == 100e9 / 8


def test_tpu_v7_achievable_matmul_is_two_tensorcores_of_the_published_gemm() -> None:
    # accelerator-microbenchmarks Ironwood README: 956.38 TFLOP/s per device (one TensorCore) at
    # m = n = k = 32768; two TensorCores per chip -> 1912.76e12, 0.829 of the 2307e12 peak.
    from shardline.ops.achievable import achievable_rate

    chip = load_chip("tpu-v7")
    assert chip.achievable.matmul_flops_per_s["bf16"] == pytest.approx(2 * 956.38e12, rel=1e-4)
    # fp8 has no published GEMM: its peak at the measured bf16 efficiency, 4614e12 x 0.829
    rate, _ = achievable_rate(chip, "fp8")
    assert rate == pytest.approx(4614e12 * 2 * 956.38 / 2307, rel=1e-3)


def test_trainium2_neuronlink_torus() -> None:
    chip = load_chip("trn2")
    ic = chip.interconnect
    assert chip.name == "trainium2" and chip.on_chip.cores == 8
    assert ic is not None and ic.torus_dims == (4, 4) and ic.scale_up_devices == 16
    # Trn2 docs: 1,024 GB/s per device over the 4 torus links, read as both directions together
    assert ic.link_bytes_per_s == pytest.approx(1024e9 / 4 / 2)
    assert ic.scale_out is not None and ic.scale_out.bytes_per_s_per_device == 3200e9 / 8 / 16


@pytest.mark.parametrize(
    ("alias", "name"),
    [
        ("GB200-NVL72", "gb200"),
        ("mi325", "mi325x"),
        ("ironwood", "tpu-v7"),
        ("trn2", "trainium2"),
        ("H800", "h800"),
        ("h100_pcie", "h100-pcie"),
        ("NVIDIA L40S", "l40s"),
        ("AMD MI355X", "mi355x"),
        ("dgx-b300", "b300"),
    ],
)
def test_aliases(alias: str, name: str) -> None:
    assert load_chip(alias).name == name


@pytest.mark.parametrize(
    ("device", "chip"),
    [
        ("NVIDIA H100 80GB HBM3", "h100-sxm"),  # the SXM part's name has no 'sxm' in it
        ("NVIDIA H100 PCIe", "h100-pcie"),
        ("NVIDIA H800", "h800"),
        ("NVIDIA H20", "h20"),
        ("NVIDIA L40S", "l40s"),
        ("NVIDIA B300 SXM6 AC", "b300"),
    ],
)
def test_calibrate_matches_the_new_gpus(device: str, chip: str) -> None:
    found = catalog_match(device)
    assert found is not None and found.name == chip
