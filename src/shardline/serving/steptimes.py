"""One replica's engine-step times on a small grid, priced once by the plan engine and then
interpolated (numpy), so that a serving model or a simulation of thousands of steps never calls
the plan engine per step.

- decode: one step of `b` sequences whose mean cached context is `c` tokens, on a grid of b x c.
  The time of a step is close to `a + k1 b + k2 b c` (weights read once, per-sequence work, KV
  read), which bilinear interpolation reproduces exactly; outside the grid the last segment is
  extended.
- prefill: the whole prompt of one sequence of L tokens (batch 1), on a grid of L.
- memory: the weights and activations per device, and the KV-cache bytes per token of the
  replica (all its devices together).

Each time is the plan's realistic `predicted_s` (achievable HBM bandwidth and GEMM rates of the
chip, tensor-parallel all-reduces) times `1 + scheduling_overhead_fraction` of the engine.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from shardline.errors import InputError
from shardline.serving.engines import Engine

__all__ = ["StepTimes", "step_times", "interp_linear"]

BATCH_GRID = (1, 4, 16, 64, 256, 1024, 4096)
CONTEXT_GRID = (128, 1024, 8192, 65536)
PREFILL_GRID = (16, 128, 1024, 8192, 32768, 131072)
# A device without a scale-up fabric in its chip file sends KV over one 400 Gb/s NIC (50 GB/s,
# the ConnectX-7 rate of a DGX H100 node's compute NICs).
SCALE_OUT_BYTES_PER_S = 50e9


def interp_linear(x: Any, xs: np.ndarray, ys: np.ndarray) -> np.ndarray:
    """Piecewise-linear interpolation along the last axis of `ys` at `x` (any shape), with the
    first and last segments extended beyond the grid (np.interp would clamp)."""
    x = np.asarray(x, dtype=float)
    i = np.clip(np.searchsorted(xs, x, side="right") - 1, 0, len(xs) - 2)
    x0, x1 = xs[i], xs[i + 1]
    w = (x - x0) / (x1 - x0)
    return ys[..., i] * (1 - w) + ys[..., i + 1] * w


@dataclass(frozen=True)
class StepTimes:
    """Grids of one replica's step times (seconds) and its memory."""

    chip: str
    tp: int
    batches: np.ndarray
    contexts: np.ndarray
    decode_grid_s: np.ndarray  # [batch, context]
    prefill_lengths: np.ndarray
    prefill_grid_s: np.ndarray
    roofline_decode_grid_s: np.ndarray  # the lower bound, for the achieved-bandwidth figure
    weights_bytes_per_device: float
    activations_bytes_per_device: float
    capacity_bytes_per_device: float
    kv_bytes_per_token: float  # the replica's (all tp devices together)
    egress_bytes_per_s: float = SCALE_OUT_BYTES_PER_S  # one device's, for the KV transfer

    def decode_s(self, batch: Any, context: Any) -> np.ndarray:
        """One decode step of `batch` sequences at mean context `context` (broadcast arrays)."""
        b, c = np.broadcast_arrays(np.asarray(batch, float), np.asarray(context, float))
        along_c = interp_linear(c, self.contexts, self.decode_grid_s)  # [batch grid, ...]
        i = np.clip(np.searchsorted(self.batches, b, side="right") - 1, 0, len(self.batches) - 2)
        b0, b1 = self.batches[i], self.batches[i + 1]
        w = (b - b0) / (b1 - b0)
        lo = np.take_along_axis(along_c, i[None, ...], 0)[0] if along_c.ndim > 1 else along_c[i]
        hi = (
            np.take_along_axis(along_c, (i + 1)[None, ...], 0)[0]
            if along_c.ndim > 1
            else along_c[i + 1]
        )
        return np.asarray(lo * (1 - w) + hi * w)

    def prefill_s(self, tokens: Any) -> np.ndarray:
        """The prefill of one prompt of `tokens` tokens."""
        return interp_linear(tokens, self.prefill_lengths, self.prefill_grid_s)

    def kv_budget_bytes(self, memory_fraction: float) -> float:
        """KV-cache bytes the replica can hold: tp x (memory_fraction x capacity - weights -
        activations) per device."""
        per_device = (
            memory_fraction * self.capacity_bytes_per_device
            - self.weights_bytes_per_device
            - self.activations_bytes_per_device
        )
        return self.tp * max(per_device, 0.0)


def _workload(spec: Any, phase: str, batch: int, seq_len: int, dtype: str) -> Any:
    from shardline.models.template import model_workload

    return model_workload(spec, phase=phase, batch=batch, seq_len=seq_len, dtype=dtype)


def _price(spec: Any, chip: Any, tp: int, dtype: str, point: tuple[str, int, int]) -> Any:
    from shardline.plan import plan

    phase, batch, seq_len = point
    work = _workload(spec, phase, batch, seq_len, dtype)
    result = plan(work, chip, tp, tp=tp, pp=1, dp=1, fsdp=1, microbatches=1, require_fit=False)
    return result.plans[0]


def step_times(spec: Any, chip: Any, tp: int, dtype: str, eng: Engine) -> StepTimes:
    """Price the grids for `spec` on `tp` devices of `chip` (a Chip) in `dtype` (weights and KV
    cache), with the engine's scheduling overhead."""
    from shardline.models.spec import kv_bytes_per_token

    if spec.heads % tp or spec.kv_heads % tp and tp % spec.kv_heads:
        raise InputError(f"--tp {tp} does not divide the {spec.heads} heads of {spec.name}")
    scale = 1.0 + eng.scheduling_overhead_fraction
    decode = np.zeros((len(BATCH_GRID), len(CONTEXT_GRID)))
    roof = np.zeros_like(decode)
    for i, b in enumerate(BATCH_GRID):
        for j, c in enumerate(CONTEXT_GRID):
            p = _price(spec, chip, tp, dtype, ("decode", b, c))
            decode[i, j] = p.predicted_s * scale
            roof[i, j] = p.latency_s
    prefill = np.array(
        [_price(spec, chip, tp, dtype, ("prefill", 1, n)).predicted_s for n in PREFILL_GRID]
    )
    small = _price(spec, chip, tp, dtype, ("decode", 256, 1024)).memory
    from shardline.dtypes import dtype_bits

    return StepTimes(
        chip=chip.name,
        tp=tp,
        batches=np.array(BATCH_GRID, float),
        contexts=np.array(CONTEXT_GRID, float),
        decode_grid_s=decode,
        prefill_lengths=np.array(PREFILL_GRID, float),
        prefill_grid_s=prefill * scale,
        roofline_decode_grid_s=roof,
        weights_bytes_per_device=float(small.weights_bytes),
        activations_bytes_per_device=float(small.activations_bytes),
        capacity_bytes_per_device=float(chip.capacity_bytes),
        kv_bytes_per_token=kv_bytes_per_token(spec, dtype_bits(dtype) / 8),
        egress_bytes_per_s=(
            chip.interconnect.egress_bytes_per_s if chip.interconnect else SCALE_OUT_BYTES_PER_S
        ),
    )
