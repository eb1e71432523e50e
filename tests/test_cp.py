"""Context parallelism (strategies/cp.py): the sequence split, the ring's K/V sends, the
all-gather variant, the weight gradients reduced over cp and then dp, and memory / cp. Values
derived by hand with the formulas written out (docs/context-parallel-and-attention.md)."""

from __future__ import annotations

import json

import pytest

from shardline.planning.api import plan
from shardline.planning.results import PlanResult
from shardline.realistic.block import MASK_BYTES
from shardline.workload.templates import transformer
from shardline.workload.workload import Workload
from tests.cli_run import run_cli

# a small GQA model: B 2 sequences of S 1024 tokens, G 2 kv heads of E 64, bf16 (2 bytes)
B, S, D, H, G, E, F, LAYERS = 2, 1024, 512, 8, 2, 64, 2048, 2
W = 2  # bytes per bf16 element


def _model(phase: str = "training", seq_len: int = S) -> Workload:
    return transformer(
        d_model=D, d_ff=F, heads=H, kv_heads=G, head_dim=E, batch=B, seq_len=seq_len,
        layers=LAYERS, phase=phase,
    )  # fmt: skip


def _one(devices: int, **degrees: object) -> PlanResult:
    ps = plan(_model(), "h100-sxm", devices, microbatches=1, **degrees)
    (p,) = ps.plans
    return p


def _comm(p: PlanResult, purpose: str, kind: str) -> tuple[float, float]:
    (term,) = [c for c in p.comm if (c.purpose, c.kind) == (purpose, kind)]
    return term.calls, term.bytes


def test_ring_sends_the_local_k_and_v_blocks_cp_minus_1_times() -> None:
    cp = 4
    p = _one(cp, cp=cp, tp=1, pp=1, dp=1, fsdp=1)
    # local K (or V) block: B x (S / cp) x G x E x 2 bytes = 2 x 256 x 2 x 64 x 2 = 131,072 B
    block = B * (S // cp) * G * E * W
    assert block == 131_072
    # per layer: K (beside the scores) and V (beside the values), each cp - 1 sends forward and
    # cp - 1 sends of the block and its gradient (2 x block) backward
    calls = LAYERS * 2 * (cp - 1) * 2
    nbytes = LAYERS * 2 * (cp - 1) * (block + 2 * block)
    assert _comm(p, "cp", "send") == (calls, nbytes)
    # weight gradients: reduce-scatter and all-gather over cp of every dW (bf16), once per step
    grads = _model().params() * W
    assert _comm(p, "cp", "reduce_scatter")[1] == grads
    assert _comm(p, "cp", "all_gather")[1] == grads


def test_all_gather_variant_gathers_k_and_v_and_reduce_scatters_their_gradients() -> None:
    cp = 4
    ps = plan(
        _model(), "h100-sxm", cp, microbatches=1, cp=cp, tp=1, pp=1, dp=1, fsdp=1,
        cp_kind="all-gather",
    )  # fmt: skip
    (p,) = ps.plans
    full = B * S * G * E * W  # the whole K (or V) of the device's sequences: V of the all-gather
    grads = _model().params() * W
    assert _comm(p, "cp", "all_gather") == (LAYERS * 2 + 2 * LAYERS * 2, LAYERS * 2 * full + grads)
    assert _comm(p, "cp", "reduce_scatter")[1] == LAYERS * 2 * full + grads
    assert not [c for c in p.comm if c.kind == "send"]


def test_dp_reduces_one_cp_th_of_the_gradients_after_cp() -> None:
    p = _one(8, cp=4, dp=2, tp=1, pp=1, fsdp=1)
    grads = _model().params() * W
    # two levels: reduce-scatter over cp, all-reduce of the 1/cp shard over dp, all-gather over cp
    assert _comm(p, "dp", "all_reduce")[1] == grads / 4
    assert _comm(p, "cp", "reduce_scatter")[1] == grads


def test_activation_memory_is_divided_by_cp() -> None:
    one = _one(1)
    four = _one(4, cp=4, tp=1, pp=1, dp=1, fsdp=1)
    # Korthikanti et al. 2022 per block, flash attention, no recompute, s b tokens on a device:
    # 4 w sbh (norm, QKV, FFN inputs) + 2 sbh mask bytes + w sb (2 H E + 2 G E + 2 F + F)
    sb = S * B / 4
    per_block = 4 * W * sb * D + 2 * MASK_BYTES * sb * D
    per_block += W * sb * (2 * H * E + 2 * G * E + 2 * F + F)
    assert four.memory.activations_bytes == pytest.approx(LAYERS * per_block)
    assert four.memory.activations_bytes == pytest.approx(one.memory.activations_bytes / 4)
    # weights, gradients and optimizer state are replicated over cp
    assert four.memory.weights_bytes == one.memory.weights_bytes


def test_prefill_kv_cache_is_split_by_cp() -> None:
    one = plan(_model("prefill"), "h100-sxm", 1).plans[0]
    two = plan(_model("prefill"), "h100-sxm", 2, cp=2, tp=1, pp=1, dp=1, fsdp=1).plans[0]
    # 2 L G E S B bytes, over cp
    assert one.memory.kv_cache_bytes == 2 * LAYERS * G * E * S * B * W
    assert two.memory.kv_cache_bytes == one.memory.kv_cache_bytes / 2


def test_ring_hides_behind_the_attention_of_long_sequences() -> None:
    w = _model(seq_len=32768)
    (p,) = plan(w, "h100-sxm", 4, microbatches=1, cp=4, tp=1, pp=1, dp=1, fsdp=1).plans
    (send,) = [c for c in p.comm if c.kind == "send"]
    # one block's attention (2 x 8192 x 32768 / 4 x 8 x 64 x 2 FLOPs forward, halved by the mask)
    # takes far longer than sending 2 x 8192 x 2 x 64 x 2 bytes over NVLink: nothing shows
    assert send.bytes > 0 and send.t_s == 0.0


def test_cli_plan_with_cp(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys, "plan", "--model", "llama-3.1-8b", "--hw", "h200", "--devices", "8", "--cp", "4",
        "--seq-len", "32768", "--json",
    )  # fmt: skip
    assert code == 0
    best = json.loads(out)["plans"][0]
    assert best["degrees"]["cp"] == 4 and best["predicted_s"] > 0 and 0 < best["mfu"] < 1
    assert any(c["purpose"] == "cp" and c["kind"] == "send" for c in best["comm"])


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--cp", "3", "--seq-len", "32768"), "cp=3 does not divide the sequence length 32768"),
        (("--cp", "3", "--phase", "decode"), "cp=3 does not divide the cached context of 4096"),
        (("--cp", "2", "--cp-kind", "tree"), "invalid choice"),
    ],
)
def test_cli_bad_cp_is_one_error_line(
    capsys: pytest.CaptureFixture[str], argv: tuple[str, ...], message: str
) -> None:
    code, out, err = run_cli(
        capsys, "plan", "--model", "llama-3.2-1b", "--hw", "h200", "--devices", "6", *argv
    )
    assert code == 2 and out == ""
    assert message in err
    if "invalid choice" not in message:
        assert err.startswith("error: ") and err.count("\n") == 1


