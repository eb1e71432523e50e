"""Published single GEMMs (benchmarks/data/gemm_published.csv) against the realistic prediction,
and the per-kernel launch rule (`shardline.ops.predict.kernel_time_s`, `--cuda-graphs`)."""

from __future__ import annotations

import importlib.util
import json
import statistics
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from shardline.cli.main import main
from shardline.errors import InputError
from shardline.hardware import chip_from_dict, load_chip
from shardline.ops.predict import LAUNCH_MODES, kernel_time_s, with_prediction
from shardline.ops.roofline import matmul

ROOT = Path(__file__).resolve().parent.parent
# The lead's goal for the median |error| over the published set (docs/validation.md).
MEDIAN_ERROR_LIMIT = 0.12


def _bench() -> ModuleType:
    spec = importlib.util.spec_from_file_location("bench_gemm", ROOT / "benchmarks/bench_gemm.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_gemm", module)
    spec.loader.exec_module(module)
    return module


BENCH = _bench()


def test_every_published_row_is_sourced_and_well_formed() -> None:
    rows = BENCH.load_rows()
    assert len(rows) >= 40
    assert {r.chip for r in rows} >= {"a100-80gb", "h100-sxm", "b200", "mi300x"}
    assert {r.shape_class for r in rows} == {"small", "skinny", "square"}
    for r in rows:
        assert r.source.strip(), r
        assert r.launch in LAUNCH_MODES, r
        assert r.measured_s > 0 and min(r.m, r.k, r.n) >= 1, r
        load_chip(r.chip)  # a catalog chip


def test_median_error_over_published_gemms_is_within_the_goal() -> None:
    rows = BENCH.predict_all()
    errors = [abs(r.predicted_s / r.measured_s - 1) for r in rows]
    assert statistics.median(errors) < MEDIAN_ERROR_LIMIT


def test_shape_classes_by_the_stated_rule() -> None:
    assert BENCH.shape_class(1024, 1024, 1024) == "small"  # every dim <= 1024
    assert BENCH.shape_class(64, 7168, 2112) == "skinny"  # 64 * 8 <= 7168
    assert BENCH.shape_class(4096, 4096, 4096) == "square"


def test_kernel_time_by_hand_on_h100() -> None:
    """Eager: max(launch_overhead_s, floor) + work; CUDA graphs: floor + work. The catalog's H100:
    launch 4 us, streaming-kernel floor 1.26 us, library GEMM kernel floor 5.2 us."""
    chip = load_chip("h100-sxm")
    ach = chip.achievable
    assert (ach.launch_overhead_s, ach.kernel_floor_s, ach.gemm_kernel_floor_s) == (
        4e-6,
        1.26e-6,
        5.2e-6,
    )
    work = 3e-6
    assert kernel_time_s(chip, work, cuda_graphs=True) == pytest.approx(1.26e-6 + work)
    assert kernel_time_s(chip, work, cuda_graphs=False) == pytest.approx(4e-6 + work)
    assert kernel_time_s(chip, work, cuda_graphs=True, gemm=True) == pytest.approx(5.2e-6 + work)
    assert kernel_time_s(chip, work, cuda_graphs=False, gemm=True) == pytest.approx(5.2e-6 + work)
    arr = np.array([0.0, 1e-6, 1e-3])
    np.testing.assert_allclose(kernel_time_s(chip, arr, cuda_graphs=True), 1.26e-6 + arr)


def _gpu(achievable: dict[str, float]) -> object:
    return chip_from_dict(
        {
            "name": "g",
            "kind": "gpu",
            "peak_flops_per_s": {"bf16": 1e15},
            "memory": {"capacity_bytes": 8e10, "bytes_per_s": 3e12},
            "achievable": achievable,
        }
    )


def test_kernel_time_when_launch_exceeds_the_floor_and_without_a_floor() -> None:
    """A graph hides the launch: 4 us launch, 1.3 us floor, 2 us of work -> eager 6 us, graphs
    3.3 us. A chip file without a floor pays its launch overhead in both modes."""
    chip = _gpu({"launch_overhead_s": 4e-6, "kernel_floor_s": 1.3e-6})
    assert kernel_time_s(chip, 2e-6, cuda_graphs=False) == pytest.approx(6e-6)
    assert kernel_time_s(chip, 2e-6, cuda_graphs=True) == pytest.approx(3.3e-6)
    bare = _gpu({"launch_overhead_s": 4e-6})
    assert kernel_time_s(bare, 2e-6, cuda_graphs=True) == pytest.approx(6e-6)
    assert kernel_time_s(bare, 2e-6, cuda_graphs=False) == pytest.approx(6e-6)


