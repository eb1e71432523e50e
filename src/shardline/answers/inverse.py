"""Inverse questions: the number a forward formula takes as input, from its output.

- the clock from a vector rate: `rate = cores x lanes per core x FLOPs per lane per cycle x f`,
  so `f = rate / (cores x lanes x per_cycle)` (How to Scale Your Model, TPU chapter appendix: a
  v5e TensorCore's VPU is 8 x 128 ALUs x 4 instructions per cycle = 4096 lanes; GPU chapter: an
  H100 SM has 128 fp32 CUDA cores, an FMA two FLOPs);
- the utilization from accelerator-hours: `U = FLOPs / (hours x 3600 x peak)` (the model FLOP
  utilization when FLOPs are the model's, e.g. 6 N D for training N parameters on D tokens:
  Kaplan et al. 2020, "Scaling Laws for Neural Language Models", C = 6 N D).

The batch that reaches a target MFU is `shardline.planning.capacity.batch_for_mfu`.
"""

from __future__ import annotations

from dataclasses import dataclass

from shardline.basics.serialize import json_object
from shardline.basics.values import JSONDict, Scalar
from shardline.errors import InputError
from shardline.hardware import Chip

__all__ = ["ClockAnswer", "UtilizationAnswer", "clock_from_vector_rate", "utilization"]

SECONDS_PER_HOUR = 3600.0
# FLOPs one vector lane does per cycle by chip kind: a GPU's FMA counts two (NVIDIA's FP32
# TFLOPS), a TPU VPU ALU one (How to Scale Your Model's count)
PER_CYCLE_BY_KIND = {"gpu": 2.0, "tpu": 1.0}


class _Answer:
    def to_dict(self) -> JSONDict:
        return json_object(self)


@dataclass(frozen=True)
class ClockAnswer(_Answer):
    chip: str
    vector_flops_per_s: float
    cores: int
    lanes_per_core: int
    flops_per_lane_per_cycle: float
    clock_hz: float


def _positive(value: Scalar, what: str) -> float:
    number = isinstance(value, int | float) and not isinstance(value, bool)
    if not number or not 0 < value < float("inf"):
        raise InputError(f"{what} must be a positive number, got {value!r}")
    return float(value)


def clock_from_vector_rate(
    chip: Chip, rate: float | None = None, *, dtype: str = "fp32", per_cycle: float | None = None
) -> ClockAnswer:
    """The clock at which the chip's vector lanes reach `rate` FLOP/s (default: its own vector
    rate for `dtype`): `rate / (cores x lanes per core x per_cycle)` (module docstring)."""
    oc = chip.on_chip
    if not oc.cores or not oc.vector_lanes_per_core:
        raise InputError(
            f"{chip.name}'s chip file gives no on_chip.cores and vector_lanes_per_core: the lanes "
            "a vector rate is spread over"
        )
    if rate is None:
        rate = chip.vector_rate(dtype)
        if rate is None:
            raise InputError(f"{chip.name}'s chip file gives no vector rate; give one")
    rate = _positive(rate, "the vector rate")
    if per_cycle is None:
        per_cycle = PER_CYCLE_BY_KIND.get(chip.kind, 1.0)
    per_cycle = _positive(per_cycle, "FLOPs per lane per cycle")
    lanes = oc.cores * oc.vector_lanes_per_core
    return ClockAnswer(
        chip.name, rate, oc.cores, oc.vector_lanes_per_core, per_cycle, rate / (lanes * per_cycle)
    )


@dataclass(frozen=True)
class UtilizationAnswer(_Answer):
    chip: str
    dtype: str
    flops: float
    hours: float
    peak_flops_per_s: float
    utilization: float
    flops_note: str


def utilization(
    chip: Chip, flops: float, hours: float, *, dtype: str | None = None, note: str = ""
) -> UtilizationAnswer:
    """The share of `hours` accelerator-hours at peak that `flops` used (module docstring)."""
    flops, hours = _positive(flops, "the FLOPs"), _positive(hours, "the accelerator-hours")
    dtype = dtype or chip.default_dtype
    peak = chip.peak(dtype)
    u = flops / (hours * SECONDS_PER_HOUR * peak)
    return UtilizationAnswer(chip.name, dtype, flops, hours, peak, u, note or "given")
