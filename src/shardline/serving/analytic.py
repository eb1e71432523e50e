"""The analytic steady-state serving model (docs/serving.md states every formula).

Per replica (tp devices), with request rate lam, mean output O, tokens per step tau (speculative
decoding) and the decode step t_dec(b) at the mean context c = I + O/2:

- prefill share of the GPU: rho_p = lam * t_p, with t_p the mean prefill of (1 - hit) of a prompt;
- running batch b from Little's law: b * tau * (1 - rho_p) / t_dec(b) = lam * O (bisection);
- capacity X = B tau / (O t_dec(B) + B tau t_p) requests/s with B = min(max batch, KV limit);
- TPOT = t_dec(b) / ((1 - rho_p) tau) on average; its spread over requests is the compound-
  Poisson prefill work that lands in one request's lifetime (normal quantiles);
- TTFT = queueing W + service S of an M/G/1 prefill queue: mean W by Pollaczek-Khinchine,
  quantiles by the exponential tail P(W > t) = rho exp(-rho t / W) (exact for M/M/1).

With P pipeline stages (StepTimes.pp) the same formulas hold with the pipeline's own steps: t_dec
is P stage times (every sequence one token on, P microbatches in flight), t_p the stage time a
prompt holds the pipeline, each of the P microbatches carries a prompt chunk (P x chunk tokens a
step), and a prompt's TTFT service is its pass through every stage, of which the queue behind it
waits 1 / P (P prompts in flight): TTFT = W(S / P) + S.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from shardline.basics.values import Scalar
from shardline.serving.config import BLOCK_TOKENS, ServeConfig
from shardline.serving.steptimes import StepTimes

__all__ = [
    "Analysis",
    "Replica",
    "sequence_kv_bytes",
    "analyze_colocated",
    "colocated",
    "pk_wait_s",
    "queue_wait_quantile_s",
    "INF",
    "Z",
]

Z = {50: 0.0, 90: 1.2815515655446004, 99: 2.3263478740408408}  # standard normal quantiles
INF = math.inf
ESTIMATE_BATCH = 256  # the batch of the second step of the running batch's first estimate


@dataclass
class Analysis:
    """One replica pool's steady state; times in seconds, rates for the whole system."""

    saturated: bool
    capacity_requests_per_s: float
    requests_per_s: float
    throughput_tokens_per_s: float
    input_tokens_per_s: float
    batch: float
    batch_limit: int
    kv_limit_sequences: float
    kv_occupancy: float
    utilization: float
    ttft_s: dict[int, float]
    tpot_s: dict[int, float]
    queue_wait_s: dict[int, float]
    step_s: float
    prefill_s: float
    kv_transfer_s: float = 0.0
    ttft_mean_s: float = INF  # mean wait (Pollaczek-Khinchine) + mean service
    tpot_mean_s: float | None = None  # None: the p50 (TPOT's spread is normal)
    context_tokens: float = 0.0  # the mean cached context of a decode step
    notes: list[str] = field(default_factory=list)


def queue_wait_quantile_s(mean_wait_s: float, rho: float, q: float) -> float:
    """The q-quantile of an M/G/1 waiting time from its mean and utilization: P(W > t) =
    rho exp(-rho t / W_mean), so t_q = (W_mean / rho) ln(rho / (1 - q)), 0 when rho <= 1 - q."""
    if rho <= 1 - q or mean_wait_s <= 0:
        return 0.0
    return mean_wait_s / rho * math.log(rho / (1 - q))


def pk_wait_s(lam: float, s1: float, s2: float) -> tuple[float, float]:
    """Pollaczek-Khinchine: (mean wait, rho) of M/G/1 with E[S] = s1, E[S^2] = s2."""
    rho = lam * s1
    if rho >= 1:
        return INF, rho
    return lam * s2 / (2 * (1 - rho)), rho


