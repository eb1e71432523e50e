"""`shardline explain plan`: pipeline against tensor parallelism for seed 003's 72-layer stack on
2 x A100 40 GB, its numbers derived by hand here.

The stack (examples/seed003_stack.toml): M = 8192 rows, N = 8192, K = 32768, bf16 (2 B), 36 blocks
of type 1 (x[M,N] w[N,K] -> y[M,K]) and type 2 (y[M,K] w[K,N] -> z[M,N]), one forward pass.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardline.cli.main import main
from shardline.io.workload_toml import load_workload
from shardline.planning.compare_pp_tp import (
    PpTpComparison,
    batch_grid,
    compare_pp_tp,
    winners,
)

ROOT = Path(__file__).resolve().parent.parent
SEED003 = str(ROOT / "examples" / "seed003_stack.toml")

M, N, K, S = 8192, 8192, 32768, 2  # rows, width, hidden width, bytes per bf16 element
BLOCKS, LAYERS, D = 36, 72, 2
PEAK = 312e12  # A100 dense bf16 FLOP/s (NVIDIA A100 datasheet), catalog a100-40gb.toml
LINK_BYTES_PER_S = 12 * 25e9  # 12 NVLink 3 links x 25 GB/s one-way (catalog a100-40gb.toml)
HOP_S = 1e-6  # NVLink hop latency (catalog a100-40gb.toml)
CAPACITY = 40960 * 2**20  # the 40,960 MiB nvidia-smi reports (memory.reported_bytes)

WEIGHTS = LAYERS * N * K * S  # every layer's weight is N x K (type 1) or K x N (type 2)
FLOPS = LAYERS * 2 * M * N * K  # 2 FLOP per multiply-add


@pytest.fixture(scope="module")
def seed003() -> PpTpComparison:
    return compare_pp_tp(load_workload(SEED003), "a100-40gb", D)


def test_tensor_parallel_numbers(seed003: PpTpComparison) -> None:
    tp = seed003.tp
    assert tp.name == "tp2" and tp.microbatches == 1 and tp.fits
    # type 2 contracts the split K: one all-reduce of z[M, N] per block, on the critical path
    all_reduce_bytes = M * N * S  # 8192 * 8192 * 2 = 134,217,728 B
    assert all_reduce_bytes == 134_217_728
    assert tp.comm_bytes == BLOCKS * all_reduce_bytes == 4_831_838_208
    # ring all-reduce over D: 2(D-1)/D * V / B + 2(D-1) hops
    t_all_reduce = 2 * (D - 1) / D * all_reduce_bytes / LINK_BYTES_PER_S + 2 * (D - 1) * HOP_S
    floor = FLOPS / (D * PEAK)  # half of every layer's FLOPs on each GPU
    assert seed003.compute_floor_s == pytest.approx(floor, rel=1e-12)
    assert tp.latency_s == pytest.approx(floor + BLOCKS * t_all_reduce, rel=1e-9)
    assert tp.throughput_bound_per_s == pytest.approx(M / tp.latency_s, rel=1e-12)
    # memory: half of every weight, plus the widest layer's input x[M, N] and half-width y[M, K/2]
    activations = M * N * S + M * (K // D) * S
    assert tp.memory_per_device_bytes == WEIGHTS / D + activations == 19_730_006_016


def test_pipeline_numbers(seed003: PpTpComparison) -> None:
    pp = seed003.pp
    m = pp.microbatches
    assert pp.name == "pp2" and m == 32 and pp.fits  # 32 microbatches of 256 rows
    rows = M // m
    # one activation z[M, N] crosses the stage boundary per step, in m sends of rows x N
    send_bytes = rows * N * S  # 256 * 8192 * 2 = 4,194,304 B
    assert pp.comm_bytes == m * send_bytes == M * N * S == 134_217_728
    t_send = send_bytes / LINK_BYTES_PER_S + HOP_S
    t_stage = BLOCKS * 2 * rows * N * K / PEAK + t_send  # 36 of the 72 layers per stage
    assert pp.latency_s == pytest.approx((m + D - 1) * t_stage, rel=1e-9)
    assert pp.bubble_fraction == pytest.approx((D - 1) / (m + D - 1))  # 1/33
    assert pp.throughput_bound_per_s == pytest.approx(M / (m * t_stage), rel=1e-9)
    # memory: half the weights, plus one microbatch's x[rows, N] and y[rows, K]
    activations = rows * (N + K) * S
    assert pp.memory_per_device_bytes == WEIGHTS / D + activations == 19_348_324_352


def test_winners_and_flip(seed003: PpTpComparison) -> None:
    tp, pp = seed003.tp, seed003.pp
    # realistic latency: tp2's exposed all-reduces cost less than pp2's bubble plus its smaller,
    # less efficient 256-row matmuls
    assert tp.predicted_s < pp.predicted_s
    assert pp.throughput_per_s > tp.throughput_per_s
    assert seed003.winners == {
        "latency": "tp",
        "throughput": "pp",
        "memory": "pp",
        "communication": "pp",
    }
    # powers of two from 8192 / 64 = 128 to 8192 * 64 = 524,288
    assert batch_grid(8192) == [2**e for e in range(7, 20)]
    assert batch_grid(100) == [2, 4, 8, 16, 32, 64, 100, 128, 256, 512, 1024, 2048, 4096]
    flip = seed003.flip
    assert (flip.batch, flip.previous_batch) == (65536, 32768)
    assert (flip.from_winner, flip.to_winner) == ("tp", "pp")
    by_batch = {p.batch: p for p in flip.points}
    assert by_batch[8192].tp_s == pytest.approx(tp.predicted_s)
    assert by_batch[32768].winner == "tp" and by_batch[65536].winner == "pp"
    assert by_batch[65536].pp_s < by_batch[65536].tp_s
    # at 524,288 rows tp2's activations (x and half of y) no longer fit beside half the weights
    big = 2**19
    assert WEIGHTS / D + big * N * S + big * (K // D) * S > CAPACITY
    assert by_batch[big].tp_s is None and by_batch[big].winner == "pp"


def test_a_plan_that_does_not_fit_loses_everything(seed003: PpTpComparison) -> None:
    from dataclasses import replace

    tp_out = replace(seed003.tp, fits=False)
    assert winners(tp_out, seed003.pp) == dict.fromkeys(
        ("latency", "throughput", "memory", "communication"), "pp"
    )
    assert winners(seed003.tp, replace(seed003.pp, fits=False))["communication"] == "tp"


def test_cli_text_and_json(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["explain", "plan", SEED003, "--devices", "2", "--hw", "a100-40gb"]
    assert main(argv) == 0
    text = capsys.readouterr().out
    body = text.split("\n\n", 1)[1].strip()
    assert "\n" not in body  # one paragraph
    assert body.startswith("**Answer: tp2 wins on latency; pp2 wins on throughput")
    assert "Both plans are compute-bound" in body
    assert "36 all-reduces of 134 MB" in body and "32 sends of 4.19 MB" in body
    assert "at a batch of 65,536 (between 32,768 and 65,536" in body
    assert main([*argv, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    for side in ("tp", "pp"):
        keys = {"latency_s", "predicted_s", "throughput_per_s", "memory_per_device_bytes"}
        assert keys | {"comm_bytes", "microbatches"} <= set(data["plans"][side])
    assert data["plans"]["tp"]["comm_bytes"] == BLOCKS * M * N * S
    assert data["plans"]["pp"]["microbatches"] == 32
    assert set(data["winners"]) == {"latency", "throughput", "memory", "communication"}
    assert data["flip"]["batch"] == 65536
    assert data["paragraph"] == body


def test_cli_errors(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["explain", "plan", SEED003, "--devices", "1", "--hw", "a100-40gb"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [
        "error: comparing pipeline and tensor parallelism needs 2 or more devices, got 1"
    ]
    missing = str(tmp_path / "none.toml")
    assert main(["explain", "plan", missing, "--devices", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:")
