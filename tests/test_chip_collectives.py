"""Collective figures in the chip files: each equals its cited published measurement divided by the
cited line rate, with the arithmetic written out here.

collective_bus_efficiency = ring busbw (nccl-tests, NVLS off) / (links x one-way link rate).
in_network_reduction_efficiency = in-switch all-reduce algbw / (links x one-way link rate), where
algbw = busbw x n / (2(n-1)) for nccl-tests all_reduce_perf on n ranks.
Figures are stored to three decimals, so each is compared after rounding the arithmetic to three.
"""

from __future__ import annotations

import pytest

from shardline.hardware import load_chip


def _algbw(busbw: float, n: int) -> float:
    """nccl-tests all-reduce: busbw = algbw x 2(n-1)/n."""
    return busbw * n / (2 * (n - 1))


def _line_rate(chip_name: str) -> float:
    ic = load_chip(chip_name).interconnect
    assert ic is not None
    return ic.link_bytes_per_s * ic.links_per_chip


# chip -> (expected bus efficiency, cited line rate in B/s), each from the source named beside it.
BUS: dict[str, tuple[float, float]] = {
    # NVIDIA GTC25 S72583 slide (8x A100: 232 GB/s) and stas00/ml-engineering network/README.md
    # case study (8x A100: 235 GB/s): mean 233.5 GB/s over 12 x 25 GB/s
    "a100-40gb": ((232e9 + 235e9) / 2 / 300e9, 12 * 25e9),
    "a100-80gb": ((232e9 + 235e9) / 2 / 300e9, 12 * 25e9),
    # stas00/ml-engineering network/README.md: 8x H200, NCCL_NVLS_ENABLE=0, 16 GiB: 367.2 GB/s
    "h200": (367.2e9 / 450e9, 18 * 25e9),
    # stas00 (8x B200, NVLS off, 8 GiB): 682.2 GB/s; together-nccl-tests (Ring, 32 GiB): 698.39
    "b200": ((682.2e9 + 698.39e9) / 2 / 900e9, 18 * 50e9),
    # NVIDIA/nccl issue 2140: 8x B300, NVLS off: busbw 695 GB/s
    "b300": (695e9 / 900e9, 18 * 50e9),
    # NVIDIA GTC25 S72583 slide: 32 GPUs of a GB200 NVL72, without SHARP: 680 GB/s
    "gb200": (680e9 / 900e9, 18 * 50e9),
    # kvcache-ai/Mooncake PR 3484: 8x H20, 1 GiB, out of place: busbw 357.73 GB/s
    "h20": (357.73e9 / 450e9, 18 * 25e9),
    # hisohara/ai-scripts rccl-tests, 8x MI325X, NCCL_ALGO=Ring, 4-16 GiB: busbw ~318 GB/s
    "mi325x": (318e9 / 448e9, 7 * 64e9),
}

# chip -> (expected in-switch efficiency, cited line rate in B/s).
IN_SWITCH: dict[str, tuple[float, float]] = {
    # stas00/ml-engineering network/README.md: 8x H200, NVLS, 16 GiB: busbw 480.0 GB/s
    "h200": (_algbw(480.0e9, 8) / 450e9, 18 * 25e9),
    # stas00 (8 GiB): 838.0 GB/s; together-nccl-tests (32 GiB): 844.35 GB/s; mean busbw, 8 ranks
    "b200": (_algbw((838.0e9 + 844.35e9) / 2, 8) / 900e9, 18 * 50e9),
    # NVIDIA/nccl issue 2140: 8x B300, NVLS on: algbw 483 GB/s (busbw 845)
    "b300": (483e9 / 900e9, 18 * 50e9),
    # NVIDIA/nccl issue 1374: 8x H800 all-reduce busbw 215 GB/s (NVLS) over 8 x 25 GB/s
    "h800": (_algbw(215e9, 8) / 200e9, 8 * 25e9),
    # coreweave/nccl-tests PR 43: full NVL72 rack (72 ranks), 4 GiB: algbw 425.49 GB/s
    "gb200": (425.49e9 / 900e9, 18 * 50e9),
}


@pytest.mark.parametrize("name", sorted(BUS))
def test_bus_efficiency_is_the_cited_busbw_over_the_line_rate(name: str) -> None:
    expected, line_rate = BUS[name]
    assert _line_rate(name) == pytest.approx(line_rate)
    eff = load_chip(name).achievable.collective_bus_efficiency
    assert eff == pytest.approx(round(expected, 3), abs=1e-12)


@pytest.mark.parametrize("name", sorted(IN_SWITCH))
def test_in_switch_efficiency_is_the_cited_algbw_over_the_line_rate(name: str) -> None:
    expected, line_rate = IN_SWITCH[name]
    assert _line_rate(name) == pytest.approx(line_rate)
    eff = load_chip(name).achievable.in_network_reduction_efficiency
    assert eff == pytest.approx(round(expected, 3), abs=1e-12)


def test_hand_arithmetic() -> None:
    """The rounded figures, spelled out once more so a reader can check them without a run."""
    assert round(233.5 / 300, 3) == 0.778  # A100
    assert round(367.2 / 450, 3) == 0.816  # H200 ring
    assert round(480.0 * 8 / 14 / 450, 3) == 0.61  # H200 NVLS: algbw 274.3 GB/s
    assert round(690.295 / 900, 3) == 0.767  # B200 ring
    assert round(841.175 * 8 / 14 / 900, 3) == 0.534  # B200 NVLS: algbw 480.7 GB/s
    assert round(695 / 900, 3) == 0.772 and round(483 / 900, 3) == 0.537  # B300
    assert round(680 / 900, 3) == 0.756  # GB200 NVL72, 32 GPUs
    assert round(215 * 8 / 14 / 200, 3) == 0.614  # H800 NVLS
    assert round(357.73 / 450, 3) == 0.795  # H20 ring
    assert round(318 / 448, 2) == 0.71  # MI325X ring (stored to two decimals)