def test_launch_mode_reaches_the_prediction_and_the_cli(capsys) -> None:  # type: ignore[no-untyped-def]
    """`--cuda-graphs` on matmul and einsum: a chip whose launch overhead exceeds its floor
    (A100 80GB: launch 4 us, floor 1.34 us, no separate GEMM floor) gets faster by exactly the
    difference."""
    r = matmul(4096, 4096, 4096, hw="a100-80gb", dtype="bf16")
    eager, graphs = with_prediction(r), with_prediction(r, launch="graphs")
    assert eager.predicted_s - graphs.predicted_s == pytest.approx(4e-6 - 1.34e-6)
    with pytest.raises(InputError, match="launch must be one of"):
        with_prediction(r, launch="lazy")
    out = {}
    for flag in ([], ["--cuda-graphs"]):
        assert main(["matmul", "4096", "4096", "4096", "--hw", "a100-80gb", "--json", *flag]) == 0
        out[bool(flag)] = json.loads(capsys.readouterr().out)["predicted_s"]
    assert out[False] == pytest.approx(eager.predicted_s)
    assert out[True] == pytest.approx(graphs.predicted_s)
    args = ["einsum", "X[B,D] * W[D,F] -> Y[B,F]", "--dims", "B=16,D=4096,F=4096", "--hw", "mi300x"]
    assert main([*args, "--json", "--cuda-graphs"]) == 0
    assert "kernel floor (CUDA graph replay)" in capsys.readouterr().out


def test_catalog_gpus_carry_the_new_achievable_figures() -> None:
    for name in ("a100-40gb", "a100-80gb", "h100-sxm", "h200", "b200", "mi300x"):
        chip = load_chip(name)
        ach = chip.achievable
        assert ach.launch_overhead_s and ach.kernel_floor_s and ach.mem_bytes_per_s, name
        assert chip.sources["achievable.kernel_floor_s"].strip(), name
    for name in ("h100-sxm", "h200", "b200", "mi300x"):
        assert "fp8" in load_chip(name).achievable.matmul_flops_per_s, name


def test_mi300x_fp8_skinny_gemm_by_hand() -> None:
    """`shardline matmul 64 8192 1280 --hw mi300x --dtype fp8 --cuda-graphs`, by hand (bf16 out).

    The fastest candidate is a 64 x 64 tile with K split 8: ceil(64/64) * ceil(1280/64) * 8 = 160
    tiles, one wave on 304 CUs. A CU's rate is the smaller of the achievable fp8 rate's share,
    1159.2e12 / 304 = 3.813e12, and what the Infinity Cache feeds it (MI300X's L2 is split over
    eight XCDs that workgroups reach round-robin): tile intensity 2*64*64 / (64 + 64) = 64 FLOP/B
    times 17.2e12 / 304 B/s = 3.621e12 FLOP/s, the smaller. Math: 2*64*64*(8192/8) / 3.621e12 =
    2.317 us; fill: 128 B of K x (64 + 64) rows x 304 / 17.2e12 = 0.290 us; split-K partials:
    2 * 8 * 4 B * 64 * 1280 / 17.2e12 = 0.305 us; compute 2.911 us. Memory: (64*8192 + 8192*1280
    + 2*64*1280) B / 4.11e12 = 2.719 us. Kernel: the GEMM floor 7.74 us (aiter's shortest MI300X
    kernel) + max(2.911, 2.719) = 10.65 us; AITER PR 1092 measured 10.80 us on MI300X."""
    cores, feed = 304, 17.2e12
    sm_rate = min(1159.2e12 / cores, 2 * 64 * 64 / (64 + 64) * feed / cores)
    t_compute = (
        2 * 64 * 64 * (8192 / 8) / sm_rate
        + 128 * (64 + 64) * cores / feed
        + 2 * 8 * 4 * 64 * 1280 / feed
    )
    t_memory = (64 * 8192 + 8192 * 1280 + 2 * 64 * 1280) / 4.11e12
    expected = 7.74e-6 + max(t_compute, t_memory)
    assert expected == pytest.approx(10.65e-6, rel=1e-3)
    r = matmul(
        64,
        8192,
        1280,
        hw="mi300x",
        compute_dtype="fp8",
        a_dtype="fp8",
        b_dtype="fp8",
        out_dtype="bf16",
    )
    p = with_prediction(r, launch="graphs")
    assert (p.prediction["tile_m"], p.prediction["tile_n"], p.prediction["split_k"]) == (64, 64, 8)
    assert p.prediction["t_compute_s"] == pytest.approx(t_compute, rel=1e-9)
    assert p.predicted_s == pytest.approx(expected, rel=1e-9)
    assert p.predicted_s / 10.79625e-6 - 1 == pytest.approx(-0.0135, abs=1e-3)