class Replica:
    """The numbers one replica's formulas share: mean input I and output O, the mean context
    c = I + O/2, E[t_p] and E[t_p^2] over the prompt lengths (times 1 - hit), tau, the KV budget
    and the batch limit B = min(max batch, floor(budget / (kv bytes per token x KV tokens per
    sequence)))."""

    def __init__(self, st: StepTimes, cfg: ServeConfig, kv_fraction: float) -> None:
        self.st, self.cfg = st, cfg
        inp, out = cfg.input_tokens, cfg.output_tokens
        self.mean_in, self.mean_out = inp.mean, out.mean
        self.context = self.mean_in + self.mean_out / 2  # mean cached tokens of a running sequence
        hit = cfg.prefix_hit
        self.tp1 = inp.expect(lambda x: st.prefill_s(x) * (1 - hit))  # E[t_p]
        self.tp2 = inp.expect(lambda x: (st.prefill_s(x) * (1 - hit)) ** 2)  # E[t_p^2]
        self.tau = cfg.tokens_per_step
        # prompt tokens a decode step carries: one chunk in each of the pp microbatches
        self.chunk = None if cfg.chunk_tokens is None else cfg.chunk_tokens * st.pp
        budget = st.kv_budget_bytes(kv_fraction)
        self.kv_budget_bytes = budget
        per_seq = sequence_kv_bytes(st, cfg)
        self.kv_limit = budget / per_seq
        self.kv_per_seq_bytes = per_seq
        self.limit = int(min(cfg.max_batch, math.floor(self.kv_limit)))

    def t_dec(self, b: Scalar) -> Scalar:
        """A decode step of max(b, 1) sequences at the mean context c, times (1 + k x draft
        cost) with speculative decoding (k draft steps added), and no less than the compute of
        the b (k + 1) tokens verified (StepTimes.verify_floor_s): StepTimes.decode_s."""
        step = self.st.decode_s(np.maximum(b, 1.0), self.context) * self.cfg.step_cost_factor
        if self.cfg.spec_k:  # at least the compute of the k + 1 tokens each sequence checks
            step = np.maximum(step, self.st.verify_floor_s(b, self.cfg.spec_k))
        return step

    def capacity(self, t_p: float, limit: object = None) -> Scalar:
        """Requests/s (array over `limit`, default the replica's): the smaller of the batch
        bound B tau / (O t_dec(B) + B tau t_p) and, with chunked prefill, the chunk bound: a
        full step carries `chunk` prompt tokens, so X = chunk / (I' t_step) with t_step =
        t_dec(b_d) + chunk t_p / I' and b_d = min(B, chunk O / (I' tau)) decoding sequences
        (Little's law), I' the uncached prompt tokens."""
        b = np.asarray(self.limit if limit is None else limit, dtype=float)
        safe = np.maximum(b, 1.0)
        x = safe * self.tau / (self.mean_out * self.t_dec(safe) + safe * self.tau * t_p)
        chunk, fresh = self.chunk, self.mean_in * (1 - self.cfg.prefix_hit)
        if chunk is not None and t_p > 0:
            b_d = self.chunk_bound_batch(safe)
            x = np.minimum(x, chunk / (fresh * (self.t_dec(b_d) + chunk * t_p / fresh)))
        return np.where(b < 1, 0.0, x)

    def chunk_bound_batch(self, limit: Scalar) -> Scalar:
        """Decoding sequences when every step is full of prompt chunks: chunk O / (I' tau)."""
        if self.chunk is None:
            return np.asarray(limit, dtype=float)
        fresh = self.mean_in * (1 - self.cfg.prefix_hit)
        return np.minimum(limit, self.chunk * self.mean_out / (fresh * self.tau))

    def batch(self, lam: float, t_p: float) -> float:
        """The running batch b of Little's law, b tau (1 - lam t_p) = lam O t_dec(b), on [0, B].
        t_dec is the engine's step at whole batches and (1 - w) t_dec(n) + w t_dec(n + 1) between
        them (steptimes.py), so: a whole n in [2, B] where n - 1 sequences fall short,
        (n - 1) tau (1 - lam t_p) < lam O t_dec(n - 1), and n keep up, then on [n - 1, n], with
        d = t_dec(n) - t_dec(n - 1), b = lam O (t_dec(n - 1) - (n - 1) d) / (tau (1 - lam t_p)
        - lam O d). n is searched from the b of the line through t_dec(1) and t_dec(B), widening
        by doubling steps, then halving (few engine steps per layout). When one sequence keeps
        up, t_dec is t_dec(1) below it: b = lam O t_dec(1) / (tau (1 - lam t_p)). B when even B
        sequences fall short."""
        want, speed, limit = lam * self.mean_out, self.tau * (1 - lam * t_p), self.limit

        def t(n: int) -> float:
            return float(self.t_dec(float(n)))

        def short(n: int) -> bool:  # n sequences decode fewer tokens/s than arrive
            return n * speed < want * t(n)

        if limit < 1:
            return 0.0
        if speed <= 0 or short(limit):
            return float(limit)
        if not short(1):
            return want * t(1) / speed
        lo, hi = _bracket(short, self._estimate(want, speed), limit)
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if short(mid) else (lo, mid)
        d = t(hi) - t(lo)
        return want * (t(lo) - lo * d) / (speed - want * d)

    def _estimate(self, want: float, speed: float) -> int:
        """The whole batch, in [2, B], where the line through t_dec(1) and t_dec(256) keeps up:
        b speed = want (t_dec(1) + (b - 1) s), s = (t_dec(256) - t_dec(1)) / 255 (the same two
        steps for every batch limit and rate, so that layouts share the steps they search)."""
        t1, t_ref = float(self.t_dec(1.0)), float(self.t_dec(float(ESTIMATE_BATCH)))
        s = (t_ref - t1) / (ESTIMATE_BATCH - 1)
        if speed - want * s <= 0:
            return self.limit
        guess = want * (t1 - s) / (speed - want * s)
        return int(min(max(math.ceil(guess), 2), self.limit))

    def tpot(self, lam: float, b: float, t_p: float, t_p2: float) -> dict[int, float]:
        """Mean t_dec(b) / ((1 - rho_p) tau); spread: sd = sqrt(lam T E[t_p^2]) / O over a
        decode lifetime T = O t_step / tau (prefill work landing in it, compound Poisson)."""
        rho_p = lam * t_p
        step = float(self.t_dec(b)) / (1 - rho_p)
        mean = step / self.tau
        lifetime = self.mean_out * step / self.tau
        sd = math.sqrt(lam * lifetime * t_p2) / self.mean_out
        return {q: mean + Z[q] * sd for q in Z}


