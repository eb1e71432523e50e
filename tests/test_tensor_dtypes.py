"""Precision per tensor class (weights, activations, KV cache), tied embeddings and `report
--model`, each value derived by hand below."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from shardline.cli.main import main
from shardline.errors import InputError
from shardline.io.workload_toml import workload_from_dict
from shardline.workload.precision import default_weight_dtype, weight_dtype_of, with_tensor_dtypes

# llama-3.1-8b (its model file): d 4096, 32 layers, 32 heads of 128, 8 KV heads, SwiGLU d_ff
# 14336, vocab 128256, untied. One block: W_qkv 4096 x (32 + 2 x 8) x 128 = 25,165,824, W_o
# 32 x 128 x 4096 = 16,777,216, FFN 3 x 4096 x 14336 = 176,160,768: 218,103,808; 32 blocks
# 6,979,321,856; embedding and LM head 2 x 128256 x 4096 = 1,050,673,152; all 8,029,995,008.
LLAMA8B_PARAMS = 32 * (4096 * 48 * 128 + 32 * 128 * 4096 + 3 * 4096 * 14336) + 2 * 128256 * 4096
DECODE = ["--phase", "decode", "--batch", "64", "--seq-len", "4096"]


def _plan(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, Any]:
    argv = ["plan", "--model", "llama-3.1-8b", "--hw", "h100", "--devices", "1", *DECODE]
    assert main([*argv, *extra, "--json"]) == 0
    out: dict[str, Any] = json.loads(capsys.readouterr().out)["plans"][0]
    return out


def test_int4_weights_are_half_a_byte_per_parameter(capsys: pytest.CaptureFixture[str]) -> None:
    assert LLAMA8B_PARAMS == 8_029_995_008
    bf16 = _plan(capsys)["memory"]
    int4 = _plan(capsys, "--weight-dtype", "int4")["memory"]
    assert bf16["params"] == int4["params"] == LLAMA8B_PARAMS
    assert bf16["weights_bytes"] == 2 * LLAMA8B_PARAMS
    assert int4["weights_bytes"] == 0.5 * LLAMA8B_PARAMS  # 4,014,997,504 B
    assert int4["kv_cache_bytes"] == bf16["kv_cache_bytes"]


def test_int4_weights_shrink_the_decode_weight_reads(capsys: pytest.CaptureFixture[str]) -> None:
    """A decode step reads every block weight and the LM head once: with int4 instead of bf16
    those HBM bytes drop by 1.5 B x (6,979,321,856 + 128256 x 4096) parameters; the step stays
    memory-bound, so its memory time drops by that over 3.35e12 B/s (3.36 ms)."""
    bf16, int4 = _plan(capsys), _plan(capsys, "--weight-dtype", "int4")
    block_params = 32 * (4096 * 48 * 128 + 32 * 128 * 4096 + 3 * 4096 * 14336)
    saved = 1.5 * (block_params + 128256 * 4096) / 3.35e12
    assert bf16["t_memory_s"] - int4["t_memory_s"] == pytest.approx(saved, rel=0.01)
    assert int4["t_compute_s"] == pytest.approx(bf16["t_compute_s"], rel=1e-6)  # bf16 FLOPs
    assert int4["predicted_s"] < bf16["predicted_s"]


def test_fp8_kv_cache_halves_it(capsys: pytest.CaptureFixture[str]) -> None:
    """KV cache = 2 (K and V) x 32 layers x 8 KV heads x 128 x 4096 tokens x 64 sequences x
    bytes: 34,359,738,368 B in bf16, half in fp8."""
    kv = 2 * 32 * 8 * 128 * 4096 * 64
    assert _plan(capsys)["memory"]["kv_cache_bytes"] == 2 * kv
    assert _plan(capsys, "--kv-dtype", "fp8")["memory"]["kv_cache_bytes"] == kv


TEMPLATE = {
    "d_model": 1024,
    "d_ff": 4096,
    "heads": 8,
    "seq_len": 512,
    "batch": 4,
    "layers": 2,
    "vocab": 32000,
}


def _workload(**extra: Any) -> Any:
    return workload_from_dict({"transformer": {**TEMPLATE, **extra}})


def test_weights_keep_the_compute_dtype() -> None:
    w = with_tensor_dtypes(_workload(phase="decode"), weight_dtype="int4")
    layer = next(layer for layer in w.layers if layer.weights)
    assert layer.dtypes[layer.weights[0]] == "int4" and layer.compute_dtype == "bf16"
    assert weight_dtype_of(w) == "int4" and w.model is not None
    assert w.model.weights_dtype == "int4" and w.model.dtype == "bf16"


def test_fp8_training_keeps_bf16_weights_and_bf16_activations() -> None:
    """Transformer Engine's fp8 training: fp8 GEMMs, bf16 parameters, bf16 activations."""
    assert default_weight_dtype("fp8", "training") == "bf16"
    assert default_weight_dtype("fp8", "decode") is None
    assert default_weight_dtype("bf16", "training") is None
    fp8 = _workload(dtype="fp8")
    layer = next(layer for layer in fp8.layers if layer.weights)
    assert layer.compute_dtype == "fp8" and layer.dtypes[layer.weights[0]] == "bf16"
    assert fp8.model is not None and fp8.model.weights_dtype == "bf16"
    explicit = _workload(dtype="fp8", weight_dtype="fp8")
    assert weight_dtype_of(explicit) == "fp8"


