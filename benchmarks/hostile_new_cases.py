"""Group 6 of the hostile catalogue (bench_hostile.py): the commands and flags that came after
the first catalogue: `serve`, `search` (training and serving, local and Dask executors), the new
`plan` flags (--cp, --ep, tensor dtypes, --trace, --tokens, prices), `report --model`,
`model import`, `system show` and the new workload template tables. Fixtures:
hostile_new_files.py. Names start with the command, so `--cases serve` picks a command."""

from __future__ import annotations

from pathlib import Path

from bench_hostile import Case
from hostile_second import second_catalogue

HW = ["--hw", "h100-sxm"]
MODEL = ["--model", "llama-3.2-1b"]
SERVE = ["serve", *MODEL, *HW, "--devices", "8", "--tp", "8", "--rate", "5", "--json"]
LENGTHS = ["--in", "2000", "--out", "500"]
TRAIN = ["search", *MODEL, "--tokens", "1T", "--json", "--quiet"]
SERVING = [
    "search", *MODEL, "--hw", "h100-sxm", "--slo", "ttft=500ms,tpot=30ms", "--rate", "5/s",
    "--in", "2000", "--out", "500", "--json", "--quiet",
]  # fmt: skip
PLAN = ["plan", *MODEL, *HW, "--devices", "8", "--json"]
BAD_NUMBERS = ("0", "-1", "nan", "inf", "-inf", "1e400", "", "abc", "9" * 5000, "0x10", "1.5")
NUMERIC = "numeric"
VALID_HUGE = ("moe_experts_1e9",)  # well-formed: an answer (or "fits on no plan") in bounded time


def _serve_flag(flag: str, values: tuple[str, ...], base: list[str] | None = None) -> list[Case]:
    argv = [*SERVE, *LENGTHS] if base is None else base
    return [
        Case(f"serve {flag} {v[:20]!r}", [*_without(argv, flag), flag, v], "error", NUMERIC, 6)
        for v in values
    ]


def _without(argv: list[str], flag: str) -> list[str]:
    """argv with `flag VALUE` taken out (the case gives its own)."""
    out, skip = [], False
    for item in argv:
        if skip:
            skip = False
        elif item == flag:
            skip = True
        else:
            out.append(item)
    return out


def _serve_numbers() -> list[Case]:
    out = _serve_flag("--devices", BAD_NUMBERS)
    out += _serve_flag("--tp", ("0", "-8", "nan", "3", "1e9", "9" * 5000))
    out += _serve_flag("--rate", ("0", "-1", "nan", "inf", "1e300", "", "5/fortnight", "1/0"))
    for flag in ("--in", "--out"):
        values = ("0", "-5", "exp:-5", "exp:nan", "exp:0", "uniform:5-1", "uniform:1e308-1e309")
        out += _serve_flag(flag, (*values, "exp:", "garbage:5", "", "9" * 5000, "1e300"))
    out += _serve_flag(
        "--slo",
        ("ttft=-1ms", "garbage", "ttft=nanms", "ttft=0ms", "tpot=infs", "ttft=", "",
         "ttft=500ms,ttft=1ms", "p=200", "ttft=500parsecs", "ttft=1e400s", "=5ms"),
    )  # fmt: skip
    out += _serve_flag(
        "--spec-decode",
        ("5,1.5", "-1,0.5", "4,nan", "4,0.7,-1", "4", "4,0.7,inf", "1e9,0.5", "4,-0.1", ",", ""),
    )
    out += _serve_flag("--prefix-hit", ("2", "1", "-0.1", "nan", "inf", "", "50%"))
    out += _serve_flag("--disagg", ("0:0", "4:4:4", "x:y", "1:7", "-8:16", "1e9:1e9", ":", ""))
    out += _serve_flag("--max-batch", ("0", "-1", "nan", "1e300", "1.5"))
    out += _serve_flag("--chunk", ("-1", "nan", "1e300", "1.5", "abc"))
    out += _serve_flag("--usd-per-hour", ("0", "-1", "nan", "inf", "1e400", ""))
    out += _serve_flag("--requests", ("0", "-1", "nan", "1e300", "1e12"))
    out += _serve_flag("--model", ("", "no-such-model", "/dev/zero", "in/tpl_moe_ok.toml"))
    out += _serve_flag("--model", ("in/model_d_model_nan.toml", "in/model_heads_string.toml"))
    out += _serve_flag("--hw", ("", "no-such-chip", "/dev/zero"))
    out += _serve_flag("--dtype", ("", "fp3", "int3"))
    out += _serve_flag("--mem-bw", ("1e11", "nan", "1e-300"))  # serve does not read them
    out += _serve_flag("--flops-per-s", ("1e12", "nan"))
    out += _serve_flag("--compute-dtype", ("fp8",))
    return out


