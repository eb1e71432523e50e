"""`shardline validate`: measure a fixed suite of multiplies on this machine and compare the
measured times with `predicted_s` and with the plain roofline (`t_lower_s`).

The suite covers large and small squares, skinny M (1..256), odd sizes and a long K, in fp32 and a
second dtype (a reduced one where the backend has it: bf16 on a GPU or with torch on a CPU; numpy
has no BLAS-accelerated reduced dtype, so the numpy suite's second dtype is fp64). Each case is
measured properly (warm-up, repeated samples, median) in a worker process with the thread count
the chip file was calibrated with. Errors are `|predicted - measured| / measured`.

Beside the errors, the summary's `noise` says how far the measurements can be trusted: the spread
of this run's repeats, the calibration's, and the drift of the calibration's reference multiply
(measured again here, interleaved with the suite). A verdict on a noisy or changed machine is
marked inconclusive.
"""

from __future__ import annotations

import statistics
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from shardline.calibrate import current_identity, detect_device, run_measured
from shardline.calibrate.chipfile import atomic_write
from shardline.calibrate.gpu import require_torch
from shardline.calibrate.timing import (
    NOISE_LIMIT,
    VALIDATE_BUDGET_S,
    noise_summary,
    timing_settings,
)
from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip

__all__ = [
    "ValidationResult",
    "suite",
    "validate",
    "calibration_info",
    "check_machine",
    "summarize",
    "validation_noise",
    "CSV_COLUMNS",
]

# (group, M, K, N)
_CPU_SUITE: tuple[tuple[str, int, int, int], ...] = (
    ("large square", 1024, 1024, 1024),
    ("large square", 2048, 2048, 2048),
    ("small square", 16, 16, 16),
    ("small square", 64, 64, 64),
    ("small square", 128, 128, 128),
    ("small square", 256, 256, 256),
    ("skinny M", 1, 2048, 2048),
    ("skinny M", 4, 2048, 2048),
    ("skinny M", 16, 2048, 2048),
    ("skinny M", 64, 2048, 2048),
    ("skinny M", 256, 2048, 2048),
    ("odd", 1000, 1000, 1000),
    ("odd", 1023, 1023, 1023),
    ("odd", 777, 999, 1531),
    ("odd", 1, 3001, 2999),
    ("K-heavy", 128, 16384, 128),
    ("K-heavy", 256, 65536, 256),
)
_GPU_SUITE: tuple[tuple[str, int, int, int], ...] = (
    ("large square", 4096, 4096, 4096),
    ("large square", 8192, 8192, 8192),
    ("large square", 16384, 16384, 16384),
    ("small square", 256, 256, 256),
    ("small square", 1024, 1024, 1024),
    ("small square", 2048, 2048, 2048),
    ("skinny M", 1, 8192, 8192),
    ("skinny M", 16, 8192, 8192),
    ("skinny M", 64, 8192, 8192),
    ("skinny M", 256, 8192, 8192),
    ("odd", 8191, 8191, 8191),
    ("odd", 1000, 1000, 1000),
    ("odd", 777, 999, 1531),
    ("odd", 6144, 4095, 6144),
    ("K-heavy", 256, 65536, 256),
    ("K-heavy", 1024, 131072, 1024),
)
_QUICK_SUITE: tuple[tuple[str, int, int, int], ...] = (
    ("small square", 16, 16, 16),
    ("small square", 96, 96, 96),
    ("skinny M", 1, 512, 512),
    ("skinny M", 8, 384, 384),
    ("odd", 100, 300, 200),
    ("K-heavy", 32, 4096, 32),
)
CSV_COLUMNS = (
    "group",
    "m",
    "k",
    "n",
    "dtype",
    "measured_s",
    "predicted_s",
    "roofline_s",
    "abs_err_predicted",
    "abs_err_roofline",
    "predicted_bound",
)


def suite(kind: str, dtypes: tuple[str, ...], quick: bool = False) -> list[dict[str, object]]:
    shapes = _QUICK_SUITE if quick else (_GPU_SUITE if kind == "gpu" else _CPU_SUITE)
    return [
        {"group": g, "m": m, "k": k, "n": n, "dtype": d} for d in dtypes for g, m, k, n in shapes
    ]


def calibration_info(chip: Chip) -> dict[str, Any]:
    """The [calibration] table of a calibrated chip file ({} for catalog chips)."""
    if not chip.path or not chip.measured_on:
        return {}
    try:
        with open(chip.path, "rb") as handle:
            data = tomllib.load(handle)
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    info = data.get("calibration", {})
    return info if isinstance(info, dict) else {}


