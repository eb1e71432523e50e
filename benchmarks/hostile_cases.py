"""The cases of the hostile-input catalogue (bench_hostile.py), by the numbered groups of issue 14:
1 concurrent outputs, 2 memory and time, 3 formula injection and Markdown, 4 tracebacks (bad
numbers, bad files, signals), 5 silent wrong answers, 6 the later commands and flags (serve,
search, the new plan flags and template tables: hostile_new_cases.py). Paths are relative to
the work directory; inputs live in in/, outputs are named out*."""

from __future__ import annotations

import csv
import signal
from collections.abc import Callable
from pathlib import Path

from bench_hostile import Case
from hostile_files import FORMULAS
from hostile_new_cases import new_catalogue

HW = ["--hw", "h100-sxm"]
TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
DIMS = ",".join(f"{d}=1e15" for d in "ABCDEFGHI")


def _csv_is_safe(name: str) -> Callable[[Path], str]:
    def check(work: Path) -> str:
        path = work / name
        if not path.exists():
            return f"{name} not written"
        with path.open(encoding="utf-8", newline="") as fh:
            for row in csv.reader(fh):
                for cell in row:
                    if cell.startswith(TRIGGERS) and not _number(cell):
                        return f"formula cell {cell[:30]!r} written as is"
        return ""

    return check


def _number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _md_is_safe(work: Path) -> str:
    path = work / "out.md"
    if not path.exists():
        return "out.md not written"
    text = path.read_text(encoding="utf-8").lower()
    for bad in ("<script", "<img", "<b>", "](javascript:"):
        if bad in text:
            return f"{bad!r} in the Markdown output"
    return ""


def _concurrent_kept_second(work: Path) -> str:
    """The small run finished first; the big run must not have replaced its output."""
    path = work / "out_conc.csv"
    if not path.exists():
        return "no output"
    rows = sum(1 for _ in path.open(encoding="utf-8"))
    return "" if rows < 100 else f"the first run's output ({rows:,} lines) replaced the second's"


def _group1() -> list[Case]:
    return [
        Case(
            "concurrent runs, no --force, same output",
            ["sheet", "in/medium.csv", "-o", "out_conc.csv", *HW],
            "error",
            group=1,
            concurrent=["sheet", "in/small.csv", "-o", "out_conc.csv", *HW],
            stagger_s=0.3,
            limit_s=120,
            check=_concurrent_kept_second,
        ),
        Case(
            "concurrent runs, both --force",
            ["sheet", "in/medium.csv", "-o", "out_conc2.json", "--force", *HW],
            "ok",
            group=1,
            concurrent=["sheet", "in/small.csv", "-o", "out_conc2.json", "--force", *HW],
            stagger_s=0.3,
            limit_s=120,
        ),
        Case(
            "output exists, no --force", ["sheet", "in/small.csv", "-o", "in/existing.csv"], group=1
        ),
        Case(
            "output is the input",
            ["sheet", "in/small.csv", "-o", "in/small.csv", "--force"],
            group=1,
        ),
        Case(
            "output is a symlink to the input",
            ["sheet", "in/small.csv", "-o", "link_to_small.csv", "--force"],
            group=1,
        ),
        Case(
            "output is a hard link to the input",
            ["sheet", "in/small.csv", "-o", "hardlink_small.csv", "--force"],
            group=1,
        ),
        Case(
            "input via symlink, output the target",
            ["sheet", "link_to_small.csv", "-o", "in/small.csv", "--force"],
            group=1,
        ),
        Case(
            "output is ./in/../in/small.csv",
            ["sheet", "in/small.csv", "-o", "./in/../in/small.csv", "--force"],
            group=1,
        ),
        Case(
            "output is a dangling symlink, no --force",
            ["sheet", "in/small.csv", "-o", "dangling.csv"],
            group=1,
        ),
        Case(
            "output is a directory", ["sheet", "in/small.csv", "-o", "adir.csv", "--force"], group=1
        ),
    ]


