"""A Hugging Face `config.json` (already parsed) turned into the text of a model file, each number
sourced to the config key it came from. Offline: nothing is fetched. Keys this reader does not
use are ignored; a required key that is missing is one InputError naming it.

Read `model_type`s: llama, mistral, mixtral, qwen2, qwen3, qwen3_moe, deepseek_v3, gpt_oss, gemma3
(its `text_config`) and gemma3_text.
"""

from __future__ import annotations

import json
from typing import Any

from shardline.basics.units import short
from shardline.errors import InputError
from shardline.models.catalog import model_from_dict
from shardline.workload.attention import variant_keys

__all__ = ["model_toml_from_config", "MODEL_TYPES"]

MODEL_TYPES = (
    "llama",
    "mistral",
    "mixtral",
    "qwen2",
    "qwen3",
    "qwen3_moe",
    "deepseek_v3",
    "gpt_oss",
    "gemma3",
    "gemma3_text",
)
# tie_word_embeddings when a config leaves it out: the default of each transformers config class
_TIED_DEFAULT = {"gemma3": True, "gemma3_text": True}


class _Config:
    """Values of one config.json with the key each came from, as `{value, source}` tables."""

    def __init__(self, data: dict[str, object], origin: str, model_type: str) -> None:
        self.data = data
        self.origin = origin
        self.model_type = model_type
        self.prefix = "text_config." if model_type == "gemma3" else ""

    def source(self, key: str) -> str:
        return f"config.json ({self.origin}): {self.prefix}{key}"

    def get(self, key: str, default: object = None) -> object:
        value = self.data.get(key)
        return default if value is None else value

    def need(self, key: str) -> Any:
        value = self.data.get(key)
        if value is None:
            raise InputError(
                f"{self.origin}: config.json of model_type {self.model_type!r} has no "
                f"{self.prefix}{key!r}"
            )
        return value

    def whole(self, key: str) -> int:
        """A required count (a head dimension, a layer pattern): a positive JSON integer, not a
        string, list, float, NaN or boolean that Python arithmetic would take or reject with
        a TypeError."""
        value = self.need(key)
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(
                f"{self.origin}: {self.prefix}{key} must be a positive whole number, got "
                f"{short(value)}"
            )
        return value

    def field(self, key: str, value: object = None, note: str = "") -> dict[str, object]:
        value = self.need(key) if value is None else value
        return {"value": value, "source": self.source(key) + (f" ({note})" if note else "")}


def _base(c: _Config) -> dict[str, object]:
    heads = c.need("num_attention_heads")
    d_model = c.need("hidden_size")
    kv_heads = c.get("num_key_value_heads", heads)
    head_dim = c.get("head_dim")
    if head_dim is None:
        whole = all(isinstance(v, int) and not isinstance(v, bool) for v in (d_model, heads))
        if not whole or heads < 1:
            raise InputError(
                f"{c.origin}: {c.prefix}hidden_size and num_attention_heads must be positive whole "
                f"numbers, got {d_model!r} and {heads!r}"
            )
        head_dim = d_model // heads
    tied = c.get("tie_word_embeddings", _TIED_DEFAULT.get(c.model_type, False))
    return {
        "d_model": c.field("hidden_size"),
        "layers": c.field("num_hidden_layers"),
        "heads": c.field("num_attention_heads"),
        "kv_heads": c.field("num_key_value_heads", kv_heads),
        "head_dim": c.field(
            "head_dim", head_dim, "" if c.get("head_dim") else "hidden_size / heads"
        ),
        "d_ff": c.field("intermediate_size"),
        "gated": c.field("hidden_act", True, "a gated feed-forward (gate, up, down)"),
        "vocab": c.field("vocab_size"),
        "tied_embeddings": c.field("tie_word_embeddings", tied),
    }


def _layer_pattern(c: _Config) -> int:
    """local_per_global from `layer_types` (k sliding layers, then one full, repeated) or from
    `sliding_window_pattern` (a group of that many layers, the last one global)."""
    types = c.get("layer_types")
    if types is None:
        return c.whole("sliding_window_pattern") - 1
    if not isinstance(types, list) or "full_attention" not in types:
        raise InputError(f"{c.origin}: layer_types names no full_attention layer")
    layers = c.get("num_hidden_layers")
    if isinstance(layers, int) and not isinstance(layers, bool) and len(types) != layers:
        raise InputError(
            f"{c.origin}: layer_types lists {len(types)} layers but num_hidden_layers is {layers}"
        )
    k = types.index("full_attention")
    for i, kind in enumerate(types):
        if kind != ("full_attention" if (i + 1) % (k + 1) == 0 else "sliding_attention"):
            raise InputError(
                f"{c.origin}: layer_types is not {k} sliding layers then one full, repeated; "
                "the model file format describes only that pattern"
            )
    return k


def _sliding(c: _Config, model: dict[str, object]) -> None:
    if c.get("sliding_window") is None:
        return
    if c.model_type in ("mistral", "mixtral", "qwen2", "qwen3", "qwen3_moe"):
        if c.model_type.startswith("qwen") and not c.get("use_sliding_window", False):
            return  # Qwen configs carry a window that is off unless use_sliding_window is true
        raise InputError(
            f"{c.origin}: a sliding window on every layer (sliding_window = "
            f"{c.get('sliding_window')}) is not described by the model file format"
        )
    key = "layer_types" if c.get("layer_types") is not None else "sliding_window_pattern"
    local = _layer_pattern(c)
    if local == 0:
        return  # every layer attends to the whole context: the window is unused
    model["sliding_window"] = {
        "window": c.field("sliding_window"),
        "local_per_global": c.field(key, local, "sliding layers per global layer"),
    }


