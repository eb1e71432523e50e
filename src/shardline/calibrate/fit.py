"""What `calibrate` measures, and how the measurements become a chip file.

CPU (numpy, or torch's CPU kernels): the prediction model of `shardline.ops.predict` for a CPU is
`t = t_call + (bytes_a + bytes_b) / W_pack + F / P` (a matrix-vector product streams instead:
`t = t_call + Q / W`). Calibration measures:

- `t_call` directly: the time of an 8x8x8 matmul (its math is a few ns);
- `W_pack` and one `P` per dtype by least squares on relative error over a set of multiplies chosen
  to vary the two terms independently (squares, skinny M and N, long K), none of them in the
  `validate` suite;
- streaming read bandwidth as matrix-vector products whose matrix fits the last level cache (a
  quarter of it) and does not (four times it), and copies and triads of four times the cache.

GPU (torch.cuda): the achievable matmul rate per dtype as the best of several large squares (the
"maximum achievable matmul FLOPS" method), the unaligned rate (K = 8191 against 8192), copy
bandwidth, and the launch overhead of an almost empty kernel.
"""

from __future__ import annotations

import datetime
import math
import platform
from dataclasses import dataclass
from typing import Any

import numpy as np

from shardline.basics.dtypes import dtype_bytes
from shardline.calibrate.chipfile import Measured
from shardline.calibrate.timing import calibration_noise, timing_settings
from shardline.errors import InputError
from shardline.hardware import Chip
from shardline.ops.predict import pack_read_time

__all__ = ["CpuSetup", "cpu_plan", "fit_cpu", "gpu_plan", "fit_gpu", "TINY", "least_squares"]

TINY = 8  # side of the matmul that measures the per-call overhead
_FALLBACK_LLC_BYTES = 8 * 2**20  # when sysfs does not tell the cache size
# Matrix-vector reads of these fractions of the last-level cache (sysfs size) measure the streaming
# rate from the cache, from memory, and how much of the cache one process gets in practice.
_STREAM_FRACTIONS = (1 / 16, 1 / 8, 1 / 4, 1 / 2, 1.0, 2.0, 4.0)
_STREAM_FRACTIONS_QUICK = (1 / 8, 1.0, 4.0)


def _square_side(nbytes: float, elem_bytes: float) -> int:
    return max(16, int(math.sqrt(nbytes / elem_bytes)))


def cpu_plan(
    dtypes: tuple[str, ...],
    llc_bytes: int | None,
    *,
    backend: str = "numpy",
    device: str = "cpu",
    quick: bool = False,
    repeats: int | None = None,
) -> list[dict[str, object]]:
    """The jobs of a CPU calibration (see the module docstring)."""
    timing = timing_settings(quick, repeats)
    llc = llc_bytes or _FALLBACK_LLC_BYTES
    squares: tuple[int, ...]
    sides: tuple[int, ...]
    skinny_m: tuple[int, ...]
    long_k: tuple[tuple[int, int, int], ...]
    if quick:
        # still one skinny side at a quarter of the cache and a K long enough to read B from
        # memory: without them the packing term is not determined (and skinny shapes miss)
        squares, skinny_m = (32, 64, 128, 256), (8, 32)
        sides = (_square_side(llc / 4, 4),)
        long_k = ((32, 2048, 32), (64, 16384, 64))
    else:  # skinny sides: inputs of ~1/4 and ~1 x the cache in fp32 (packing from both levels)
        squares, skinny_m = (48, 96, 160, 320, 640, 1280), (2, 8, 32, 128)
        sides = (_square_side(llc / 4, 4), _square_side(llc, 4))
        long_k = ((96, 8192, 96), (192, 16384, 192), (64, 49152, 64))
    base = {"backend": backend, "device": device, **timing}
    jobs: list[dict[str, object]] = []
    for dtype in dtypes:
        size = dtype_bytes(dtype)
        shapes = [(TINY, TINY, TINY, "overhead")]
        shapes += [(n, n, n, "fit") for n in squares]
        shapes += [(m, side, side, "fit") for side in sides for m in skinny_m]
        shapes += [(sides[0], sides[0], n, "fit") for n in skinny_m[:2]]
        shapes += [(m, k, n, "fit") for m, k, n in long_k]
        for fraction in _STREAM_FRACTIONS_QUICK if quick else _STREAM_FRACTIONS:
            side = _square_side(fraction * llc, size)
            shapes.append((1, side, side, "stream"))
        for m, k, n, role in shapes:
            jobs.append(
                {**base, "kind": "matmul", "m": m, "k": k, "n": n, "dtype": dtype, "role": role}
            )
    for kind in ("copy", "triad"):
        jobs.append(
            {
                "backend": "numpy",
                "device": "cpu",
                **timing,
                "kind": kind,
                "bytes": int(4 * llc),
                "role": "memory",
            }
        )
    return jobs


