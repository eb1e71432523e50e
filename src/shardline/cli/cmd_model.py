"""`shardline model list`, `shardline model show NAME|FILE` and `shardline model import
config.json`: the model zoo (total and active parameters, KV-cache bytes per token)."""

from __future__ import annotations

import argparse
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Any

from shardline.cli.args import add_force_arg, add_json_arg
from shardline.cli.common import emit_json, write_text
from shardline.errors import InputError

__all__ = ["register"]

MAX_CONFIG_BYTES = 16 * 2**20  # a config.json is a few kB
DERIVED = (
    "kv_context_tokens",
    "kv_bytes_at_context",
    "params_total",
    "params_active",
    "params_total_without_embedding",
    "params_active_without_embedding",
    "kv_bytes_per_token",
    "attention_kind",
)


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


def _summary(spec: Any) -> dict[str, Any]:
    from shardline.models import attention_kind, kv_bytes_per_token, params_active, params_total

    return {
        "name": spec.name,
        "params_total": params_total(spec),
        "params_active": params_active(spec),
        "layers": spec.layers,
        "d_model": spec.d_model,
        "kv_bytes_per_token": kv_bytes_per_token(spec),
        "attention_kind": attention_kind(spec),
    }


def _b(count: float) -> str:
    return f"{count / 1e9:,.2f}B" if count >= 1e9 else f"{count / 1e6:,.1f}M"


def run_list(args: argparse.Namespace) -> int:
    from shardline.models import list_models

    rows = [_summary(spec) for spec in list_models()]
    if args.json:
        emit_json({"models": rows})
        return 0
    head = ("model", "params", "active", "layers", "d_model", "KV B/token", "attention")
    table = [head] + [
        (
            r["name"],
            _b(r["params_total"]),
            _b(r["params_active"]),
            str(r["layers"]),
            str(r["d_model"]),
            f"{r['kv_bytes_per_token']:,.0f}",
            r["attention_kind"],
        )
        for r in rows
    ]
    widths = [max(len(row[i]) for row in table) for i in range(len(head))]
    for row in table:
        cells = [row[0].ljust(widths[0])] + [
            c.rjust(w) for c, w in zip(row[1:-1], widths[1:-1], strict=True)
        ]
        sys.stdout.write("  ".join(cells + [row[-1]]).rstrip() + "\n")
    sys.stdout.write(
        "KV bytes per token at bf16, every layer caching (a context within any window)\n"
    )
    return 0


def _detail(spec: Any) -> dict[str, Any]:
    from shardline.models import params_active, params_total

    fields = asdict(spec)
    sources = fields.pop("sources")
    out = _summary(spec)
    out["params_active_without_embedding"] = params_active(spec) - spec.vocab * spec.d_model
    out["params_total_without_embedding"] = params_total(spec) - spec.vocab * spec.d_model
    out |= {key: value for key, value in fields.items() if key != "name"}
    out["sources"] = dict(sorted(sources.items()))
    return out


def run_show(args: argparse.Namespace) -> int:
    from shardline.models import load_model

    spec = load_model(args.name)
    detail = _detail(spec)
    if args.context is not None:
        from shardline.cli.common import positive_arg
        from shardline.models import kv_bytes_at

        context = positive_arg(args.context, "--context")
        detail = {"kv_context_tokens": context, "kv_bytes_at_context": kv_bytes_at(spec, context)}
        detail |= _detail(spec)
    if args.json:
        emit_json(detail)
        return 0
    sources = detail.pop("sources")
    out = [f"{detail.pop('name')}: {detail.pop('description')}\n"]
    for key in [k for k in DERIVED if k in detail]:
        value = detail.pop(key)
        if key in ("attention_kind", "kv_context_tokens"):
            shown = f"{value:,}" if isinstance(value, int) else value
        elif key.startswith("kv"):
            shown = f"{value:,.0f} B (bf16)"
        else:
            shown = f"{value:,} ({_b(value)})"
        out.append(f"  {key:<34} {shown}\n")
    out.append("fields [source]:\n")
    for key, value in detail.items():
        if isinstance(value, dict):
            for sub_key, sub_value in value.items():
                path = f"{key}.{sub_key}"
                out.append(_field_line(path, sub_value, sources.get(path)))
        elif value is not None:
            out.append(_field_line(key, value, sources.get(key)))
    sys.stdout.write("".join(out))
    return 0


def _field_line(key: str, value: Any, source: str | None) -> str:
    text = str(value).lower() if isinstance(value, bool) else f"{value}"
    return f"  {key:<34} {text}" + (f"   [{source}]" if source else "") + "\n"


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
    name = args.name or (out.stem if out is not None else path.resolve().parent.name) or "imported"
    text = model_toml_from_config(_read_config(path), str(path), name.lower())
    if out is None:
        sys.stdout.write(text)
    else:
        write_text(out, text)
        sys.stdout.write(f"wrote {out}\n")
    return 0
