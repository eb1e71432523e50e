"""What `serve --plot/--html` draws, as numbers (numpy; no plotting here):

- per-request TTFT and TPOT samples of the event simulation (the requests admitted after the
  first 20%, as `simulate.summarize` counts them), for their CDFs;
- the KV cache's occupied fraction over time of the first simulated replica;
- a sweep of request rates from 5% to 98% of the analytic capacity: throughput against TTFT and
  TPOT (p50 and p99) of the analytic steady state, the latency-throughput curve up to saturation.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from shardline.serving.config import ServeConfig
from shardline.serving.engines import Engine, engine
from shardline.serving.runsim import simulate_system
from shardline.serving.simulate import Requests, SimResult, poisson_requests
from shardline.serving.steady import analyze
from shardline.serving.steptimes import StepTimes

__all__ = ["ServePlotData", "serve_plot_data", "rate_sweep", "SWEEP_FRACTIONS"]

SWEEP_FRACTIONS = tuple(float(x) for x in np.linspace(0.05, 0.98, 20))
WARMUP = 0.2


@dataclass
class ServePlotData:
    """Samples and curves of one serving setup; times in seconds."""

    title: str
    ttft_s: np.ndarray
    tpot_s: np.ndarray
    kv_time_s: np.ndarray
    kv_fraction: np.ndarray
    sweep: dict[str, np.ndarray] = field(default_factory=dict)  # rate_per_s, throughput, ...


def rate_sweep(
    st: StepTimes, cfg: ServeConfig, kv_fraction: float, fractions: tuple[float, ...]
) -> dict[str, np.ndarray]:
    """The analytic steady state at `fractions` of the capacity: total request rate, output
    tokens/s, TTFT and TPOT p50 and p99."""
    cap = analyze(st, cfg, kv_fraction).capacity_requests_per_s
    keys = ("rate_per_s", "throughput_tokens_per_s", "ttft_p50_s", "ttft_p99_s")
    rows: dict[str, list[float]] = {k: [] for k in (*keys, "tpot_p50_s", "tpot_p99_s")}
    for f in fractions if cap > 0 else ():
        a = analyze(st, replace(cfg, rate_per_s=cap * f), kv_fraction)
        if a.saturated or not np.isfinite(a.ttft_s[99]):
            continue
        rows["rate_per_s"].append(cap * f)
        rows["throughput_tokens_per_s"].append(a.throughput_tokens_per_s)
        rows["ttft_p50_s"].append(a.ttft_s[50])
        rows["ttft_p99_s"].append(a.ttft_s[99])
        rows["tpot_p50_s"].append(a.tpot_s[50])
        rows["tpot_p99_s"].append(a.tpot_s[99])
    return {k: np.asarray(v, dtype=float) for k, v in rows.items()}


def _requests(cfg: ServeConfig, trace: Any, n: int, seed: int) -> tuple[ServeConfig, Requests]:
    """One replica's share of Poisson arrivals (replicas are alike), or the trace, or, with
    disaggregation, the whole system's arrivals."""
    if trace is not None:
        return cfg, trace
    if cfg.disagg is None:
        share = cfg.replicas
        run = replace(cfg, rate_per_s=cfg.rate_per_s / share, devices=cfg.replica_devices)
        return run, poisson_requests(run, run.rate_per_s, n, seed)
    return cfg, poisson_requests(cfg, cfg.rate_per_s, n * (cfg.disagg[1] // cfg.tp), seed)


def samples(runs: list[tuple[Requests, SimResult]]) -> tuple[np.ndarray, np.ndarray]:
    ttft, tpot = [], []
    for orig, sim in runs:
        a, admitted = orig.arrival_s, sim.admitted_s
        if len(a) == 0:
            continue
        t0 = admitted[int(WARMUP * (len(a) - 1))]
        inside = (admitted >= t0) & ~np.isnan(sim.finish_s)
        ttft.append(sim.first_token_s[inside] - a[inside])
        out = np.maximum(orig.output_tokens[inside] - 1, 1)
        tpot.append((sim.finish_s[inside] - sim.first_token_s[inside]) / out)
    empty = np.zeros(0)
    return (np.concatenate(ttft) if ttft else empty), (np.concatenate(tpot) if tpot else empty)


def plot_data_from_steps(
    st: StepTimes, cfg: ServeConfig, eng: Engine, opts: Any, title: str
) -> ServePlotData:
    """The plot data of `cfg` with one replica's step times `st` (ServeOptions `opts`)."""
    run_cfg, reqs = _requests(cfg, opts.trace, opts.sim_requests, opts.seed)
    runs = simulate_system(st, run_cfg, eng, reqs)
    ttft, tpot = samples(runs)
    first = runs[0][1]
    budget = st.kv_budget_bytes(st.kv_fraction)
    frac = first.kv_tokens * st.kv_bytes_per_token / budget if budget > 0 else first.kv_tokens * 0
    return ServePlotData(
        title=title,
        ttft_s=ttft,
        tpot_s=tpot,
        kv_time_s=np.asarray(first.time_s, dtype=float),
        kv_fraction=np.asarray(frac, dtype=float),
        sweep=rate_sweep(st, cfg, st.kv_fraction, SWEEP_FRACTIONS),
    )


def serve_plot_data(model: str, hw: str, cfg: ServeConfig, opts: Any) -> ServePlotData:
    """Price `model` on `hw` as `serve` does and gather what its plots draw."""
    from shardline.hardware import resolve_chip
    from shardline.models import load_model
    from shardline.serving.serve import serving_step_times

    eng = engine(opts.engine)
    spec, chip = load_model(model), resolve_chip(hw)
    st = serving_step_times(model, hw, cfg, opts)
    title = (
        f"{spec.name} on {cfg.devices} x {chip.name} (tp {cfg.tp}"
        f"{f', pp {cfg.pp}' if cfg.pp > 1 else ''}), {eng.name}, "
        f"{cfg.rate_per_s:g} req/s, in {cfg.input_tokens.label()} / out "
        f"{cfg.output_tokens.label()}"
    )
    return plot_data_from_steps(st, cfg, eng, opts, title)
