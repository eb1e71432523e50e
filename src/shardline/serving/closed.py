"""Closed-loop load (a benchmark client holding N requests in flight, each sent when the last
one finishes, as `--max-concurrency` / `--concurrency` benchmarks do).

- The steady state (the default): the request rate lam at which Little's law holds,
  N = lam x (mean TTFT + (O - 1) x mean TPOT), found by bisection on the open-loop model; past
  the capacity the rate is the capacity and the extra requests wait: mean TTFT = N / lam -
  (O - 1) x mean TPOT. With chunked prefill the requests of a closed loop drift apart (the k-th
  prompt of the first burst starts decoding k prefills after the first, ends as much later and
  is replaced as much later), so past the first burst a new prompt meets a running batch, as in
  the open loop; NIM's published concurrency sweep of TensorRT-LLM (5,000 in / 500 out, fixed)
  shows it: its mean TTFT at 5 to 50 clients stays within 1.3-2x of one prefill. The open-loop
  model takes Poisson arrivals; a closed loop sends more evenly, so its queueing waits are an
  upper bound there.
- Waves (`waves=True`, fixed lengths): a client that sends all N at once and whose requests stay
  in step (prefill not mixed into decode steps, or a run of one burst): the n = min(N /
  replicas, B) requests of a replica start together, their prompts are prefilled one after
  another in chunks of L = min(n I', chunk) tokens (the k-th prompt's first token after
  ceil(k I' / L) chunk steps of t_p(L) each), then the n decode together; every request ends
  with the last one and all are sent again. A wave lasts W = ceil(n I' / L) t_p(L) + (O - 1)
  t_dec(n, I + O/2); the replica serves n / W requests/s; TTFT_k = ceil(k I' / L) t_p(L) (+ the
  wait for a batch slot when N / replicas > B), and each request's TPOT is what is left of the
  wave over its O - 1 later tokens, (W - TTFT_k) / (O - 1), so that N = X (mean TTFT + (O - 1)
  mean TPOT) holds exactly (Little's law).
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np

from shardline.errors import InputError
from shardline.serving.analytic import Analysis, Replica, Z
from shardline.serving.config import ServeConfig
from shardline.serving.steady import analyze
from shardline.serving.steptimes import StepTimes

__all__ = ["closed_loop", "in_waves", "MAX_CONCURRENCY"]

MAX_CONCURRENCY = 10_000_000  # requests in flight


def _in_flight(a: Analysis, out_tokens: float, replicas: int) -> float:
    return a.requests_per_s * (a.ttft_mean_s + (out_tokens - 1) * a.tpot_s[50]) / replicas


def closed_loop(
    st: StepTimes, cfg: ServeConfig, kv_fraction: float, concurrency: int, waves: bool = False
) -> Analysis:
    """`concurrency` requests always in flight (over all replicas): the steady state where
    Little's law holds, or (`waves`, fixed lengths, colocated replicas) the waves of a client
    whose requests stay in step."""
    if waves:
        fixed = cfg.input_tokens.kind == "fixed" and cfg.output_tokens.kind == "fixed"
        if not fixed or cfg.disagg is not None or cfg.output_tokens.mean <= 1 or cfg.pp > 1:
            raise InputError(
                "--waves prices fixed lengths (--in N --out N, N > 1 output tokens) on colocated "
                "replicas without pipeline stages (--pp 1)"
            )
        return in_waves(st, cfg, kv_fraction, concurrency)
    return _steady(st, cfg, kv_fraction, concurrency)


def _steady(st: StepTimes, cfg: ServeConfig, kv_fraction: float, concurrency: int) -> Analysis:
    replicas = cfg.replicas
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
    extra = ttft - a.ttft_mean_s
    if extra > 0:  # the backlog beyond the model's queue waits for a batch slot: every request
        return replace(
            a,
            ttft_mean_s=ttft,
            ttft_s={q: v + extra for q, v in a.ttft_s.items()},
            queue_wait_s={q: v + extra for q, v in a.queue_wait_s.items()},
        )
    return a


def in_waves(st: StepTimes, cfg: ServeConfig, kv_fraction: float, concurrency: int) -> Analysis:
    """Fixed-length closed loop in waves (the module's docstring has every formula)."""
    replicas = cfg.replicas
    per = concurrency / replicas
    rep = Replica(st, cfg, kv_fraction)
    base = analyze(st, cfg, kv_fraction)
    if rep.limit < 1:
        return replace(base, requests_per_s=0.0, throughput_tokens_per_s=0.0)
    n = int(min(max(math.ceil(per), 1), rep.limit))
    fresh = max(round(rep.mean_in * (1 - cfg.prefix_hit)), 1)
    total = n * fresh
    chunk_len = min(total, cfg.chunk_tokens) if cfg.chunk_tokens else fresh
    t_chunk = float(st.prefill_s(chunk_len))
    chunks = math.ceil(total / chunk_len)
    step = float(rep.t_dec(float(n)))
    out = rep.mean_out
    wave_s = chunks * t_chunk + (out - 1) * step / rep.tau
    x = n / wave_s  # requests/s per replica
    k = np.arange(1, n + 1)
    first = np.ceil(k * fresh / chunk_len) * t_chunk  # TTFT of the k-th prompt in the wave
    queue_s = max(per / x - wave_s, 0.0)  # clients beyond the batch limit wait for a slot
    ttft = first + queue_s
    tpot = (wave_s - first) / (out - 1)
    qs = {q: float(np.quantile(ttft, q / 100)) for q in Z}
    ps = {q: float(np.quantile(tpot, q / 100)) for q in Z}
    busy = min(1.0, x * wave_s / n)
    return replace(
        base,
        saturated=per > rep.limit,
        requests_per_s=x * replicas,
        throughput_tokens_per_s=x * replicas * out,
        input_tokens_per_s=x * replicas * rep.mean_in,
        batch=float(n),
        ttft_s=qs,
        ttft_mean_s=float(np.mean(ttft)),
        tpot_s=ps,
        tpot_mean_s=float(np.mean(tpot)),
        queue_wait_s={q: (queue_s if queue_s > 0 else 0.0) for q in Z},
        step_s=step,
        prefill_s=float(np.mean(first)),
        utilization=busy,
        kv_occupancy=min(1.0, n * rep.kv_per_seq_bytes / rep.kv_budget_bytes)
        if rep.kv_budget_bytes > 0
        else 1.0,
        notes=[*base.notes, f"closed loop in waves of {n} requests per replica ({wave_s:.4g} s)"],
    )
