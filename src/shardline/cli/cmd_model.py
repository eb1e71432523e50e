"""`shardline model list`, `shardline model show NAME|FILE` and `shardline model import
config.json`: the model zoo (total and active parameters, KV-cache bytes per token)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from shardline.cli.args import add_force_arg, add_json_arg
from shardline.cli.common import emit_json, write_text
from shardline.errors import InputError

__all__ = ["register"]

MAX_CONFIG_BYTES = 16 * 2**20  # a config.json is a few kB


def register(sub: argparse._SubParsersAction) -> None:
    model = sub.add_parser(
        "model",
        help="the model zoo: parameters, active parameters, KV bytes per token",
        description="List or show zoo models, or turn a Hugging Face config.json into a model "
        "file (offline).",
    )
    model_sub = model.add_subparsers(
        dest="model_command", metavar="ACTION", parser_class=type(model)
    )
    model_sub.required = True
    ls = model_sub.add_parser("list", help="every zoo model with its counts")
    add_json_arg(ls)
    ls.set_defaults(func=run_list)
    show = model_sub.add_parser("show", help="one model: every field with its source, and counts")
    show.add_argument("name", help="zoo model name or a model .toml file")
    show.add_argument(
        "--context",
        default=None,
        metavar="TOKENS",
        help="also the KV-cache bytes of one sequence of TOKENS (sliding layers capped at the "
        "window)",
    )
    add_json_arg(show)
    show.set_defaults(func=run_show)
    imp = model_sub.add_parser("import", help="a Hugging Face config.json -> a model .toml")
    imp.add_argument("config", help="a config.json (read offline)")
    imp.add_argument(
        "-o",
        "--out",
        default=None,
        metavar="OUT.toml",
        help="output file (default: print the model file)",
    )
    imp.add_argument(
        "--name",
        default=None,
        help="the model's name (default: OUT's stem, or the config's folder name)",
    )
    add_force_arg(imp, "an existing OUT.toml")
    imp.set_defaults(func=run_import)


def run_list(args: argparse.Namespace) -> int:
    from shardline.models import list_models
    from shardline.report.model_text import model_summary, render_model_list

    rows = [model_summary(spec) for spec in list_models()]
    if args.json:
        emit_json({"models": rows})
        return 0
    sys.stdout.write(render_model_list(rows))
    return 0


def run_show(args: argparse.Namespace) -> int:
    from shardline.models import load_model
    from shardline.report.model_text import model_detail, render_model

    spec = load_model(args.name)
    detail = model_detail(spec)
    if args.context is not None:
        from shardline.cli.common import positive_arg
        from shardline.models import kv_bytes_at

        context = positive_arg(args.context, "--context")
        detail = {"kv_context_tokens": context, "kv_bytes_at_context": kv_bytes_at(spec, context)}
        detail |= model_detail(spec)
    if args.json:
        emit_json(detail)
        return 0
    sys.stdout.write(render_model(detail))
    return 0


def _read_config(path: Path) -> Any:
    import json

    from shardline.io.inputs import read_input_bytes

    raw = read_input_bytes(path, "config file", MAX_CONFIG_BYTES)
    try:
        return json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise InputError(f"{path}: not a JSON config file ({exc})") from None
    except RecursionError:
        raise InputError(f"{path}: nested too deeply") from None


def run_import(args: argparse.Namespace) -> int:
    from shardline.models.hf_import import model_toml_from_config

    path = Path(args.config)
    out = None
    if args.out is not None:
        from shardline.io.tables import check_output_path

        out = check_output_path(args.out, [path], force=args.force, suffixes=(".toml",))
    if args.name is not None and not args.name.strip():
        raise InputError("--name is empty: give the model a name, or leave --name out")
    name = args.name or (out.stem if out is not None else path.resolve().parent.name) or "imported"
    text = model_toml_from_config(_read_config(path), str(path), name.lower())
    if out is None:
        sys.stdout.write(text)
    else:
        write_text(out, text)
        sys.stdout.write(f"wrote {out}\n")
    return 0
