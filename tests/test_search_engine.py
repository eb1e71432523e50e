"""The training search and the plan engine give one answer: the step time and the memory per
device of every layout the search enumerates are the engine's (`planning/memory.py`, one formula
over arrays; `planning/combine.py` the step's arithmetic, over the engine's own stage sums), on
1,000 seeded random layouts of a dense model, a mixture of experts with expert parallelism and
ZeRO >= 1, a model with context parallelism, interleaving and recompute, a pipeline that cuts
the blocks and a model whose blocks differ (DeepSeek-V3's dense first blocks), every sampled
layout compared; and every layout `search` lists, planned again with its degrees and knobs
pinned, has the same step time and memory."""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardline.basics.options import Execution
from shardline.cli.main import main
from shardline.hardware import resolve_chip
from shardline.planning.evaluate import Context
from shardline.planning.search_answer import Group, layout_of
from shardline.planning.train_search import RunOptions, search_assignments
from shardline.planning.vector_bound import prepare
from shardline.strategies import Degrees
from shardline.workload.workload import Workload
from tests.training import training_workload

SAMPLES = 1000
EXACT = 1e-9


_workload = training_workload


def _engine_memory(w: Workload, chip_name: str, layout: dict) -> float:
    """The plan engine's memory per device: the largest of its stages' memory checks."""
    ex = Execution(
        interleave=layout["interleave"],
        recompute=layout["recompute"],
        sequence_parallel=layout["sequence_parallel"],
        zero=layout["zero"],
        tp_overlap=layout["tp_overlap"],
    )
    ctx = Context(w, resolve_chip(chip_name), ex)
    deg, m = Degrees(layout["degrees"]), layout["microbatches"]
    stages = ctx.stages(deg.stages)
    return max(ctx.memory(layers, deg, m, i).total_bytes for i, (layers, _) in enumerate(stages))


def _sampled(model: str, devices: int, sequences: int, seq_len: int, want: str, n: int) -> None:
    w = _workload(model, sequences, seq_len)
    chip = resolve_chip("h100-sxm")
    space = prepare(w, chip, [search_assignments(w, devices, {})], devices)
    rows = {**space.r, **space.out}
    group = Group(chip, devices, space.every, space.tables, rows)
    rng = np.random.default_rng(2026)
    seen = set()
    for i in rng.choice(len(rows["a"]), size=min(n, len(rows["a"])), replace=False):
        layout = layout_of(group, rows, int(i))
        engine = _engine_memory(w, "h100-sxm", layout)
        assert rows["memory_per_device_bytes"][i] == pytest.approx(engine, rel=EXACT), layout
        assert bool(rows["fits"][i]) == (engine <= chip.usable_capacity_bytes)
        deg = layout["degrees"]
        seen |= {k for k, v in deg.items() if v > 1}
        seen |= {"interleave"} if layout["interleave"] > 1 else set()
        seen |= {"zero>=1"} if layout["zero"] >= 1 else set()
        seen |= {"recompute"} if layout["recompute"] != "none" else set()
        seen |= _pipeline_tags(w, deg["pp"]) | _folded_tag(deg)
    assert set(want.split()) <= seen  # the sample holds the layouts the test is about


def _pipeline_tags(w: Workload, pp: int) -> set[str]:
    """ "layers": a pipeline that cuts the blocks (its stages hold parts of blocks); "dense":
    a pipeline whose stages differ in their kinds of block (some hold dense first blocks)."""
    from shardline.workload.dense_first import DenseFirstWorkload

    if pp == 1:
        return set()
    tags = {"layers"} if w.pipeline_splits(pp) == "layers" else set()
    dense = isinstance(w, DenseFirstWorkload) and w.dense_blocks > 0
    return tags | ({"dense"} if dense else set())


def _folded_tag(deg: dict) -> set[str]:
    """ "folded": a layout whose experts run on another tensor parallelism than its attention
    (parallel folding: etp < tp, the experts' ep over tp / etp times the attention's ep)."""
    return {"folded"} if deg.get("etp", deg["tp"]) != deg["tp"] else set()


