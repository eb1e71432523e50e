"""`shardline search`: the best parallel layout of a training run over a cluster (every layout of
the registered strategies and the execution knobs, vectorized, re-ranked by the plan engine), or,
with --slo/--rate, the cheapest serving system that meets an SLO (shardline.serving.search)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from shardline.cli.args import add_power_cap_arg
from shardline.cli.common import add_json_arg, emit_json, positive_arg
from shardline.cli.execution_args import add_recompute_arg
from shardline.cli.framework_io import add_emit_args, add_from_arg
from shardline.cli.serving_args import add_figure_output_args
from shardline.errors import InputError

__all__ = ["register"]

DEFAULT_SEQUENCES = 2048  # sequences per step when --global-batch is not given
DEFAULT_SEQ_LEN = 8192
MAX_CHIPS = 64  # chips in one --hw list
# Sequences per step: the search's memory grows with the batch's (dp x microbatch) splits, to
# about 2 GB at 2^20 sequences over 2^24 devices (4.4 GB at 2^27)
MAX_SEQUENCES = 1 << 20


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "search",
        help="the best training layout over a cluster, or the cheapest serving system for an SLO",
        description="Training (--phase training, the default without --slo/--rate): every "
        "layout of the registered strategies (dp, fsdp, tp, pp, ...) and the execution knobs "
        "(microbatches, interleave, sequence parallelism, recompute, ZeRO, tp overlap) on "
        "--devices and fractions of it, evaluated vectorized and re-ranked by the plan engine: "
        "the count and rate, the Pareto front (days vs cost), the best layout and why the "
        "next-best lose. Serving (--slo, --rate): the cheapest chip x devices x layout meeting "
        "the SLO.",
    )
    p.add_argument(
        "--model",
        default=None,
        metavar="NAME",
        help="a zoo model or model .toml (or --from a framework configuration)",
    )
    add_from_arg(p)
    add_emit_args(p)
    p.add_argument(
        "--phase",
        default=None,
        choices=("training", "serving"),
        help="training (default) or serving (the default when --slo or --rate is given)",
    )
    p.add_argument(
        "--hw",
        default=None,
        metavar="LIST",
        help="chips to try, e.g. h100-sxm,h200 (default h100-sxm for training; serving: the "
        "serving search's default)",
    )
    add_power_cap_arg(p)
    p.set_defaults(hw_is_list=True)
    _add_training(p)
    _add_serving(p)
    _add_run(p)
    add_figure_output_args(p)
    add_json_arg(p)
    p.set_defaults(func=run_search)


def _add_training(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("training")
    g.add_argument("--devices", default=None, metavar="D", help="devices in the cluster")
    g.add_argument("--tokens", default=None, metavar="T", help="tokens to train on, e.g. 15T")
    g.add_argument(
        "--seq-len", default=None, metavar="N", help=f"sequence length (default {DEFAULT_SEQ_LEN})"
    )
    g.add_argument(
        "--global-batch",
        default=None,
        metavar="TOKENS",
        help=f"tokens per step, e.g. 16Mi (default {DEFAULT_SEQUENCES} sequences)",
    )
    g.add_argument(
        "--scales",
        default="4",
        metavar="N",
        help="device counts tried: D, D/2, ... (N of them; default 4) for the Pareto front",
    )
    g.add_argument(
        "--fix",
        default=None,
        metavar="LIST",
        help="hold degrees fixed, e.g. tp=8 or tp=8,pp=16 (the rest is searched)",
    )
    add_recompute_arg(g)  # pins the policy; without it none, selective and full are searched
    g.add_argument(
        "--framework",
        default=None,
        metavar="NAME",
        help="the training framework whose defaults every layout runs on where the search does "
        "not try the field itself (gradient dtype, launch mode, attention kernel, optimizer; "
        "default megatron; `shardline framework list`)",
    )
    g.add_argument(
        "--rerank",
        default="12",
        metavar="K",
        help="fastest layouts per chip and device count re-evaluated by the plan engine",
    )


def _add_serving(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("serving")
    g.add_argument("--slo", default=None, metavar="SPEC", help="e.g. ttft=500ms,tpot=30ms")
    g.add_argument("--rate", default=None, metavar="R", help="requests per second, e.g. 20/s")
    g.add_argument("--in", dest="input_tokens", default=None, metavar="I", help="input tokens")
    g.add_argument("--out", dest="output_tokens", default=None, metavar="O", help="output tokens")
    g.add_argument("--max-devices", default=None, metavar="N", help="most devices per system")


def _add_run(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("executor")
    g.add_argument("--workers", default="1", metavar="N", help="local worker processes")
    g.add_argument("--executor", default="local", choices=("local", "dask"))
    g.add_argument("--scheduler", default=None, metavar="ADDRESS", help="Dask scheduler address")
    g.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _progress(args: argparse.Namespace) -> Any:
    if args.json or args.quiet:
        return None

    def show(done: int, total: int) -> None:
        end = "\n" if done == total else ""
        sys.stderr.write(f"\rchunks {done}/{total}{end}")
        sys.stderr.flush()

    return show


def _run_options(args: argparse.Namespace) -> dict[str, Any]:
    from shardline.planning.executors import check_executor

    workers = positive_arg(args.workers, "--workers")
    check_executor(workers, args.executor, args.scheduler)
    if args.executor == "dask":  # fail now, not after the local part of the search
        from shardline.planning.executors import connect

        connect(args.scheduler).close()
    return {
        "workers": workers,
        "executor": args.executor,
        "scheduler": args.scheduler,
        "progress": _progress(args),
    }


def run_search(args: argparse.Namespace) -> int:
    from shardline.cli.figure_outputs import check_figure_outputs

    serving = args.slo is not None or args.rate is not None
    phase = args.phase or ("serving" if serving else "training")
    if phase == "training" and serving:
        raise InputError("--slo and --rate apply to the serving search, not --phase training")
    if (args.model is None) == (args.from_file is None):
        raise InputError("search needs --model NAME or --from FILE (one of them)")
    if phase != "training" and (args.from_file is not None or args.emit is not None):
        raise InputError("--from and --emit apply to the training search")
    outputs = check_figure_outputs(args, [args.model or args.from_file])
    result = _training(args) if phase == "training" else _serving(args)
    if outputs.wanted:
        _write_figures(outputs, args.model or args.from_file, phase, result)
    emitted = result.pop("emit_text", None)
    if emitted is not None and not args.json:
        sys.stdout.write(emitted)  # the configuration alone, to pipe or redirect
        return 0
    if args.json:
        emit_json(result)
    else:
        from shardline.report.search_text import render_serving, render_training

        render = render_training if phase == "training" else render_serving
        sys.stdout.write(render(result))
        if "emit" in result:
            from shardline.report.framework_text import render_emitted

            sys.stdout.write(render_emitted(result["emit"]))
    return 0


def _write_figures(outputs: Any, model: str, phase: str, result: dict[str, Any]) -> None:
    """--plot and --html: the Pareto front, cost against latency."""
    from shardline.report.serve_figures import render_search_plot, search_figures

    title = f"shardline search ({phase}): {model}"
    best = result.get("best") or {}
    summary = [("phase", phase), ("evaluated", f"{result.get('evaluated', 0):,}")]
    summary += [(f"best {k}", str(v)) for k, v in best.items() if not isinstance(v, dict)]
    outputs.write(
        lambda path: render_search_plot(result, path, title),
        lambda: search_figures(result, title),
        title,
        summary,
    )


def _chips(text: str | None, default: list[str], power_cap: str | None = None) -> list[Any]:
    """The chips of --hw (names), each under --power-cap when it is given (Chip objects)."""
    names = _chip_names(text, default)
    if power_cap is None:
        return names
    from shardline.cli.system_args import power_capped

    return [power_capped(name, power_cap) for name in names]


def _chip_names(text: str | None, default: list[str]) -> list[str]:
    if text is None:
        return default
    chips = [c.strip() for c in text.split(",") if c.strip()]
    if not chips:
        raise InputError("--hw needs at least one chip, e.g. h100-sxm,h200")
    twice = next((c for i, c in enumerate(chips) if c.lower() in map(str.lower, chips[:i])), None)
    if twice is not None:
        raise InputError(f"--hw names {twice[:60]!r} twice")
    if len(chips) > MAX_CHIPS:
        raise InputError(f"--hw names {len(chips):,} chips; the limit is {MAX_CHIPS}")
    return chips


def _workload(args: argparse.Namespace, imported: Any = None) -> tuple[Any, Any, int]:
    """The search's workload, its model and its sequence length: --model at --seq-len and
    --global-batch, or --from's model, sequence, batch and dtype (flags given win)."""
    from shardline.basics.units import parse_count
    from shardline.io.workload_toml import workload_from_dict
    from shardline.models import load_model
    from shardline.models.template import transformer_table

    seq_len = imported.seq_len if imported is not None else DEFAULT_SEQ_LEN
    sequences = imported.batch if imported is not None else DEFAULT_SEQUENCES
    if args.seq_len:
        seq_len = positive_arg(args.seq_len, "--seq-len")
    if args.global_batch is not None:
        tokens = parse_count(args.global_batch, "--global-batch")
        sequences = round(tokens / seq_len)
        if sequences < 1:
            raise InputError(
                f"--global-batch {args.global_batch} is less than one sequence of {seq_len:,}"
            )
        if sequences > MAX_SEQUENCES:
            raise InputError(
                f"--global-batch {args.global_batch} is {sequences:,} sequences of {seq_len:,} "
                f"tokens per step; the limit is {MAX_SEQUENCES:,}"
            )
    spec = imported.model if imported is not None else load_model(args.model)
    table = transformer_table(spec, batch=sequences, seq_len=seq_len)
    data = {"name": spec.name, "phase": "training", "transformer": table}
    dtype = imported.dtype if imported is not None else None
    return workload_from_dict(data, origin=f"model {spec.name}", dtype=dtype), spec, seq_len


