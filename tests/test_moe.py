"""Mixture of experts and expert parallelism (docs/moe.md): the [moe] template's einsums, the
expected distinct experts of a decode batch, the --ep strategy's split, all-to-all bytes and
memory, the zoo's MoE models on --model, and bad input. Every value is derived by hand below."""

from __future__ import annotations

import json
from math import ceil
from pathlib import Path

import pytest

from shardline.errors import InputError
from shardline.io.workload_toml import workload_from_dict, workload_from_toml
from shardline.models import load_model, params_active, params_total
from shardline.models.template import transformer_table
from shardline.strategies import Degrees, local_dims
from shardline.workload.moe import expected_experts, expert_slots, moe_shape
from shardline.workload.templates import transformer
from tests.cli_run import run_cli

# Mixtral 8x7B (config.json of mistralai/Mixtral-8x7B-v0.1): d 4096, 32 heads, 8 kv heads of
# 128, 32 layers, 8 experts of width 14336, top-2, vocabulary 32000.
D, F, X, K, L, V = 4096, 14336, 8, 2, 32, 32000
MIXTRAL = dict(d_model=D, d_ff=F, heads=32, kv_heads=8, layers=L, vocab=V)


def _mixtral(seq: int = 4096, batch: int = 1, phase: str = "training", **moe: object):
    table = {"experts": X, "experts_per_token": K, **moe}
    return transformer(batch=batch, seq_len=seq, phase=phase, moe=table, **MIXTRAL)


def _layer(workload, name):  # type: ignore[no-untyped-def]
    return next(layer for layer in workload.layers if layer.name == name)


def test_router_and_expert_flops_count_the_active_experts() -> None:
    w = _mixtral(seq=4096)
    router, up, down = (_layer(w, n) for n in ("router", "expert_in", "expert_down"))
    # router: x[B,S,D] * wr[D,X]: 2 B S D X
    assert router.parsed.flops(dict(router.dims)) == 2 * 1 * 4096 * D * X
    # C = S k / X = 4096 * 2 / 8 = 1024 token slots per expert; the gated up projection
    # x[B,X,C,D] * wein[X,D,F,U=2] does 2 B X C D F 2 = 2 (S k) D (2F): the k active experts'.
    assert up.dims["C"] == 1024
    assert up.parsed.flops(dict(up.dims)) == 2 * 4096 * K * D * 2 * F
    assert down.parsed.flops(dict(down.dims)) == 2 * 4096 * K * F * D
    # ... while the weights are all X experts': 3 D F per expert (gate, up, down).
    assert up.params() + down.params() == X * 3 * D * F


def test_imbalance_and_capacity_set_the_busiest_experts_slots() -> None:
    # dropless: C = ceil(S k imbalance / X) = ceil(4096 * 2 * 1.5 / 8) = 1536
    assert _layer(_mixtral(imbalance=1.5), "expert_in").dims["C"] == 1536
    # capacity 1.25 caps the load: ceil(4096 * 2 * 1.25 / 8) = 1280
    w = _mixtral(imbalance=1.5, capacity_factor=1.25)
    assert _layer(w, "expert_in").dims["C"] == 1280
    # decode: one token per sequence, ceil(1 * 2 / 8) = 1 slot
    assert expert_slots(1, moe_shape({"experts": 8, "experts_per_token": 2}, F)) == 1


def test_expected_distinct_experts() -> None:
    # E (1 - (1 - k/E)^T): one token touches exactly k; two tokens 8 (1 - (6/8)^2) = 3.5
    assert expected_experts(8, 2, 1) == pytest.approx(2.0)
    assert expected_experts(8, 2, 2) == pytest.approx(3.5)
    assert expected_experts(128, 8, 0) == 0.0
    assert expected_experts(128, 8, 10_000) == pytest.approx(128.0)
    with pytest.raises(InputError):
        expected_experts(8, 9, 1)


