"""Hostile-input catalogue: runs the CLI (`python -m shardline ...`, one subprocess per case) on bad
numbers, hostile files, output-path tricks, signals and concurrent runs, and counts what went wrong.

Every case has a time limit (default 20 s; a few large-file cases more) and a memory limit
(RLIMIT_AS, default 6 GB) so that a runaway case cannot take the machine. Counted per case:
  traceback   stderr contains "Traceback"
  status      an exit status other than 0 or 2 (130 and 143, or death by SIGINT/SIGTERM, are
              accepted only in the cases that send that signal)
  wrong       a case that must fail (`error`) exited 0, or one that must work (`ok`) did not
  lost        an input file changed or disappeared (SHA-256 before and after)
  tmp         a temporary file (.*.tmp) left in the work directory
  hang        still running at the time limit (killed)
  memory      a peak resident size above --max-rss-gb (default 3 GB)
  unsafe      an output that must be neutralized (CSV formulas, Markdown HTML/links) is not
Each case names its owner: `io` (files, outputs, signals: this branch's items of issue 14) or
`numeric` (number validation, done on another branch); the summary gives the counts of both.

Group 6 (hostile_new_cases.py, fixtures in hostile_new_files.py) covers the commands and flags
that came later: serve, search (training, serving, Dask), the new plan flags, report --model,
model import, system show and the new workload template tables. Group 7 (hostile_second.py, cases
and fixtures) is the second list: formula injection into .xlsx through chip names, Markdown
through chip names and sources, degenerate rates (flags and chip-file numbers), output names with
control characters, and the temporary file a SIGKILL leaves (the next write removes it).
Group 8 (hostile_third.py, cases and fixtures) replays issue 28's "Reliability" list and issue
31's: 400-digit integers in every kind of data file, Hugging Face configs with wrongly typed head
dimensions and layer patterns, degenerate chip numbers, huge traces and simulations, wide
--batches, Dask clusters without workers, partial CSVs of calibrate and validate, silent wrong
answers judged on the --json output (`answer`), formula injection through calibrate --name, the
Python API's wrong values (`api`: `python -c CODE`, an InputError printed as one error line) and
the 200,000-layer workload.

Run: `python benchmarks/bench_hostile.py [--only io|numeric] [--cases SUBSTRING] [--group N]
[--big-rows N] [--limit-s S] [--keep]`. Prints one line per case and a summary table; exits 1
when any case has a traceback, a bad status, a lost file, a leftover .tmp, a hang, too much
memory, a wrong answer or unsafe output.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from hostile_files import make_fixtures  # noqa: E402
from hostile_new_files import make_new_fixtures  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = ("traceback", "status", "wrong", "lost", "tmp", "hang", "memory", "unsafe")
_RUNNING: list[subprocess.Popen[bytes]] = []  # killed if the catalogue itself is stopped


@dataclass
class Case:
    name: str
    argv: list[str]
    expect: str = "error"  # "error" (exit 2), "ok" (exit 0), "any" (0 or 2)
    owner: str = "io"
    group: int = 4  # the numbered group of issue 14
    limit_s: float | None = None
    signal_after_s: float | None = None  # send `sig` this long after the start
    after_tmp: bool = False  # ... or this long after its temporary output file appears
    sig: int = signal.SIGTERM
    check: Callable[[Path], str] | None = None  # "" when the output is safe, else what is wrong
    concurrent: list[str] | None = None  # a second command, started `stagger_s` after the first
    stagger_s: float = 0.0
    # file modes must apply: as root, run without the capabilities that bypass them (setpriv)
    modes: bool = False
    env: dict[str, str] | None = None  # more environment (PYTHONPATH: put after src/)
    # a command run once the first has ended (after its signal): its status is the case's, and
    # the work directory is judged after it (a stale .tmp it must clean up counts as left)
    then: list[str] | None = None
    # argv is `python ARGV` (e.g. -c CODE: the Python API), not `python -m shardline ARGV`
    api: bool = False
    # the answer's stdout judged: "" when right, else what is wrong (counted as "wrong")
    answer: Callable[[str], str] | None = None


@dataclass
class Outcome:
    case: Case
    status: int | None
    seconds: float
    rss_mb: float
    stderr: str
    problems: list[str] = field(default_factory=list)


def _digest(directory: Path) -> dict[str, str]:
    out = {}
    for p in sorted(directory.rglob("*")):
        if p.is_file() and not p.is_symlink() and not p.name.startswith("out"):
            out[str(p.relative_to(directory))] = hashlib.sha256(p.read_bytes()).hexdigest()
    return out


def _limits(mem_bytes: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (mem_bytes, mem_bytes))
        os.setsid()  # its own process group: a kill reaches the whole run

    return apply


def _start(
    argv: list[str],
    cwd: Path,
    mem_bytes: int,
    log: Path,
    modes: bool = False,
    extra: dict[str, str] | None = None,
    api: bool = False,
    stdout: Path | None = None,
) -> subprocess.Popen[bytes]:
    extra = extra or {}
    paths = [str(ROOT / "src"), extra.get("PYTHONPATH", "")]
    env = {**os.environ, **extra, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    prefix: list[str] = []
    if modes and os.geteuid() == 0 and shutil.which("setpriv"):
        prefix = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]
    module = [] if api else ["-m", "shardline"]
    proc = subprocess.Popen(
        [*prefix, sys.executable, *module, *argv],
        cwd=cwd,
        env=env,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL if stdout is None else stdout.open("wb"),
        stderr=log.open("wb"),
        preexec_fn=_limits(mem_bytes),
    )
    _RUNNING.append(proc)
    return proc


def _wait(proc: subprocess.Popen[bytes], deadline: float) -> tuple[int | None, float]:
    """Exit status (None past the deadline: killed) and peak RSS in MB (os.wait4)."""
    while True:
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            proc.returncode = os.waitstatus_to_exitcode(status)
            return proc.returncode, usage.ru_maxrss / 1024
        if time.monotonic() > deadline:
            os.killpg(proc.pid, signal.SIGKILL)
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = -9
            return None, usage.ru_maxrss / 1024
        time.sleep(0.01)


def run_case(case: Case, work: Path, limit_s: float, mem_bytes: int) -> Outcome:
    before = _digest(work / "in")
    log = work / f"stderr-{os.getpid()}.txt"
    limit = case.limit_s or limit_s
    start = time.monotonic()
    answer = work / f"stdout-{os.getpid()}.txt" if case.answer is not None else None
    proc = _start(case.argv, work, mem_bytes, log, case.modes, case.env, case.api, answer)
    second = None
    if case.concurrent is not None:
        time.sleep(case.stagger_s)
        second = _start(case.concurrent, work, mem_bytes, work / "stderr-2.txt")
    note = _send_signal(case, proc, work, start + limit)
    status, rss = _wait(proc, start + limit)
    seconds = time.monotonic() - start
    stderr = log.read_text(errors="replace")
    if second is not None:
        status2, _ = _wait(second, start + limit)
        stderr += (work / "stderr-2.txt").read_text(errors="replace")
        status = status if status2 is None or status == 2 else status2  # see _concurrent_check
    if case.then is not None:
        third = _start(case.then, work, mem_bytes, log, case.modes, case.env, case.api, answer)
        status, _ = _wait(third, time.monotonic() + limit)
        stderr += log.read_text(errors="replace")
    outcome = Outcome(case, status, seconds, rss, stderr + note)
    _judge(outcome, work, before)
    if case.answer is not None and answer is not None and status == 0:
        bad = case.answer(answer.read_text(errors="replace"))
        if bad and "wrong" not in outcome.problems:
            outcome.problems.append("wrong")
            outcome.stderr += f"\n[answer] {bad}"
    return outcome


def _send_signal(case: Case, proc: subprocess.Popen[bytes], work: Path, deadline: float) -> str:
    """Send the case's signal (after its delay, or that long after a .tmp file appears)."""
    if case.signal_after_s is None:
        return ""
    note = ""
    if case.after_tmp:
        while time.monotonic() < deadline and not any(work.glob(".*.tmp")):
            if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT):
                return "\n[no temporary file appeared before the end]"
            time.sleep(0.005)
        note = f"\n[signal sent {case.signal_after_s} s after the .tmp file appeared]"
    time.sleep(case.signal_after_s)
    with contextlib.suppress(ProcessLookupError):
        os.kill(proc.pid, case.sig)
    return note


