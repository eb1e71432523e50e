"""Two MoE mechanisms of Megatron-Core runs (docs/moe.md, "The overlap's unpaired passes and
the per-expert quantization"): the chunk passes that Megatron-Core's combined 1F1B schedule runs
with no partner, whose all-to-alls stay exposed under --ep-overlap, and the kernels Transformer
Engine launches to quantize each local expert's split apart under --fp8-recipe. Every value is
derived by hand below."""

from __future__ import annotations

import pytest

from shardline.basics.options import Execution
from shardline.errors import InputError
from shardline.hardware import resolve_chip
from shardline.planning.api import plan
from shardline.planning.evaluate import Context
from shardline.planning.moe_stage import moe_kernels_s
from shardline.planning.step import ep_unpaired_passes
from shardline.realistic.block import moe_layer_kernels, quantize_kernels
from shardline.strategies import Degrees
from shardline.workload.templates import transformer

D, S = 512, 256  # a small MoE: 8 blocks, 16 experts of width 256, top-2
SMALL = dict(d_model=D, d_ff=1024, heads=8, kv_heads=8, layers=8, seq_len=S, vocab=None)
MOE = {"experts": 16, "experts_per_token": 2, "expert_d_ff": 256}


def test_unpaired_passes_of_the_combined_schedule() -> None:
    # no pipeline: the first microbatch's forward and the last one's backward run alone
    assert ep_unpaired_passes(1, 1, 64) == 1
    # Qwen3-235B-A22B on H100s, P 8, V 4: rank 0 warms up with (8 - 0 - 1) x 2 + (4 - 1) x 8
    # = 38 forwards, and one more with the overlap: 39 of its 128 x 4 chunk passes
    assert ep_unpaired_passes(8, 4, 128) == 39
    # DeepSeek-V3 on B200s, P 8, V 2: 14 + 8 + 1 = 23
    assert ep_unpaired_passes(8, 2, 128) == 23
    # at most every chunk pass: 4 microbatches of 2 chunks are 8
    assert ep_unpaired_passes(8, 2, 4) == 8
    # a pipeline without interleaving is not Megatron-Core's overlap schedule (it asserts VP)
    assert ep_unpaired_passes(16, 1, 120) == 0


def _plans(**extra: object) -> tuple[object, object]:
    w = transformer(batch=64, moe=MOE, **SMALL)
    chip = resolve_chip("h100-sxm")
    kw = dict(ep=4, dp=1, microbatches=16, require_fit=False, ep_comm_sms=32) | extra
    on = plan(w, chip, 4, ep_overlap=True, **kw).plans[0]
    off = plan(w, chip, 4, **kw).plans[0]
    return on, off


def test_the_first_forward_and_last_backward_keep_their_all_to_alls() -> None:
    # one stage, m = 64 / 4 = 16 microbatches. With the overlap every microbatch's stage time is
    # t_on; the unpaired forward and backward run as without it, t_off: the step is
    # 15 t_on + t_off where it was 16 t_on, so it grows by t_off - t_on
    on, off = _plans()
    m = on.microbatches
    assert m == 16
    t_on, t_off = on.stages[0]["predicted_s"], off.stages[0]["predicted_s"]
    assert t_off > t_on  # the all-to-alls of a microbatch take longer exposed than hidden
    busy = {k: v for k, v in on.predicted_breakdown_s.items() if k != "optimizer_s"}
    assert sum(busy.values()) == pytest.approx((m - 1) * t_on + t_off, rel=1e-9)
    exposed = on.predicted_breakdown_s["exposed_comm_s"]
    per_microbatch = (
        on.stages[0]["predicted_s"]
        - sum(
            v
            for k, v in on.predicted_breakdown_s.items()
            if k not in ("exposed_comm_s", "optimizer_s")
        )
        / m
    )
    assert exposed == pytest.approx(m * per_microbatch + (t_off - t_on), rel=1e-9)