def _serve_sizes() -> list[Case]:
    """Huge but well-formed sizes: an answer (or a refusal that states the limit) in seconds."""
    base = [*SERVE, *LENGTHS]
    return [
        Case("serve --devices 1e9", [*_without(base, "--devices"), "--devices", "1e9"],
             "any", NUMERIC, 6),
        Case("serve --devices 1e9 --simulate",
             [*_without(base, "--devices"), "--devices", "1e9", "--simulate"], "any", NUMERIC, 6),
        Case("serve --rate 1e9 --simulate",
             [*_without(base, "--rate"), "--rate", "1e9", "--simulate"], "any", NUMERIC, 6),
        Case("serve --requests 1e7 --simulate", [*base, "--requests", "1e7", "--simulate"],
             "any", NUMERIC, 6),
        Case("serve --in 1e9 (past every KV budget)",
             [*SERVE, "--in", "1e9", "--out", "500"], "any", NUMERIC, 6),
        Case("serve --out exp:1e9 --simulate", [*SERVE, "--in", "2000", "--out", "exp:1e9",
             "--simulate"], "any", NUMERIC, 6),
        Case("serve --max-batch 1e9", [*base, "--max-batch", "1e9"], "any", NUMERIC, 6),
        Case("serve --rate 0.01 --simulate (too many steps)",
             [*_without(base, "--rate"), "--rate", "0.01", "--simulate"], "error", NUMERIC, 6),
        Case("serve --rate 0.01 --plot (simulates too)",
             [*_without(base, "--rate"), "--rate", "0.01", "--plot", "out_s.png"], "error",
             NUMERIC, 6),
        Case("serve --requests 200 --simulate ok", [*base, "--requests", "200", "--simulate"],
             "ok", NUMERIC, 6),
        Case("serve --disagg 4:4 ok", [*_without(base, "--tp"), "--tp", "4", "--disagg", "4:4"],
             "ok", NUMERIC, 6),
        Case("serve --spec-decode 4,1.0 ok", [*base, "--spec-decode", "4,1.0"], "ok", NUMERIC, 6),
    ]  # fmt: skip


def _serve_traces(big_rows: int) -> list[Case]:
    base = [*SERVE, *LENGTHS, "--trace"]
    bad = (
        "empty", "header_only", "one_row", "text", "short_row", "long_row", "wrong_header",
        "nan", "inf_tokens", "negative", "zero_tokens", "1e308", "5000_digits", "bad_utf8",
        "nul", "huge_field", "quote",
    )  # fmt: skip
    out = [Case(f"serve --trace {n}.csv", [*base, f"in/trace_{n}.csv"], group=6) for n in bad]
    out += [
        Case(f"serve --trace {p}", [*base, p], group=6)
        for p in ("/dev/zero", "zero.csv", "fifo.csv", "adir.csv", "in/absent.csv", "nowhere/t.csv",
                  "", "in/trace_ok.csv/x")
    ]  # fmt: skip
    for n in ("ok", "frac_tokens", "arrival_1e300", "same_time", "bom"):
        out.append(Case(f"serve --trace {n}.csv", [*base, f"in/trace_{n}.csv"], "any", group=6))
    for devices in ("1024", "1e9"):  # more replicas than requests; too many to simulate
        argv = [*_without(base[:-1], "--devices"), "--devices", devices, "--trace"]
        out.append(Case(f"serve --trace ok.csv on {devices} devices", [*argv, "in/trace_ok.csv"],
                        "error", NUMERIC, 6))  # fmt: skip
    disagg = [*_without(base[:-1], "--devices"), "--devices", "160000", "--disagg", "80000:80000"]
    out.append(Case("serve --disagg 80000:80000 --simulate", [*disagg, "--simulate"], "error",
                    NUMERIC, 6))  # fmt: skip
    out.append(
        Case(f"serve --trace of {big_rows:,} rows", [*base, "in/trace_big.csv"], "any", group=6,
             limit_s=120)
    )  # fmt: skip
    return out


