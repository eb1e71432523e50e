"""`serve`: one serving setup of a zoo model on a chip, analytic and (optionally) simulated, with
the largest rate that meets an SLO and the cost per token."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Any

from shardline.basics.units import check_real, check_whole, short
from shardline.errors import InputError
from shardline.serving.analytic import Analysis
from shardline.serving.config import ServeConfig
from shardline.serving.engines import Engine, engine
from shardline.serving.slo import SLO
from shardline.serving.steady import analyze
from shardline.serving.steptimes import Split, StepTimes, cached_step_times, serving_dtypes

__all__ = [
    "ServeOptions",
    "serve",
    "serving_step_times",
    "max_rate_meeting_slo",
    "finite",
    "MAX_USD_PER_HOUR",
]

MAX_USD_PER_HOUR = 1e9


@dataclass(frozen=True)
class ServeOptions:
    """How to answer: the engine (NAME or NAME@VERSION), the dtypes (`dtype` the compute,
    `weight_dtype` and `kv_dtype` the stored tensors; None: steptimes.serving_dtypes), the SLO,
    a closed loop of `concurrency` requests in flight instead of the rate, whether to run the
    simulation (and over which requests: a trace, or `sim_requests` Poisson arrivals)."""

    engine: str = "trtllm"
    dtype: str | None = None
    weight_dtype: str | None = None
    kv_dtype: str | None = None
    concurrency: int | None = None
    waves: bool = False  # the closed loop in waves (closed.py), fixed lengths
    slo: SLO | None = None
    simulate: bool = False
    trace: object = None  # simulate.Requests
    sim_requests: int = 2000
    seed: int = 0
    usd_per_hour: float | None = None

    def __post_init__(self) -> None:
        from shardline.serving.closed import MAX_CONCURRENCY
        from shardline.serving.runsim import MAX_REQUESTS
        from shardline.serving.simulate import Requests

        if not isinstance(self.engine, str):
            raise InputError(f"engine must be a name, got {short(self.engine)}")
        for name in ("dtype", "weight_dtype", "kv_dtype"):
            value = getattr(self, name)
            if value is not None and not isinstance(value, str):
                raise InputError(f"{name} must be a dtype name, got {short(value)}")
        if self.concurrency is not None:
            check_whole(self.concurrency, "--concurrency", most=MAX_CONCURRENCY)
        if not isinstance(self.waves, bool) or (self.waves and self.concurrency is None):
            raise InputError("--waves applies to a closed loop: give --concurrency N with it")
        if self.slo is not None and not isinstance(self.slo, SLO):
            raise InputError(f"slo must be an SLO (parse_slo('ttft=500ms')), got {short(self.slo)}")
        if not isinstance(self.simulate, bool):
            raise InputError(f"simulate must be True or False, got {short(self.simulate)}")
        if self.trace is not None and not isinstance(self.trace, Requests):
            raise InputError(f"trace must be simulate.Requests, got {short(self.trace)}")
        check_whole(self.sim_requests, "--requests", most=MAX_REQUESTS)
        check_whole(self.seed, "seed", least=0)
        if self.usd_per_hour is not None:
            price = check_real(self.usd_per_hour, "--usd-per-hour")
            if not 0 < price <= MAX_USD_PER_HOUR:
                raise InputError(
                    f"--usd-per-hour must be positive and at most 1e9, got {self.usd_per_hour!r}"
                )


def finite(x: float) -> float | None:
    """JSON has no infinity: an unbounded time is null."""
    return float(x) if math.isfinite(x) else None


def max_rate_meeting_slo(st: StepTimes, cfg: ServeConfig, eng: Engine, slo: SLO) -> float:
    """The largest total request rate whose TTFT and TPOT at the SLO's percentile meet it, by
    bisection on (0, capacity): both grow with the rate. 0 when even a trickle misses it."""
    p = slo.percentile

    def ok(rate: float) -> bool:
        a = analyze(st, replace(cfg, rate_per_s=rate), st.kv_fraction)
        return not a.saturated and slo.met(a.ttft_s[p], a.tpot_s[p])

    cap = analyze(st, cfg, st.kv_fraction).capacity_requests_per_s
    lo, hi = 0.0, cap
    if cap <= 0 or not ok(cap * 1e-4):
        return 0.0
    lo = cap * 1e-4
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid)
    return lo


def _quantiles(values: dict[int, float]) -> dict[str, float | None]:
    """{q: t} as {"p<q>": t}, None for unbounded."""
    return {f"p{q}": finite(v) for q, v in sorted(values.items())}


def analysis_dict(a: Analysis) -> dict[str, object]:
    """The steady state's figures under their JSON keys (SI units; None for unbounded)."""
    return {
        "saturated": a.saturated,
        "capacity_requests_per_s": a.capacity_requests_per_s,
        "requests_per_s": a.requests_per_s,
        "throughput_tokens_per_s": a.throughput_tokens_per_s,
        "input_tokens_per_s": a.input_tokens_per_s,
        "ttft_s": _quantiles(a.ttft_s),
        "tpot_s": _quantiles(a.tpot_s),
        "queue_wait_s": _quantiles(a.queue_wait_s),
        "ttft_mean_s": finite(a.ttft_mean_s),
        "tpot_mean_s": finite(a.tpot_s[50] if a.tpot_mean_s is None else a.tpot_mean_s),
        "batch": a.batch,
        "mean_context_tokens": a.context_tokens,
        "batch_limit": a.batch_limit,
        "kv_limit_sequences": _whole(a.kv_limit_sequences),  # whole sequences the KV budget holds
        "kv_occupancy": a.kv_occupancy,
        "utilization": a.utilization,
        "decode_step_s": a.step_s,
        "prefill_s": a.prefill_s,
        "kv_transfer_s": a.kv_transfer_s,
    }