def test_quantize_kernels_per_recipe() -> None:
    # Qwen3-30B-A3B over EP 16: 8 local experts. Current scaling quantizes each with three
    # kernels (amax, scale, cast): 24, of which the block's cast op prices one: 23; MXFP8 one an
    # expert: 7; delayed scaling one fused cast-transpose over all: none more
    assert quantize_kernels(8, "current") == 23
    assert quantize_kernels(8, "mxfp8") == 7
    assert quantize_kernels(8, "blockwise") == 7
    assert quantize_kernels(8, "delayed") == 0
    # two grouped linears, in each pass; only on the per-expert (eager) path and in fp8
    k = moe_layer_kernels(8, fp8=True, per_expert_gemms=True, fp8_recipe="current")
    assert k.quantize == 2 * 23
    assert (
        moe_layer_kernels(8, fp8=True, per_expert_gemms=False, fp8_recipe="current").quantize == 0
    )
    assert (
        moe_layer_kernels(8, fp8=False, per_expert_gemms=True, fp8_recipe="current").quantize == 0
    )


def test_quantize_kernels_reach_the_stage() -> None:
    # 8 fp8 MoE blocks over ep 4 (4 local experts) on H100 eager, a kernel max(4 us launch, 1.26
    # us floor) = 4 us: current scaling adds 2 x (3 x 4 - 1) = 22 kernels a block in each pass
    w = transformer(batch=64, moe=MOE, dtype="fp8", **SMALL)
    chip = resolve_chip("h100-sxm")
    out = {}
    for recipe in ("delayed", "current"):
        ctx = Context(w, chip, Execution(fp8_recipe=recipe))
        layers, _ = ctx.stages(1)[0]
        out[recipe] = moe_kernels_s(ctx, layers, Degrees(ep=4), 4)
    (s0, f0, b0), (s1, f1, b1) = out["delayed"], out["current"]
    assert s1 == pytest.approx(s0)
    assert f1 - f0 == pytest.approx(8 * 22 * 4e-6)  # 0.704 ms
    assert b1 - b0 == pytest.approx(8 * 22 * 4e-6)


def test_an_unknown_recipe_is_refused() -> None:
    with pytest.raises(InputError, match="fp8_recipe must be one of delayed, current, mxfp8"):
        Execution(fp8_recipe="e4m3")


def _a2a_calls(framework: str, recompute: str) -> float:
    w = transformer(batch=64, moe=MOE, **SMALL)
    chip = resolve_chip("tpu-v5p")
    kw = dict(ep=4, microbatches=1, require_fit=False, framework=framework, recompute=recompute)
    best = plan(w, chip, 4, **kw).plans[0]
    return sum(c.calls for c in best.comm if c.purpose == "ep" and c.kind == "all_to_all")


def test_jax_remat_routes_the_rerun_experts_tokens_again() -> None:
    # 8 MoE blocks, one microbatch: a dispatch and a combine forward, their two gradients
    # backward, 4 all-to-alls a block: 32
    assert _a2a_calls("megatron", "keep:x,q,k,v") == 32
    assert _a2a_calls("maxtext", "none") == 32
    # JAX's remat recomputes what the policy does not save: keeping x, q, k and v only, the
    # expert einsums rerun, and with them the dispatch and the combine: 6 a block, 48
    assert _a2a_calls("maxtext", "keep:x,q,k,v") == 48
    from shardline.basics.framework import load_framework

    assert load_framework("maxtext").remat_collectives
    assert not load_framework("megatron").remat_collectives