def test_shared_experts_are_a_dense_ffn() -> None:
    w = _mixtral(seq=128, shared_experts=2, expert_d_ff=1024)
    shared = _layer(w, "shared_in")
    # every token through 2 shared experts of 1024: a dense gated FFN of width 2048
    assert shared.dims["F"] == 2 * 1024 and shared.dims["S"] == 128
    assert w.model is not None and w.model.d_ff == (K + 2) * 1024


def test_counts_agree_with_the_model_card_counts() -> None:
    """The plan's counts: memory from the einsum weights (all experts) and FLOPs from
    ModelShape (active experts); the block's active weights by hand."""
    w = _mixtral()
    assert w.model is not None
    # ModelShape's block: attention + (k + shared) expert FFNs + the router d x X
    attention = D * (32 + 2 * 8) * 128 + 32 * 128 * D
    assert w.model.layer_params == attention + 3 * D * K * F + D * X
    assert w.params() == L * (attention + D * X + X * 3 * D * F)


@pytest.mark.parametrize(
    "name", ["mixtral-8x7b", "mixtral-8x22b", "qwen3-30b-a3b", "qwen3-235b-a22b"]
)
def test_plan_counts_match_model_show_within_one_percent(name: str) -> None:
    """Total: the einsum weights + the embedding table and LM head; active: ModelShape's 6N
    matmul weights + the embedding table; each within 1% of `shardline model show` (the
    template leaves out the norm scales)."""
    spec = load_model(name)
    table = transformer_table(spec, batch=1, seq_len=4096)
    w = workload_from_dict({"transformer": table})
    assert w.model is not None
    embedding = spec.vocab * spec.d_model
    total = w.params() + embedding * (1 if spec.tied_embeddings else 2)
    assert total == pytest.approx(params_total(spec), rel=0.01)
    assert w.model.matmul_params + embedding == pytest.approx(params_active(spec), rel=0.01)


def test_ep_splits_the_experts_and_keeps_the_tokens_per_device() -> None:
    w = _mixtral(batch=8)
    up = _layer(w, "expert_in")
    local = local_dims(up, Degrees(ep=8), batch_dim="B")
    # 8 sequences over 8 ranks: 1 each; 8 experts over 8 ranks: 1 each; that expert gets the
    # slots of all 8 ranks' sequences: the group's 8 rows x 1024 slots (b x X/ep x C = b S k /
    # ep slots, the same work as b/ep rows of C ep slots)
    assert (local["B"], local["X"], local["C"]) == (8, 1, 1024)
    assert local["B"] * local["X"] * local["C"] == 8 * 4096 * 2 // 8  # b S k / ep
    assert up.operand_bytes("wein", local) == 1 * D * F * 2 * 2  # one expert, bf16
    attn = _layer(w, "attn_qkv")
    assert local_dims(attn, Degrees(ep=8), batch_dim="B")["B"] == 1  # dense layers: like dp


def test_plan_prefill_all_to_all_and_memory(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys, "plan", "--model", "mixtral-8x7b", "--hw", "h100-sxm", "--devices", "8",
        "--ep", "8", "--batch", "8", "--phase", "prefill", "--json",
    )  # fmt: skip
    assert code == 0
    plan = json.loads(out)["plans"][0]
    assert plan["degrees"]["ep"] == 8
    (a2a,) = [c for c in plan["comm"] if c["kind"] == "all_to_all"]
    # per MoE layer a dispatch and a combine: 2 x 32 calls; each device holds its routed
    # slots 1 x 1 x 8192 x d x 2 bytes; V = 8 x that (the whole array the collective spans)
    assert a2a["calls"] == 2 * L
    assert a2a["bytes"] == 2 * L * 8 * (8192 * D * 2)
    # weights: per block attention + router + 1 of 8 experts, bf16; the embedding and the LM
    # head on the single stage
    attention = D * (32 + 2 * 8) * 128 + 32 * 128 * D
    params = L * (attention + D * X + 3 * D * F) + 2 * V * D
    assert plan["memory"]["weights_bytes"] == pytest.approx(2 * params, rel=1e-9)


