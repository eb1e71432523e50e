"""Serving: formulas checked by hand on a synthetic step-time grid, the analytic model against
the event simulation, the CLI contract and the serving search."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from shardline.errors import InputError
from shardline.serving.analytic import pk_wait_s, queue_wait_quantile_s
from shardline.serving.config import Lengths, ServeConfig, parse_lengths, spec_tokens_per_step
from shardline.serving.simulate import fcfs_finish_s, poisson_requests, simulate_replica, summarize
from shardline.serving.slo import parse_slo
from shardline.serving.steady import analyze
from shardline.serving.steptimes import StepTimes


def synthetic(decode_a_s: float, decode_k_s: float, prefill_per_token_s: float) -> StepTimes:
    """Decode step t(n) = a + k n at any context; prefill t(L) = p L; memory never binds."""
    return StepTimes(
        chip="synthetic",
        tp=1,
        decode_point=lambda n, c: decode_a_s + decode_k_s * n,
        prefill_point=lambda tokens: prefill_per_token_s * tokens,
        weights_bytes_per_device=0.0,
        activations_bytes_per_device=0.0,
        capacity_bytes_per_device=1e12,
        kv_bytes_per_token=1.0,
    )


def config(rate: float, inp: float, out: float, **kw: object) -> ServeConfig:
    return ServeConfig(rate, Lengths("fixed", inp), Lengths("fixed", out), 1, 1, **kw)  # type: ignore[arg-type]


def test_speculative_tokens_per_step() -> None:
    # (1 - alpha^(k+1)) / (1 - alpha), Leviathan et al. 2023: k=4, alpha=0.8 -> (1-0.32768)/0.2
    assert spec_tokens_per_step(4, 0.8) == pytest.approx(3.3616)
    assert spec_tokens_per_step(3, 1.0) == 4.0
    assert spec_tokens_per_step(0, 0.5) == 1.0


def test_parse_slo_and_lengths() -> None:
    slo = parse_slo("ttft=500ms,tpot=30ms")
    assert (slo.ttft_s, slo.tpot_s, slo.percentile) == (0.5, 0.03, 99)
    assert parse_slo("tpot=0.05s,p=90").percentile == 90
    for bad in ("ttft=fast", "latency=3ms", "p=95,ttft=1s", ""):
        with pytest.raises(InputError):
            parse_slo(bad)
    # a time without a unit is an error, never silently seconds (issue 28: ttft=500 meant 500 s)
    with pytest.raises(InputError, match=r"^--slo ttft: '500' has no unit; .* 500ms or 500s"):
        parse_slo("ttft=500")
    with pytest.raises(InputError, match=r"^--slo tpot: '0.03' has no unit"):
        parse_slo("ttft=500ms,tpot=0.03")
    assert parse_slo("ttft=250us").ttft_s == pytest.approx(250e-6)
    u = parse_lengths("uniform:1000-3000", "--in")
    assert (u.mean, u.low, u.high) == (2000, 1000, 3000)
    assert parse_lengths("exp:500", "--out").expect(lambda x: x) == pytest.approx(500, rel=0.05)
    with pytest.raises(InputError):
        parse_lengths("lognormal:3", "--in")


def test_queueing_formulas() -> None:
    # M/M/1, lam 0.5, mu 1: mean wait rho/(mu-lam) = 1; P(W>t) = rho e^{-(mu-lam)t}, so the
    # p99 wait is ln(0.5/0.01)/0.5 = 2 ln 50
    assert queue_wait_quantile_s(1.0, 0.5, 0.99) == pytest.approx(2 * math.log(50))
    assert queue_wait_quantile_s(1.0, 0.5, 0.5) == 0.0  # rho <= 1 - q: most never wait
    # M/D/1 (Pollaczek-Khinchine), lam 0.5, S = 1: W = lam E[S^2] / (2 (1 - rho)) = 0.5
    assert pk_wait_s(0.5, 1.0, 1.0) == (pytest.approx(0.5), 0.5)
    # FCFS finish times by Lindley: arrivals 0, 0.5, 3 with service 1: 1, 2, 4
    assert fcfs_finish_s(np.array([0, 0.5, 3.0]), np.ones(3)).tolist() == [1.0, 2.0, 4.0]


def test_analytic_by_hand() -> None:
    st = synthetic(0.01, 1e-4, 1e-4)
    cfg = config(4.0, 1000, 100, max_batch=100, chunk_tokens=None)
    a = analyze(st, cfg, 0.9)
    # prefill t_p = 1e-4 x 1000 = 0.1 s; capacity B / (O t_dec(B) + B t_p) with B = 100,
    # t_dec(100) = 0.01 + 0.01 = 0.02: 100 / (100 x 0.02 + 100 x 0.1) = 8.333 req/s
    assert a.capacity_requests_per_s == pytest.approx(100 / 12)
    # batch: b (1 - 4 x 0.1) / (0.01 + 1e-4 b) = 4 x 100  ->  0.56 b = 4  ->  b = 7.142857
    assert a.batch == pytest.approx(4 / 0.56, rel=1e-6)
    # TPOT mean (p50) = t_dec(b) / (1 - rho_p) = (0.01 + 1e-4 b) / 0.6
    assert a.tpot_s[50] == pytest.approx((0.01 + 1e-4 * 4 / 0.56) / 0.6)
    # separate prefill: M/D/1 with S = 0.1, rho 0.4: W = 4 x 0.01 / (2 x 0.6); TTFT p50 = 0.1
    assert a.ttft_s[50] == pytest.approx(0.1)
    assert a.throughput_tokens_per_s == pytest.approx(400)
    # speculative decoding: tau tokens per step, the capacity grows with tau; the step checks
    # k + 1 = 5 tokens of each of the 100 sequences, at least 100 x 5 x 1e-4 s = 0.05 s of
    # compute (a prefill token's time) against the 0.02 s decode step
    spec = analyze(st, replace(cfg, spec_k=4, spec_alpha=0.8), 0.9)
    tau = 3.3616
    assert spec.capacity_requests_per_s == pytest.approx(100 * tau / (100 * 0.05 + 100 * tau * 0.1))
    # prefix caching: half the prompt cached halves t_p
    hit = analyze(st, replace(cfg, prefix_hit=0.5), 0.9)
    assert hit.capacity_requests_per_s == pytest.approx(100 / (100 * 0.02 + 100 * 0.05))


@pytest.mark.parametrize(
    ("rate", "chunk"), [(40.0, 64), (55.0, None), (400.0, 64)], ids=["light", "mid", "saturated"]
)
def test_analytic_and_simulation_agree(rate: float, chunk: int | None) -> None:
    st = synthetic(0.01, 1e-4, 1e-5)
    cfg = config(rate, 100, 30, max_batch=64, chunk_tokens=chunk)
    a = analyze(st, cfg, 0.9)
    sim = summarize(simulate_replica(st, cfg, 0.9, poisson_requests(cfg, rate, 1500, seed=3)))
    assert a.saturated == (rate > 100)
    assert sim["throughput_tokens_per_s"] == pytest.approx(a.throughput_tokens_per_s, rel=0.05)


def test_disaggregated_pools() -> None:
    st = synthetic(0.01, 1e-4, 1e-4)
    cfg = ServeConfig(
        4.0, Lengths("fixed", 1000), Lengths("fixed", 100), 2, 1, max_batch=100, disagg=(1, 1)
    )
    a = analyze(st, cfg, 0.9)
    # prefill pool: capacity 1 / t_p = 1 / 0.1 = 10 req/s; decode pool (no prefill in its steps):
    # B / (O t_dec(B)) = 100 / (100 x 0.02) = 50 req/s; the system: min = 10
    assert a.capacity_requests_per_s == pytest.approx(10.0)
    # TTFT p50 = t_p + KV transfer (1 byte/token x 1000 tokens over 50 GB/s; rho 0.4 < 0.5: no
    # wait at the median)
    assert a.ttft_s[50] == pytest.approx(0.1 + 1000 / 50e9)


def _serve_json(capsys: pytest.CaptureFixture[str], *extra: str) -> dict[str, object]:
    from shardline.cli.main import main

    argv = ["serve", "--model", "llama-3.1-8b", "--hw", "h100-sxm", "--devices", "2", "--tp", "1"]
    assert main([*argv, "--in", "1000", "--out", "200", *extra, "--json"]) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_serve_cli_contract(capsys: pytest.CaptureFixture[str]) -> None:
    out = _serve_json(capsys, "--rate", "4", "--slo", "ttft=500ms,tpot=30ms", "--dtype", "fp8")
    # below saturation every request is served: 4 req/s x 200 output tokens
    assert out["throughput_tokens_per_s"] == pytest.approx(800)
    for key in ("ttft_s", "tpot_s"):
        q = out[key]
        assert q["p50"] <= q["p90"] <= q["p99"]  # type: ignore[index]
    assert out["max_rate_meeting_slo"] > 4  # type: ignore[operator]
    assert "usd_per_million_tokens" in out and "joules_per_token" in out


def test_serve_cli_errors(capsys: pytest.CaptureFixture[str]) -> None:
    from shardline.cli.main import main

    base = ["serve", "--model", "llama-3.1-8b", "--devices", "2", "--in", "10", "--out", "5"]
    assert main([*base, "--rate", "-3"]) == 2
    assert main([*base, "--rate", "1", "--tp", "3"]) == 2
    assert main([*base, "--rate", "1", "--disagg", "1:2"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 3 and "Traceback" not in err


def test_trace_file(tmp_path: object) -> None:
    from pathlib import Path

    from shardline.io.serving_trace import read_trace

    path = Path(str(tmp_path)) / "trace.csv"
    path.write_text("arrival_s,input_tokens,output_tokens\n1.5,100,20\n0.5,200,10\n")
    arrival, inp, out = read_trace(path)
    assert arrival.tolist() == [0.5, 1.5] and inp.tolist() == [200, 100]
    path.write_text("arrival_s,input_tokens\n1,2\n")
    with pytest.raises(InputError):
        read_trace(path)


def test_serving_search_small() -> None:
    from shardline.serving.search import BATCH_LIMITS, SearchOptions, serving_search

    calls: list[int] = []

    def mapper(fn, chunks):  # type: ignore[no-untyped-def]
        calls.append(len(chunks))
        return [fn(c) for c in chunks]

    slo = parse_slo("ttft=1s,tpot=50ms")
    out = serving_search(
        "llama-3.1-8b",
        chips=["h100-sxm"],
        rate_per_s=2.0,
        input_tokens=500,
        output_tokens=100,
        slo=slo,
        max_devices=2,
        options=SearchOptions(map_chunks=mapper),
    )
    # tp 1: 1 or 2 devices; tp 2: 2 devices; each x every batch limit
    assert out["evaluated"] == 3 * len(BATCH_LIMITS) and calls == [2]
    best = out["best"]
    assert best is not None and best["meets_slo"] and best["devices"] == 1
    assert out["pareto"] and all("why" in f for f in out["failures"])


@pytest.mark.parametrize(
    ("tp", "devices", "max_batch"),
    [(1, 1, 8), (1, 2, 64), (1, 4, 512), (2, 4, 32), (4, 4, 256)],
    ids=["saturated", "tp1x2", "tp1x4", "tp2x2", "tp4x1"],
)
def test_search_rows_are_what_serve_gives(
    capsys: pytest.CaptureFixture[str], tp: int, devices: int, max_batch: int
) -> None:
    """A layout the serving search lists and `serve` with the same flags give the same TTFT,
    TPOT and throughput (each priced afresh from the engine: the step-time cache is cleared)."""
    from shardline.cli.main import main
    from shardline.serving.search import serving_search
    from shardline.serving.steptimes import cached_step_times

    cached_step_times.cache_clear()
    found = serving_search(
        "llama-3.1-8b",
        chips=["h100-sxm"],
        rate_per_s=12.0,
        input_tokens=1500,
        output_tokens=300,
        slo=parse_slo("ttft=60ms,tpot=4ms,p=90"),
        max_devices=4,
    )
    rows = {(r["tp"], r["devices"], r["max_batch"]): r for r in _all_rows(found)}
    for listed in found["pareto"]:  # type: ignore[attr-defined]
        assert listed == rows[(listed["tp"], listed["devices"], listed["max_batch"])]
    row = rows[(tp, devices, max_batch)]
    cached_step_times.cache_clear()
    argv = ["serve", "--model", "llama-3.1-8b", "--hw", "h100-sxm", "--devices", str(devices)]
    argv += ["--tp", str(tp), "--max-batch", str(max_batch), "--rate", "12", "--in", "1500"]
    argv += ["--out", "300", "--dtype", "fp8", "--engine", "trtllm"]
    argv += ["--slo", "ttft=60ms,tpot=4ms,p=90", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert (row["ttft_p99_s"] is None) == (out["ttft_s"]["p99"] is None)
    if row["ttft_p99_s"] is not None:
        assert row["ttft_p99_s"] == pytest.approx(out["ttft_s"]["p99"], rel=1e-9)
    assert row["tpot_p99_s"] == pytest.approx(out["tpot_s"]["p99"], rel=1e-9)
    assert row["throughput_tokens_per_s"] == pytest.approx(out["throughput_tokens_per_s"], rel=1e-9)
    assert row["usd_per_million_tokens"] == pytest.approx(out["usd_per_million_tokens"], rel=1e-9)
    assert row["meets_slo"] == out["meets_slo"]
    if (tp, devices, max_batch) == (1, 1, 8):
        assert out["saturated"] and "saturated" in row["why_not"]
    else:  # below saturation every request is served: 12 req/s x 300 output tokens
        assert out["throughput_tokens_per_s"] == pytest.approx(3600, rel=1e-12)


def _all_rows(found: dict[str, object]) -> list[dict[str, object]]:
    """Every row the search evaluated: its front, its best and its failures name only some, so
    the chunk is evaluated again through the same function the search maps."""
    from shardline.serving.search import SEARCH_DTYPE, SEARCH_ENGINE, Chunk, evaluate_chunk

    slo = parse_slo("ttft=60ms,tpot=4ms,p=90")
    lengths = (Lengths("fixed", 1500), Lengths("fixed", 300))
    rows: list[dict[str, object]] = []
    for tp in (1, 2, 4):
        chunk = Chunk(
            "llama-3.1-8b", "h100-sxm", tp, 12.0, *lengths, slo, 4, SEARCH_ENGINE, SEARCH_DTYPE
        )
        rows += evaluate_chunk(chunk)
    assert len(rows) == found["evaluated"]
    return rows


def test_serve_trace_and_disagg(tmp_path: object, capsys: pytest.CaptureFixture[str]) -> None:
    from pathlib import Path

    path = Path(str(tmp_path)) / "trace.csv"
    # 80 requests, one every 0.1 s, 20 to 24 output tokens (mean 22): 10 req/s x 22 tokens/s
    rows = "".join(f"{0.1 * i:.1f},{300 + 10 * (i % 7)},{20 + i % 5}\n" for i in range(80))
    path.write_text("arrival_s,input_tokens,output_tokens\n" + rows)
    for extra in ((), ("--disagg", "1:1")):
        out = _serve_json(capsys, "--rate", "10", "--trace", str(path), *extra)
        sim = out["simulation"]
        assert sim["requests"] == 80  # type: ignore[index]
        assert sim["throughput_tokens_per_s"] == pytest.approx(220, rel=0.1)  # type: ignore[index]
    assert "disaggregated" in " ".join(out["notes"])  # type: ignore[arg-type]


def test_serve_cli_price_and_bad_knobs(capsys: pytest.CaptureFixture[str]) -> None:
    from shardline.cli.main import main

    out = _serve_json(capsys, "--rate", "1", "--usd-per-hour", "2")
    # 2 devices x $2/h / 3600 s/h / (1 req/s x 200 tokens) x 1e6 = $5.56 per million tokens
    assert out["usd_per_million_tokens"] == pytest.approx(2 * 2 / 3600 / 200 * 1e6)
    base = ["serve", "--model", "llama-3.1-8b", "--devices", "2", "--in", "10", "--out", "5"]
    for bad in (["--chunk", "-5"], ["--usd-per-hour", "-1"], ["--spec-decode", "2.5,0.5"]):
        assert main([*base, "--rate", "1", *bad]) == 2
    assert capsys.readouterr().err.count("error:") == 3


def test_engine_figures_are_sourced() -> None:
    from shardline.serving.engines import engine, engine_names

    assert engine_names() == ("lmdeploy", "sglang", "tgi", "trtllm", "vllm")  # engines.toml
    for name in engine_names():
        eng = engine(name)
        assert all(len(src) > 20 for src in eng.sources.values())
        assert 0 <= eng.scheduling_overhead_fraction < 1 and 0 < eng.kv_memory_fraction <= 1
    assert engine("TensorRT-LLM").kv_reservation == "full_output"
    assert engine("vllm@0.10").version == "0.10" and engine("sglang@v0.4").name == "sglang"
    with pytest.raises(InputError, match="describes vllm 0.10 only"):
        engine("vllm@0.5")
    with pytest.raises(InputError):
        engine("orca")


def test_every_engine_has_its_row_in_the_docs() -> None:
    """A serving engine is its table in engines.toml and its row in docs/serving.md's table of
    engines (docs/architecture.md: the two files a new engine touches)."""
    from pathlib import Path

    from shardline.serving.engines import engine_names

    doc = (Path(__file__).resolve().parent.parent / "docs" / "serving.md").read_text()
    rows = {line.split("|")[1].strip() for line in doc.splitlines() if line.startswith("| ")}
    assert set(engine_names()) <= rows


def test_total_token_price(capsys: pytest.CaptureFixture[str]) -> None:
    out = _serve_json(capsys, "--rate", "1", "--usd-per-hour", "2")
    # the same dollars over input + output tokens: 1 req/s x (1000 + 200) tokens
    assert out["usd_per_million_total_tokens"] == pytest.approx(2 * 2 / 3600 / 1200 * 1e6)
