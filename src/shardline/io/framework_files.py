"""Which framework a configuration file is written for, and its reader and writer
(shardline.io.megatron_args, shardline.io.bridge_overrides with shardline.io.bridge_recipe and
shardline.io.bridge_presets,
shardline.io.torchtitan_toml, shardline.io.maxtext_yaml; the values they share are in
shardline.io.framework_config)."""

from __future__ import annotations

from pathlib import Path

from shardline.errors import InputError
from shardline.io.bridge_overrides import (
    looks_like_bridge,
    parse_overrides,
    read_bridge,
    read_bridge_recipe,
    read_nemo2_recipe,
)
from shardline.io.framework_config import FORMATS, Imported, LaunchLayout
from shardline.io.maxtext_yaml import emit_maxtext, read_maxtext
from shardline.io.megatron_args import read_megatron
from shardline.io.megatron_emit import emit_megatron
from shardline.io.nemo_recipe import looks_like_nemo2
from shardline.io.torchtitan_toml import emit_torchtitan, read_torchtitan

__all__ = ["detect_format", "read_config", "emit_config"]


def detect_format(path: str, text: str) -> str:
    """The format of a configuration: by suffix (.py a Megatron-Bridge recipe, or a NeMo 2.0
    recipe where it imports NeMo-Run, .toml torchtitan,
    .yml/.yaml MaxText), else by
    content (Megatron-Bridge's dotted model.X=V overrides, Megatron-LM's --num-layers, or MaxText
    key=value overrides of train.py)."""
    suffix = Path(path).suffix.lower()
    if suffix == ".py":
        return "nemo2-recipe" if looks_like_nemo2(text) else "megatron-bridge-recipe"
    if suffix == ".toml":
        return "torchtitan"
    if suffix in (".yml", ".yaml"):
        return "maxtext"
    if looks_like_bridge(text):
        return "megatron-bridge"
    if "--num-layers" in text or "--tensor-model-parallel-size" in text:
        return "megatron"
    if "train.py" in text and "=" in text and ("MaxText" in text or "maxtext" in text):
        return "maxtext"
    raise InputError(
        f"{path}: not a configuration shardline reads: a Megatron-LM argument list (with "
        "--num-layers), a Megatron-Bridge override set (model.X=V), a torchtitan .toml or a "
        "MaxText .yml"
    )


def read_config(
    path: str, devices: int, recipe: str | None = None, settings: tuple[str, ...] = ()
) -> Imported:
    """Read `path` (any of FORMATS) into the plan it describes over `devices`; `recipe` the
    function of a Megatron-Bridge recipe file, `settings` the KEY=VALUE overrides applied on
    top of a recipe or an override set (--recipe, --set)."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(f"{path}: not a text file") from None
    kind = detect_format(path, text)
    if recipe is not None and kind not in ("megatron-bridge-recipe", "nemo2-recipe"):
        raise InputError(f"--recipe names a function of a Megatron-Bridge recipe .py, not {path}")
    if settings and not kind.startswith(("megatron-bridge", "nemo2")):
        raise InputError(
            f"--set applies to a Megatron-Bridge recipe or override set, not {path} ({kind})"
        )
    on_top = parse_overrides(settings, "--set")
    if kind == "megatron":
        return read_megatron(text, path, devices)
    if kind == "megatron-bridge-recipe":
        return read_bridge_recipe(text, path, devices, recipe, on_top)
    if kind == "nemo2-recipe":
        return read_nemo2_recipe(text, path, devices, recipe, on_top)
    if kind == "megatron-bridge":
        return read_bridge(text, path, devices, on_top)
    if kind == "torchtitan":
        return read_torchtitan(text, path, devices)
    return read_maxtext(text, path, devices)


def emit_config(kind: str, layout: LaunchLayout) -> str:
    """The launch configuration of `layout` in `kind`'s own names."""
    if kind == "megatron":
        return emit_megatron(layout)
    if kind == "torchtitan":
        return emit_torchtitan(layout)
    if kind == "maxtext":
        return emit_maxtext(layout)
    raise InputError(f"--emit takes {', '.join(FORMATS)}, got {kind!r}")
