"""Hostile input, second list: the Python API given wrong values raises the one InputError the
command line prints (never AttributeError, ZeroDivisionError or a nonsense number); huge but legal
inputs meet a stated limit (layers, --batches, simulated steps) in one line; every wait on a Dask
peer has a deadline and names what it waited for."""

from __future__ import annotations

import json
import math
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shardline import InputError, ffn, matmul, sweep_batch
from shardline.cli.main import main
from shardline.models import load_model
from shardline.planning import executors, sweep
from shardline.serving.config import MAX_TOKENS, Lengths, ServeConfig
from shardline.serving.search import serving_search
from shardline.serving.serve import ServeOptions, serve
from shardline.serving.slo import parse_slo
from shardline.workload.modelspec import kv_bytes_at, kv_bytes_per_token
from shardline.workload.workload import MAX_DISTINCT_LAYERS, MAX_LAYERS

FIXED = Lengths("fixed", 2000.0)
GOOD = {"rate_per_s": 5.0, "input_tokens": FIXED, "output_tokens": FIXED, "devices": 8, "tp": 8}
BAD = (None, 0, -1, math.nan, math.inf, 10**30, 10**400, "8", 1.5, True, [8])
SEARCH = {
    "chips": ["h100-sxm"], "rate_per_s": 5, "input_tokens": 2000, "output_tokens": 500,
    "slo": parse_slo("ttft=500ms,tpot=30ms"), "max_devices": 8,
}  # fmt: skip


def _error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one error line of a command that must fail with exit status 2."""
    code = main(list(argv))
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0].removeprefix("error: ")


# --- the issue's cases: each one InputError with the CLI's words --------------------------------


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: ServeConfig(**{**GOOD, "tp": 0}), "--tp must be a positive integer, got 0"),
        (lambda: ServeConfig(**{**GOOD, "spec_k": 10**9}),
         "--spec-decode k must be at most 1,024, got 1,000,000,000"),
        (lambda: serving_search("llama-3.2-1b", **{**SEARCH, "input_tokens": 0}),
         "--in: 0 must be at least 1 token"),
        (lambda: serving_search("llama-3.2-1b", **{**SEARCH, "slo": None}),
         "the serving search needs --slo, e.g. --slo ttft=500ms,tpot=30ms"),
        (lambda: parse_slo(None), "--slo must be text such as ttft=500ms,tpot=30ms, got None"),
        (lambda: kv_bytes_at(load_model("llama-3.2-1b"), -1),
         "context must be a whole number >= 0, got -1"),
        (lambda: matmul(8, 8, 8, precision="bf16"),
         "precision must be a Precision (shardline.basics.options) or None, got 'bf16'; give one "
         "dtype as dtype='bf16'"),
    ],
)  # fmt: skip
def test_the_issue_cases_raise_one_input_error(call: Any, message: str) -> None:
    with pytest.raises(InputError) as info:
        call()
    assert str(info.value) == message


def test_the_api_and_the_cli_say_the_same(capsys: pytest.CaptureFixture[str]) -> None:
    """ServeConfig shares the CLI's validators: the same words (the CLI quotes its text)."""
    serve_argv = ["serve", "--model", "llama-3.2-1b", "--hw", "h100-sxm", "--devices", "8"]
    serve_argv += ["--rate", "5", "--in", "2000", "--out", "500"]
    cli = _error(capsys, *serve_argv, "--tp", "0")
    assert cli == "--tp must be a positive integer, got '0'"
    cli = _error(capsys, *serve_argv, "--tp", "8", "--spec-decode", "2000,0.5")
    assert cli == "--spec-decode k must be at most 1,024, got 2,000"
    with pytest.raises(InputError, match=r"^--spec-decode k must be at most 1,024, got 2,000$"):
        ServeConfig(**{**GOOD, "spec_k": 2000})
    cli = _error(capsys, *serve_argv, "--tp", "8", "--rate", "1e10")  # the last --rate wins
    with pytest.raises(InputError) as info:
        ServeConfig(**{**GOOD, "rate_per_s": 1e10})
    assert cli == str(info.value) == "--rate must be positive and below 1e+09 per second"


