"""The measuring process: reads a JSON list of jobs on stdin, times each, and prints one JSON line
per finished job on stdout (so that the parent keeps every measurement taken before a failure).

The parent starts it with the BLAS thread pool pinned in the environment. The environment variable
SHARDLINE_FAIL_AFTER=N makes the worker fail after N jobs: fault injection for the tests of
"a measurement that fails midway".
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

from shardline.calibrate.cpu import run_numpy_job
from shardline.calibrate.gpu import run_torch_job


def run_job(job: dict[str, Any]) -> dict[str, Any]:
    timing: dict[str, Any] = {
        key: job[key] for key in ("repeats", "warmup", "min_sample_s") if key in job
    }
    if job.get("clock") == "thread":  # CPU time of this thread (see runner.run_jobs)
        timing["clock"] = time.thread_time
    if job.get("backend", "numpy") == "torch":
        result = run_torch_job(job, **timing)
    else:
        result = run_numpy_job(job, **timing)
    return {
        "seconds": result.median_s,
        "min_s": result.min_s,
        "max_s": result.max_s,
        "samples": result.samples,
        "calls_per_sample": result.calls_per_sample,
    }


def main() -> int:
    jobs = json.loads(sys.stdin.read())
    fail_after = int(os.environ.get("SHARDLINE_FAIL_AFTER", "-1"))
    for index, job in enumerate(jobs):
        if index == fail_after:
            print(
                json.dumps({"index": index, "error": "injected failure (SHARDLINE_FAIL_AFTER)"}),
                flush=True,
            )
            return 1
        try:
            out = run_job(job)
        except Exception as exc:  # noqa: BLE001 - reported to the parent as one line
            print(json.dumps({"index": index, "error": f"{type(exc).__name__}: {exc}"}), flush=True)
            return 1
        print(json.dumps({"index": index, **out}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
