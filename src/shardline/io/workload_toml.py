"""Workload files: a TOML stack of einsum layers, a built-in template, or a sheet of (m, k, n).

A stack (every field is checked; an unknown one is an error, not ignored):

    name = "seed 003"
    phase = "forward"            # or "training" (adds backward, gradients, Adam state)
    repeat = 36                  # the [[layer]] list runs 36 times
    batch_dim = "M"              # what data parallelism and microbatches split (default: guessed)
    dtype = "bf16"               # default storage dtype of every operand
    [dims]                       # sizes shared by the layers (a layer's own `dims` win)
    M = 8192
    [[layer]]
    name = "type1"
    einsum = "x[M,N] * w[N,K] -> y[M,K]"   # or m = .., k = .., n = .. for x[M,K] * w[K,N] -> y[M,N]
    weights = ["w"]              # operands that are parameters; also: cache, onchip
    shapes = { w = [8192, 32768] }         # optional: operand shapes, checked against the einsum
    tp_dim = "K"                 # what tensor parallelism splits (default: largest weight dim)
    count = 1                    # identical layers in a row
    axes = { M = "batch" }       # optional: dims by logical axis (batch, seq, heads, kv_heads,
                                 # head_dim, model, ffn, vocab), split by the parallel strategies

A template instead of layers: a `[transformer]` table (d_model, d_ff, heads, kv_heads, head_dim,
seq_len, batch, layers, gated, dtype, kv_dtype, weight_dtype, attention_dtype, vocab,
tied_embeddings, attention = "flash" | "standard", rotary, qk_norm)
or an `[ffn]` table (d_model, d_ff, seq_len, batch, layers, gated, dtype), with `phase`
"training", "prefill", "decode" or "forward".

A .csv/.xlsx sheet with M, K, N columns (and optional count, dtype, name columns) is read by
`shardline.io.sheets.read_shape_rows`: each row is a layer x[M,K] * w[K,N] -> y[M,N].
"""

from __future__ import annotations

import re
import tomllib
from dataclasses import fields
from pathlib import Path
from typing import Any

from shardline.errors import InputError
from shardline.io.inputs import read_input_bytes
from shardline.io.layer_tables import build_layers
from shardline.io.toml_subset import loads_subset
from shardline.ops.einsum import parse_einsum
from shardline.workload.attention import variant_keys
from shardline.workload.precision import PRECISION_FIELDS, template_precision
from shardline.workload.templates import TransformerShape, ffn, transformer
from shardline.workload.workload import Layer, Workload, check_layer_count, matmul_layer

__all__ = [
    "load_workload",
    "workload_from_toml",
    "workload_from_dict",
    "workload_from_sheet",
    "TOP_FIELDS",
    "LAYER_FIELDS",
]

TOP_FIELDS = (
    *("name", "description", "phase", "repeat", "batch_dim", "dtype", "item", "dims", "layer"),
    *("transformer", "ffn"),
)
LAYER_FIELDS = (
    "name",
    "einsum",
    "m",
    "k",
    "n",
    "dims",
    "shapes",
    "dtype",
    "dtypes",
    "compute_dtype",
    "weights",
    "cache",
    "onchip",
    "count",
    "tp_dim",
    "tp_dims",
    "axes",
)
# the [transformer] table's keys: TransformerShape's fields, the phase, the dtypes, the [moe]
# table and the precision fields; and the attention variants' tables (`transformer_fields`)
TRANSFORMER_FIELDS = (
    *(f.name for f in fields(TransformerShape) if f.name != "attention_variants"),
    *("phase", "dtype", "kv_dtype", "moe"),
    *PRECISION_FIELDS,
)
FFN_FIELDS = ("d_model", "d_ff", "seq_len", "batch", "layers", "gated", "dtype", "phase")
SHEET_SUFFIXES = (".csv", ".tsv", ".xlsx", ".xlsm")
MAX_WORKLOAD_BYTES = 100_000_000  # a workload file of 100,000 layers is about 10 MB


def _unknown(given: dict[str, object], allowed: tuple[str, ...], where: str) -> None:
    extra = [key for key in given if key not in allowed]
    if extra:
        raise InputError(f"{where}: unknown field {extra[0]!r}; fields: {', '.join(allowed)}")


