"""Arguments shared by several commands, and turning them into core values."""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from shardline.errors import InputError
from shardline.units import parse_count, parse_quantity

__all__ = ["add_chip_args", "add_json_arg", "chip_from_args", "emit_json", "dim_arg", "dtype_map"]


def add_chip_args(parser: argparse.ArgumentParser, *, dtype: bool = True) -> None:
    group = parser.add_argument_group("hardware")
    group.add_argument(
        "--hw",
        default="h100-sxm",
        help="chip name or alias (see `shardline hw list`) or a chip .toml file "
        "(default: h100-sxm)",
    )
    if dtype:
        group.add_argument(
            "--dtype",
            default=None,
            help="storage dtype of every operand (default: bf16, or fp32 on a chip without bf16)",
        )
        group.add_argument(
            "--compute-dtype",
            default=None,
            help="dtype whose peak FLOP/s applies (default: the widest input's)",
        )
    group.add_argument(
        "--flops-per-s",
        default=None,
        metavar="X",
        help="override the peak FLOP/s for the compute dtype, e.g. 1.97e14 or '197 TFLOP/s'",
    )
    group.add_argument(
        "--mem-bw",
        default=None,
        metavar="X",
        help="override the HBM bandwidth in bytes/s, e.g. 8.2e11 or '820 GB/s'",
    )


def add_json_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object (SI units)")


def overrides_from_args(args: argparse.Namespace) -> dict[str, float | None]:
    flops = parse_quantity(args.flops_per_s, "FLOP/s") if args.flops_per_s else None
    mem = parse_quantity(args.mem_bw, "B/s") if args.mem_bw else None
    for value, flag in ((flops, "--flops-per-s"), (mem, "--mem-bw")):
        if value is not None and not value > 0:
            raise InputError(f"{flag} must be positive")
    return {"flops_per_s": flops, "mem_bytes_per_s": mem}


def chip_from_args(args: argparse.Namespace) -> Any:
    from shardline.hardware import load_chip

    return load_chip(args.hw)


def dim_arg(text: str, name: str) -> int:
    from shardline.einsum import check_size

    return check_size(parse_count(text, f"dimension {name}"), f"dimension {name}")


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


def emit_json(payload: Any) -> None:
    sys.stdout.write(json.dumps(payload, indent=2, allow_nan=False) + "\n")


def fill_default_dtype(args: argparse.Namespace) -> None:
    """`--dtype` left out: the chip's default (bf16, or fp32 on a chip without bf16, such as a
    calibrated CPU file)."""
    if getattr(args, "dtype", "unset") is None and getattr(args, "hw", None):
        from shardline.hardware import load_chip

        args.dtype = load_chip(args.hw).default_dtype
