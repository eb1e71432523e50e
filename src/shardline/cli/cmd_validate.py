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
    _add_trace_args(val)
    val.set_defaults(func=run)


def _add_trace_args(val: argparse.ArgumentParser) -> None:
    """`--trace FILE`: a profile of a real run held against the plan of its model and layout
    (the plan's flags, or --from a framework configuration)."""
    from shardline.cli.args import add_power_cap_arg, add_workload_args
    from shardline.cli.execution_args import add_degree_args, add_execution_args
    from shardline.cli.framework_io import add_from_arg

    group = val.add_argument_group("a profile (--trace)")
    group.add_argument(
        "--trace",
        default=None,
        metavar="FILE",
        help="instead: read a profile (a PyTorch profiler / Kineto Chrome-trace JSON, an nsys "
        "stats CSV or its SQLite export, an XLA op-stats CSV), group its kernels (GEMMs, "
        "attention, collectives, the ops between matmuls, idle) and hold each group against the "
        "plan of the model and layout given (WORKLOAD or --model, --devices and the degrees, or "
        "--from FILE); docs/framework-configs.md",
    )
    group.add_argument(
        "--devices", default=None, metavar="D", help="--trace: the run's devices (for its plan)"
    )
    group.add_argument(
        "--steps",
        default=None,
        metavar="N",
        help="--trace: training steps the trace holds (default: its ProfilerStep annotations, "
        "else 1); the prediction is N steps",
    )
    group.add_argument(
        "--html",
        default=None,
        metavar="FILE.html",
        help="--trace: also draw measured against predicted per category as an offline page",
    )
    add_from_arg(val)
    add_workload_args(val)
    add_degree_args(val)
    add_execution_args(val)
    add_power_cap_arg(group)


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

    if args.trace is not None:
        return _run_trace(args)
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


def _trace_plan(args: argparse.Namespace) -> object | None:
    """The plan of the model and layout the flags (or --from) give; None when none is given."""
    from shardline.cli.common import load_from_args, positive_arg
    from shardline.cli.execution_args import plan_options_from_args
    from shardline.cli.framework_io import apply_from
    from shardline.planning.api import plan

    if args.from_file is None and args.model is None and args.workload is None:
        return None
    if args.devices is None:
        raise InputError("validate --trace with a model needs --devices (the run's devices)")
    if args.hw is None:
        raise InputError("validate --trace with a model needs --hw (the run's chip)")
    apply_from(args)
    devices = positive_arg(args.devices, "--devices")
    workload = load_from_args(args)
    options = plan_options_from_args(args)
    result = plan(workload, args.hw, devices, require_fit=False, **options)
    best = result.best()
    if best is None and result.plans:
        best = min(result.plans, key=lambda p: p.predicted_s)
    return best


def _run_trace(args: argparse.Namespace) -> int:
    from shardline.cli.common import positive_arg
    from shardline.io.profile_trace import compare, read_trace
    from shardline.report.framework_text import render_trace

    html = None
    if args.html is not None:
        from shardline.io.tables import check_output_path

        html = check_output_path(args.html, [args.trace], force=args.force, suffixes=(".html",))
    trace = read_trace(args.trace)
    best = _trace_plan(args)
    steps = positive_arg(args.steps, "--steps") if args.steps is not None else trace.steps or 1
    payload = {"trace": args.trace, **compare(trace, best, steps)}
    if html is not None:
        from shardline.cli.common import write_text
        from shardline.report.framework_text import render_trace_html

        write_text(html, render_trace_html(payload))
        payload["html"] = str(html)
    if args.json:
        emit_json(payload)
    else:
        sys.stdout.write(render_trace(payload))
    return 0