def _search_training() -> list[Case]:
    devices = [*TRAIN, "--devices", "64"]
    out = [
        Case(f"search --devices {v[:20]!r}", [*TRAIN, "--devices", v], "error", NUMERIC, 6)
        for v in BAD_NUMBERS
    ]
    for flag, values in (
        ("--tokens", ("nan", "-1", "0", "1e400", "", "15X", "9" * 5000)),
        ("--seq-len", ("0", "-1", "nan", "1e18", "9" * 5000)),
        ("--global-batch", ("0", "1", "-1", "nan", "1e30", "9" * 5000)),
        ("--fix", ("tp=0", "tp=3", "foo=8", "tp=1e9", "tp", "=8", "tp=nan", "", "tp=8,tp=4")),
        ("--workers", ("0", "-1", "1e9", "nan", "", "1.5")),
        ("--scales", ("0", "-1", "1e9", "nan")),
        ("--rerank", ("0", "-1", "1e9", "nan")),
        ("--hw", ("", ",,", "no-such-chip", "/dev/zero", "h100-sxm," * 2000)),
        ("--model", ("", "no-such-model", "/dev/zero", "fifo.toml", "in/model_d_model_nan.toml",
                     "in/model_5000_digits.toml",
                     "in/model_d_model_neg.toml",
                     "in/model_heads_string.toml", "in/model_unknown_key.toml",
                     "in/model_moe_k_gt.toml", "in/model_moe_experts0.toml")),
    ):  # fmt: skip
        for v in values:
            argv = [*_without(devices, flag), flag, v]
            out.append(Case(f"search {flag} {v[:20]!r}", argv, "error", NUMERIC, 6))
    out += [
        Case("search --executor dask, no --scheduler", [*devices, "--executor", "dask"], group=6),
        Case("search --scheduler without dask", [*devices, "--scheduler", "tcp://x:1"], group=6),
        Case("search dask, unreachable scheduler",
             [*devices, "--executor", "dask", "--scheduler", "tcp://127.0.0.1:9"], group=6,
             limit_s=30),
        Case("search dask, scheduler 'garbage'",
             [*devices, "--executor", "dask", "--scheduler", "garbage"], group=6, limit_s=30),
        Case("search dask, scheduler 10.255.255.1 (no answer)",
             [*devices, "--executor", "dask", "--scheduler", "tcp://10.255.255.1:8786"],
             group=6, limit_s=30),
        Case("search --in on a training search", [*devices, "--in", "5"], "error", NUMERIC, 6),
        Case("search --slo with --phase training",
             [*devices, "--phase", "training", "--slo", "ttft=1s"], "error", NUMERIC, 6),
    ]  # fmt: skip
    return out


def _search_sizes() -> list[Case]:
    return [
        Case(f"search --devices {v}", [*TRAIN, "--devices", v], "any", NUMERIC, 6, limit_s=60)
        for v in ("1e12", "1000000", "1048576", "7207200", "1e9")
    ] + [
        Case("search --devices 1e6 --scales 64",
             [*TRAIN, "--devices", "1000000", "--scales", "64"], "any", NUMERIC, 6, limit_s=60),
        Case("search a model of 1e12 layers",
             [*TRAIN, "--devices", "64", "--model", "in/model_layers_huge.toml"], "any",
             NUMERIC, 6, limit_s=60),
        Case("search --devices 16777216 --global-batch 1e12 (192 divisors)",
             [*TRAIN, "--devices", "16777216", "--global-batch", "1e12"], "any", NUMERIC, 6,
             limit_s=120),
        Case("search --devices 16777216 --global-batch 1Ti (2^28 sequences of 4,096)",
             [*TRAIN, "--devices", "16777216", "--global-batch", "1Ti"], "error", NUMERIC, 6),
        Case("search --devices 16777216 --global-batch 4Gi (2^20 sequences of 4,096)",
             [*TRAIN, "--devices", "16777216", "--global-batch", "4Gi"], "ok", NUMERIC, 6,
             limit_s=120),
        Case("search --seq-len 1e7", [*TRAIN, "--devices", "64", "--seq-len", "1e7"], "any",
             NUMERIC, 6, limit_s=60),
        Case("search --rerank 1e6", [*TRAIN, "--devices", "64", "--rerank", "1000000"], "any",
             NUMERIC, 6, limit_s=60),
    ]  # fmt: skip