def test_matrix_vector_runs_the_tiled_kernel_where_the_library_has_no_gemv() -> None:
    """M = 1, K = N = 4096, bf16 under CUDA graphs on a 3 TB/s chip: Q = 2 x 4096 + 2 x 4096^2 +
    2 x 4096 = 33,570,816 B, t_memory = Q / 3e12 = 11.19 us, far above the math. A streaming
    gemv kernel pays kernel_floor_s (1.3 us); a library that runs it with its tiled GEMM kernels
    (on_chip.matrix_vector_tiled, AMD's aiter / hipBLASLt) pays gemm_kernel_floor_s (5 us)."""
    from shardline.ops.predict import with_prediction
    from shardline.ops.roofline import matmul

    q = 2 * 4096 + 2 * 4096 * 4096 + 2 * 4096
    times = {}
    for tiled in (False, True):
        chip = chip_from_dict(
            {
                "name": "g",
                "kind": "gpu",
                "peak_flops_per_s": {"bf16": 1e15},
                "memory": {"capacity_bytes": 8e10, "bytes_per_s": 3e12},
                "on_chip": {"cores": 100, "matrix_vector_tiled": tiled},
                "achievable": {"kernel_floor_s": 1.3e-6, "gemm_kernel_floor_s": 5e-6},
            }
        )
        result = with_prediction(matmul(1, 4096, 4096, hw=chip), launch="graphs")
        terms = result.prediction
        assert terms["streaming_kernel"] is (not tiled)
        assert terms["t_compute_s"] < terms["t_memory_s"] == pytest.approx(q / 3e12)
        times[tiled] = result.predicted_s
    assert times[False] == pytest.approx(1.3e-6 + q / 3e12)
    assert times[True] == pytest.approx(5e-6 + q / 3e12)


def _harness_named_by(source: str) -> str:
    """The harness a row's source text names (the `timing` column must agree with it)."""
    if "do_bench_cudagraph" in source:
        return "do_bench_cudagraph"
    for words, timing in (
        ("do_bench", "do_bench"),
        ("bench_kineto", "kineto-flush"),
        ("CUPTI", "cupti"),
        ("torch.utils.benchmark", "torch-timer"),
        ("back-to-back launches", "back-to-back"),
        ("aiter's", "aiter-perftest"),
    ):
        if words in source:
            return timing
    return "unstated"


def test_every_row_names_the_harness_its_source_text_names() -> None:
    rows = BENCH.load_rows()
    for r in rows:
        assert r.timing in BENCH.TIMINGS, r
        assert r.timing == _harness_named_by(r.source), r
    counts: dict[str, int] = {}
    for r in rows:
        counts[r.timing] = counts.get(r.timing, 0) + 1
    # triton issues 3551 and 3672 (5 squares each) and sglang PR 2752 (4 int8 rows) use do_bench;
    # vLLM PRs 18778 and 19566 (14 rows each) and 49363 (8) replay CUDA graphs
    assert counts["do_bench"] == 5 + 5 + 4
    assert counts["do_bench_cudagraph"] == 14 + 14 + 8


def test_an_unknown_harness_stops_the_benchmark(tmp_path: Path) -> None:
    text = (ROOT / "benchmarks/data/gemm_published.csv").read_text(encoding="utf-8")
    header, first = text.splitlines()[:2]
    bad = first.replace(",graphs,cupti,", ",graphs,stopwatch,")
    assert bad != first
    path = tmp_path / "rows.csv"
    path.write_text(f"{header}\n{bad}\n", encoding="utf-8")
    with pytest.raises(SystemExit, match="unknown timing 'stopwatch'"):
        BENCH.load_rows(path)


def test_do_bench_window_against_the_cupti_kernel_on_h100() -> None:
    """The H100 squares timed both ways: triton issue 3672's do_bench (fp16) and the OpenXLA
    table's CUPTI kernel time (bf16, the same tensor-core peak): 2 x 512^3 / 28.630062e12 =
    9.376 us against 2 x 512^3 / 40.721398e12 = 6.592 us."""
    text = BENCH._window_excess(BENCH.load_rows())
    assert "512^3: 9.38 us against 6.59 us" in text
    assert "1024^3: 17.73 us against 9.09 us" in text


