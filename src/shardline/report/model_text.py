"""The model zoo in words and as JSON (`shardline model list`, `shardline model show`): the counts
derived from a model file, then every field with its source."""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from shardline.report.columns import aligned

__all__ = ["model_detail", "model_summary", "render_model", "render_model_list"]

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


def model_summary(spec: Any) -> dict[str, Any]:
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


def _variant_tables(spec: Any) -> dict[str, dict[str, int] | None]:
    """Each attention variant's table under its key (`mla`, `sliding_window`), None if absent."""
    from shardline.workload.attention import variants

    return {
        v.key: next(
            (dict(vars(r)) for r in spec.attention_variants if isinstance(r, v.record)), None
        )
        for v in variants()
    }


def model_detail(spec: Any) -> dict[str, Any]:
    from shardline.models import params_active, params_total

    fields = asdict(spec)
    sources = fields.pop("sources")
    fields.pop("attention_variants")
    fields |= _variant_tables(spec)
    out = model_summary(spec)
    lookup = spec.vocab * spec.d_model
    counted = lookup if spec.active_counts_embedding or spec.moe is None else 0
    out["params_active_without_embedding"] = params_active(spec) - counted
    out["params_total_without_embedding"] = params_total(spec) - spec.vocab * spec.d_model
    out |= {key: value for key, value in fields.items() if key != "name"}
    out["sources"] = dict(sorted(sources.items()))
    return out


def render_model_list(rows: list[dict[str, Any]]) -> str:
    """`model list`: one line per model (model_summary rows); counts align right."""
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
    note = (
        "KV bytes per token in each model's KV dtype (bf16 unless its file says), every layer "
        "caching (a context within any window)\n"
    )
    return aligned(table, right=range(1, len(head) - 1)) + note


def render_model(detail: dict[str, Any]) -> str:
    """`model show`: the derived counts first, then every field with its source."""
    detail = dict(detail)
    sources = detail.pop("sources")
    out = [f"{detail.pop('name')}: {detail.pop('description')}\n"]
    for key in [k for k in DERIVED if k in detail]:
        value = detail.pop(key)
        if key in ("attention_kind", "kv_context_tokens"):
            shown = f"{value:,}" if isinstance(value, int) else value
        elif key.startswith("kv"):
            shown = f"{value:,.0f} B ({_kv_dtype(detail)})"
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
    return "".join(out)


def _kv_dtype(detail: dict[str, Any]) -> str:
    """The dtype the KV bytes are counted in (`modelspec._element_bytes`): the file's kv_dtype,
    else its dtype, else bf16."""
    return str(detail.get("kv_dtype") or detail.get("dtype") or "bf16")


def _field_line(key: str, value: object, source: str | None) -> str:
    text = str(value).lower() if isinstance(value, bool) else f"{value}"
    return f"  {key:<34} {text}" + (f"   [{source}]" if source else "") + "\n"
