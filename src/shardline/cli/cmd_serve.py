"""`shardline serve`: request-level serving of a zoo model (continuous batching, KV budget,
chunked prefill, prefix caching, speculative decoding, disaggregation): throughput, TTFT and
TPOT percentiles, the largest rate meeting an SLO, and the cost per token."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from shardline.cli.args import add_chip_args, add_json_arg
from shardline.cli.common import emit_json
from shardline.cli.common import positive_arg as _positive
from shardline.cli.serving_args import add_figure_output_args, add_serving_args, launch_line
from shardline.errors import InputError

if TYPE_CHECKING:
    from shardline.serving.config import ServeConfig

__all__ = ["register", "config_from_args", "parse_rate"]

MAX_REQUESTS = 20_000  # simulated Poisson requests per replica (as the disaggregated pools)


def register(sub: argparse._SubParsersAction) -> None:
    sv = sub.add_parser(
        "serve",
        help="request-level serving: throughput, TTFT/TPOT percentiles, SLO, cost per token",
        description="Serve a zoo model at a request rate with continuous batching: analytic "
        "steady state (and --simulate: an event simulation), TTFT and TPOT p50/p90/p99, the "
        "largest rate meeting --slo, $ per million output tokens and joules per token.",
    )
    add_serving_args(sv)
    add_chip_args(sv, dtype=True, power_cap=False)
    g = sv.add_argument_group("engine knobs")
    g.add_argument(
        "--chunk",
        default=None,
        metavar="N",
        help="prefill tokens per step (0: separate prefill steps; default: the engine's)",
    )
    g.add_argument(
        "--prefix-hit",
        default="0",
        metavar="F",
        help="fraction of prompt tokens found in the prefix cache",
    )
    g.add_argument(
        "--spec-decode",
        default=None,
        metavar="K,ALPHA[,DRAFT]",
        help="speculative decoding: k draft tokens, acceptance alpha, and a draft step's cost "
        "over a target step's (default 0: n-gram drafts)",
    )
    g.add_argument(
        "--disagg",
        default=None,
        metavar="P:D",
        help="disaggregated prefill and decode pools of P and D devices",
    )
    g.add_argument(
        "--trace",
        default=None,
        metavar="FILE",
        help="CSV of arrival_s,input_tokens,output_tokens (simulated)",
    )
    g.add_argument(
        "--waves",
        action="store_true",
        help="with --concurrency and fixed lengths: a client whose requests stay in step (all "
        "sent at once, prefilled one after another, ended together)",
    )
    g.add_argument("--simulate", action="store_true", help="also run the event simulation")
    g.add_argument(
        "--requests",
        default="2000",
        metavar="N",
        help="Poisson requests simulated per replica (default 2000)",
    )
    add_figure_output_args(sv)
    add_json_arg(sv)
    sv.set_defaults(func=run_serve)


def _float(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{what}: {text!r} is not a number") from None
    if value != value or value in (float("inf"), float("-inf")):
        raise InputError(f"{what}: {text!r} must be finite")
    return value


def _nonnegative(text: str, what: str) -> int:
    value = _float(text, what)
    if value < 0 or value != int(value):
        raise InputError(f"{what} must be a whole number >= 0, got {text!r}")
    return int(value)


def _at_most(value: int, limit: float, what: str) -> int:
    from shardline.basics.units import check_whole

    return check_whole(value, what, least=0, most=limit)


def _price(text: str | None) -> float | None:
    if text is None:
        return None
    value = _float(text, "--usd-per-hour")
    if not 0 < value <= 1e9:
        raise InputError(f"--usd-per-hour must be positive and at most 1e9, got {text!r}")
    return value


def parse_rate(text: str) -> float:
    """`20`, `20/s` or `1200/min` requests per second."""
    value, _, unit = text.strip().partition("/")
    scale = {"": 1.0, "s": 1.0, "min": 1 / 60, "h": 1 / 3600}.get(unit.strip().lower())
    if scale is None:
        raise InputError(f"--rate: {text!r}: give requests per second, e.g. 20 or 20/s")
    from shardline.serving.config import check_serving_rate

    return check_serving_rate(_float(value, "--rate") * scale)


def _spec(text: str | None) -> tuple[int, float, float]:
    if text is None:
        return 0, 0.0, 0.0
    parts = [p.strip() for p in text.split(",")]
    from shardline.serving.config import MAX_SPEC_K

    if len(parts) not in (2, 3):
        raise InputError("--spec-decode: give K,ALPHA or K,ALPHA,DRAFT_COST, e.g. 4,0.7")
    k = _at_most(_nonnegative(parts[0], "--spec-decode k"), MAX_SPEC_K, "--spec-decode k")
    draft = _float(parts[2], "--spec-decode draft cost") if len(parts) == 3 else 0.0
    return k, _float(parts[1], "--spec-decode alpha"), draft


def _disagg(text: str | None) -> tuple[int, int] | None:
    if text is None:
        return None
    p, sep, d = text.partition(":")
    if not sep:
        raise InputError("--disagg: give P:D devices, e.g. 4:12")
    return _positive(p, "--disagg P"), _positive(d, "--disagg D")


def config_from_args(args: argparse.Namespace, chunk_default: int | None) -> ServeConfig:
    from shardline.serving.config import MAX_BATCH, MAX_TOKENS, ServeConfig, parse_lengths

    k, alpha, draft = _spec(args.spec_decode)
    chunk = chunk_default
    if args.chunk is not None:
        chunk = _at_most(_nonnegative(args.chunk, "--chunk"), MAX_TOKENS, "--chunk")
    disagg = _disagg(args.disagg)
    devices = _positive(args.devices, "--devices")
    if disagg is not None and sum(disagg) != devices:
        raise InputError(f"--disagg {args.disagg}: P + D must equal --devices {devices}")
    concurrency = _concurrency(args)
    tp, ep, adp = _replica(args)
    return ServeConfig(
        rate_per_s=parse_rate(args.rate) if concurrency is None else 1.0,  # closed loop: solved
        input_tokens=parse_lengths(args.input_tokens, "--in"),
        output_tokens=parse_lengths(args.output_tokens, "--out"),
        devices=devices,
        tp=tp,
        max_batch=_at_most(_positive(args.max_batch, "--max-batch"), MAX_BATCH, "--max-batch"),
        chunk_tokens=chunk if chunk else None,
        prefix_hit=_float(args.prefix_hit, "--prefix-hit"),
        spec_k=k,
        spec_alpha=alpha,
        spec_draft_ratio=draft,
        disagg=disagg,
        ep=ep,
        attention_dp=adp,
        pp=_positive(args.pp, "--pp"),
    )


def _replica(args: argparse.Namespace) -> tuple[int, int, int]:
    """(devices of a replica, ep, attention-dp) from --tp, --ep and --attention-dp, read as
    SGLang and TensorRT-LLM read them (--tp is the replica, split by the other two) when both
    divide --tp, else as vLLM reads them (--tp is the attention tensor-parallel size of each of
    --attention-dp ranks: a replica of tp x attention-dp devices, --ep of them for the experts)."""
    tp = _positive(args.tp, "--tp")
    ep = _positive(args.ep, "--ep")
    adp = _positive(args.attention_dp, "--attention-dp")
    if tp % adp == 0 and tp % ep == 0:
        return tp, ep, adp
    replica = tp * adp
    if replica % ep:
        raise InputError(
            f"--ep {ep} divides neither --tp {tp} nor --tp x --attention-dp = {replica}: give "
            "expert-parallel ranks that split the replica"
        )
    return replica, ep, adp


def _concurrency(args: argparse.Namespace) -> int | None:
    """--concurrency N (a closed loop) or --rate R, exactly one."""
    from shardline.serving.closed import MAX_CONCURRENCY

    if (args.rate is None) == (args.concurrency is None):
        raise InputError("serve needs one of --rate R (Poisson arrivals) or --concurrency N")
    if args.concurrency is None:
        return None
    n = _positive(args.concurrency, "--concurrency")
    return _at_most(n, MAX_CONCURRENCY, "--concurrency")


def _write_figures(
    outputs: Any, model: str, hw: str, cfg: Any, options: object, result: dict
) -> None:
    """--plot and --html: the simulation's CDFs and KV occupancy, and the rate sweep, of `model`
    as the user gave it (a model file's path: not the zoo model its name may match)."""
    from functools import cache

    from shardline.report.serve_figures import render_serve_plot, serve_figures, serve_summary
    from shardline.serving.plotdata import serve_plot_data

    data = cache(lambda: serve_plot_data(model, hw, cfg, options))
    outputs.write(
        lambda path: render_serve_plot(data(), path),
        lambda: serve_figures(data()),
        f"shardline serve: {result['model']} on {cfg.devices} x {result['hw']}",
        serve_summary(result),
    )


def run_serve(args: argparse.Namespace) -> int:
    from shardline.cli.figure_outputs import check_figure_outputs
    from shardline.report.serve_text import render_serve
    from shardline.serving.engines import engine
    from shardline.serving.serve import ServeOptions, serve
    from shardline.serving.slo import parse_slo

    for flag in ("flops_per_s", "mem_bw", "compute_dtype"):  # not read by the serving model
        if getattr(args, flag, None) is not None:
            raise InputError(
                f"--{flag.replace('_', '-')} does not apply to serve (its step times use the "
                "chip's own rates); give a chip .toml with --hw for other rates"
            )
    eng = engine(_engine_name(args))
    cfg = config_from_args(args, eng.default_chunk_tokens if eng.chunked_prefill else None)
    cfg = replace(cfg, kv_reservation=eng.kv_reservation)
    if cfg.devices % cfg.replica_devices:
        replica = f"--tp {cfg.tp}" if cfg.pp == 1 else f"--tp x --pp = {cfg.replica_devices}"
        raise InputError(f"--devices {cfg.devices} is not a multiple of {replica}")
    outputs = check_figure_outputs(args, [args.trace, args.model, args.hw])
    trace = None
    if args.trace is not None:
        from shardline.io.serving_trace import read_trace
        from shardline.serving.simulate import Requests

        trace = Requests(*read_trace(args.trace))
    if cfg.disagg is not None and args.concurrency is not None:
        raise InputError("--concurrency prices colocated replicas; drop --disagg or give --rate")
    options = ServeOptions(
        engine=eng.name,
        dtype=args.dtype if getattr(args, "dtype_given", True) else None,
        weight_dtype=args.weight_dtype,
        kv_dtype=args.kv_dtype,
        concurrency=_concurrency(args),
        waves=args.waves,
        slo=parse_slo(args.slo) if args.slo else None,
        simulate=args.simulate or trace is not None,
        trace=trace,
        sim_requests=_at_most(_positive(args.requests, "--requests"), MAX_REQUESTS, "--requests"),
        usd_per_hour=_price(args.usd_per_hour),
    )
    hw = args.hw or args.hw_fallback
    result = serve(args.model, hw, cfg, options)
    if outputs.wanted:
        from shardline.serving.runsim import check_simulation_size

        check_simulation_size(cfg, options, result["batch"])  # the figures simulate too
        _write_figures(outputs, args.model, hw, cfg, options, result)
    if args.emit is not None:
        sys.stdout.write(launch_line(args.emit, args.model, hw, cfg, options))
    elif args.json:
        emit_json(result)
    else:
        sys.stdout.write(render_serve(result))
    return 0


def _engine_name(args: argparse.Namespace) -> str:
    """--engine, or the engine of --emit when --engine is not given (the launch line is priced
    with its own engine's figures)."""
    if args.emit is None:
        return args.engine or "trtllm"
    if args.engine is not None:
        from shardline.serving.engines import engine

        if engine(args.engine).name != args.emit:
            raise InputError(
                f"--emit {args.emit} prints {args.emit}'s command for a configuration priced with "
                f"its own figures; drop --engine {args.engine} or give --engine {args.emit}"
            )
    return args.emit
