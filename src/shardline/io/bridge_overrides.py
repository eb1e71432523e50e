"""A Megatron-Bridge (or NeMo 2) recipe override set: `key=value` overrides of the recipe's
ConfigContainer (`model.tensor_model_parallel_size=2 train.global_batch_size=128 ...`, one or many
lines, or the `python .../pretrain_llama3_8b.py key=value ...` command that holds them), read
into the plan it describes.

The keys are Megatron-Core's own names for Megatron-LM's flags (NVIDIA-NeMo/Megatron-Bridge
docs/megatron-lm-to-megatron-bridge.md), so each is turned into its flag and read by
shardline.io.megatron_args: `model.X` is `--X` (underscores as dashes) but for the renamed ones
in RENAMED; `train.micro_batch_size` and `train.global_batch_size`; `ddp.*` and
`optimizer.use_distributed_optimizer`; `mixed_precision` (a preset name: bf16_mixed, fp16_mixed,
an fp8 preset); `comm_overlap.tp_comm_overlap`. NeMo 2's names are read as their Megatron-Bridge
equivalents (`trainer.strategy.X` and `model.config.X` as `model.X`, `data.micro_batch_size`,
`data.global_batch_size`, `data.seq_length`).

The model: the recipe's name (the script's `pretrain_NAME.py`, `--factory NAME` or `recipe=NAME`,
framework_models.toml) or the override set's own `model.*` shape. The recipe's other defaults are
Python and are not read here: the layout keys (tensor, pipeline and context parallel, micro and
global batch, sequence) must be in the set, and what it leaves out of the rest is Megatron-Core's
default, said in one line. A recipe's Python file is read by shardline.io.bridge_recipe (a
performance script's layout preset by shardline.io.bridge_presets) into the same settings
(`read_bridge_recipe`), with override sets on top.

Settings that are not Megatron-LM flags (CUDA-graph scopes, HybridEP's SMs, fp8 attention, the
kernel fusions, ...) are in bridge_keys.toml: passed over, or read and said not modelled.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import replace
from typing import Any

from shardline.errors import InputError
from shardline.io.bridge_presets import bridge_keys, preset_settings
from shardline.io.bridge_recipe import RecipeSettings, parse_module, read_recipe_settings
from shardline.io.framework_config import Imported, named_model
from shardline.io.megatron_args import read_megatron_flags
from shardline.io.nemo_recipe import read_nemo2_settings

__all__ = [
    "read_bridge",
    "read_bridge_recipe",
    "read_nemo2_recipe",
    "looks_like_bridge",
    "parse_overrides",
]

# Megatron-Bridge name -> Megatron-LM flag, where they differ (the mapping guide above)
RENAMED = {
    "num_moe_experts": "num-experts",
    "gated_linear_unit": "swiglu",
    "virtual_pipeline_model_parallel_size": "num-virtual-stages-per-pipeline-rank",
    "seq_length": "seq-length",
    "add_bias_linear": "disable-bias-linear",  # inverted below
    "share_embeddings_and_output_weights": "untie-embeddings-and-output-weights",  # inverted
    "fp8": "fp8-format",
    "moe_a2a_overlap": "overlap-moe-expert-parallel-comm",  # the older name of the EP overlap
}
INVERTED = {"add_bias_linear", "share_embeddings_and_output_weights"}
ALIASES = (  # NeMo 2 -> Megatron-Bridge
    ("trainer.strategy.", "model."),
    ("model.config.", "model."),
    ("data.micro_batch_size", "train.micro_batch_size"),
    ("data.global_batch_size", "train.global_batch_size"),
    ("data.seq_length", "model.seq_length"),
    ("dataset.sequence_length", "model.seq_length"),
)
REQUIRED = (
    "model.tensor_model_parallel_size",
    "model.pipeline_model_parallel_size",
    "model.context_parallel_size",
    "train.micro_batch_size",
    "train.global_batch_size",
    "model.seq_length",
)
SHAPE = (
    "num_layers",
    "hidden_size",
    "num_attention_heads",
    "ffn_hidden_size",
    "num_query_groups",
    "kv_channels",
    "vocab_size",
    "num_moe_experts",
    "moe_ffn_hidden_size",
)
# what recipes commonly set that changes the step time: named when the set leaves it out
RECIPE_SET = (
    "model.sequence_parallel",
    "model.recompute_granularity",
    "ddp.use_distributed_optimizer",
    "comm_overlap.tp_comm_overlap",
    "mixed_precision",
)


def _optimizer_given(key: str, overrides: dict[str, str]) -> bool:
    """The distributed optimizer may be set on the optimizer group instead of ddp."""
    return key == "ddp.use_distributed_optimizer" and "optimizer.use_distributed_optimizer" in (
        overrides
    )


# groups that do not change the step time
IGNORED_GROUPS = (
    "checkpoint.",
    "logger.",
    "scheduler.",
    "rng.",
    "dist.",
    "profiling.",
    "tokenizer.",
    "dataset.",
    "data.",
    "peft.",
    "inprocess_restart.",
    "ft.",
    "straggler.",
    "nvrx_straggler.",
    "log.",
    "trainer.",
)
_KEY = re.compile(r"^\+?([a-z_][a-z0-9_]*(?:\.[a-z_][a-z0-9_]*)*)=(.*)$")


def looks_like_bridge(text: str) -> bool:
    """Whether a text holds dotted `group.key=value` overrides of a recipe."""
    return bool(re.search(r"(^|\s)\+?(model|train|trainer\.strategy|data)\.[a-z_]+=", text))


def _overrides(text: str, origin: str) -> tuple[dict[str, str], str | None]:
    """The `key=value` words (aliases applied) and the recipe's name where the text gives it."""
    try:
        words = shlex.split(text.replace("\\\n", " "), comments=True)
    except ValueError as exc:
        raise InputError(f"{origin}: cannot split the overrides into words ({exc})") from None
    out: dict[str, str] = {}
    recipe = None
    for i, word in enumerate(words):
        script = re.search(r"pretrain_([a-z0-9_]+)\.py$", word)
        if script:
            recipe = script.group(1)
        if word == "--factory" and i + 1 < len(words):
            recipe = words[i + 1]
        m = _KEY.match(word)
        if m is None:
            continue
        key, value = m.group(1), m.group(2)
        if key in ("recipe", "factory"):
            recipe = value
            continue
        out[_alias(key)] = value
    if recipe is not None:
        recipe = recipe.removesuffix("_pretrain_config")
    return out, recipe