def _flops(r: dict[str, Any]) -> float:
    return 2.0 * r["m"] * r["k"] * r["n"]


def _bytes(r: dict[str, Any]) -> dict[str, float]:
    s = dtype_bytes(r["dtype"])
    a, b, c = s * r["m"] * r["k"], s * r["k"] * r["n"], s * r["m"] * r["n"]
    return {"a": a, "b": b, "c": c, "total": a + b + c}


def least_squares(rows: list[list[float]], times: list[float]) -> np.ndarray:
    """min sum(((X beta - t) / t)^2) with beta >= 0 (a column whose coefficient comes out negative
    is dropped and the rest refitted)."""
    x = np.array(rows, dtype=np.float64)
    t = np.array(times, dtype=np.float64)
    keep = np.ones(x.shape[1], dtype=bool)
    beta = np.zeros(x.shape[1])
    for _ in range(x.shape[1]):
        scaled = x[:, keep] / t[:, None]
        sol, *_ = np.linalg.lstsq(scaled, np.ones_like(t), rcond=None)
        beta[:] = 0.0
        beta[keep] = sol
        if (sol >= 0).all():
            break
        keep[np.flatnonzero(keep)[np.argmin(sol)]] = False
    return beta


def _vendor(model: str) -> str:
    for vendor in ("AMD", "Intel", "Apple", "Ampere", "ARM", "NVIDIA", "IBM"):
        if vendor.lower() in model.lower():
            return vendor
    return "unknown"


def _fit_stream(points: list[tuple[float, float]], llc: float) -> tuple[float, float, float]:
    """(C, W_cache, W_mem) of `t = min(Q, C)/W_cache + max(Q - C, 0)/W_mem` from (Q, t) points:
    least squares on relative error for the two rates at each C of a log grid, best C kept."""
    best: tuple[float, float, float, float] | None = None
    for capacity in llc * np.logspace(-4, 1, 41, base=2.0):
        rows = [[min(q, capacity), max(q - capacity, 0.0)] for q, _ in points]
        beta = least_squares(rows, [t for _, t in points])
        if (beta <= 0).any():
            continue
        pred = np.array(rows) @ beta
        times = np.array([t for _, t in points])
        err = float(np.sum(((pred - times) / times) ** 2))
        if best is None or err < best[0]:
            best = (err, float(capacity), 1.0 / beta[0], 1.0 / beta[1])
    if best is None:
        raise InputError("the matrix-vector measurements do not determine the streaming rates")
    return best[1], best[2], best[3]


@dataclass(frozen=True)
class CpuSetup:
    """The machine and the run a CPU calibration measured."""

    name: str  # the chip's name in the file
    identity: str  # the machine kind (`measured_on`)
    model: str  # the CPU model name
    llc_bytes: int | None  # last-level cache size from sysfs
    mem_total: int | None  # /proc/meminfo MemTotal
    library: str  # the BLAS library
    threads: int = 1
    backend: str = "numpy"


_WHERE = "shardline calibrate (conditions in [calibration])"


@dataclass(frozen=True)
class _CpuFit:
    """The fitted CPU model: t = t_call + pack_ratio * t_read(bytes_a + bytes_b) + F / P_d."""

    t_call: float
    stream_points: int
    capacity: float  # effective last-level cache bytes
    cache_rate: float
    mem_rate: float
    pack_ratio: float
    achievable: dict[str, Measured]
    peaks: dict[str, Measured]
    fit_error: float  # median relative error over the fit matmuls