def test_free_search_leaves_cp_at_1() -> None:
    ps = plan(_model(), "h100-sxm", 4)
    assert all(p.degrees["cp"] == 1 for p in ps.plans)


def test_mla_prefill_ring_sends_the_latent_once() -> None:
    # the absorbed form: the scores read the cached latent c (kv_lora_rank + rope = 576 wide);
    # the values reuse it on chip, so only c travels: B x S/cp x 576 x 2 bytes per send
    mla = {"q_lora_rank": 1536, "kv_lora_rank": 512, "qk_rope_head_dim": 64,
           "qk_nope_head_dim": 128, "v_head_dim": 128}  # fmt: skip
    w = transformer(
        d_model=7168, d_ff=18432, heads=128, kv_heads=128, head_dim=192, batch=1, seq_len=4096,
        layers=1, phase="prefill", mla=mla,
    )  # fmt: skip
    (p,) = plan(w, "h200", 2, microbatches=1, cp=2, tp=1, pp=1, dp=1, fsdp=1).plans
    assert _comm(p, "cp", "send") == (1 * (2 - 1), 1 * (4096 // 2) * 576 * W)


def test_ring_shows_what_a_send_takes_beyond_one_blocks_attention() -> None:
    from shardline.hardware import load_chip
    from shardline.planning.network import MeshNetwork
    from shardline.realistic.kernels import causal_lower_bound
    from shardline.strategies import Degrees, local_dims
    from shardline.workload.stack import layer_cost

    cp, seq = 4, 256  # short sequences: the block's attention is shorter than its send
    w = _model("prefill", seq_len=seq)
    (p,) = plan(w, "h100-sxm", cp, microbatches=1, cp=cp, tp=1, pp=1, dp=1, fsdp=1).plans
    chip = load_chip("h100-sxm")
    net = MeshNetwork(chip, Degrees(cp=cp))
    block = B * (seq // cp) * G * E * W  # the local K (or V)
    exposed = 0.0
    for layer in w.layers:
        if layer.kernel != "attention":
            continue
        dims = local_dims(layer, Degrees(cp=cp), batch_dim="B")
        assert (dims["S"], dims["T"]) == (seq // cp, seq)  # local queries, every key
        # one ring step's attention: the layer's local time (causal: half the FLOPs) over cp
        t_block = causal_lower_bound(layer_cost(layer, chip, dims).cost, layer, w.model).t_lower_s
        t_send = net.time("send", block, "cp")
        exposed += LAYERS * (cp - 1) * max(0.0, t_send - t_block / cp)
    (send,) = [c for c in p.comm if c.kind == "send"]
    assert exposed > 0 and send.t_s == pytest.approx(exposed)
