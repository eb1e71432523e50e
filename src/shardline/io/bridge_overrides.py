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
Python and are not read: the layout keys (tensor, pipeline and context parallel, micro and global
batch, sequence) must be in the set, and what it leaves out of the rest is Megatron-Core's
default, said in one line.
"""

from __future__ import annotations

import re
import shlex

from shardline.errors import InputError
from shardline.io.framework_config import Imported, named_model
from shardline.io.megatron_args import read_megatron_flags

__all__ = ["read_bridge", "looks_like_bridge"]

# Megatron-Bridge name -> Megatron-LM flag, where they differ (the mapping guide above)
RENAMED = {
    "num_moe_experts": "num-experts",
    "gated_linear_unit": "swiglu",
    "virtual_pipeline_model_parallel_size": "num-virtual-stages-per-pipeline-rank",
    "seq_length": "seq-length",
    "add_bias_linear": "disable-bias-linear",  # inverted below
    "share_embeddings_and_output_weights": "untie-embeddings-and-output-weights",  # inverted
    "fp8": "fp8-format",
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
        for old, new in ALIASES:
            if key.startswith(old):
                key = new + key[len(old) :]
        out[key] = value
    if recipe is not None:
        recipe = recipe.removesuffix("_pretrain_config")
    return out, recipe


def _true(value: str) -> bool:
    return value.strip().lower() in ("true", "1", "yes")


def _precision(value: str) -> dict[str, str | bool]:
    name = value.strip().lower()
    if "fp8" in name:
        return {"bf16": True, "fp8-format": "hybrid"}
    if "bf16" in name:
        return {"bf16": True}
    if "fp16" in name:
        return {"fp16": True}
    return {}


def _flag(key: str, value: str) -> dict[str, str | bool] | None:
    """One override as Megatron-LM flags; None when it is not one the reader takes."""
    if key == "mixed_precision":
        return _precision(value)
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


def read_bridge(text: str, origin: str, devices: int) -> Imported:
    """The plan of one Megatron-Bridge / NeMo 2 override set over `devices` GPUs."""
    overrides, recipe = _overrides(text, origin)
    spec = None
    if recipe is not None:
        spec, _source = named_model(("megatron_bridge",), recipe, origin, "recipe")
        shape = [f"model.{k}" for k in SHAPE if f"model.{k}" in overrides]
        if shape:
            raise InputError(
                f"{origin}: recipe {recipe} with its shape overridden ({', '.join(shape)}) is "
                "not read; give the recipe or the shape"
            )
    missing = [k for k in REQUIRED if k not in overrides]
    if missing:
        raise InputError(
            f"{origin}: the override set does not give {', '.join(missing)} (a recipe's own "
            "defaults are Python and are not read)"
        )
    flags: dict[str, str | bool] = {}
    origin_of: dict[str, str] = {}
    unknown: list[str] = []
    for key, value in overrides.items():
        got = _flag(key, value)
        if got is None:
            if not key.startswith(IGNORED_GROUPS):
                unknown.append(key)
            continue
        for flag in got:
            origin_of[flag] = key
        flags.update(got)
    left_out = [k for k in RECIPE_SET if k not in overrides and not _optimizer_given(k, overrides)]
    notes = (
        [f"{', '.join(left_out)}: the recipe's own values are not read; Megatron-Core's defaults"]
        if left_out
        else []
    )
    imported = read_megatron_flags(flags, origin, devices, spec=spec, notes=notes)
    unknown += [origin_of.get(f.removeprefix("--"), f) for f in imported.unknown]
    read = tuple(dict.fromkeys(origin_of.get(f.removeprefix("--"), f) for f in imported.read))
    from dataclasses import replace

    return replace(imported, format="megatron-bridge", unknown=tuple(unknown), read=read)
