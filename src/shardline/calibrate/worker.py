"""The measuring process: reads a JSON list of jobs on stdin, times each, and prints one JSON line
per finished job on stdout (so that the parent keeps every measurement taken before a failure).

The parent starts it with the BLAS thread pool pinned in the environment. Consecutive numpy jobs
are measured in groups (as many as GROUP_BYTES of arrays allow), their samples interleaved in
rounds (`shardline.calibrate.timing.time_interleaved`); a job's `budget_s` caps the time the
whole list may take (never fewer than MIN_ROUNDS rounds), and each record carries `noise`, the
robust relative spread of the job's samples. The environment variable
SHARDLINE_FAIL_AFTER=N makes the worker fail after N jobs: fault injection for the tests of
"a measurement that fails midway".
"""

from __future__ import annotations

import json
import os
import sys
import time

from shardline.calibrate.cpu import job_bytes, run_numpy_interleaved, run_numpy_job
from shardline.calibrate.gpu import run_torch_job
from shardline.calibrate.timing import Timing

GROUP_BYTES = 512 * 2**20  # arrays kept allocated at once while a group's samples interleave


def _timing_args(job: dict[str, object]) -> dict[str, object]:
    timing: dict[str, object] = {
        key: job[key] for key in ("repeats", "warmup", "min_sample_s") if key in job
    }
    if job.get("clock") == "thread":  # CPU time of this thread (see runner.run_jobs)
        timing["clock"] = time.thread_time
    return timing


def _record(result: Timing) -> dict[str, object]:
    return {
        "seconds": result.median_s,
        "min_s": result.min_s,
        "max_s": result.max_s,
        "samples": result.samples,
        "calls_per_sample": result.calls_per_sample,
        "noise": result.noise,
    }


def run_job(job: dict[str, object]) -> dict[str, object]:
    timing = _timing_args(job)
    if job.get("backend", "numpy") == "torch":
        return _record(run_torch_job(job, **timing))
    return _record(run_numpy_job(job, **timing))


def _interleavable(job: dict[str, object]) -> bool:
    return job.get("backend", "numpy") == "numpy" and job.get("device", "cpu") == "cpu"


def groups(jobs: list[dict[str, object]]) -> list[list[int]]:
    """Indices of consecutive numpy jobs whose arrays fit GROUP_BYTES together (at least one job
    each); any other job is a group of its own."""
    out: list[list[int]] = []
    held = 0
    for index, job in enumerate(jobs):
        size = job_bytes(job) if _interleavable(job) else 0
        last = out[-1] if out else None
        if (
            last is not None
            and _interleavable(job)
            and _interleavable(jobs[last[0]])
            and held + size <= GROUP_BYTES
        ):
            last.append(index)
            held += size
        else:
            out.append([index])
            held = size
    return out


def _measure(jobs: list[dict[str, object]], deadline: float | None) -> list[dict[str, object]]:
    if len(jobs) == 1 or not _interleavable(jobs[0]):
        return [run_job(job) for job in jobs]
    results = run_numpy_interleaved(jobs, deadline=deadline, **_timing_args(jobs[0]))
    return [_record(r) for r in results]


def main() -> int:
    jobs = json.loads(sys.stdin.read())
    fail_after = int(os.environ.get("SHARDLINE_FAIL_AFTER", "-1"))
    budget_s = max((float(j.get("budget_s", 0)) for j in jobs), default=0.0)
    start, done = time.monotonic(), 0
    for group in groups(jobs):
        if 0 <= fail_after < group[0] + len(group):
            group = group[: max(0, fail_after - group[0])]
        deadline = None
        if budget_s > 0:
            left = max(0.0, start + budget_s - time.monotonic())
            deadline = time.monotonic() + left * len(group) / max(1, len(jobs) - done)
        try:
            records = _measure([jobs[i] for i in group], deadline) if group else []
        except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
            error = f"{type(exc).__name__}: {exc}"
            print(json.dumps({"index": group[0], "error": error}), flush=True)
            return 1
        for index, record in zip(group, records, strict=True):
            print(json.dumps({"index": index, **record}), flush=True)
        done += len(group)
        if done == fail_after:
            message = "injected failure (SHARDLINE_FAIL_AFTER)"
            print(json.dumps({"index": done, "error": message}), flush=True)
            return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
