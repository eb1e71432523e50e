"""Attention variants in the transformer template (shardline.workload.attention):
sliding-window key lengths and caches, MLA's projections, cache and FLOPs, and the causal saving.
Values derived by hand with the formulas written out, model sizes from the zoo files (their
config.json)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from math import ceil

import pytest

from shardline.errors import InputError
from shardline.hardware import load_chip
from shardline.models import attention_kind, kv_bytes_at, kv_bytes_per_token, load_model
from shardline.planning.api import plan
from shardline.realistic.flops import model_flops
from shardline.workload.attention import AttentionVariant, causal_fraction, mean_key_length
from shardline.workload.stack import layer_cost
from shardline.workload.templates import transformer
from shardline.workload.workload import Workload
from tests.cli_run import run_cli

GEMMA = load_model("gemma-3-27b")  # 62 layers, window 1024, 5 local : 1 global
DEEPSEEK = load_model("deepseek-v3")  # MLA: q 1536, kv 512 + rope 64, nope 128, v 128


def test_sliding_key_length_is_the_mean_over_the_pattern() -> None:
    sw = GEMMA.sliding_window
    assert sw is not None
    n_global = 62 // 6  # every 6th layer is global: 10; the other 52 slide
    n_sliding = 62 - n_global
    assert (n_global, n_sliding) == (10, 52)
    # T_eff = ceil((10 x 4096 + 52 x min(4096, 1024)) / 62) = ceil(94208 / 62) = 1520
    assert mean_key_length(4096, 62, sw) == ceil((10 * 4096 + 52 * 1024) / 62) == 1520
    assert mean_key_length(512, 62, sw) == 512  # inside the window every layer sees every key
    assert mean_key_length(4096, 62, None) == 4096


def test_causal_fraction_of_the_band() -> None:
    sw = GEMMA.sliding_window
    assert causal_fraction(4096, 62, None) == 0.5  # FlashAttention-2 skips the upper triangle
    # global: S^2/2 each; sliding: S W - W^2/2 each; over layers x S x T_eff
    pairs = 10 * 4096**2 / 2 + 52 * (4096 * 1024 - 1024**2 / 2)
    assert causal_fraction(4096, 62, sw) == pytest.approx(pairs / (62 * 4096 * 1520))
    assert causal_fraction(1024, 62, sw) == pytest.approx(0.5)


def _gemma(phase: str, seq_len: int, layers: int = 62) -> Workload:
    g = GEMMA
    return transformer(
        d_model=g.d_model, d_ff=g.d_ff, heads=g.heads, kv_heads=g.kv_heads, head_dim=g.head_dim,
        layers=layers, batch=1, seq_len=seq_len, phase=phase,
        sliding_window={"window": 1024, "local_per_global": 5},
    )  # fmt: skip


def test_sliding_window_scores_flops_and_decode_cache() -> None:
    w = _gemma("training", 4096)
    scores = next(layer for layer in w.layers if layer.name == "attn_scores")
    assert scores.dims["T"] == 1520 and scores.dims["S"] == 4096
    # 2 B S T_eff G R E FLOPs: 2 x 1 x 4096 x 1520 x 16 x 2 x 128
    flops = layer_cost(scores, load_chip("h100-sxm")).cost.flops
    assert flops == 2 * 4096 * 1520 * 16 * 2 * 128
    assert w.model is not None and w.model.keys == 1520
    # decode at a context of 8192: the cache holds 8192 tokens on 10 layers, 1024 on 52
    d = _gemma("decode", 8192)
    kv = plan(d, "h200", 1).plans[0].memory.kv_cache_bytes
    exact = kv_bytes_at(GEMMA, 8192)  # 2 x 16 x 128 x 2 B x (10 x 8192 + 52 x 1024)
    assert exact == 2 * 16 * 128 * 2 * (10 * 8192 + 52 * 1024)
    per_layer_token = 2 * 16 * 128 * 2
    assert exact <= kv < exact + 62 * per_layer_token  # T_eff rounds up: < one token per layer


def test_mla_projections_cache_and_flops() -> None:
    m = DEEPSEEK.mla
    assert m is not None
    d, h = 7168, 128
    qk, n = m.qk_nope_head_dim + m.qk_rope_head_dim, m.qk_nope_head_dim + m.v_head_dim
    width = m.kv_lora_rank + m.qk_rope_head_dim
    # W_q: d x 1536 + 1536 x 128 x 192; W_kv_a: d x 576; W_kv_b: 512 x 128 x 256; W_o 128 x 128 x d
    attention = d * 1536 + 1536 * h * qk + d * width + 512 * h * n + h * 128 * d
    assert attention == 187_105_280
    ffn = 3 * d * 18432
    table = dict(vars(m))
    shapes = {}
    for phase in ("training", "prefill", "decode"):
        w = transformer(
            d_model=d, d_ff=18432, heads=h, kv_heads=h, head_dim=qk, layers=2, batch=2,
            seq_len=1024, phase=phase, mla=table,
        )  # fmt: skip
        assert w.params() == 2 * (attention + ffn)  # same weights in the explicit and absorbed
        assert w.model is not None and w.model.layer_params == attention + ffn
        shapes[phase] = w
    # the fused training up-projection: A = 1536 + 512, M = (1536 x 192 + 512 x 256) / A = 208
    up = next(x for x in shapes["training"].layers if x.name == "mla_up")
    assert (up.dims["A"], up.dims["M"]) == (2048, 208)
    # the cache: L x (kv_lora_rank + rope) x 2 bytes per token = 2 x 576 x 2 per token here
    kv = plan(shapes["prefill"], "h200", 1).plans[0].memory.kv_cache_bytes
    assert kv == 2 * width * 2 * (2 * 1024)
    assert kv_bytes_per_token(DEEPSEEK) == 61 * 576 * 2 == 70_272
    # model FLOPs (MFU): 6 N + 12 L H Q T per token with Q = (192 + 128) / 2 (no causal discount)
    model = shapes["training"].model
    tokens = 2 * 1024
    assert model_flops(model, True) == tokens * (
        6 * 2 * (attention + ffn) + 12 * 2 * h * 160 * 1024
    )


def test_mla_decode_reads_the_latent_once() -> None:
    m = DEEPSEEK.mla
    assert m is not None
    w = transformer(
        d_model=7168, d_ff=18432, heads=128, kv_heads=128, head_dim=192, layers=1, batch=1,
        seq_len=4096, phase="decode", mla=dict(vars(m)),
    )  # fmt: skip
    scores = next(x for x in w.layers if x.name == "attn_scores")
    values = next(x for x in w.layers if x.name == "attn_values")
    assert scores.cache == ("c",) and scores.dims["K"] == 576 and scores.dims["T"] == 4096
    assert values.onchip == ("p", "cv")  # the values reuse the latent tile the scores loaded


def test_bad_variant_tables() -> None:
    with pytest.raises(InputError, match="sliding_window: missing local_per_global"):
        _ = transformer(
            d_model=64, d_ff=128, heads=4, batch=1, seq_len=8, sliding_window={"window": 4}
        )
    with pytest.raises(InputError, match="mla.kv_lora_rank must be a positive integer"):
        bad = {"q_lora_rank": 0, "kv_lora_rank": 0, "qk_rope_head_dim": 8,
               "qk_nope_head_dim": 8, "v_head_dim": 8}  # fmt: skip
        _ = transformer(d_model=64, d_ff=128, heads=4, batch=1, seq_len=8, mla=bad)


def test_cli_gemma_plans_and_its_kv_bytes_match_model_show(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_cli(capsys, "model", "show", "gemma-3-27b", "--json")
    assert code == 0
    per_token = json.loads(out)["kv_bytes_per_token"]
    assert per_token == 62 * 2 * 16 * 128 * 2  # inside the window every layer caches the token
    code, out, _ = run_cli(
        capsys, "plan", "--model", "gemma-3-27b", "--hw", "h200", "--devices", "1",
        "--phase", "prefill", "--seq-len", "1024", "--json",
    )  # fmt: skip
    assert code == 0
    best = json.loads(out)["plans"][0]
    assert best["memory"]["kv_cache_bytes"] == 1024 * per_token
    assert best["predicted_s"] > 0 and 0 < best["mfu"] < 1


def test_standard_attention_keeps_scores_of_the_mean_key_length() -> None:
    from dataclasses import replace

    from shardline.realistic.activations import layer_activation_bytes
    from shardline.realistic.modelshape import ModelShape

    full = ModelShape(512, 2048, 8, 8, 64, 2, 4096, 4096, 1, attention="standard")
    band = replace(full, key_len=1024)
    kw = {"tp": 1, "sp": False, "recompute": "none"}
    # scores kept per block: (2 w + 1 mask byte) x heads x S x T_eff x sequences
    saved = layer_activation_bytes(full, 1, **kw) - layer_activation_bytes(band, 1, **kw)
    assert saved == (2 * 2 + 1) * 8 * 4096 * (4096 - 1024)


# --- adding a variant: one module and one registry line (docs/architecture.md) ---------------
# A toy variant, cross-layer attention (Brandon et al. 2024, "Reducing Transformer Key-Value Cache
# Size with Cross-Layer Attention", arXiv:2405.12981): every `share` adjacent layers use one KV
# cache, so a sequence of c tokens caches ceil(L / share) x c tokens over the L layers. Registered
# in the registry's tuple only, it must reach the model reader, the counts and the template.


@dataclass(frozen=True)
class _CrossLayer:
    share: int


class _CrossLayerAttention(AttentionVariant):
    key = "cross_layer"
    label = "cross-layer attention"
    record = _CrossLayer
    fields = {"share": (1, None)}
    kv_linear_in_context = True  # still the same bytes per token at every context

    def kind(self, record: object, base: str) -> str:
        return base + "+CLA"

    def cached_tokens(self, record: object, layers: int, context: int) -> int:
        assert isinstance(record, _CrossLayer)
        return ceil(layers / record.share) * context


def test_a_variant_registered_in_one_line_reaches_reader_counts_and_template(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from shardline.models import model_from_dict
    from shardline.models.template import model_workload
    from shardline.workload.attention import registry

    monkeypatch.setattr(registry, "VARIANTS", (*registry.VARIANTS, _CrossLayerAttention()))
    n = lambda v: {"value": v, "source": "test"}  # noqa: E731
    data = {
        "schema": 1, "name": "toy-cla", "d_model": n(1024), "layers": n(6), "heads": n(8),
        "kv_heads": n(2), "head_dim": n(128), "d_ff": n(4096), "gated": n(True),
        "vocab": n(32000), "tied_embeddings": n(False), "cross_layer": {"share": n(2)},
    }  # fmt: skip
    spec = model_from_dict(data, "toy.toml")
    assert spec.variant()[1] == _CrossLayer(2)
    assert attention_kind(spec) == "GQA+CLA"  # kv_heads 2 < heads 8
    # bytes = per-layer elements 2 x kv_heads x head_dim = 512, x 2 B (bf16), x ceil(6 / 2) x c
    assert kv_bytes_at(spec, 1000) == 512 * 2 * 3 * 1000
    # the template takes the variant's table by its key (and plain attention's einsums)
    work = model_workload(spec, phase="decode", batch=1, seq_len=1000)
    assert work.repeat == 6 and work.model.key_len == 1000
    with pytest.raises(InputError, match="cross_layer.share must be a positive integer"):
        transformer(d_model=64, d_ff=128, heads=4, batch=1, seq_len=8, cross_layer={"share": 0})


def test_mla_decode_attention_runs_at_the_chips_mla_kernel_rate() -> None:
    """On Hopper the engines run MLA decode as FlashMLA: its compute-bound 660 TFLOP/s
    (deepseek-ai/FlashMLA README, H800 SXM5; the h200 chip file's mla_decode_flops_per_s),
    whatever the step's dtype; grouped-query attention and chips without the figure keep the
    fused attention efficiency x the peak."""
    from shardline.realistic.kernels import attention_work_s, latent_attention

    m = DEEPSEEK.mla
    assert m is not None
    b, t, h = 64, 4096, 128
    w = transformer(
        d_model=7168, d_ff=18432, heads=h, kv_heads=h, head_dim=192, layers=1, batch=b,
        seq_len=t, phase="decode", mla=dict(vars(m)), dtype="fp8",
    )  # fmt: skip
    scores = next(x for x in w.layers if x.name == "attn_scores")
    values = next(x for x in w.layers if x.name == "attn_values")
    assert latent_attention(scores) and latent_attention(values)
    h200 = load_chip("h200")
    assert h200.achievable.mla_decode_flops_per_s == 660e12
    # scores: 2 B H T K FLOPs (K = 512 + 64 = 576) against the fp8 latent read once,
    # B T K bytes, and the queries B H K: 256 FLOP/B of latent, so compute-bound at 660e12
    flops = 2 * b * h * t * 576
    read = b * t * 576 + b * h * 576
    got = attention_work_s(scores, h200, scores.dims, causal=True, decode=True)
    assert got == pytest.approx(max(flops / 660e12, read / 3.888e12))
    assert got == pytest.approx(flops / 660e12)
    # the values (V = 512) reuse the latent on chip: their FLOPs at the same rate
    got_v = attention_work_s(values, h200, values.dims, causal=True, decode=True)
    assert got_v >= 2 * b * h * t * 512 / 660e12
    # a B200 has no figure: the fused attention efficiency x its fp8 peak, as before
    b200 = load_chip("b200")
    assert b200.achievable.mla_decode_flops_per_s is None
    fused = attention_work_s(scores, b200, scores.dims, causal=True, decode=True)
    eff = b200.achievable.attention_fwd_efficiency
    assert eff is not None
    assert fused == pytest.approx(
        max(flops / (eff * b200.peak("fp8")), read / b200.achievable.mem_bytes_per_s)
    )
    # grouped-query attention shares its KV head with the queries: not a latent
    gqa = transformer(d_model=4096, d_ff=14336, heads=32, kv_heads=8, head_dim=128, layers=1,
                      batch=8, seq_len=1024, phase="decode")  # fmt: skip
    assert not latent_attention(next(x for x in gqa.layers if x.name == "attn_scores"))
