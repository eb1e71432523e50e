"""One replica's engine steps, each the plan engine's own step at the point asked for, priced
when first asked and kept (one dict per point), so that a serving model or a simulation of
thousands of steps prices each distinct point once.

- decode: one step of n sequences whose cached context is c tokens, n and c whole: the plan's
  realistic `predicted_s` of `model_workload(phase="decode", batch=n, seq_len=c)` on tp devices
  (tensor parallel), times `1 + scheduling_overhead_fraction` of the engine.
- prefill: the whole prompt of one sequence of L tokens (batch 1), L whole, priced the same way.
- memory: the weights and activations per device, and the KV-cache bytes per token of the
  replica (all its devices together).

The engine has no step at a fractional batch or context; the queueing model asks for one at the
mean running batch b and mean context c, which `decode_s` answers from whole points only: with
n = floor(b), w = b - n, a mean batch b is n sequences for a fraction 1 - w of the steps and
n + 1 for w of them, so t(b, c) = (1 - w) t(n, c) + w t(n + 1, c); likewise a mean context
c = k + v (k whole) is t(n, c) = (1 - v) t(n, k) + v t(n, k + 1), which is the engine's own
value because a decode step at a fixed batch is affine in the context (each attention layer
reads c tokens of KV per sequence; nothing else depends on c: tests check it against the engine
to 1e-9). A prompt of a fractional length (a quadrature point of a length distribution) is
priced as the whole prompt round(L).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

import numpy as np

from shardline.errors import InputError
from shardline.serving.engines import Engine

__all__ = ["StepTimes", "step_times", "cached_step_times", "price_step", "SCALE_OUT_BYTES_PER_S"]

# A device without a scale-up fabric in its chip file sends KV over one 400 Gb/s NIC (50 GB/s,
# the ConnectX-7 rate of a DGX H100 node's compute NICs).
SCALE_OUT_BYTES_PER_S = 50e9
# A prompt long enough for its prefill to be compute-bound (weights read once over 4,096 tokens)
VERIFY_REF_TOKENS = 4096


@dataclass
class StepTimes:
    """One replica's step times (seconds) and its memory. `decode_point(n, c)` and
    `prefill_point(L)` price one whole point (the plan engine, or a formula in tests); each is
    called once per distinct point."""

    chip: str
    tp: int
    decode_point: Callable[[int, int], float]
    prefill_point: Callable[[int], float]
    weights_bytes_per_device: float
    activations_bytes_per_device: float
    capacity_bytes_per_device: float
    kv_bytes_per_token: float  # the replica's (all tp devices together)
    egress_bytes_per_s: float = SCALE_OUT_BYTES_PER_S  # one device's, for the KV transfer
    _decode: dict[tuple[int, int], float] = field(default_factory=dict, repr=False)
    _prefill: dict[int, float] = field(default_factory=dict, repr=False)

    @property
    def points_priced(self) -> int:
        """Distinct decode and prefill points priced so far."""
        return len(self._decode) + len(self._prefill)

    def decode_at(self, n: int, c: int) -> float:
        """One decode step of `n` sequences at whole context `c`: the engine's, kept."""
        key = (int(n), int(c))
        if key not in self._decode:
            self._decode[key] = float(self.decode_point(*key))
        return self._decode[key]

    def prefill_at(self, tokens: int) -> float:
        """The prefill of one whole prompt of `tokens` tokens: the engine's, kept."""
        key = int(tokens)
        if key not in self._prefill:
            self._prefill[key] = float(self.prefill_point(key))
        return self._prefill[key]

    def decode_s(self, batch: Any, context: Any) -> np.ndarray:
        """One decode step at mean batch max(`batch`, 1) and mean context max(`context`, 1)
        (arrays broadcast): with n = floor(b), w = b - n, k = floor(c), v = c - k,
        t = sum over the whole points (n + i, k + j), i, j in {0, 1}, of t(n + i, k + j) x
        (w if i else 1 - w) x (v if j else 1 - v), leaving out the points of weight 0."""
        if np.ndim(batch) == 0 and np.ndim(context) == 0:
            return np.asarray(self._decode_scalar(float(batch), float(context)))
        b, c = np.broadcast_arrays(
            np.maximum(np.asarray(batch, dtype=float), 1.0),
            np.maximum(np.asarray(context, dtype=float), 1.0),
        )
        n, k = np.floor(b), np.floor(c)
        w, v = b - n, c - k
        out = np.zeros(b.shape)
        for i, wb in ((0, 1 - w), (1, w)):
            for j, wc in ((0, 1 - v), (1, v)):
                weight = wb * wc
                used = weight > 0
                if not used.any():
                    continue
                keys = np.stack([n[used] + i, k[used] + j], axis=-1).astype(np.int64)
                uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
                times = np.array([self.decode_at(int(p), int(q)) for p, q in uniq])
                out[used] += weight[used] * times[inverse.ravel()]
        return out

    def _decode_scalar(self, batch: float, context: float) -> float:
        """decode_s at one point, in plain floats (the queueing model's many scalar calls)."""
        b, c = max(batch, 1.0), max(context, 1.0)
        n, k = math.floor(b), math.floor(c)
        w, v = b - n, c - k
        t = 0.0
        for i, wb in ((0, 1 - w), (1, w)):
            for j, wc in ((0, 1 - v), (1, v)):
                if wb * wc > 0:
                    t += wb * wc * self.decode_at(n + i, k + j)
        return t

    def prefill_s(self, tokens: Any) -> np.ndarray:
        """The prefill of one prompt of round(`tokens`) tokens (at least one; arrays)."""
        whole = np.maximum(np.rint(np.asarray(tokens, dtype=float)), 1.0).astype(np.int64)
        uniq, inverse = np.unique(whole, return_inverse=True)
        times = np.array([self.prefill_at(int(x)) for x in uniq])
        return times[inverse.reshape(whole.shape)]

    def verify_floor_s(self, sequences: Any, k: int) -> Any:
        """The least time of a speculative verification step over `sequences` sequences of k + 1
        tokens each: their compute, at the per-token time of a compute-bound prefill of
        VERIFY_REF_TOKENS tokens (the same forward pass over as many tokens). Without it a step
        checking 1,025 tokens per sequence would cost what one decode step costs, past the
        chip's FLOP/s."""
        per_token_s = self.prefill_at(VERIFY_REF_TOKENS) / VERIFY_REF_TOKENS
        return np.maximum(sequences, 1.0) * (k + 1) * per_token_s

    def kv_budget_bytes(self, memory_fraction: float) -> float:
        """KV-cache bytes the replica can hold: tp x (memory_fraction x capacity - weights -
        activations) per device."""
        per_device = (
            memory_fraction * self.capacity_bytes_per_device
            - self.weights_bytes_per_device
            - self.activations_bytes_per_device
        )
        return self.tp * max(per_device, 0.0)


