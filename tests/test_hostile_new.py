"""Hostile inputs to the commands and flags that came after the first catalogue (group 6 of
benchmarks/bench_hostile.py): serve, search, the serving trace, price files, the Dask executor,
report --model, model import and the workload template tables. Each test is one case the
catalogue found failing (a traceback, a wrong exit status, a hang or a silent answer), now one
`error:` line and exit status 2."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pytest

from shardline.cli.main import main
from shardline.errors import InputError

MODEL = ["--model", "llama-3.2-1b", "--hw", "h100-sxm"]
SERVE = ["serve", *MODEL, "--devices", "8", "--tp", "8"]
TRAIN = ["search", *MODEL, "--devices", "64", "--tokens", "1T", "--json", "--quiet"]
SERVING = [
    "search", *MODEL, "--slo", "ttft=500ms,tpot=30ms", "--rate", "5/s", "--in", "2000",
    "--out", "500", "--json", "--quiet",
]  # fmt: skip
HEAD = "arrival_s,input_tokens,output_tokens\n"


def _error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one error line of a run that must fail with exit status 2."""
    try:
        code = main(list(argv))
    except SystemExit as exc:  # the parser refuses the flag itself
        code = int(exc.code or 0)
    err = capsys.readouterr().err
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


# --- serve: the serving trace ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (HEAD.encode() + b"0,10,10\n1,2,3,4\n", r"trace.csv:3: more cells than the header's 3"),
        (HEAD.encode() + b"0,10,10\n\xff,1,1\n", r"not UTF-8 text \(byte 45\)"),
        (HEAD.encode() + b"0,10,10\n1\x00,1,1\n", "a NUL byte at character 46"),
        (HEAD.encode() + b"0,10,10\n1," + b"1" * 200_000 + b",1\n", "field larger than field"),
    ],
    ids=["extra-cells", "not-utf8", "nul", "huge-field"],
)
def test_bad_trace_files(tmp_path: Path, body: bytes, message: str) -> None:
    from shardline.io.serving_trace import read_trace

    path = tmp_path / "trace.csv"
    path.write_bytes(body)
    with pytest.raises(InputError, match=message):
        read_trace(path)


def test_trace_limits_and_non_regular_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from shardline.io import serving_trace
    from shardline.io.serving_trace import read_trace

    with pytest.raises(InputError, match="/dev/zero is a character device"):
        read_trace("/dev/zero")
    path = tmp_path / "t.csv"
    path.write_bytes(b"\xef\xbb\xbf" + (HEAD + "1,10,20\n0,30,40\n").encode())  # a BOM: fine
    arrival, inp, out = read_trace(path)
    assert (arrival.tolist(), inp.tolist(), out.tolist()) == ([0, 1], [30, 10], [40, 20])
    monkeypatch.setattr(serving_trace, "MAX_TRACE_ROWS", 1)
    with pytest.raises(InputError, match="more than 1 requests"):
        read_trace(path)


# --- serve: sizes past their limits --------------------------------------------------------


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--rate", "1e300"], "--rate must be positive and below 1e+09 per second"),
        (["--in", "1e300"], "--in: 1e+300 tokens is more than the limit of 1,000,000,000"),
        (["--out", "exp:2e9"], "--out: 2e+09 tokens is more than the limit"),
        (["--spec-decode", "1e9,0.5"], "--spec-decode k must be at most 1,024"),
        (["--max-batch", "1e300"], "--max-batch must be at most 1,000,000"),
        (["--chunk", "1e300"], "--chunk must be at most 1,000,000,000"),
        (["--requests", "1e12"], "--requests must be at most 20,000"),
        (["--usd-per-hour", "1e300"], "--usd-per-hour must be positive and at most 1e9"),
    ],
)
def test_serve_refuses_sizes_past_the_limits(
    capsys: pytest.CaptureFixture[str], flags: list[str], message: str
) -> None:
    defaults = {"--rate": "5", "--in": "2000", "--out": "500"}
    argv = [*SERVE, *(x for k, v in defaults.items() if k not in flags for x in (k, v))]
    assert message in _error(capsys, *argv, *flags)


@pytest.mark.parametrize("flag", ["--mem-bw", "--flops-per-s", "--compute-dtype"])
def test_serve_refuses_rate_flags_it_does_not_read(
    capsys: pytest.CaptureFixture[str], flag: str
) -> None:
    value = "fp8" if flag == "--compute-dtype" else "1e11"
    argv = [*SERVE, "--rate", "5", "--in", "2000", "--out", "500", flag, value]
    assert f"{flag} does not apply to serve" in _error(capsys, *argv)