def _deepseek(c: _Config, model: dict[str, object]) -> None:
    if c.get("moe_layer_freq", 1) != 1:
        raise InputError(
            f"{c.origin}: moe_layer_freq = {c.get('moe_layer_freq')!r} puts dense layers between "
            "MoE layers, which the model file format does not describe (only dense first layers)"
        )
    nope, rope = c.whole("qk_nope_head_dim"), c.whole("qk_rope_head_dim")
    model["head_dim"] = c.field("qk_nope_head_dim", nope + rope, "qk_nope + qk_rope head dims")
    model["mla"] = {
        "q_lora_rank": c.field("q_lora_rank", c.get("q_lora_rank", 0)),
        "kv_lora_rank": c.field("kv_lora_rank"),
        "qk_rope_head_dim": c.field("qk_rope_head_dim"),
        "qk_nope_head_dim": c.field("qk_nope_head_dim"),
        "v_head_dim": c.field("v_head_dim"),
    }
    model["moe"] = {
        "experts": c.field("n_routed_experts"),
        "experts_per_token": c.field("num_experts_per_tok"),
        "expert_d_ff": c.field("moe_intermediate_size"),
        "shared_experts": c.field("n_shared_experts", c.get("n_shared_experts", 0)),
        "dense_layers_first": c.field("first_k_dense_replace", c.get("first_k_dense_replace", 0)),
        "router_bias": c.field("topk_method", c.get("topk_method") == "noaux_tc"),
    }


def _moe(c: _Config, model: dict[str, Any]) -> None:
    t = c.model_type
    if t == "mixtral":
        experts, ff = c.field("num_local_experts"), c.field("intermediate_size")
    elif t == "qwen3_moe":
        if c.get("decoder_sparse_step", 1) != 1 or c.get("mlp_only_layers", []):
            raise InputError(f"{c.origin}: dense layers between MoE layers are not described")
        experts, ff = c.field("num_experts"), c.field("moe_intermediate_size")
    else:  # gpt_oss
        experts, ff = c.field("num_local_experts"), c.field("intermediate_size")
    model["moe"] = {
        "experts": experts,
        "experts_per_token": c.field("num_experts_per_tok"),
        "expert_d_ff": ff,
    }
    if t == "gpt_oss":
        model["moe"]["router_bias"] = c.field("model_type", True, "the router has a bias")


def _flags(c: _Config, model: dict[str, object]) -> None:
    t = c.model_type
    if t == "qwen2":
        model["attention_bias"] = "qkv"
    elif c.get("attention_bias", False):
        model["attention_bias"] = "all"
    if c.get("mlp_bias", False) or t == "gpt_oss":
        model["mlp_bias"] = c.field("mlp_bias" if t != "gpt_oss" else "model_type", True)
    if t in ("qwen3", "qwen3_moe", "gemma3", "gemma3_text"):
        model["qk_norm"] = c.field("model_type", True, "q_norm and k_norm on each head")
    if t in ("gemma3", "gemma3_text"):
        model["norms_per_layer"] = c.field("model_type", 4, "four RMSNorms per block")
    if t == "gpt_oss":
        model["attention_sinks"] = c.field("model_type", True, "a learned sink per head")
        model["active_counts_embedding"] = c.field(
            "model_type", False, "gpt-oss's model card counts the unembedding, not the embedding"
        )


def model_from_config(config: dict[str, object], origin: str, name: str) -> dict[str, Any]:
    """The model-file table (`{value, source}` numbers) of a parsed config.json."""
    if not isinstance(config, dict):
        raise InputError(f"{origin}: a config.json is a JSON object")
    model_type = config.get("model_type")
    if model_type not in MODEL_TYPES:
        raise InputError(
            f"{origin}: model_type {model_type!r} is not read; known: {', '.join(MODEL_TYPES)}"
        )
    data: Any = config
    if model_type == "gemma3":
        data = config.get("text_config")
        if not isinstance(data, dict):
            raise InputError(f"{origin}: a gemma3 config.json needs a text_config object")
    c = _Config(data, origin, model_type)
    model: dict[str, object] = {"schema": 1, "name": name, "attention": "flash"}
    model["description"] = f"Imported from {origin} (model_type {model_type})."
    model |= _base(c)
    _flags(c, model)
    if model_type == "deepseek_v3":
        _deepseek(c, model)
    elif model_type in ("mixtral", "qwen3_moe", "gpt_oss"):
        _moe(c, model)
    _sliding(c, model)
    return model


def _toml_value(value: object) -> str:
    if isinstance(value, dict):
        inner = ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items())
        return "{ " + inner + " }"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(str(value))  # a JSON string is a valid TOML basic string


def model_toml_from_config(config: dict[str, object], origin: str, name: str) -> str:
    """The text of a model file for a parsed config.json, checked by the model loader."""
    model = model_from_config(config, origin, name)
    model_from_dict(model, origin)  # a config with impossible numbers fails here, not later
    lines, tables = [], []
    for key, value in model.items():
        if key in ("moe", *variant_keys()):  # the tables: [moe] and an attention variant's
            tables.append(
                f"\n[{key}]\n" + "".join(f"{k} = {_toml_value(v)}\n" for k, v in value.items())
            )
        else:
            lines.append(f"{key} = {_toml_value(value)}\n")
    return "".join(lines) + "".join(tables)