MAX_RSS_MB = 3000.0


def _judge(o: Outcome, work: Path, before: dict[str, str]) -> None:
    case, status = o.case, o.status
    if "Traceback" in o.stderr:
        o.problems.append("traceback")
    signals = {130, 143, -signal.SIGINT, -signal.SIGTERM, -case.sig}
    if case.signal_after_s is None:
        signals = set()
    if status is None:
        o.problems.append("hang")
    elif status not in {0, 2} | signals:
        o.problems.append("status")
    elif status in (0, 2) and (
        (case.expect == "error" and status == 0) or (case.expect == "ok" and status != 0)
    ):
        o.problems.append("wrong")
    if o.rss_mb > MAX_RSS_MB:
        o.problems.append("memory")
    if _digest(work / "in") != before:
        o.problems.append("lost")
    if list(work.rglob(".*.tmp")):
        o.problems.append("tmp")
        for tmp in work.rglob(".*.tmp"):
            tmp.unlink()
    if case.check is not None and status is not None:
        bad = case.check(work)
        if bad:
            o.problems.append("unsafe")
            o.stderr += f"\n[check] {bad}"


def _clean_outputs(work: Path) -> None:
    for p in work.glob("out*"):
        if p.is_dir() and not p.is_symlink():
            shutil.rmtree(p)
        else:
            p.unlink()