def check_machine(chip: Chip, device: str, identity: str) -> None:
    """A calibration file is only valid on the machine kind it was measured on."""
    if chip.kind == "cpu" and device != "cpu":
        raise InputError(
            f"{chip.path or chip.name} describes a CPU, but --device {device} "
            "measures the GPU; leave out --device (or pass --device cpu), or validate "
            "a GPU chip file (`shardline calibrate --device cuda --out gpu.toml`)"
        )
    if chip.kind in ("gpu", "tpu") and device != "cuda":
        raise InputError(
            f"{chip.name} is a {chip.kind}, and this machine measures on '{identity}'"
            "; validate a chip file calibrated here (`shardline calibrate --out "
            "host.toml`, then `--hw host.toml`)"
        )
    if chip.kind == "tpu":
        raise InputError(f"{chip.name} is a TPU; validate measures with numpy or torch.cuda only")
    if chip.measured_on is not None and chip.measured_on != identity:
        raise InputError(
            f"{chip.path or chip.name} was calibrated on '{chip.measured_on}', but "
            f"this machine is '{identity}'; run `shardline calibrate` here first"
        )


@dataclass(frozen=True)
class ValidationResult:
    hardware: str
    measured_on: str
    backend: str
    threads: int | None
    cases: list[dict[str, object]]
    summary: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, object]:
        from shardline.basics.serialize import jsonable

        return {
            "hardware": self.hardware,
            "measured_on": self.measured_on,
            "backend": self.backend,
            "threads": self.threads,
            "cases": jsonable(self.cases),
            "summary": jsonable(self.summary),
        }


def summarize(cases: list[dict[str, Any]]) -> dict[str, object]:
    """Median and worst absolute error (fractions) of the prediction and of the roofline."""
    pred = [c["abs_err_predicted"] for c in cases]
    roof = [c["abs_err_roofline"] for c in cases]
    median_pred, median_roof = statistics.median(pred), statistics.median(roof)
    return {
        "cases": len(cases),
        "median_abs_err_predicted": median_pred,
        "median_abs_err_roofline": median_roof,
        "max_abs_err_predicted": max(pred),
        "max_abs_err_roofline": max(roof),
        "predicted_within_10_percent": sum(e <= 0.10 for e in pred),
        "target_met": bool(median_pred <= 0.10 and median_pred <= median_roof / 2),
    }


def _predict(chip: Chip, cases: list[dict[str, object]]) -> dict[str, object]:
    from shardline.ops.predict import with_prediction
    from shardline.ops.roofline import matmul

    m = np.array([c["m"] for c in cases], dtype=np.float64)
    k = np.array([c["k"] for c in cases], dtype=np.float64)
    n = np.array([c["n"] for c in cases], dtype=np.float64)
    dtype = np.array([c["dtype"] for c in cases])
    result = with_prediction(matmul(m, k, n, hw=chip, dtype=dtype))
    return {
        "predicted_s": np.asarray(result.predicted_s),
        "roofline_s": np.asarray(result.t_lower_s),
        "predicted_bound": np.asarray(result.predicted_bound),
    }


def validate(
    hw: str | Chip,
    *,
    device: str = "auto",
    quick: bool = False,
    repeats: int | None = None,
    progress: bool | None = None,
    threads: int | None = None,
    partial: Path | None = None,
) -> ValidationResult:
    """Measure the suite here and compare with the chip's predictions. A measurement that fails
    midway keeps the finished cases in `partial` (a CSV) and raises InputError."""
    chip = resolve_chip(hw)
    if device == "auto" and chip.kind == "cpu":
        device = "cpu"  # a CPU chip file is measured on the CPU, even where torch sees a GPU
    device = detect_device(device)
    identity = current_identity(device)
    check_machine(chip, device, identity)
    info = calibration_info(chip)
    backend, run_device, wanted = _backend(device, info)
    dtypes = tuple(d for d in wanted if d in chip.peak_flops_per_s)
    if not dtypes:
        raise InputError(
            f"{chip.name} has none of the dtypes the suite measures ({', '.join(wanted)})"
        )
    if threads is None and device == "cpu":
        threads = int(info.get("threads", 1))
    cases = suite(chip.kind if device == "cuda" else "cpu", dtypes, quick)
    reference = _reference(info, dtypes)
    base = {"backend": backend, "device": run_device, "kind": "matmul"}
    base |= timing_settings(quick, repeats, VALIDATE_BUDGET_S)
    shapes = cases + ([reference] if reference else [])
    jobs = [{**base, **{key: c[key] for key in ("m", "k", "n", "dtype")}} for c in shapes]
    measured = run_measured(
        jobs,
        threads=threads,
        label="validate",
        progress=progress,
        partial=partial,
        not_written="no CSV or plot was written",
    )
    rows = _rows(cases, measured[: len(cases)], _predict(chip, cases))
    summary = summarize(rows)
    summary["noise"] = validation_noise(measured, info, reference)
    return ValidationResult(
        hardware=chip.name,
        measured_on=identity,
        backend=backend,
        threads=threads,
        cases=rows,
        summary=summary,
    )