CASES = [
    ("llama-3.2-1b", 64, 64, 1024, "tp pp dp fsdp interleave zero>=1 recompute"),
    ("mixtral-8x7b", 64, 64, 1024, "ep zero>=1 pp folded"),
    ("llama-3.2-1b", 32, 8, 8192, "cp interleave recompute"),
    # 16 blocks of 6 layers on 24 devices: pp 3, 6, 12 and 24 cut the blocks
    ("llama-3.2-1b", 24, 48, 1024, "layers interleave cp fsdp dp"),
    # 61 blocks, the first 3 dense, on 16 devices: the first stage holds the dense blocks
    ("deepseek-v3", 16, 16, 1024, "dense ep cp zero>=1 folded"),
]
IDS = ["dense", "moe-ep-zero", "cp-interleave-recompute", "layer-split", "dense-first-blocks"]


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_memory_is_the_engines(case: tuple) -> None:
    """A quick sample in the default suite (60 layouts per model)."""
    _sampled(*case, n=60)


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_memory_is_the_engines_on_1000_layouts(case: tuple) -> None:
    _sampled(*case, n=SAMPLES)


def _sampled_steps(
    model: str,
    devices: int,
    sequences: int,
    seq_len: int,
    n: int,
    run: RunOptions | None = None,
    dtype: str | None = None,
    etp: int | None = None,
) -> set[str]:
    """The vectorized step and memory of n seeded random layouts (every one sampled, whatever
    its class) against the engine's `predicted_s` and `memory_per_device_bytes`, under the
    execution `run` gives (`RunOptions.base`: a framework's defaults, `--ep-overlap`, ...) and
    the workload's `dtype`; returns the classes the sample held (`_pipeline_tags`, "inner+dp":
    cp or ep beside dp or FSDP, whose once-per-step gradient traffic each assignment prices on
    its own mesh, and "moved": a layout whose step the knobs change, against the engine's
    under the default execution)."""
    from shardline.planning.train_search import engine_result
    from shardline.planning.vector_bound import exhaustive

    w = _workload(model, sequences, seq_len, dtype)
    chip = resolve_chip("h100-sxm")
    base = (run or RunOptions()).base
    space = prepare(w, chip, [search_assignments(w, devices, {}, etp)], devices, base=base)
    exhaustive(space, w)
    rows = {**space.r, **space.out}
    group = Group(chip, devices, space.every, space.tables, rows)
    shared = Context(w, chip, space.tables.base)
    plain = Context(w, chip, Execution()) if run is not None else None
    rng = np.random.default_rng(2026)
    seen: set[str] = set()
    for i in rng.choice(len(rows["a"]), size=min(n, len(rows["a"])), replace=False):
        layout = layout_of(group, rows, int(i))
        engine = engine_result(w, chip, layout, None, shared, base)
        assert rows["predicted_s"][i] == pytest.approx(engine.predicted_s, rel=EXACT), json.dumps(
            layout
        )
        assert rows["memory_per_device_bytes"][i] == pytest.approx(
            engine.memory_per_device_bytes, rel=EXACT
        )
        deg = layout["degrees"]
        seen |= _pipeline_tags(w, deg["pp"]) | _folded_tag(deg)
        inner = deg["cp"] > 1 or deg["ep"] > 1
        seen |= {"inner+dp"} if inner and (deg["dp"] > 1 or deg["fsdp"] > 1) else set()
        if plain is not None and "moved" not in seen:
            default = engine_result(w, chip, layout, None, plain).predicted_s
            seen |= {"moved"} if abs(engine.predicted_s / default - 1) > 1e-6 else set()
    return seen


# the classes each case's sample must hold (the vectorized step was once inexact on them)
STEP_CLASSES = [
    "inner+dp", "inner+dp folded", "inner+dp", "layers inner+dp", "dense inner+dp folded",
]  # fmt: skip


@pytest.mark.parametrize(("case", "classes"), list(zip(CASES, STEP_CLASSES, strict=True)), ids=IDS)
def test_step_time_is_the_engines(case: tuple, classes: str) -> None:
    """The vectorized step time and memory equal the engine's to 1e-9 on 200 seeded random
    layouts per model, every one compared: 200, not 1,000, to keep the five near 15 s (the
    engine plans each layout, ~9 ms); the 1,000 run under -m slow."""
    assert set(classes.split()) <= _sampled_steps(*case[:4], n=200)