def _group2(big_rows: int) -> list[Case]:
    return [
        Case(
            "plan count=1e9",
            # every degree fixed: plan answers (fits: false) in flat memory; a free search
            # answers with "fits on no plan" (exit 2), also correct
            [
                "plan",
                "in/count1e9.toml",
                "--devices",
                "8",
                "--tp",
                "8",
                "--pp",
                "1",
                "--dp",
                "1",
                "--fsdp",
                "1",
                *HW,
            ],
            "ok",
            "numeric",
            2,
        ),
        Case(
            "plan --devices 1e16",
            ["plan", "in/stack.toml", "--devices", "1e16", *HW],
            "any",
            "numeric",
            2,
        ),
        Case(
            "plan --devices 7207200",
            ["plan", "in/stack.toml", "--devices", "7207200", *HW],
            "any",
            "numeric",
            2,
        ),
        Case(
            "plan --devices 1e6",
            ["plan", "in/stack.toml", "--devices", "1000000", *HW],
            "any",
            "numeric",
            2,
        ),
        Case(
            "plan 10,000 layers",
            ["plan", "in/layers10k.toml", "--devices", "8", *HW],
            "ok",
            "numeric",
            2,
        ),
        Case("stack count=1e9", ["stack", "in/count1e9.toml", *HW], "ok", "numeric", 2),
        Case("xlsx bomb: a cell in XFD on every row", ["sheet", "in/xfd.xlsx", *HW], group=2),
        Case("xlsx bomb: row 900,000,000", ["sheet", "in/far_row.xlsx", *HW], group=2),
        Case("xlsx bomb: 300 MB shared string", ["sheet", "in/sst.xlsx", *HW], group=2),
        Case("xlsx not a zip", ["sheet", "in/notzip.xlsx", *HW], group=2),
        Case("/dev/zero as a sheet", ["sheet", "/dev/zero", *HW], group=2),
        Case("/dev/zero named .csv via symlink", ["sheet", "zero.csv", *HW], group=2),
        Case("FIFO as a sheet", ["sheet", "fifo.csv", *HW], group=2),
        Case("FIFO as a workload", ["stack", "fifo.toml", *HW], group=2),
        Case("/dev/zero as a workload", ["stack", "/dev/zero", *HW], group=2),
        Case("directory as a sheet", ["sheet", "adir.csv", *HW], group=2),
        Case(
            "/dev/zero as a chip file",
            ["matmul", "64", "64", "64", "--hw", "/dev/zero"],
            "error",
            "numeric",
            2,
        ),
        Case(
            f"{big_rows:,}-row CSV to .json",
            ["sheet", "in/big.csv", "-o", "out_big.json", *HW],
            "ok",
            group=2,
            limit_s=300,
        ),
    ]


def _group3() -> list[Case]:
    return [
        Case(
            "formula injection in CSV output",
            ["sheet", "in/formula.csv", "-o", "out.csv", *HW],
            "ok",
            group=3,
            check=_csv_is_safe("out.csv"),
        ),
        Case(
            "HTML and links in Markdown output",
            ["sheet", "in/markdown.csv", "-o", "out.md", *HW],
            "ok",
            group=3,
            check=_md_is_safe,
        ),
        Case(
            "formula names into template",
            ["template", "out_t.xlsx", "--from", "in/formula.csv", *HW],
            "ok",
            group=3,
        ),
    ]