def _alias(key: str) -> str:
    """NeMo 2's name of a setting as Megatron-Bridge's."""
    for old, new in ALIASES:
        if key.startswith(old):
            return new + key[len(old) :]
    return key


def parse_overrides(words: tuple[str, ...] | list[str], what: str) -> dict[str, str]:
    """`KEY=VALUE` words (`--set` on the command line) as overrides."""
    out: dict[str, str] = {}
    for word in words:
        m = _KEY.match(word.strip())
        if m is None:
            raise InputError(f"{what}: {word!r} is not a KEY=VALUE override (model.X=V, ...)")
        out[_alias(m.group(1))] = m.group(2)
    return out


def _true(value: str) -> bool:
    return value.strip().lower() in ("true", "1", "yes")


# The fp8 recipe of each of Megatron-Bridge's fp8 presets, as Megatron-LM's --fp8-recipe
# (NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/training/mixed_precision.py, commit 067f987d:
# each preset's cfg.fp8_recipe; MixedPrecisionConfig's own default is "tensorwise")
FP8_PRESET_RECIPES = {
    "bf16_with_fp8_delayed_scaling_mixed": "delayed",
    "fp16_with_fp8_delayed_scaling_mixed": "delayed",
    "bf16_with_mxfp8_mixed": "mxfp8",
    "fp16_with_mxfp8_mixed": "mxfp8",
    "bf16_with_fp8_current_scaling_mixed": "tensorwise",
    "fp16_with_fp8_current_scaling_mixed": "tensorwise",
    "nemotron_h_bf16_with_fp8_current_scaling_mixed": "tensorwise",
    "nanov2_bf16_with_fp8_current_scaling_mixed": "blockwise",
    "bf16_with_fp8_subchannel_scaling_mixed": "blockwise",
    "fp16_with_fp8_subchannel_scaling_mixed": "blockwise",
}


