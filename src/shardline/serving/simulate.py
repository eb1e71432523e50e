"""A small discrete-event simulation of one replica, engine step by engine step (numpy over the
running set; a stretch of decode-only steps on Python scalars, `_decode_stretch`), of the same
setup as the analytic model: Poisson arrivals (or a trace), FCFS admission up to the batch limit
(the max batch and the KV limit of the analytic model), chunked prefill (a token budget per step,
oldest prompt first) or separate prefill steps, and decode steps priced by the same engine steps
at the running set's mean context (DecodeLine). Speculative decoding adds the expected tokens per
step (no sampling of acceptances); disaggregated pools: an FCFS prefill queue per prefill replica
(Lindley's recursion, vectorized) then the KV transfer, then a decode replica."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from shardline.serving.analytic import Replica
from shardline.serving.config import BLOCK_TOKENS, ServeConfig
from shardline.serving.steptimes import StepTimes

__all__ = [
    "Requests",
    "SimResult",
    "DecodeLine",
    "simulate_replica",
    "poisson_requests",
    "fcfs_finish_s",
]


@dataclass
class Requests:
    """Arrival times (s, sorted), prompt and output tokens of each request."""

    arrival_s: np.ndarray
    input_tokens: np.ndarray
    output_tokens: np.ndarray


@dataclass
class SimResult:
    """Per-request first-token and finish times, and the occupancy over time."""

    requests: Requests
    first_token_s: np.ndarray
    finish_s: np.ndarray
    time_s: np.ndarray  # at the end of each step
    running: np.ndarray  # sequences in the batch during the step
    kv_tokens: np.ndarray  # KV tokens held (whole blocks) during the step
    generated: np.ndarray  # output tokens generated so far (cumulative)
    admitted_s: np.ndarray  # when each request joined the batch


def poisson_requests(cfg: ServeConfig, rate_per_s: float, n: int, seed: int = 0) -> Requests:
    """`n` requests of a Poisson process of `rate_per_s`, lengths drawn from the config."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / rate_per_s, n))
    return Requests(arrivals, cfg.input_tokens.sample(rng, n), cfg.output_tokens.sample(rng, n))


def fcfs_finish_s(arrival_s: np.ndarray, service_s: np.ndarray) -> np.ndarray:
    """Finish times of one FCFS server (Lindley): f_i = max(a_i, f_{i-1}) + s_i, vectorized as
    f_i = C_i + max_{j<=i}(a_j - C_{j-1}) with C the cumulative service."""
    c = np.cumsum(service_s)
    before = np.concatenate(([0.0], c[:-1]))
    return c + np.maximum.accumulate(arrival_s - before)


class _State:
    def __init__(self, reqs: Requests, prefill_done: bool) -> None:
        n = len(reqs.arrival_s)
        self.todo = np.zeros(n) if prefill_done else reqs.input_tokens.astype(float).copy()
        self.gen = np.where(self.todo > 0, 0.0, 1.0)  # a prefilled request has its first token
        self.first = np.where(self.todo > 0, np.nan, reqs.arrival_s)
        self.finish = np.full(n, np.nan)
        self.admitted = np.full(n, np.nan)
        self.running = np.zeros(0, dtype=int)
        self.next_arrival = 0
        self.log: list[tuple[float, int, float, float]] = []
        self.total = 0.0


def _admit(s: _State, reqs: Requests, t: float, limit: int) -> None:
    """FCFS: every arrived request that finds a free batch slot joins the running set."""
    arrived = int(np.searchsorted(reqs.arrival_s, t, side="right"))
    free = limit - len(s.running)
    take = min(free, arrived - s.next_arrival)
    if take > 0:
        new = np.arange(s.next_arrival, s.next_arrival + take)
        s.admitted[new] = t
        s.running = np.concatenate((s.running, new))
        s.next_arrival += take


class DecodeLine:
    """The decode step of n sequences at the running set's mean context c, any real in
    [lo, hi], the whole-token contexts that bound a run. At a fixed batch the engine's decode
    step is affine in the context (each attention layer reads c tokens of KV per sequence), so
    t(n, c) = t(n, lo) + (c - lo) (t(n, hi) - t(n, lo)) / (hi - lo) is the engine's step at
    every c, from its whole points at lo and hi; a third, at m = (lo + hi) // 2, checks it: where
    the line misses t(n, m) by more than 1e-9 of it (a model whose attention does not read the
    whole context), the step is the engine's at the whole context round(c)."""

    def __init__(self, st: StepTimes, lo: int, hi: int) -> None:
        self.st, self.lo, self.hi = st, int(lo), max(int(hi), int(lo) + 1)
        self._lines: dict[int, tuple[float, float] | None] = {}

    def step_s(self, n: int, c: float) -> float:
        """t(n, c) in seconds (n >= 1 whole)."""
        if n not in self._lines:
            st, lo, hi = self.st, self.lo, self.hi
            t_lo, t_hi = st.decode_at(n, lo), st.decode_at(n, hi)
            slope = (t_hi - t_lo) / (hi - lo)
            mid = (lo + hi) // 2
            t_mid = st.decode_at(n, mid)
            affine = abs(t_lo + (mid - lo) * slope - t_mid) <= 1e-9 * t_mid
            self._lines[n] = (t_lo, slope) if affine else None
        line = self._lines[n]
        if line is None:
            return self.st.decode_at(n, max(round(c), 1))
        return line[0] + (c - self.lo) * line[1]


