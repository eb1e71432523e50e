"""Data-parallel gradient buckets as the framework cuts them: Megatron-Core's
DistributedDataParallel reduces the gradients in buckets of max(40e6, 1e6 x dp) parameters
(megatron/core/distributed/distributed_data_parallel.py; frameworks/megatron.toml), each one
collective at the bucket's size; a framework without a rule reduces each weight gradient as
its own collective."""

from __future__ import annotations

import pytest

from shardline.basics.framework import dp_bucket_params
from shardline.basics.options import Execution
from shardline.hardware import resolve_chip
from shardline.planning.evaluate import Context
from shardline.planning.step import _dp_grad_s, bucketed_s, dp_bucket_bytes
from shardline.strategies import Degrees
from tests.training import training_workload


def test_megatron_bucket_rule() -> None:
    """bucket_size = max(40,000,000, 1,000,000 x dp) parameters: the floor below 40 replicas,
    1e6 per replica above."""
    assert dp_bucket_params("megatron", 8) == 40e6
    assert dp_bucket_params("Megatron", 48) == 48e6
    assert dp_bucket_params("torchtitan", 48) is None


def test_bucketed_by_hand() -> None:
    """20 gradients of 48 MB share 96 MB buckets: 960 MB / 96 MB = 10 calls, each
    1 ms + 96e6 / 50e9 s; 2 gradients of 200 MB close a bucket each: 2 calls of
    1 ms + 200e6 / 50e9 s."""
    price = lambda kind, nbytes: 1e-3 + nbytes / 50e9  # noqa: E731
    got = bucketed_s(price, [("reduce_scatter", 48e6, 20), ("reduce_scatter", 200e6, 2)], 96e6)
    assert got == pytest.approx(10 * (1e-3 + 96e6 / 50e9) + 2 * (1e-3 + 200e6 / 50e9))


def _stage(framework: str):
    w = training_workload("llama-3.2-1b", 64, 1024)
    ctx = Context(w, resolve_chip("h100-sxm"), Execution(zero=1, framework=framework))
    deg = Degrees({"tp": 1, "pp": 1, "dp": 64, "fsdp": 1, "ep": 1, "cp": 1})
    ((layers, last),) = ctx.stages(1)
    return ctx, deg, ctx.stage(deg, 8, 0, layers, last)


def test_engine_prices_megatron_buckets() -> None:
    """Llama-3.2-1B (bf16) over dp 64 under Megatron-Core: buckets of max(40e6, 64e6) = 64e6
    parameters x 2 bytes = 128 MB; its reduce-scatter and all-gather each cost
    bytes / 128 MB calls of one 128 MB collective. Each of its weight gradients is smaller
    (the largest, the gate and up projections' 2048 x 2 x 8192 x 2 B = 67.1 MB), so the
    buckets sit higher on the library's size ramp and the traffic costs less than one
    collective per gradient (torchtitan: no rule)."""
    ctx, deg, stage = _stage("megatron")
    assert dp_bucket_bytes(ctx.workload, ctx.execution, 64) == 64e6 * 2
    dp_terms = [t for t in stage.terms if t.once_per_step and t.purpose == "dp"]
    by_kind: dict[str, float] = {}
    for t in dp_terms:
        by_kind[t.kind] = by_kind.get(t.kind, 0.0) + t.calls * t.bytes
    assert set(by_kind) == {"reduce_scatter", "all_gather"}
    assert max(t.bytes for t in dp_terms) == 2048 * 2 * 8192 * 2
    net = ctx.network(deg)
    others = float(stage.grad.predicted_s) - sum(t.calls * t.t_pred_s for t in dp_terms)
    # every gradient is below the bucket, so all of them share buckets; the all-gather of the
    # updated parameters apart (it follows the optimizer step)
    price = {k: b / 128e6 * net.predicted(k, 128e6, "dp") for k, b in by_kind.items()}
    grad_s, gather_s = _dp_grad_s(ctx, deg, stage)
    assert grad_s == pytest.approx(others + price["reduce_scatter"], rel=1e-12)
    assert gather_s == pytest.approx(price["all_gather"], rel=1e-12)
    ctx_tt, deg_tt, stage_tt = _stage("torchtitan")
    per_gradient = sum(_dp_grad_s(ctx_tt, deg_tt, stage_tt))
    assert per_gradient == pytest.approx(float(stage_tt.grad.predicted_s), rel=1e-12)
    assert grad_s + gather_s < per_gradient


