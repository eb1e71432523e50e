"""The model zoo: every catalog file sourced and loadable; parameter counts against the model cards;
KV bytes per token derived by hand; `model list|show|import`; `--model` on stack and plan."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path

import pytest

from shardline.errors import InputError
from shardline.hardware.sources import unsourced_fields
from shardline.models import (
    kv_bytes_at,
    kv_bytes_per_token,
    list_models,
    load_model,
    model_from_dict,
    params_active,
    params_total,
)
from shardline.models.catalog import model_files
from tests.cli_run import run_cli

# Published totals and active counts, each from the model's card or paper (parameters).
# (total, active, where). A dense model's active count is its total.
CARDS: dict[str, tuple[float, float, str]] = {
    # Meta model cards (huggingface.co/meta-llama/*, "Model Information"); the Hub's safetensors
    # parameter counts 8.03B, 70.6B, 406B (Llama 3.1 paper, arXiv 2407.21783: "405B").
    "llama-3.1-8b": (8.03e9, 8.03e9, "huggingface.co/meta-llama/Llama-3.1-8B: 8.03B params"),
    "llama-3.1-70b": (70.6e9, 70.6e9, "huggingface.co/meta-llama/Llama-3.1-70B: 70.6B params"),
    "llama-3.1-405b": (405.9e9, 405.9e9, "huggingface.co/meta-llama/Llama-3.1-405B: 406B"),
    "llama-3.2-1b": (1.23e9, 1.23e9, "Llama 3.2 model card, Model Information table: 1.23B"),
    "llama-3.2-3b": (3.21e9, 3.21e9, "Llama 3.2 model card, Model Information table: 3.21B"),
    # Mistral AI, "Mixtral of Experts" (arXiv 2401.04088): 47B total, 13B active; the Mixtral
    # announcement (mistral.ai/news/mixtral-of-experts): 46.7B total, 12.9B per token.
    "mixtral-8x7b": (46.7e9, 12.9e9, "mistral.ai/news/mixtral-of-experts"),
    # mistral.ai/news/mixtral-8x22b: "39B active parameters out of 141B".
    "mixtral-8x22b": (141e9, 39e9, "mistral.ai/news/mixtral-8x22b"),
    # DeepSeek-V3 Technical Report (arXiv 2412.19437), abstract: 671B total, 37B activated
    # (the main model; the 14B multi-token-prediction module is not in the 671B).
    "deepseek-v3": (671e9, 37e9, "arXiv 2412.19437 abstract"),
    # Qwen3 model cards (huggingface.co/Qwen/Qwen3-30B-A3B, Qwen3-235B-A22B): "Number of
    # Parameters: 30.5B in total and 3.3B activated", "235B in total and 22B activated".
    "qwen3-30b-a3b": (30.5e9, 3.3e9, "huggingface.co/Qwen/Qwen3-30B-A3B"),
    "qwen3-235b-a22b": (235e9, 22e9, "huggingface.co/Qwen/Qwen3-235B-A22B"),
    # Gemma 3 Technical Report (arXiv 2503.19786) Table 1, 27B: vision encoder 417M, embedding
    # 1,416M, non-embedding 25,600M; the Hub lists 27.4B parameters for gemma-3-27b.
    "gemma-3-27b": (
        27.4e9,
        27.4e9,
        "arXiv 2503.19786 Table 1; huggingface.co/google/gemma-3-27b-pt",
    ),
    # Narayanan et al. 2021 (arXiv 2104.04473) Table 1: 529.6B (h 20480, 105 layers) and 1008.0B
    # (h 25600, 128 layers); Korthikanti et al. 2022 (arXiv 2205.05198) Table 5 names 22B, 175B.
    "gpt-22b": (22e9, 22e9, "arXiv 2205.05198 Table 5"),
    "gpt-175b": (175e9, 175e9, "arXiv 2205.05198 Table 5; GPT-3 (arXiv 2005.14165) Table 2.1"),
    "gpt-530b": (529.6e9, 529.6e9, "arXiv 2104.04473 Table 1"),
    "gpt-1t": (1008.0e9, 1008.0e9, "arXiv 2104.04473 Table 1"),
}

# OpenAI, "gpt-oss-120b & gpt-oss-20b Model Card" (2025), Table 1: total 116.83B and 20.91B;
# active per token 5.13B and 3.61B. The card's active figure counts the unembedding but not the
# embedding table (a lookup reads one row): our active count less vocab x d_model.
GPT_OSS_CARD = {"gpt-oss-120b": (116.83e9, 5.13e9), "gpt-oss-20b": (20.91e9, 3.61e9)}

# Cards that round the active count to two significant figures ("37B", "3.3B"): our count is
# within the card's rounding (half a unit of the last digit) plus 1%, not within 1% of the
# rounded figure. DeepSeek-V3 37.55B (36.63B without the embedding table); Qwen3-30B-A3B 3.353B
# (its non-embedding total, 29.91B, is the card's "Non-Embedding: 29.9B").
ROUNDED_ACTIVE = {"deepseek-v3": 0.5e9, "qwen3-30b-a3b": 0.05e9}


def test_every_catalog_file_is_sourced_and_loads() -> None:
    files = model_files()
    assert len(files) == 17
    for entry in files:
        data = tomllib.loads(entry.read_text("utf-8"))
        assert unsourced_fields(data) == [], entry.name
        assert model_from_dict(data, entry.name).name == entry.name.removesuffix(".toml")
    assert {m.name for m in list_models()} == set(CARDS) | set(GPT_OSS_CARD)


@pytest.mark.parametrize("name", sorted(CARDS))
def test_params_match_the_model_card(name: str) -> None:
    total, active, where = CARDS[name]
    spec = load_model(name)
    assert params_total(spec) == pytest.approx(total, rel=0.01), where
    slack = ROUNDED_ACTIVE.get(name, 0.0)
    assert abs(params_active(spec) - active) <= slack + 0.01 * active, where


@pytest.mark.parametrize("name", sorted(GPT_OSS_CARD))
def test_gpt_oss_counts_match_the_card(name: str) -> None:
    total, active = GPT_OSS_CARD[name]
    spec = load_model(name)
    assert params_total(spec) == pytest.approx(total, rel=0.01)
    # the file says its card leaves the embedding table out of the active count
    assert spec.active_counts_embedding is False
    assert params_active(spec) == pytest.approx(active, rel=0.01)


def test_llama_8b_count_by_hand() -> None:
    # d 4096, 32 layers, 32 heads of 128, 8 KV heads, d_ff 14336, vocab 128256, untied:
    # attention 4096 x (4096 + 2 x 1024) + 4096 x 4096 = 41,943,040; SwiGLU 3 x 4096 x 14336 =
    # 176,160,768; two RMSNorms 8,192; embedding + LM head 2 x 128256 x 4096; final norm 4096.
    per_layer = 4096 * (4096 + 2 * 1024) + 4096 * 4096 + 3 * 4096 * 14336 + 2 * 4096
    assert params_total(load_model("llama-3.1-8b")) == 32 * per_layer + 2 * 128256 * 4096 + 4096


def test_kv_bytes_per_token_by_hand() -> None:
    # Llama 3.1 70B, GQA: 80 layers x 2 (K and V) x 8 KV heads x 128 x 2 B (bf16) = 327,680 B.
    assert kv_bytes_per_token(load_model("llama-3.1-70b")) == 80 * 2 * 8 * 128 * 2 == 327_680
    # DeepSeek-V3, MLA: 61 layers x (kv_lora_rank 512 + rope 64) x 2 B = 70,272 B.
    assert kv_bytes_per_token(load_model("deepseek-v3")) == 61 * (512 + 64) * 2 == 70_272
    # fp8 cache: half.
    assert kv_bytes_per_token(load_model("deepseek-v3"), kv_bytes=1) == 35_136


def test_sliding_window_caps_the_cache() -> None:
    # gpt-oss-120b: 36 layers, 18 sliding (window 128) and 18 full; per layer 2 x 8 x 64 x 2 B =
    # 2,048 B a token. At 128k tokens: 18 x 2048 x 131072 + 18 x 2048 x 128.
    spec = load_model("gpt-oss-120b")
    assert kv_bytes_per_token(spec) == 36 * 2048
    assert kv_bytes_at(spec, 131072) == 18 * 2048 * 131072 + 18 * 2048 * 128
    assert kv_bytes_at(spec, 100) == 100 * kv_bytes_per_token(spec)  # within the window
    # Gemma 3 27B: 62 layers in groups of 6 (5 local, 1 global): 10 global, 52 local (window 1024).
    gemma = load_model("gemma-3-27b")
    per_layer = 2 * 16 * 128 * 2
    assert kv_bytes_at(gemma, 32768) == per_layer * (10 * 32768 + 52 * 1024)


def test_model_show_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "model", "show", "mixtral-8x7b", "--json")
    data = json.loads(out)
    assert code == 0
    assert data["params_total"] == params_total(load_model("mixtral-8x7b"))
    assert data["kv_bytes_per_token"] == 32 * 2 * 8 * 128 * 2
    assert data["moe"]["experts"] == 8 and "hidden_size" in data["sources"]["d_model"]
    code, out, _ = run_cli(capsys, "model", "list")
    assert code == 0 and "deepseek-v3" in out and "MLA" in out


def test_unknown_model_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, "model", "show", "llama-9")
    assert code == 2 and out == "" and err.startswith("error: unknown model")
    assert len(err.strip().splitlines()) == 1


def _llama_config() -> dict[str, object]:
    return {
        "model_type": "llama",
        "hidden_size": 4096,
        "num_hidden_layers": 32,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "intermediate_size": 14336,
        "vocab_size": 128256,
        "tie_word_embeddings": False,
        "rope_theta": 500000.0,  # unknown to the reader: ignored
    }


def test_import_round_trips_to_the_catalog_count(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(_llama_config()))
    out = tmp_path / "my-llama.toml"
    assert run_cli(capsys, "model", "import", str(config), "-o", str(out))[0] == 0
    spec = load_model(str(out))
    assert spec.name == "my-llama"
    assert params_total(spec) == params_total(load_model("llama-3.1-8b"))
    assert spec.sources["d_model"].startswith("config.json (")
    code, _, err = run_cli(capsys, "model", "import", str(config), "-o", str(out))
    assert code == 2 and "exists" in err  # no overwrite without --force
    code, _, err = run_cli(capsys, "model", "import", str(config), "-o", str(config))
    assert code == 2  # never the input


def test_import_missing_key_is_one_error(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    broken = _llama_config()
    del broken["hidden_size"]
    config = tmp_path / "config.json"
    config.write_text(json.dumps(broken))
    code, out, err = run_cli(capsys, "model", "import", str(config))
    assert code == 2 and out == "" and "hidden_size" in err
    assert len(err.strip().splitlines()) == 1


def test_import_deepseek_and_gpt_oss_configs(tmp_path: Path) -> None:
    from shardline.models.hf_import import model_toml_from_config

    deepseek = {
        "model_type": "deepseek_v3",
        "hidden_size": 7168,
        "num_hidden_layers": 61,
        "num_attention_heads": 128,
        "num_key_value_heads": 128,
        "intermediate_size": 18432,
        "moe_intermediate_size": 2048,
        "n_routed_experts": 256,
        "n_shared_experts": 1,
        "num_experts_per_tok": 8,
        "first_k_dense_replace": 3,
        "q_lora_rank": 1536,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 64,
        "qk_nope_head_dim": 128,
        "v_head_dim": 128,
        "vocab_size": 129280,
        "tie_word_embeddings": False,
        "topk_method": "noaux_tc",
    }
    spec = model_from_dict(tomllib.loads(model_toml_from_config(deepseek, "c.json", "ds")))
    assert params_total(spec) == params_total(load_model("deepseek-v3"))
    gpt_oss = {
        "model_type": "gpt_oss",
        "hidden_size": 2880,
        "num_hidden_layers": 36,
        "num_attention_heads": 64,
        "num_key_value_heads": 8,
        "head_dim": 64,
        "intermediate_size": 2880,
        "num_local_experts": 128,
        "num_experts_per_tok": 4,
        "vocab_size": 201088,
        "tie_word_embeddings": False,
        "attention_bias": True,
        "sliding_window": 128,
        "layer_types": ["sliding_attention", "full_attention"] * 18,
    }
    spec = model_from_dict(tomllib.loads(model_toml_from_config(gpt_oss, "c.json", "oss")))
    assert params_total(spec) == params_total(load_model("gpt-oss-120b"))
    assert params_active(spec) == params_active(load_model("gpt-oss-120b"))  # card's convention
    assert kv_bytes_at(spec, 4096) == kv_bytes_at(load_model("gpt-oss-120b"), 4096)
    # a layer_types list that is not one per layer, and dense layers between MoE layers, are
    # refused; a list of only full-attention layers imports with no window
    with pytest.raises(InputError, match="layer_types lists 2 layers"):
        model_toml_from_config(gpt_oss | {"layer_types": gpt_oss["layer_types"][:2]}, "c", "x")
    with pytest.raises(InputError, match="moe_layer_freq"):
        model_toml_from_config(deepseek | {"moe_layer_freq": 2}, "c.json", "ds")
    full = gpt_oss | {"layer_types": ["full_attention"] * 36}
    spec = model_from_dict(tomllib.loads(model_toml_from_config(full, "c.json", "oss")))
    assert spec.sliding_window is None
    assert kv_bytes_at(spec, 4096) == 36 * 2 * 8 * 64 * 2 * 4096


def test_plan_model_equals_the_template_file(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    template = tmp_path / "llama.toml"
    template.write_text(
        'name = "llama-3.1-8b"\nphase = "training"\n[transformer]\nd_model = 4096\n'
        "d_ff = 14336\nheads = 32\nkv_heads = 8\nhead_dim = 128\nlayers = 32\ngated = true\n"
        'vocab = 128256\nattention = "flash"\nrotary = true\nbatch = 8\nseq_len = 4096\n'
    )
    common = ["--hw", "h100", "--devices", "8", "--json"]
    code, by_model, _ = run_cli(
        capsys, "plan", "--model", "llama-3.1-8b", "--phase", "training", "--batch", "8",
        "--seq-len", "4096", *common,
    )  # fmt: skip
    assert code == 0
    code, by_file, _ = run_cli(capsys, "plan", str(template), *common)
    assert code == 0 and json.loads(by_model) == json.loads(by_file)


def test_stack_needs_a_workload(capsys: pytest.CaptureFixture[str]) -> None:
    # (deepseek-v3, with its dense first blocks, plans: tests/test_moe_dense_first.py)
    code, _, err = run_cli(capsys, "stack")
    assert code == 2 and "--model" in err


def test_bad_model_file_names_the_field(tmp_path: Path) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('name = "x"\nd_model = 10\nlayers = 2\nheads = 2\nkv_heads = 2\n')
    with pytest.raises(InputError, match="head_dim"):
        load_model(str(path))
    path.write_text('name = "x"\nwidth = 3\n')
    with pytest.raises(InputError, match="width"):
        load_model(str(path))


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("hidden_size", "4096", "whole numbers"),
        ("hidden_size", float("inf"), "whole number"),
        ("hidden_size", float("nan"), "whole number"),
        ("num_attention_heads", 0, "whole numbers"),
        ("model_type", "bert", "not read"),
    ],
)
def test_import_rejects_bad_values(key: str, value: object, message: str) -> None:
    from shardline.models.hf_import import model_toml_from_config

    config = _llama_config() | {key: value}
    with pytest.raises(InputError, match=message):
        model_toml_from_config(config, "config.json", "x")