def _step(
    s: _State, rep: Replica, reqs: Requests, per_token_s: np.ndarray, line: DecodeLine
) -> tuple[float, np.ndarray, np.ndarray]:
    """One engine step over the running set: its duration; updates prefill and decode."""
    cfg, run = rep.cfg, s.running
    todo = s.todo[run]
    prefilling = todo > 0
    dt = 0.0
    if cfg.chunk_tokens is None and prefilling.any():
        done_now = run[prefilling]
        dt = float(np.sum(s.todo[done_now] * per_token_s[done_now]))
        s.todo[done_now] = 0.0
        decoding = np.zeros(0, dtype=int)
    else:
        budget = float(cfg.chunk_tokens or 0)
        want = np.where(prefilling, todo, 0.0)
        given = np.clip(budget - (np.cumsum(want) - want), 0.0, want)
        dt += float(np.sum(given * per_token_s[run]))
        s.todo[run] = todo - given
        decoding = run[~prefilling]
        done_now = run[prefilling & (s.todo[run] <= 0)]
    if len(decoding):
        ctx = float(np.mean(reqs.input_tokens[decoding] + s.gen[decoding]))
        step = line.step_s(len(decoding), ctx) * cfg.step_cost_factor
        if cfg.spec_k:  # at least the compute of the k + 1 tokens each sequence checks
            step = max(step, float(line.st.verify_floor_s(len(decoding), cfg.spec_k)))
        dt += step
    return dt, decoding, done_now


def _whole_tokens(reqs: Requests, tau: float, per_token_s: np.ndarray) -> bool:
    """Whether every context the run holds is a whole number of tokens summed exactly in
    float64 (whole prompts, outputs and tokens per step; totals below 2**52), so that
    `_decode_stretch` may sum them in another order; and every prompt's per-token prefill time
    finite (a decode-only step adds 0 x it)."""
    lengths = np.concatenate((reqs.input_tokens, reqs.output_tokens)).astype(float)
    return (
        float(tau).is_integer()
        and tau >= 1
        and bool(np.all(np.mod(lengths, 1.0) == 0.0))
        and float(np.sum(lengths)) + tau < 2.0**52
        and bool(np.all(np.isfinite(per_token_s)))
    )


