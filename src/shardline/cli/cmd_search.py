"""`shardline search`: the best parallel layout of a training run over a cluster (every layout of
the registered strategies and the execution knobs, vectorized, re-ranked by the plan engine), or,
with --slo/--rate, the cheapest serving system that meets an SLO (shardline.serving.search)."""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

from shardline.cli import framework_io as fio
from shardline.cli.args import add_power_cap_arg
from shardline.cli.common import add_json_arg, emit_json, positive_arg
from shardline.cli.execution_args import add_recompute_arg, add_run_knob_args
from shardline.cli.serving_args import add_figure_output_args, add_serving_dtype_args
from shardline.errors import InputError
from shardline.models.template import DEFAULT_SEQ_LEN  # one default with plan --model: 4096

__all__ = ["register"]

# the Execution fields the training search tries itself (planning.train_search.SEARCHED_KNOBS;
# not imported here: the planning package loads only when a search runs)
SEARCHED_FLAGS = frozenset(("interleave", "recompute", "sequence_parallel", "zero", "tp_overlap"))
DEFAULT_SEQUENCES = 2048  # sequences per step when --global-batch is not given
MAX_CHIPS = 64  # chips in one --hw list
# training-only flags with a default: None on the command line, so that the serving search can
# tell a flag that was given (and refuse it) from one that was not
TRAINING_DEFAULTS = {"scales": "4", "rerank": "12"}
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
    fio.add_search_model_args(p)  # --model, or --from a configuration; -o for --emit
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
        default=None,
        metavar="N",
        help="device counts tried: D, D/2, ... (N of them; default 4) for the Pareto front",
    )
    g.add_argument(
        "--fix",
        default=None,
        metavar="LIST",
        help="hold degrees fixed, e.g. tp=8 or tp=8,pp=16 (the rest is searched)",
    )
    g.add_argument(
        "--dtype",
        dest="model_dtype",  # not `dtype`: the CLI fills that from the chip (one chip of a list)
        default=None,
        metavar="D",
        help="the dtype the model computes in, e.g. fp8 (training: default the model file's, "
        "bf16; serving search: default fp8, its weights and KV cache too)",
    )
    g.add_argument(
        "--etp",
        default=None,
        metavar="N",
        help="hold expert tensor parallelism (parallel folding) at N, as --fix etp=N does; "
        "default: each layout's experts on tp and, where tp > 1, folded to etp 1",
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
    # how the model runs, as plan takes it: the knobs the search does not try itself
    add_run_knob_args(g, SEARCHED_FLAGS)
    g.add_argument(
        "--rerank",
        default=None,
        metavar="K",
        help="fastest layouts per chip and device count re-evaluated by the plan engine "
        "(default 12)",
    )
    flags = [(a.option_strings[0], a.dest) for a in g._group_actions if a.option_strings]
    p.set_defaults(training_flags=flags)


def _add_serving(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("serving")
    g.add_argument("--slo", default=None, metavar="SPEC", help="e.g. ttft=500ms,tpot=30ms")
    g.add_argument("--rate", default=None, metavar="R", help="requests per second, e.g. 20/s")
    g.add_argument("--in", dest="input_tokens", default=None, metavar="I", help="input tokens")
    g.add_argument("--out", dest="output_tokens", default=None, metavar="O", help="output tokens")
    g.add_argument("--max-devices", default=None, metavar="N", help="most devices per system")
    g.add_argument(
        "--engine",
        default=None,
        metavar="NAME",
        help="serving engine (NAME or NAME@VERSION): trtllm (default), vllm, sglang, tgi, lmdeploy",
    )
    add_serving_dtype_args(g, fio.FORMATS)
    g.add_argument(
        "--disagg",
        action="store_true",
        help="also search disaggregated prefill:decode pools of each device count",
    )


def _add_run(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("executor")
    g.add_argument("--workers", default="1", metavar="N", help="local worker processes")
    g.add_argument("--executor", default="local", choices=("local", "dask"))
    g.add_argument("--scheduler", default=None, metavar="ADDRESS", help="Dask scheduler address")
    g.add_argument("--quiet", action="store_true", help="no progress on stderr")


def _progress(args: argparse.Namespace) -> object:
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
    fio.check_search_flags(args, phase)
    outputs = check_figure_outputs(args, [args.model or args.from_file])
    result = _training(args) if phase == "training" else _serving(args)
    if phase != "training" and getattr(args, "emit", None) is not None:
        sys.stdout.write(_launch(args, result))
        return 0
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
        sys.stdout.write(render(result) + fio.emitted_text(result))
    return 0


def _write_figures(outputs: Any, model: str, phase: str, result: dict[str, Any]) -> None:
    """--plot and --html: the Pareto front, cost against latency."""
    from shardline.report.serve_figures import render_search_plot, search_figures

    title = f"shardline search ({phase}): {model}"
    best = result.get("best") or {}
    summary = [("phase", phase), ("evaluated", f"{result.get('evaluated', 0):,}")]
    summary += [(f"best {k}", _shown(k, v)) for k, v in best.items() if not isinstance(v, dict)]
    outputs.write(
        lambda path: render_search_plot(result, path, title),
        lambda: search_figures(result, title),
        title,
        summary,
    )


def _shown(key: str, value: object) -> str:
    """A summary value as a person reads it: dollars and other figures to three or four
    significant figures, never a float's seventeen digits."""
    from shardline.basics.units import fmt_usd

    if key.startswith("usd") and isinstance(value, int | float):
        return fmt_usd(value)
    if isinstance(value, float):
        return f"{value:,.4g}"
    return str(value)


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


def _workload(args: argparse.Namespace, imported: Any = None) -> tuple[Any, object, int]:
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
    if args.model_dtype is not None:
        table["dtype"] = args.model_dtype
    data = {"name": spec.name, "phase": "training", "transformer": table}
    dtype = imported.dtype if imported is not None else None
    return workload_from_dict(data, origin=f"model {spec.name}", dtype=dtype), spec, seq_len


def _training(args: argparse.Namespace) -> dict[str, Any]:
    from shardline.basics.units import parse_count
    from shardline.cli.common import count_arg
    from shardline.cli.execution_args import execution_from_args
    from shardline.planning.train_search import RunOptions, training_search

    if args.devices is None:
        raise InputError("the training search needs --devices D (the cluster's size)")
    for flag in ("input_tokens", "output_tokens", "max_devices"):
        if getattr(args, flag) is not None:
            raise InputError("--in, --out and --max-devices apply to the serving search")
    devices = positive_arg(args.devices, "--devices")
    tokens = float(parse_count(args.tokens, "--tokens")) if args.tokens is not None else None
    imported = fio.search_from(args, devices)
    workload, spec, seq_len = _workload(args, imported)
    run = RunOptions(
        **_run_options(args),
        rerank=positive_arg(_given(args.rerank, "rerank"), "--rerank"),
        scales=positive_arg(_given(args.scales, "scales"), "--scales"),
        fixed=_fixed(args.fix),
        recompute=args.recompute,
        framework=args.framework,
        execution=tuple(
            (k, v)
            for k, v in execution_from_args(args).items()
            if k not in ("recompute", "framework", "tokens")  # RunOptions' own fields
        ),
        etp=count_arg(args.etp, "--etp") if args.etp is not None else None,
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
        result.update(fio.search_emit(args, (workload, spec, seq_len), result, imported))
    return result


def _given(value: str | None, flag: str) -> str:
    return TRAINING_DEFAULTS[flag] if value is None else value


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


def _refuse_training_flags(args: argparse.Namespace) -> None:
    """The serving search takes none of the training search's flags: one error line each."""
    if args.recompute is not None:
        raise InputError("--recompute applies to the training search")
    if args.framework is not None:
        raise InputError("--framework applies to the training search")
    if args.power_cap is not None:
        raise InputError("--power-cap applies to the training search (serving takes chip names)")
    for flag, dest in args.training_flags:  # every flag of the training group but --dtype
        if dest != "model_dtype" and getattr(args, dest, None) not in (None, False):
            more = "; the serving search sizes systems up to --max-devices" * (flag == "--devices")
            raise InputError(f"{flag} applies to the training search{more}")


def _serving(args: argparse.Namespace) -> dict[str, Any]:
    from functools import partial

    from shardline.planning.executors import map_chunks
    from shardline.serving.config import check_tokens
    from shardline.serving.engines import engine
    from shardline.serving.search import (
        SEARCH_DTYPE,
        SEARCH_ENGINE,
        SearchOptions,
        serving_search,
    )
    from shardline.serving.slo import parse_slo

    _refuse_training_flags(args)
    given = (("--rate", args.rate), ("--in", args.input_tokens), ("--out", args.output_tokens))
    missing = [flag for flag, value in given if value is None]
    if missing:
        raise InputError(f"the serving search needs {', '.join(missing)}")
    if args.slo is None:
        from shardline.serving.search import NEEDS_SLO

        raise InputError(NEEDS_SLO)
    engine_name = args.engine or args.emit or SEARCH_ENGINE
    if args.emit is not None and engine(engine_name).name != args.emit:
        raise InputError(
            f"--emit {args.emit} prints the best layout priced with {args.emit}'s own figures; "
            f"drop --engine {args.engine} or give --engine {args.emit}"
        )
    dtype = args.model_dtype or (None if args.weight_dtype else SEARCH_DTYPE)
    start = time.perf_counter()
    result = serving_search(
        args.model,
        chips=_chips(args.hw, ["h100-sxm", "h200", "b200", "mi300x"], args.power_cap),
        rate_per_s=_rate(args.rate),
        input_tokens=int(check_tokens(positive_arg(args.input_tokens, "--in"), "--in")),
        output_tokens=int(check_tokens(positive_arg(args.output_tokens, "--out"), "--out")),
        slo=parse_slo(args.slo),
        max_devices=_max_devices(args.max_devices),
        options=SearchOptions(
            engine=engine_name,
            dtype=dtype,
            weight_dtype=args.weight_dtype,
            kv_dtype=args.kv_dtype,
            disagg=args.disagg,
            map_chunks=partial(map_chunks, **_run_options(args)),
        ),
    )
    elapsed_s = time.perf_counter() - start
    result["elapsed_s"] = elapsed_s
    result["rate_systems_per_s"] = result["evaluated"] / elapsed_s if elapsed_s > 0 else 0.0
    return result


def _launch(args: argparse.Namespace, result: dict[str, Any]) -> str:
    """--emit: the launch command of the search's best layout (serve's --emit of it)."""
    from dataclasses import replace

    from shardline.cli.serving_args import launch_line
    from shardline.serving.config import parse_lengths
    from shardline.serving.search import Chunk, layout_config
    from shardline.serving.serve import ServeOptions
    from shardline.serving.slo import parse_slo

    best = result["best"]
    if best is None:
        raise InputError("no layout meets the SLO: nothing to --emit (see the failures)")
    if "pools" in best:
        pools = best["pools"]
        raise InputError(
            f"the best layout runs disaggregated pools ({pools['prefill_devices']} prefill : "
            f"{pools['decode_devices']} decode devices); --emit prints one colocated engine's "
            "command: search without --disagg for it"
        )
    chunk = Chunk(
        model=args.model,
        chip=best["chip"],
        tp=best["tp"],
        rate_per_s=_rate(args.rate),
        input_tokens=parse_lengths(args.input_tokens, "--in"),
        output_tokens=parse_lengths(args.output_tokens, "--out"),
        slo=parse_slo(args.slo),
        max_devices=best["devices"],
        engine=best["engine"],
        dtype=best["dtype"],
        weight_dtype=best["weight_dtype"],
        kv_dtype=best["kv_dtype"],
        attention_dp=best.get("attention_dp", 1),
        pp=best.get("pp", 1),
    )
    cfg = layout_config(chunk, best["devices"], best["max_batch"])
    options = ServeOptions(
        engine=best["engine"],
        dtype=best["dtype"],
        weight_dtype=best["weight_dtype"],
        kv_dtype=best["kv_dtype"],
    )
    return launch_line(args.emit, args.model, best["chip"], replace(cfg), options)


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