def _fp8_recipe(name: str) -> str:
    """The --fp8-recipe of an fp8 preset (MixedPrecisionConfig's default for one not listed)."""
    return FP8_PRESET_RECIPES.get(name.removesuffix("()"), "tensorwise")


def _precision(value: str) -> dict[str, str | bool]:
    name = value.strip().lower()
    if "fp4" in name:
        raise InputError(
            f"mixed_precision {value}: 4-bit training presets are not read yet (not priced as "
            "bf16 or fp8 in their place)"
        )
    if "fp8" in name:
        return {"bf16": True, "fp8-format": "hybrid", "fp8-recipe": _fp8_recipe(name)}
    if "bf16" in name:
        return {"bf16": True}
    if "fp16" in name:
        return {"fp16": True}
    return {}


def _flag(key: str, value: str) -> dict[str, str | bool] | None:
    """One override as Megatron-LM flags; None when it is not one the reader takes."""
    if key == "mixed_precision":
        return _precision(value)
    if key == "mixed_precision.fp8_recipe":
        return {"fp8-recipe": value.strip().strip("'\"")}
    group, _, name = key.partition(".")
    if group in ("train", "ddp", "optimizer", "comm_overlap"):
        name = {"optimizer": "optimizer"}.get(name, name)
        if group == "ddp" and name == "grad_reduce_in_fp32":
            name = "accumulate_allreduce_grads_in_fp32"
    elif group != "model":
        return None
    if group == "model" and name == "num_query_groups":
        return {"group-query-attention": True, "num-query-groups": value}
    flag = RENAMED.get(name, name.replace("_", "-"))
    lowered = value.strip().lower()
    if lowered in ("true", "false"):
        on = _true(value) != (name in INVERTED)
        return {flag: True} if on else {}
    if lowered in ("none", "null") or value == "":
        return {}
    return {flag: value.strip().strip("'\"")}


def read_bridge(
    text: str, origin: str, devices: int, on_top: dict[str, str] | None = None
) -> Imported:
    """The plan of one Megatron-Bridge / NeMo 2 override set over `devices` GPUs (`on_top`:
    overrides given on the command line, applied last)."""
    overrides, recipe = _overrides(text, origin)
    overrides |= on_top or {}
    spec = None
    if recipe is not None:
        spec = _named(overrides, origin, "megatron_bridge", recipe, "recipe")
    _need_layout(
        overrides,
        f"{origin}: the override set does not give",
        " (a recipe's own defaults are Python and are not read)",
    )
    left_out = [k for k in RECIPE_SET if k not in overrides and not _optimizer_given(k, overrides)]
    notes = (
        [f"{', '.join(left_out)}: the recipe's own values are not read; Megatron-Core's defaults"]
        if left_out
        else []
    )
    return _settings_plan(overrides, origin, devices, spec, notes)


def read_bridge_recipe(
    text: str,
    origin: str,
    devices: int,
    function: str | None = None,
    on_top: dict[str, str] | None = None,
) -> Imported:
    """The plan of one Megatron-Bridge recipe function of a Python file (read, not run:
    shardline.io.bridge_recipe) with `on_top` overrides applied last."""
    module = parse_module(text, origin)
    if function is not None and module.function(function) is None and function in module.presets:
        got = preset_settings(module, function, origin)
    else:
        got = read_recipe_settings(module, origin, function)
    model = None
    if got.hf_model is not None:
        model = ("huggingface", got.hf_model, "model")
    elif got.recipe is not None:
        model = ("megatron_bridge", got.recipe, "recipe")
    return _recipe_plan(got, origin, devices, on_top, model, "megatron-bridge-recipe")


