"""`shardline search`: the vectorized training search against the scalar plan engine, the count of
layouts derived by hand, the executors (local processes, Dask) giving the same answer, bad input."""

from __future__ import annotations

import json
import time
from functools import lru_cache
from itertools import product

import numpy as np
import pytest

from shardline.cli.main import main
from shardline.executors import map_chunks
from shardline.hardware import resolve_chip
from shardline.io.workload_toml import workload_from_dict
from shardline.models import load_model
from shardline.models.template import transformer_table
from shardline.planning.search import _assignments
from shardline.planning.train_search import (
    Group,
    RunOptions,
    engine_result,
    layout_of,
    training_search,
)
from shardline.planning.vector_eval import Chunk, evaluate_chunk
from shardline.planning.vector_tables import build_tables
from shardline.workload import Workload

STEP_TOLERANCE = 0.03  # the vectorized step within 3% of the engine's (docs/search.md)
MEMORY_TOLERANCE = 0.02


@lru_cache(maxsize=8)
def _workload(model: str, sequences: int, seq_len: int) -> Workload:
    spec = load_model(model)
    table = transformer_table(spec, batch=sequences, seq_len=seq_len)
    return workload_from_dict(
        {"name": spec.name, "phase": "training", "transformer": table}, origin="test"
    )


def test_two_devices_count_by_hand() -> None:
    """Llama-3.2-1B (16 blocks), 2 sequences per step, 2 devices: four assignments.
    - tp2: b in {1, 2}; V 1; sp x tp-overlap 2 x 2; recompute 3; ZeRO 1       -> 2*2*2*3 = 24
    - pp2: b=1 gives m=2 (a multiple of pp: V in 1, 2, 4, 8, as 8 blocks per stage hold 8
      chunks), b=2 gives m=1 (V 1): 5 schedules x recompute 3                  -> 15
    - dp2: b=1 only; recompute 3 x ZeRO 0-3                                    -> 12
    - fsdp2: b=1; recompute 3                                                  -> 3
    total 54."""
    w = _workload("llama-3.2-1b", 2, 1024)
    r = training_search(w, ["h100-sxm"], 2, run=RunOptions(scales=1, rerank=2))
    assert r["evaluated"] == 24 + 15 + 12 + 3


def _count_rule(w: Workload, devices: int) -> int:
    """The same rules written out: degrees (tp, pp, dp, fsdp) multiplying to the devices, tp a
    divisor of every layer's tensor-parallel room, pp at most the blocks (or dividing the layer
    instances), the batch split by dp x fsdp; then the knobs."""
    divs = [d for d in range(1, devices + 1) if devices % d == 0]
    rooms = [int(np.prod([layer.dims[d] for d in layer.tp_dims])) for layer in w.layers]
    total = 0
    for tp, pp, dp in product(divs, divs, divs):
        if devices % (tp * pp * dp):
            continue
        fsdp = devices // (tp * pp * dp)
        if any(room % tp for room in rooms) or not (pp <= w.repeat or w.layer_count % pp == 0):
            continue
        if dp * fsdp > w.batch:
            continue
        per_stage = min(w.stage_blocks(pp)) if pp > 1 else 0
        for b in range(1, w.batch + 1):
            if w.batch % (dp * fsdp * b):
                continue
            m = w.batch // (dp * fsdp * b)
            v = 1 + sum(1 for x in (2, 4, 8) if pp > 1 and x <= per_stage and m % pp == 0)
            total += v * (4 if tp > 1 else 1) * 3 * (4 if dp > 1 else 1)
    return total


def test_eight_devices_count_matches_the_rules() -> None:
    w = _workload("llama-3.2-1b", 8, 1024)
    r = training_search(w, ["h100-sxm"], 8, run=RunOptions(scales=1, rerank=1))
    assert r["evaluated"] == _count_rule(w, 8)


@lru_cache(maxsize=2)
def _evaluated(model: str, devices: int, sequences: int) -> tuple[Group, dict]:
    w = _workload(model, sequences, 1024)
    chip = resolve_chip("h100-sxm")
    assignments = list(_assignments(w, devices, {}))
    tables = build_tables(w, chip, assignments, devices)
    rows = evaluate_chunk(Chunk(tables, w, chip, tuple(assignments), 0))
    return Group(chip, devices, assignments, tables, rows), rows


