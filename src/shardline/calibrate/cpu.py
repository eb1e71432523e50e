"""Measuring a CPU with numpy (the BLAS numpy links), and describing the machine.

Measurements run in a worker process (`shardline.calibrate.worker`) whose BLAS thread pool is
pinned through the environment (OPENBLAS/OMP/MKL_NUM_THREADS), so that `calibrate` and `validate`
measure with exactly the same number of threads. The worker times numpy jobs in groups, their
samples interleaved (`run_numpy_interleaved`), so that load from other processes spreads over
the cases instead of landing on one.
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from shardline.calibrate.timing import Timing, time_call, time_interleaved

__all__ = [
    "machine_identity",
    "cpu_model_name",
    "logical_cpus",
    "llc_bytes",
    "mem_total_bytes",
    "numpy_dtype",
    "run_numpy_job",
    "run_numpy_interleaved",
    "numpy_callable",
    "job_bytes",
    "blas_description",
    "NUMPY_DTYPES",
]

# The dtypes numpy multiplies through BLAS (numpy's float16 matmul is a plain loop, not BLAS, and
# numpy has no bfloat16): the CPU suite uses these two.
NUMPY_DTYPES = ("fp32", "fp64")


def cpu_model_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8").splitlines():
            if line.lower().startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def logical_cpus() -> int:
    return os.cpu_count() or 1


def machine_identity() -> str:
    """The machine kind: what a calibration file records in `measured_on` (validate compares)."""
    return f"cpu: {cpu_model_name()} ({logical_cpus()} logical CPUs)"


def llc_bytes() -> int | None:
    """Size of the last-level cache from sysfs (the largest cache index of cpu0)."""
    best = None
    base = Path("/sys/devices/system/cpu/cpu0/cache")
    try:
        for index in base.glob("index*"):
            text = (index / "size").read_text(encoding="utf-8").strip()
            scale = {"K": 1024, "M": 1024**2, "G": 1024**3}.get(text[-1:], 1)
            size = int(text.rstrip("KMG")) * scale
            best = size if best is None else max(best, size)
    except (OSError, ValueError):
        return best
    return best


def mem_total_bytes() -> int | None:
    try:
        for line in Path("/proc/meminfo").read_text(encoding="utf-8").splitlines():
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def blas_description() -> str:
    try:
        config = np.show_config(mode="dicts")
        blas = config["Build Dependencies"]["blas"]
        name, version = blas.get("name", "BLAS"), blas.get("version", "")
        return f"numpy {np.__version__}, {name} {version}".strip()
    except Exception:  # noqa: BLE001 - the description is informative only
        return f"numpy {np.__version__}"


def numpy_dtype(name: str) -> Any:
    table = {"fp32": np.float32, "fp64": np.float64}
    if name not in table:
        raise ValueError(f"numpy measures {', '.join(table)}, not {name}")
    return table[name]


def job_bytes(job: dict[str, Any]) -> int:
    """Memory the arrays of a numpy job take (what interleaving keeps allocated at once)."""
    if job["kind"] == "matmul":
        size = np.dtype(numpy_dtype(job["dtype"])).itemsize
        m, k, n = int(job["m"]), int(job["k"]), int(job["n"])
        return size * (m * k + k * n + m * n)
    return int(job["bytes"]) * (3 if job["kind"] == "triad" else 2)


def numpy_callable(job: dict[str, Any]) -> Callable[[], object]:
    """The call a numpy job times, its arrays allocated and filled: a matmul C = A.B (into a
    preallocated C), a copy or a triad. The values do not change the time (no denormals)."""
    rng = np.random.default_rng(0)
    kind = job["kind"]
    if kind == "matmul":
        dt = numpy_dtype(job["dtype"])
        m, k, n = int(job["m"]), int(job["k"]), int(job["n"])
        a = rng.random((m, k), dtype=dt)
        b = rng.random((k, n), dtype=dt)
        c = np.empty((m, n), dtype=dt)
        return lambda: np.matmul(a, b, out=c)
    count = max(1, int(job["bytes"]) // 8)
    src = rng.random(count)
    dst = np.empty_like(src)
    if kind == "copy":  # reads and writes `bytes` each
        return lambda: np.copyto(dst, src)
    if kind == "triad":  # a = b + s*c, done in place in two passes over a (STREAM-like)
        other = rng.random(count)

        def triad() -> None:
            np.multiply(other, 3.0, out=dst)
            np.add(dst, src, out=dst)

        return triad
    raise ValueError(f"unknown numpy job kind {kind!r}")


def run_numpy_job(job: dict[str, object], **timing: Any) -> Timing:
    """Time one numpy job on its own (`time_call`)."""
    return time_call(numpy_callable(job), **timing)


def run_numpy_interleaved(
    jobs: list[dict[str, object]], *, deadline: float | None = None, **timing: Any
) -> list[Timing]:
    """Time numpy jobs together, their samples interleaved in rounds (`time_interleaved`)."""
    return time_interleaved([numpy_callable(job) for job in jobs], deadline=deadline, **timing)