def test_parameter_gather_behind_the_next_forward() -> None:
    """ZeRO-1's all-gather of the updated parameters follows the optimizer step: with
    --overlap-param-gather what outlasts one forward pass shows, max(0, gather - forward);
    without, all of it; the gradient reduce-scatter overlaps the last backward either way,
    max(last bucket, reduce - backward)."""
    from shardline.planning.step import _dp_exposed_s

    ctx, deg, stage = _stage("megatron")
    grad_s, gather_s = _dp_grad_s(ctx, deg, stage)
    net = ctx.network(deg)
    last = net.predicted("all_reduce", 128e6, "dp")
    reduce = max(last, grad_s - stage.bwd.predicted_s)
    want_on = reduce + max(0.0, gather_s - stage.fwd.predicted_s)
    assert _dp_exposed_s(ctx, deg, stage) == pytest.approx(want_on, rel=1e-12)
    off = Context(ctx.workload, ctx.chip, Execution(zero=1, overlap_param_gather=False))
    ((layers, last_flag),) = off.stages(1)
    stage_off = off.stage(deg, 8, 0, layers, last_flag)
    assert _dp_exposed_s(off, deg, stage_off) == pytest.approx(reduce + gather_s, rel=1e-12)


def test_gradient_reduce_waited_for_without_overlap() -> None:
    """overlap_grad_reduce=False (Megatron-LM without --overlap-grad-reduce) leaves no backward
    pass to hide the gradient traffic behind:
    max(last bucket, grad - 0) = grad, plus the parameter all-gather as before; on, the reduce
    shows only as max(last bucket, grad - backward)."""
    from shardline.planning.step import _dp_exposed_s

    w = training_workload("llama-3.2-1b", 64, 1024)
    deg = Degrees({"tp": 1, "pp": 1, "dp": 64, "fsdp": 1, "ep": 1, "cp": 1})
    got = {}
    for overlap in (True, False):
        ctx = Context(w, resolve_chip("h100-sxm"), Execution(zero=1, overlap_grad_reduce=overlap))
        ((layers, last_flag),) = ctx.stages(1)
        stage = ctx.stage(deg, 8, 0, layers, last_flag)
        grad_s, gather_s = _dp_grad_s(ctx, deg, stage)
        last = ctx.network(deg).predicted("all_reduce", 128e6, "dp")
        gather = max(0.0, gather_s - stage.fwd.predicted_s)
        hidden = stage.bwd.predicted_s if overlap else 0.0
        want = max(last, grad_s - hidden) + gather
        got[overlap] = _dp_exposed_s(ctx, deg, stage)
        assert got[overlap] == pytest.approx(want, rel=1e-12)
    assert got[False] == pytest.approx(grad_s + gather, rel=1e-12)
    assert got[False] > got[True]


def test_maxtext_waits_for_the_gradient_reduce_on_gpus_only() -> None:
    """MaxText's framework file: under XLA:GPU the gradient all-reduce is not overlapped
    (openxla/xla issue 1539), so a GPU plan waits for all of it; the TPU's scheduler is not
    covered by that source, so there the reduction stays behind the backward pass."""
    from shardline.basics.framework import grad_reduce_waited_on
    from shardline.planning.step import grad_reduce_hidden

    assert grad_reduce_waited_on("maxtext") == ("gpu",)
    assert grad_reduce_waited_on("megatron") == ()
    maxtext = Execution(framework="maxtext")
    assert not grad_reduce_hidden(maxtext, resolve_chip("h100-sxm"))
    assert grad_reduce_hidden(maxtext, resolve_chip("tpu-v5e"))
    assert grad_reduce_hidden(Execution(), resolve_chip("h100-sxm"))
    assert not grad_reduce_hidden(Execution(overlap_grad_reduce=False), resolve_chip("tpu-v5e"))


