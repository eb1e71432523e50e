"""`shardline calibrate`: measure this machine and write a chip file that every command takes.

- CPU (`cpu.py`): numpy matmuls over sizes and dtypes, streaming reads, copies and triads, the
  per-call overhead; the BLAS thread pool pinned (`--threads`, default 1) in a worker process.
- NVIDIA GPU (`gpu.py`, torch.cuda): matmuls per dtype, unaligned K, copies, launch overhead.
- Collectives (`collectives.py`, measured by `collectives_run.py` with torch.distributed):
  all-gather, reduce-scatter, all-reduce and all-to-all from 8 B to 1 GiB with gloo (several local
  processes) or NCCL, fitted to alpha-beta with a size-dependent bus efficiency, the latency floor
  and, over several nodes, the network between them.

`fit.py` turns measurements into the chip table; `chipfile.py` writes it atomically. A measurement
that fails midway keeps what was measured in `<out>.partial.csv` and writes no chip file.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardline.calibrate import cpu, gpu
from shardline.calibrate.chipfile import (
    check_output,
    partial_path,
    write_chip_file,
    write_partial_csv,
)
from shardline.calibrate.collectives import calibrate_collectives
from shardline.calibrate.fit import CpuSetup, cpu_plan, fit_cpu, fit_gpu, gpu_plan
from shardline.calibrate.runner import MeasurementFailed, ProgressBar, run_jobs
from shardline.errors import InputError
from shardline.hardware import Chip, list_chips

__all__ = [
    "CalibrationOptions",
    "CalibrationResult",
    "calibrate",
    "catalog_match",
    "current_identity",
    "detect_device",
    "run_measured",
]


@dataclass(frozen=True)
class CalibrationOptions:
    """What `calibrate` measures and how (the `shardline calibrate` flags)."""

    device: str = "auto"  # auto, cpu or cuda
    backend: str | None = None  # CPU: numpy (default) or torch
    threads: int = 1  # BLAS threads on a CPU
    quick: bool = False  # fewer sizes and repeats
    repeats: int | None = None  # samples per measurement
    name: str | None = None  # the chip's name in the file
    collectives: bool = False  # also measure all-gather, reduce-scatter, all-reduce
    processes: int = 4  # local processes for the collectives
    processes_per_node: int | None = None  # local processes per fake node (None: one node)


@dataclass(frozen=True)
class CalibrationResult:
    path: str
    chip: dict[str, Any]
    measurements: list[dict[str, object]]


def detect_device(device: str) -> str:
    """'cpu' or 'cuda': `auto` takes CUDA when torch sees a GPU."""
    if device not in ("auto", "cpu", "cuda"):
        raise InputError(f"--device must be auto, cpu or cuda, got {device!r}")
    if device == "auto":
        return "cuda" if gpu.cuda_available() else "cpu"
    if device == "cuda":
        gpu.require_torch()
        if not gpu.cuda_available():
            raise InputError("--device cuda: torch sees no CUDA device on this machine")
    return device


def current_identity(device: str) -> str:
    if device == "cuda":
        return gpu.gpu_identity()
    return cpu.machine_identity()


def run_measured(
    jobs: list[dict[str, object]],
    *,
    threads: int | None,
    label: str,
    progress: bool | None,
    partial: Path | None,
    not_written: str = "no chip file was written",
) -> list[dict[str, object]]:
    """Run jobs with a progress bar; on failure keep the finished rows in `partial` and raise."""
    bar = ProgressBar(len(jobs), label, enabled=progress)
    try:
        return run_jobs(jobs, threads=threads, progress=bar.update)
    except MeasurementFailed as failure:
        kept = ""
        if partial is not None and failure.done:
            kept_in = write_partial_csv(partial, failure.done)
            kept = f"; the {len(failure.done)} finished measurements are in {kept_in}"
        raise InputError(f"measurement failed: {failure}{kept}; {not_written}") from None
    finally:
        bar.close()


def catalog_match(device_name: str) -> Chip | None:
    """The catalog GPU a CUDA device name refers to: its first name token must appear in the
    device name ("h100" in "NVIDIA H100 80GB HBM3"); ties go to more matching tokens of its name
    or an alias ("a100-80gb" for "NVIDIA A100-SXM4-80GB")."""
    words = set(re.findall(r"[a-z0-9]+", device_name.lower()))
    best: tuple[int, Chip] | None = None
    for chip in list_chips():
        if chip.kind != "gpu" or chip.name.split("-")[0] not in words:
            continue
        # the name or an alias ("h100-80gb" for "NVIDIA H100 80GB HBM3" over "h100-pcie")
        score = max(sum(t in words for t in n.split("-")) for n in (chip.name, *chip.aliases))
        if best is None or score > best[0]:
            best = (score, chip)
    return None if best is None else best[1]


def _measure_gpu(
    options: CalibrationOptions, progress: bool | None, partial: Path
) -> tuple[dict[str, Any], list[dict[str, object]]]:
    """The chip table and the measurements of a CUDA GPU."""
    torch = gpu.require_torch()
    props = gpu.gpu_properties()
    major = int(props["capability"].split(".")[0])
    dtypes = tuple(d for d in gpu.TORCH_GPU_DTYPES if major >= 8 or d in ("fp16", "fp32"))
    jobs = gpu_plan(dtypes, quick=options.quick, repeats=options.repeats)
    results = run_measured(
        jobs, threads=None, label="calibrate gpu", progress=progress, partial=partial
    )
    chip = fit_gpu(
        results,
        props=props,
        identity=current_identity("cuda"),
        name=options.name or "host-gpu",
        library=f"torch {torch.__version__}",
        catalog_chip=catalog_match(props["name"]),
    )
    return chip, results


def _measure_cpu(
    options: CalibrationOptions, progress: bool | None, partial: Path
) -> tuple[dict[str, Any], list[dict[str, object]]]:
    """The chip table and the measurements of this CPU (numpy's BLAS or torch's CPU kernels)."""
    backend = options.backend or "numpy"
    if backend == "torch":
        torch = gpu.require_torch()
        dtypes, library = gpu.TORCH_CPU_DTYPES, f"torch {torch.__version__} (CPU)"
    elif backend == "numpy":
        dtypes, library = cpu.NUMPY_DTYPES, cpu.blas_description()
    else:
        raise InputError(f"--backend must be numpy or torch, got {backend!r}")
    llc = cpu.llc_bytes()
    jobs = cpu_plan(dtypes, llc, backend=backend, quick=options.quick, repeats=options.repeats)
    results = run_measured(
        jobs, threads=options.threads, label="calibrate cpu", progress=progress, partial=partial
    )
    setup = CpuSetup(
        name=options.name or "host",
        identity=current_identity("cpu"),
        model=cpu.cpu_model_name(),
        llc_bytes=llc,
        mem_total=cpu.mem_total_bytes(),
        library=library,
        threads=options.threads,
        backend=backend,
    )
    return fit_cpu(results, setup), results


def calibrate(
    out: str | Path,
    options: CalibrationOptions | None = None,
    *,
    progress: bool | None = None,
    force: bool = False,
    **settings: Any,
) -> CalibrationResult:
    """Measure this machine and write the chip file `out` (atomically, or not at all).

    `options` (or its fields as keywords: `device=`, `quick=`, `threads=`, ...; a keyword wins)
    says what to measure; an unknown keyword is a TypeError that names it."""
    options = dataclasses.replace(options or CalibrationOptions(), **settings)
    path = check_output(out, force=force, suffixes=(".toml",))
    if options.threads < 1:
        raise InputError(f"--threads must be at least 1, got {options.threads}")
    device = detect_device(options.device)
    partial = partial_path(path)
    measure = _measure_gpu if device == "cuda" else _measure_cpu
    chip, results = measure(options, progress, partial)
    if options.collectives:
        fitted, rows = calibrate_collectives(
            processes=options.processes,
            device=device,
            quick=options.quick,
            progress=progress,
            partial=partial,
            done=results,
            processes_per_node=options.processes_per_node,
        )
        results = results + rows
        chip["interconnect"] = fitted["interconnect"]
        chip["achievable"].update(fitted["achievable"])
    header = (
        "shardline chip file written by `shardline calibrate`: measured on this machine.\n"
        "Every number carries its source; see docs/prediction.md for the model."
    )
    write_chip_file(path, chip, header)  # (a partial CSV beside it is left: this run wrote none)
    return CalibrationResult(str(path), chip, results)