def _reference(info: dict[str, Any], dtypes: tuple[str, ...]) -> dict[str, Any] | None:
    """The reference multiply the calibration recorded (measured again, to see the drift)."""
    ref = info.get("noise", {}).get("reference") if isinstance(info.get("noise"), dict) else None
    if not isinstance(ref, dict) or ref.get("dtype") not in dtypes:
        return None
    try:
        shape = {key: int(ref[key]) for key in ("m", "k", "n")}
        seconds = float(ref["seconds"])
    except (KeyError, TypeError, ValueError):
        return None
    return {**shape, "dtype": ref["dtype"], "seconds": seconds} if seconds > 0 else None


def validation_noise(
    measured: list[dict[str, Any]], info: dict[str, object], reference: dict[str, Any] | None
) -> dict[str, object]:
    """The noise beside the verdict: this run's (`noise_summary` of its measurements), the
    calibration's (its file's `[calibration.noise]`), and the drift of the reference multiply
    since the calibration (measured / recorded - 1). The verdict is conclusive when neither run
    was noisy and the reference moved by no more than the noise limit."""
    noise = noise_summary(measured)
    table = info.get("noise")
    recorded: dict[str, object] = table if isinstance(table, dict) else {}
    noise["calibration_repeat_spread"] = recorded.get("repeat_spread")
    noise["calibration_noisy"] = bool(recorded.get("noisy", False))
    drift = None
    if reference is not None:
        drift = float(measured[-1]["seconds"]) / reference["seconds"] - 1.0
    noise["reference_drift"] = drift
    reasons = []
    if noise["noisy"]:
        reasons.append(f"this run's repeats spread by {noise['repeat_spread']:.1%}")
    if noise["calibration_noisy"]:
        reasons.append(f"the calibration's spread by {recorded.get('repeat_spread', 0):.1%}")
    if drift is not None and abs(drift) > NOISE_LIMIT:
        reasons.append(f"the reference multiply runs {drift:+.1%} against the calibration")
    noise["conclusive"] = not reasons
    if reasons:
        noise["warning"] = (
            "; ".join(reasons) + f" (limit {NOISE_LIMIT:.0%}): the machine was loaded or has "
            "changed, so the errors measure that as much as the model; rerun calibrate and "
            "validate on an idle machine"
        )
    return noise


def _backend(device: str, info: dict[str, object]) -> tuple[str, str, tuple[str, ...]]:
    """(library, device it runs on, dtypes the suite wants) for `device` ("cuda" or "cpu")."""
    if device == "cuda":
        return "torch", "cuda", ("bf16", "fp32")
    backend = str(info.get("backend", "numpy"))
    if backend == "torch":
        require_torch()
        return backend, "cpu", ("fp32", "bf16")
    return backend, "cpu", ("fp32", "fp64")


def _rows(
    cases: list[dict[str, object]], measured: list[dict[str, Any]], model: dict[str, Any]
) -> list[dict[str, object]]:
    """Each case with its measured, predicted and roofline times and the two errors."""
    rows = []
    for i, (case, result) in enumerate(zip(cases, measured, strict=True)):
        seconds = float(result["seconds"])
        predicted = float(model["predicted_s"][i])
        roofline = float(model["roofline_s"][i])
        rows.append(
            {
                **case,
                "measured_s": seconds,
                "predicted_s": predicted,
                "roofline_s": roofline,
                "abs_err_predicted": abs(predicted - seconds) / seconds,
                "abs_err_roofline": abs(roofline - seconds) / seconds,
                "predicted_bound": str(model["predicted_bound"][i]),
            }
        )
    return rows


def write_csv(path: Path, result: ValidationResult) -> None:
    import csv

    from shardline.io.safe_text import csv_safe

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="", encoding="utf-8") as handle:
            writer = csv.DictWriter(handle, fieldnames=list(CSV_COLUMNS), extrasaction="ignore")
            writer.writeheader()
            writer.writerows({k: csv_safe(v) for k, v in row.items()} for row in result.cases)

    atomic_write(path, write)
