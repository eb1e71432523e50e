"""`shardline calibrate`: measure this machine and write a chip file that every command takes.

- CPU (`cpu.py`): numpy matmuls over sizes and dtypes, streaming reads, copies and triads, the
  per-call overhead; the BLAS thread pool pinned (`--threads`, default 1) in a worker process.
- NVIDIA GPU (`gpu.py`, torch.cuda): matmuls per dtype, unaligned K, copies, launch overhead.
- Collectives (`collectives.py`, torch.distributed): all-gather, reduce-scatter and all-reduce over
  message sizes with gloo (several local processes) or NCCL, fitted to alpha-beta with a
  size-dependent bus efficiency.

`fit.py` turns measurements into the chip table; `chipfile.py` writes it atomically. A measurement
that fails midway keeps what was measured in `<out>.partial.csv` and writes no chip file.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardline.calibrate.chipfile import partial_path, write_chip_file, write_partial_csv
from shardline.calibrate.runner import MeasurementFailed, ProgressBar, run_jobs
from shardline.errors import InputError

__all__ = [
    "CalibrationResult",
    "calibrate",
    "catalog_match",
    "current_identity",
    "detect_device",
    "run_measured",
]


@dataclass(frozen=True)
class CalibrationResult:
    path: str
    chip: dict[str, Any]
    measurements: list[dict[str, Any]]


def detect_device(device: str) -> str:
    """'cpu' or 'cuda': `auto` takes CUDA when torch sees a GPU."""
    if device not in ("auto", "cpu", "cuda"):
        raise InputError(f"--device must be auto, cpu or cuda, got {device!r}")
    if device == "auto":
        from shardline.calibrate.gpu import cuda_available

        return "cuda" if cuda_available() else "cpu"
    if device == "cuda":
        from shardline.calibrate.gpu import cuda_available, require_torch

        require_torch()
        if not cuda_available():
            raise InputError("--device cuda: torch sees no CUDA device on this machine")
    return device


def current_identity(device: str) -> str:
    if device == "cuda":
        from shardline.calibrate.gpu import gpu_identity

        return gpu_identity()
    from shardline.calibrate.cpu import machine_identity

    return machine_identity()


def run_measured(
    jobs: list[dict[str, Any]],
    *,
    threads: int | None,
    label: str,
    progress: bool | None,
    partial: Path | None,
    not_written: str = "no chip file was written",
) -> list[dict[str, Any]]:
    """Run jobs with a progress bar; on failure keep the finished rows in `partial` and raise."""
    bar = ProgressBar(len(jobs), label, enabled=progress)
    try:
        return run_jobs(jobs, threads=threads, progress=bar.update)
    except MeasurementFailed as failure:
        kept = ""
        if partial is not None and failure.done:
            write_partial_csv(partial, failure.done)
            kept = f"; the {len(failure.done)} finished measurements are in {partial}"
        raise InputError(f"measurement failed: {failure}{kept}; {not_written}") from None
    finally:
        bar.close()


def catalog_match(device_name: str) -> Any | None:
    """The catalog GPU a CUDA device name refers to: its first name token must appear in the
    device name ("h100" in "NVIDIA H100 80GB HBM3"); ties go to more matching tokens
    ("a100-80gb" for "NVIDIA A100-SXM4-80GB")."""
    from shardline.hardware import list_chips

    words = set(re.findall(r"[a-z0-9]+", device_name.lower()))
    best: tuple[int, Any] | None = None
    for chip in list_chips():
        tokens = chip.name.split("-")
        if chip.kind != "gpu" or tokens[0] not in words:
            continue
        score = sum(token in words for token in tokens)
        if best is None or score > best[0]:
            best = (score, chip)
    return None if best is None else best[1]


def calibrate(
    out: str | Path,
    *,
    device: str = "auto",
    backend: str | None = None,
    threads: int = 1,
    quick: bool = False,
    repeats: int | None = None,
    name: str | None = None,
    progress: bool | None = None,
    collectives: bool = False,
    processes: int = 4,
    force: bool = False,
    on_progress: Callable[[str], None] | None = None,
) -> CalibrationResult:
    """Measure this machine and write the chip file `out` (atomically, or not at all)."""
    from shardline.calibrate.chipfile import check_output

    path = check_output(out, force=force, suffixes=(".toml",))
    if threads < 1:
        raise InputError(f"--threads must be at least 1, got {threads}")
    device = detect_device(device)
    partial = partial_path(path)
    if device == "cuda":
        from shardline.calibrate import gpu
        from shardline.calibrate.fit import fit_gpu, gpu_plan

        torch = gpu.require_torch()
        props = gpu.gpu_properties()
        major = int(props["capability"].split(".")[0])
        dtypes = tuple(d for d in gpu.TORCH_GPU_DTYPES if major >= 8 or d in ("fp16", "fp32"))
        jobs = gpu_plan(dtypes, quick=quick, repeats=repeats)
        results = run_measured(
            jobs, threads=None, label="calibrate gpu", progress=progress, partial=partial
        )
        chip = fit_gpu(
            results,
            props=props,
            identity=current_identity("cuda"),
            name=name or "host-gpu",
            library=f"torch {torch.__version__}",
            catalog_chip=catalog_match(props["name"]),
        )
    else:
        from shardline.calibrate import cpu
        from shardline.calibrate.fit import cpu_plan, fit_cpu

        backend = backend or "numpy"
        if backend == "torch":
            from shardline.calibrate.gpu import TORCH_CPU_DTYPES, require_torch

            torch = require_torch()
            dtypes, library = TORCH_CPU_DTYPES, f"torch {torch.__version__} (CPU)"
        elif backend == "numpy":
            dtypes, library = cpu.NUMPY_DTYPES, cpu.blas_description()
        else:
            raise InputError(f"--backend must be numpy or torch, got {backend!r}")
        llc = cpu.llc_bytes()
        jobs = cpu_plan(dtypes, llc, backend=backend, quick=quick, repeats=repeats)
        results = run_measured(
            jobs, threads=threads, label="calibrate cpu", progress=progress, partial=partial
        )
        chip = fit_cpu(
            results,
            threads=threads,
            backend=backend,
            name=name or "host",
            identity=current_identity("cpu"),
            model=cpu.cpu_model_name(),
            llc_bytes=llc,
            mem_total=cpu.mem_total_bytes(),
            library=library,
        )
    if collectives:
        from shardline.calibrate.collectives import calibrate_collectives

        fitted, rows = calibrate_collectives(
            processes=processes,
            device=device,
            quick=quick,
            progress=progress,
            partial=partial,
            done=results,
        )
        results = results + rows
        chip["interconnect"] = fitted["interconnect"]
        chip["achievable"].update(fitted["achievable"])
    header = (
        "shardline chip file written by `shardline calibrate`: measured on this machine.\n"
        "Every number carries its source; see docs/prediction.md for the model."
    )
    write_chip_file(path, chip, header)
    partial.unlink(missing_ok=True)
    return CalibrationResult(str(path), chip, results)