def test_vectorized_matches_the_plan_engine() -> None:
    """10 layouts (a spread of the space, and the fastest that fit): the step time and the
    memory per device of the vectorized model against `evaluate_plan` itself."""
    group, rows = _evaluated("llama-3.2-1b", 8, 16)
    n = len(rows["a"])
    fits = np.flatnonzero(rows["fits"])
    picks = [*range(0, n, n // 8)][:8] + list(fits[np.argsort(rows["predicted_s"][fits])[:2]])
    w = _workload("llama-3.2-1b", 16, 1024)
    for i in picks:
        res = engine_result(w, group.chip, layout_of(group, rows, int(i)), None)
        assert rows["predicted_s"][i] == pytest.approx(res.predicted_s, rel=STEP_TOLERANCE)
        assert rows["memory_per_device_bytes"][i] == pytest.approx(
            res.memory_per_device_bytes, rel=MEMORY_TOLERANCE
        )


def test_microbatches_follow_the_batch() -> None:
    """m = sequences / (dp x fsdp x b) on every row: 16 sequences, so m x replicas x b = 16."""
    group, rows = _evaluated("llama-3.2-1b", 8, 16)
    replicas = np.array([group.assignments[a].replicas for a in rows["a"]])
    assert np.all(rows["m"] * replicas * group.tables.seq_b[rows["j"]] == 16)


def _square(x: int) -> int:
    return x * x


def test_map_chunks_keeps_order_on_processes() -> None:
    seen: list[tuple[int, int]] = []
    out = map_chunks(_square, list(range(7)), workers=2, progress=lambda d, t: seen.append((d, t)))
    assert out == [0, 1, 4, 9, 16, 25, 36]
    assert seen[-1] == (7, 7)


def _same(a: dict, b: dict) -> None:
    for key in ("evaluated", "best", "pareto", "alternatives"):
        assert a[key] == b[key], key


def test_workers_give_the_same_answer() -> None:
    w = _workload("llama-3.2-1b", 4, 1024)
    one = training_search(w, ["h100-sxm"], 4, run=RunOptions(scales=2, rerank=1))
    two = training_search(w, ["h100-sxm"], 4, run=RunOptions(scales=2, rerank=1, workers=2))
    _same(one, two)


@pytest.mark.slow
def test_dask_cluster_gives_the_same_answer() -> None:
    distributed = pytest.importorskip("distributed", reason="dask[distributed] not installed")
    w = _workload("llama-3.2-1b", 8, 1024)
    one = training_search(w, ["h100-sxm"], 8, run=RunOptions(scales=2, rerank=2))
    with distributed.LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, dashboard_address=None
    ) as cluster:
        on_dask = training_search(
            w,
            ["h100-sxm"],
            8,
            run=RunOptions(
                scales=2, rerank=2, executor="dask", scheduler=cluster.scheduler_address
            ),
        )
    _same(one, on_dask)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_cli_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = _cli(
        capsys, "search", "--model", "llama-3.2-1b", "--phase", "training", "--tokens", "1T",
        "--devices", "8", "--seq-len", "1024", "--global-batch", "8Ki", "--scales", "2",
        "--rerank", "2", "--json",
    )  # fmt: skip
    assert code == 0, err
    r = json.loads(out)
    assert r["evaluated"] > 0 and r["rate_layouts_per_s"] > 0
    assert isinstance(r["pareto"], list) and r["pareto"]
    best = r["best"]
    assert best["devices"] == 8 and best["fits"]
    # days to train = tokens / (tokens per step / step time) / 86,400 s
    step_tokens = 8 * 1024
    assert best["days_to_train"] == pytest.approx(
        1e12 / step_tokens * best["predicted_step_s"] / 86400, rel=1e-9
    )
    assert best["gpu_hours"] == pytest.approx(8 * best["days_to_train"] * 24, rel=1e-9)
    assert err == ""  # --json: no progress


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--devices", "0"], "--devices"),
        ([], "needs --devices"),
        (["--devices", "8", "--executor", "dask"], "--scheduler"),
        (["--devices", "8", "--workers", "0"], "--workers"),
        (["--devices", "8", "--phase", "training", "--slo", "ttft=1s"], "serving"),
        (["--devices", "8", "--global-batch", "10"], "less than one sequence"),
        (["--devices", "8", "--hw", " , "], "--hw"),
        (["--devices", "8", "--hw", "no-such-chip"], "no-such-chip"),
        (["--devices", "8", "--fix", "tp8"], "--fix"),
        (["--devices", "8", "--fix", "xx=2"], "unknown strategy"),
        (["--devices", "8", "--fix", "tp=3"], "--fix"),
    ],
)
def test_bad_input_one_error_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], needle: str
) -> None:
    code, out, err = _cli(capsys, "search", "--model", "llama-3.2-1b", "--seq-len", "1024", *argv)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ") and needle in err


def test_fixed_degrees_hold() -> None:
    """--fix tp=2 on 8 devices: every re-ranked layout (best, alternatives) keeps tp = 2."""
    w = _workload("llama-3.2-1b", 8, 1024)
    r = training_search(w, ["h100-sxm"], 8, run=RunOptions(scales=1, rerank=3, fixed=(("tp", 2),)))
    assert r["best"]["degrees"]["tp"] == 2
    assert all(a["degrees"]["tp"] == 2 for a in r["alternatives"])


def test_serving_without_the_module_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        import shardline.serving.search  # noqa: F401
    except ImportError:
        code, _, err = _cli(
            capsys, "search", "--model", "llama-3.1-70b", "--slo", "ttft=500ms,tpot=30ms",
            "--rate", "20/s", "--in", "2000", "--out", "500",
        )  # fmt: skip
        assert code == 2 and err.count("\n") == 1 and "serving" in err
    else:
        pytest.skip("shardline.serving.search is installed: the serving tests cover it")


@pytest.mark.slow
def test_405b_on_16384_h100_under_ten_seconds() -> None:
    """The issue's target: Llama-3.1-405B, 16,384 H100, 2,048 x 8,192 tokens per step, four
    device counts (16,384 down to 2,048): hundreds of thousands of layouts in under 10 s of CPU."""
    w = _workload("llama-3.1-405b", 2048, 8192)
    cpu = time.process_time()
    r = training_search(w, ["h100-sxm"], 16384, tokens=15e12, run=RunOptions(scales=4))
    cpu_s = time.process_time() - cpu
    assert r["evaluated"] > 200_000
    assert cpu_s < 10.0
    assert r["best"]["devices"] == 16384 and r["best"]["fits"]
    assert r["agreement"]["step_time_rel_gap_max"] < STEP_TOLERANCE
