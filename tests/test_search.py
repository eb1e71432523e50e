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
from shardline.hardware import resolve_chip
from shardline.planning.executors import map_chunks
from shardline.planning.search import assignments as degree_assignments
from shardline.planning.train_search import (
    Group,
    RunOptions,
    engine_result,
    layout_of,
    top_layouts,
    training_search,
)
from shardline.planning.vector_bound import (
    _with_comm,
    exhaustive,
    fill,
    finish,
    group_rows,
    prepare,
    search_group,
)
from shardline.planning.vector_eval import Chunk, price_chunk
from shardline.planning.vector_floors import einsum_floor
from shardline.planning.vector_tables import block_times, contexts
from shardline.strategies import Degrees
from shardline.workload.workload import Workload
from tests.training import DENSE_FIRST, training_workload

STEP_TOLERANCE = 0.03  # the vectorized step within 3% of the engine's (docs/search.md)
MEMORY_TOLERANCE = 1e-9  # the memory is the engine's formula over arrays (planning/memory.py)


_workload = training_workload


def test_two_devices_count_by_hand() -> None:
    """Llama-3.2-1B (16 blocks), 2 sequences per step, 2 devices: five assignments (ep needs
    experts, so a dense model has none).
    - tp2: b in {1, 2}; V 1; sp x tp-overlap 2 x 2; recompute 3; ZeRO 1       -> 2*2*2*3 = 24
    - pp2: b=1 gives m=2 (a multiple of pp: V in 1, 2, 4, 8, as 8 blocks per stage hold 8
      chunks), b=2 gives m=1 (V 1): 5 schedules x recompute 3                  -> 15
    - dp2: b=1 only; recompute 3 x ZeRO 0-3                                    -> 12
    - fsdp2: b=1; recompute 3                                                  -> 3
    - cp2 (2 divides the 1,024 tokens): b in {1, 2}; recompute 3               -> 6
    total 60."""
    w = _workload("llama-3.2-1b", 2, 1024)
    r = training_search(w, ["h100-sxm"], 2, run=RunOptions(scales=1, rerank=2))
    assert r["evaluated"] == 24 + 15 + 12 + 3 + 6
    c = r["search_counts"]
    assert c["layouts"] == 60 and c["assignments"] == 5
    assert c["timed_in_full"] + c["bounded"] <= c["layouts"]


def _count_rule(w: Workload, devices: int) -> int:
    """The same rules written out: degrees (tp, pp, dp, cp, fsdp) multiplying to the devices,
    tp a divisor of every layer's tensor-parallel room, pp at most the blocks (or dividing the
    layer instances), cp a divisor of the sequence, the batch split by dp x fsdp; then the
    knobs (cp adds none)."""
    divs = [d for d in range(1, devices + 1) if devices % d == 0]
    rooms = [int(np.prod([layer.dims[d] for d in layer.tp_dims])) for layer in w.layers]
    total = 0
    for tp, pp, dp, cp in product(divs, divs, divs, divs):
        if devices % (tp * pp * dp * cp) or w.tokens_per_item % cp:
            continue
        fsdp = devices // (tp * pp * dp * cp)
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


@lru_cache(maxsize=4)
def _evaluated(model: str, devices: int, sequences: int) -> tuple[Group, dict]:
    """Every layout of every assignment (cp and ep included) timed in full: no bound."""
    w = _workload(model, sequences, 1024)
    chip = resolve_chip("h100-sxm")
    assignments = list(degree_assignments(w, devices, {}, every=True))
    space = prepare(w, chip, [assignments], devices)
    exhaustive(space, w)
    rows = group_rows(space, 0)
    return Group(chip, devices, assignments, space.tables, rows), rows