def read_nemo2_recipe(
    text: str,
    origin: str,
    devices: int,
    function: str | None = None,
    on_top: dict[str, str] | None = None,
) -> Imported:
    """The plan of one NeMo 2.0 recipe function (read, not run: shardline.io.nemo_recipe) with
    `on_top` overrides applied last; its settings are Megatron-Bridge's keys."""
    got = read_nemo2_settings(parse_module(text, origin), origin, function)
    model = None if got.recipe is None else ("nemo2", got.recipe, "model config")
    return _recipe_plan(got, origin, devices, on_top, model, "nemo2-recipe")


def _recipe_plan(
    got: RecipeSettings,
    origin: str,
    devices: int,
    on_top: dict[str, str] | None,
    model: tuple[str, str, str] | None,
    fmt: str,
) -> Imported:
    """The plan of a recipe's settings with `on_top` applied last; `model` (the
    framework_models.toml table, the name, what it is) the zoo model the recipe names."""
    overrides = got.overrides | (on_top or {})
    if got.gpus is not None and got.gpus != devices:
        got.notes.append(f"{got.function}: {got.gpus} GPUs; priced on --devices {devices}")
    spec = None if model is None else _named(overrides, origin, *model)
    _need_layout(
        overrides,
        f"{origin}: recipe {got.function} does not set",
        " in this file; give each with --set KEY=VALUE",
    )
    return replace(
        _settings_plan(overrides, origin, devices, spec, []),
        format=fmt,
        not_read=tuple(got.notes),
    )


def _named(overrides: dict[str, str], origin: str, table: str, key: str, what: str) -> Any:
    """The zoo model a recipe's name or a Hugging Face id stands for (framework_models.toml),
    with the settings' own shape refused beside it."""
    spec, _source = named_model((table,), key, origin, what)
    _no_shape(overrides, origin, f"{what} {key}")
    return spec


def _need_layout(overrides: dict[str, str], says: str, hint: str) -> None:
    """One error naming the layout keys the plan needs (REQUIRED) that the settings leave out."""
    missing = [k for k in REQUIRED if k not in overrides]
    if missing:
        raise InputError(f"{says} {', '.join(missing)}{hint}")


def _no_shape(overrides: dict[str, str], origin: str, what: str) -> None:
    shape = [f"model.{k}" for k in SHAPE if f"model.{k}" in overrides]
    if shape:
        raise InputError(
            f"{origin}: {what} with its shape overridden ({', '.join(shape)}) is not read; "
            "give the recipe or the shape"
        )


def _off(value: str) -> bool:
    return value.strip().lower() in ("false", "none", "null", "", "0", "[]")


def _graphs(overrides: dict[str, str], notes: list[str]) -> dict[str, str | bool]:
    """model.cuda_graph_impl and cuda_graph_scope as the plan's CUDA graphs: the whole step
    (full_iteration) or whole layers (an impl with the scope `full` or none) replay every
    kernel; a scope of named modules (attn, moe_router, moe_preprocess) graphs only those,
    priced without CUDA graphs (said)."""
    impl = overrides.pop("model.cuda_graph_impl", "none").strip().strip("'\"")
    scope = overrides.pop("model.cuda_graph_scope", "").replace(",", " ").split()
    if impl == "full_iteration" or "full_iteration" in scope:
        return {"cuda-graph-impl": "full_iteration"}
    if impl in ("none", ""):
        return {}
    if not scope or scope == ["full"]:
        return {"cuda-graph-impl": impl}
    notes.append(
        f"model.cuda_graph_impl {impl} with model.cuda_graph_scope {' '.join(scope)}: CUDA "
        "graphs around those modules only; priced without CUDA graphs (the plan's CUDA graphs "
        "replay whole layers or the step)"
    )
    return {}