def sequence_kv_bytes(st: StepTimes, cfg: ServeConfig) -> float:
    """KV bytes a running sequence holds (mean I and O, half a 16-token block of fragmentation):
    its prompt and whole output when the engine reserves it (I + O + 8 tokens), else the mean
    over its life of the KV of I + u O + 8 tokens, u uniform on [0, 1] (64 midpoints; I + O/2 +
    8 tokens when every layer caches every token, less where sliding-window layers hold at most
    their window)."""
    inp, out, frag = cfg.input_tokens.mean, cfg.output_tokens.mean, BLOCK_TOKENS / 2
    if cfg.kv_reservation == "full_output":
        return float(st.sequence_kv_bytes(inp + out + frag))
    grown = inp + out * (np.arange(64) + 0.5) / 64 + frag
    return float(np.mean(st.sequence_kv_bytes(grown)))


def _bracket(short: Callable[[int], bool], start: int, limit: int) -> tuple[int, int]:
    """(lo, hi) with short(lo) and not short(hi), 1 <= lo < hi <= limit, given short(1) and not
    short(limit): from `start`, steps of 1, 2, 4, ... up while short, else down while not."""
    if short(start):
        lo, step = start, 1
        while lo + step < limit and short(lo + step):
            lo, step = lo + step, 2 * step
        return lo, min(lo + step, limit)
    hi, step = start, 1
    while hi - step > 1 and not short(hi - step):
        hi, step = hi - step, 2 * step
    return max(hi - step, 1), hi


