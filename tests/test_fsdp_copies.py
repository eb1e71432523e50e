"""FSDP2's copies on the compute stream (frameworks/torchtitan.toml [fsdp_copies],
shardline.planning.stage_extras.add_fsdp_copies): each all-gathered weight copied out of the
gather buffer into its parameter, each weight gradient copied into the reduce-scatter buffer
in the reduce dtype; and the vectorized search prices them as the engine does."""

from __future__ import annotations

import numpy as np
import pytest

from shardline.basics.framework import fsdp_copies
from shardline.basics.options import Execution
from shardline.hardware import resolve_chip
from shardline.planning.evaluate import Context, evaluate_plan
from shardline.planning.search import assignments as degree_assignments
from shardline.planning.search_answer import Group, layout_of
from shardline.planning.train_search import engine_result
from shardline.planning.vector_bound import exhaustive, prepare
from shardline.strategies import Degrees
from shardline.workload.templates import transformer
from tests.training import training_workload

REL = 1e-9


def test_only_fsdp2_frameworks_copy() -> None:
    assert fsdp_copies("torchtitan") == (True, True)
    for name in ("megatron", "llm-foundry", "deepspeed", "maxtext"):
        assert fsdp_copies(name) == (False, False)


def _other_ops(framework: str, grad_reduce_dtype: str | None) -> float:
    w = transformer(
        d_model=1024, d_ff=2816, heads=16, kv_heads=4, head_dim=64, batch=16, seq_len=1024,
        layers=4, vocab=None,
    )  # fmt: skip
    ex = Execution(framework=framework, grad_reduce_dtype=grad_reduce_dtype)
    ctx = Context(w, resolve_chip("h100-sxm"), ex)
    result = evaluate_plan(ctx, Degrees({"fsdp": 8}), 1)
    return result.predicted_breakdown_s["other_ops_s"]


def test_copies_read_and_write_every_gathered_weight_and_gradient() -> None:
    # 4 blocks of d(H + 2G)Q + HQd + 3 d d_ff bf16 parameters: W bytes gathered per microbatch
    params = 4 * (1024 * (16 + 8) * 64 + 16 * 64 * 1024 + 3 * 1024 * 2816)
    w_bytes = 2 * params
    chip = resolve_chip("h100-sxm")
    rate = chip.achievable.mem_bytes_per_s
    launch = max(chip.achievable.launch_overhead_s, chip.achievable.kernel_floor_s)
    base = _other_ops("megatron", "fp32")
    # forward: copy-out 2 W; backward: copy-out of the re-gather 2 W and the copy-in of the
    # gradients, read in bf16 (W) and written in fp32 (2 W): 7 W in all; one copy kernel per
    # block for the forward's gather, two for the backward's gather and reduce-scatter
    fp32 = _other_ops("torchtitan", "fp32") - base
    assert fp32 == pytest.approx(7 * w_bytes / rate + 4 * 3 * launch, rel=1e-6)
    # gradients reduced in their own bf16: the copy-in reads W and writes W, 6 W in all
    bf16 = _other_ops("torchtitan", None) - _other_ops("megatron", None)
    assert bf16 == pytest.approx(6 * w_bytes / rate + 4 * 3 * launch, rel=1e-6)


def test_vectorized_search_prices_the_copies_as_the_engine() -> None:
    w = training_workload("llama-3.2-1b", 64, 1024)
    chip = resolve_chip("h100-sxm")
    base = Execution(framework="torchtitan")
    space = prepare(w, chip, [list(degree_assignments(w, 64, {}, every=True))], 64, base=base)
    exhaustive(space, w)
    rows = {**space.r, **space.out}
    group = Group(chip, 64, space.every, space.tables, rows)
    rng = np.random.default_rng(2026)
    compared = 0
    for i in rng.permutation(len(rows["a"])):
        layout = layout_of(group, rows, int(i))
        d = layout["degrees"]
        cut = d["pp"] > 1 and w.pipeline_splits(d["pp"]) == "layers"
        if d["fsdp"] <= 1 or d["cp"] > 1 or d["ep"] > 1 or cut:
            continue
        engine = engine_result(w, chip, layout, None, None, base)
        without = engine_result(w, chip, layout, None, None, Execution())
        ops = engine.predicted_breakdown_s["other_ops_s"]
        assert ops > without.predicted_breakdown_s["other_ops_s"]  # the copies cost time
        assert rows["predicted_s"][i] == pytest.approx(engine.predicted_s, rel=REL)
        compared += 1
        if compared == 20:
            break
    assert compared == 20