def _fit_matmuls(
    fit_rows: list[dict[str, Any]], dtypes: list[str], t_call: float, stream: tuple[float, ...]
) -> tuple[float, np.ndarray, float]:
    """(pack ratio, 1/P per dtype, median relative error) of
    `t - t_call = r * t_read(bytes_a + bytes_b) + F / P_d` by least squares."""
    capacity, cache_rate, mem_rate = stream
    rows, times = [], []
    for r in fit_rows:
        q = _bytes(r)
        t_in = float(pack_read_time(q["a"] + q["b"], capacity, cache_rate, mem_rate))
        rows.append([t_in] + [_flops(r) if r["dtype"] == d else 0.0 for d in dtypes])
        times.append(max(r["seconds"] - t_call, 1e-9))
    if not rows:
        raise InputError("no matmul measurements to fit")
    beta = least_squares(rows, times)
    # Refine: the largest square of each dtype (packing ~1% of its time) pins that dtype's rate,
    # so that a noisy packing term cannot trade against the rate; then refit the packing ratio.
    x, t = np.array(rows), np.array(times)
    largest = {
        d: max(
            (i for i, r in enumerate(fit_rows) if r["dtype"] == d and r["m"] == r["k"] == r["n"]),
            key=lambda i: _flops(fit_rows[i]),
            default=-1,
        )
        for d in dtypes
    }
    for _ in range(5):
        for j, d in enumerate(dtypes, start=1):
            i = largest[d]
            if i >= 0 and t[i] > beta[0] * x[i, 0]:
                beta[j] = (t[i] - beta[0] * x[i, 0]) / x[i, j]
        rest = t - x[:, 1:] @ beta[1:]
        beta[0] = max(0.0, float(np.sum(x[:, 0] * rest / t**2) / np.sum((x[:, 0] / t) ** 2)))
    predicted = np.array(rows) @ beta + t_call
    measured = np.array([r["seconds"] for r in fit_rows])
    fit_error = float(np.median(np.abs(predicted - measured) / measured))
    return float(beta[0]), beta[1:], fit_error


def _fit_cpu_model(results: list[dict[str, Any]], llc_bytes: int | None) -> _CpuFit:
    mm = [r for r in results if r["kind"] == "matmul"]
    dtypes = list(dict.fromkeys(r["dtype"] for r in mm))
    # the same BLAS call in every dtype: noise only adds, so the smallest is the overhead
    overhead = [r["seconds"] for r in mm if r["role"] == "overhead"]
    t_call = float(min(overhead)) if overhead else 0.0
    # 1. streaming reads: effective cache capacity, cache and memory rates
    stream_points = [
        (_bytes(r)["total"], max(r["seconds"] - t_call, 1e-9)) for r in mm if r["role"] == "stream"
    ]
    if len(stream_points) < 3:
        raise InputError("too few matrix-vector measurements to fit the streaming rates")
    stream = _fit_stream(stream_points, float(llc_bytes or _FALLBACK_LLC_BYTES))
    # 2. matmuls: t - t_call = r * t_read(bytes_a + bytes_b) + F / P_d
    fit_rows = [r for r in mm if r["role"] == "fit"]
    pack_ratio, inv_rates, fit_error = _fit_matmuls(fit_rows, dtypes, t_call, stream)
    peaks, achievable = {}, {}
    for d, inv in zip(dtypes, inv_rates, strict=True):
        if inv <= 0:
            raise InputError(f"the {d} matmul measurements do not determine a rate")
        best = max(_flops(r) / r["seconds"] for r in mm if r["dtype"] == d and r["role"] == "fit")
        rate = 1.0 / float(inv)
        count = sum(r["dtype"] == d for r in fit_rows)
        achievable[d] = Measured(
            rate, f"fitted over {count} {d} matmuls: t = t_call + t_pack + F/P; {_WHERE}"
        )
        peaks[d] = Measured(max(best, rate), f"best {d} matmul rate measured; {_WHERE}")
    return _CpuFit(t_call, len(stream_points), *stream, pack_ratio, achievable, peaks, fit_error)