def _sorted_out(
    overrides: dict[str, str], notes: list[str]
) -> tuple[dict[str, str], list[str], dict[str, Any]]:
    """Take out the settings of bridge_keys.toml (passed over, or one line per reason where
    on) and the ones read apart (fp8 attention, HybridEP's and DeepEP's SMs); the rest go on
    to the Megatron-LM flags."""
    table = bridge_keys()
    rest: dict[str, str] = {}
    read: list[str] = []
    apart: dict[str, Any] = {}
    reasons: dict[str, list[str]] = {}
    for key, value in overrides.items():
        if key in table["passed_over"]:
            read.append(key)
        elif key in table["not_modelled"]:
            read.append(key)
            own = table["plan_values"].get(key)
            if (value.strip().lower() != own) if own is not None else not _off(value):
                reasons.setdefault(table["not_modelled"][key], []).append(key)
        elif key == "mixed_precision.fp8_dot_product_attention":
            read.append(key)
            if _true(value):
                apart["attention_dtype"] = "fp8"
        elif key == "mixed_precision.grad_reduce_in_fp32":
            rest["ddp.grad_reduce_in_fp32"] = value
        elif key in ("model.moe_hybridep_num_sms", "model.moe_deepep_num_sms"):
            read.append(key)
            apart[key] = int(value)
        else:
            rest[key] = value
    notes += [f"{', '.join(keys)}: {why}" for why, keys in reasons.items()]
    return rest, read, apart


def _bridge_name(note: str, origin_of: dict[str, str]) -> str:
    """A line of the Megatron-LM reader about `--flag: ...` with the setting's own name."""
    m = re.match(r"--([a-z0-9-]+)(.*)$", note, re.S)
    if m is None or m.group(1) not in origin_of:
        return note
    return origin_of[m.group(1)] + m.group(2)


def _settings_plan(
    overrides: dict[str, str],
    origin: str,
    devices: int,
    spec: Any,
    notes: list[str],
) -> Imported:
    """The plan of a set of Megatron-Bridge settings: each as its Megatron-LM flag where it
    is one (shardline.io.megatron_args), the rest as bridge_keys.toml says."""
    overrides = dict(overrides)
    graphs = _graphs(overrides, notes)
    rest, read_apart, apart = _sorted_out(overrides, notes)
    flags: dict[str, str | bool] = dict(graphs)
    origin_of: dict[str, str] = {f: "model.cuda_graph_impl" for f in graphs}
    unknown: list[str] = []
    for key, value in rest.items():
        got = _flag(key, value)
        if got is None:
            if not key.startswith(IGNORED_GROUPS):
                unknown.append(key)
            continue
        for flag in got:
            origin_of[flag] = key
        flags.update(got)
    imported = read_megatron_flags(flags, origin, devices, spec=spec, notes=notes)
    unknown += [origin_of.get(f.removeprefix("--"), f) for f in imported.unknown]
    read = tuple(
        dict.fromkeys([origin_of.get(f.removeprefix("--"), f) for f in imported.read] + read_apart)
    )
    said = tuple(_bridge_name(n, origin_of) for n in imported.not_modelled)
    execution = dict(imported.execution)
    if "recompute" not in execution and _off(overrides.get("model.recompute_granularity", "x")):
        execution["recompute"] = "none"  # set to None: no recompute, as the recipe says
    sms = {"hybridep": "model.moe_hybridep_num_sms", "hierarchical": "model.moe_deepep_num_sms"}
    sms_key = sms.get(str(execution.get("ep_dispatch")))
    if sms_key in apart:
        execution["ep_comm_sms"] = apart[sms_key]
    return replace(
        imported,
        format="megatron-bridge",
        unknown=tuple(unknown),
        read=read,
        not_modelled=said,
        execution=execution,
        attention_dtype=apart.get("attention_dtype"),
    )
