"""Option groups that many entry points share, so that no function needs a long parameter list.

- `Precision`: the dtypes of a multiply: one default for every operand, per-operand overrides,
  the dtype the math runs in and the dtype partial sums cross the network in.
- `RateOverrides`: the user's replacements for the chip's peak FLOP/s and HBM bandwidth (to
  reproduce a textbook's numbers exactly).

The network's options (`NetworkOptions`: topology words, link bandwidth, hop latency) live with
the collectives that read them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

__all__ = ["Precision", "RateOverrides", "DEFAULT_REDUCE_DTYPE"]

# Partial sums cross the network in the accumulator dtype unless told (MODEL.md section 5, s_acc).
DEFAULT_REDUCE_DTYPE = "fp32"


@dataclass(frozen=True)
class Precision:
    """Dtypes by name ("bf16", "fp8", "int8", ...); None means "the chip's default"."""

    dtype: str | None = None  # every operand unless overridden
    operands: Mapping[str, str | None] = field(default_factory=dict)  # operand name -> dtype
    compute: str | None = None  # the dtype the multiply runs in (its peak FLOP/s)
    reduce: str = DEFAULT_REDUCE_DTYPE  # partial sums sent over the network

    def of(self, operand: str) -> str | None:
        """The dtype of one operand: its override, else the default."""
        return self.operands.get(operand) or self.dtype


@dataclass(frozen=True)
class RateOverrides:
    """Peak FLOP/s (for the compute dtype) and HBM bytes/s that replace the chip file's."""

    flops_per_s: float | None = None
    mem_bytes_per_s: float | None = None