def test_vectorized_search_waits_as_the_engine_does() -> None:
    """The vectorized search prices MaxText's GPU gradient reduce as the plan engine does: every
    layout with dp > 1 (the reduction waited for after the backward pass) against
    `engine_result` under the same execution. The gradients travel in their own dtype here: the
    vectorized tables size them without `grad_reduce_dtype` (planning.vector_weights.block_weights),
    a gap of their own."""
    import numpy as np

    from shardline.planning.search import assignments as degree_assignments
    from shardline.planning.search_answer import layout_of
    from shardline.planning.step import grad_reduce_hidden
    from shardline.planning.train_search import Group, engine_result
    from shardline.planning.vector_bound import exhaustive, group_rows, prepare

    w = training_workload("llama-3.2-1b", 16, 1024)
    chip = resolve_chip("h100-sxm")
    base = Execution(framework="maxtext", recompute="none")
    every = list(degree_assignments(w, 8, {"tp": 1, "pp": 1, "cp": 1, "ep": 1}, every=True))
    space = prepare(w, chip, [every], 8, ("none",), base)
    exhaustive(space, w)
    rows = group_rows(space, 0)
    group = Group(chip, 8, every, space.tables, rows)
    dp = np.array([d["dp"] for d in every])[rows["a"]]
    picks = np.flatnonzero(dp > 1)[:6]
    assert len(picks) > 0
    assert not grad_reduce_hidden(base, chip)
    for i in picks:
        res = engine_result(w, chip, layout_of(group, rows, int(i)), None, base=base)
        assert rows["predicted_s"][i] == pytest.approx(res.predicted_s, rel=1e-6)


def test_deepspeed_reduces_the_gradients_after_the_backward_pass() -> None:
    """DeepSpeed's engine calls allreduce_gradients() after loss.backward() returns, and its
    pipeline schedule appends ReduceGrads() after the batch's last BackwardPass
    (frameworks/deepspeed.toml overlap_grad_reduce = false): a plan made with
    framework="deepspeed" waits for all of the data-parallel gradient traffic,
    exposed = grad + max(0, gather - forward), against max(last bucket, grad - backward) + gather
    when the same run overlaps it."""
    from shardline.basics.framework import load_framework
    from shardline.planning.api import plan
    from shardline.planning.step import _dp_exposed_s, grad_reduce_hidden

    assert load_framework("deepspeed").defaults["overlap_grad_reduce"] is False
    assert "overlap_grad_reduce" not in load_framework("megatron").defaults
    w = training_workload("llama-3.2-1b", 64, 1024)
    chip = resolve_chip("h100-sxm")
    given = {"tp": 1, "pp": 1, "dp": 64, "fsdp": 1, "microbatches": 1}
    result = plan(w, chip, 64, require_fit=False, framework="deepspeed", **given)
    assert result.execution.overlap_grad_reduce is False  # the framework's default, applied
    (waited,) = result.plans
    ds = Execution(framework="deepspeed", overlap_grad_reduce=False)
    assert not grad_reduce_hidden(ds, chip)
    deg = Degrees({"tp": 1, "pp": 1, "dp": 64, "fsdp": 1, "ep": 1, "cp": 1})
    exposed = {}
    for overlap in (True, False):
        ctx = Context(w, chip, Execution(framework="deepspeed", overlap_grad_reduce=overlap))
        ((layers, last_flag),) = ctx.stages(1)
        stage = ctx.stage(deg, 1, 0, layers, last_flag)
        grad_s, gather_s = _dp_grad_s(ctx, deg, stage)
        gather = max(0.0, gather_s - stage.fwd.predicted_s)
        exposed[overlap] = _dp_exposed_s(ctx, deg, stage)
        if not overlap:
            assert exposed[overlap] == pytest.approx(grad_s + gather, rel=1e-12)
    assert exposed[False] > exposed[True]
    (hidden,) = plan(
        w, chip, 64, require_fit=False, framework="deepspeed", overlap_grad_reduce=True, **given
    ).plans
    # the one difference between the two plans is the wait for the gradient traffic
    assert waited.predicted_s - hidden.predicted_s == pytest.approx(
        exposed[False] - exposed[True], rel=1e-6
    )