def _group4_numbers() -> list[Case]:
    mm = ["matmul", "4096", "4096", "4096", *HW]
    out = [
        Case("--mem-bw 1e-300 --json", [*mm, "--mem-bw", "1e-300", "--json"], "error", "numeric"),
        Case("--mem-bw 1e-300", [*mm, "--mem-bw", "1e-300"], "error", "numeric"),
        Case(
            "--flops-per-s 5e-324 --json",
            [*mm, "--flops-per-s", "5e-324", "--json"],
            "error",
            "numeric",
        ),
        Case(
            "chip with 1e-300 bandwidth",
            ["matmul", "64", "64", "64", "--hw", "in/chip_tiny.toml", "--json"],
            "error",
            "numeric",
        ),
        Case(
            "5,000-digit tile size",
            ["tile", "4096", "4096", "4096", *HW, "--tile", "9" * 5000],
            "error",
            "numeric",
        ),
        Case(
            "einsum FLOPs overflow a float",
            ["einsum", "X[A,B,C,D,E] * W[E,F,G,H,I] -> Y[A,B,C,D,F,G,H,I]", "--dims", DIMS, *HW],
            "any",
            "numeric",
        ),
        Case("sheet of bad numbers", ["sheet", "in/numbers.csv", *HW], "error"),
    ]
    for flag in ("--mem-bw", "--flops-per-s"):
        for value in ("nan", "inf", "-1", "0", "-inf", "1e400", "abc", "", "1e-300"):
            out.append(Case(f"{flag} {value!r}", [*mm, flag, value], "error", "numeric"))
    for value in ("-1", "0", "nan", "inf", "1e400", "4096.5", "0x10", "", "9" * 400):
        out.append(
            Case(f"matmul M={value!r}", ["matmul", value, "64", "64", *HW], "error", "numeric")
        )
    return out


def _group4_files() -> list[Case]:
    return [
        Case(
            "output into a read-only directory",
            ["sheet", "in/small.csv", "-o", "ro/out.csv", *HW],
            modes=True,
        ),
        Case("output into /proc", ["sheet", "in/small.csv", "-o", "/proc/out.csv", *HW]),
        Case("output into /sys", ["sheet", "in/small.csv", "-o", "/sys/out.csv", *HW]),
        Case("output name too long", ["sheet", "in/small.csv", "-o", "a" * 300 + ".csv", *HW]),
        Case(
            "output path too long",
            ["sheet", "in/small.csv", "-o", "/".join(["d" * 200] * 30) + ".csv", *HW],
        ),
        Case(
            "output in a missing directory", ["sheet", "in/small.csv", "-o", "nowhere/out.csv", *HW]
        ),
        Case("output under a file", ["sheet", "in/small.csv", "-o", "in/small.csv/out.csv", *HW]),
        Case("output type unknown", ["sheet", "in/small.csv", "-o", "out.exe", *HW]),
        Case("html report into /proc", ["report", "in/small.csv", "--html", "/proc/x.html", *HW]),
        Case("template into a read-only directory", ["template", "ro/out.xlsx", *HW], modes=True),
        Case(
            "unreadable input (permission denied)", ["sheet", "in/unreadable.csv", *HW], modes=True
        ),
        Case("unreadable workload copy", ["stack", "in/unreadable.csv", *HW], modes=True),
        Case("2,000-level nested TOML workload", ["stack", "in/nested.toml", *HW]),
        Case("2,000-level nested inline tables", ["stack", "in/nested_tables.toml", *HW]),
        Case(
            "2,000-level nested chip file",
            ["matmul", "64", "64", "64", "--hw", "in/chip_nested.toml"],
            "error",
            "numeric",
        ),
        Case("workload not UTF-8", ["stack", "in/bad_utf8.toml", *HW]),
        Case(
            "NUL byte in a CSV for template",
            ["template", "out_nul.xlsx", "--from", "in/nul.csv", *HW],
        ),
        Case("NUL byte late in a CSV", ["sheet", "in/nul_late.csv", *HW]),
        Case("missing input", ["sheet", "in/absent.csv", *HW]),
    ]