def serving_step_times(model: str, hw: str, cfg: ServeConfig, opts: ServeOptions) -> StepTimes:
    """The step times `serve` prices `cfg` with (shared by its figures and the search)."""
    from shardline.hardware import resolve_chip

    chip = resolve_chip(hw)
    compute, weights, kv = serving_dtypes(chip, opts.dtype, opts.weight_dtype, opts.kv_dtype)
    name = engine(opts.engine).name
    split = Split(cfg.attention_dp, cfg.pp)
    return cached_step_times(model, hw, cfg.tp, compute, name, weights, kv, split)


def serve(
    model: str, hw: str, cfg: ServeConfig, options: ServeOptions | None = None
) -> dict[str, Any]:
    """The whole answer as one JSON-ready dict (SI units)."""
    from shardline.hardware import resolve_chip
    from shardline.models import load_model
    from shardline.serving.pricing import pricing

    if not isinstance(cfg, ServeConfig):
        raise InputError(f"serve needs a ServeConfig, got {short(cfg)}")
    if options is not None and not isinstance(options, ServeOptions):
        raise InputError(f"options must be a ServeOptions, got {short(options)}")
    if not isinstance(model, str):
        raise InputError(f"model must be a zoo name or a file, got {short(model)}")
    opts = options or ServeOptions()
    eng = engine(opts.engine)
    spec, chip = load_model(model), resolve_chip(hw)
    st = serving_step_times(model, hw, cfg, opts)
    compute, weights, kv = serving_dtypes(chip, opts.dtype, opts.weight_dtype, opts.kv_dtype)
    open_loop = analyze(st, cfg, st.kv_fraction)
    _check_room(
        open_loop, st, cfg, f"{spec.name} ({weights} weights, {kv} KV cache) on {chip.name}"
    )
    a, cfg = _steady_state(st, cfg, opts, open_loop)
    out: dict[str, object] = {
        "model": spec.name,
        "hw": chip.name,
        "engine": eng.name,
        "engine_version": eng.version,
        "dtype": compute,
        "weight_dtype": weights,
        "kv_dtype": kv,
        "config": {**config_dict(cfg), "concurrency": opts.concurrency, "waves": opts.waves},
        **analysis_dict(a),
        "kv_budget_bytes": st.kv_budget_bytes(),
        "kv_memory_fraction": st.kv_fraction,
        "kv_budget_rule": eng.kv_budget_rule,
        "notes": list(a.notes) + _layout_notes(cfg, eng, weights, compute, a.batch),
    }
    if opts.slo is not None:
        out["slo"] = opts.slo.to_dict()
        out["meets_slo"] = not a.saturated and opts.slo.met(
            a.ttft_s[opts.slo.percentile], a.tpot_s[opts.slo.percentile]
        )
        out["max_rate_meeting_slo"] = max_rate_meeting_slo(st, cfg, eng, opts.slo)
    _add_cost(
        out,
        pricing(chip, cfg.devices, a.throughput_tokens_per_s, a.utilization, opts.usd_per_hour),
        a,
    )
    out["engine_sources"] = eng.sources
    if opts.simulate:
        from shardline.serving.runsim import check_simulation_size, simulation_dict

        check_simulation_size(cfg, opts, a.batch)
        out["simulation"] = simulation_dict(st, cfg, eng, opts)
    return out