@pytest.mark.slow
@pytest.mark.parametrize(("case", "classes"), list(zip(CASES, STEP_CLASSES, strict=True)), ids=IDS)
def test_step_time_is_the_engines_on_1000_layouts(case: tuple, classes: str) -> None:
    assert set(classes.split()) <= _sampled_steps(*case[:4], n=SAMPLES)


KNOB_CASES = [
    # Megatron-Core's combined 1F1B: the unpaired passes' all-to-alls stay exposed
    ("mixtral-8x7b", RunOptions(execution=(("ep_overlap", True),)), None),
    # fp32 gradient reduction, FSDP2's copies, FlashAttention-2, eager ops
    ("mixtral-8x7b", RunOptions(framework="torchtitan"), None),
    # the remat reruns the all-to-alls, XLA waits on the gradient reduction, CUDA graphs
    ("mixtral-8x7b", RunOptions(framework="maxtext"), None),
    # the optimizer step op by op, fp32 gradient reduction
    ("mixtral-8x7b", RunOptions(framework="llm-foundry"), None),
    ("llama-3.2-1b", RunOptions(framework="maxtext"), None),
    # 8-bit training, Transformer Engine's current scaling: quantize kernels per local expert
    ("mixtral-8x7b", RunOptions(execution=(("fp8_recipe", "current"),)), "fp8"),
    # the busiest expert-parallel rank's tokens under random routing
    ("mixtral-8x7b", RunOptions(execution=(("random_routing", True),)), None),
    # the overlap's SMs held beside the compute
    ("mixtral-8x7b", RunOptions(execution=(("ep_overlap", True), ("ep_comm_sms", 24))), None),
]
KNOB_IDS = [
    "ep-overlap", "torchtitan", "maxtext", "llm-foundry", "dense-maxtext", "fp8-current",
    "random-routing", "ep-overlap-sms",
]  # fmt: skip


@pytest.mark.parametrize(("model", "run", "dtype"), KNOB_CASES, ids=KNOB_IDS)
def test_step_time_is_the_engines_under_knobs(
    model: str, run: RunOptions, dtype: str | None
) -> None:
    """Under a framework's defaults and the knobs the search does not try itself, the
    vectorized step time and memory equal the engine's to 1e-9 on 100 seeded random layouts
    over 16 H100s (64 x 1,024 tokens), every one compared, and the knobs change the step of
    some of them (the engine's under the default execution differs); 1,000 over 64 H100s under
    -m slow."""
    seen = _sampled_steps(model, 16, 64, 1024, n=100, run=run, dtype=dtype)
    assert {"moved", "inner+dp"} <= seen


@pytest.mark.slow
@pytest.mark.parametrize(("model", "run", "dtype"), KNOB_CASES, ids=KNOB_IDS)
def test_step_time_is_the_engines_under_knobs_on_1000_layouts(
    model: str, run: RunOptions, dtype: str | None
) -> None:
    seen = _sampled_steps(model, 64, 64, 1024, n=SAMPLES, run=run, dtype=dtype)
    assert {"moved", "inner+dp"} <= seen


def test_step_time_is_the_engines_with_etp_held() -> None:
    """--etp 2 held: the folded layouts include experts on more tensor-parallel ranks than the
    attention's (tp 1 with ep 2, 4, 8: etp 2 over two of its dp ranks); 100 seeded random
    layouts over 16 H100s, every one compared, as above."""
    assert "folded" in _sampled_steps("mixtral-8x7b", 16, 64, 1024, n=100, etp=2)


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


def _plan_argv(lay: dict) -> list[str]:
    """`plan` of Mixtral 8x7B (64 x 1,024 tokens) with a listed layout's degrees (etp and edp
    too when folded) and knobs pinned."""
    argv = [
        "plan", "--model", "mixtral-8x7b", "--hw", lay["hardware"],
        "--devices", str(lay["devices"]), "--batch", "64", "--seq-len", "1024",
        "--microbatches", str(lay["microbatches"]), "--interleave", str(lay["interleave"]),
        "--recompute", lay["recompute"], "--zero", str(lay["zero"]), "--json",
    ]  # fmt: skip
    argv += [f for k, v in lay["degrees"].items() for f in (f"--{k}", str(v))]
    argv += ["--sequence-parallel"] if lay["sequence_parallel"] else ["--no-sequence-parallel"]
    argv += ["--tp-overlap"] if lay["tp_overlap"] else ["--no-tp-overlap"]
    return argv


