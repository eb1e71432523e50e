"""Recompute policies (shardline.basics.recompute, recompute.toml): each policy's activation bytes
per block and recomputed FLOPs, derived by hand below from the tensors it keeps; an unknown name;
the training search with a pinned policy against the plan engine.

Korthikanti et al. 2022 (arXiv 2205.05198, section 4.1) count a block's activations, 2-byte
elements, multi-head attention and d_ff = 4h, as `sbh(34 + 5as/h)`: the block's input and the two
norms' inputs and outputs (2sbh each: x, norm1, resid, norm2), Q, K and V (2sbh each), the
attention output (2sbh: context), the two dropout masks (sbh each), the FFN's up output and the
activation output (8sbh each: up, act); and the scores' softmax output, dropout mask and dropout
output (5as^2b). Each policy keeps some of these terms (and, for MaxText and torchtitan, the two
projection outputs attn_proj and ffn_out, 2sbh each); the tests sum the kept terms. MaxText's
policies store only what the backward reads (JAX saves residuals): ffn_out, read by the residual
add alone, is never stored; attn_proj is, to rebuild resid = x + attn_proj for the second norm.

The recomputed FLOPs per token of a policy: `2 x` the weights of the matmuls it reruns, plus
`4 h s` per layer when it reruns the attention core (heads x head dim x keys = h s; PaLM's
convention, no causal discount), over L layers.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from shardline.basics.options import Execution
from shardline.basics.recompute import policy, policy_names, rerun_ops
from shardline.errors import InputError
from shardline.hardware import resolve_chip
from shardline.planning.evaluate import Context
from shardline.planning.search import assignments as degree_assignments
from shardline.planning.search_answer import Group, layout_of
from shardline.planning.vector_bound import prepare
from shardline.realistic.activations import checkpointed_share, layer_activation_bytes
from shardline.realistic.flops import recomputed_flops
from shardline.realistic.modelshape import ModelShape
from shardline.strategies import Degrees
from tests.cli_run import run_cli
from tests.training import training_workload

H, A, S, B = 1024, 16, 2048, 1  # hidden, heads (head dim 64), sequence, sequences
L = 4  # layers


def _model(*, gated: bool, attention: str, layers: int = L) -> ModelShape:
    """A small multi-head bf16 model: d_ff = 4h for a GeLU FFN, also 4h for a gated one."""
    return ModelShape(
        H, 4 * H, A, A, H // A, layers, S, S, B, gated=gated, attention=attention, dtype="bf16"
    )


SBH = S * B * H
SCORES = 5 * A * S * S * B  # softmax output (2), dropout mask (1), dropout output (2) bytes

# GeLU FFN (up 8sbh, act 8sbh), standard attention: bytes of one block, tp = 1
GELU_BYTES = {
    "none": 34 * SBH + SCORES,
    "selective": 34 * SBH,  # Korthikanti: the scores recomputed
    "full": 2 * SBH,  # the block's input
    # torchtitan op: the 1st, 3rd, 5th matmul outputs (q, v, up: 2 + 2 + 8) and the
    # attention output (2), with x (2)
    "op": 16 * SBH,
    # MaxText: q, k, v (6), context (2), out_proj (2), mlpwi (8), x (2); mlpwo (ffn_out) is
    # named but never stored: JAX saves residuals only, and only the residual add reads it
    "minimal_with_context": 20 * SBH,
    "minimal": 18 * SBH,
    "save_dot_with_context_except_mlp": (2 + 6 + 2 + 2) * SBH,
    "save_dot_except_mlpwi": (2 + 6 + 2) * SBH,
    "save_dot_except_mlp": (2 + 6 + 2) * SBH,
    "save_qkv_proj": (2 + 6) * SBH,
    "save_out_proj": (2 + 2) * SBH,
    "keep:q,k,v,context": (2 + 6 + 2) * SBH,
    # every 2nd of 4 blocks fully recomputed: half keep 2sbh, half everything
    "layer-2": (2 * SBH + 34 * SBH + SCORES) / 2,
    # Megatron's block method, the first of the 4 blocks of the one stage: 1 keeps 2sbh, 3 all
    "full-block:1": (2 * SBH + 3 * (34 * SBH + SCORES)) / 4,
}


@pytest.mark.parametrize("name", sorted(GELU_BYTES))
def test_bytes_per_block_gelu_standard_attention(name: str) -> None:
    m = _model(gated=False, attention="standard")
    got = layer_activation_bytes(m, B, tp=1, sp=False, recompute=name)
    assert got == GELU_BYTES[name]


def test_every_named_policy_has_a_hand_derived_case() -> None:
    assert set(policy_names()) <= set(GELU_BYTES)


def test_layer_n_counts_whole_blocks() -> None:
    """torchtitan wraps block i (from 1) when i % N == 0: 2 of 5 blocks for N = 2."""
    m = _model(gated=False, attention="flash", layers=5)
    got = layer_activation_bytes(m, B, tp=1, sp=False, recompute="layer-2")
    assert got == pytest.approx(2 / 5 * 2 * SBH + 3 / 5 * 34 * SBH, rel=1e-15)


def test_op_on_a_gated_ffn_keeps_gate_and_down_output() -> None:
    """SwiGLU: matmuls wq, wk, wv, wo, w1, w3, w2 (torchtitan's llama3); every odd one kept: q,
    v, gate (w1, d_ff wide) and the down output (w2, hidden); plus the attention output and x.
    With tp = 2 (no sequence parallelism) the hidden-sized x and ffn_out stay whole on each rank,
    q, v, the attention output and the gate are split."""
    m = _model(gated=True, attention="flash")
    f = 4 * H
    one = layer_activation_bytes(m, B, tp=1, sp=False, recompute="op")
    assert one == 2 * S * B * (H + H + H + H + f + H)
    two = layer_activation_bytes(m, B, tp=2, sp=False, recompute="op")
    assert two == 2 * S * B * (H + H) + 2 * S * B * (H + H + H + f) / 2
    sp = layer_activation_bytes(m, B, tp=2, sp=True, recompute="op")
    assert sp == one / 2


# recomputed FLOPs per token, gated (SwiGLU, d_ff f = 4h) flash model: q, k, v, o are h x h,
# gate, up, down h x f; the attention core 4 h s per layer
F = 4 * H
ATT = 4 * H * S
GATED_FLASH_FLOPS = {
    "none": 0,
    "selective": L * ATT,  # Korthikanti's convention, as before: the core is counted
    "full": L * (2 * (4 * H * H + 3 * H * F) + ATT),
    "op": L * 2 * (H * H + H * H + H * F),  # wk, wo, w3
    "minimal_with_context": 0,  # every matmul and the flash output kept: only cheap ops rerun
    "minimal": L * ATT,
    "save_dot_with_context_except_mlp": L * 2 * 3 * H * F,
    "save_dot_except_mlpwi": L * (2 * 2 * H * F + ATT),
    "save_dot_except_mlp": L * (2 * 3 * H * F + ATT),
    "save_qkv_proj": L * (2 * (H * H + 3 * H * F) + ATT),
    "save_out_proj": L * (2 * (3 * H * H + 3 * H * F) + ATT),
    "keep:q,k,v,context": L * 2 * (H * H + 3 * H * F),
    "layer-2": L // 2 * (2 * (4 * H * H + 3 * H * F) + ATT),
    "full-block:3": 3 * (2 * (4 * H * H + 3 * H * F) + ATT),  # 3 of the 4 blocks
}


@pytest.mark.parametrize("name", sorted(GATED_FLASH_FLOPS))
def test_recomputed_flops_gated_flash(name: str) -> None:
    m = _model(gated=True, attention="flash")
    per_token = recomputed_flops(m, name) / (B * S)
    assert per_token == pytest.approx(GATED_FLASH_FLOPS[name], rel=1e-12, abs=1e-6)


def test_standard_attention_reruns_the_core_where_the_scores_are_not_kept() -> None:
    """With the scores in HBM a policy that keeps the attention output must still rebuild the
    scores: minimal_with_context reruns the core (4 h s per layer per token); op on a GeLU FFN
    reruns wk, wo, the core and the down projection (its output, the 6th matmul, not kept)."""
    m = _model(gated=False, attention="standard")
    assert recomputed_flops(m, "minimal_with_context") / (B * S) == pytest.approx(L * ATT)
    op = L * (2 * (H * H + H * H + F * H) + ATT)
    assert recomputed_flops(m, "op") / (B * S) == pytest.approx(op, rel=1e-12)
    assert rerun_ops(policy("op"), gated=False, flash=False) == (
        "norm1", "k_proj", "attention", "out_proj", "residual1", "norm2", "activation",
        "down_proj", "residual2",
    )  # fmt: skip


def test_megatron_three_are_unchanged() -> None:
    """none, selective and full as before policies: Korthikanti's terms and the 2N + 4LHQT rule
    (realistic/flops.py's docstring), exactly."""
    m = _model(gated=False, attention="standard")
    tokens = B * S
    assert recomputed_flops(m, "none") == 0
    assert recomputed_flops(m, "selective") == tokens * 4 * L * A * (H // A) * S
    assert recomputed_flops(m, "full") == tokens * (2 * m.block_params + 4 * L * A * (H // A) * S)


def test_full_block_counts_the_first_blocks_of_each_virtual_stage() -> None:
    """Megatron's block method checkpoints the first N blocks of each model chunk: 32 blocks on
    pp 2 x vp 2 are 4 chunks of 8, N = 5 checkpoints 4 x 5 = 20; on pp 4 x vp 2 (8 chunks of 4)
    every block; a stage of 9 blocks in 2 chunks (5 + 4) with N = 5: 5 + 4 = 9; N = 3: 6."""
    m = _model(gated=False, attention="flash", layers=32)
    five = policy("full-block:5")
    assert checkpointed_share(m, five, chunks=4) == 20 / 32
    assert checkpointed_share(m, five, chunks=8) == 1.0
    assert checkpointed_share(m, five, blocks=9, chunks=2) == 1.0
    assert checkpointed_share(m, policy("full-block:3"), blocks=9, chunks=2) == 6 / 9
    assert recomputed_flops(m, "full-block:5", chunks=4) == pytest.approx(
        20 / 32 * recomputed_flops(m, "full"), rel=1e-12
    )
    # kept bytes: 20 blocks the input only (2sbh), 12 everything (34sbh with FlashAttention)
    got = layer_activation_bytes(m, B, tp=1, sp=False, recompute="full-block:5", chunks=4)
    assert got == pytest.approx((20 * 2 * SBH + 12 * 34 * SBH) / 32, rel=1e-15)


def _plan(capsys: pytest.CaptureFixture[str], recompute: str, *extra: str) -> dict:
    argv = ["plan", "--model", "llama-3.2-1b", "--hw", "h100-sxm", "--batch", "8", "--seq-len",
            "1024", "--phase", "training", "--json", "--recompute", recompute]  # fmt: skip
    code, out, err = run_cli(capsys, *argv, *extra)
    assert code == 0, err
    return json.loads(out)["plans"][0]


def test_full_block_reruns_its_share_of_each_stage(capsys: pytest.CaptureFixture[str]) -> None:
    """llama-3.2-1b's 16 blocks on pp 2 x vp 2: chunks of 4, full-block:3 reruns 3 of each, 12 of
    16 = 3/4 of full's recompute time and FLOPs; on pp 2 alone (stages of 8) 3 of 8. One stage
    (pp 1) with full-block:5: 5 of 16 blocks keep the input only, the rest everything, so the
    activations are 5/16 of full's and 11/16 of none's."""
    vp = ("--devices", "2", "--tp", "1", "--pp", "2", "--dp", "1", "--microbatches", "8")
    full = _plan(capsys, "full", *vp, "--interleave", "2")
    three = _plan(capsys, "full-block:3", *vp, "--interleave", "2")
    for key in ("recompute_s",):
        assert three["predicted_breakdown_s"][key] == pytest.approx(
            0.75 * full["predicted_breakdown_s"][key], rel=1e-12
        )
    assert three["recompute"]["recomputed_flops"] == pytest.approx(
        0.75 * full["recompute"]["recomputed_flops"], rel=1e-12
    )
    assert three["recompute"]["blocks_share"] == 0.75
    no_vp = _plan(capsys, "full-block:3", *vp)
    assert no_vp["recompute"]["blocks_share"] == 3 / 8
    one = ("--devices", "1", "--microbatches", "8")
    mem = {rc: _plan(capsys, rc, *one)["memory"]["activations_bytes"] for rc in ("none", "full")}
    five = _plan(capsys, "full-block:5", *one)["memory"]["activations_bytes"]
    assert five == pytest.approx(5 / 16 * mem["full"] + 11 / 16 * mem["none"], rel=1e-12)
    # as many blocks as a stage holds: full
    assert (
        _plan(capsys, "full-block:16", *one)["predicted_s"]
        == _plan(capsys, "full", *one)["predicted_s"]
    )


def test_search_refuses_full_block(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys, "search", "--model", "llama-3.2-1b", "--devices", "8",
        "--recompute", "full-block:2",
    )  # fmt: skip
    assert code == 2 and out == "" and len(err.strip().splitlines()) == 1
    says = "error: search --recompute full-block:2: the search prices each stage's blocks"
    assert err.startswith(says)


@pytest.mark.parametrize(
    "bad",
    [
        "bogus",
        "layer-0",
        "layer-x",
        "keep:q,foo",
        3,
        "full-block:0",
        "full-block:x",
        "layer-²",
        "full-block:²",
    ],
)
def test_unknown_policy_is_an_input_error(bad: object) -> None:
    with pytest.raises(InputError) as err:
        Execution(recompute=bad)  # type: ignore[arg-type]
    text = str(err.value)
    assert "save_dot_except_mlp" in text or "unknown tensor" in text


def test_cli_lists_the_policies_on_an_unknown_name(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys, "plan", "--model", "llama-3.2-1b", "--devices", "1", "--batch", "1",
        "--seq-len", "512", "--phase", "training", "--recompute", "remat",
    )  # fmt: skip
    lines = err.strip().splitlines()
    assert code == 2 and out == ""
    assert len(lines) == 1 and lines[0].startswith("error: recompute must be one of none, ")
    assert "minimal" in lines[0] and "layer-N" in lines[0] and "keep:" in lines[0]
    code, _, err = run_cli(capsys, "plan", "--help")
    assert code == 0


def test_layer_2_reruns_half_the_forward(capsys: pytest.CaptureFixture[str]) -> None:
    """layer-2 on 16 blocks (8 checkpointed) reruns half of what full reruns, time and FLOPs."""
    base = ["plan", "--model", "llama-3.2-1b", "--devices", "1", "--batch", "2",
            "--seq-len", "1024", "--phase", "training", "--json", "--recompute"]  # fmt: skip
    full = json.loads(run_cli(capsys, *base, "full")[1])["plans"][0]
    half = json.loads(run_cli(capsys, *base, "layer-2")[1])["plans"][0]
    assert half["predicted_breakdown_s"]["recompute_s"] == pytest.approx(
        full["predicted_breakdown_s"]["recompute_s"] / 2, rel=1e-12
    )
    assert half["recompute"]["recomputed_flops"] == pytest.approx(
        full["recompute"]["recomputed_flops"] / 2, rel=1e-12
    )
    assert half["recompute"]["policy"] == "layer-2"
    assert half["recompute"]["blocks_share"] == 0.5


def test_plan_json_and_text_report_the_policy(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["plan", "--model", "llama-3.2-1b", "--devices", "1", "--batch", "2",
            "--seq-len", "1024", "--phase", "training", "--recompute", "op"]  # fmt: skip
    code, out, _ = run_cli(capsys, *base, "--json")
    assert code == 0
    rc = json.loads(out)["plans"][0]["recompute"]
    assert rc["policy"] == "op"
    assert rc["keeps"] == ["x", "q", "v", "context", "gate", "ffn_out"]
    assert rc["reruns"] == [
        "norm1", "k_proj", "out_proj", "residual1", "norm2", "up_proj", "activation", "residual2",
    ]  # fmt: skip
    assert "torchtitan" in rc["source"]
    code, out, _ = run_cli(capsys, *base)
    line = next(x for x in out.splitlines() if x.startswith("  recompute op: reruns norm1, k_proj"))
    assert f"{100 * rc['recomputed_share']:.1f}% of the model FLOPs again" in line
    assert "per block and microbatch" in line


def test_pinned_policy_memory_is_the_engines() -> None:
    """The search's array memory with a pinned policy equals the engine's, 60 random layouts."""
    w = training_workload("llama-3.2-1b", 64, 1024)
    chip = resolve_chip("h100-sxm")
    found = [list(degree_assignments(w, 64, {}, every=True))]
    space = prepare(w, chip, found, 64, ("minimal",))
    rows = {**space.r, **space.out}
    group = Group(chip, 64, space.every, space.tables, rows)
    rng = np.random.default_rng(2026)
    for i in rng.choice(len(rows["a"]), size=min(60, len(rows["a"])), replace=False):
        lay = layout_of(group, rows, int(i))
        assert lay["recompute"] == "minimal"
        ex = Execution(
            interleave=lay["interleave"],
            recompute="minimal",
            sequence_parallel=lay["sequence_parallel"],
            zero=lay["zero"],
            tp_overlap=lay["tp_overlap"],
        )
        ctx = Context(w, chip, ex)
        deg, m = Degrees(lay["degrees"]), lay["microbatches"]
        stages = ctx.stages(deg.stages)
        engine = max(ctx.memory(ls, deg, m, k).total_bytes for k, (ls, _) in enumerate(stages))
        assert rows["memory_per_device_bytes"][i] == pytest.approx(engine, rel=1e-9), lay


def test_search_with_a_pinned_policy_plans_the_same(capsys: pytest.CaptureFixture[str]) -> None:
    """`search --recompute op`: every listed layout uses op, and `plan` with it pinned gives the
    same step time and memory per device."""
    code, out, err = run_cli(
        capsys, "search", "--model", "llama-3.2-1b", "--hw", "h100-sxm", "--devices", "8",
        "--seq-len", "1024", "--global-batch", "32Ki", "--scales", "1", "--rerank", "3",
        "--recompute", "op", "--json", "--quiet",
    )  # fmt: skip
    assert code == 0, err
    r = json.loads(out)
    listed = [r["best"], *r["alternatives"]]
    assert len(listed) >= 2
    for lay in listed:
        assert lay["recompute"] == "op"
        argv = [
            "plan", "--model", "llama-3.2-1b", "--hw", lay["hardware"],
            "--devices", str(lay["devices"]), "--batch", "32", "--seq-len", "1024",
            "--phase", "training",
            "--microbatches", str(lay["microbatches"]), "--interleave", str(lay["interleave"]),
            "--recompute", "op", "--zero", str(lay["zero"]), "--json",
        ]  # fmt: skip
        argv += [f for k, v in lay["degrees"].items() for f in (f"--{k}", str(v))]
        argv += ["--sequence-parallel"] if lay["sequence_parallel"] else []
        argv += ["--tp-overlap"] if lay["tp_overlap"] else []
        code, out, err = run_cli(capsys, *argv)
        assert code == 0, err
        plan = json.loads(out)
        (p,) = [q for q in plan["plans"] if q["name"] == plan["recommended"]]
        assert p["predicted_s"] == pytest.approx(lay["predicted_step_s"], rel=1e-9)
        assert p["memory_per_device_bytes"] == pytest.approx(
            lay["memory_per_device_bytes"], rel=1e-9
        )


def test_search_rejects_an_unknown_pinned_policy(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(
        capsys, "search", "--model", "llama-3.2-1b", "--devices", "8", "--recompute", "nope",
    )  # fmt: skip
    assert code == 2 and err.startswith("error: recompute must be one of")


@pytest.mark.parametrize(
    ("model", "degrees"),
    [
        ("llama-3.2-1b", {"tp": 2, "pp": 2}),  # fused QKV, SwiGLU
        ("mixtral-8x7b", {"ep": 8, "pp": 2}),  # router and experts
        ("deepseek-v3", {"ep": 8, "pp": 8}),  # MLA, shared experts, dense first blocks
        ("gpt-oss-20b", {"tp": 2}),  # sliding windows, attention sinks, biases
    ],
)
def test_every_block_op_is_owned(model: str, degrees: dict) -> None:
    """The per-op rerun (`_partial_rerun_s`) of a policy that reruns every op costs what full
    recompute's rerun of the stage's forward costs: every matmul, the attention kernel and every
    memory-bound op of a block belongs to one op of recompute.OPS (no work lost or counted
    twice), on every pipeline stage."""
    from shardline.planning.stage_extras import _partial_rerun_s

    w = training_workload(model, 64, 1024)
    ctx = Context(w, resolve_chip("h100-sxm"), Execution(recompute="full"))
    deg, m = Degrees(degrees), 4
    for i, (layers, last) in enumerate(ctx.stages(deg.stages)):
        stage = ctx.stage(deg, m, i, layers, last)
        again = _partial_rerun_s(ctx, stage, deg, m, policy("full"))
        assert again == pytest.approx(stage.bwd.parts["recompute"], rel=1e-12)


def test_the_api_takes_a_policy_name() -> None:
    """`shardline.planning.api.plan(..., recompute=NAME)`: the plan carries the policy; its
    recomputed FLOPs are hardware - model FLOPs."""
    from shardline.planning.api import plan

    w = training_workload("llama-3.2-1b", 4, 1024)
    ps = plan(w, "h100-sxm", 1, recompute="save_qkv_proj")
    p = ps.plans[0]
    assert p.recompute["policy"] == "save_qkv_proj"
    assert p.recompute["keeps"] == ["x", "q", "k", "v"]
    assert p.recompute["recomputed_flops"] == p.hardware_flops - p.model_flops > 0
    with pytest.raises(InputError):
        plan(w, "h100-sxm", 1, recompute="save_everything")


def test_jax_policies_store_only_what_the_backward_reads() -> None:
    """MaxText's `minimal` names ffn_out (mlpwo) saveable; JAX stores residuals only, and the
    residual add's backward reads neither input, so it is not stored; torchtitan's `op` (torch
    selective checkpointing stores what its policy saves) keeps its ffn_out. Gated flash model:
    minimal stores x, q, k, v, attn_proj (h each), gate, up (4h each) = (5 + 8) h per token."""
    m = _model(gated=True, attention="flash")
    got = layer_activation_bytes(m, B, tp=1, sp=False, recompute="minimal")
    assert got == 2 * S * B * (5 * H + 2 * 4 * H)
    assert policy("minimal").residuals_only and not policy("op").residuals_only
    from shardline.basics.recompute import stored_tensors

    assert "ffn_out" not in stored_tensors(policy("minimal"), gated=True, flash=True)
    assert "attn_proj" in stored_tensors(policy("minimal"), gated=True, flash=True)
    assert "ffn_out" in stored_tensors(policy("op"), gated=True, flash=True)


def test_offloaded_tensors_leave_the_device() -> None:
    """keep:x,q,k,v stores x, q, k, v: 4h per token (multi-head); offloading q and v leaves x
    and k, 2h; offloading all four leaves nothing. A tensor the policy does not keep (up) is
    held nowhere: offloading it changes nothing."""
    m = _model(gated=True, attention="flash")
    kw = {"tp": 1, "sp": False, "recompute": "keep:x,q,k,v"}
    assert layer_activation_bytes(m, B, **kw) == 2 * S * B * 4 * H
    assert layer_activation_bytes(m, B, **kw, offload=frozenset({"q", "v"})) == 2 * S * B * 2 * H
    assert layer_activation_bytes(m, B, **kw, offload=frozenset({"x", "q", "k", "v"})) == 0
    assert layer_activation_bytes(m, B, **kw, offload=frozenset({"up"})) == 2 * S * B * 4 * H


@pytest.mark.parametrize("bad", ["x,nope", 3, ["q", 1]])
def test_offload_names_block_tensors(bad: object) -> None:
    with pytest.raises(InputError, match="offload"):
        Execution(offload=bad)  # type: ignore[arg-type]


def test_plan_counts_offloaded_activations_apart(capsys: pytest.CaptureFixture[str]) -> None:
    """`--offload x,q,k,v` with keep:x,q,k,v: the block activations leave the device's total
    and are counted in memory.host_offload_bytes: L blocks x (x, q, k, v) = L x 4 x d_model x 2 B
    per token (llama-3.2-1b: 16 layers, d_model 2048, 32 heads x 64, 8 KV heads x 64, so
    q = 2048, k = v = 512 wide: (2048 + 2048 + 512 + 512) x 2 B = 10,240 B per token per block)."""
    base = ["plan", "--model", "llama-3.2-1b", "--devices", "1", "--batch", "2", "--seq-len",
            "1024", "--phase", "training", "--recompute", "keep:x,q,k,v", "--json"]  # fmt: skip
    code, out, _ = run_cli(capsys, *base)
    assert code == 0
    kept = json.loads(out)["plans"][0]
    code, out, _ = run_cli(capsys, *base, "--offload", "x,q,k,v")
    assert code == 0
    off = json.loads(out)["plans"][0]
    per_token = 16 * (2048 + 2048 + 512 + 512) * 2
    host = off["memory"]["host_offload_bytes"]
    assert host == 2 * 1024 * per_token
    assert kept["memory"]["host_offload_bytes"] == 0
    assert off["memory"]["total_bytes"] == pytest.approx(kept["memory"]["total_bytes"] - host)
    assert off["recompute"]["offloaded"] == ["x", "q", "k", "v"]
    assert off["predicted_s"] == kept["predicted_s"]  # the copies are not priced