def test_plan_training_runs_both_all_to_alls_again_backward(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_cli(
        capsys, "plan", "--model", "mixtral-8x7b", "--hw", "h100-sxm", "--devices", "64",
        "--tp", "2", "--pp", "4", "--ep", "8", "--batch", "64", "--json",
    )  # fmt: skip
    assert code == 0
    plan = json.loads(out)["plans"][0]
    m = plan["microbatches"]
    by_kind = {(c["purpose"], c["kind"]): c for c in plan["comm"]}
    # a stage of 8 blocks, 4 all-to-alls per block (dispatch, combine, both gradients) per
    # microbatch
    assert by_kind[("ep", "all_to_all")]["calls"] == 8 * 4 * m
    # the dense weights' gradients all-reduce over ep once per step (qkv, out, router: 3/block)
    assert by_kind[("ep", "all_reduce")]["calls"] == 8 * 3


def test_bad_ep_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys, "plan", "--model", "mixtral-8x7b", "--hw", "h100-sxm", "--devices", "6",
        "--ep", "3", "--batch", "6", "--phase", "prefill",
    )  # fmt: skip
    assert code == 2 and out == ""
    assert err.strip() == "error: ep=3 does not divide the 8 experts"
    code, _, err = run_cli(
        capsys, "plan", "--model", "llama-3.2-1b", "--hw", "h100-sxm", "--devices", "2",
        "--ep", "2", "--batch", "2",
    )  # fmt: skip
    assert code == 2 and "needs a mixture-of-experts workload" in err


def test_bad_moe_tables() -> None:
    with pytest.raises(InputError, match="experts_per_token \\(9\\) is more than the 8"):
        _mixtral(experts_per_token=9)
    with pytest.raises(InputError, match="unknown field 'topk'"):
        _mixtral(topk=2)
    with pytest.raises(InputError, match="imbalance must be a number >= 1.0"):
        _mixtral(imbalance=0.5)
    with pytest.raises(InputError, match="dense_layers_first \\(33\\) is more than the 32"):
        _mixtral(dense_layers_first=33)


def test_moe_table_in_a_workload_file(tmp_path: Path) -> None:
    path = tmp_path / "moe.toml"
    path.write_text(
        "[transformer]\nd_model = 64\nd_ff = 128\nheads = 4\nbatch = 2\nseq_len = 32\n"
        "layers = 2\n\n[transformer.moe]\nexperts = 4\nexperts_per_token = 1\n"
    )
    w = workload_from_toml(path)
    up = _layer(w, "expert_in")
    assert (up.dims["X"], up.dims["C"]) == (4, ceil(32 * 1 / 4))


def test_moe_zoo_models_plan(capsys: pytest.CaptureFixture[str]) -> None:
    # (DeepSeek-V3's dense first blocks: tests/test_moe_dense_first.py)
    code, out, _ = run_cli(capsys, "plan", "--model", "gpt-oss-20b", "--devices", "8", "--json")
    assert code == 0 and json.loads(out)["plans"]
    code, out, _ = run_cli(
        capsys, "stack", "--model", "qwen3-30b-a3b", "--hw", "h100-sxm", "--json"
    )  # fmt: skip
    assert code == 0 and json.loads(out)


def test_permutation_ops_between_the_matmuls() -> None:
    from shardline.realistic.block import block_ops

    w = _mixtral(seq=128)
    assert w.model is not None and w.model.expert_copies == K
    ops = {op.name: op for op in block_ops(w.model, 2, tp=1, sp=False, training=True)}
    hidden = 2 * 128 * D * 2  # 2 sequences x 128 tokens x d_model x 2 bytes (bf16)
    # permute: read the hidden state, write k copies; unpermute: read k copies, write one
    assert (ops["moe_permute"].read_bytes, ops["moe_permute"].write_bytes) == (hidden, K * hidden)
    assert (ops["moe_unpermute"].read_bytes, ops["moe_unpermute"].write_bytes) == (
        K * hidden,
        hidden,
    )
    dense = transformer(batch=1, seq_len=128, **MIXTRAL).model
    assert dense is not None
    assert not [op for op in block_ops(dense, 2, tp=1, sp=False, training=True) if "moe" in op.name]


