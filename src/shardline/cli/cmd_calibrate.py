"""`shardline calibrate --out host.toml`: measure this machine and write a chip file."""

from __future__ import annotations

import argparse
import sys

from shardline.cli.args import add_force_arg, add_json_arg
from shardline.cli.common import emit_json
from shardline.errors import InputError

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    cal = sub.add_parser(
        "calibrate",
        help="measure this machine and write a chip file (--out host.toml)",
        description="Measure the machine this runs on (CPU with numpy; an NVIDIA GPU with torch "
        "when present) and write a chip file that every command accepts with --hw. The "
        "machine's noise during the run (the spread of repeated, interleaved samples) is "
        "printed and recorded in [calibration.noise]; above the limit a warning says so.",
    )
    cal.add_argument("--out", required=True, help="chip file to write, e.g. host.toml")
    _add_measurement_args(cal)
    cal.add_argument(
        "--collectives",
        action="store_true",
        help="also measure all-gather, reduce-scatter, all-reduce and all-to-all (8 B to 1 GiB) "
        "with torch.distributed (gloo on CPU, NCCL on GPUs) and fit alpha, the "
        "size-dependent bus efficiency and the smallest collective",
    )
    cal.add_argument(
        "--processes",
        type=int,
        default=4,
        help="local processes for --collectives (default 4; torchrun sets its own)",
    )
    cal.add_argument(
        "--processes-per-node",
        type=int,
        default=None,
        help="--collectives without torchrun: group the local processes into fake nodes of K "
        "(sets LOCAL_WORLD_SIZE), to run the several-node measurement on one machine "
        "(default: all on one node)",
    )
    add_force_arg(cal, "--out if it exists")
    cal.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_json_arg(cal)
    cal.set_defaults(func=run)


def _add_measurement_args(cal: argparse.ArgumentParser) -> None:
    cal.add_argument(
        "--device",
        default="auto",
        choices=("auto", "cpu", "cuda"),
        help="what to measure (default: the GPU when torch sees one, else the CPU)",
    )
    cal.add_argument(
        "--backend",
        choices=("numpy", "torch"),
        default=None,
        help="CPU library to measure (default numpy; torch measures fp32 and bf16)",
    )
    cal.add_argument(
        "--threads",
        type=int,
        default=1,
        help="BLAS threads on a CPU (default 1: reproducible on a shared machine)",
    )
    cal.add_argument("--name", help="chip name in the file (default host / host-gpu)")
    cal.add_argument("--quick", action="store_true", help="fewer and smaller measurements")
    cal.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed samples per measurement, all taken (default 9, fewer when the 30 s "
        "budget runs out on a busy machine; never fewer than 3)",
    )


def _plain(value: object) -> object:
    """A chip table with sourced values ({value, source}) as plain JSON."""
    if hasattr(value, "value") and hasattr(value, "source"):
        return {"value": value.value, "source": value.source}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def run(args: argparse.Namespace) -> int:
    from shardline.calibrate import calibrate

    if args.repeats is not None and args.repeats < 1:
        raise InputError("--repeats must be at least 1")
    if args.processes < 2:
        raise InputError("--processes must be at least 2")
    per_node = args.processes_per_node
    if per_node is not None and (per_node < 1 or args.processes % per_node):
        raise InputError(
            f"--processes-per-node must be at least 1 and divide --processes "
            f"({args.processes}), got {per_node}"
        )
    result = calibrate(
        args.out,
        device=args.device,
        backend=args.backend,
        threads=args.threads,
        quick=args.quick,
        repeats=args.repeats,
        name=args.name,
        progress=False if args.no_progress else None,
        collectives=args.collectives,
        processes=args.processes,
        processes_per_node=per_node,
        force=args.force,
    )
    noise = result.chip.get("calibration", {}).get("noise", {})
    if args.json:
        emit_json(
            {
                "path": result.path,
                "noise": noise,
                "chip": _plain(result.chip),
                "measurements": result.measurements,
            }
        )
    else:
        from shardline.report.predict_text import render_calibration

        sys.stdout.write(render_calibration(result.path, result.chip, len(result.measurements)))
    if noise.get("warning"):
        sys.stderr.write(
            f"warning: {result.path} was written from noisy measurements ([calibration.noise] "
            f"noisy = true): {noise['warning']}; rerun calibrate on an idle machine (--force "
            "replaces the file)\n"
        )
    return 0