def test_full_recompute_reruns_the_dispatch_and_combine() -> None:
    # Megatron-Core's full recompute checkpoints whole transformer layers, and a MoE layer's
    # forward routes, dispatches, runs the experts and combines in one function
    # (MoELayer.forward): its recompute routes the tokens again. 8 MoE blocks, one
    # microbatch: 4 all-to-alls a block without recompute (32), 6 with the rerun dispatch and
    # combine (48), under Megatron-Core and MaxText alike
    assert _a2a_calls("megatron", "none") == 32
    assert _a2a_calls("megatron", "full") == 48
    assert _a2a_calls("maxtext", "full") == 48
    # every all-to-all moves the same top-k token slots (the dispatch, the combine and their
    # gradients alike), so the step's all-to-all bytes grow by the same 6 / 4
    w = transformer(batch=64, moe=MOE, **SMALL)
    kw = dict(ep=4, microbatches=1, require_fit=False)
    full = plan(w, "h100-sxm", 4, recompute="full", **kw).plans[0]
    none = plan(w, "h100-sxm", 4, recompute="none", **kw).plans[0]

    def moved(p: object) -> float:  # a plan's terms: calls and bytes summed over the step
        return sum(c.bytes for c in p.comm if c.purpose == "ep" and c.kind == "all_to_all")

    assert moved(full) == pytest.approx(moved(none) * 6 / 4, rel=1e-12)


def test_random_routing_load_by_hand() -> None:
    # Qwen3-30B-A3B on 16 H100s at MBS 1: a rank receives 4096 tokens x 8 copies = 32,768 pairs
    # a microbatch on average. s^2 = 32768 x (128 - 8) / 127 = 30,962, s = 175.96; the largest
    # of 16 standard normals, Blom: PHI^-1(15.625 / 16.25) = PHI^-1(0.961538) = 1.76883; load =
    # 1 + 1.76883 x 175.96 / 32768 = 1.009498
    from statistics import NormalDist

    from shardline.workload.moe import random_routing_load

    e16 = NormalDist().inv_cdf(15.625 / 16.25)
    assert e16 == pytest.approx(1.76883, abs=1e-5)
    assert random_routing_load(32768, 128, 8, 16) == pytest.approx(1.009498, abs=1e-6)
    # 8 GB200s at MBS 4: 131,072 pairs over 8 ranks, e_8 = PHI^-1(7.625 / 8.25) = 1.43420
    expect = 1 + 1.43420 * (131072 * 120 / 127) ** 0.5 / 131072
    assert random_routing_load(131072, 128, 8, 8) == pytest.approx(expect, rel=1e-6)
    # one rank, or every expert chosen, leaves nothing to draw
    assert random_routing_load(32768, 128, 8, 1) == 1.0
    assert random_routing_load(32768, 8, 8, 4) == 1.0


def test_random_routing_slows_the_expert_einsums_by_the_load() -> None:
    # 8 blocks of 16 experts over ep 4, 4 local, batch 64 of 256 tokens in 4 microbatches: a
    # rank's experts receive 16 x 256 x 2 / 4 = 2048 pairs a microbatch; the expert einsums'
    # time grows by load - 1 and nothing else does
    from shardline.workload.moe import random_routing_load

    w = transformer(batch=64, moe=MOE, **SMALL)
    chip = resolve_chip("h100-sxm")
    kw = dict(ep=4, microbatches=4, require_fit=False)
    drawn = plan(w, chip, 4, random_routing=True, **kw).plans[0]
    even = plan(w, chip, 4, **kw).plans[0]
    load = random_routing_load(16 * 256 * 2 / 4, 16, 2, 4)
    # e_4 = PHI^-1(3.625 / 4.25) = 1.04913; s = sqrt(2048 x 14 / 15)
    assert load == pytest.approx(1 + 1.04913 * (2048 * 14 / 15) ** 0.5 / 2048, rel=1e-6)
    ctx = Context(w, chip, Execution())
    experts = 0.0
    for layer, n in ctx.stages(1)[0][0]:
        if layer.name in ("expert_in", "expert_down"):
            part = ctx.part(layer, n, Degrees(ep=4), 4)
            experts += sum(e.predicted_s for e in part.fwd + part.bwd)
    added = drawn.predicted_breakdown_s["gemm_s"] - even.predicted_breakdown_s["gemm_s"]
    assert added == pytest.approx(4 * (load - 1) * experts, rel=1e-9)
    for key in ("attention_s", "other_ops_s"):
        assert drawn.predicted_breakdown_s[key] == even.predicted_breakdown_s[key]