def summarize(outcomes: list[Outcome]) -> int:
    print()
    print(f"{'owner':<8} {'cases':>5} " + " ".join(f"{k:>9}" for k in PROBLEMS))
    for owner in ("io", "numeric", "all"):
        rows = [o for o in outcomes if owner in ("all", o.case.owner)]
        counts = [sum(k in o.problems for o in rows) for k in PROBLEMS]
        print(f"{owner:<8} {len(rows):>5} " + " ".join(f"{c:>9}" for c in counts))
    failed = [o for o in outcomes if o.problems]
    if failed:
        print("\nfailing cases:")
        for o in failed:
            last = o.stderr.strip().splitlines()[-1:] or [""]
            print(f"  [{o.case.owner}] {o.case.name}: {', '.join(o.problems)} ({last[0][:100]})")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", choices=("io", "numeric"), default=None)
    parser.add_argument("--cases", default="", help="run only cases whose name contains this")
    parser.add_argument("--group", type=int, default=None, help="run only this group (1 to 8)")
    parser.add_argument("--big-rows", type=int, default=1_100_000, help="rows of the big CSV")
    parser.add_argument("--limit-s", type=float, default=20.0)
    parser.add_argument("--mem-gb", type=float, default=6.0, help="RLIMIT_AS of each case")
    parser.add_argument("--max-rss-gb", type=float, default=3.0, help="more counts as a problem")
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("-v", "--verbose", action="store_true", help="show each last stderr line")
    args = parser.parse_args(argv)
    global MAX_RSS_MB
    MAX_RSS_MB = args.max_rss_gb * 1000
    from hostile_cases import catalogue
    from hostile_second import make_second_fixtures  # imports this module: not at the top
    from hostile_third import make_third_fixtures, third_catalogue

    work = Path(tempfile.mkdtemp(prefix="shardline-hostile-"))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # clean up the work directory too
    try:
        t0 = time.monotonic()
        make_fixtures(work, args.big_rows)
        make_new_fixtures(work, args.big_rows)
        make_second_fixtures(work)
        make_third_fixtures(work, live=args.group in (None, 8))
        print(f"fixtures in {work} ({time.monotonic() - t0:.1f} s)")
        outcomes = []
        for case in [*catalogue(work, args.big_rows), *third_catalogue(work)]:
            if (args.only and case.owner != args.only) or args.cases not in case.name:
                continue
            if args.group is not None and case.group != args.group:
                continue
            o = run_case(case, work, args.limit_s, int(args.mem_gb * 1e9))
            _clean_outputs(work)
            outcomes.append(o)
            flag = "ok  " if not o.problems else "FAIL"
            print(
                f"{flag} [{case.owner:<7}] g{case.group} {case.name:<44} exit {o.status!s:>4} "
                f"{o.seconds:6.2f} s {o.rss_mb:7.0f} MB {' '.join(o.problems)}",
                flush=True,
            )
            if args.verbose:
                print(f"       {(o.stderr.strip().splitlines() or [''])[-1][:150]}", flush=True)
        return summarize(outcomes)
    finally:
        for proc in _RUNNING:
            if proc.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
        if args.keep:
            print(f"kept {work}")
        else:
            subprocess.run(["chmod", "-R", "u+rwx", str(work)], check=False)
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
