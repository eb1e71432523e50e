"""The simulation side of `serve --simulate`: Poisson arrivals (or a trace) split over the
replicas round-robin, each replica simulated, the figures pooled; disaggregated pools add the
FCFS prefill queue and the KV transfer in front of the decode replicas."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np

from shardline.errors import InputError
from shardline.serving.config import ServeConfig
from shardline.serving.disagg import kv_transfer_s
from shardline.serving.engines import Engine
from shardline.serving.simulate import (
    Requests,
    SimResult,
    fcfs_finish_s,
    poisson_requests,
    simulate_replica,
    summarize,
)
from shardline.serving.steptimes import StepTimes

__all__ = ["simulation_dict", "simulate_system", "check_simulation_size", "MAX_SIM_STEPS"]

TIMELINE_POINTS = 200
MAX_REQUESTS = 20000
# The most engine steps the event simulation is allowed (a step that admits, prefills or
# finishes: a few numpy calls, tens of microseconds; a decode-only step a few microseconds):
# well under a minute; the default 2000 requests take about 300,000 at a moderate load (about
# a second: most are decode-only). A lighter load takes more steps (each request decodes
# nearly alone).
MAX_SIM_STEPS = 400_000
MAX_SIM_REPLICAS = 256  # replicas (and prefill pools) simulated one by one, a few ms each


def _split(reqs: Requests, k: int, parts: int) -> Requests:
    return Requests(
        reqs.arrival_s[k::parts], reqs.input_tokens[k::parts], reqs.output_tokens[k::parts]
    )


def _prefill_pool(st: StepTimes, cfg: ServeConfig, reqs: Requests, pools: int) -> np.ndarray:
    """When each request's KV reaches the decode pool: FCFS prefill per prefill replica
    (round-robin), then the transfer."""
    ready = np.empty_like(reqs.arrival_s)
    for k in range(pools):
        part = _split(reqs, k, pools)
        service = st.prefill_s(part.input_tokens) * (1 - cfg.prefix_hit)
        done = fcfs_finish_s(part.arrival_s, service)
        ready[k::pools] = done + kv_transfer_s(st, part.input_tokens, st.egress_bytes_per_s)
    return ready


def simulate_system(
    st: StepTimes, cfg: ServeConfig, eng: Engine, reqs: Requests
) -> list[tuple[Requests, SimResult]]:
    """Each decode-capable replica's run over its share of `reqs` (original arrivals kept for
    TTFT: a disaggregated request's first token is its KV's arrival)."""
    if cfg.disagg is None:
        replicas = cfg.replicas
        return [
            (part, simulate_replica(st, cfg, st.kv_fraction, part))
            for part in (_split(reqs, k, replicas) for k in range(replicas))
        ]
    rp, rd = cfg.disagg[0] // cfg.tp, cfg.disagg[1] // cfg.tp
    ready = _prefill_pool(st, cfg, reqs, rp)
    order = np.argsort(ready, kind="stable")
    moved = Requests(ready[order], reqs.input_tokens[order], reqs.output_tokens[order])
    runs = []
    for k in range(rd):
        part = _split(moved, k, rd)
        orig = Requests(reqs.arrival_s[order][k::rd], part.input_tokens, part.output_tokens)
        runs.append((orig, simulate_replica(st, cfg, st.kv_fraction, part)))
    return runs


def _pooled(runs: list[tuple[Requests, SimResult]]) -> dict[str, Any]:
    summaries = [summarize(replace(sim, requests=orig)) for orig, sim in runs]
    first = runs[0][1]
    timeline_idx = np.linspace(0, max(len(first.time_s) - 1, 0), TIMELINE_POINTS).astype(int)
    out: dict[str, object] = {
        "replicas_simulated": len(runs),
        "requests": int(sum(len(o.arrival_s) for o, _ in runs)),
        "throughput_tokens_per_s": float(sum(s["throughput_tokens_per_s"] for s in summaries)),
        "requests_per_s": float(sum(s["requests_per_s"] for s in summaries)),
        "mean_batch": float(np.mean([s["mean_batch"] for s in summaries])),
    }
    for key in ("ttft_s", "tpot_s"):
        out[key] = {
            f"p{q}": _nan_none(np.mean([s[key][q] for s in summaries])) for q in (50, 90, 99)
        }
    out["timeline"] = {
        "time_s": first.time_s[timeline_idx].tolist() if len(first.time_s) else [],
        "running": first.running[timeline_idx].tolist() if len(first.time_s) else [],
        "kv_tokens": first.kv_tokens[timeline_idx].tolist() if len(first.time_s) else [],
    }
    return out


def _nan_none(x: float) -> float | None:
    return None if not np.isfinite(x) else float(x)


def _check_replicas(cfg: ServeConfig, opts: Any, n: int) -> None:
    """Each replica simulated gets at least one request, and at most MAX_SIM_REPLICAS (and
    as many prefill pools) are simulated: Poisson arrivals simulate one replica of alike ones;
    a trace, or disaggregated pools, every one."""
    pools = cfg.disagg[0] // cfg.tp if cfg.disagg else 0
    replicas = cfg.disagg[1] // cfg.tp if cfg.disagg else cfg.replicas
    if opts.trace is None and cfg.disagg is None:
        replicas = 1
    if max(replicas, pools) > MAX_SIM_REPLICAS:
        raise InputError(
            f"--simulate: {max(replicas, pools):,} replicas to simulate one by one; the limit is "
            f"{MAX_SIM_REPLICAS}: give fewer --devices (or a larger --tp) to simulate"
        )
    if n < replicas:
        raise InputError(
            f"--simulate: {n:,} requests for {replicas:,} replicas; each needs at least one "
            "(a longer trace, more --requests or fewer --devices)"
        )


def check_simulation_size(cfg: ServeConfig, opts: Any, batch: float) -> None:
    """Refuse a simulation whose expected engine steps pass MAX_SIM_STEPS: every simulated
    request's output tokens over the tokens a step gives the running `batch` (the analytic
    steady state's), plus one step per prompt."""
    if opts.trace is not None:
        n, out = len(opts.trace.output_tokens), float(np.sum(opts.trace.output_tokens))
        prompts = float(np.sum(opts.trace.input_tokens))
    else:
        n = opts.sim_requests
        if cfg.disagg is not None:
            n = min(opts.sim_requests * cfg.disagg[1] // cfg.tp, MAX_REQUESTS)
        out = n * cfg.output_tokens.mean
        prompts = n * cfg.input_tokens.mean
    _check_replicas(cfg, opts, n)
    # prefill: one step per prompt, or (chunked) at least the prompt tokens over the chunk
    uncached = prompts * (1.0 - cfg.prefix_hit)
    prefill = max(n, uncached / cfg.chunk_tokens) if cfg.chunk_tokens else n
    steps = out / cfg.tokens_per_step / max(batch, 1.0) + prefill
    if not steps <= MAX_SIM_STEPS:
        raise InputError(
            f"--simulate: about {steps:,.0f} engine steps to simulate ({n:,} requests of "
            f"{prompts / n:,.0f} prompt and {out / n:,.0f} output tokens at a running batch of "
            f"{max(batch, 1.0):,.1f}); the limit is {MAX_SIM_STEPS:,}: give fewer --requests, "
            "shorter prompts or outputs or a higher --rate, or leave out --simulate"
        )


def simulation_dict(st: StepTimes, cfg: ServeConfig, eng: Engine, opts: Any) -> dict[str, Any]:
    """`serve --simulate`: the trace, or `opts.sim_requests` Poisson arrivals at the config's
    rate (one replica's share simulated per replica)."""
    scale = 1
    if opts.trace is not None:
        reqs, run_cfg = opts.trace, cfg
    elif cfg.disagg is None:  # replicas are alike: simulate one at its share, count them all
        scale = cfg.replicas
        run_cfg = replace(cfg, rate_per_s=cfg.rate_per_s / scale, devices=cfg.replica_devices)
        reqs = poisson_requests(run_cfg, run_cfg.rate_per_s, opts.sim_requests, opts.seed)
    else:
        run_cfg = cfg
        n = min(opts.sim_requests * cfg.disagg[1] // cfg.tp, MAX_REQUESTS)
        reqs = poisson_requests(cfg, cfg.rate_per_s, n, opts.seed)
    out = _pooled(simulate_system(st, run_cfg, eng, reqs))
    for key in ("throughput_tokens_per_s", "requests_per_s"):
        out[key] *= scale
    out["replicas_counted"] = scale * out["replicas_simulated"]
    budget = st.kv_budget_bytes(st.kv_fraction)
    tokens = np.asarray(out["timeline"]["kv_tokens"], float)
    out["timeline"]["kv_occupancy"] = (
        (tokens * st.kv_bytes_per_token / budget).tolist() if budget > 0 else []
    )
    return out
