"""`shardline validate --hw host.toml`: measure a fixed suite here and compare predicted_s and the
roofline with the measured times; writes PREFIX.csv and PREFIX.png."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from shardline.cli.args import add_force_arg, add_json_arg
from shardline.cli.common import emit_json
from shardline.errors import InputError

__all__ = ["register", "run"]


def register(sub: argparse._SubParsersAction) -> None:
    val = sub.add_parser(
        "validate",
        help="measure a fixed suite here; predicted_s and roofline against measured",
        description="Run a fixed suite of multiplies on this machine (large and small squares, "
        "skinny M, odd sizes, long K; fp32 and a second dtype), measured with "
        "warm-up, repeats and the median, and compare predicted_s and the roofline "
        "with the measurements. Writes PREFIX.csv and PREFIX.png (the plot is skipped, "
        "with a note, when matplotlib is not installed). The machine's noise is reported "
        "beside the verdict, which is marked inconclusive on a noisy or changed machine.",
    )
    val.add_argument(
        "--hw",
        default=None,
        help="chip file from `shardline calibrate` (or, on a GPU, a catalog chip)",
    )
    val.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    val.add_argument("--quick", action="store_true", help="a tiny suite (tests, CI)")
    val.add_argument(
        "--repeats",
        type=int,
        default=None,
        help="timed samples per case, all taken (default 9, fewer when the 20 s budget runs "
        "out on a busy machine; never fewer than 3)",
    )
    val.add_argument(
        "--out", default="validate", help="prefix of the CSV and PNG files (default: validate)"
    )
    val.add_argument("--no-plot", action="store_true", help="do not write the PNG plot")
    val.add_argument(
        "--collectives",
        action="store_true",
        help="instead: run the collective sweep of `calibrate --collectives` here and compare "
        "each (kind, size) with the prediction on --hw; --out is the CSV",
    )
    val.add_argument("--processes", type=int, default=None, help="--collectives: local processes")
    val.add_argument(
        "--processes-per-node", type=int, default=None, help="--collectives: processes per node"
    )
    add_force_arg(val, "existing output files")
    val.add_argument("--no-progress", action="store_true", help="no progress bar on stderr")
    add_json_arg(val)
    val.set_defaults(func=run)


def _default_hw() -> str:
    if Path("host.toml").exists():
        return "host.toml"
    raise InputError(
        "validate needs --hw: a chip file from `shardline calibrate --out host.toml` "
        "measured on this machine (none given, and no host.toml here)"
    )


PLOT_SKIPPED = "plot skipped: matplotlib is not installed (pip install 'shardline[plot]')"


def _outputs(args: argparse.Namespace, hw: str) -> tuple[Path, Path | None, str | None]:
    """The CSV and PNG paths, checked before any measurement, and why the plot is skipped (None
    when it is drawn): without matplotlib the CSV is still written and the plot is skipped."""
    from shardline.calibrate.chipfile import check_output

    inputs = [hw] if hw.endswith(".toml") else []
    csv_path = check_output(f"{args.out}.csv", inputs, force=args.force)
    png_path = None if args.no_plot else check_output(f"{args.out}.png", inputs, force=args.force)
    if png_path is not None:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            return csv_path, None, PLOT_SKIPPED
    return csv_path, png_path, None


def run(args: argparse.Namespace) -> int:
    from shardline.calibrate.chipfile import atomic_write
    from shardline.calibrate.validate import validate, write_csv

    if args.collectives:
        from shardline.calibrate.validate_collectives import run_from_args

        payload, text = run_from_args(args)
        if args.json:
            emit_json(payload)
        else:
            sys.stdout.write(text)
        return 0
    if args.repeats is not None and args.repeats < 1:
        raise InputError("--repeats must be at least 1")
    hw = args.hw or _default_hw()
    csv_path, png_path, skipped = _outputs(args, hw)
    partial = csv_path.with_name(csv_path.name.removesuffix(".csv") + ".partial.csv")
    result = validate(
        hw,
        device=args.device,
        quick=args.quick,
        repeats=args.repeats,
        progress=False if args.no_progress else None,
        partial=partial,
    )
    write_csv(csv_path, result)  # (a partial CSV there is left: a run that ends wrote none)
    files = [str(csv_path)]
    if png_path is not None:
        from shardline.report.predict_text import render_plot

        atomic_write(png_path, lambda tmp: render_plot(str(tmp), result))
        files.append(str(png_path))
    if args.json:
        emit_json({**result.to_dict(), "files": files, "plot_skipped": skipped})
    else:
        from shardline.report.predict_text import render_validation

        sys.stdout.write(render_validation(result, files))
        if skipped:
            sys.stdout.write(f"  {skipped}; the CSV has every number\n")
    warning = result.summary.get("noise", {}).get("warning")
    if warning:
        sys.stderr.write(f"warning: verdict not conclusive: {warning}\n")
    return 0