def test_simulation_steps_are_bounded() -> None:
    from shardline.serving.config import Lengths, ServeConfig
    from shardline.serving.runsim import MAX_SIM_STEPS, check_simulation_size
    from shardline.serving.serve import ServeOptions

    cfg = ServeConfig(5.0, Lengths("fixed", 2000), Lengths("fixed", 500), 8, 8)
    opts = ServeOptions(simulate=True, sim_requests=2000)
    # a batch of one: 2000 requests x 500 tokens / 1 token per step / batch 1 + 2000 prompts
    # = 1,002,000 steps, past the limit of 400,000
    assert MAX_SIM_STEPS == 400_000
    with pytest.raises(InputError, match=r"about 1,002,000 engine steps .* limit is 400,000"):
        check_simulation_size(cfg, opts, batch=0.3)  # a batch under one counts as one
    # a batch of 10: 2000 x 500 / 10 + 2000 = 102,000 steps: simulated
    check_simulation_size(cfg, opts, batch=10.0)


def test_serve_figures_keep_the_simulation_limit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # --plot simulates the requests too: 0.01 req/s on one replica runs each request alone,
    # 2000 x 500 / batch 1 + 2000 = 1,002,000 steps, past the limit (it took minutes)
    out = tmp_path / "s.png"
    argv = [*SERVE, "--rate", "0.01", "--in", "2000", "--out", "500", "--plot", str(out)]
    assert "about 1,002,000 engine steps" in _error(capsys, *argv)
    assert list(tmp_path.iterdir()) == []


def test_simulated_replicas_are_bounded() -> None:
    import numpy as np

    from shardline.serving.config import Lengths, ServeConfig
    from shardline.serving.runsim import check_simulation_size
    from shardline.serving.serve import ServeOptions
    from shardline.serving.simulate import Requests

    lengths = (Lengths("fixed", 2000), Lengths("fixed", 500))
    trace = Requests(np.arange(20.0), np.full(20, 100.0), np.full(20, 10.0))
    opts = ServeOptions(simulate=True, trace=trace)
    # 1,024 devices / tp 8 = 128 replicas share a trace of 20 requests: some would get none
    cfg = ServeConfig(5.0, *lengths, 1024, 8)
    with pytest.raises(InputError, match="20 requests for 128 replicas"):
        check_simulation_size(cfg, opts, batch=1.0)
    # 1e9 / 8 = 125,000,000 replicas, each simulated one by one: past the limit of 256
    with pytest.raises(InputError, match="125,000,000 replicas .* the limit is 256"):
        check_simulation_size(ServeConfig(5.0, *lengths, 10**9, 8), opts, batch=1.0)
    # 64 / 8 = 8 replicas: 20 requests x 10 tokens / batch 1 + 20 = 220 steps, simulated
    check_simulation_size(ServeConfig(5.0, *lengths, 64, 8), opts, batch=1.0)
    # disaggregated pools: 80,000 / 8 = 10,000 decode replicas, each simulated
    big = ServeConfig(5.0, *lengths, 160_000, 8, disagg=(80_000, 80_000))
    with pytest.raises(InputError, match="10,000 replicas"):
        check_simulation_size(big, ServeOptions(simulate=True), batch=100.0)


# --- search ---------------------------------------------------------------------------------


def test_search_refuses_repeats_and_too_many_chips(capsys: pytest.CaptureFixture[str]) -> None:
    assert "--fix gives 'tp' twice" in _error(capsys, *TRAIN, "--fix", "tp=8,tp=4")
    assert "--hw names 'H100-SXM' twice" in _error(capsys, *TRAIN, "--hw", "h100-sxm,H100-SXM")
    many = ",".join(f"chip{i}" for i in range(65))
    assert "--hw names 65 chips; the limit is 64" in _error(capsys, *TRAIN, "--hw", many)


def test_training_search_batch_limit(capsys: pytest.CaptureFixture[str]) -> None:
    # 1Ti tokens = 2^40 / 4,096 tokens per sequence (the default --seq-len, plan's too) = 2^28 =
    # 268,435,456 sequences > 2^20
    line = _error(capsys, *TRAIN, "--global-batch", "1Ti")
    assert "is 268,435,456 sequences of 4,096 tokens per step; the limit is 1,048,576" in line