def _decode_stretch(
    s: _State, rep: Replica, reqs: Requests, line: DecodeLine, at: tuple[float, int]
) -> tuple[float, int]:
    """The engine steps of a running set that only decodes, up to the step before its first
    request finishes or until an arrival finds a free slot (the steps `_step` and the loop of
    `simulate_replica` take there, with the same floating-point results: each context and KV
    block count is a whole number, summed exactly in any order, `_whole_tokens`), on Python
    scalars instead of numpy arrays. Returns the time after them and how many were taken (0:
    the next step ends a request; the loop takes it)."""
    t, limit = at
    run, cfg = s.running, rep.cfg
    n, tau = len(run), int(rep.tau)
    gen = s.gen[run]
    to_go = (reqs.output_tokens[run] - gen + tau - 1) // tau  # steps until each finishes
    last = int(np.min(to_go)) - 1  # steps before the first one finishes
    if last < 1:
        return t, 0
    x = (reqs.input_tokens[run] + gen).astype(np.int64)
    held = int(np.sum(x))  # the sum of the running contexts
    kv = int(np.sum(-(-x // BLOCK_TOKENS)))  # KV blocks held
    residues = np.bincount(x % BLOCK_TOKENS, minlength=BLOCK_TOKENS).tolist()
    # blocks a context of residue q gains over one step of tau tokens: ceil((q + tau)/B) - ceil(q/B)
    gain = [(q, -(-(q + tau) // BLOCK_TOKENS) + (-q // BLOCK_TOKENS)) for q in range(BLOCK_TOKENS)]
    gain = [(q, g) for q, g in gain if g]
    free = limit > n
    arrivals, waiting = reqs.arrival_s, s.next_arrival < len(reqs.arrival_s)
    total = s.total
    steps = 0
    while steps < last:
        if steps and free and waiting and arrivals[s.next_arrival] <= t:
            break  # `_admit` admits it before the next step
        step = line.step_s(n, held / n) * cfg.step_cost_factor
        if cfg.spec_k:
            step = max(step, float(line.st.verify_floor_s(n, cfg.spec_k)))
        t += step
        shift = steps * tau  # the residues have moved by the steps taken
        kv += sum(residues[(q - shift) % BLOCK_TOKENS] * g for q, g in gain)
        held += n * tau
        total += n * tau
        steps += 1
        s.log.append((t, n, float(kv * BLOCK_TOKENS), total))
    s.gen[run] = gen + steps * tau
    s.total = total
    return t, steps


def _line(st: StepTimes, reqs: Requests) -> DecodeLine:
    """The decode steps of a run whose running contexts lie between the shortest prompt and the
    longest prompt plus the longest output."""
    if len(reqs.input_tokens) == 0:
        return DecodeLine(st, 1, 2)
    lo = max(int(np.floor(np.min(reqs.input_tokens))), 1)
    hi = int(np.ceil(np.max(reqs.input_tokens) + np.max(reqs.output_tokens)))
    return DecodeLine(st, lo, hi)


def simulate_replica(
    st: StepTimes, cfg: ServeConfig, kv_fraction: float, reqs: Requests
) -> SimResult:
    """Run one replica over `reqs` (prefill already done when cfg.disagg: `reqs.arrival_s` is
    then when each request reaches the decode replica)."""
    rep = Replica(st, cfg, kv_fraction)
    limit = max(rep.limit, 1)
    hit = cfg.prefix_hit
    eff_in = np.maximum(np.rint(reqs.input_tokens * (1 - hit)), 1.0)
    per_token_s = st.prefill_s(reqs.input_tokens) * (1 - hit) / eff_in
    # through a pipeline a prompt's first token leaves the last stage after its pass, the
    # stage time it held the replica plus the stages after it (0 without a pipeline)
    pass_s = (st.prefill_pass_s(reqs.input_tokens) - st.prefill_s(reqs.input_tokens)) * (1 - hit)
    s = _State(Requests(reqs.arrival_s, eff_in, reqs.output_tokens), cfg.disagg is not None)
    line = _line(st, reqs)
    t, n = 0.0, len(reqs.arrival_s)
    whole = _whole_tokens(reqs, rep.tau, per_token_s)
    while s.next_arrival < n or len(s.running):
        _admit(s, reqs, t, limit)
        if len(s.running) == 0:
            t = float(reqs.arrival_s[s.next_arrival])
            continue
        if whole and not (s.todo[s.running] > 0).any():
            t, steps = _decode_stretch(s, rep, reqs, line, (t, limit))
            if steps:
                continue
        dt, decoding, done_now = _step(s, rep, reqs, per_token_s, line)
        t += dt
        s.first[done_now] = t + pass_s[done_now]
        s.gen[done_now] = 1.0
        s.gen[decoding] += rep.tau
        s.total += len(decoding) * rep.tau + len(done_now)
        active = np.concatenate((decoding, done_now))
        s.finish[active[s.gen[active] >= reqs.output_tokens[active]]] = t
        kv = np.sum(np.ceil((reqs.input_tokens[s.running] + s.gen[s.running]) / BLOCK_TOKENS))
        s.log.append((t, len(s.running), kv * BLOCK_TOKENS, s.total))
        s.running = s.running[np.isnan(s.finish[s.running])]
    log = np.array(s.log) if s.log else np.zeros((0, 4))
    return SimResult(
        reqs, s.first, s.finish, log[:, 0], log[:, 1], log[:, 2], log[:, 3], s.admitted
    )


def summarize(sim: SimResult, warmup: float = 0.2) -> dict[str, Any]:
    """Steady-state figures of one replica's run: output tokens/s between the admission of the
    first `warmup` of the requests and that of the last one (the batch is in steady state
    between: below saturation admission is arrival, above it the batch stays full), and
    TTFT/TPOT percentiles of the requests admitted in that window that finished. A window that
    holds fewer than two engine steps (one request, a burst admitted at once) measures nothing:
    the whole run is measured instead, first admission to last finish."""
    a = sim.requests.arrival_s
    admitted = sim.admitted_s
    finished = ~np.isnan(sim.finish_s)
    t0, t1 = float(admitted[int(warmup * (len(a) - 1))]), float(admitted[-1])
    cum = np.interp([t0, t1], sim.time_s, sim.generated) if len(sim.time_s) else np.zeros(2)
    inside = (admitted >= t0) & (admitted <= t1) & finished
    served = np.count_nonzero(inside & (admitted > t0))  # admissions per gap between them
    if np.count_nonzero((sim.time_s > t0) & (sim.time_s <= t1)) < 2 and len(sim.time_s):
        t0 = float(admitted[0])
        t1 = float(np.max(sim.finish_s[finished])) if finished.any() else float(sim.time_s[-1])
        cum = np.array([0.0, sim.generated[-1]])
        inside = finished
        served = np.count_nonzero(finished)
    ttft = sim.first_token_s[inside] - a[inside]
    out = sim.requests.output_tokens[inside]
    tpot = (sim.finish_s[inside] - sim.first_token_s[inside]) / np.maximum(out - 1, 1)
    q = (50, 90, 99)

    def pct(x: np.ndarray) -> dict[int, float]:
        return {p: float(np.percentile(x, p)) for p in q} if len(x) else dict.fromkeys(q, np.nan)

    span = max(t1 - t0, 1e-12)
    return {
        "throughput_tokens_per_s": float(cum[1] - cum[0]) / span,
        "requests_per_s": served / span,
        "ttft_s": pct(ttft),
        "tpot_s": pct(tpot),
        "mean_batch": float(np.mean(sim.running)) if len(sim.running) else 0.0,
        "finished": int(np.sum(~np.isnan(sim.finish_s))),
    }
