"""Turning parsed arguments into core values, and the few output steps every command shares.

The model itself is imported inside the functions, so that importing this module (every command
does, when the parser is built) stays cheap.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from shardline.basics.units import check_rate, check_time, parse_count, parse_quantity, short

# Re-exported (built in args.py) for command modules that import them from here (cmd_stack.py).
from shardline.cli.args import add_chip_args, add_json_arg
from shardline.errors import InputError

if TYPE_CHECKING:
    from shardline.basics.options import RateOverrides
    from shardline.collectives import NetworkOptions
    from shardline.sharding.algebra import ShardOptions
    from shardline.workload.workload import Workload

__all__ = [
    "add_chip_args",
    "add_json_arg",
    "dim_arg",
    "dtype_map",
    "emit_json",
    "fill_default_dtype",
    "network_from_args",
    "overrides_from_args",
    "parse_shape",
    "positive_count",
    "rates_from_args",
    "resident_from_text",
    "shard_options_from_args",
    "write_text",
    "positive_arg",
    "count_arg",
    "load_from_args",
]


# --- numbers and names -----------------------------------------------------------------------


def rates_from_args(args: argparse.Namespace) -> RateOverrides:
    """--flops-per-s and --mem-bw (None where not given); each a rate from 1 to 1e30 per second
    (`shardline.basics.units.check_rate`); an empty value is an error, not a flag left out."""
    from shardline.basics.options import RateOverrides

    flops = mem = None
    if args.flops_per_s is not None:
        flops = check_rate(parse_quantity(args.flops_per_s, "FLOP/s"), "--flops-per-s", "FLOP/s")
    if args.mem_bw is not None:
        mem = check_rate(parse_quantity(args.mem_bw, "B/s"), "--mem-bw", "B/s")
    return RateOverrides(flops_per_s=flops, mem_bytes_per_s=mem)


def overrides_from_args(args: argparse.Namespace) -> dict[str, float | None]:
    """`rates_from_args` as keyword arguments: {"flops_per_s": ..., "mem_bytes_per_s": ...}."""
    rates = rates_from_args(args)
    return {"flops_per_s": rates.flops_per_s, "mem_bytes_per_s": rates.mem_bytes_per_s}


def dim_arg(text: str, name: str) -> int:
    from shardline.ops.einsum import check_size

    return check_size(parse_count(text, f"dimension {name}"), f"dimension {name}")


def positive_count(text: str, what: str) -> int:
    from shardline.ops.einsum import check_size

    return check_size(parse_count(str(text), what), what)


def parse_shape(text: str, parts: int, what: str) -> list[int]:
    """`4096x1024` (or `4096×1024`) -> [4096, 1024]; exactly `parts` sizes."""
    pieces = text.lower().replace("×", "x").split("x")
    if len(pieces) != parts:
        raise InputError(f"malformed {what} {text!r}: expected {parts} sizes joined by 'x'")
    return [dim_arg(p, f"{what} {text}") for p in pieces]


def dtype_map(text: str | None) -> dict[str, str]:
    """`X=int8,W=bf16` -> {"X": "int8", "W": "bf16"}."""
    mapping: dict[str, str] = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        if "=" not in item:
            raise InputError(f"malformed --dtypes entry {item.strip()!r}: expected OPERAND=DTYPE")
        name, value = (s.strip() for s in item.split("=", 1))
        if name in mapping:
            raise InputError(f"--dtypes gives operand {name} twice")
        mapping[name] = value
    return mapping


def fill_default_dtype(args: argparse.Namespace) -> None:
    """`--dtype` left out: the chip's default (bf16, or fp32 on a chip without bf16, such as a
    calibrated CPU file)."""
    from shardline.cli.system_args import resolve_hardware

    resolve_hardware(args)
    # a workload file keeps its own dtype unless --dtype is given (load_from_args)
    args.dtype_given = getattr(args, "dtype", None) is not None
    if getattr(args, "dtype", "unset") is None and getattr(args, "hw", None) is not None:
        from shardline.hardware import resolve_chip

        args.dtype = resolve_chip(args.hw).default_dtype


# --- network and sharding options ------------------------------------------------------------


def network_from_args(args: argparse.Namespace, axes: list[str]) -> NetworkOptions:
    """--topology, --link-bw and --latency for the mesh axes `axes`."""
    from shardline.collectives import NetworkOptions, parse_topology

    link = latency = None
    if getattr(args, "link_bw", None):
        link = check_rate(parse_quantity(args.link_bw, "B/s"), "--link-bw", "B/s")
    if getattr(args, "latency", None):
        latency = check_time(parse_quantity(args.latency, "s"), "--latency")
    per_process = getattr(args, "gpus_per_process", None)
    return NetworkOptions(
        parse_topology(getattr(args, "topology", None), axes),
        link,
        latency,
        algorithm=getattr(args, "algorithm", None),
        protocol=getattr(args, "protocol", None),
        multi_axis=getattr(args, "multi_axis", None) or "simultaneous",
        gpus_per_process=parse_count(per_process, "--gpus-per-process") if per_process else 1,
    )


def resident_from_text(text: str | None, inputs: tuple[str, str]) -> frozenset[str] | None:
    """--resident: None (every input resident), 'none', or input names (any case)."""
    if text is None:
        return None
    if text.strip().lower() == "none":
        return frozenset()
    by_lower = {name.lower(): name for name in inputs}
    names = set()
    for item in (s.strip() for s in text.split(",")):
        if not item:
            continue
        if item.lower() not in by_lower:
            raise InputError(
                f"--resident names {item}, which is not an input (inputs: {', '.join(inputs)})"
            )
        names.add(by_lower[item.lower()])
    return frozenset(names)


def shard_options_from_args(args: argparse.Namespace, inputs: tuple[str, str]) -> ShardOptions:
    """--overlap, --resident, --unreduced, --pad, --reduce-dtype (and --accumulate if given)."""
    from shardline.sharding.algebra import DEFAULT_REDUCE_DTYPE, ShardOptions

    unreduced: tuple[str, ...] = ()
    text = getattr(args, "unreduced", None)
    if text:
        unreduced = tuple(a.strip() for a in text.replace(",", " ").split() if a.strip())
    return ShardOptions(
        overlap=args.overlap,
        resident=resident_from_text(args.resident, inputs),
        unreduced=unreduced,
        pad=args.pad,
        reduce_dtype=args.reduce_dtype or DEFAULT_REDUCE_DTYPE,
        accumulate=bool(getattr(args, "accumulate", False)),
    )


# --- output ----------------------------------------------------------------------------------


def emit_json(payload: object) -> None:
    """One JSON object; a result that is not finite (inf, NaN) is an error, never a traceback."""
    try:
        text = json.dumps(payload, indent=2, allow_nan=False)
    except ValueError as exc:  # json's "Out of range float values are not JSON compliant"
        raise InputError(
            f"the result is not a finite number ({exc}); an input is out of range: a size too "
            "large or a rate too small"
        ) from None
    sys.stdout.write(text + "\n")


def write_text(out: Path, text: str) -> None:
    """Write `text` through a temporary file renamed over `out` (never half a file)."""
    from shardline.io.sheets import atomic_write

    def write(tmp: Path) -> None:
        tmp.write_text(text, encoding="utf-8")

    atomic_write(out, write)


# --- a workload ---------------------------------------------------------------------------


def positive_arg(text: str, what: str) -> int:
    value = parse_count(text, what)
    if value < 1:
        raise InputError(f"{what} must be a positive integer, got {short(text)}")
    return value


def count_arg(text: str | None, what: str) -> int | None:
    return None if text is None else positive_arg(text, what)


def _given_dtype(args: argparse.Namespace) -> str | None:
    """--dtype as the user gave it: None when left out (a workload file keeps its own dtype; the
    chip's default that fill_default_dtype puts in `args.dtype` serves single ops and sheets)."""
    return getattr(args, "dtype", None) if getattr(args, "dtype_given", True) else None


def load_from_args(args: argparse.Namespace, *, seq_len: int | None = None) -> Workload:
    """The workload of `add_workload_args` (a WORKLOAD file or --model), with its overrides
    applied; `seq_len` replaces --seq-len (the --max-seq-len search)."""
    from dataclasses import replace

    from shardline.io.workload_toml import load_workload
    from shardline.workload.precision import layer_in_dtype, with_tensor_dtypes

    seq_len = seq_len if seq_len is not None else count_arg(args.seq_len, "--seq-len")
    model = getattr(args, "model", None)
    if model is not None or args.workload is None:
        workload = _model_workload(args, model, seq_len)
    else:
        workload = load_workload(
            args.workload,
            phase=args.phase,
            batch=count_arg(args.batch, "--batch"),
            seq_len=seq_len,
            sheet=args.sheet,
            dtype=_given_dtype(args),
        )
    dtype = _given_dtype(args)
    if dtype is not None and workload.kind == "stack":  # every layer, its own dtype fields too
        workload = replace(
            workload, layers=tuple(layer_in_dtype(x, dtype) for x in workload.layers)
        )
    weights, kv = getattr(args, "weight_dtype", None), getattr(args, "kv_dtype", None)
    if kv is not None and not any(layer.cache for layer in workload.layers):
        raise InputError("--kv-dtype applies to a [transformer] template's prefill or decode")
    attention = getattr(args, "attention_dtype", None)
    return with_tensor_dtypes(
        workload, weight_dtype=weights, kv_dtype=kv, attention_dtype=attention
    )


def _model_workload(args: argparse.Namespace, model: str | None, seq_len: int | None) -> Workload:
    """`--model NAME`: the zoo model's [transformer] template (defaults: training, batch 1,
    sequence length 4096)."""
    from shardline.io.workload_toml import workload_from_dict
    from shardline.models import load_model
    from shardline.models.template import (
        DEFAULT_BATCH,
        DEFAULT_PHASE,
        DEFAULT_SEQ_LEN,
        transformer_table,
    )

    spec = getattr(args, "model_spec", None)  # a framework configuration's (--from)
    if model is None and spec is None:
        raise InputError("give a WORKLOAD file or --model NAME")
    if args.workload is not None:
        raise InputError(f"give a WORKLOAD file or --model, not both ({args.workload}, {model})")
    if args.sheet is not None:
        raise InputError("--sheet applies to .xlsx workloads, not to --model")
    if spec is None:
        assert model is not None  # checked above
        spec = load_model(model)
    batch = count_arg(args.batch, "--batch") or DEFAULT_BATCH
    table = transformer_table(spec, batch=batch, seq_len=seq_len or DEFAULT_SEQ_LEN)
    data = {"name": spec.name, "phase": args.phase or DEFAULT_PHASE, "transformer": table}
    return workload_from_dict(data, origin=f"model {spec.name}", dtype=_given_dtype(args))
