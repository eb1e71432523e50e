"""Running measurement jobs in a worker process with a pinned thread pool, with a progress bar."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any, TextIO

__all__ = ["MeasurementFailed", "run_jobs", "thread_env", "ProgressBar"]

_THREAD_VARS = (
    "OPENBLAS_NUM_THREADS",
    "OMP_NUM_THREADS",
    "MKL_NUM_THREADS",
    "BLIS_NUM_THREADS",
    "VECLIB_MAXIMUM_THREADS",
    "NUMEXPR_NUM_THREADS",
)


class MeasurementFailed(Exception):
    """A worker failed midway; `done` holds the measurements it finished before."""

    def __init__(self, message: str, done: list[dict[str, object]]) -> None:
        super().__init__(message)
        self.done = done


def thread_env(threads: int | None) -> dict[str, str]:
    env = dict(os.environ)
    if threads is not None:
        for name in _THREAD_VARS:
            env[name] = str(threads)
    return env


class ProgressBar:
    """`[#####.....] 12/40 matmul fp32 1024x1024x1024` on stderr, redrawn in place (TTY only)."""

    def __init__(
        self, total: int, label: str, stream: TextIO | None = None, enabled: bool | None = None
    ) -> None:
        self.total = max(1, total)
        self.label = label
        self.stream = stream or sys.stderr
        self.enabled = self.stream.isatty() if enabled is None else enabled
        self.done = 0

    def update(self, what: str) -> None:
        self.done += 1
        if not self.enabled:
            return
        width = 30
        filled = int(width * self.done / self.total)
        self.stream.write(
            f"\r{self.label} [{'#' * filled}{'.' * (width - filled)}] "
            f"{self.done}/{self.total} {what[:40]:<40}"
        )
        self.stream.flush()

    def close(self) -> None:
        if self.enabled:
            self.stream.write("\r" + " " * 100 + "\r")
            self.stream.flush()


def describe(job: dict[str, Any]) -> str:
    if job["kind"] == "matmul":
        return f"matmul {job['dtype']} {job['m']}x{job['k']}x{job['n']}"
    if "bytes" in job:
        return f"{job['kind']} {job['bytes'] / 1e6:.3g} MB"
    return str(job["kind"])


def run_jobs(
    jobs: list[dict[str, Any]],
    *,
    threads: int | None,
    progress: Callable[[str], None] | None = None,
) -> list[dict[str, object]]:
    """Run `jobs` in `python -m shardline.calibrate.worker`; return each job with its timing.

    With one thread on a CPU the clock is the CPU time of the measuring thread: on an idle machine
    it equals the wall time, and on a shared one it leaves out the time other processes take the
    core away (the BLAS runs in the calling thread when it has one thread). Raises
    MeasurementFailed (with the finished measurements) when the worker fails."""
    if threads == 1:
        jobs = [
            {**job, "clock": "thread"} if job.get("device", "cpu") == "cpu" else job for job in jobs
        ]
    proc = subprocess.Popen(
        [sys.executable, "-m", "shardline.calibrate.worker"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=thread_env(threads),
    )
    assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
    proc.stdin.write(json.dumps(jobs))
    proc.stdin.close()
    done: list[dict[str, object]] = []
    error = None
    try:
        for line in proc.stdout:
            if not line.strip():
                continue
            record = json.loads(line)
            index = record.pop("index")
            if "error" in record:
                error = f"{describe(jobs[index])}: {record['error']}"
                break
            done.append({**jobs[index], **record})
            if progress is not None:
                progress(describe(jobs[index]))
    except KeyboardInterrupt:
        proc.kill()
        raise MeasurementFailed("interrupted", done) from None
    finally:
        proc.stdout.close()
        stderr = proc.stderr.read()
        proc.stderr.close()
        code = proc.wait()
    if error is None and (code != 0 or len(done) < len(jobs)):
        last = stderr.strip().splitlines()[-1:] or [f"exit status {code}"]
        error = f"the measuring process stopped after {len(done)} of {len(jobs)} jobs: {last[0]}"
    if error is not None:
        raise MeasurementFailed(error, done)
    return done