def _training(args: argparse.Namespace) -> dict[str, Any]:
    from shardline.basics.units import parse_count
    from shardline.planning.train_search import RunOptions, training_search

    if args.devices is None:
        raise InputError("the training search needs --devices D (the cluster's size)")
    for flag in ("input_tokens", "output_tokens", "max_devices"):
        if getattr(args, flag) is not None:
            raise InputError("--in, --out and --max-devices apply to the serving search")
    devices = positive_arg(args.devices, "--devices")
    tokens = float(parse_count(args.tokens, "--tokens")) if args.tokens is not None else None
    imported = None
    if args.from_file is not None:
        from shardline.io.framework_files import read_config

        imported = read_config(args.from_file, devices)
        args.framework = args.framework or imported.execution.get("framework")
    if args.emit is not None and args.framework is None:
        args.framework = args.emit  # the launch is priced with its framework's defaults
    workload, spec, seq_len = _workload(args, imported)
    run = RunOptions(
        **_run_options(args),
        rerank=positive_arg(args.rerank, "--rerank"),
        scales=positive_arg(args.scales, "--scales"),
        fixed=_fixed(args.fix),
        recompute=args.recompute,
        framework=args.framework,
    )
    result = training_search(
        workload,
        _chips(args.hw, ["h100-sxm"], args.power_cap),
        devices,
        tokens=tokens,
        run=run,
    )
    if imported is not None:
        result["from"] = imported.to_dict()
    if args.emit is not None:
        result.update(_emit(args, workload, spec, result, seq_len, imported))
    return result