def test_warm_l2_reads_a_resident_working_set_at_the_l2_rate(capsys) -> None:  # type: ignore[no-untyped-def]
    """`--warm-l2` (a benchmark replaying one kernel on the same buffers): B200 fp8 16 x 4096 x
    4096 with bf16 out moves 16*4096 + 4096*4096 + 2*16*4096 = 16,973,824 B, within the 93.8e6 B
    the B200 L2 holds at speed (gb200.txt), so it is read at 18.8e12 B/s instead of HBM's
    7.26e12; a 201 MB working set (bf16 1 x 4096 x 24576) evicts itself and stays at HBM's."""
    q = 16 * 4096 + 4096 * 4096 + 2 * 16 * 4096
    assert q == 16_973_824
    r = matmul(16, 4096, 4096, hw="b200", dtype="fp8", out_dtype="bf16")
    cold = with_prediction(r, launch="graphs")
    warm = with_prediction(r, launch="graphs", warm_l2=True)
    assert cold.prediction["t_memory_s"] == pytest.approx(q / 7.26e12)
    assert warm.prediction["t_memory_s"] == pytest.approx(q / 18.8e12)
    assert warm.predicted_s < cold.predicted_s
    big = matmul(1, 4096, 24576, hw="b200", dtype="bf16")
    q_big = 2 * (4096 + 4096 * 24576 + 24576)
    assert q_big > 93.8e6
    for warm_l2 in (False, True):
        terms = with_prediction(big, launch="graphs", warm_l2=warm_l2).prediction
        assert terms["t_memory_s"] == pytest.approx(q_big / 7.26e12)
    out = {}
    for flag in ([], ["--warm-l2"]):
        cmd = ["matmul", "16", "4096", "4096", "--hw", "b200", "--dtype", "fp8", "--out-dtype"]
        assert main([*cmd, "bf16", "--cuda-graphs", "--json", *flag]) == 0
        out[bool(flag)] = json.loads(capsys.readouterr().out)["predicted_s"]
    assert out[False] == pytest.approx(cold.predicted_s)
    assert out[True] == pytest.approx(warm.predicted_s)


def test_warm_l2_on_h100_uses_its_l2_rate_up_to_the_resident_size() -> None:
    """H100 has no separate resident-read rate: its l2_bytes_per_s (9.8e12, gpu-l2-cache on H200)
    stands in, up to the 41.4e6 B its L2 holds at speed. fp8 16 x 4096 x 4096 (17.0 MB) is read
    from the L2; fp8 16 x 11008 x 4096 moves 16*11008 + 11008*4096 + 2*16*4096 = 45,395,968 B,
    more than that, and streams from HBM (3.14e12 B/s) warm or not."""
    chip = load_chip("h100-sxm")
    assert chip.on_chip.l2_read_bytes_per_s is None
    assert chip.on_chip.resident_read_bytes_per_s == 9.8e12
    q = 16 * 4096 + 4096 * 4096 + 2 * 16 * 4096
    small = matmul(16, 4096, 4096, hw=chip, dtype="fp8", out_dtype="bf16")
    warm = with_prediction(small, warm_l2=True).prediction
    assert warm["t_memory_s"] == pytest.approx(q / 9.8e12)
    q_big = 16 * 11008 + 11008 * 4096 + 2 * 16 * 4096
    assert q_big == 45_395_968
    big = matmul(16, 11008, 4096, hw=chip, dtype="fp8", out_dtype="bf16")
    assert with_prediction(big, warm_l2=True).prediction["t_memory_s"] == pytest.approx(
        q_big / 3.14e12
    )


def test_rows_of_harnesses_that_keep_the_l2_warm_are_priced_warm() -> None:
    """do_bench_cudagraph and torch.utils.benchmark.Timer clear no cache between calls; do_bench
    zeroes 256 MB before each and DeepGEMM's bench_kineto flushes 8 GB."""
    assert {"do_bench_cudagraph", "torch-timer"} == BENCH.WARM_L2_TIMINGS
    row = next(
        r
        for r in BENCH.load_rows()
        if r.source_id == "vllm-pr-19566" and r.dtype == "fp8" and r.m == 16
    )
    r = matmul(16, 4096, 4096, hw="b200", dtype="fp8", out_dtype="bf16")
    expected = with_prediction(r, launch="graphs", warm_l2=True).predicted_s
    assert BENCH.predict_row(row).predicted_s == pytest.approx(expected)
