"""`shardline tile`, `shardline calibrate` and `shardline validate` (realistic prediction)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from shardline.cli.common import add_json_arg, dim_arg, emit_json
from shardline.errors import InputError
from shardline.options import Precision


def register(sub: argparse._SubParsersAction) -> None:
    tl = sub.add_parser(
        "tile",
        help="HBM/L2 traffic, intensity and fit of a tile; the smallest good tile",
        description="Tiling for on-chip memory: HBM and L2 traffic of output-stationary BMxBN "
        "tiles, the tile intensity against each level's ridge, whether the working "
        "set fits the per-SM (per-core) memory, tile and wave quantization, and the "
        "smallest tile that is compute-bound and fits.",
    )
    tl.add_argument("m", metavar="M")
    tl.add_argument("k", metavar="K")
    tl.add_argument("n", metavar="N")
    tl.add_argument("--hw", default="h100-sxm", help="chip name or chip .toml (default h100-sxm)")
    tl.add_argument("--dtype", default="bf16", help="storage dtype of every operand (default bf16)")
    tl.add_argument("--a-dtype", help="storage dtype of A")
    tl.add_argument("--b-dtype", help="storage dtype of B")
    tl.add_argument("--out-dtype", help="storage dtype of C")
    tl.add_argument(
        "--compute-dtype", help="dtype whose rate applies (default: the widest input's)"
    )
    tl.add_argument("--tile", help="BMxBNxBK, e.g. 128x256x64 (default: the tile a library picks)")
    tl.add_argument(
        "--stages",
        type=int,
        default=2,
        help="K-loop buffers in shared memory (default 2: double buffering)",
    )
    tl.add_argument(
        "--peak",
        action="store_true",
        help="ridges from the datasheet peak instead of the achievable rate",
    )
    add_json_arg(tl)
    tl.set_defaults(func=run_tile)

    cal = sub.add_parser(
        "calibrate",
        help="measure this machine and write a chip file (--out host.toml)",
        description="Measure the machine this runs on (CPU with numpy; an NVIDIA GPU with torch "
        "when present) and write a chip file that every command accepts with --hw.",
    )
    cal.add_argument("--out", required=True, help="chip file to write, e.g. host.toml")
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
    cal.add_argument("--repeats", type=int, default=None, help="timed samples per measurement")
    cal.add_argument(
        "--collectives",
        action="store_true",
        help="also measure all-gather, reduce-scatter and all-reduce with "
        "torch.distributed (gloo on CPU, NCCL on GPUs) and fit alpha and the "
        "size-dependent bus efficiency",
    )
    cal.add_argument(
        "--processes",
        type=int,
        default=4,
        help="local processes for --collectives (default 4; torchrun sets its own)",
    )
    cal.add_argument("--force", action="store_true", help="replace --out if it exists")
    cal.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_json_arg(cal)
    cal.set_defaults(func=run_calibrate)

    val = sub.add_parser(
        "validate",
        help="measure a fixed suite here; predicted_s and roofline against measured",
        description="Run a fixed suite of multiplies on this machine (large and small squares, "
        "skinny M, odd sizes, long K; fp32 and a second dtype), measured with "
        "warm-up, repeats and the median, and compare predicted_s and the roofline "
        "with the measurements. Writes PREFIX.csv and PREFIX.png.",
    )
    val.add_argument(
        "--hw",
        default=None,
        help="chip file from `shardline calibrate` (or, on a GPU, a catalog chip)",
    )
    val.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    val.add_argument("--quick", action="store_true", help="a tiny suite (tests, CI)")
    val.add_argument("--repeats", type=int, default=None, help="timed samples per case")
    val.add_argument(
        "--out", default="validate", help="prefix of the CSV and PNG files (default: validate)"
    )
    val.add_argument("--no-plot", action="store_true", help="do not write the PNG plot")
    val.add_argument("--force", action="store_true", help="replace existing output files")
    val.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_json_arg(val)
    val.set_defaults(func=run_validate)


def run_tile(args: argparse.Namespace) -> int:
    from shardline.tiling import analyze_tile

    report = analyze_tile(
        dim_arg(args.m, "M"),
        dim_arg(args.k, "K"),
        dim_arg(args.n, "N"),
        args.hw,
        precision=Precision(
            args.dtype,
            {"a": args.a_dtype, "b": args.b_dtype, "out": args.out_dtype},
            args.compute_dtype,
        ),
        tile=args.tile,
        stages=args.stages,
        use_peak=args.peak,
    )
    if args.json:
        emit_json(report.to_dict())
    else:
        from shardline.report.predict_text import render_tile

        sys.stdout.write(render_tile(report))
    return 0


def _plain(value: Any) -> Any:
    if hasattr(value, "value") and hasattr(value, "source"):
        return {"value": value.value, "source": value.source}
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _progress(args: argparse.Namespace) -> bool | None:
    return False if args.no_progress else None


def run_calibrate(args: argparse.Namespace) -> int:
    from shardline.calibrate import calibrate

    if args.repeats is not None and args.repeats < 1:
        raise InputError("--repeats must be at least 1")
    if args.processes < 2:
        raise InputError("--processes must be at least 2")
    result = calibrate(
        args.out,
        device=args.device,
        backend=args.backend,
        threads=args.threads,
        quick=args.quick,
        repeats=args.repeats,
        name=args.name,
        progress=_progress(args),
        collectives=args.collectives,
        processes=args.processes,
        force=args.force,
    )
    if args.json:
        emit_json(
            {"path": result.path, "chip": _plain(result.chip), "measurements": result.measurements}
        )
    else:
        from shardline.report.predict_text import render_calibration

        sys.stdout.write(render_calibration(result.path, result.chip, len(result.measurements)))
    return 0


def _default_hw(device: str) -> str:
    from pathlib import Path

    if Path("host.toml").exists():
        return "host.toml"
    raise InputError(
        "validate needs --hw: a chip file from `shardline calibrate --out host.toml` "
        "measured on this machine (none given, and no host.toml here)"
    )


def run_validate(args: argparse.Namespace) -> int:
    from shardline.calibrate.chipfile import atomic_write, check_output
    from shardline.validate import validate, write_csv

    if args.repeats is not None and args.repeats < 1:
        raise InputError("--repeats must be at least 1")
    hw = args.hw or _default_hw(args.device)
    inputs = [hw] if hw.endswith(".toml") else []
    csv_path = check_output(f"{args.out}.csv", inputs, force=args.force)
    png_path = None if args.no_plot else check_output(f"{args.out}.png", inputs, force=args.force)
    if png_path is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise InputError(
                "the plot needs matplotlib: pip install 'shardline[plot]' (or pass --no-plot)"
            ) from None
    partial = csv_path.with_name(csv_path.name.removesuffix(".csv") + ".partial.csv")
    result = validate(
        hw,
        device=args.device,
        quick=args.quick,
        repeats=args.repeats,
        progress=_progress(args),
        partial=partial,
    )
    partial.unlink(missing_ok=True)
    write_csv(csv_path, result)
    files = [str(csv_path)]
    if png_path is not None:
        from shardline.report.predict_text import render_plot

        atomic_write(png_path, lambda tmp: render_plot(str(tmp), result))
        files.append(str(png_path))
    if args.json:
        emit_json({**result.to_dict(), "files": files})
    else:
        from shardline.report.predict_text import render_validation

        sys.stdout.write(render_validation(result, files))
    return 0