@pytest.mark.parametrize(
    "field",
    ["rate_per_s", "input_tokens", "output_tokens", "devices", "tp", "max_batch", "chunk_tokens",
     "prefix_hit", "spec_k", "spec_alpha", "spec_draft_ratio", "disagg"],
)  # fmt: skip
def test_serve_config_refuses_every_wrong_value(field: str) -> None:
    allowed = {"rate_per_s": (1.5,), "chunk_tokens": (None,), "disagg": (None,)}
    allowed |= {f: (0,) for f in ("prefix_hit", "spec_k", "spec_alpha", "spec_draft_ratio")}
    allowed["spec_draft_ratio"] += (10**30, 1.5)  # a draft step may cost more than the target's
    for value in BAD:
        if value in allowed.get(field, ()) and type(value) is not bool:
            continue
        with pytest.raises(InputError):
            ServeConfig(**{**GOOD, field: value})


def test_a_spec_decode_config_at_the_limit_is_a_real_tpot() -> None:
    cfg = ServeConfig(**{**GOOD, "spec_k": 1024, "spec_alpha": 1.0})
    assert cfg.tokens_per_step == 1025.0


@pytest.mark.parametrize("value", [0, -5, math.nan, math.inf, 10**400, "2000", None, True])
def test_lengths_refuse_what_is_not_a_token_count(value: object) -> None:
    with pytest.raises(InputError):
        Lengths("fixed", value)  # type: ignore[arg-type]
    if not isinstance(value, str):  # serving_search reads text as --out does ("exp:500")
        with pytest.raises(InputError):
            serving_search("llama-3.2-1b", **{**SEARCH, "output_tokens": value})


def test_lengths_over_the_limit_state_it() -> None:
    with pytest.raises(InputError, match="--in: 1e\\+12 tokens is more than the limit of 1,000"):
        serving_search("llama-3.2-1b", **{**SEARCH, "input_tokens": 10**12})
    assert MAX_TOKENS == 1_000_000_000
    with pytest.raises(InputError, match="a token-length distribution is one of fixed"):
        Lengths("gamma", 5.0)
    with pytest.raises(InputError, match="uniform:LOW-HIGH needs LOW <= HIGH, got 10.0-5.0"):
        Lengths("uniform", 7.5, 10.0, 5.0)


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("chips", "h100-sxm", "chips must be a list of chip names, got 'h100-sxm'"),
        ("chips", [], "chips must be a list of chip names, got []"),
        ("chips", [None], "chips must be a list of chip names, got [None]"),
        ("rate_per_s", None, "--rate: None is not a number"),
        ("rate_per_s", 0, "--rate must be positive and below 1e+09 per second"),
        ("rate_per_s", math.nan, "--rate: nan must be finite"),
        ("max_devices", 0, "--max-devices must be a positive integer, got 0"),
        ("max_devices", 4097, "--max-devices must be at most 4,096, got 4,097"),
        ("max_devices", 8.0, "--max-devices must be a positive integer, got 8.0"),
        ("slo", "ttft=1s", "the serving search needs --slo, e.g. --slo ttft=500ms,tpot=30ms"),
    ],
)
def test_serving_search_refuses_wrong_values(field: str, value: object, message: str) -> None:
    with pytest.raises(InputError) as info:
        serving_search("llama-3.2-1b", **{**SEARCH, field: value})
    assert str(info.value) == message


@pytest.mark.parametrize("text", [None, 0, 1.5, b"ttft=1s", ["ttft=1s"]])
def test_parse_slo_refuses_what_is_not_text(text: object) -> None:
    with pytest.raises(InputError, match="^--slo must be text such as ttft=500ms,tpot=30ms"):
        parse_slo(text)  # type: ignore[arg-type]