def _group4_signals() -> list[Case]:
    out = []
    for after in (0.15, 0.3, 1.0):
        out.append(
            Case(
                f"Ctrl-C after {after} s (import or run)",
                ["sheet", "in/medium.csv", "-o", "out_int.json", *HW],
                "any",
                signal_after_s=after,
                sig=signal.SIGINT,
            )
        )
    for after, suffix in ((3.0, "json"), (4.0, "csv"), (5.0, "xlsx"), (6.0, "md"), (2.0, "json")):
        out.append(
            Case(
                f"SIGTERM after {after} s, writing .{suffix}",
                ["sheet", "in/medium.csv", "-o", f"out_term.{suffix}", *HW],
                "any",
                signal_after_s=after,
                limit_s=120,
            )
        )
    for after, suffix in ((0.0, "json"), (0.5, "json"), (0.2, "csv"), (0.5, "xlsx"), (0.2, "md")):
        out.append(
            Case(
                f"SIGTERM {after} s into writing .{suffix}",
                ["sheet", "in/medium.csv", "-o", f"out_tmp.{suffix}", *HW],
                "any",
                signal_after_s=after,
                after_tmp=True,
                limit_s=120,
            )
        )
    out.append(
        Case(
            "Ctrl-C 0.3 s into writing .json",
            ["sheet", "in/medium.csv", "-o", "out_tmp_int.json", *HW],
            "any",
            signal_after_s=0.3,
            sig=signal.SIGINT,
            after_tmp=True,
            limit_s=120,
        )
    )
    return out


def _group5(big_rows: int) -> list[Case]:
    return [
        Case(
            "achievable above peak",
            ["matmul", "4096", "4096", "4096", "--hw", "in/chip_achievable.toml"],
            "error",
            "numeric",
            5,
        ),
        Case(
            "plan --tp larger than the dimension",
            ["plan", "in/stack.toml", "--devices", "65536", "--tp", "65536", *HW],
            "error",
            "numeric",
            5,
        ),
        Case(
            'gated = "false" (a string)',
            ["stack", "in/gated_string.toml", *HW],
            "error",
            "numeric",
            5,
        ),
        Case(
            "chip schema = 99",
            ["matmul", "64", "64", "64", "--hw", "in/chip_schema99.toml"],
            "error",
            "numeric",
            5,
        ),
        Case("--hw ''", ["matmul", "64", "64", "64", "--hw", ""], "error", "numeric", 5),
        Case("--dtype ''", ["matmul", "64", "64", "64", *HW, "--dtype", ""], "error", "numeric", 5),
        Case(
            "plan --batch ''",
            ["plan", "in/stack.toml", "--devices", "8", "--batch", "", *HW],
            "error",
            "numeric",
            5,
        ),
        Case(
            "--overlap --no-overlap",
            ["shard", "4096", "4096", "4096", "--mesh", "X=8", "--overlap", "--no-overlap", *HW],
            "error",
            "numeric",
            5,
        ),
        Case(
            f"xlsx output of {big_rows:,} rows",
            ["sheet", "in/big.csv", "-o", "out_rows.xlsx", *HW],
            "error" if big_rows + 1 > 1_048_576 else "ok",
            group=5,
            limit_s=300,
        ),
        Case(
            "xlsx output past column XFD",
            ["sheet", "in/wide.csv", "-o", "out_wide.xlsx", *HW],
            group=5,
        ),
        Case("CSV input past column XFD", ["sheet", "in/too_wide.csv", *HW], group=5),
        Case("sheet -o ''", ["sheet", "in/small.csv", "-o", "", *HW], group=5),
        Case("sheet -o ' '", ["sheet", "in/small.csv", "-o", " ", *HW], group=5),
        Case("template ''", ["template", "", *HW], group=5),
    ]


def catalogue(work: Path, big_rows: int) -> list[Case]:
    zero = work / "zero.csv"
    if not zero.exists():
        zero.symlink_to("/dev/zero")
    cases = [*_group1(), *_group2(big_rows), *_group3(), *_group4_numbers()]
    cases += [*_group4_files(), *_group4_signals(), *_group5(big_rows)]
    cases += new_catalogue(work, big_rows)  # group 6: serve, search and the new plan flags
    assert all(c.expect in ("error", "ok", "any") for c in cases)
    assert FORMULAS
    return cases
