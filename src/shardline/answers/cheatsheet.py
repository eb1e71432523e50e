"""The facts of a one-page roofline cheat sheet for one chip: the peak of each compute dtype, the
HBM bandwidth, the ridge of each dtype (peak / bandwidth), the memory capacity, and the critical M
of common matmul shapes (the smallest M at which A[M,K] B[K,N] is compute-bound,
`shardline.ops.roofline.critical_m`). Pure: the text and the page are in
`shardline.report.cheatsheet`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from shardline.basics.dtypes import canonical_dtype, dtype_bits
from shardline.basics.serialize import jsonable
from shardline.basics.values import JSONDict, Scalar
from shardline.hardware import Chip
from shardline.ops.roofline import critical_m

__all__ = ["DtypeRow", "ShapeRow", "CheatSheet", "cheatsheet", "COMMON_SHAPES"]

# (K, N) of common projections in transformer blocks (width 4096 or 8192; 14336 the MLP width of
# Llama 3 8B, published in its config.json as intermediate_size).
COMMON_SHAPES: tuple[tuple[int, int], ...] = (
    (4096, 4096),
    (8192, 8192),
    (4096, 14336),
    (14336, 4096),
)


@dataclass(frozen=True)
class DtypeRow:
    dtype: str
    peak_flops_per_s: float
    ridge_flop_per_byte: float  # peak / HBM bandwidth
    source: str


@dataclass(frozen=True)
class ShapeRow:
    """C[M,N] = A[M,K] B[K,N] in one dtype: the critical M, and the time to read B once from HBM
    (the floor of a small-M multiply, whatever M)."""

    k: int
    n: int
    critical_m: Scalar | None  # None: memory-bound at every M (an int otherwise)
    weight_bytes: float
    t_weight_read_s: float


@dataclass(frozen=True)
class CheatSheet:
    chip_name: str
    display_name: str
    mem_bytes_per_s: float
    capacity_bytes: float
    dtypes: list[DtypeRow]
    shape_dtype: str
    shapes: list[ShapeRow]
    sources: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> JSONDict:
        return jsonable(
            {
                "chip": self.chip_name,
                "display_name": self.display_name,
                "mem_bytes_per_s": self.mem_bytes_per_s,
                "capacity_bytes": self.capacity_bytes,
                "dtypes": self.dtypes,
                "shape_dtype": self.shape_dtype,
                "shapes": self.shapes,
                "sources": self.sources,
            }
        )


def cheatsheet(
    chip: Chip, dtype: str | None = None, shapes: Sequence[tuple[int, int]] = COMMON_SHAPES
) -> CheatSheet:
    """The sheet's table for `chip`; the shapes' critical M in `dtype` (every operand stored and
    computed in it; default the chip's default dtype, bf16 where it has it)."""
    shape_dtype = canonical_dtype(dtype) if dtype else chip.default_dtype
    peak = chip.peak(shape_dtype)  # an input error where the chip lacks the dtype
    bw = chip.mem_bytes_per_s
    rows = [
        DtypeRow(
            d,
            chip.peak(d),
            chip.ridge(d),
            chip.sources.get(f"peak_flops_per_s.{d}", ""),
        )
        for d in chip.dtypes
    ]
    size = dtype_bits(shape_dtype) / 8
    operands = {"a": shape_dtype, "b": shape_dtype, "out": shape_dtype}
    out = [
        ShapeRow(k, n, critical_m(k, n, operands, peak, bw), size * k * n, size * k * n / bw)
        for k, n in shapes
    ]
    sources = {
        "memory.bytes_per_s": chip.sources.get("memory.bytes_per_s", ""),
        "memory.capacity_bytes": chip.sources.get("memory.capacity_bytes", ""),
    }
    return CheatSheet(
        chip.name, chip.display_name, bw, chip.capacity_bytes, rows, shape_dtype, out, sources
    )
