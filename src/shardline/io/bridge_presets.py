"""The layout presets of Megatron-Bridge's performance scripts, read without running them
(scripts/performance/configs/FAMILY/*_workload_base_configs.py: `NAME = WorkloadBaseConfig(k=v,
...)` or `NAME = replace(BASE, k=v, ...)`), as the settings the scripts make of one
(set_workload_base_configs, written as rules in bridge_keys.toml); and bridge_keys.toml itself.

Pure: text in, values out.
"""

from __future__ import annotations

import ast
import re
from functools import cache
from typing import Any

from shardline.errors import InputError
from shardline.io.bridge_recipe import (
    MAX_DEPTH,
    NOT_LITERAL,
    PERF_PRECISION,
    Module,
    RecipeSettings,
    override_text,
)

__all__ = ["preset_settings", "bridge_keys"]

# NAME = {MODEL}_{SIZE}_{TASK}_CONFIG_{GPU}_{PRECISION}_{VERSION} (the files' own docstring,
# commit 00919dcf on); before the versions (commit 5776a6d9, the 25.11 summary's) the suffix is
# _BASE_CONFIG in place of the version, and in the 0.2 releases' configs/FAMILY/
# workload_base_configs.py the task is left out: {MODEL}_{SIZE}_{GPU}_{PRECISION}_BASE_CONFIG
_PRESET_NAME = re.compile(
    r"^(?P<model>.+?)_(?P<task>PRETRAIN|SFT|PEFT|FINETUNE)_CONFIG_(?P<gpu>[A-Z0-9]+)_"
    r"(?P<precision>.+)_(?:V\d+|BASE_CONFIG)$"
)
# the GPUs the scripts' presets are named for (argument_parser.py --gpu choices at 5776a6d9: h100,
# b200, gb200, gb300; later files also b300, r100, vr200)
_GPUS = "GB300|GB200|B300|B200|H100|R100|VR200"
_RELEASE_NAME = re.compile(
    rf"^(?P<model>.+?)_(?P<gpu>{_GPUS})_(?P<precision>BF16|FP8_CS|FP8_DS|FP8_MX|NVFP4)_BASE_CONFIG$"
)


def _preset_fields(
    module: Module, name: str, origin: str, notes: list[str], depth: int = 0
) -> dict[str, Any]:
    """A preset's WorkloadBaseConfig fields it states (a replace() of a base: the base's, then
    its own)."""
    if depth > MAX_DEPTH:
        raise InputError(f"{origin}: preset {name!r} builds on presets deeper than {MAX_DEPTH}")
    if name not in module.presets:
        raise InputError(f"{origin}: no layout preset {name!r} in the file")
    node = module.presets[name]
    if isinstance(node, ast.Name):
        return _preset_fields(module, node.id, origin, notes, depth + 1)
    assert isinstance(node, ast.Call)
    fields: dict[str, Any] = {}
    if node.args:  # replace(BASE, ...)
        base = node.args[0]
        assert isinstance(base, ast.Name)
        fields = _preset_fields(module, base.id, origin, notes, depth + 1)
    for kw in node.keywords:
        try:
            value = ast.literal_eval(kw.value)
        except NOT_LITERAL:
            notes.append(f"line {kw.value.lineno}: {kw.arg} = {ast.unparse(kw.value)}: not read")
            continue
        if kw.arg is not None:
            fields[kw.arg] = value
    return fields


def preset_settings(module: Module, name: str, origin: str) -> RecipeSettings:
    """The settings Megatron-Bridge's scripts/performance make of one layout preset:
    set_workload_base_configs (scripts/performance/utils/overrides.py, the same at commits
    00919dcf, c0b9a000, 21d102f5 and 63b08b39) over the WorkloadBaseConfig defaults
    (scripts/performance/utils/utils.py), as bridge_keys.toml writes them; the model and the
    precision by the preset's name."""
    out = RecipeSettings(function=name)
    table = bridge_keys()["workload_base_config"]
    known = table["defaults"] | dict.fromkeys(table["optional"])
    fields = known | _preset_fields(module, name, origin, out.notes)
    unknown = [k for k in fields if k not in known]
    if unknown:
        out.notes.append(f"{', '.join(unknown)}: WorkloadBaseConfig fields not read")
    m = _PRESET_NAME.match(name) or _RELEASE_NAME.match(name)
    if m is None:
        raise InputError(
            f"{origin}: preset {name!r} is not named MODEL_TASK_CONFIG_GPU_PRECISION_VERSION "
            "(or _BASE_CONFIG for the version), so its model and precision are not known"
        )
    out.recipe = m.group("model").lower()
    precision = PERF_PRECISION.get(m.group("precision").lower())
    if precision is None:
        raise InputError(
            f"{origin}: preset {name}: precision {m.group('precision')} is not one read"
        )
    out.overrides["mixed_precision"] = precision
    for field_name, rule in table["set"].items():
        value = fields.get(field_name)
        for key, setting in rule.items():
            got = _rule(setting, value, fields)
            if got is not None:
                out.overrides.pop(key, None)
                out.overrides[key] = override_text(got)
    out.gpus = fields.get("num_gpus")
    return out


@cache
def bridge_keys() -> dict[str, Any]:
    """bridge_keys.toml: the Megatron-Bridge settings that are not Megatron-LM flags, and the
    layout presets' rules."""
    import tomllib
    from importlib.resources import files

    text = files("shardline.io").joinpath("bridge_keys.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def _rule(setting: Any, value: Any, fields: dict[str, Any]) -> Any:
    """One setting of set_workload_base_configs (bridge_keys.toml): "=" the field's value;
    "tp>1" sequence parallel with tensor parallelism; {"if": V, "then": X, "else": Y} X where
    the field is V (true: set, not None or false), else Y (None: left as it is)."""
    if setting == "=":
        return value
    if setting == "tp>1":
        return int(fields.get("tensor_model_parallel_size") or 1) > 1
    if isinstance(setting, dict) and "if" in setting:
        on = value not in (None, False) if setting["if"] is True else value == setting["if"]
        if not on:
            return setting.get("else")
        return value if setting["then"] == "=" else setting["then"]
    raise InputError(f"bridge_keys.toml: a rule not read: {setting!r}")