def price_step(spec: Any, chip: Any, tp: int, dtype: str, point: tuple[str, int, int]) -> Any:
    """The plan engine's plan of one step, `point` = (phase, batch, seq_len), on tp devices."""
    from shardline.models.template import model_workload
    from shardline.planning.api import plan

    phase, batch, seq_len = point
    work = model_workload(spec, phase=phase, batch=batch, seq_len=seq_len, dtype=dtype)
    result = plan(work, chip, tp, tp=tp, pp=1, dp=1, fsdp=1, microbatches=1, require_fit=False)
    return result.plans[0]


def step_times(spec: Any, chip: Any, tp: int, dtype: str, eng: Engine) -> StepTimes:
    """The step times of `spec` on `tp` devices of `chip` (a Chip) in `dtype` (weights and KV
    cache), with the engine's scheduling overhead; the memory from the decode step of 256
    sequences at 1,024 tokens."""
    from shardline.basics.dtypes import dtype_bits
    from shardline.models.template import model_workload
    from shardline.strategies.tp import uneven_reason
    from shardline.workload.modelspec import kv_bytes_per_token

    shape = model_workload(spec, phase="decode", batch=1, seq_len=1024, dtype=dtype)
    why = uneven_reason(shape, tp, f"--tp {tp}")  # the one tensor-parallel rule (strategies/tp.py)
    if why is not None:
        raise InputError(why)
    scale = 1.0 + eng.scheduling_overhead_fraction

    def decode(n: int, c: int) -> float:
        return float(price_step(spec, chip, tp, dtype, ("decode", n, c)).predicted_s) * scale

    def prefill(tokens: int) -> float:
        return float(price_step(spec, chip, tp, dtype, ("prefill", 1, tokens)).predicted_s) * scale

    sized = price_step(spec, chip, tp, dtype, ("decode", 256, 1024))
    memory = sized.memory
    st = StepTimes(
        chip=chip.name,
        tp=tp,
        decode_point=decode,
        prefill_point=prefill,
        weights_bytes_per_device=float(memory.weights_bytes),
        activations_bytes_per_device=float(memory.activations_bytes),
        capacity_bytes_per_device=float(chip.capacity_bytes),
        kv_bytes_per_token=kv_bytes_per_token(spec, dtype_bits(dtype) / 8),
        egress_bytes_per_s=(
            chip.interconnect.egress_bytes_per_s if chip.interconnect else SCALE_OUT_BYTES_PER_S
        ),
    )
    st._decode[(256, 1024)] = float(sized.predicted_s) * scale  # priced for the memory: kept
    return st


@lru_cache(maxsize=64)
def cached_step_times(model: str, hw: str, tp: int, dtype: str, engine_name: str) -> StepTimes:
    """`step_times` of a zoo model (or model file) on a chip by name, one per process and
    arguments, so that `serve`, its figures and the serving search share the points priced."""
    from shardline.hardware import resolve_chip
    from shardline.models import load_model
    from shardline.serving.engines import engine

    return step_times(load_model(model), resolve_chip(hw), tp, dtype, engine(engine_name))