def _cpu_tables(
    fit: _CpuFit, results: list[dict[str, Any]], setup: CpuSetup
) -> dict[str, dict[str, Any]]:
    """The memory, on_chip and achievable tables of a CPU chip file."""
    copies = {
        r["kind"]: r["bytes"] * (2 if r["kind"] == "copy" else 5) / r["seconds"]
        for r in results
        if r["kind"] in ("copy", "triad")
    }
    dram_best = max([fit.mem_rate, *copies.values()])
    mem_total, llc_bytes = setup.mem_total, setup.llc_bytes
    memory = {
        "capacity_bytes": Measured(
            float(mem_total or 2**30),
            "/proc/meminfo MemTotal" if mem_total else "unknown; 1 GiB placeholder",
        ),
        "bytes_per_s": Measured(
            dram_best,
            "best of the fitted matrix-vector memory rate, copy "
            f"(read+write) and triad (5 passes); {_WHERE}",
        ),
    }
    sysfs = f"sysfs says {llc_bytes:,} B" if llc_bytes else "sysfs does not say"
    on_chip: dict[str, object] = {
        "core_name": "core",
        "cores": Measured(setup.threads, "BLAS threads used by the calibration"),
        "l2_bytes": Measured(
            fit.capacity,
            "effective last-level cache capacity, fitted to "
            f"matrix-vector reads at {fit.stream_points} sizes "
            f"({sysfs}); {_WHERE}",
        ),
        "l2_bytes_per_s": Measured(
            fit.cache_rate, f"fitted matrix-vector read rate from the cache; {_WHERE}"
        ),
    }
    ach: dict[str, object] = {
        "mem_bytes_per_s": Measured(
            fit.mem_rate, f"fitted matrix-vector read rate from memory; {_WHERE}"
        ),
        "matmul_flops_per_s": fit.achievable,
    }
    if fit.t_call > 0:
        ach["per_call_overhead_s"] = Measured(
            fit.t_call, f"median time of a {TINY}x{TINY}x{TINY} matmul; {_WHERE}"
        )
    if fit.pack_ratio > 0:
        ach["pack_bytes_per_s"] = Measured(
            fit.mem_rate / fit.pack_ratio,
            "fitted: packing the inputs "
            f"takes {fit.pack_ratio:.3g} x the time of reading them "
            f"(memory rate / {fit.pack_ratio:.3g}); {_WHERE}",
        )
    return {"memory": memory, "on_chip": on_chip, "achievable": ach}


def fit_cpu(results: list[dict[str, object]], setup: CpuSetup) -> dict[str, object]:
    """A chip-file table from CPU calibration results (see the module docstring)."""
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    fit = _fit_cpu_model(results, setup.llc_bytes)
    model, threads, backend = setup.model, setup.threads, setup.backend
    return {
        "schema": 1,
        "name": setup.name,
        "display_name": f"{model} ({threads} thread(s), {backend}, calibrated)",
        "vendor": _vendor(model),
        "kind": "cpu",
        "measured_on": setup.identity,
        "notes": "written by `shardline calibrate`; predicted time of a matmul on this file: "
        "t_call + t_pack + F/matmul_flops_per_s, t_pack = (bytes_a + bytes_b)/W x "
        "mem_bytes_per_s/pack_bytes_per_s (W: l2_bytes_per_s when the inputs fit "
        "l2_bytes, else mem_bytes_per_s); a matrix-vector product takes "
        "t_call + t_stream(Q); t_stream(Q) = min(Q, l2_bytes)/l2_bytes_per_s + "
        "max(Q - l2_bytes, 0)/mem_bytes_per_s",
        "peak_flops_per_s": fit.peaks,
        **_cpu_tables(fit, results, setup),
        "calibration": {
            "date": when,
            "machine": setup.identity,
            "backend": backend,
            "library": setup.library,
            "threads": threads,
            "python": platform.python_version(),
            "fit_median_abs_error": round(fit.fit_error, 4),
            "measurements": len(results),
            "noise": calibration_noise(results),
        },
    }


# ----------------------------------------------------------------------------------------------
# GPU


def gpu_plan(
    dtypes: tuple[str, ...], *, quick: bool = False, repeats: int | None = None
) -> list[dict[str, object]]:
    timing = timing_settings(quick, repeats)
    base = {"backend": "torch", "device": "cuda", **timing}
    sides = (1024, 2048) if quick else (4096, 6144, 8192, 12288)
    jobs: list[dict[str, object]] = [{**base, "kind": "launch", "role": "launch"}]
    for dtype in dtypes:
        for n in sides:
            jobs.append(
                {**base, "kind": "matmul", "m": n, "k": n, "n": n, "dtype": dtype, "role": "peak"}
            )
    big = sides[-1]
    for k, role in ((big, "aligned"), (big - 1, "unaligned")):
        jobs.append(
            {**base, "kind": "matmul", "m": big, "k": k, "n": big, "dtype": dtypes[0], "role": role}
        )
    jobs.append({**base, "kind": "copy", "bytes": 2**26 if quick else 2**30, "role": "memory"})
    return jobs


