"""The MoE layer's kernels as the frameworks run them (docs/moe.md, "The MoE layer's kernels"):
Megatron-Core's router and dispatch-bookkeeping kernels and Transformer Engine's per-expert GEMMs
of eager runs, and MaxText's dispatch and combine einsums with one-hot masks. Every value is
derived by hand below."""

from __future__ import annotations

import pytest

from shardline.basics.options import Execution
from shardline.errors import InputError
from shardline.hardware import resolve_chip
from shardline.ops.layer import Layer, backward_layers
from shardline.planning.evaluate import Context
from shardline.planning.moe_stage import moe_kernels_s
from shardline.realistic.block import moe_layer_kernels
from shardline.strategies import Degrees
from shardline.workload.templates import transformer

D, S = 512, 256  # a small MoE: 8 blocks, 16 experts of width 256, top-2
SMALL = dict(d_model=D, d_ff=1024, heads=8, kv_heads=8, layers=8, seq_len=S, vocab=None)
MOE = {"experts": 16, "experts_per_token": 2, "expert_d_ff": 256}


def test_kernel_counts_of_megatron_moe_layer() -> None:
    # Qwen3-30B-A3B over EP 8: 128 / 8 = 16 local experts. Small kernels per pass: fused top-k
    # and six of the load-balancing loss (7), two contiguous copies and the count sum (3), in fp8
    # the padding of tokens and probabilities and the unpadding (3): 13. Eager, each of the two
    # grouped linears launches 16 GEMMs where one is priced: 2 x 15 = 30 more forward, twice
    # that backward (data and weight gradients)
    k = moe_layer_kernels(16, fp8=True, per_expert_gemms=True)
    assert (k.small, k.gemms_fwd, k.gemms_bwd) == (13, 30, 60)
    # bf16: no padding; one local expert: its one GEMM is the one priced
    assert moe_layer_kernels(1, fp8=False, per_expert_gemms=True).gemms_fwd == 0
    assert moe_layer_kernels(16, fp8=False, per_expert_gemms=True).small == 10
    # the single grouped GEMM of a CUDA-graphed run (TE's capturable path): no per-expert GEMMs
    assert moe_layer_kernels(16, fp8=True, per_expert_gemms=False).gemms_bwd == 0
    # inference: no load-balancing loss, top-k and the 3 dispatch kernels
    assert moe_layer_kernels(16, fp8=False, per_expert_gemms=True, training=False).small == 4


def _stage_kernels(ex: Execution, ep: int) -> tuple[float, float, float]:
    w = transformer(batch=64, moe=MOE, **SMALL)
    ctx = Context(w, resolve_chip("h100-sxm"), ex)
    layers, _ = ctx.stages(1)[0]
    return moe_kernels_s(ctx, layers, Degrees(ep=ep), 4)


def test_kernel_seconds_of_a_stage_on_h100() -> None:
    # 8 MoE blocks, bf16, ep 4: 16 / 4 = 4 local experts. H100 SXM eager: a kernel costs
    # max(launch 4 us, floor 1.26 us) = 4 us, a GEMM kernel max(4, 5.2) = 5.2 us
    small, fwd, bwd = _stage_kernels(Execution(), 4)
    assert small == pytest.approx(8 * 10 * 4e-6)  # 0.32 ms
    assert fwd == pytest.approx(8 * 2 * 3 * 5.2e-6)  # 0.2496 ms
    assert bwd == pytest.approx(8 * 4 * 3 * 5.2e-6)
    # a full-iteration CUDA graph: the floors (1.26 us), and no per-expert GEMMs
    small, fwd, bwd = _stage_kernels(Execution(cuda_graphs=True), 4)
    assert (small, fwd, bwd) == (pytest.approx(8 * 10 * 1.26e-6), 0.0, 0.0)
    # another framework's MoE layer is not Megatron-Core's
    assert _stage_kernels(Execution(framework="torchtitan"), 4) == (0.0, 0.0, 0.0)


@pytest.mark.parametrize("phase", ["forward", "prefill", "decode"])
def test_an_inference_step_runs_the_engines_fused_moe(phase: str) -> None:
    # the training test above prices 8 x 10 x 4 us small kernels and 8 x 2 x 3 GEMMs of 5.2 us
    # for the same blocks; an inference step runs one fused MoE per projection (the block's
    # einsums already price it): no Megatron-Core kernels at all, eager or graphed
    w = transformer(batch=64, moe=MOE, phase=phase, **SMALL)
    for ex in (Execution(), Execution(cuda_graphs=True)):
        ctx = Context(w, resolve_chip("h100-sxm"), ex)
        layers, _ = ctx.stages(1)[0]
        assert moe_kernels_s(ctx, layers, Degrees(ep=4), 1) == (0.0, 0.0, 0.0)


def test_kernels_reach_the_plan(monkeypatch: pytest.MonkeyPatch) -> None:
    # the step's memory-bound ops grow by exactly the kernels: forward small + fwd GEMMs,
    # backward small + bwd GEMMs (one microbatch, one stage)
    from shardline.planning import moe_stage
    from shardline.planning.api import plan

    w = transformer(batch=64, moe=MOE, **SMALL)
    chip = resolve_chip("h100-sxm")
    with_kernels = plan(w, chip, 4, ep=4, microbatches=1, require_fit=False).plans[0]
    small, fwd, bwd = _stage_kernels(Execution(), 4)
    monkeypatch.setattr(moe_stage, "MOE_KERNEL_FRAMEWORKS", ())
    without = plan(w, chip, 4, ep=4, microbatches=1, require_fit=False).plans[0]
    key = "other_ops_s"
    added = with_kernels.predicted_breakdown_s[key] - without.predicted_breakdown_s[key]
    assert added == pytest.approx(2 * small + fwd + bwd, rel=1e-9)  # 1.389 ms


