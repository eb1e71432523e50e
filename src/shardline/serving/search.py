"""The serving search: every chip x device count x replica layout (tensor parallel, pipeline
stages across nodes, DP attention with experts for a MoE model) x batch limit for one
request rate, lengths and SLO, each layout the steady state `serve` gives it (the same
`serving.steady.analyze`), one chunk of work per (chip, tp) so that `map_chunks` can spread the
chunks over processes. The chunk's layouts share one StepTimes: each engine step (a decode at a
whole batch and context, a prefill) is priced once per chunk.

Returns {"evaluated", "pareto", "best", "failures"}: the Pareto front of cost ($ per million
output tokens) against latency (p99 TPOT, then p99 TTFT), the cheapest layout meeting the SLO,
and why each cheaper or faster layout fails."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from shardline.basics.units import check_whole, short
from shardline.errors import InputError
from shardline.serving.config import Lengths, ServeConfig, as_lengths, check_serving_rate
from shardline.serving.engines import engine
from shardline.serving.slo import SLO
from shardline.serving.steptimes import Split, serving_dtypes
from shardline.strategies.tp import SERVING_DEGREES

__all__ = [
    "serving_search",
    "SearchOptions",
    "pool_splits",
    "evaluate_chunk",
    "layout_config",
    "Chunk",
    "BATCH_LIMITS",
    "TP_DEGREES",
    "SEARCH_ENGINE",
    "SEARCH_DTYPE",
    "MAX_SERVING_DEVICES",
    "NEEDS_SLO",
]

BATCH_LIMITS = (8, 16, 32, 64, 128, 256, 512)
TP_DEGREES = SERVING_DEGREES  # tp's serving range (strategies/tp.py)
MAX_FAILURES = 20
MAX_SERVING_DEVICES = 4096  # most devices per system: the search's time grows with it
NEEDS_SLO = "the serving search needs --slo, e.g. --slo ttft=500ms,tpot=30ms"
# The search serves as the engines' published tables do: TensorRT-LLM, fp8 weights and KV cache.
SEARCH_ENGINE, SEARCH_DTYPE = "trtllm", "fp8"
MapChunks = Callable[[Callable[[Any], object], Sequence[object]], list[Any]]


@dataclass(frozen=True)
class Chunk:
    """One (chip, replica layout): every device count (multiples of tp x pp up to max_devices)
    x batch limit."""

    model: str
    chip: str
    tp: int
    rate_per_s: float
    input_tokens: Lengths
    output_tokens: Lengths
    slo: SLO
    max_devices: int
    engine: str
    dtype: str | None
    weight_dtype: str | None = None
    kv_dtype: str | None = None
    attention_dp: int = 1  # DP attention with experts over the replica (ep = tp) when > 1
    disagg: bool = False  # also every prefill:decode split of each device count
    pp: int = 1  # pipeline stages of a replica (tp x pp devices)


def pool_splits(devices: int, tp: int) -> list[tuple[int, int] | None]:
    """The layouts of `devices`: colocated (None), and with disaggregated pools every split
    P:D with P = tp x 2^k prefill devices (1, 2, 4, ... replicas) and at least tp decode ones."""
    out: list[tuple[int, int] | None] = [None]
    prefill = tp
    while prefill + tp <= devices:
        out.append((prefill, devices - prefill))
        prefill *= 2
    return out


def evaluate_chunk(chunk: Chunk) -> list[dict[str, object]]:
    """Every device count x batch limit of one (chip, tp), each the steady state `serve` gives
    for that layout (serving.steady.analyze, on step times shared by the chunk)."""
    from shardline.hardware import resolve_chip
    from shardline.serving.pricing import pricing
    from shardline.serving.steady import analyze
    from shardline.serving.steptimes import cached_step_times

    eng, chip = engine(chunk.engine), resolve_chip(chunk.chip)
    dtypes = serving_dtypes(chip, chunk.dtype, chunk.weight_dtype, chunk.kv_dtype)
    st = cached_step_times(
        chunk.model,
        chunk.chip,
        chunk.tp,
        dtypes[0],
        eng.name,
        *dtypes[1:],
        Split(chunk.attention_dp, chunk.pp),
    )
    p = chunk.slo.percentile
    rows = []
    replica = chunk.tp * chunk.pp
    for devices in range(replica, chunk.max_devices + 1, replica):
        splits = pool_splits(devices, chunk.tp) if chunk.disagg and chunk.pp == 1 else [None]
        for split, max_batch in ((x, b) for x in splits for b in BATCH_LIMITS):
            cfg = replace(layout_config(chunk, devices, max_batch), disagg=split)
            a = analyze(st, cfg, st.kv_fraction)
            cost = pricing(chip, devices, a.throughput_tokens_per_s, a.utilization)
            perf = (a.ttft_s[p], a.tpot_s[p], a.throughput_tokens_per_s, a.saturated)
            row = _row(chunk, (devices, max_batch, a.batch_limit), cost, perf)
            row.update(_assumed(chunk, eng.label, dtypes))
            if split is not None:
                row["pools"] = {"prefill_devices": split[0], "decode_devices": split[1]}
            row["ttft_p99_s"], row["tpot_p99_s"] = _finite(a.ttft_s[99]), _finite(a.tpot_s[99])
            rows.append(row)
    return rows


def layout_config(chunk: Chunk, devices: int, max_batch: int) -> ServeConfig:
    """The ServeConfig of one layout as `serve` builds it from its flags (`--devices devices
    --tp tp --max-batch max_batch`, the engine's chunk and KV reservation)."""
    eng = engine(chunk.engine)
    return ServeConfig(
        chunk.rate_per_s,
        chunk.input_tokens,
        chunk.output_tokens,
        devices,
        chunk.tp,
        max_batch=max_batch,
        chunk_tokens=eng.default_chunk_tokens if eng.chunked_prefill else None,
        kv_reservation=eng.kv_reservation,
        ep=chunk.tp if chunk.attention_dp > 1 else 1,
        attention_dp=chunk.attention_dp,
        pp=chunk.pp,
    )


def _assumed(chunk: Chunk, label: str, dtypes: tuple[str, str, str]) -> dict[str, object]:
    """What a row assumed beyond chip, devices, tp and batch: the engine, the dtypes, the
    pipeline stages of a replica, and the expert and attention data parallelism of a MoE
    layout."""
    out: dict[str, object] = {
        "engine": label,
        "dtype": dtypes[0],
        "weight_dtype": dtypes[1],
        "kv_dtype": dtypes[2],
    }
    if chunk.pp > 1:
        out["pp"] = chunk.pp
    if chunk.attention_dp > 1:
        out.update(ep=chunk.tp, attention_dp=chunk.attention_dp)
    return out


def _finite(x: float) -> float | None:
    return float(x) if np.isfinite(x) else None


def _row(
    chunk: Chunk,
    layout: tuple[int, int, int],
    cost: dict[str, object],
    perf: tuple[float, float, float, bool],
) -> dict[str, object]:
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


def _chunks(model: str, chips: Sequence[str], common: dict[str, Any]) -> list[Chunk]:
    """One chunk per chip and replica layout: the serving strategies' ranges from the registry
    (`strategies.serving_layouts`: tp = 1, 2, 4, 8 where it splits the model evenly, pp = 1, 2,
    4 where it divides the blocks). A pipeline spans nodes: pp > 1 only on the largest tp of
    the range (a node's tensor-parallel group per stage, as the engines' multi-node recipes run
    it), with plain attention."""
    from shardline.models import load_model
    from shardline.models.template import model_workload
    from shardline.strategies import serving_layouts

    spec = load_model(model)
    shape = model_workload(spec, phase="decode", batch=1, seq_len=1024)
    layouts = serving_layouts(shape, common["max_devices"])
    widest = max((layout["tp"] for layout in layouts), default=1)
    layouts = [x for x in layouts if x["pp"] == 1 or x["tp"] == widest]
    out = []
    for chip in chips:
        for layout in layouts:
            out.append(Chunk(model=model, chip=chip, tp=layout["tp"], pp=layout["pp"], **common))
            if spec.moe is not None and layout["tp"] > 1 and layout["pp"] == 1:  # DP attention
                out.append(
                    Chunk(
                        model=model, chip=chip, tp=layout["tp"], attention_dp=layout["tp"], **common
                    )
                )
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
) -> list[dict[str, object]]:
    """Why each option cheaper than the best (one per chip, devices and tp) or on the front
    fails; a faster option on the front that meets the SLO only costs more."""
    key = _cost_key(best)[0] if best else np.inf
    seen: dict[tuple[str, int, int, int], dict[str, object]] = {}
    for row in sorted(rows, key=lambda r: (_cost_key(r)[0], _closest(r))):
        k = (row["chip"], row["devices"], row["tp"], row.get("pp", 1))
        if _cost_key(row)[0] < key and not row["meets_slo"] and k not in seen:
            seen[k] = row  # its batch limit that comes closest
    out = [
        {
            "chip": r["chip"],
            "devices": r["devices"],
            "tp": r["tp"],
            **({"pp": r["pp"]} if "pp" in r else {}),
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


@dataclass(frozen=True)
class SearchOptions:
    """What the serving search prices every layout with and how it runs: the engine
    (NAME[@VERSION]), the dtypes (`dtype` the compute; weights and KV default as `serve` takes
    them), `disagg` (also every prefill:decode split of each device count: pool_splits) and
    `map_chunks(fn, chunks) -> list`, which runs `evaluate_chunk` over the chunks (None: a plain
    map; the search command passes one that spreads them over processes)."""

    engine: str = SEARCH_ENGINE
    dtype: str | None = SEARCH_DTYPE
    weight_dtype: str | None = None
    kv_dtype: str | None = None
    disagg: bool = False
    map_chunks: MapChunks | None = None


def serving_search(
    model: str,
    *,
    chips: Sequence[str],
    rate_per_s: float,
    input_tokens: int | Lengths,
    output_tokens: int | Lengths,
    slo: SLO,
    max_devices: int,
    options: SearchOptions | None = None,
) -> dict[str, Any]:
    """Every chip x device count x tp (and, for a MoE model, DP attention with experts over the
    replica; with `options.disagg`, every prefill:decode split) x batch limit, priced with
    `options` (SearchOptions): {"evaluated", "pareto", "best", "failures", "assumed"}."""
    if not isinstance(model, str) or not model:
        raise InputError(f"the serving search needs a model name or file, got {short(model)}")
    if isinstance(chips, str) or not isinstance(chips, Sequence) or not chips:
        raise InputError(f"chips must be a list of chip names, got {short(chips)}")
    if not all(isinstance(c, str) and c for c in chips):
        raise InputError(f"chips must be a list of chip names, got {short(chips)}")
    if not isinstance(slo, SLO):
        raise InputError(NEEDS_SLO)
    opts = options or SearchOptions()
    if not isinstance(opts, SearchOptions):
        raise InputError(f"options must be a SearchOptions, got {short(opts)}")
    common = {
        "rate_per_s": check_serving_rate(rate_per_s),
        "input_tokens": as_lengths(input_tokens, "--in"),
        "output_tokens": as_lengths(output_tokens, "--out"),
        "slo": slo,
        "max_devices": check_whole(max_devices, "--max-devices", most=MAX_SERVING_DEVICES),
        "engine": engine(opts.engine).label,
        "dtype": opts.dtype,
        "weight_dtype": opts.weight_dtype,
        "kv_dtype": opts.kv_dtype,
        "disagg": opts.disagg,
    }
    chunks = _chunks(model, chips, common)
    run = opts.map_chunks or (lambda fn, items: [fn(item) for item in items])
    return _answer([row for part in run(evaluate_chunk, chunks) for row in part], opts)


def _answer(rows: list[dict[str, object]], opts: SearchOptions) -> dict[str, object]:
    """The search's answer from every row: the front, the best, the failures, the assumptions."""
    front = _pareto(rows)
    meeting = sorted((r for r in rows if r["meets_slo"]), key=_cost_key)
    best = meeting[0] if meeting else None
    eng = engine(opts.engine)
    return {
        "evaluated": len(rows),
        "pareto": front,
        "best": best,
        "failures": _failures(rows, front, best),
        "assumed": {
            "engine": eng.label,
            "dtype": opts.dtype,
            "weight_dtype": opts.weight_dtype,
            "kv_dtype": opts.kv_dtype,
            "chunk_tokens": eng.default_chunk_tokens if eng.chunked_prefill else None,
            "kv_reservation": eng.kv_reservation,
            "arrivals": "Poisson",
            "disaggregated_pools": opts.disagg,
        },
    }