def _gpu_achievable(results: list[dict[str, Any]]) -> tuple[dict[str, object], float | None]:
    """The achievable table of a GPU (matmul rates, copy bandwidth, launch overhead, unaligned
    efficiency) and the measured copy bandwidth."""
    rates: dict[str, float] = {}
    for r in results:
        if r["kind"] == "matmul" and r["role"] == "peak":
            rates[r["dtype"]] = max(rates.get(r["dtype"], 0.0), _flops(r) / r["seconds"])
    achievable = {
        d: Measured(v, f"best of large squares (max achievable matmul FLOPS); {_WHERE}")
        for d, v in rates.items()
    }
    by_role = {r["role"]: r for r in results}
    copy = by_role.get("memory")
    mem_rate = 2 * copy["bytes"] / copy["seconds"] if copy else None
    ach: dict[str, object] = {"matmul_flops_per_s": achievable}
    if mem_rate:
        ach["mem_bytes_per_s"] = Measured(mem_rate, f"device copy (read+write); {_WHERE}")
    if "launch" in by_role:
        ach["launch_overhead_s"] = Measured(
            by_role["launch"]["seconds"], f"time per almost empty kernel; {_WHERE}"
        )
    if "aligned" in by_role and "unaligned" in by_role:
        a, u = by_role["aligned"], by_role["unaligned"]
        eff = min(1.0, (_flops(u) / u["seconds"]) / (_flops(a) / a["seconds"]))
        ach["unaligned_matmul_efficiency"] = Measured(
            eff, f"rate with K={u['k']} over K={a['k']}; {_WHERE}"
        )
    return ach, mem_rate


def _gpu_peaks_and_memory(
    ach: dict[str, Any], mem_rate: float | None, props: dict[str, Any], catalog_chip: Chip | None
) -> tuple[dict[str, Measured], dict[str, Measured]]:
    """Datasheet peaks and memory from the matching catalog chip, else the best measured."""
    if catalog_chip is not None:
        peaks = {
            d: Measured(v, catalog_chip.sources.get(f"peak_flops_per_s.{d}", "catalog"))
            for d, v in catalog_chip.peak_flops_per_s.items()
        }
        memory = {
            "capacity_bytes": Measured(catalog_chip.capacity_bytes, "catalog"),
            "bytes_per_s": Measured(catalog_chip.mem_bytes_per_s, "catalog datasheet"),
        }
        return peaks, memory
    peaks = {
        d: Measured(v.value, f"no catalog entry: best measured; {_WHERE}")
        for d, v in ach["matmul_flops_per_s"].items()
    }
    memory = {
        "capacity_bytes": Measured(float(props["memory_bytes"]), "CUDA device properties"),
        "bytes_per_s": Measured(mem_rate or 1e12, "no catalog entry: measured copy"),
    }
    return peaks, memory


def _gpu_on_chip(props: dict[str, Any], catalog_chip: Chip | None) -> dict[str, object]:
    on_chip: dict[str, object] = {
        "core_name": "SM",
        "cores": Measured(props["sms"], "CUDA device properties"),
        "align_bytes": Measured(16, "NVIDIA Matrix Multiplication Background guide"),
    }
    if props.get("shared_bytes_per_sm"):
        on_chip["shared_bytes_per_core"] = Measured(
            float(props["shared_bytes_per_sm"]), "CUDA device properties"
        )
    if props.get("l2_bytes"):
        on_chip["l2_bytes"] = Measured(float(props["l2_bytes"]), "CUDA device properties")
    if catalog_chip is not None and catalog_chip.on_chip.l2_bytes_per_s:
        on_chip["l2_bytes_per_s"] = Measured(catalog_chip.on_chip.l2_bytes_per_s, "catalog")
    return on_chip


def fit_gpu(
    results: list[dict[str, object]],
    *,
    props: dict[str, object],
    identity: str,
    name: str,
    library: str,
    catalog_chip: Chip | None,
) -> dict[str, object]:
    """A chip-file table from GPU calibration results; datasheet peaks from the matching catalog
    chip when there is one (measurement cannot give a datasheet peak)."""
    when = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    ach, mem_rate = _gpu_achievable(results)
    peaks, memory = _gpu_peaks_and_memory(ach, mem_rate, props, catalog_chip)
    return {
        "schema": 1,
        "name": name,
        "display_name": f"{props['name']} (calibrated)",
        "vendor": "NVIDIA",
        "kind": "gpu",
        "measured_on": identity,
        "notes": "written by `shardline calibrate` with torch.cuda",
        "peak_flops_per_s": peaks,
        "memory": memory,
        "on_chip": _gpu_on_chip(props, catalog_chip),
        "achievable": ach,
        "calibration": {
            "date": when,
            "machine": identity,
            "backend": "torch",
            "library": library,
            "device": props["name"],
            "measurements": len(results),
            "noise": calibration_noise(results),
        },
    }