def test_decode_reads_the_touched_experts_and_holds_all(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # one sequence: E_touched(1) = k = 2 experts read; two: ceil(8 (1 - (6/8)^2)) = ceil(3.5) = 4
    one = _mixtral(seq=1024, batch=1, phase="decode")
    assert _layer(one, "expert_in").dims["X"] == 2
    assert one.model is not None and one.model.idle_expert_params == (8 - 2) * 3 * D * F
    assert _layer(_mixtral(seq=1024, batch=2, phase="decode"), "expert_in").dims["X"] == 4
    # memory holds every expert: the plan's weights on one H200 are all of Mixtral's, bf16
    code, out, _ = run_cli(
        capsys, "plan", "--model", "mixtral-8x7b", "--hw", "h200", "--devices", "1",
        "--batch", "1", "--phase", "decode", "--seq-len", "1024", "--json",
    )  # fmt: skip
    assert code == 0
    plan = json.loads(out)["plans"][0]
    attention = D * (32 + 2 * 8) * 128 + 32 * 128 * D
    params = L * (attention + D * X + X * 3 * D * F) + 2 * V * D
    assert plan["memory"]["weights_bytes"] == pytest.approx(2 * params, rel=1e-9)


def test_decode_touched_experts_follow_a_new_batch() -> None:
    one = _mixtral(seq=1024, batch=1, phase="decode")
    two = one.with_batch(2)  # ceil(8 (1 - 0.75^2)) = ceil(3.5) = 4 experts read, 4 idle
    assert _layer(two, "expert_in").dims["X"] == 4
    assert two.model is not None and two.model.idle_expert_params == 4 * 3 * D * F
    many = one.with_batch(64)  # 8 (1 - 0.75^64) > 7.99: all 8 read, none idle
    assert _layer(many, "expert_in").dims["X"] == 8 and many.model is not None
    assert many.model.idle_expert_params == 0
    assert _layer(many.with_batch(1), "expert_in").dims["X"] == 2


def test_intra_node_dispatch_time_agrees_with_hybridep_published_bandwidth() -> None:
    """Qwen3-30B-A3B on 8 GB200s, EP 8, MBS 4 x 4096 tokens, 16 microbatches, 48 MoE blocks.
    HybridEP's published bandwidth on GB200, 8 ranks, 32 SMs, through the torch API
    (deepseek-ai/DeepEP docs/README_Hybrid-EP.md, commit 41cad944: dispatch bf16 545.71 GB/s,
    combine 568.94 GB/s) counts the bytes one rank receives: each token once per rank that holds
    one of its experts, 8 (1 - C(112, 8) / C(128, 8)) = 5.34 of the 8 ranks (16 experts each,
    top-8 of 128), 2048 x 2 B a copy. A block and microbatch runs a dispatch and a combine
    forward and the same pair backward, so the step's all-to-all time is
    768 x 2 x (R / 545.71e9 + R / 568.94e9). --ep-dispatch hybridep prices the all-to-alls from
    that table (shardline.collectives.ep_kernels), so the step's exposed communication is that
    plus the routing map's all-gather (16,384 x 128 bools a rank, once per block forward); the
    plain all-to-all model (k copies at NCCL's all-to-all rate) stays within 15% of it."""
    from math import comb

    from shardline.hardware import load_chip
    from shardline.io.workload_toml import load_workload
    from shardline.planning.api import plan
    from shardline.planning.network import MeshNetwork

    ranks = 8 * (1 - comb(112, 8) / comb(128, 8))
    received = 4 * 4096 * ranks * 2048 * 2
    assert ranks == pytest.approx(5.34, abs=0.01) and received == pytest.approx(358e6, rel=0.01)
    published_s = 16 * 48 * 2 * (received / 545.71e9 + received / 568.94e9)
    assert published_s == pytest.approx(1.98, abs=0.01)
    workload = load_workload(Path(__file__).parents[1] / "examples/e2e/qwen3-30b-a3b-fp8.toml")

    def exposed(dispatch: str) -> float:
        chosen = plan(
            workload, "gb200", 8, tp=1, pp=1, dp=1, fsdp=1, ep=8, microbatches=16,
            ep_dispatch=dispatch, zero=1, require_fit=False,
        ).plans[0]  # fmt: skip
        return float(chosen.predicted_breakdown_s["exposed_comm_s"])

    routing_s = 768 * MeshNetwork(load_chip("gb200"), {"ep": 8}).predicted(
        "all_gather", 8 * 4 * 4096 * 128, "ep"
    )
    assert exposed("hybridep") == pytest.approx(published_s + routing_s, rel=1e-6)
    assert exposed("all-to-all") == pytest.approx(published_s, rel=0.15)


def test_hybridep_all_gathers_the_routing_map_before_each_dispatch(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """--ep-dispatch hybridep: before each MoE layer's dispatch (forward only; the backward reuses
    the metadata) the ep group all-gathers its routing maps, a bool per token and expert. Mixtral
    prefill over ep 8, batch 8 of 4096 tokens: a rank routes 1 sequence x 4096 tokens x 8
    experts x 1 B = 32,768 B, gathered into V = 8 x 32,768 B, once per block: 32 calls."""
    argv = ["plan", "--model", "mixtral-8x7b", "--hw", "h100-sxm", "--devices", "8", "--ep", "8"]
    argv += ["--batch", "8", "--phase", "prefill", "--json"]
    code, out, _ = run_cli(capsys, *argv, "--ep-dispatch", "hybridep")
    assert code == 0
    plan = json.loads(out)["plans"][0]
    (gather,) = [c for c in plan["comm"] if c["kind"] == "all_gather"]
    assert gather["purpose"] == "ep" and gather["calls"] == L
    assert gather["bytes"] == L * 8 * (1 * 4096 * X * 1)
    code, out, _ = run_cli(capsys, *argv, "--ep-dispatch", "hierarchical")
    plain = json.loads(out)["plans"][0]
    assert not [c for c in plain["comm"] if c["kind"] == "all_gather"]
    assert plain["predicted_s"] < plan["predicted_s"]


def test_qk_norm_is_a_memory_bound_op_over_q_and_k() -> None:
    """qk_norm (Qwen3, Gemma 3): an RMS norm over each head of q and k, reading and writing
    them once: 2 sequences x 128 tokens x (32 + 8) heads x 128 x 2 B for Mixtral's shape."""
    from shardline.realistic.block import block_ops

    plain = transformer(batch=1, seq_len=128, **MIXTRAL).model
    normed = transformer(batch=1, seq_len=128, qk_norm=True, **MIXTRAL).model
    assert plain is not None and normed is not None
    assert not [
        op for op in block_ops(plain, 2, tp=1, sp=False, training=True) if op.name == "qk_norm"
    ]
    ops = {op.name: op for op in block_ops(normed, 2, tp=1, sp=False, training=True)}
    qk = 2 * 128 * (32 + 8) * 128 * 2
    assert (ops["qk_norm"].read_bytes, ops["qk_norm"].write_bytes) == (qk, qk)
    assert ops["qk_norm"].forward_flops == 4 * qk / 2  # 4 vector FLOPs per element
    with pytest.raises(InputError, match="qk_norm"):
        workload_from_dict({"transformer": {**MIXTRAL, "batch": 1, "seq_len": 8, "qk_norm": "yes"}})


def test_decode_expert_einsums_run_the_batch_copies_not_a_row_per_sequence(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A decode step of B sequences routes B x k token copies. DeepSeek-V3 at B = 256 touches
    all 256 experts (256 (1 - (1 - 8/256)^256) = 255.99), so each runs ceil(256 x 8 / 256) = 8
    rows: the expert FLOPs are 2 x B k x D x F x 2 (gated) = 2 x 2048 x 7168 x 2048 x 2, not B
    x X slots (32x that). Mixtral 8x7B over ep 8 at B = 64: 8 experts touched, ceil(64 x 2 /
    8) = 16 rows, 16 / 8 = 2 rows a rank x 1 expert x 8 ranks' slots = 16 token copies of
    4096 x 2 B a rank, V = 8 x 131,072 B = 1.05 MB per all-to-all (64 x 2 copies in all)."""
    from shardline.models.template import model_workload
    from shardline.workload.moe import decode_rows

    dsv3 = model_workload(load_model("deepseek-v3"), phase="decode", batch=256, seq_len=4096)
    assert dsv3.batch == 256  # the sequences, not the expert rows
    expert_in = _layer(dsv3, "expert_in")
    assert expert_in.dims["X"] == 256 and expert_in.dims["B"] == 8 and expert_in.dims["C"] == 1
    assert decode_rows(256, 8, 1.0, 256) == 8
    assert expert_in.parsed.flops(dict(expert_in.dims)) == 2 * 2048 * 7168 * 2048 * 2
    # with_batch keeps the rule: B = 4 touches 8 (1 - (1 - 8/256)^4) -> 31 experts, 1 row each
    small = dsv3.with_batch(4)
    assert _layer(small, "expert_in").dims["X"] == 31 and _layer(small, "expert_in").dims["B"] == 2
    code, out, _ = run_cli(
        capsys, "plan", "--model", "mixtral-8x7b", "--hw", "h100-sxm", "--devices", "8",
        "--ep", "8", "--phase", "decode", "--batch", "64", "--seq-len", "1024", "--json",
    )  # fmt: skip
    assert code == 0
    (a2a,) = [c for c in json.loads(out)["plans"][0]["comm"] if c["kind"] == "all_to_all"]
    assert a2a["bytes"] / a2a["calls"] == pytest.approx(8 * 16 * 4096 * 2)


def test_context_parallelism_splits_the_expert_slots() -> None:
    """Under cp each rank holds S/cp tokens of a sequence, so its routed slots per expert are
    C/cp: Mixtral at S = 4096, k = 2, 8 experts has C = 4096 x 2 / 8 = 1024 slots a sequence,
    512 a rank over cp 2 (they used to stay 1024: twice the expert work per rank)."""
    w = _mixtral(batch=8)
    up = _layer(w, "expert_in")
    assert local_dims(up, Degrees(), batch_dim="B")["C"] == 1024
    assert local_dims(up, Degrees(cp=2), batch_dim="B")["C"] == 512
    both = local_dims(up, Degrees(ep=2, cp=2), batch_dim="B")
    assert (both["B"], both["X"], both["C"]) == (8, 4, 512)


def test_decode_weights_per_rank_do_not_follow_the_touched_experts(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Mixtral 8x7B decode over tp 2 x ep 4: a rank holds 8 / 4 = 2 experts whatever the batch
    touches (B = 4 touches ceil(8 (1 - 0.75^4)) = 6: ceil(6 / 4) = 2 in the einsums, 0 idle; B =
    5 touches 7: 2 in the einsums, 0 idle; dividing the 8 - 6 idle experts by ep instead gave
    2.5 a rank at B = 4). Its parameters: 2 experts x 3 x 4096 x 14336 / tp 2 per block, plus
    the dense weights / tp 2, the same at every batch."""
    sizes = []
    for batch in ("4", "5", "6", "64"):
        code, out, _ = run_cli(
            capsys, "plan", "--model", "mixtral-8x7b", "--hw", "h200", "--devices", "8",
            "--tp", "2", "--ep", "4", "--phase", "decode", "--seq-len", "2048",
            "--batch", batch, "--json",
        )  # fmt: skip
        assert code == 0
        sizes.append(json.loads(out)["plans"][0]["memory"]["params"])
    experts = 32 * 2 * 3 * 4096 * 14336 / 2
    assert sizes == [sizes[0]] * 4 and sizes[0] > experts