def test_serving_search_limits(capsys: pytest.CaptureFixture[str]) -> None:
    assert "--max-devices must be at most 4,096, got 4,097" in _error(
        capsys, *SERVING, "--max-devices", "4097"
    )
    argv = [a for a in SERVING if a not in ("--in", "2000")]
    assert "--in: 1e+300 tokens is more than the limit of 1,000,000,000" in _error(
        capsys, *argv, "--in", "1e300"
    )


def test_dask_executor_fails_fast(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from shardline.planning import executors

    # the search checks its scheduler first: its bound search may price every round here
    # (no chunk sent), and a bad address must not pass unnoticed
    line = _error(capsys, *TRAIN, "--executor", "dask", "--scheduler", "garbage")
    assert "cannot reach the Dask scheduler at garbage: missing port number" in line

    with pytest.raises(InputError, match="missing port number in address 'garbage'"):
        executors.map_chunks(abs, [1], executor="dask", scheduler="garbage")

    class Garbled:  # what answers is not a scheduler: its bytes read as a huge length
        def __init__(self, *args: object, **kwargs: object) -> None:
            raise MemoryError

    monkeypatch.setattr("distributed.Client", Garbled)
    with pytest.raises(InputError, match="does not speak Dask's protocol"):
        executors.map_chunks(abs, [1], executor="dask", scheduler="tcp://10.0.0.1:8786")
    monkeypatch.setitem(sys.modules, "distributed", None)  # not installed
    with pytest.raises(InputError, match=r"pip install 'shardline\[dask\]'"):
        executors.check_executor(1, "dask", "tcp://10.0.0.1:8786")


# --- plan: prices -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("usd_per_hour = nan", r"must be a non-negative number up to 1e\+09, got nan"),
        ("usd_per_hour = inf", r"got inf"),
        ("usd_per_hour = 1e308", r"got 1e\+308"),
        ("usd_per_hour = 2.5\ncolour = 1", r"\[h100-sxm\] unknown field 'colour'"),
        ("usd_per_hour = " + "9" * 5000, "Exceeds the limit"),
    ],
    ids=["nan", "inf", "1e308", "unknown-field", "5000-digits"],
)
def test_bad_price_files(tmp_path: Path, row: str, message: str) -> None:
    from shardline.costing import price_table

    path = tmp_path / "prices.toml"
    path.write_text(f"[h100-sxm]\n{row}\n", encoding="utf-8")
    with pytest.raises(InputError, match=message):
        price_table(path)


def test_price_flag_and_a_free_chip(tmp_path: Path) -> None:
    from shardline.cli.plan_outputs import price_from_args
    from shardline.costing import price_table

    with pytest.raises(InputError, match=r"non-negative number up to 1e\+09, got 1e\+300"):
        price_from_args(argparse.Namespace(usd_per_hour="1e300"), "h100-sxm")
    assert price_from_args(argparse.Namespace(usd_per_hour="0"), "h100-sxm") == 0.0
    path = tmp_path / "free.toml"
    path.write_text("[h100-sxm]\nusd_per_hour = 0\n", encoding="utf-8")
    assert price_table(path)["h100-sxm"].usd_per_hour == 0.0


# --- report, model import, workload templates -----------------------------------------------


def test_report_plan_flags_need_devices(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = str(tmp_path / "r.html")
    assert "--cp must be a positive integer, got 'nan'" in _error(
        capsys, "report", *MODEL, "--cp", "nan", "--html", out
    )
    assert "--cp applies with --devices D" in _error(
        capsys, "report", *MODEL, "--cp", "2", "--html", out
    )
    assert list(tmp_path.iterdir()) == []


def test_model_import_empty_name(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    config = {
        "model_type": "llama", "hidden_size": 256, "intermediate_size": 512,
        "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
        "vocab_size": 1000, "hidden_act": "silu",
    }  # fmt: skip
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    assert "--name is empty" in _error(capsys, "model", "import", str(path), "--name", "")
    assert list(tmp_path.iterdir()) == [path]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("d_model = " + "9" * 5000, "Exceeds the limit .4300 digits. for integer string"),
        ('weight_dtype = ""', "weight_dtype must be a dtype name such as \"fp8\", got ''"),
    ],
    ids=["5000-digits", "empty-weight-dtype"],
)
def test_template_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, message: str
) -> None:
    import re

    path = tmp_path / "w.toml"
    path.write_text(
        f'name = "t"\n[transformer]\nd_ff = 256\nheads = 4\nseq_len = 64\nbatch = 1\n{line}\n'
        + ("d_model = 64\n" if "d_model" not in line else ""),
        encoding="utf-8",
    )
    assert re.search(message, _error(capsys, "stack", str(path), "--hw", "h100-sxm"))
