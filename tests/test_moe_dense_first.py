"""Mixture of experts with dense first blocks (shardline.workload.dense_first, docs/moe.md): the
einsums of each pipeline stage, the parameter counts, the 6N FLOPs, the stack's table and
DeepSeek-V3 on `plan` and `stack`. Every value is derived by hand below."""

from __future__ import annotations

import json

import pytest

from shardline.io.workload_toml import workload_from_dict
from shardline.models import load_model, params_active, params_total
from shardline.models.template import transformer_table
from shardline.workload.dense_first import DenseFirstWorkload, stack_layers
from shardline.workload.stack import stack
from shardline.workload.templates import transformer
from tests.cli_run import run_cli

# A small model: d 64, 4 heads of 16 (multi-head), dense d_ff 256, 6 blocks, the first 2 dense;
# the other 4: 4 experts of width 32, top-1, gated.
D, H, E, DFF, L, X, F, FIRST = 64, 4, 16, 256, 6, 4, 32, 2
ATTENTION = D * (H + 2 * H) * E + H * E * D  # W_qkv and W_o
MOE_FFN = D * X + X * 3 * D * F  # the router and the experts' up+gate and down
DENSE_FFN = 3 * D * DFF


def _small(batch: int = 4, phase: str = "training"):  # type: ignore[no-untyped-def]
    moe = {"experts": X, "experts_per_token": 1, "expert_d_ff": F, "dense_layers_first": FIRST}
    return transformer(
        d_model=D, d_ff=DFF, heads=H, layers=L, batch=batch, seq_len=32, phase=phase, moe=moe
    )


def test_params_count_the_dense_blocks_in_place_of_the_experts() -> None:
    w = _small()
    assert isinstance(w, DenseFirstWorkload)
    assert w.params() == L * ATTENTION + (L - FIRST) * MOE_FFN + FIRST * DENSE_FFN
    # the 6N weights: per block attention + the active FFN (top-1: 3 d F) + the router d X;
    # a dense block has its 3 d d_ff in place of the last two
    assert w.model is not None
    active_moe = 3 * D * F + D * X
    assert w.model.matmul_params == L * (ATTENTION + active_moe) + FIRST * (DENSE_FFN - active_moe)
    # layer instances: 4 attention + 3 MoE (router, expert_in, expert_down) or 2 dense einsums
    assert w.layer_count == L * 4 + (L - FIRST) * 3 + FIRST * 2


def test_pipeline_stages_hold_the_dense_blocks_first() -> None:
    w = _small()
    # 6 blocks on 4 stages: 2, 2, 1, 1 blocks; the first stage holds both dense blocks
    stages = [{layer.name: n for layer, n in layers} for layers, _ in w.pipeline_stages(4)]
    assert stages[0] == {
        "attn_qkv": 2, "attn_scores": 2, "attn_values": 2, "attn_out": 2,
        "dense_ffn_in": 2, "dense_ffn_down": 2,
    }  # fmt: skip
    assert stages[1]["expert_in"] == 2 and "dense_ffn_in" not in stages[1]
    # 6 stages of one block: the first two dense, the rest MoE
    one = [{layer.name: n for layer, n in layers} for layers, _ in w.pipeline_stages(6)]
    assert [s.get("dense_ffn_in", 0) for s in one] == [1, 1, 0, 0, 0, 0]
    assert [s.get("router", 0) for s in one] == [0, 0, 1, 1, 1, 1]
    # 5 stages: 6 % 5 = 1 stage of 2 blocks (uneven), the first; a cut through a block never
    assert [sum(n for _, n in layers) for layers, _ in w.pipeline_stages(5)] == [
        2 * 4 + 2 * 2, 4 + 3, 4 + 3, 4 + 3, 4 + 3
    ]  # fmt: skip
    assert w.blocks_in(w.pipeline_stages(5)[0][0]) == 2


def test_stack_counts_each_einsum_in_its_blocks() -> None:
    w = _small()
    counts = {layer.name: n for layer, n in stack_layers(w)}
    assert (counts["dense_ffn_in"], counts["expert_in"], counts["attn_qkv"]) == (FIRST, L - 2, L)
    rows = {row.name: row.count for row in stack(w, "h100-sxm").layers}
    assert rows["dense_ffn_down.grad_wout"] == FIRST and rows["router.grad_wr"] == L - FIRST
    assert rows["attn_out.grad_o"] == L


def test_a_new_batch_reaches_the_dense_einsums() -> None:
    w = _small(batch=4).with_batch(16)
    assert isinstance(w, DenseFirstWorkload)
    assert {layer.dims["B"] for layer in w.dense_ffn} == {16}


def test_deepseek_v3_counts_match_model_show_within_one_percent() -> None:
    """MLA + MoE + 3 dense first blocks: the einsum weights + embedding and LM head (untied)
    against params_total; the 6N weights + the embedding table against params_active."""
    spec = load_model("deepseek-v3")
    w = workload_from_dict({"transformer": transformer_table(spec, batch=1, seq_len=4096)})
    assert w.model is not None
    embedding = spec.vocab * spec.d_model
    assert w.params() + 2 * embedding == pytest.approx(params_total(spec), rel=0.01)
    assert w.model.matmul_params + embedding == pytest.approx(params_active(spec), rel=0.01)
    # a dense block's FFN (3 x 7168 x 18432) is the MoE block's active FFN (3 x 7168 x (8 + 1)
    # x 2048, the same width) without the router's 7168 x 256
    assert w.model.block_params == 61 * w.model.layer_params - 3 * 7168 * 256


def test_deepseek_v3_plans_with_ep_and_pp(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--model", "deepseek-v3", "--hw", "h200", "--devices", "256"]
    code, out, err = run_cli(
        capsys, *argv, "--ep", "32", "--pp", "8", "--batch", "1024", "--recompute", "full",
        "--zero", "1", "--json",
    )  # fmt: skip
    assert code == 0, err
    plan = json.loads(out)["plans"][0]
    # 61 blocks on 8 stages: 8, 8, 8, 8, 8, 7, 7, 7 blocks; an MLA + MoE block is 10 einsums
    # (mla_down, mla_up, scores, values, out; router, expert_in, expert_down, shared_in,
    # shared_down), a dense block 7 (the same 5 attention einsums + dense_ffn_in, dense_ffn_down)
    counts = [s["layer_instances"] for s in plan["stages"]]
    assert counts == [3 * 7 + 5 * 10, 80, 80, 80, 80, 70, 70, 70]
    assert plan["fits"] and 0 < plan["mfu"] < 1
    code, out, _ = run_cli(capsys, "stack", "--model", "deepseek-v3", "--hw", "h200", "--json")
    assert code == 0 and json.loads(out)


def test_fp8_training_keeps_the_dense_einsums_weights_in_bf16() -> None:
    """8-bit training stores the weights in bf16 (shardline.workload.precision: Transformer Engine's
    master weights): the dense first blocks' FFN weights as the MoE block's."""
    moe = {"experts": X, "experts_per_token": 1, "expert_d_ff": F, "dense_layers_first": FIRST}
    table = dict(d_model=D, d_ff=DFF, heads=H, layers=L, batch=2, seq_len=32, dtype="fp8", moe=moe)
    w = workload_from_dict({"transformer": table})
    assert isinstance(w, DenseFirstWorkload)
    assert {layer.dtypes["win"] for layer in w.dense_ffn if "win" in layer.weights} == {"bf16"}
    expert = next(layer for layer in w.layers if layer.name == "expert_in")
    assert expert.dtypes["wein"] == "bf16"
