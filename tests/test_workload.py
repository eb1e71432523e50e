"""Workloads: layers, the backward pass, the transformer templates and the workload files."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardline.errors import InputError
from shardline.io.workload_toml import load_workload, workload_from_dict
from shardline.workload.stack import stack
from shardline.workload.templates import ffn, transformer
from shardline.workload.workload import Layer, Workload, backward_layers, matmul_layer

ROOT = Path(__file__).resolve().parent.parent


def test_llama3_8b_block_params_match_the_published_count() -> None:
    # Meta's Llama 3 8B model card: 8.03e9 parameters in all. Per block, by hand: W_qkv
    # D*(H + 2G)*E, W_o H*E*D, the SwiGLU FFN 3*D*F; embeddings (untied input and output,
    # 128,256 x 4,096 each) and norms are not matmul weights of the blocks.
    d, f, h, g, e, layers, vocab = 4096, 14336, 32, 8, 128, 32, 128256
    w = transformer(
        d_model=d,
        d_ff=f,
        heads=h,
        kv_heads=g,
        head_dim=e,
        batch=1,
        seq_len=8,
        layers=layers,
        phase="training",
    )
    per_block = d * (h + 2 * g) * e + h * e * d + 3 * d * f
    assert w.params() == layers * per_block == 6_979_321_856
    published_total = 8.03e9
    assert w.params() + 2 * vocab * d == pytest.approx(published_total, rel=1e-3)


def test_training_flops_are_three_times_forward_and_six_per_param_per_token() -> None:
    # Backward = 2 x forward (dX and dW per matmul); the weight matmuls alone cost
    # 6 x params x tokens ("How to Scale Your Model", Part 4: training FLOPs ~ 6 N T).
    b, s = 2, 512
    w = transformer(
        d_model=1024,
        d_ff=4096,
        heads=16,
        kv_heads=4,
        batch=b,
        seq_len=s,
        layers=3,
        phase="training",
    )
    r = stack(w, "h100-sxm")
    assert r.totals.backward_flops == 2 * r.totals.forward_flops
    weight_layers = {layer.name for layer in w.layers if layer.weights}
    weight_rows = [row for row in r.layers if row.name.split(".")[0] in weight_layers]
    weight_flops = sum(row.count * row.flops for row in weight_rows)
    assert weight_flops == 6 * w.params() * b * s


def test_kv_cache_matches_the_vllm_paper_figure() -> None:
    # vLLM (Kwon et al., SOSP 2023, section 3): "in LLaMA-13B, the KV cache of a single sequence
    # can take up to 1.7 GB" (40 layers, d_model 5120 = 40 heads x 128, 2,048 tokens, fp16).
    w = transformer(
        d_model=5120,
        d_ff=13824,
        heads=40,
        batch=1,
        seq_len=2048,
        layers=40,
        phase="decode",
        dtype="fp16",
    )
    kv = stack(w, "a100-80gb").memory.kv_cache_bytes
    assert kv == 2 * 40 * 40 * 128 * 2048 * 1 * 2 == 1_677_721_600  # 2*L*n_kv*d_head*S*B*s_kv
    assert kv == pytest.approx(1.7e9, rel=0.02)


def test_gqa_kv_cache_by_the_formula_and_kv_dtype() -> None:
    layers, g, e, s, b = 32, 8, 128, 4096, 8
    w = transformer(
        d_model=4096,
        d_ff=14336,
        heads=32,
        kv_heads=g,
        head_dim=e,
        batch=b,
        seq_len=s,
        layers=layers,
        phase="decode",
        kv_dtype="fp8",
    )
    mem = stack(w, "h100-sxm").memory
    assert mem.kv_cache_bytes == 2 * layers * g * e * s * b * 1  # s_kv = 1 B for fp8
    prefill = transformer(
        d_model=4096,
        d_ff=14336,
        heads=32,
        kv_heads=g,
        batch=b,
        seq_len=s,
        layers=layers,
        phase="prefill",
    )
    assert stack(prefill, "h100-sxm").memory.kv_cache_bytes == 2 * layers * g * e * s * b * 2


def test_decode_reads_the_cache_and_one_token_per_sequence() -> None:
    w = transformer(
        d_model=2048, d_ff=8192, heads=16, batch=4, seq_len=1000, layers=2, phase="decode"
    )
    scores = next(layer for layer in w.layers if layer.name == "attn_scores")
    assert scores.dims["S"] == 1 and scores.dims["T"] == 1000
    assert scores.role("k") == "cache" and scores.role("p") == "onchip"
    # FLOPs of the scores: 2 * B * G * R * S * T * E
    r = stack(w, "h100-sxm")
    row = next(row for row in r.layers if row.name == "attn_scores")
    assert row.flops == 2 * 4 * 16 * 1 * 1 * 1000 * 128
    # bytes: q (bf16) + the cache k, not the on-chip scores
    assert row.bytes == 2 * (4 * 1 * 16 * 128) + 2 * (4 * 1000 * 16 * 128)


def test_backward_layers_of_a_weight_matmul() -> None:
    layer = Layer(
        "up",
        "x[B,D] * w[D,F] -> h[B,F]",
        {"B": 8, "D": 16, "F": 32},
        weights=("w",),
        tp_dims=("F",),
    )
    dx, dw = backward_layers(layer)
    assert dx.spec == "dh[B,F] * w[D,F] -> dx[B,D]" and dx.weights == ("w",)
    assert dx.grad_of is None
    assert dw.spec == "x[B,D] * dh[B,F] -> dw[D,F]" and dw.grad_of == "w"
    assert dx.parsed.contracted == ("F",) and dw.parsed.contracted == ("B",)
    assert dx.tp_dims == dw.tp_dims == ("F",)
    assert layer.params() == 16 * 32 and dx.params() == 0


@settings(max_examples=30, deadline=None)
@given(m=st.integers(1, 4096), k=st.integers(1, 4096), n=st.integers(1, 4096))
def test_backward_flops_equal_forward_for_any_matmul(m: int, k: int, n: int) -> None:
    layer = matmul_layer("mm", m, k, n)
    fwd = 2 * m * k * n
    grads = backward_layers(layer)
    assert len(grads) == 2
    for grad in grads:
        assert grad.parsed.flops(dict(grad.dims)) == fwd


def test_layer_validation() -> None:
    with pytest.raises(InputError, match="weights names unknown operand"):
        Layer("a", "x[M,K] * w[K,N] -> y[M,N]", {"M": 1, "K": 2, "N": 3}, weights=("W",))
    with pytest.raises(InputError, match="not sized"):
        Layer("a", "x[M,K] * w[K,N] -> y[M,N]", {"M": 1, "K": 2})
    with pytest.raises(InputError, match="output y cannot be a weight"):
        Layer("a", "x[M,K] * w[K,N] -> y[M,N]", {"M": 1, "K": 2, "N": 3}, weights=("y",))
    with pytest.raises(InputError, match="count"):
        Layer("a", "x[M,K] * w[K,N] -> y[M,N]", {"M": 1, "K": 2, "N": 3}, count=0)
    with pytest.raises(InputError, match="tp_dim Q"):
        Layer("a", "x[M,K] * w[K,N] -> y[M,N]", {"M": 1, "K": 2, "N": 3}, tp_dims=("Q",))
    with pytest.raises(InputError, match="batch_dim B"):
        Workload("w", (matmul_layer("a", 1, 2, 3),), batch_dim="B")
    with pytest.raises(InputError, match="kv_heads"):
        transformer(d_model=64, d_ff=128, heads=6, kv_heads=4, head_dim=16, batch=1, seq_len=4)


def test_pipeline_stages_cut_at_blocks_or_layers() -> None:
    w = ffn(d_model=64, d_ff=256, batch=4, layers=6)  # 6 blocks of 2 layers
    assert w.layer_count == 12
    assert w.pipeline_splits(3) == "blocks" and w.pipeline_splits(4) == "layers"
    # 5 stages of 6 blocks: uneven, divmod(6, 5) = (1, 1): one stage of 2 blocks, four of 1
    assert w.pipeline_splits(5) == "uneven" and w.stage_blocks(5) == [2, 1, 1, 1, 1]
    assert w.pipeline_splits(7) is None  # 7 > 6 blocks and 7 does not divide 12 layers
    stages = w.pipeline_stages(3)
    assert [[(layer.name, n) for layer, n in st] for st, _ in stages] == [
        [("ffn_in", 2), ("ffn_down", 2)]
    ] * 3
    assert all(last.name == "ffn_down" for _, last in stages)
    # 4 stages of 3 layers: in, down, in | down, in, down | ...
    four = w.pipeline_stages(4)
    shares = [(sorted((layer.name, n) for layer, n in st), last.name) for st, last in four[:2]]
    assert shares == [
        ([("ffn_down", 1), ("ffn_in", 2)], "ffn_in"),
        ([("ffn_down", 2), ("ffn_in", 1)], "ffn_down"),
    ]
    uneven = w.pipeline_stages(5)
    assert [[(layer.name, n) for layer, n in st] for st, _ in uneven] == [
        [("ffn_in", 2), ("ffn_down", 2)]
    ] + [[("ffn_in", 1), ("ffn_down", 1)]] * 4
    with pytest.raises(InputError, match=r"pp=7 is more than the 6 blocks"):
        w.pipeline_stages(7)
    single = Workload("s", (matmul_layer("a", 8, 8, 8, count=3), matmul_layer("b", 8, 8, 8)))
    assert [[(layer.name, n) for layer, n in st] for st, _ in single.pipeline_stages(4)] == [
        [("a", 1)],
        [("a", 1)],
        [("a", 1)],
        [("b", 1)],
    ]


# ----------------------------------------------------------------------------------------------
# Workload files


def test_seed003_example_is_a_chain_of_72_layers() -> None:
    w = load_workload(ROOT / "examples" / "seed003_stack.toml")
    assert w.layer_count == 72 and w.repeat == 36 and w.batch_dim == "M"
    type1, type2 = w.layers
    # Type 1: input m*n, weight n*k, output m*k; type 2: input m*k, weight k*n, output m*n.
    assert [op.dims for op in type1.parsed.operands] == [("M", "N"), ("N", "K"), ("M", "K")]
    assert [op.dims for op in type2.parsed.operands] == [("M", "K"), ("K", "N"), ("M", "N")]
    assert type1.output.dims == type2.inputs[0].dims  # each output feeds the next layer
    assert type2.output.dims == type1.inputs[0].dims
    assert type1.tp_dims == type2.tp_dims == ("K",)


def test_transformer_example_loads_with_overrides() -> None:
    path = ROOT / "examples" / "transformer_block.toml"
    w = load_workload(path)
    assert w.training and w.batch == 8 and w.repeat == 32
    decode = load_workload(path, phase="decode", batch=2, seq_len=1024)
    assert decode.phase == "decode" and decode.batch == 2
    assert next(x for x in decode.layers if x.name == "attn_scores").dims["T"] == 1024


def _stack_toml(layer: dict[str, object], **top: object) -> dict[str, object]:
    return {"name": "t", "layer": [layer], **top}


def test_toml_unknown_fields_are_errors() -> None:
    good = {
        "name": "a",
        "einsum": "x[M,K] * w[K,N] -> y[M,N]",
        "weights": ["w"],
        "dims": {"M": 4, "K": 8, "N": 16},
    }
    assert workload_from_dict(_stack_toml(good)).layers[0].name == "a"
    with pytest.raises(InputError, match="unknown field 'wieghts'"):
        workload_from_dict(_stack_toml({**good, "wieghts": ["w"]}))
    with pytest.raises(InputError, match="unknown field 'layers'"):
        workload_from_dict({"layers": [good]})
    with pytest.raises(InputError, match="unknown field 'headz'"):
        workload_from_dict({"transformer": {"d_model": 8, "headz": 2}})


def test_toml_shapes_must_match_the_einsum() -> None:
    layer = {
        "name": "a",
        "einsum": "x[M,K] * w[K,N] -> y[M,N]",
        "weights": ["w"],
        "shapes": {"x": [4, 8], "w": [8, 16]},
    }
    w = workload_from_dict(_stack_toml(layer))
    assert w.layers[0].dims == {"M": 4, "K": 8, "N": 16}
    with pytest.raises(
        InputError,
        match=r"shape of w \[9, 16\] does not match its einsum "
        r"w\[K,N\]: K is 9 here but 8",
    ):
        workload_from_dict(_stack_toml({**layer, "shapes": {"x": [4, 8], "w": [9, 16]}}))
    with pytest.raises(InputError, match="3 sizes for 2 dimensions"):
        workload_from_dict(_stack_toml({**layer, "shapes": {"x": [4, 8, 1], "w": [8, 16]}}))
    with pytest.raises(InputError, match="N of .* have no size"):
        workload_from_dict(_stack_toml({**layer, "shapes": {"x": [4, 8]}}))
    with pytest.raises(InputError, match="takes no mesh axes"):
        workload_from_dict(
            _stack_toml(
                {
                    "name": "a",
                    "einsum": "x[M_X,K] * w[K,N] -> y[M_X,N]",
                    "dims": {"M": 4, "K": 8, "N": 16},
                }
            )
        )


def test_toml_matmul_shorthand_and_shared_dims() -> None:
    data = {
        "name": "s",
        "repeat": 2,
        "dims": {"M": 64, "K": 128, "N": 256},
        "layer": [
            {"name": "a", "m": 64, "k": 128, "n": 32},
            {"name": "b", "einsum": "y[M,N] * v[N,K] -> z[M,K]", "weights": ["v"]},
        ],
    }
    w = workload_from_dict(data)
    a, b = w.layers
    assert a.spec == "x[M,K] * w[K,N] -> y[M,N]" and a.weights == ("w",)
    assert a.tp_dims == ("K",)  # the weight's largest dim: K = 128 > N = 32
    assert b.dims == {"M": 64, "N": 256, "K": 128} and b.tp_dims == ("N",)
    assert w.batch_dim == "M" and w.params() == 2 * (128 * 32 + 256 * 128)


def test_sheet_workload_rows_with_counts(tmp_path: Path) -> None:
    sheet = tmp_path / "shapes.csv"
    sheet.write_text(
        "name,m,k,n,count\nqkv,4096,4096,12288,2\nproj,4096,4096,4096,1\n", encoding="utf-8"
    )
    w = load_workload(sheet)
    assert [(layer.name, layer.count) for layer in w.layers] == [("qkv", 2), ("proj", 1)]
    r = stack(w, "a100-40gb")
    assert r.totals.flops == 2 * (2 * 4096 * 4096 * 12288) + 2 * 4096 * 4096 * 4096
    assert w.layer_count == 3


def test_workload_file_errors(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="no such workload file"):
        load_workload(tmp_path / "missing.toml")
    bad = tmp_path / "bad.toml"
    bad.write_text("name = [", encoding="utf-8")
    with pytest.raises(InputError, match="invalid TOML"):
        load_workload(bad)
    with pytest.raises(InputError, match="unsupported workload type"):
        load_workload(tmp_path / "w.json")
