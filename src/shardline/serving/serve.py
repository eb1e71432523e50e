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
from shardline.serving.steptimes import StepTimes, cached_step_times

__all__ = ["ServeOptions", "serve", "max_rate_meeting_slo", "finite", "MAX_USD_PER_HOUR"]

MAX_USD_PER_HOUR = 1e9


@dataclass(frozen=True)
class ServeOptions:
    """How to answer: the engine, the dtype of weights and KV cache, the SLO, whether to run the
    simulation (and over which requests: a trace, or `sim_requests` Poisson arrivals)."""

    engine: str = "trtllm"
    dtype: str = "bf16"
    slo: SLO | None = None
    simulate: bool = False
    trace: Any = None  # simulate.Requests
    sim_requests: int = 2000
    seed: int = 0
    usd_per_hour: float | None = None

    def __post_init__(self) -> None:
        from shardline.serving.runsim import MAX_REQUESTS
        from shardline.serving.simulate import Requests

        for name in ("engine", "dtype"):
            if not isinstance(getattr(self, name), str):
                raise InputError(f"{name} must be a name, got {short(getattr(self, name))}")
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
        a = analyze(st, replace(cfg, rate_per_s=rate), eng.kv_memory_fraction)
        return not a.saturated and slo.met(a.ttft_s[p], a.tpot_s[p])

    cap = analyze(st, cfg, eng.kv_memory_fraction).capacity_requests_per_s
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


def analysis_dict(a: Analysis) -> dict[str, Any]:
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
        "batch": a.batch,
        "batch_limit": a.batch_limit,
        "kv_limit_sequences": a.kv_limit_sequences,
        "kv_occupancy": a.kv_occupancy,
        "utilization": a.utilization,
        "decode_step_s": a.step_s,
        "prefill_s": a.prefill_s,
        "kv_transfer_s": a.kv_transfer_s,
    }


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
    st = cached_step_times(model, hw, cfg.tp, opts.dtype, eng.name)
    a = analyze(st, cfg, eng.kv_memory_fraction)
    out: dict[str, Any] = {
        "model": spec.name,
        "hw": chip.name,
        "engine": eng.name,
        "dtype": opts.dtype,
        "config": config_dict(cfg),
        **analysis_dict(a),
        "notes": list(a.notes),
    }
    if opts.slo is not None:
        out["slo"] = opts.slo.to_dict()
        out["meets_slo"] = not a.saturated and opts.slo.met(
            a.ttft_s[opts.slo.percentile], a.tpot_s[opts.slo.percentile]
        )
        out["max_rate_meeting_slo"] = max_rate_meeting_slo(st, cfg, eng, opts.slo)
    cost = pricing(chip, cfg.devices, a.throughput_tokens_per_s, a.utilization, opts.usd_per_hour)
    out.update({k: v for k, v in cost.items() if k != "notes"})
    usd = cost["usd_per_million_tokens"]  # per million output tokens; below: input + output
    total = a.throughput_tokens_per_s + a.input_tokens_per_s
    out["usd_per_million_total_tokens"] = (
        usd * a.throughput_tokens_per_s / total if usd is not None and total > 0 else None
    )
    out["notes"] += cost["notes"]
    out["engine_sources"] = eng.sources
    if opts.simulate:
        from shardline.serving.runsim import check_simulation_size, simulation_dict

        check_simulation_size(cfg, opts, a.batch)
        out["simulation"] = simulation_dict(st, cfg, eng, opts)
    return out


def config_dict(cfg: ServeConfig) -> dict[str, Any]:
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
    }