def _memory(workload: Any, pp: int = 1) -> dict[str, Any]:
    from shardline.planning.api import plan

    result = plan(workload, "h100", pp, tp=1, pp=pp, dp=1, fsdp=1, require_fit=False)
    best = result.plans[0]
    return best.memory.to_dict() if hasattr(best.memory, "to_dict") else vars(best.memory)


def test_fp8_training_activation_memory_by_hand() -> None:
    """8-bit training keeps bf16 activations (2 B), as the ops between the matmuls count them,
    except the four GEMM inputs the fp8 GEMMs save in fp8 (1 B): the QKV and up-projection inputs
    (s b h each) and the output- and down-projection inputs (s b q_out / t, s b d_ff / t). Per
    block, s = 512, b = 4, h = 1024, q_out = 8 x 128, d_ff = 4096, one rank: the fp8 block keeps
    1 B x (2 s b h + s b (q_out + d_ff)) less than the bf16 block."""
    from shardline.realistic.activations import layer_activation_bytes

    bf16, fp8 = _workload(dtype="bf16").model, _workload(dtype="fp8").model
    assert bf16 is not None and fp8 is not None
    sb, h = 512 * 4, 1024
    kept = {
        m.dtype: layer_activation_bytes(m, 4, tp=1, sp=False, recompute="none") for m in (bf16, fp8)
    }
    assert kept["bf16"] - kept["fp8"] == 2 * sb * h + sb * (8 * 128 + 4096)
    # bf16 by hand: 10 s b h + 2 s b (2 q_out + 2 kv_heads d_head + 2 d_ff + d_ff)
    assert kept["bf16"] == 10 * sb * h + 2 * sb * (2 * 1024 + 2 * 1024 + 2 * 4096 + 4096)
    full = {
        m.dtype: layer_activation_bytes(m, 4, tp=1, sp=False, recompute="full") for m in (bf16, fp8)
    }
    assert full["bf16"] == full["fp8"] == 2 * sb * h  # the block's bf16 input


def test_tied_embeddings_count_the_table_once() -> None:
    """One block: W_qkv 1024 x 3 x 1024, W_o 1024 x 1024, FFN 3 x 1024 x 4096 = 16,777,216;
    2 blocks 33,554,432; the table 32000 x 1024 = 32,768,000, twice untied."""
    blocks = 2 * (4 * 1024 * 1024 + 3 * 1024 * 4096)
    table = 32000 * 1024
    assert _memory(_workload())["params"] == blocks + 2 * table
    assert _memory(_workload(tied_embeddings=True))["params"] == blocks + table
    # two pipeline stages: each end keeps its copy of the tied table (first: embedding, last:
    # the LM head), as Megatron-LM does, so each stage holds one table either way
    tied_pp = _memory(_workload(tied_embeddings=True), pp=2)
    assert tied_pp["params"] == blocks / 2 + table