def _search_serving() -> list[Case]:
    out = []
    for flag, values in (
        ("--max-devices", ("0", "-1", "nan", "1e400", "9" * 5000, "1.5")),
        ("--rate", ("0", "-1", "nan", "inf", "1e300", "", "5/min/s")),
        ("--in", ("0", "-5", "exp:-5", "nan", "1e300", "")),
        ("--out", ("0", "-5", "exp:-5", "nan", "1e300", "")),
        ("--slo", ("ttft=-1ms", "garbage", "", "tpot=nanms", "ttft=0s")),
        ("--workers", ("0", "-1", "1e9")),
        ("--hw", ("", "no-such-chip")),
    ):
        for v in values:
            argv = [*_without(SERVING, flag), flag, v]
            out.append(Case(f"search serving {flag} {v[:20]!r}", argv, "error", NUMERIC, 6))
    for v in ("1e9", "1000000", "100000"):
        out.append(
            Case(f"search serving --max-devices {v}", [*SERVING, "--max-devices", v], "any",
                 NUMERIC, 6, limit_s=60)
        )  # fmt: skip
    out.append(Case("search serving, no --slo", _without(SERVING, "--slo"), "error", NUMERIC, 6))
    out.append(
        Case(
            "search serving --max-devices 4097",
            [*SERVING, "--max-devices", "4097"],
            "error",
            NUMERIC,
            6,
        )
    )
    out.append(
        Case(
            "search serving --max-devices 4096",
            [*SERVING, "--max-devices", "4096"],
            "ok",
            NUMERIC,
            6,
            limit_s=60,
        )
    )
    out.append(
        Case(
            "search serving --hw h100-sxm,H100-SXM",
            [*_without(SERVING, "--hw"), "--hw", "h100-sxm,H100-SXM"],
            "error",
            NUMERIC,
            6,
        )
    )
    return out


def _plan_flags() -> list[Case]:
    out = []
    for flag, values in (
        ("--cp", ("0", "-1", "nan", "1e9", "3", "9" * 5000)),
        ("--ep", ("0", "-1", "nan", "1e9", "3")),
        ("--weight-dtype", ("", "int3", "nan", "fp8" * 1000)),
        ("--kv-dtype", ("", "int3", "nan")),
        ("--dtype", ("", "int3", "nan")),
        ("--tokens", ("nan", "-1", "0", "1e400", "", "9" * 5000)),
        ("--usd-per-hour", ("-1", "nan", "inf", "1e400", "1e300", "")),
        ("--cp-kind", ("", "ring2")),
    ):
        for v in values:
            out.append(Case(f"plan {flag} {v[:20]!r}", [*PLAN, flag, v], "error", NUMERIC, 6))
    moe = ["plan", "in/tpl_moe_ok.toml", *HW, "--devices", "8", "--json"]
    out += [
        Case("plan --ep 3 (8 experts)", [*moe, "--ep", "3"], "error", NUMERIC, 6),
        Case("plan --ep 16 (8 experts)", [*moe, "--ep", "16", "--devices", "16"], "error",
             NUMERIC, 6),
        Case("plan --ep 2 on a dense model", [*PLAN, "--ep", "2"], "error", NUMERIC, 6),
        Case("plan --cp 3 (seq 4096)", [*moe, "--cp", "3", "--devices", "3"], "error", NUMERIC, 6),
        Case("plan --cp 8192 (seq 4096)", [*moe, "--cp", "8192", "--devices", "8192"], "error",
             NUMERIC, 6),
        Case("plan --cp 2 --ep 2 --tp 2 ok", [*moe, "--cp", "2", "--ep", "2", "--tp", "2"],
             "any", NUMERIC, 6),
        Case("plan --tokens 1e30", [*PLAN, "--tokens", "1e30"], "any", NUMERIC, 6),
        Case("plan --usd-per-hour 0 (free)", [*PLAN, "--usd-per-hour", "0"], "ok", NUMERIC, 6),
    ]  # fmt: skip
    return out