def _picks(group: Group, rows: dict, name: str, count: int) -> list[int]:
    """A spread of the layouts whose `name` degree is above 1, and the fastest that fit."""
    uses = np.array([d[name] > 1 for d in group.assignments])[rows["a"]]
    mine = np.flatnonzero(uses)
    fits = mine[rows["fits"][mine]]
    spread = list(mine[:: max(1, len(mine) // count)][:count])
    return spread + list(fits[np.argsort(rows["predicted_s"][fits])[:2]])


def test_vectorized_matches_the_plan_engine() -> None:
    """16 layouts (a spread of the space, the fastest that fit, and context-parallel ones): the
    step time and the memory per device of the vectorized model against `evaluate_plan`."""
    group, rows = _evaluated("llama-3.2-1b", 8, 16)
    n = len(rows["a"])
    fits = np.flatnonzero(rows["fits"])
    picks = [*range(0, n, n // 8)][:8] + list(fits[np.argsort(rows["predicted_s"][fits])[:2]])
    picks += _picks(group, rows, "cp", 4)
    w = _workload("llama-3.2-1b", 16, 1024)
    for i in picks:
        res = engine_result(w, group.chip, layout_of(group, rows, int(i)), None)
        assert rows["predicted_s"][i] == pytest.approx(res.predicted_s, rel=STEP_TOLERANCE)
        assert rows["memory_per_device_bytes"][i] == pytest.approx(
            res.memory_per_device_bytes, rel=MEMORY_TOLERANCE
        )


def test_expert_parallel_matches_the_plan_engine() -> None:
    """Mixtral-8x7B (a mixture of experts: ep joins the search) on 8 devices, 8 sequences of
    1,024 tokens: layouts with ep > 1 (the experts split, the tokens' all-to-alls probed with the
    block) against `evaluate_plan`."""
    group, rows = _evaluated("mixtral-8x7b", 8, 8)
    w = _workload("mixtral-8x7b", 8, 1024)
    picks = _picks(group, rows, "ep", 3)
    assert len(picks) >= 3
    for i in picks:
        res = engine_result(w, group.chip, layout_of(group, rows, int(i)), None)
        assert group.assignments[int(rows["a"][i])]["ep"] > 1
        assert rows["predicted_s"][i] == pytest.approx(res.predicted_s, rel=STEP_TOLERANCE)
        assert rows["memory_per_device_bytes"][i] == pytest.approx(
            res.memory_per_device_bytes, rel=MEMORY_TOLERANCE
        )


def _bounded(model: str, devices: int, sequences: int, k: int) -> dict:
    """The same space searched with the bounds (`vector_bound.search_group`), one process."""
    w = _workload(model, sequences, 1024)
    space = prepare(
        w, resolve_chip("h100-sxm"), [list(degree_assignments(w, devices, {}, every=True))], devices
    )

    def price(sp, todo):  # the rounds' pricer, in this process
        fill(sp, todo, price_chunk(Chunk(sp.tables, w, sp.chip, tuple(sp.every[i] for i in todo))))

    search_group(space, w, 0, k, (24, price))
    finish(space)
    return group_rows(space, 0)


def test_bounds_keep_the_reranked_set() -> None:
    """The bounds only skip layouts that cannot enter the re-ranked set: the k fastest distinct
    (degrees, microbatches, interleave) that fit, with their steps, are those of the exhaustive
    evaluation; every layout left with a bound has it at most its true step (a lower bound) and
    above the k-th step."""
    k = 4
    _, full = _evaluated("llama-3.2-1b", 8, 16)
    rows = _bounded("llama-3.2-1b", 8, 16, k)
    top, ref = top_layouts(rows, k), top_layouts(full, k)
    assert list(top) == list(ref)
    assert np.allclose(rows["predicted_s"][top], full["predicted_s"][ref], rtol=1e-12)
    kth = full["predicted_s"][ref[-1]]
    bound = np.flatnonzero(rows["bound"])
    assert len(bound) > 0
    assert np.all(rows["predicted_s"][bound] <= full["predicted_s"][bound] * (1 + 1e-12))
    assert np.all(rows["predicted_s"][bound] > kth)


def test_probe_shortcuts_are_the_engines() -> None:
    """Two shortcuts the probes take give the engine's own numbers: a matmul priced from its
    merged shape (B x S tokens as one dim) is the same einsum; tensor-parallel overlap derived
    from the stages without it equals the stages of a context with `tp_overlap`."""
    w = _workload("llama-3.2-1b", 16, 1024)
    ctx = contexts(w, resolve_chip("h100-sxm"))
    for inner, b in (({"tp": 2, "ep": 1, "cp": 4}, 4), ({"tp": 4, "ep": 1, "cp": 1}, 2)):
        fresh = contexts(w, resolve_chip("h100-sxm"))[(1, 2, 0)]  # its own cost cache
        deg = Degrees({**inner, "dp": 16 // b})
        engine = [0.0, 0.0]  # Context.cost on the einsums' own sizes
        for layer in w.layers:
            view = fresh.view(layer, layer.count, deg, 1)
            engine[0] += layer.count * float(fresh.cost(layer, view.dims).cost.predicted_s)
            for grad, dims in view.grads:
                engine[1] += layer.count * float(fresh.cost(grad, dims).cost.predicted_s)
        merged = einsum_floor(ctx[(0, 0, 0)], inner, b)
        assert merged == pytest.approx(tuple(engine), rel=1e-12)
        derived = block_times(ctx[(1, 2, 0)], inner, b, overlap=True)
        direct = block_times(ctx[(1, 2, 1)], inner, b)
        for name, value in vars(direct).items():
            assert getattr(derived, name) == pytest.approx(value, rel=1e-9, abs=1e-15), name


@pytest.mark.parametrize(
    ("model", "devices", "sequences"),
    [
        ("mixtral-8x7b", 16, 16),
        ("llama-3.2-1b", 8, 16),
        ("llama-3.2-1b", 24, 48),
        (DENSE_FIRST, 16, 16),
    ],
)
def test_comm_floor_stays_under_the_step(model: str, devices: int, sequences: int) -> None:
    """The first bound with the block's critical communication added (`vector_bound._with_comm`:
    every strategy's critical terms of the block's layers, tp's without overlap, times the same
    (m + (P - 1)/V) k) is at most the exhaustive step of 1,000 seeded random fitting layouts
    (Mixtral on 16 devices: ep and tp; Llama 3.2 1B on 8: cp and tp; on 24: pipelines of 3, 6,
    12 and 24 stages that cut its 16 blocks; a small model whose first 3 of 7 blocks are dense,
    as DeepSeek-V3's, on 16: its first stages hold the dense blocks, priced at the einsums they
    share with the block), and above the einsum bound alone where a
    layout has critical communication (tighter, not the same bound)."""
    w = _workload(model, sequences, 1024)
    chip = resolve_chip("h100-sxm")
    space = prepare(w, chip, [list(degree_assignments(w, devices, {}, every=True))], devices)
    einsums = space.out["floor_s"].copy()
    exhaustive(space, w)
    fits = np.flatnonzero(space.out["fits"])
    rows = np.random.default_rng(23).choice(fits, size=min(1000, len(fits)), replace=False)
    space.out["floor_s"] = einsums.copy()
    assert len(_with_comm(space, w, rows, np.inf)) == len(rows)
    floor, step = space.out["floor_s"][rows], space.out["predicted_s"][rows]
    assert np.all(floor <= step)
    assert np.all(floor >= einsums[rows])
    assert np.mean(floor > einsums[rows] * 1.01) > 0.5  # most layouts wait for collectives


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


SEARCH_TRIES = 3  # the least CPU time of up to three runs, as timing benchmarks report


def _cold_search(args: tuple[str, str, int, int, int]) -> dict[str, object]:
    """One search (model, chip, devices, --scales, sequences of 8,192 tokens per step) with its
    CPU seconds, the answer's counts, best and agreement; run in a fresh process."""
    model, chip, devices, scales, sequences = args
    w = _workload(model, sequences, 8192)
    cpu = time.process_time()
    r = training_search(w, [chip], devices, tokens=15e12, run=RunOptions(scales=scales))
    cpu_s = time.process_time() - cpu
    keep = ("evaluated", "search_counts", "best", "agreement")
    return {"cpu_s": cpu_s, **{k: r[k] for k in keep}}


def _cold_cpu_s(args: tuple[str, str, int, int, int]) -> tuple[float, dict[str, object]]:
    """The least CPU time of up to `SEARCH_TRIES` searches, each in a new process (cold caches,
    as the CLI runs it: none finds another's memo warm; a shared VM's noise only ever adds CPU
    time), stopping at the first under 10 s; and that search's answer."""
    from concurrent.futures import ProcessPoolExecutor
    from multiprocessing import get_context

    best: tuple[float, dict[str, object]] = (float("inf"), {})
    for _ in range(SEARCH_TRIES):
        with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
            r = pool.submit(_cold_search, args).result()
        cpu_s = float(r["cpu_s"])  # type: ignore[arg-type]
        best = min(best, (cpu_s, r), key=lambda x: x[0])
        if cpu_s < 10.0:
            break
    return best


@pytest.mark.slow
def test_405b_on_16384_h100_under_ten_seconds() -> None:
    """The issue's target: Llama-3.1-405B, 16,384 H100, 2,048 x 8,192 tokens per step, four
    device counts (16,384 down to 2,048), every strategy (cp included): 2,568,705 layouts, the
    search in under 10 s of CPU, cold (a fresh process)."""
    cpu_s, r = _cold_cpu_s(("llama-3.1-405b", "h100-sxm", 16384, 4, 2048))
    assert r["evaluated"] == 2_568_705
    c = r["search_counts"]
    assert isinstance(c, dict) and c["timed_in_full"] + c["bounded"] >= c["fit_in_memory"]
    assert cpu_s < 10.0
    best, agreement = r["best"], r["agreement"]
    assert isinstance(best, dict) and best["devices"] == 16384 and best["fits"]
    assert isinstance(agreement, dict) and agreement["step_time_rel_gap_max"] < STEP_TOLERANCE


@pytest.mark.slow
@pytest.mark.parametrize(
    ("model", "chip", "devices", "scales", "layouts"),
    [
        # the layouts count the folded ones (etp 1 under tp > 1) and, tp > 1 running with
        # sequence parallelism only for a mixture of experts, no tp > 1 layout without it
        ("deepseek-v3", "h800", 2048, 1, 911_721),
        ("mixtral-8x7b", "h100-sxm", 512, 4, 1_011_426),
    ],
)
def test_moe_searches_under_ten_seconds(
    model: str, chip: str, devices: int, scales: int, layouts: int
) -> None:
    """The issue's MoE targets (`shardline search --model deepseek-v3 --hw h800 --devices 2048
    --scales 1`; `--model mixtral-8x7b --devices 512`, the default four device counts), 2,048 x
    8,192 tokens per step, each in under 10 s of CPU on one core, cold (a fresh process;
    benchmarks/bench_search.py reports them beside the dense 405B search)."""
    cpu_s, r = _cold_cpu_s((model, chip, devices, scales, 2048))
    assert r["evaluated"] == layouts
    best = r["best"]
    assert isinstance(best, dict) and best["fits"]
    assert cpu_s < 10.0


@pytest.mark.slow
def test_405b_at_128k_tokens_splits_the_sequence() -> None:
    """128K-token sequences, 128 per step (16Mi tokens) over 16,384 H100: the batch alone
    cannot occupy the devices, so the best layout splits each sequence (cp > 1), as Meta's
    (TP 8, CP 16, PP 16, DP 8; Llama 3 paper, Table 4) does."""
    w = _workload("llama-3.1-405b", 128, 131072)
    r = training_search(w, ["h100-sxm"], 16384, tokens=15e12, run=RunOptions(scales=4))
    assert r["best"]["fits"] and r["best"]["degrees"]["cp"] > 1
    assert r["agreement"]["step_time_rel_gap_max"] < STEP_TOLERANCE


@pytest.mark.slow
def test_mixtral_searches_expert_parallelism() -> None:
    """Mixtral-8x7B on 512 H100: ep is part of the space (its layouts counted and bounded or
    timed), and the answer fits."""
    w = _workload("mixtral-8x7b", 2048, 8192)
    r = training_search(w, ["h100-sxm"], 512, tokens=1e12, run=RunOptions(scales=4))
    assert r["best"]["fits"]
    assert r["agreement"]["step_time_rel_gap_max"] < STEP_TOLERANCE
    fixed = RunOptions(scales=1, rerank=2, fixed=(("ep", 8),))
    with_ep = training_search(w, ["h100-sxm"], 512, tokens=1e12, run=fixed)
    assert with_ep["best"]["degrees"]["ep"] == 8
