"""The serving search: every chip x device count x tensor-parallel degree x batch limit for one
request rate, lengths and SLO, evaluated with the analytic model vectorized over device counts
and batch limits (numpy), one chunk of work per (chip, tp) so that `map_chunks` can spread the
chunks over processes. The step-time grids (the plan engine) are priced once per chunk.

Returns {"evaluated", "pareto", "best", "failures"}: the Pareto front of cost ($ per million
output tokens) against latency (p99 TPOT, then p99 TTFT), the cheapest layout meeting the SLO,
and why each cheaper or faster layout fails."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from shardline.errors import InputError
from shardline.serving.analytic import Z, _Replica
from shardline.serving.config import Lengths, ServeConfig
from shardline.serving.engines import engine
from shardline.serving.slo import SLO

__all__ = ["serving_search", "evaluate_chunk", "BATCH_LIMITS", "TP_DEGREES"]

BATCH_LIMITS = (8, 16, 32, 64, 128, 256, 512)
TP_DEGREES = (1, 2, 4, 8)
MAX_FAILURES = 20
# The search serves as the engines' published tables do: TensorRT-LLM, fp8 weights and KV cache.
SEARCH_ENGINE, SEARCH_DTYPE = "trtllm", "fp8"
MapChunks = Callable[[Callable[[Any], Any], Sequence[Any]], list[Any]]


@dataclass(frozen=True)
class _Chunk:
    """One (chip, tp): every device count (multiples of tp up to max_devices) x batch limit."""

    model: str
    chip: str
    tp: int
    rate_per_s: float
    input_tokens: Lengths
    output_tokens: Lengths
    slo: SLO
    max_devices: int
    engine: str
    dtype: str


def _bisect_batch(rep: _Replica, lam: np.ndarray, limit: np.ndarray) -> np.ndarray:
    """b with b tau (1 - lam t_p) / t_dec(b) = lam O per element, on [0, limit]."""
    lo, hi = np.zeros_like(lam), limit.astype(float)
    want = lam * rep.mean_out
    for _ in range(50):
        mid = (lo + hi) / 2
        got = mid * rep.tau * (1 - lam * rep.tp1) / rep.t_dec(mid)
        low = got < want
        lo, hi = np.where(low, mid, lo), np.where(low, hi, mid)
    return hi


def _ttft(rep: _Replica, lam: np.ndarray, step: np.ndarray, q: int) -> np.ndarray:
    """Per element: the M/G/1 prefill queue's q-quantile wait plus the service (analytic.py)."""
    cfg, hit = rep.cfg, rep.cfg.prefix_hit
    u = (np.arange(64) + 0.5) / 64
    x = cfg.input_tokens.quantile(u)[None, :]
    chunks = np.ceil(x * (1 - hit) / cfg.chunk_tokens) if cfg.chunk_tokens else 0.0
    service = rep.st.prefill_s(x) * (1 - hit) + chunks * step[:, None]
    s1, s2 = service.mean(axis=1), (service**2).mean(axis=1)
    rho = lam * s1
    with np.errstate(divide="ignore", invalid="ignore"):
        wait = lam * s2 / (2 * (1 - rho))
        w_q = np.where(rho > 1 - q / 100, wait / rho * np.log(rho / (1 - q / 100)), 0.0)
    xq = cfg.input_tokens.quantile(q / 100)
    chunks_q = np.ceil(xq * (1 - hit) / cfg.chunk_tokens) if cfg.chunk_tokens else 0.0
    s_q = rep.st.prefill_s(xq) * (1 - hit) + chunks_q * step
    return np.where(rho < 1, w_q + s_q, np.inf)


@lru_cache(maxsize=64)
def _step_times(model: str, chip: str, tp: int, dtype: str, engine_name: str) -> Any:
    """One (model, chip, tp)'s step-time grids, priced once per process (a search repeated at
    another rate or SLO reuses them)."""
    from shardline.hardware import resolve_chip
    from shardline.models import load_model
    from shardline.serving.steptimes import step_times

    return step_times(load_model(model), resolve_chip(chip), tp, dtype, engine(engine_name))