def _emit(
    args: argparse.Namespace,
    workload: Any,
    spec: Any,
    result: dict[str, Any],
    seq_len: int,
    imported: Any,
) -> dict[str, Any]:
    """--emit of the best layout: {"emit": ...} (with -o) or {"emit_text": ...} to print."""
    from shardline.cli.framework_io import emit_search_best

    if result.get("best") is None:
        raise InputError("--emit: no layout fits, so there is none to write")
    dtype = (imported.dtype if imported is not None else None) or spec.dtype or "bf16"
    emitted = emit_search_best(args, workload, spec, result["best"], (seq_len, dtype))
    if "text" in emitted and not args.json:
        return {"emit_text": emitted["text"]}
    return {"emit": emitted}


def _fixed(text: str | None) -> tuple[tuple[str, int], ...]:
    """`tp=8,pp=16` -> (("tp", 8), ("pp", 16))."""
    if text is None:
        return ()
    out: list[tuple[str, int]] = []
    for item in (x.strip() for x in text.split(",")):
        name, sep, value = item.partition("=")
        if not sep or not name.strip():
            raise InputError(f"--fix takes NAME=DEGREE items, e.g. tp=8,pp=16; got {item!r}")
        if name.strip() in (n for n, _ in out):
            raise InputError(f"--fix gives {name.strip()!r} twice")
        out.append((name.strip(), positive_arg(value.strip(), f"--fix {name.strip()}")))
    return tuple(out)


def _serving(args: argparse.Namespace) -> dict[str, Any]:
    from functools import partial

    from shardline.planning.executors import map_chunks
    from shardline.serving.config import check_tokens
    from shardline.serving.search import serving_search
    from shardline.serving.slo import parse_slo

    if args.recompute is not None:
        raise InputError("--recompute applies to the training search")
    if args.framework is not None:
        raise InputError("--framework applies to the training search")
    if args.power_cap is not None:
        raise InputError("--power-cap applies to the training search (serving takes chip names)")
    given = (("--rate", args.rate), ("--in", args.input_tokens), ("--out", args.output_tokens))
    missing = [flag for flag, value in given if value is None]
    if missing:
        raise InputError(f"the serving search needs {', '.join(missing)}")
    if args.slo is None:
        from shardline.serving.search import NEEDS_SLO

        raise InputError(NEEDS_SLO)
    start = time.perf_counter()
    result = serving_search(
        args.model,
        chips=_chips(args.hw, ["h100-sxm", "h200", "b200", "mi300x"], args.power_cap),
        rate_per_s=_rate(args.rate),
        input_tokens=int(check_tokens(positive_arg(args.input_tokens, "--in"), "--in")),
        output_tokens=int(check_tokens(positive_arg(args.output_tokens, "--out"), "--out")),
        slo=parse_slo(args.slo),
        max_devices=_max_devices(args.max_devices),
        map_chunks=partial(map_chunks, **_run_options(args)),
    )
    elapsed_s = time.perf_counter() - start
    result["elapsed_s"] = elapsed_s
    result["rate_systems_per_s"] = result["evaluated"] / elapsed_s if elapsed_s > 0 else 0.0
    return result


def _max_devices(text: str | None) -> int:
    if text is None:
        return 64
    from shardline.basics.units import check_whole
    from shardline.serving.search import MAX_SERVING_DEVICES

    return check_whole(
        positive_arg(text, "--max-devices"), "--max-devices", most=MAX_SERVING_DEVICES
    )


def _rate(text: str) -> float:
    raw = text.strip().lower().removesuffix("/s")
    try:
        value = float(raw)
    except ValueError:
        raise InputError(f"--rate must be requests per second, e.g. 20/s, got {text!r}") from None
    from shardline.serving.config import check_serving_rate

    return check_serving_rate(value)
