"""benchmarks/data/collectives_published.csv and collectives_heldout.csv: published nccl-tests /
rccl-tests sweeps (the held-out file has the same columns and the same checks).

Every row is one line of an nccl-tests (or rccl-tests) table copied as printed, with the
out-of-place time and bandwidths. nccl-tests defines (doc/PERFORMANCE.md of NVIDIA/nccl-tests):

    algbw = size / time
    busbw = algbw * 2 (n - 1) / n   for all_reduce
    busbw = algbw * (n - 1) / n     for all_gather, reduce_scatter and all_to_all

with n the number of ranks (GPUs per node times nodes) and size the "size" column in bytes.
The table prints bandwidths with two decimals, so the check allows 3 % or 0.02 GB/s.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "benchmarks" / "data" / "collectives_published.csv"
HELD_OUT = ROOT / "benchmarks" / "data" / "collectives_heldout.csv"
NOTES = ROOT / "benchmarks" / "data" / "collectives_published.md"
COLUMNS = [
    "case_id", "source", "library", "library_version", "chip", "gpus_per_node", "nodes",
    "gpus_per_process", "nics_per_node", "nic_gbps", "scale_out", "host_cpu", "env", "collective",
    "size_bytes", "dtype", "time_us", "algbw_gb_s", "busbw_gb_s", "tuned", "placement", "source_id",
]  # fmt: skip
# Columns that describe the system of a sweep: one value per case_id.
SWEEP_COLUMNS = COLUMNS[1:14] + ["tuned", "placement", "source_id"]
BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "all_to_all": lambda n: (n - 1) / n,
}
SCALE_OUT = {"none", "ib", "roce", "efa", "tcpx", "tcpxo", "unknown"}
REL_TOL = 0.03
ABS_TOL_GB_S = 0.02

HEADERS: list[list[str]] = []
ROWS: list[dict[str, str]] = []
for _path in (DATA, HELD_OUT):
    with _path.open(encoding="utf-8", newline="") as _f:
        _reader = csv.DictReader(_f)
        HEADERS.append(list(_reader.fieldnames or []))
        ROWS += list(_reader)
CASES: dict[str, list[dict[str, str]]] = defaultdict(list)
for _row in ROWS:
    CASES[_row["case_id"]].append(_row)


def _close(value: float, expected: float) -> bool:
    return abs(value - expected) <= max(ABS_TOL_GB_S, REL_TOL * expected)


def _ranks(row: dict[str, str]) -> int:
    return int(row["gpus_per_node"]) * int(row["nodes"])


def test_header_and_rows() -> None:
    assert HEADERS == [COLUMNS, COLUMNS]
    assert len(ROWS) > 100
    for row in ROWS:
        assert None not in row.values(), f"{row['case_id']}: ragged row"


def test_every_row_has_a_source_and_known_fields() -> None:
    for row in ROWS:
        assert row["source"].startswith("https://github.com/"), row["case_id"]
        assert row["library"] in ("nccl", "rccl")
        assert row["collective"] in BUS_FACTOR
        assert row["scale_out"] in SCALE_OUT
        assert row["host_cpu"] in ("", "intel", "amd", "arm"), row["case_id"]
        in_node = row["nodes"] == "1"
        assert row["placement"] == ("in_node" if in_node else "multi_node")
        assert (row["scale_out"] == "none") == in_node, row["case_id"]
        assert int(row["size_bytes"]) > 0 and float(row["time_us"]) > 0
        assert row["chip"] and row["dtype"] in ("float", "double", "half", "bfloat16")


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_sweep_describes_one_system(case_id: str) -> None:
    rows = CASES[case_id]
    for column in SWEEP_COLUMNS:
        assert len({row[column] for row in rows}) == 1, f"{case_id}: {column} varies"


@pytest.mark.parametrize("case_id", sorted(CASES))
def test_bandwidths_follow_nccl_tests_definitions(case_id: str) -> None:
    for row in CASES[case_id]:
        size_b = int(row["size_bytes"])
        time_s = float(row["time_us"]) * 1e-6
        algbw, busbw = float(row["algbw_gb_s"]), float(row["busbw_gb_s"])
        factor = BUS_FACTOR[row["collective"]](_ranks(row))
        expected_algbw = size_b / time_s / 1e9
        where = f"{case_id} at {size_b} B"
        assert _close(algbw, expected_algbw), f"{where}: algbw {algbw} vs {expected_algbw:.3f}"
        assert _close(busbw, expected_algbw * factor), f"{where}: busbw {busbw}"
        assert _close(busbw, algbw * factor), f"{where}: busbw {busbw} vs algbw {algbw}"


def test_hand_checked_rows() -> None:
    """Two rows worked by hand from the printed tables.

    A3-Mega, 2 x 8 H100, 8 GiB: 8589934592 B / 47535 us = 180.71 GB/s; busbw = 180.71 * 2 * 15/16
    = 338.83 GB/s (printed 338.82). MI300X, 2 x 8 over RoCE, 16 B: 218.7 us, the two-node floor.
    """
    a3 = {r["size_bytes"]: r for r in CASES["h100x8x2-nccl-allreduce-a3mega-tcpxo"]}
    row = a3["8589934592"]
    assert (row["time_us"], row["algbw_gb_s"], row["busbw_gb_s"]) == ("47535", "180.71", "338.82")
    algbw_gb_s = 8589934592 / 47535e-6 / 1e9
    busbw_gb_s = 180.71 * 2 * 15 / 16
    assert algbw_gb_s == pytest.approx(180.71, abs=0.005)
    assert busbw_gb_s == pytest.approx(338.83, abs=0.005)
    mi = {r["size_bytes"]: r for r in CASES["mi300x8x2-rccl-allreduce-aac10"]}
    assert mi["16"]["time_us"] == "218.7"


def test_sizes_increase_within_a_sweep() -> None:
    for case_id, rows in CASES.items():
        if "interleaved" in rows[0]["env"]:
            continue  # two runs printed into one log: each size appears twice
        sizes = [int(row["size_bytes"]) for row in rows]
        assert sizes == sorted(sizes) and len(set(sizes)) == len(sizes), case_id


def test_coverage_in_node_and_multi_node() -> None:
    placements = defaultdict(set)
    for case_id, rows in CASES.items():
        placements[rows[0]["placement"]].add(case_id)
    assert len(placements["in_node"]) >= 6
    assert len(placements["multi_node"]) >= 4
    chips_in_node = {CASES[c][0]["chip"] for c in placements["in_node"]}
    assert {"h100-sxm", "mi300x"} <= chips_in_node


def test_every_case_has_a_note() -> None:
    text = NOTES.read_text(encoding="utf-8")
    for case_id in CASES:
        assert f"`{case_id}`" in text, f"{case_id} is not described in {NOTES.name}"


def test_a_script_s_pinned_channels_and_protocol_are_priced() -> None:
    """Google's GPUDirect-TCPX nccl-tests script (google/nccl-plugin-gpudirecttcpx
    scripts/run-nccl.sh, commit 91e8693) pins NCCL_ALGO=Ring, NCCL_PROTO=Simple and 8 channels of
    4 MiB buffers; the benchmark reads the pins from a row's env text, and the pricing ramps over
    them. An 8 MiB all-gather of 16 ranks over 2 nodes of 8 H100 with 4 x 200 Gb/s TCPX NICs, by
    hand: node egress 4 NICs x 25e9 B/s (no TCPX efficiency figure), algbw = busbw x 16/15;
    latency = base 8.4 + 14 intra steps x max(NVLink 3.4, 3 x net overhead 1.0) + 1 network
    step x max(NET Simple 14, fabric 20) us = 8.4 + 47.6 + 20 = 76 us;
    t = 76 us + V / (algbw x V / (V + 8 x 4 MiB))."""
    import sys

    sys.path.insert(0, str(ROOT / "benchmarks"))
    import bench_collectives

    from shardline.collectives import NetworkOptions, collective_cost
    from shardline.hardware import load_chip
    from shardline.hardware.cluster import chip_with_cluster

    env = (
        "NCCL_ALGO=Ring NCCL_PROTO=Simple NCCL_MIN_NCHANNELS=8 NCCL_MAX_NCHANNELS=8 "
        "NCCL_BUFFSIZE=4194304"
    )
    assert bench_collectives._pinned(env) == ("Simple", 8)
    assert bench_collectives._pinned("NCCL_MIN_NCHANNELS=4 NCCL_MAX_NCHANNELS=8") == (None, None)
    chip = chip_with_cluster(
        load_chip("h100-sxm"),
        gpus_per_node=8,
        nics_per_node=4,
        nic_bytes_per_s=25e9,
        scale_out="tcpx",
        host_cpu="intel",
    )
    v = 8388608
    options = NetworkOptions(protocol="Simple", channels=8)
    cost = collective_cost("all_gather", v, 16, chip, algorithm="ring", options=options)
    algbw = 100e9 * 16 / 15
    expected = (8.4 + 14 * 3.4 + 20) * 1e-6 + v / (algbw * v / (v + 8 * 4 * 2**20))
    assert cost.predicted_s == pytest.approx(expected, rel=1e-9)