def test_zoo_model_with_tied_embeddings() -> None:
    """llama-3.2-1b ties its embeddings: 16 blocks of 2048 x (32 + 16) x 64 + 32 x 64 x 2048 +
    3 x 2048 x 8192 = 60,817,408, plus one 128256 x 2048 table: 1,235,746,816 (1.24B)."""
    from shardline.models import load_model
    from shardline.models.template import transformer_table

    spec = load_model("llama-3.2-1b")
    w = workload_from_dict({"transformer": transformer_table(spec, batch=1, seq_len=512)})
    assert w.model is not None and w.model.tied_embeddings
    assert _memory(w)["params"] == 16 * 60_817_408 + 128256 * 2048 == 1_235_746_816


def test_bad_precision_inputs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    with pytest.raises(InputError, match="tied_embeddings"):
        _workload(tied_embeddings="yes")
    with pytest.raises(InputError, match="dtype"):
        _workload(weight_dtype="int3")
    argv = ["plan", "--model", "llama-3.1-8b", "--hw", "h100", "--devices", "1"]
    assert main([*argv, "--weight-dtype", "int3"]) == 2
    assert "error:" in capsys.readouterr().err
    stack = tmp_path / "mm.toml"
    stack.write_text(
        '[[layer]]\nname = "mm"\neinsum = "x[M,K] * w[K,N] -> y[M,N]"\n'
        'dims = { M = 64, K = 64, N = 64 }\nweights = ["w"]\n'
    )
    assert main(["stack", str(stack), "--hw", "h100", "--kv-dtype", "fp8"]) == 2
    assert "--kv-dtype" in capsys.readouterr().err
    assert main(["stack", str(stack), "--hw", "h100", "--weight-dtype", "int8", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["memory"]["weights_bytes"] == 64 * 64


def test_report_takes_a_zoo_model(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    out = tmp_path / "r.html"
    argv = ["report", "--model", "llama-3.2-1b", "--hw", "h100", "--html", str(out)]
    assert main(argv) == 0
    assert "wrote" in capsys.readouterr().out and out.read_text().startswith("<!DOCTYPE html>")
    assert main(["report", "--hw", "h100", "--html", str(tmp_path / "x.html")]) == 2


def test_dtype_flag_on_plan_fp8_training(capsys: pytest.CaptureFixture[str]) -> None:
    """`plan --dtype fp8` trains as Transformer Engine does: over fsdp8 each device holds an
    eighth of the bf16 weights (2 B x 8,029,995,008 / 8) and of the 12 B per parameter of Adam's
    state, as in bf16, and bf16 activations but for the fp8 GEMM inputs; the matmuls run at the
    fp8 peak."""
    argv = ["plan", "--model", "llama-3.1-8b", "--hw", "h100", "--devices", "8", "--batch", "8"]
    fixed = ["--tp", "1", "--pp", "1", "--dp", "1", "--fsdp", "8", "--json"]
    runs = {}
    for dtype in ("bf16", "fp8"):
        assert main([*argv, "--dtype", dtype, *fixed]) == 0
        runs[dtype] = json.loads(capsys.readouterr().out)["plans"][0]
    bf16, fp8 = runs["bf16"]["memory"], runs["fp8"]["memory"]
    assert bf16["weights_bytes"] == fp8["weights_bytes"] == 2 * LLAMA8B_PARAMS / 8
    assert bf16["optimizer_bytes"] == fp8["optimizer_bytes"] == 12 * LLAMA8B_PARAMS / 8
    # one sequence of 4096 tokens per device, 32 blocks: the fp8 GEMM inputs save 1 B x
    # (2 s h + s (q_out + d_ff)) = 2 x 4096 x 4096 + 4096 x (4096 + 14336) per block
    saved = 32 * (2 * 4096 * 4096 + 4096 * (4096 + 14336))
    assert bf16["activations_bytes"] - fp8["activations_bytes"] == saved == 3_489_660_928
    assert runs["fp8"]["predicted_s"] < runs["bf16"]["predicted_s"]
    assert main([*argv, "--dtype", "fp7"]) == 2


def test_cli_keeps_a_workload_files_dtype_without_dtype_flag(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # An fp8 [transformer] file planned from the command line must be priced as the library
    # prices the same file: --dtype left out means the file's dtype, not the chip's default bf16.
    import json

    from shardline.cli.main import main
    from shardline.io.workload_toml import load_workload
    from shardline.planning.api import plan

    path = tmp_path / "fp8.toml"
    path.write_text(
        'dtype = "fp8"\nphase = "training"\n[transformer]\nd_model = 1024\nd_ff = 4096\n'
        "heads = 8\nbatch = 8\nseq_len = 1024\nlayers = 2\n",
        encoding="utf-8",
    )
    assert main(["plan", str(path), "--hw", "h100-sxm", "--devices", "1", "--json"]) == 0
    by_cli = json.loads(capsys.readouterr().out)["plans"][0]["predicted_s"]
    by_library = plan(load_workload(path), "h100-sxm", 1).plans[0].predicted_s
    assert by_cli == pytest.approx(by_library, rel=1e-12)
    assert main(["plan", str(path), "--hw", "h100-sxm", "--devices", "1", "--dtype", "bf16",
                 "--json"]) == 0  # fmt: skip
    as_bf16 = json.loads(capsys.readouterr().out)["plans"][0]["predicted_s"]
    assert as_bf16 > by_cli  # bf16 matmuls run at half the fp8 peak


def test_gradients_reduced_in_fp32_move_twice_the_bf16_bytes() -> None:
    # Megatron-LM's grad_reduce_in_fp32: each dW (bf16, 2 B per weight) travels as fp32 (4 B), so
    # the data-parallel all-reduce moves V = 4 B x weights instead of 2 B x weights
    from shardline.errors import InputError
    from shardline.planning.api import plan
    from shardline.workload.templates import transformer

    w = transformer(d_model=512, d_ff=2048, heads=8, batch=8, seq_len=256, layers=2)
    weights = 2 * (512 * (8 + 2 * 8) * 64 + 8 * 64 * 512 + 3 * 512 * 2048)  # 2 blocks

    def dp_bytes(**kw: object) -> float:
        p = plan(w, "h100-sxm", 8, tp=1, pp=1, dp=8, fsdp=1, **kw).plans[0]
        (term,) = [c for c in p.comm if c.purpose == "dp"]
        return term.bytes

    assert dp_bytes() == 2 * weights
    assert dp_bytes(grad_reduce_dtype="fp32") == 4 * weights
    with pytest.raises(InputError):
        dp_bytes(grad_reduce_dtype="fp33")


def test_model_file_states_its_precision(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A model file may state its dtypes (an int4 release served with an fp8 cache): `model show`
    counts the cache at 1 B (2 x 32 layers x 8 KV heads x 128 x 1 B = 65,536 B a token), `--model`
    stores the weights at half a byte, and the flags still override the file."""
    from importlib import resources

    text = (resources.files("shardline.models") / "catalog" / "llama-3.1-8b.toml").read_text()
    path = tmp_path / "llama-int4.toml"
    path.write_text(
        text.replace('name = "llama-3.1-8b"', 'name = "llama-int4"')
        + 'weight_dtype = { value = "int4", source = "a quantized release" }\nkv_dtype = "fp8"\n',
        encoding="utf-8",
    )
    assert main(["model", "show", str(path), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["kv_bytes_per_token"] == 2 * 32 * 8 * 128 * 1 == 65_536
    assert main(["model", "show", str(path), "--context", "4096", "--json"]) == 0
    at_context = json.loads(capsys.readouterr().out)["kv_bytes_at_context"]
    assert at_context == 65_536 * 4096  # the same 1 B a cached element at a context
    argv = ["plan", "--model", str(path), "--hw", "h100", "--devices", "1", *DECODE, "--json"]
    assert main(argv) == 0
    memory = json.loads(capsys.readouterr().out)["plans"][0]["memory"]
    assert memory["weights_bytes"] == 0.5 * LLAMA8B_PARAMS
    assert memory["kv_cache_bytes"] == 2 * 32 * 8 * 128 * 4096 * 64 * 1
    assert main([*argv, "--weight-dtype", "bf16"]) == 0
    overridden = json.loads(capsys.readouterr().out)["plans"][0]["memory"]
    assert overridden["weights_bytes"] == 2 * LLAMA8B_PARAMS
    path.write_text(text + 'kv_dtype = "fp7"\n', encoding="utf-8")
    assert main(["model", "show", str(path)]) == 2
    assert "kv_dtype" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("model", "bf16_cache_bytes"),
    [
        # MLA: 61 layers x (kv_lora_rank 512 + rope 64) x 2 B a token, shared by the heads
        # (not split by tp): 8 sequences x 4096 tokens x 61 x 576 x 2 B
        ("deepseek-v3", 8 * 4096 * 61 * 576 * 2),
        # sliding window (gpt-oss-20b: 24 layers, half of them a 128-token window; 8 KV heads of
        # 64, split 8 ways by tp): 8 x (12 x 4096 + 12 x 128) x 2 x 8 x 64 x 2 B / 8
        ("gpt-oss-20b", 8 * (12 * 4096 + 12 * 128) * 2 * 8 * 64 * 2 / 8),
    ],
)
def test_kv_dtype_applies_to_mla_and_sliding_window_caches(
    capsys: pytest.CaptureFixture[str], model: str, bf16_cache_bytes: float
) -> None:
    """--kv-dtype used to be refused for caches without the plain 2 L n_kv d_head formula."""
    argv = ["plan", "--model", model, "--hw", "h200", "--devices", "8", "--tp", "8"]
    argv += ["--phase", "decode", "--batch", "8", "--seq-len", "4096", "--json"]
    for kv, factor in (("bf16", 1.0), ("fp8", 0.5)):
        assert main([*argv, "--kv-dtype", kv]) == 0
        cache = json.loads(capsys.readouterr().out)["plans"][0]["memory"]["kv_cache_bytes"]
        assert cache == pytest.approx(bf16_cache_bytes * factor, rel=1e-9)


def test_experts_only_checkpoint_keeps_the_other_weights_in_bf16() -> None:
    """gpt-oss's checkpoint quantizes only its routed experts (MXFP4; its config's
    modules_to_not_convert keeps attention, router, embeddings and LM head in bf16): served with
    4-bit weights, the expert einsums hold 4-bit weights while attn_qkv keeps bf16 weights and
    computes in bf16. By hand, gpt-oss-120b: W_qkv is d_model x (heads + 2 kv_heads) x head_dim
    = 2,880 x (64 + 16) x 64 = 14,745,600 parameters, 29,491,200 bytes in bf16; one expert's
    gate/up matrix 2,880 x 2 x 2,880 = 16,588,800 parameters, 8,294,400 bytes at 4 bits."""
    from shardline.hardware import load_chip
    from shardline.models import load_model
    from shardline.models.template import model_workload
    from shardline.ops.roofline import evaluate_einsum

    spec = load_model("gpt-oss-120b")
    assert spec.moe is not None and spec.moe.dense_weight_dtype == "bf16"
    work = model_workload(spec, phase="decode", batch=1, seq_len=1024, dtype="fp4")
    work = with_tensor_dtypes(work, weight_dtype="fp4", kv_dtype="fp8")
    layers = {x.name: x for x in work.layers}
    qkv, experts = layers["attn_qkv"], layers["expert_in"]
    assert qkv.dtypes["wqkv"] == "bf16" and qkv.compute_dtype == "bf16"
    assert layers["router"].dtypes["wr"] == "bf16"
    assert experts.dtypes["wein"] == "fp4" and experts.compute_dtype == "fp4"
    assert work.model is not None and work.model.weights_dtype == "bf16"  # LM head, embedding
    b200 = load_chip("b200")

    def weight_bytes(layer: Any, name: str) -> float:
        result = evaluate_einsum(
            layer.parsed, dict(layer.dims), b200, dict(layer.dtypes), layer.compute_dtype
        )
        return float(result.bytes[name])

    assert weight_bytes(qkv, "wqkv") == 2880 * 80 * 64 * 2 == 29_491_200
    per_expert = weight_bytes(experts, "wein") / experts.dims["X"]
    assert per_expert == 2880 * 2 * 2880 / 2 == 8_294_400
    # a model without the field (Qwen3-30B-A3B, all linear layers in the FP4 checkpoint) keeps
    # every weight at the dtype served
    qwen = model_workload(load_model("qwen3-30b-a3b"), phase="decode", batch=1, seq_len=1024)
    qwen = with_tensor_dtypes(qwen, weight_dtype="fp4")
    assert next(x for x in qwen.layers if x.name == "attn_qkv").dtypes["wqkv"] == "fp4"
    # 16-bit weights: nothing to keep apart
    wide = with_tensor_dtypes(
        model_workload(spec, phase="decode", batch=1, seq_len=1024), weight_dtype="bf16"
    )
    assert next(x for x in wide.layers if x.name == "expert_in").dtypes["wein"] == "bf16"