def _plan_files() -> list[Case]:
    base = ["plan", "in/tpl_moe_ok.toml", *HW, "--devices", "8"]
    out = [
        Case("plan --trace is the workload", [*base, "--trace", "in/tpl_moe_ok.toml", "--force"],
             group=6),
        Case("plan --trace into a missing dir", [*base, "--trace", "nowhere/step.json"], group=6),
        Case("plan --trace exists, no --force", [*base, "--trace", "in/step_existing.json"],
             group=6),
        Case("plan --trace ''", [*base, "--trace", ""], group=6),
        Case("plan --trace into /proc", [*base, "--trace", "/proc/step.json"], group=6),
        Case("plan --trace is a FIFO", [*base, "--trace", "fifo.json", "--force"], group=6),
        Case("plan --trace is a directory", [*base, "--trace", "adir.csv", "--force"], group=6),
        Case("plan --prices is the --trace output",
             [*base, "--prices", "in/prices_ok.toml", "--trace", "in/prices_ok.toml", "--force"],
             group=6),
        Case("plan --trace ok", [*base, "--trace", "out_step.json"], "ok", group=6),
    ]  # fmt: skip
    for name in (
        "nan", "inf", "negative", "string", "table_value", "not_table",
        "unknown_key", "bad_toml", "nested", "1e308", "5000_digits",
    ):  # fmt: skip
        out.append(
            Case(f"plan --prices {name}", [*base, "--prices", f"in/prices_{name}.toml"], group=6)
        )
    for path in ("/dev/zero", "fifo.toml", "adir.csv", "in/absent.toml", "nowhere/p.toml", ""):
        out.append(Case(f"plan --prices {path!r}", [*base, "--prices", path], group=6))
    for name in ("empty", "zero", "ok"):
        out.append(
            Case(f"plan --prices {name} file", [*base, "--prices", f"in/prices_{name}.toml",
                 "--tokens", "1T", "--json"], "ok", group=6)
        )  # fmt: skip
    return out


def _templates() -> list[Case]:
    from hostile_new_files import TEMPLATES

    out = []
    for name in TEMPLATES:
        expect = "ok" if name.endswith("_ok") else "any" if name in VALID_HUGE else "error"
        for cmd in (["stack"], ["plan", "--devices", "8"]):
            out.append(
                Case(f"{cmd[0]} template {name}", [cmd[0], f"in/tpl_{name}.toml", *cmd[1:], *HW],
                     expect, NUMERIC, 6)
            )  # fmt: skip
    return out


def _others() -> list[Case]:
    out = [
        Case("report --model, --html into a missing dir",
             ["report", *MODEL, "--html", "nowhere/r.html", *HW], group=6),
        Case("report --model, --html exists", ["report", *MODEL, "--html", "in/step_existing.json",
             *HW], group=6),
        Case("report --model no-such-model", ["report", "--model", "nope", "--html", "out.html"],
             group=6),
        Case("report --model, --devices 1e12",
             ["report", *MODEL, "--devices", "1e12", "--html", "out.html", *HW], "any", NUMERIC,
             6, limit_s=60),
        Case("report --model, --cp nan", ["report", *MODEL, "--cp", "nan", "--html", "out.html"],
             "error", NUMERIC, 6),
        Case("model import -o is the input",
             ["model", "import", "in/hf_ok/config.json", "-o", "in/hf_ok/config.json", "--force"],
             group=6),
        Case("model import -o into a missing dir",
             ["model", "import", "in/hf_ok/config.json", "-o", "nowhere/m.toml"], group=6),
        Case("model import -o exists", ["model", "import", "in/hf_ok/config.json", "-o",
             "in/step_existing.json"], group=6),
        Case("model import ok", ["model", "import", "in/hf_ok/config.json", "-o", "out_m.toml"],
             "ok", group=6),
        Case("model import --name ''", ["model", "import", "in/hf_ok/config.json", "--name", ""],
             "error", group=6),
        Case("model import --name ../x", ["model", "import", "in/hf_ok/config.json", "--name",
             "../../x\n[evil]"], "any", group=6),
    ]  # fmt: skip
    for name in (
        "hidden_string", "hidden_zero", "hidden_negative", "hidden_float", "hidden_huge",
        "heads_zero", "kv_heads_not_dividing", "layers_null", "tie_string", "experts_zero",
        "experts_k_gt", "sliding_negative",
    ):  # fmt: skip
        out.append(Case(f"model import {name}", ["model", "import", f"in/hf_{name}/config.json"],
                        "error", NUMERIC, 6))  # fmt: skip
    for name in ("nan", "inf", "5000_digits", "list", "empty", "not_json", "nested", "bad_utf8",
                 "missing"):  # fmt: skip
        out.append(Case(f"model import {name}.json", ["model", "import", f"in/hf_{name}.json"],
                        group=6))  # fmt: skip
    for path in ("/dev/zero", "fifo.csv", "adir.csv", "in/absent.json", ""):
        out.append(Case(f"model import {path!r}", ["model", "import", path], group=6))
    for name in ("", "no-such-system", "/dev/zero", "fifo.toml", "../../../../etc/passwd",
                 "in/prices_nan.toml", "in/tpl_moe_ok.toml"):  # fmt: skip
        out.append(Case(f"system show {name!r}", ["system", "show", name], group=6))
    out.append(
        Case("collective --host-cpu ''", ["collective", "all-reduce", "--bytes", "1e9",
             "--devices", "16", "--system", "dgx-h100", "--host-cpu", ""], "error", NUMERIC, 6)
    )  # fmt: skip
    return out


