"""Measuring with torch: an NVIDIA GPU through CUDA, or torch's own CPU kernels.

torch is an optional extra (`pip install 'shardline[torch]'`); it is imported only inside these
functions. The same job runner serves `device="cuda"` and `device="cpu"`: on CUDA the clock is read
after `torch.cuda.synchronize()`, so kernels are timed to completion.
"""

from __future__ import annotations

from typing import Any

from shardline.calibrate.timing import Timing, time_call
from shardline.errors import InputError

__all__ = [
    "require_torch",
    "cuda_available",
    "gpu_identity",
    "gpu_properties",
    "torch_dtype",
    "run_torch_job",
    "TORCH_GPU_DTYPES",
    "TORCH_CPU_DTYPES",
    "TORCH_EXTRA",
]

TORCH_EXTRA = "pip install 'shardline[torch]'"
# fp32 is measured with TF32 off (true fp32); tf32 is fp32 storage with TF32 tensor-core math.
TORCH_GPU_DTYPES = ("bf16", "fp16", "tf32", "fp32")
TORCH_CPU_DTYPES = ("fp32", "bf16")


def require_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise InputError(f"this needs torch, which is not installed: {TORCH_EXTRA}") from None
    return torch


def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def gpu_identity() -> str:
    torch = require_torch()
    return f"gpu: {torch.cuda.get_device_name(0)}"


def gpu_properties() -> dict[str, Any]:
    """What the CUDA runtime says about device 0 (SMs, memory, L2, shared memory per SM)."""
    torch = require_torch()
    props = torch.cuda.get_device_properties(0)
    return {
        "name": str(props.name),
        "sms": int(props.multi_processor_count),
        "memory_bytes": int(props.total_memory),
        "l2_bytes": int(getattr(props, "L2_cache_size", 0) or 0) or None,
        "shared_bytes_per_sm": int(getattr(props, "shared_memory_per_multiprocessor", 0) or 0)
        or None,
        "capability": f"{props.major}.{props.minor}",
    }


def torch_dtype(name: str) -> object:
    torch = require_torch()
    table = {
        "fp32": torch.float32,
        "tf32": torch.float32,
        "bf16": torch.bfloat16,
        "fp16": torch.float16,
        "fp64": torch.float64,
    }
    if name not in table:
        raise ValueError(f"torch measures {', '.join(table)}, not {name}")
    return table[name]


def run_torch_job(job: dict[str, Any], **timing: Any) -> Timing:
    """Time one job with torch on job['device']: matmul (into a preallocated C), copy, or launch
    (an almost empty kernel: the per-launch overhead)."""
    torch = require_torch()
    device = job.get("device", "cuda")
    if device == "cuda" and not torch.cuda.is_available():
        raise InputError("no CUDA device is visible to torch")
    sync = torch.cuda.synchronize if device == "cuda" else None
    generator = torch.Generator(device=device).manual_seed(0)
    kind = job["kind"]
    if kind == "matmul":
        name = job["dtype"]
        if device == "cuda":
            torch.backends.cuda.matmul.allow_tf32 = name == "tf32"
        dt = torch_dtype(name)
        m, k, n = int(job["m"]), int(job["k"]), int(job["n"])
        a = torch.randn((m, k), generator=generator, device=device, dtype=torch.float32).to(dt)
        b = torch.randn((k, n), generator=generator, device=device, dtype=torch.float32).to(dt)
        c = torch.empty((m, n), device=device, dtype=dt)
        return time_call(lambda: torch.matmul(a, b, out=c), sync=sync, **timing)
    if kind == "copy":
        count = max(1, int(job["bytes"]) // 4)
        src = torch.randn(count, generator=generator, device=device)
        dst = torch.empty_like(src)
        return time_call(lambda: dst.copy_(src), sync=sync, **timing)
    if kind == "launch":
        tiny = torch.zeros(1, device=device)
        return time_call(lambda: tiny.add_(1.0), sync=sync, **timing)
    raise ValueError(f"unknown torch job kind {kind!r}")