@pytest.mark.parametrize("framework", [None, "torchtitan"])
def test_every_listed_layout_plans_the_same(
    capsys: pytest.CaptureFixture[str], framework: str | None
) -> None:
    """`search` on Mixtral over 16 devices, then `plan` with each listed layout pinned: the same
    predicted step and memory per device (one engine), to 1e-9; under a framework's defaults
    too (torchtitan: fp32 gradient reduction, FlashAttention-2, sequence parallelism on unless
    --no-sequence-parallel)."""
    fw = ["--framework", framework] if framework else []
    r = _run(
        capsys, "search", "--model", "mixtral-8x7b", "--hw", "h100-sxm", "--devices", "16",
        "--seq-len", "1024", "--global-batch", "64Ki", "--scales", "1", "--rerank", "4", "--json",
        *fw,
    )  # fmt: skip
    listed = [r["best"], *r["alternatives"], *r["pareto"]]
    assert len(listed) >= 3
    assert not any(k.startswith("vector_") for lay in listed for k in lay)
    for lay in listed:
        plan = _run(capsys, *_plan_argv(lay), *fw)
        (p,) = plan["plans"]  # every degree pinned: the one plan, fitting or not (a listed
        # memory loser)
        assert p["predicted_s"] == pytest.approx(lay["predicted_step_s"], rel=EXACT)
        assert p["memory_per_device_bytes"] == pytest.approx(
            lay["memory_per_device_bytes"], rel=EXACT
        )


def test_dominated_stages_are_dropped() -> None:
    """Four stages of a pipeline of 4 (index, blocks, states under two ZeRO stages): stage 2 has
    no more blocks or states than stage 1, which sits earlier (more microbatches in flight), so
    it can never hold the most; stage 1 has more states than stage 0 under ZeRO 1, so it stays;
    the last stage keeps the logits and always stays."""
    from shardline.planning.memory import total_bytes, undominated

    index, blocks = [0, 1, 2, 3], [4.0, 4.0, 4.0, 3.0]
    states = np.array([[10.0, 10.0, 10.0, 12.0], [5.0, 6.0, 6.0, 7.0]])
    keep = undominated(index, states, blocks, 4)
    assert keep.tolist() == [True, True, False, True]
    # the dropped stage never holds more: held = min(m, P - i), any m, activations and logits
    for m in (1, 2, 3, 8):
        for z in (0, 1):
            held = [min(m, 4 - i) for i in index]
            totals = [total_bytes(states[z, c], blocks[c], 1.5, held[c], 0.0) for c in range(4)]
            assert totals[2] <= max(totals[c] for c in (0, 1, 3))


def test_folded_listed_layouts_plan_the_same(capsys: pytest.CaptureFixture[str]) -> None:
    """The folded layouts (parallel folding, `--etp`) the search enumerates beside the
    unfolded ones: each one `search` lists, planned again with its degrees (etp and edp
    included) and knobs pinned, has the same predicted step and memory, to 1e-9. tp 2 over 16
    devices folds only to etp 1, the experts over ep x 2 ranks."""
    r = _run(
        capsys, "search", "--model", "mixtral-8x7b", "--hw", "h100-sxm", "--devices", "16",
        "--seq-len", "1024", "--global-batch", "64Ki", "--scales", "1", "--rerank", "4",
        "--fix", "tp=2,pp=1,fsdp=1,cp=1", "--json",
    )  # fmt: skip
    listed = [r["best"], *r["alternatives"], *r["pareto"]]
    folded = [lay for lay in listed if "etp" in lay["degrees"]]
    assert folded and all(lay["degrees"]["etp"] == 1 for lay in folded)
    for lay in folded:
        (p,) = _run(capsys, *_plan_argv(lay))["plans"]
        assert p["degrees"]["etp"] == lay["degrees"]["etp"]
        assert p["predicted_s"] == pytest.approx(lay["predicted_step_s"], rel=EXACT)
        assert p["memory_per_device_bytes"] == pytest.approx(
            lay["memory_per_device_bytes"], rel=EXACT
        )