def new_catalogue(work: Path, big_rows: int) -> list[Case]:
    cases = [*_serve_numbers(), *_serve_sizes(), *_serve_traces(big_rows)]
    cases += [*_search_training(), *_search_sizes(), *_search_serving()]
    cases += [*_plan_flags(), *_plan_files(), *_templates(), *_others(), *_no_dask(work)]
    cases += [*_huge_legal(), *_silent_peers()]
    return cases + second_catalogue()


def _no_dask(work: Path) -> list[Case]:
    """A `distributed` package that fails to import: dask is not installed."""
    fake = work / "nodask" / "distributed"
    fake.mkdir(parents=True, exist_ok=True)
    (fake / "__init__.py").write_text('raise ImportError("No module named distributed")\n')
    env = {"PYTHONPATH": str(work / "nodask")}
    return [
        Case("search --executor dask without dask",
             [*TRAIN, "--devices", "64", "--executor", "dask", "--scheduler", "tcp://127.0.0.1:9"],
             group=6, env=env, limit_s=30),
        Case("search serving --executor dask without dask",
             [*SERVING, "--executor", "dask", "--scheduler", "tcp://127.0.0.1:9"],
             group=6, env=env, limit_s=30),
    ]  # fmt: skip


def _huge_legal() -> list[Case]:
    """Huge but legal inputs: refused past the stated limit in one line (layers, --batches,
    simulated engine steps), answered in seconds at it."""
    batches40 = ",".join(str(b) for b in range(1, 41))
    long_prompts = [*SERVE, "--in", "1e6", "--out", "10", "--simulate", "--requests", "20000"]
    return [
        Case("stack of 200,000 layers (16 MB) ok",
             ["stack", "in/stack_layers_200k.toml", *HW, "--json"], "ok", NUMERIC, 6, limit_s=60),
        Case("plan of 200,000 layers (16 MB): fits on no plan",
             ["plan", "in/stack_layers_200k.toml", *HW, "--devices", "8"], "error", NUMERIC, 6,
             limit_s=60),
        Case("stack of 250,001 layers", ["stack", "in/stack_layers_250001.toml", *HW], "error",
             NUMERIC, 6),
        Case("stack of 20,001 distinct layers", ["stack", "in/stack_layers_20001.toml", *HW],
             "error", NUMERIC, 6),
        Case("stack of 20,000 distinct layers ok",
             ["stack", "in/stack_layers_20000.toml", *HW, "--json"], "ok", NUMERIC, 6, limit_s=60),
        Case("plan --batches of 40 entries", [*PLAN, "--batches", batches40], "error", NUMERIC, 6),
        Case("plan --batches of 13 entries", [*PLAN, "--batches", batches40[:29]], "error",
             NUMERIC, 6),
        Case("plan --batches 1,1e9 (bisection budget)", [*PLAN, "--batches", "1,1000000000"],
             "ok", NUMERIC, 6, limit_s=120),
        Case("serve --in 1e6 --simulate (2.4M prefill steps)",
             [*_without(long_prompts, "--rate"), "--rate", "1000"], "error", NUMERIC, 6),
        Case("serve --in 1e5 --requests 10000 --simulate ok",
             [*SERVE, "--in", "1e5", "--out", "10", "--simulate", "--requests", "10000"], "ok",
             NUMERIC, 6, limit_s=30),
    ]  # fmt: skip


_SILENT: list[object] = []  # the listening socket and its accepted connections, kept open


def _silent_peers() -> list[Case]:
    """A Dask scheduler address that accepts the connection and never speaks (127.0.0.1, a port
    of this process): the search gives up within the connect deadline, not past 45 s."""
    import socket
    import threading

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    _SILENT.append(server)

    def accept() -> None:
        while True:
            try:
                _SILENT.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    address = f"tcp://127.0.0.1:{server.getsockname()[1]}"
    return [
        Case("search dask, scheduler accepts and never speaks",
             [*TRAIN, "--devices", "64", "--executor", "dask", "--scheduler", address], group=6,
             limit_s=20),
        Case("search serving dask, scheduler accepts and never speaks",
             [*SERVING, "--executor", "dask", "--scheduler", address], group=6, limit_s=20),
    ]  # fmt: skip