def _int(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{what} must be a positive integer, got {value!r}")
    if value < 1:
        raise InputError(f"{what} must be a positive integer, got {value!r}")
    return value


def _str_list(value: object, what: str) -> tuple[str, ...]:
    if isinstance(value, str):
        return (value,)
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise InputError(f'{what} must be a list of operand names, e.g. ["w"], got {value!r}')
    return tuple(value)


def _layer_dims(
    raw: dict[str, object],
    spec_dims: tuple[str, ...],
    shared: dict[str, object],
    where: str,
    spec_text: str,
) -> dict[str, int]:
    """Sizes for one layer: its own `dims`, then its `shapes`, then the shared [dims]."""
    own = raw.get("dims", {})
    if not isinstance(own, dict):
        raise InputError(f"{where}: dims must be a table such as {{ M = 8192, K = 4096 }}")
    extra = [d for d in own if d not in spec_dims]
    if extra:
        raise InputError(f"{where}: dims names {', '.join(extra)}, not a dimension of {spec_text}")
    dims: dict[str, Any] = {d: own[d] for d in spec_dims if d in own}
    shapes = raw.get("shapes", {})
    if not isinstance(shapes, dict):
        raise InputError(f"{where}: shapes must be a table such as {{ w = [4096, 16384] }}")
    spec = parse_einsum(spec_text)
    operands = {op.name: op for op in spec.operands}
    origin: dict[str, str] = {d: "dims" for d in dims}
    for name, shape in shapes.items():
        if name not in operands:
            raise InputError(f"{where}: shapes names operand {name!r}, not in {spec_text}")
        op = operands[name]
        if not isinstance(shape, list) or not all(
            isinstance(v, int) and not isinstance(v, bool) for v in shape
        ):
            raise InputError(f"{where}: shape of {name} must be a list of integers, got {shape!r}")
        if len(shape) != len(op.dims):
            raise InputError(
                f"{where}: shape of {name} {shape} does not match its einsum "
                f"{op.text()}: {len(shape)} sizes for {len(op.dims)} dimensions"
            )
        for dim, size in zip(op.dims, shape, strict=True):
            if dim in dims and dims[dim] != size:
                raise InputError(
                    f"{where}: shape of {name} {shape} does not match its einsum "
                    f"{op.text()}: {dim} is {size} here but {dims[dim]} in "
                    f"{origin[dim]}"
                )
            dims[dim] = size
            origin[dim] = f"the shape of {name}"
    for dim in spec_dims:
        if dim not in dims and dim in shared:
            dims[dim] = shared[dim]
    missing = [d for d in spec_dims if d not in dims]
    if missing:
        raise InputError(
            f"{where}: dimension(s) {', '.join(missing)} of {spec_text} have no size; "
            "give them in [dims], the layer's dims or its shapes"
        )
    return dims


def _default_tp_dim(
    spec_text: str, dims: dict[str, int], weights: tuple[str, ...]
) -> tuple[str, ...]:
    """The weight's largest dim (ties: its last), as Megatron splits the large d_ff of both MLP
    matrices; no weight: no tensor parallelism (the layer is replicated)."""
    if not weights:
        return ()
    spec = parse_einsum(spec_text)
    weight = next((op for op in spec.operands if op.name == weights[0]), None)
    if weight is None:  # an unknown weight name: Layer() reports it with the operand names
        return ()
    best = max(range(len(weight.dims)), key=lambda i: (dims[weight.dims[i]], i))
    return (weight.dims[best],)


def _layer_spec(
    raw: dict[str, Any], where: str, shared: dict[str, object]
) -> tuple[str, dict[str, Any], tuple[str, ...]]:
    """The layer's einsum text, sizes and weights: from `einsum` (+ dims, shapes, [dims]) or the
    matmul shorthand m, k, n."""
    shorthand = [key for key in ("m", "k", "n") if key in raw]
    if "einsum" in raw and shorthand:
        raise InputError(f"{where}: give either einsum or m, k, n, not both")
    if shorthand:
        if len(shorthand) != 3:
            raise InputError(f"{where}: the matmul shorthand needs all of m, k and n")
        if "dims" in raw or "shapes" in raw:
            raise InputError(f"{where}: the matmul shorthand m, k, n takes no dims or shapes")
        spec_text = "x[M,K] * w[K,N] -> y[M,N]"
        dims = {"M": raw["m"], "K": raw["k"], "N": raw["n"]}
        weights = _str_list(raw.get("weights", ["w"]), f"{where}: weights")
    elif "einsum" in raw:
        if not isinstance(raw["einsum"], str):
            raise InputError(f'{where}: einsum must be text such as "x[M,K] * w[K,N] -> y[M,N]"')
        spec = parse_einsum(raw["einsum"])
        if spec.is_sharded:
            raise InputError(
                f"{where}: a workload einsum takes no mesh axes ({spec.text()}); "
                "parallel plans come from `shardline plan`"
            )
        spec_text = spec.text()
        dims = _layer_dims(raw, spec.all_dims, shared, where, spec_text)
        weights = _str_list(raw.get("weights", []), f"{where}: weights")
    else:
        raise InputError(
            f'{where}: needs an einsum (e.g. einsum = "x[M,K] * w[K,N] -> y[M,N]") '
            "or the matmul shorthand m, k, n"
        )
    return spec_text, dims, weights


def _layer(raw: object, index: int, shared: dict[str, object], dtype: str) -> Layer:
    if not isinstance(raw, dict):
        raise InputError(f"layer {index}: must be a table ([[layer]])")
    label = raw.get("name", f"layer{index}")
    where = f"layer {index} ({label!r})" if "name" in raw else f"layer {index}"
    _unknown(raw, LAYER_FIELDS, where)
    spec_text, dims, weights = _layer_spec(raw, where, shared)
    if "tp_dim" in raw and "tp_dims" in raw:
        raise InputError(f"{where}: give tp_dim or tp_dims, not both")
    tp_raw = raw.get("tp_dims", raw.get("tp_dim"))
    tp_dims = (
        _str_list(tp_raw, f"{where}: tp_dim")
        if tp_raw is not None
        else _default_tp_dim(
            spec_text, {k: int(v) for k, v in dims.items() if isinstance(v, int)}, weights
        )
    )
    dtypes = raw.get("dtypes", {})
    if not isinstance(dtypes, dict):
        raise InputError(f'{where}: dtypes must be a table such as {{ w = "int8" }}')
    count = _int(raw.get("count", 1), f"{where}: count")
    try:
        return Layer(
            name=str(label),
            spec=spec_text,
            dims=dims,
            dtype=str(raw.get("dtype", dtype)),
            dtypes={str(k): str(v) for k, v in dtypes.items()},
            compute_dtype=raw.get("compute_dtype"),
            weights=weights,
            cache=_str_list(raw.get("cache", []), f"{where}: cache"),
            onchip=_str_list(raw.get("onchip", []), f"{where}: onchip"),
            count=count,
            tp_dims=tp_dims,
            axes=_axes(raw.get("axes", {}), where),
        )
    except InputError as exc:
        text = str(exc)
        raise InputError(text if text.startswith("layer") else f"{where}: {text}") from None


def _axes(raw: object, where: str) -> dict[str, str]:
    """Optional `axes = { B = "batch", S = "seq" }`: the layer's dims by logical axis."""
    if not isinstance(raw, dict):
        raise InputError(f'{where}: axes must be a table such as {{ B = "batch" }}')
    return {str(k): str(v) for k, v in raw.items()}


def _guess_batch_dim(layers: list[Layer]) -> str | None:
    """A dim in every layer and in every layer's output; prefer B, then M."""
    common = set(layers[0].dims)
    for layer in layers:
        common &= set(layer.output.dims)
    if not common:
        return None
    for preferred in ("B", "M"):
        if preferred in common:
            return preferred
    return sorted(common)[0]


def _template(
    data: dict[str, object],
    key: str,
    phase: str | None,
    batch: int | None,
    seq_len: int | None,
    dtype: str | None = None,
) -> Workload:
    section = data[key]
    if not isinstance(section, dict):
        raise InputError(f"[{key}] must be a table")
    allowed = (*TRANSFORMER_FIELDS, *variant_keys()) if key == "transformer" else FFN_FIELDS
    _unknown(section, allowed, f"[{key}]")
    for flag in ("gated", "rotary", "qk_norm"):  # "false" (a string) must not read as true
        if flag in section and not isinstance(section[flag], bool):
            raise InputError(
                f"[{key}] {flag} must be true or false (a TOML boolean, no quotes), "
                f"got {section[flag]!r}"
            )
    params = dict(section)
    top_phase = data.get("phase")
    if "phase" in params and top_phase is not None and params["phase"] != top_phase:
        raise InputError(
            f"phase is given twice with different values ({top_phase!r}, {params['phase']!r})"
        )
    params["phase"] = phase or params.get("phase") or top_phase or "training"
    if batch is not None:
        params["batch"] = batch
    if seq_len is not None:
        params["seq_len"] = seq_len
    if dtype is not None:  # --dtype: the compute and activations' dtype, over the file's
        params["dtype"] = dtype
    elif "dtype" not in params and "dtype" in data:
        params["dtype"] = data["dtype"]
    for required in ("d_model", "d_ff", "batch") + (
        ("heads", "seq_len") if key == "transformer" else ()
    ):
        if required not in params:
            raise InputError(f"[{key}] needs {required}")
    if data.get("name") is not None:
        params["name"] = str(data["name"])
    if key == "ffn":
        return ffn(**params)
    precision = {k: params.pop(k) for k in PRECISION_FIELDS if k in params}
    return template_precision(transformer(**params), **precision)


def _raw_layers(raw: object, origin: str) -> list[object]:
    """The [[layer]] tables: at least one, at most MAX_LAYERS (before a Layer is built for each)."""
    if not isinstance(raw, list) or not raw:
        raise InputError(f"{origin}: [[layer]] must list at least one layer")
    check_layer_count(len(raw), origin)
    return raw


def workload_from_dict(
    data: dict[str, object],
    *,
    origin: str = "workload",
    phase: str | None = None,
    batch: int | None = None,
    seq_len: int | None = None,
    dtype: str | None = None,
) -> Workload:
    """Build a Workload from parsed TOML; `phase`, `batch`, `seq_len` and `dtype` override it."""
    try:
        _unknown(data, TOP_FIELDS, origin)
        templates = [key for key in ("transformer", "ffn", "layer") if key in data]
        if len(templates) != 1:
            raise InputError(
                f"{origin}: give exactly one of [[layer]] tables, a [transformer] table "
                "or an [ffn] table"
            )
        if templates[0] != "layer":
            for key in ("repeat", "batch_dim", "dims", "item"):
                if key in data:
                    raise InputError(
                        f"{origin}: {key} does not apply to a [{templates[0]}] template"
                    )
            return _template(data, templates[0], phase, batch, seq_len, dtype)
        if seq_len is not None:
            raise InputError("--seq-len applies to [transformer] and [ffn] templates")
        raw_layers = _raw_layers(data["layer"], origin)
        shared = data.get("dims", {})
        if not isinstance(shared, dict):
            raise InputError(f"{origin}: [dims] must be a table of sizes")
        base = str(dtype or data.get("dtype", "bf16"))  # --dtype: shardline.workload.precision
        layers = build_layers(
            raw_layers, lambda raw, index: _layer(raw, index, shared, base), origin
        )
        batch_dim = data.get("batch_dim")
        if batch_dim is None:
            batch_dim = _guess_batch_dim(layers)
        elif not isinstance(batch_dim, str):
            raise InputError(f'{origin}: batch_dim must be a dimension name such as "M"')
        repeat = _int(data.get("repeat", 1), f"{origin}: repeat")
        chosen = phase or data.get("phase", "forward")
        if chosen not in ("forward", "training"):
            raise InputError(
                f"{origin}: phase of a layer stack must be forward or training, got "
                f"{chosen!r} (prefill and decode come with the [transformer] template)"
            )
        workload = Workload(
            name=str(data.get("name", origin)),
            layers=tuple(layers),
            repeat=repeat,
            phase=chosen,
            batch_dim=batch_dim,
            kind="stack",
            item=str(data.get("item", "row")),
            description=str(data.get("description", "")),
        )
        return workload.with_batch(batch) if batch is not None else workload
    except TypeError as exc:  # a template given a wrongly typed value
        raise InputError(f"{origin}: {exc}") from None


def workload_from_toml(path: str | Path, **overrides: Any) -> Workload:
    p = Path(path)
    raw = read_input_bytes(p, "workload file", MAX_WORKLOAD_BYTES)  # a regular file, readable
    headers = re.findall(rb"(?m)^[ \t]*\[\[[ \t]*layer[ \t]*\]\]", raw)  # before parsing
    check_layer_count(len(headers), str(p))  # 200,000 tables: a second, not the parse's 7 s
    try:
        text = raw.decode("utf-8")
        data = loads_subset(text)  # the regular subset, fast; None: tomllib reads the rest
        if data is None:
            data = tomllib.loads(text)
    except UnicodeDecodeError:
        raise InputError(f"cannot read {p}: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"cannot read {p}: invalid TOML: {exc}") from None
    except RecursionError:  # tomllib recurses once per level of nested tables or arrays
        raise InputError(f"cannot read {p}: nested too deeply") from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise InputError(f"cannot read {p}: {str(exc).split(';')[0]}") from None
    return workload_from_dict(data, origin=str(p), **overrides)


def workload_from_sheet(
    path: str | Path,
    *,
    phase: str | None = None,
    batch: int | None = None,
    seq_len: int | None = None,
    sheet: str | None = None,
) -> Workload:
    """Each (m, k, n) row of a .csv/.xlsx is a layer x[M,K] * w[K,N] -> y[M,N] run `count` times."""
    from shardline.io.sheets import read_shape_rows

    if seq_len is not None:
        raise InputError("--seq-len applies to [transformer] and [ffn] templates")
    table = read_shape_rows(path, sheet).require_ok()
    if len(table) == 0:
        raise InputError(f"{path}: the sheet has a header but no rows")
    check_layer_count(len(table), str(path))  # before a Layer is built for each row
    labels = table.labels()
    seen: dict[str, int] = {}
    rows: list[dict[str, object]] = []
    for i in range(len(table)):
        count = int(table.count[i])
        if count == 0:
            continue
        name = labels[i]
        seen[name] = seen.get(name, 0) + 1
        if seen[name] > 1:
            name = f"{name} ({seen[name]})"
        dtype = str(table.dtype[i]) if table.dtype is not None and table.dtype[i] else "bf16"
        rows.append(
            {"name": name, "m": int(table.m[i]), "k": int(table.k[i]), "n": int(table.n[i])}
            | {"dtype": dtype, "count": count}
        )
    layers = build_layers(rows, lambda row, _: matmul_layer(**row), str(path))
    if not layers:
        raise InputError(f"{path}: every row has count 0")
    chosen = phase or "forward"
    if chosen not in ("forward", "training"):
        raise InputError(f"phase of a sheet workload must be forward or training, got {chosen!r}")
    workload = Workload(
        name=Path(path).name,
        layers=tuple(layers),
        phase=chosen,
        batch_dim="M",
        kind="stack",
        item="row",
    )
    return workload.with_batch(batch) if batch is not None else workload


def load_workload(
    path: str | Path,
    *,
    phase: str | None = None,
    batch: int | None = None,
    seq_len: int | None = None,
    sheet: str | None = None,
    dtype: str | None = None,
) -> Workload:
    """A workload file: .toml (a stack or a template), or a .csv/.xlsx sheet of (m, k, n) rows."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix in SHEET_SUFFIXES:
        return workload_from_sheet(p, phase=phase, batch=batch, seq_len=seq_len, sheet=sheet)
    if sheet is not None:
        raise InputError(f"--sheet applies to .xlsx workloads, not {p.name}")
    if suffix != ".toml":
        raise InputError(
            f"{p}: unsupported workload type {suffix or '(none)'!r}; expected .toml, "
            f"or a sheet ({', '.join(SHEET_SUFFIXES)})"
        )
    return workload_from_toml(p, phase=phase, batch=batch, seq_len=seq_len, dtype=dtype)