MASKED = MOE | {"capacity_factor": 1.5, "dispatch_einsums": True}


def test_maxtext_dispatch_and_combine_einsums() -> None:
    # MaxText's dense_matmul: C = ceil(S k / X) x 1.5 = 256 x 2 / 16 x 1.5 = 48 slots; the dispatch
    # "BSM,BSEC -> EBCM" and the combine "EBCM,BSEC -> BSM" do 2 B S X C D FLOPs each
    w = transformer(batch=2, moe=MASKED, **SMALL)
    names = [layer.name for layer in w.layers]
    assert names[names.index("router") + 1] == "moe_dispatch"
    assert names[names.index("expert_down") + 1] == "moe_combine"
    by = {layer.name: layer for layer in w.layers}
    flops = 2 * 2 * S * 16 * 48 * D
    for name in ("moe_dispatch", "moe_combine"):
        dims = by[name].dims
        assert (dims["X"], dims["C"]) == (16, 48)
        assert 2 * dims["B"] * dims["S"] * dims["X"] * dims["C"] * dims["D"] == flops
    # the dispatch mask is the combine mask cast to bool: no gradient; the combine's mask
    # carries the routing weights' gradient: one backward einsum and two
    assert [g.name for g in backward_layers(by["moe_dispatch"])] == ["moe_dispatch.grad_x"]
    assert len(backward_layers(by["moe_combine"])) == 2
    # the gather path (sparse_matmul, or no flag) has neither
    plain = transformer(batch=2, moe=MOE | {"capacity_factor": 1.5}, **SMALL)
    assert not {"moe_dispatch", "moe_combine"} & {layer.name for layer in plain.layers}


def test_mask_einsums_need_a_capacity() -> None:
    with pytest.raises(InputError, match="dispatch_einsums needs a capacity_factor"):
        transformer(batch=2, moe=MOE | {"dispatch_einsums": True}, **SMALL)
    with pytest.raises(InputError, match="dispatch_einsums must be true or false"):
        transformer(batch=2, moe=MOE | {"capacity_factor": 1.0, "dispatch_einsums": 1}, **SMALL)


def test_constant_inputs_are_checked() -> None:
    with pytest.raises(InputError, match="constant names inputs that are not weights"):
        Layer("up", "x[B,D] * w[D,F] -> h[B,F]", {"B": 2, "D": 4, "F": 8}, weights=("w",),
              constant=("w",))  # fmt: skip
    with pytest.raises(InputError, match="constant names inputs"):
        Layer("up", "x[B,D] * w[D,F] -> h[B,F]", {"B": 2, "D": 4, "F": 8}, constant=("h",))


def test_decode_experts_read_their_weights_at_the_fused_moe_kernel_rate() -> None:
    """A decode step's routed expert einsums read HBM at the chip's fused MoE kernel rate
    (b200: achievable.moe_decode_bytes_per_s = 4.83e12, FlashInfer PR 4048's DeepSeek-V3 MoE at
    256 tokens over 32 local experts) instead of its streaming rate (7.26e12): every byte the
    einsum moves takes 1 / 4.83e12 - 1 / 7.26e12 s more; the other einsums of the step and chips
    without the figure (gb200) are unchanged."""
    from shardline.hardware import load_chip
    from shardline.models import load_model
    from shardline.models.template import model_workload
    from shardline.realistic.kernels import einsum_time_s, gemm_time_s, moe_decode_chip

    w = model_workload(load_model("qwen3-30b-a3b"), phase="decode", batch=8, seq_len=1024,
                       dtype="fp4")  # fmt: skip
    assert w.model is not None and w.model.decode
    b200 = load_chip("b200")
    assert b200.achievable.moe_decode_bytes_per_s == 4.83e12
    assert b200.achievable.mem_bytes_per_s == 7.26e12
    up = next(x for x in w.layers if x.name == "expert_in")
    # 8 tokens x top-8 over 128 experts touch ceil(128 (1 - (1 - 8/128)^8)) = 52 experts,
    # 8 sequences over the step's B = 2 rows of C = 1 slot (decode_rows)
    assert up.dims == {"B": 2, "X": 52, "C": 1, "D": 2048, "F": 768, "U": 2}
    moved = 52 * 2048 * 768 * 2 // 2 + 2 * 52 * 2048 * 2 + 2 * 52 * 768 * 2 // 2  # w, x, h
    plain = gemm_time_s(up, b200, up.dims, cuda_graphs=True)
    got = einsum_time_s(up, b200, up.dims, w.model, True)
    assert got - plain == pytest.approx(moved * (1 / 4.83e12 - 1 / 7.26e12), rel=1e-6)
    qkv = next(x for x in w.layers if x.name == "attn_qkv")
    assert einsum_time_s(qkv, b200, qkv.dims, w.model, True) == pytest.approx(
        gemm_time_s(qkv, b200, qkv.dims, cuda_graphs=True)
    )
    gb200 = load_chip("gb200")  # no fused MoE figure: its streaming rate
    assert moe_decode_chip(gb200) is gb200
    assert einsum_time_s(up, gb200, up.dims, w.model, True) == pytest.approx(
        gemm_time_s(up, gb200, up.dims, cuda_graphs=True)
    )
