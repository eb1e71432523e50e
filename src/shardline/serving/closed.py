"""Closed-loop load (a benchmark client holding N requests in flight, each sent when the last
one finishes): the request rate lam at which Little's law holds, N = lam x (mean TTFT + (O - 1)
x mean TPOT), found by bisection on the open-loop model; past the capacity the rate is the
capacity and the extra requests wait: mean TTFT = N / lam - (O - 1) x mean TPOT.

The open-loop model takes Poisson arrivals; a closed loop sends more evenly, so the model's
queueing waits are an upper bound there."""

from __future__ import annotations

from dataclasses import replace

from shardline.serving.analytic import Analysis
from shardline.serving.config import ServeConfig
from shardline.serving.steady import analyze
from shardline.serving.steptimes import StepTimes

__all__ = ["closed_loop"]


def _in_flight(a: Analysis, out_tokens: float, replicas: int) -> float:
    return a.requests_per_s * (a.ttft_mean_s + (out_tokens - 1) * a.tpot_s[50]) / replicas


def closed_loop(st: StepTimes, cfg: ServeConfig, kv_fraction: float, concurrency: int) -> Analysis:
    """The steady state with `concurrency` requests always in flight (over all replicas)."""
    replicas = cfg.devices // cfg.tp
    per = concurrency / replicas
    out = cfg.output_tokens.mean
    cap = analyze(st, cfg, kv_fraction).capacity_requests_per_s
    lo, hi = 0.0, cap
    for _ in range(60):
        mid = (lo + hi) / 2
        a = analyze(st, replace(cfg, rate_per_s=max(mid, 1e-9)), kv_fraction)
        busy = a.saturated or _in_flight(a, out, 1) / replicas >= per
        lo, hi = (lo, mid) if busy else (mid, hi)
    a = analyze(st, replace(cfg, rate_per_s=max(lo, 1e-9)), kv_fraction)
    response_s = concurrency / a.requests_per_s
    ttft = max(response_s - (out - 1) * a.tpot_s[50], 0.0)
    if a.ttft_mean_s < ttft:  # the backlog beyond the model's queue waits for a batch slot
        return replace(a, ttft_mean_s=ttft)
    return a