def _ttft(rep: Replica, lam: float, b: float) -> tuple[dict[int, float], dict[int, float], float]:
    """TTFT quantiles, the queueing part, and the mean service time of one prefill. Chunked: a
    prompt of I' tokens spans n = ceil(I'/chunk) steps, S = n t_dec(b) + t_p; separate prefill:
    S = t_p (the prefill step runs alone). Through P pipeline stages t_p is the prompt's pass
    through all of them (StepTimes.prefill_pass_s) and the queue's service S / P (P prompts in
    flight, one a microbatch): E[S] / P and E[S^2] / P^2 in Pollaczek-Khinchine."""
    cfg, hit = rep.cfg, rep.cfg.prefix_hit
    chunk, t_step, pp = cfg.chunk_tokens, float(rep.t_dec(b)), rep.st.pp

    def service(x: Scalar) -> Scalar:
        s = rep.st.prefill_pass_s(x) * (1 - hit)
        return s if chunk is None else s + np.ceil(x * (1 - hit) / chunk) * t_step

    s1 = cfg.input_tokens.expect(service)
    s2 = cfg.input_tokens.expect(lambda x: service(x) ** 2)
    wait, rho = pk_wait_s(lam, s1 / pp, s2 / pp**2)
    waits, ttft = {}, {}
    for q in Z:
        w = INF if wait == INF else queue_wait_quantile_s(wait, rho, q / 100)
        waits[q] = w
        ttft[q] = w + float(service(cfg.input_tokens.quantile(q / 100)))
    ttft[0] = wait + s1  # key 0: the mean
    return ttft, waits, s1


def analyze_colocated(st: StepTimes, cfg: ServeConfig, kv_fraction: float) -> Analysis:
    """The steady state of `cfg` (every replica prefills and decodes) with one replica's step
    times `st`."""
    rep = Replica(st, cfg, kv_fraction)
    replicas = cfg.replicas
    lam = cfg.rate_per_s / replicas
    cap = float(rep.capacity(rep.tp1))
    return colocated(rep, lam, cap, replicas)


def colocated(rep: Replica, lam: float, cap: float, replicas: int) -> Analysis:
    """The steady state of `replicas` alike replicas, each at rate `lam` with capacity `cap`
    (requests/s): saturated when lam >= cap (it serves cap, TTFT unbounded, the batch the limit
    B or the chunk bound), else the Little's-law batch, TPOT and the M/G/1 TTFT above; the
    utilization X (E[t_p] + O t_dec(b) / (tau b)) with X the served rate."""
    saturated = lam >= cap
    served = min(lam, cap)
    if saturated:  # the batch limit, or fewer decoding when prompt chunks fill every step
        b = float(rep.chunk_bound_batch(float(max(rep.limit, 1)))) if rep.tp1 > 0 else rep.limit
        b = float(max(b, 1.0)) if rep.limit >= 1 else 1.0
    else:
        b = rep.batch(lam, rep.tp1)
    tpot = rep.tpot(served, b, rep.tp1, rep.tp2) if rep.limit >= 1 else dict.fromkeys(Z, INF)
    if saturated:
        ttft, waits, s1 = dict.fromkeys(Z, INF), dict.fromkeys(Z, INF), rep.tp1
    else:
        ttft, waits, s1 = _ttft(rep, lam, b)
    busy = served * (rep.tp1 + rep.mean_out * float(rep.t_dec(b)) / (rep.tau * max(b, 1.0)))
    notes = []
    if rep.limit < 1:
        notes.append("the KV cache holds no sequence: weights and activations fill the memory")
    elif rep.limit < rep.cfg.max_batch:
        notes.append(f"the KV cache limits the batch to {rep.limit} (< --max-batch)")
    return Analysis(
        saturated=saturated,
        capacity_requests_per_s=cap * replicas,
        requests_per_s=served * replicas,
        throughput_tokens_per_s=served * replicas * rep.mean_out,
        input_tokens_per_s=served * replicas * rep.mean_in,
        batch=b,
        batch_limit=rep.limit,
        kv_limit_sequences=rep.kv_limit,
        kv_occupancy=min(1.0, b * rep.kv_per_seq_bytes / rep.kv_budget_bytes)
        if rep.kv_budget_bytes > 0
        else 1.0,
        utilization=min(1.0, busy),
        ttft_s={q: v for q, v in ttft.items() if q},
        ttft_mean_s=ttft.get(0, INF),
        tpot_s=tpot,
        queue_wait_s=waits,
        step_s=float(rep.t_dec(b)),
        context_tokens=rep.context,
        prefill_s=rep.tp1,  # E[t_p], one meaning saturated or not (s1 adds the chunk's steps)
        notes=notes,
    )