@pytest.mark.parametrize("context", [-1, None, 1.5, math.nan, "4096", True, 2**41])
def test_kv_bytes_at_refuses_a_context_that_is_not_a_count(context: object) -> None:
    spec = load_model("llama-3.2-1b")
    with pytest.raises(InputError, match="^context must be"):
        kv_bytes_at(spec, context)  # type: ignore[arg-type]


def test_kv_bytes_are_counted_for_legal_contexts() -> None:
    spec = load_model("llama-3.2-1b")  # 16 layers x 2 x 8 kv heads x 64 x 2 bytes = 32 KiB/token
    assert kv_bytes_at(spec, 0) == 0
    assert kv_bytes_at(spec, 1) == kv_bytes_per_token(spec) == 32_768
    with pytest.raises(InputError, match="kv_bytes must be a positive number of bytes, got 0"):
        kv_bytes_at(spec, 8, kv_bytes=0)
    with pytest.raises(InputError, match="^kv_bytes_at needs a ModelSpec, got 'llama-3.2-1b'"):
        kv_bytes_at("llama-3.2-1b", 8)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"sim_requests": 0}, "--requests must be a positive integer, got 0"),
        ({"sim_requests": 20_001}, "--requests must be at most 20,000, got 20,001"),
        ({"usd_per_hour": -1.0}, "--usd-per-hour must be positive and at most 1e9, got -1.0"),
        ({"usd_per_hour": math.nan}, "--usd-per-hour: nan must be finite"),
        ({"slo": "ttft=1s"}, "slo must be an SLO (parse_slo('ttft=500ms')), got 'ttft=1s'"),
        ({"simulate": 1}, "simulate must be True or False, got 1"),
        ({"engine": None}, "engine must be a name, got None"),
        ({"seed": -1}, "seed must be a whole number >= 0, got -1"),
    ],
)
def test_serve_options_refuse_wrong_values(options: dict[str, Any], message: str) -> None:
    with pytest.raises(InputError) as info:
        ServeOptions(**options)
    assert str(info.value) == message


def test_serve_refuses_what_is_not_a_config() -> None:
    with pytest.raises(InputError, match="^serve needs a ServeConfig, got None$"):
        serve("llama-3.2-1b", "h100-sxm", None)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="^options must be a ServeOptions, got 'x'$"):
        serve("llama-3.2-1b", "h100-sxm", ServeConfig(**GOOD), "x")  # type: ignore[arg-type]


def test_sweep_batch_refuses_what_is_not_a_workload() -> None:
    with pytest.raises(InputError, match="^sweep_batch needs a Workload, got None$"):
        sweep_batch(None, "h100-sxm", 8, [1, 2])  # type: ignore[arg-type]


# --- huge but legal: the limits ------------------------------------------------------------------


def _stack_file(path: Path, layers: int) -> Path:
    lines = ['name = "many"', "[dims]", "M = 64", "N = 64", "K = 64"]
    for i in range(layers):
        lines += ["[[layer]]", f'name = "l{i}"', 'einsum = "x[M,N] * w[N,K] -> y[M,K]"']
    path.write_text("\n".join(lines) + "\n")
    return path


def test_a_workload_past_the_layer_limit_is_refused_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert MAX_LAYERS == 250_000
    path = _stack_file(tmp_path / "many.toml", MAX_LAYERS + 1)
    start = time.perf_counter()
    message = _error(capsys, "stack", str(path), "--hw", "h100-sxm")
    assert time.perf_counter() - start < 5  # its headers counted before the file is parsed
    assert message == (
        f"{path}: 250,001 layers; the limit is 250,000 (give identical layers in a row as one "
        "layer with count = N, or repeat a block with repeat = N)"
    )