def _check_room(a: Analysis, st: StepTimes, cfg: ServeConfig, what: str) -> None:
    """One clear error when the engine's KV budget holds no request at all (the weights leave no
    room; `a` the open loop at the config's rate): every rate, concurrency and figure would be 0
    or undefined."""
    if a.kv_limit_sequences >= 1:
        return
    budget = st.kv_budget_bytes()
    raise InputError(
        f"{what}: the KV budget of a replica of {cfg.replica_devices} devices ({budget / 1e9:.3g} "
        "GB by the engine's rule) holds no request; give the replica more devices (--tp, --pp), "
        "narrower "
        "weights or cache (--weight-dtype, --kv-dtype) or a chip with more memory"
    )


def _steady_state(
    st: StepTimes, cfg: ServeConfig, opts: ServeOptions, open_loop: Analysis
) -> tuple[Analysis, ServeConfig]:
    """The open loop at the config's rate, or the closed loop of `opts.concurrency` requests
    (the config then carries the rate it serves)."""
    if opts.concurrency is None:
        return open_loop, cfg
    from shardline.serving.closed import closed_loop

    a = closed_loop(st, cfg, st.kv_fraction, opts.concurrency, opts.waves)
    return a, replace(cfg, rate_per_s=max(a.requests_per_s, 1e-9))


def _add_cost(out: dict[str, object], cost: dict[str, Any], a: Analysis) -> None:
    """The price and energy figures, and the same dollars per million input + output tokens."""
    out.update({k: v for k, v in cost.items() if k != "notes"})
    usd = cost["usd_per_million_tokens"]  # per million output tokens; below: input + output
    total = a.throughput_tokens_per_s + a.input_tokens_per_s
    out["usd_per_million_total_tokens"] = (
        usd * a.throughput_tokens_per_s / total if usd is not None and total > 0 else None
    )
    out["notes"] += cost["notes"]


def _layout_notes(
    cfg: ServeConfig, eng: Engine, weights: str, compute: str, batch: float
) -> list[str]:
    """What the pricing assumed about the layout and the dtypes, in words."""
    from shardline.basics.dtypes import dtype_bits

    notes = []
    if cfg.attention_dp > 1 or cfg.ep > 1:
        notes.append(
            f"experts priced split over the replica's {cfg.tp} devices as "
            f"{cfg.tp // cfg.attention_dp}-way tensor x {cfg.attention_dp}-way expert parallel "
            f"(the plan's tp x ep; --ep {cfg.ep} is the engine's flag); attention on "
            f"{cfg.attention_dp} data-parallel ranks of tp {cfg.tp // cfg.attention_dp}"
        )
    if cfg.pp > 1:
        notes.append(
            f"{cfg.pp} pipeline stages of tp {cfg.tp} per replica, each holding 1/{cfg.pp} of "
            f"the layers and their KV cache; {cfg.pp} microbatches in flight: a decode step is "
            f"{cfg.pp} stage times"
        )
    if dtype_bits(weights) < dtype_bits(compute):
        notes.append(f"{weights} weights dequantized to compute in {compute}")
    if eng.cuda_graph_max_batch and batch > eng.cuda_graph_max_batch:
        notes.append(
            f"{eng.name} captures CUDA graphs up to batch {eng.cuda_graph_max_batch}; larger "
            "decode steps run without them (priced as with them)"
        )
    return notes


def config_dict(cfg: ServeConfig) -> dict[str, object]:
    """The setup as given, with tau = (1 - alpha^(k+1)) / (1 - alpha) tokens per step."""
    return {
        "rate_per_s": cfg.rate_per_s,
        "input_tokens": cfg.input_tokens.label(),
        "output_tokens": cfg.output_tokens.label(),
        "devices": cfg.devices,
        "tp": cfg.tp,
        "max_batch": cfg.max_batch,
        "chunk_tokens": cfg.chunk_tokens,
        "prefix_hit": cfg.prefix_hit,
        "spec_decode": {
            "k": cfg.spec_k,
            "alpha": cfg.spec_alpha,
            "draft_ratio": cfg.spec_draft_ratio,
        },
        "tokens_per_step": cfg.tokens_per_step,
        "disagg": list(cfg.disagg) if cfg.disagg else None,
        "ep": cfg.ep,
        "attention_dp": cfg.attention_dp,
        "pp": cfg.pp,
    }


def _whole(count: float) -> float | int | None:
    """A count of whole sequences: floor of a finite count (an unbounded one stays as it is)."""
    return math.floor(count) if math.isfinite(count) else finite(count)