def evaluate_chunk(chunk: _Chunk) -> list[dict[str, Any]]:
    """Every device count x batch limit of one (chip, tp), vectorized."""
    from shardline.hardware import resolve_chip
    from shardline.serving.pricing import pricing

    eng = engine(chunk.engine)
    chip = resolve_chip(chunk.chip)
    st = _step_times(chunk.model, chunk.chip, chunk.tp, chunk.dtype, chunk.engine)
    devices = np.arange(chunk.tp, chunk.max_devices + 1, chunk.tp)
    d, batch = (a.ravel() for a in np.meshgrid(devices, BATCH_LIMITS, indexing="ij"))
    cfg = ServeConfig(
        chunk.rate_per_s, chunk.input_tokens, chunk.output_tokens, chunk.tp, chunk.tp,
        chunk_tokens=eng.default_chunk_tokens if eng.chunked_prefill else None,
        kv_reservation=eng.kv_reservation,
    )  # fmt: skip
    rep = _Replica(st, cfg, eng.kv_memory_fraction)
    limit = np.minimum(batch, np.floor(rep.kv_limit)).astype(float)
    lam = chunk.rate_per_s / (d // chunk.tp)
    safe = np.maximum(limit, 1.0)
    cap = rep.capacity(rep.tp1, limit)
    saturated = (lam >= cap) | (limit < 1)
    full = np.maximum(rep.chunk_bound_batch(safe), 1.0) if rep.tp1 > 0 else safe
    b = np.where(saturated, full, _bisect_batch(rep, np.minimum(lam, cap * 0.999999), safe))
    rho_p = np.minimum(lam, cap) * rep.tp1
    step = rep.t_dec(b) / (1 - rho_p)
    sd = np.sqrt(lam * rep.mean_out * step / rep.tau * rep.tp2) / rep.mean_out
    tokens = np.minimum(lam, cap) * (d // chunk.tp) * rep.mean_out
    at: dict[int, tuple[np.ndarray, np.ndarray]] = {}
    for q in {99, chunk.slo.percentile}:
        tpot = np.where(limit < 1, np.inf, step / rep.tau + Z[q] * sd)
        at[q] = (np.where(saturated, np.inf, _ttft(rep, lam, rep.t_dec(b), q)), tpot)
    p = chunk.slo.percentile
    rows = []
    for i in range(len(d)):
        cost = pricing(chip, int(d[i]), float(tokens[i]), 1.0)
        row = _row(chunk, (int(d[i]), int(batch[i]), int(limit[i])), cost, (
            float(at[p][0][i]), float(at[p][1][i]), float(tokens[i]), bool(saturated[i]),
        ))  # fmt: skip
        row["ttft_p99_s"], row["tpot_p99_s"] = _finite(at[99][0][i]), _finite(at[99][1][i])
        rows.append(row)
    return rows


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _row(
    chunk: _Chunk,
    layout: tuple[int, int, int],
    cost: dict[str, Any],
    perf: tuple[float, float, float, bool],
) -> dict[str, Any]:
    devices, max_batch, limit = layout
    ttft, tpot, tokens, saturated = perf
    slo = chunk.slo
    reasons = []
    if limit < 1:
        reasons.append("the KV cache holds no sequence (weights fill the memory)")
    elif saturated:
        reasons.append(f"saturated: {tokens:,.0f} tokens/s is the most it serves")
    else:
        if slo.ttft_s is not None and ttft > slo.ttft_s:
            reasons.append(
                f"ttft p{slo.percentile} {ttft * 1e3:.0f} ms > {slo.ttft_s * 1e3:.0f} ms"
            )
        if slo.tpot_s is not None and tpot > slo.tpot_s:
            reasons.append(
                f"tpot p{slo.percentile} {tpot * 1e3:.1f} ms > {slo.tpot_s * 1e3:.1f} ms"
            )
    return {
        "chip": chunk.chip,
        "devices": devices,
        "tp": chunk.tp,
        "max_batch": max_batch,
        "usd_per_million_tokens": cost["usd_per_million_tokens"],
        "ttft_p99_s": None,
        "tpot_p99_s": None,
        "throughput_tokens_per_s": tokens,
        "meets_slo": not reasons,
        "why_not": "; ".join(reasons) or None,
    }


def _chunks(model: str, chips: Sequence[str], common: dict[str, Any]) -> list[_Chunk]:
    from shardline.models import load_model

    spec = load_model(model)
    out = []
    for chip in chips:
        for tp in TP_DEGREES:
            if tp <= common["max_devices"] and spec.heads % tp == 0:
                out.append(_Chunk(model=model, chip=chip, tp=tp, **common))
    if not out:
        raise InputError("no chip and tensor-parallel degree fits under --max-devices")
    return out


def _cost_key(row: dict[str, Any]) -> tuple[float, float]:
    usd = row["usd_per_million_tokens"]
    return (usd if usd is not None else float(row["devices"]), row["tpot_p99_s"] or np.inf)


def _pareto(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Cost against p99 TPOT: cheapest first, each later one strictly faster."""
    front, best_tpot = [], np.inf
    for row in sorted(
        (r for r in rows if r["tpot_p99_s"] is not None and r["ttft_p99_s"] is not None),
        key=_cost_key,
    ):
        if row["tpot_p99_s"] < best_tpot:
            front.append(row)
            best_tpot = row["tpot_p99_s"]
    return front


def _closest(row: dict[str, Any]) -> tuple[float, float, float]:
    """Order of a layout's batch limits by how close they come: TTFT (unbounded when
    saturated), then the most throughput, then TPOT."""
    return (
        row["ttft_p99_s"] or np.inf,
        -row["throughput_tokens_per_s"],
        row["tpot_p99_s"] or np.inf,
    )


def _failures(
    rows: list[dict[str, Any]], front: list[dict[str, Any]], best: dict[str, Any] | None
) -> list[dict[str, Any]]:
    """Why each option cheaper than the best (one per chip, devices and tp) or on the front
    fails; a faster option on the front that meets the SLO only costs more."""
    key = _cost_key(best)[0] if best else np.inf
    seen: dict[tuple[str, int, int], dict[str, Any]] = {}
    for row in sorted(rows, key=lambda r: (_cost_key(r)[0], _closest(r))):
        k = (row["chip"], row["devices"], row["tp"])
        if _cost_key(row)[0] < key and not row["meets_slo"] and k not in seen:
            seen[k] = row  # its batch limit that comes closest
    out = [
        {
            "chip": r["chip"],
            "devices": r["devices"],
            "tp": r["tp"],
            "max_batch": r["max_batch"],
            "why": r["why_not"],
        }
        for r in list(seen.values())[:MAX_FAILURES]
    ]
    for r in front:
        if r is not best and r["meets_slo"] and best is not None:
            out.append(
                {
                    "chip": r["chip"],
                    "devices": r["devices"],
                    "tp": r["tp"],
                    "max_batch": r["max_batch"],
                    "why": "meets the SLO but costs more than the best",
                }
            )
    return out


def serving_search(
    model: str,
    *,
    chips: Sequence[str],
    rate_per_s: float,
    input_tokens: int | Lengths,
    output_tokens: int | Lengths,
    slo: SLO,
    max_devices: int,
    map_chunks: MapChunks | None = None,
) -> dict[str, Any]:
    """Every chip x device count x tp x batch limit: {"evaluated", "pareto", "best",
    "failures"}. `map_chunks(fn, chunks) -> list` runs `evaluate_chunk` over the chunks (default:
    a plain map; the search command passes one that spreads them over processes)."""
    if max_devices < 1 or not rate_per_s > 0:
        raise InputError("the serving search needs max_devices >= 1 and a positive rate")
    common = {
        "rate_per_s": float(rate_per_s),
        "input_tokens": _lengths(input_tokens),
        "output_tokens": _lengths(output_tokens),
        "slo": slo,
        "max_devices": int(max_devices),
        "engine": SEARCH_ENGINE,
        "dtype": SEARCH_DTYPE,
    }
    chunks = _chunks(model, chips, common)
    run = map_chunks or (lambda fn, items: [fn(item) for item in items])
    rows = [row for part in run(evaluate_chunk, chunks) for row in part]
    front = _pareto(rows)
    meeting = sorted((r for r in rows if r["meets_slo"]), key=_cost_key)
    best = meeting[0] if meeting else None
    return {
        "evaluated": len(rows),
        "pareto": front,
        "best": best,
        "failures": _failures(rows, front, best),
    }


def _lengths(value: int | Lengths) -> Lengths:
    return value if isinstance(value, Lengths) else Lengths("fixed", float(value))