def test_a_workload_past_the_distinct_layer_limit_is_refused_at_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """20,001 tables of different sizes: refused before a Layer is built for any."""
    assert MAX_DISTINCT_LAYERS == 20_000
    lines = ['name = "sizes"']
    for i in range(MAX_DISTINCT_LAYERS + 1):
        lines += ["[[layer]]", f'name = "l{i}"', "m = 64", "k = 64", f"n = {i + 1}"]
    path = tmp_path / "sizes.toml"
    path.write_text("\n".join(lines) + "\n")
    start = time.perf_counter()
    message = _error(capsys, "stack", str(path), "--hw", "h100-sxm")
    assert time.perf_counter() - start < 5
    assert message == (
        f"{path}: 20,001 distinct layers; the limit is 20,000 (layers that differ in more than "
        "their name are priced one by one; give identical layers in a row as one layer with "
        "count = N, or repeat a block with repeat = N)"
    )


@pytest.mark.slow
def test_200000_layers_stack_in_seconds(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 31's workload: 200,000 [[layer]] tables of one 4096^3 matmul (16 MB). Each layer is
    2 x 4096^3 FLOPs; the whole stack 200,000 times that. Measured: about 3 s of CPU."""
    lines = ['name = "many"', "[dims]", "M = 4096", "N = 4096", "K = 4096"]
    for i in range(200_000):
        lines += ["[[layer]]", f'name = "l{i}"', 'einsum = "x[M,N] * w[N,K] -> y[M,K]"']
        lines.append('weights = ["w"]')
    path = tmp_path / "many.toml"
    path.write_text("\n".join(lines) + "\n")
    cpu = time.process_time()
    assert main(["stack", str(path), "--hw", "h100-sxm", "--json"]) == 0
    assert time.process_time() - cpu < 15
    out = json.loads(capsys.readouterr().out)
    assert len(out["layers"]) == 200_000
    assert out["layers"][-1]["name"] == "l199999"
    assert out["totals"]["flops"] == 200_000 * 2 * 4096**3
    assert out["memory"]["params"] == 200_000 * 4096**2


def test_plan_batches_past_the_limit_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    batches = ",".join(str(b) for b in range(1, 41))
    start = time.perf_counter()
    message = _error(
        capsys, "plan", "--model", "llama-3.2-1b", "--hw", "h100-sxm", "--devices", "8",
        "--batches", batches,
    )  # fmt: skip
    assert time.perf_counter() - start < 5
    assert message == "batches: 40 batch sizes; the limit is 12 (each is a plan search of its own)"


def test_the_crossover_search_stops_at_its_plan_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """1 and 32,768: the plan changes in between, and the bisection would take 15 more plan
    searches; with a budget of 3 it stops after the third and says so."""
    w = ffn(d_model=8192, d_ff=28672, seq_len=1, batch=1, layers=1, phase="decode")
    searched: list[int] = []
    real_planner = sweep.batch_planner

    def counted(workload: Any, *args: Any, **kwargs: Any) -> Any:
        search = real_planner(workload, *args, **kwargs)

        def at(batch: int) -> Any:
            searched.append(batch)
            return search(batch)

        return at

    monkeypatch.setattr(sweep, "batch_planner", counted)
    monkeypatch.setattr(sweep, "MAX_SWEEP_PLANS", 3)
    cut = sweep_batch(w, "h100-sxm", 8, [1, 32768])
    assert cut.points[0].recommended != cut.points[1].recommended
    assert len(searched) == 3 and searched[:2] == [1, 32768]
    assert not cut.crossovers_complete and cut.to_dict()["crossovers_complete"] is False
    assert cut.crossovers == []
    from shardline.report.plan_text import render_sweep

    text = render_sweep(cut)
    assert "the search for crossovers stopped at its limit of 48 plan searches" in text
    assert "No crossover" not in text


def test_a_long_prompt_simulation_counts_its_prefill_steps(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """20,000 prompts of a million tokens are 2.4 million prefill chunks of 8,192: refused at
    once (it took 70 s and 570 MB while only the output steps were counted)."""
    start = time.perf_counter()
    message = _error(
        capsys, "serve", "--model", "llama-3.2-1b", "--hw", "h100-sxm", "--devices", "8",
        "--tp", "8", "--rate", "1000", "--in", "1e6", "--out", "10", "--requests", "20000",
        "--simulate",
    )  # fmt: skip
    assert time.perf_counter() - start < 5
    assert "20,000 requests of 1,000,000 prompt and 10 output tokens" in message
    assert "the limit is 400,000" in message
    steps = int(message.split("about ")[1].split(" engine")[0].replace(",", ""))
    assert steps >= 20_000 * 1_000_000 // 8192


# --- silent peers: every wait on Dask has a deadline ---------------------------------------------


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A TCP port on 127.0.0.1 that accepts connections and never says a word."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()
    for conn in held:
        conn.close()


def test_a_scheduler_that_never_speaks_is_given_up_on(
    silent_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("distributed", reason="dask[distributed] not installed")
    monkeypatch.setattr(executors, "ANSWER_TIMEOUT_S", 1.0)
    address = f"tcp://127.0.0.1:{silent_port}"
    start = time.perf_counter()
    with pytest.raises(InputError) as info:
        executors.connect(address)
    assert time.perf_counter() - start < 4
    assert str(info.value) == (
        f"cannot reach the Dask scheduler at {address}: it accepted the connection but did not "
        "answer Dask's handshake within 1 s"
    )
    assert executors.ANSWER_TIMEOUT_S == 1.0 and executors.CONNECT_TIMEOUT_S == 5


def _abs_missing(x: int) -> int:
    raise ModuleNotFoundError("No module named 'shardline'")


def _sleepy(x: int) -> int:
    time.sleep(3)
    return x


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    distributed = pytest.importorskip("distributed", reason="dask[distributed] not installed")
    with distributed.LocalCluster(
        n_workers=1, processes=False, threads_per_worker=1, dashboard_address=None
    ) as c:
        yield c


def test_a_cluster_without_workers_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    distributed = pytest.importorskip("distributed", reason="dask[distributed] not installed")
    monkeypatch.setattr(executors, "WORKERS_TIMEOUT_S", 1)
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=None) as empty:
        start = time.perf_counter()
        with pytest.raises(InputError, match="has no worker: none joined within 1 s$"):
            executors.map_chunks(abs, [1, -2], executor="dask", scheduler=empty.scheduler_address)
        assert time.perf_counter() - start < 5


def test_a_worker_without_shardline_is_named(cluster: Any) -> None:
    with pytest.raises(InputError, match="a worker cannot run the search .*install shardline"):
        executors.map_chunks(
            _abs_missing, [1], executor="dask", scheduler=cluster.scheduler_address
        )


def test_chunks_that_never_finish_are_given_up_on(
    cluster: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(executors, "CHUNK_TIMEOUT_S", 1)
    monkeypatch.setattr(executors, "POLL_S", 0.2)
    start = time.perf_counter()
    with pytest.raises(InputError, match=r"no chunk of the search finished within 1 s \(0 of 2"):
        executors.map_chunks(_sleepy, [1, 2], executor="dask", scheduler=cluster.scheduler_address)
    assert time.perf_counter() - start < 3


def test_a_cluster_whose_worker_dies_is_given_up_on(monkeypatch: pytest.MonkeyPatch) -> None:
    """The only worker leaves mid-search: the search says so at its next look (POLL_S), not at
    CHUNK_TIMEOUT_S, and never waits forever."""
    distributed = pytest.importorskip("distributed", reason="dask[distributed] not installed")
    monkeypatch.setattr(executors, "POLL_S", 0.2)
    with distributed.LocalCluster(
        n_workers=1, processes=False, threads_per_worker=1, dashboard_address=None
    ) as c:
        threading.Timer(0.5, lambda: c.scale(0)).start()
        start = time.perf_counter()
        with pytest.raises(InputError, match=r"lost its workers \(0 of 2 chunks done\)"):
            executors.map_chunks(_sleepy, [1, 2], executor="dask", scheduler=c.scheduler_address)
        assert time.perf_counter() - start < 10


def test_a_cluster_that_works_answers_in_order(cluster: Any) -> None:
    got = executors.map_chunks(
        abs, [3, -1, -2], executor="dask", scheduler=cluster.scheduler_address
    )
    assert got == [3, 1, 2]
