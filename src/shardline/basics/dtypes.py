"""Element sizes and the peak each dtype computes at (docs/single-device.md).

Sizes are kept in bits so that int4 and fp4 (half a byte) stay exact: `4 // 8 == 0` is a
classic slip.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from shardline.errors import InputError

__all__ = [
    "DTYPE_BITS",
    "canonical_dtype",
    "dtype_bits",
    "dtype_bytes",
    "DTYPE_NAMES",
    "ACCUMULATOR_BYTES",
    "categorize",
]

DTYPE_BITS: dict[str, int] = {
    "fp64": 64,
    "fp32": 32,
    "tf32": 32,  # stored as fp32; only the tensor-core math is reduced precision
    "bf16": 16,
    "fp16": 16,
    "fp8": 8,
    "int32": 32,  # integer matmuls without a matrix-unit rate run on the vector units
    "int8": 8,
    "int4": 4,
    "fp4": 4,
}

_ALIASES: dict[str, str] = {
    "float64": "fp64",
    "f64": "fp64",
    "double": "fp64",
    "float32": "fp32",
    "f32": "fp32",
    "float": "fp32",
    "single": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "f16": "fp16",
    "half": "fp16",
    "float8": "fp8",
    "e4m3": "fp8",
    "e5m2": "fp8",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "fp8e4m3": "fp8",
    "fp8e5m2": "fp8",
    "float8_e4m3fn": "fp8",
    "float8_e5m2": "fp8",
    "i32": "int32",
    "s32": "int32",
    "int": "int32",
    "i8": "int8",
    "s8": "int8",
    "i4": "int4",
    "s4": "int4",
    "mxfp4": "fp4",
    "nvfp4": "fp4",
}

DTYPE_NAMES: tuple[str, ...] = tuple(DTYPE_BITS)

# Matmuls accumulate in fp32 (4 B); partial sums that cross the network are this size unless told.
ACCUMULATOR_BYTES = 4


def canonical_dtype(name: str) -> str:
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key not in DTYPE_BITS:
        raise InputError(f"unknown dtype {name!r}; valid: {', '.join(DTYPE_NAMES)}")
    return key


def dtype_bits(name: str) -> int:
    found = _BITS_OF.get(name) if isinstance(name, str) else None
    if found is None:
        found = DTYPE_BITS[canonical_dtype(name)]
        if isinstance(name, str):
            _BITS_OF[name] = found
    return found


# dtype_bits by the name as given (a memo: the engine asks for the same few names ~10^6 times)
_BITS_OF: dict[str, int] = {}


def dtype_bytes(name: str) -> float:
    return dtype_bits(name) / 8


_LAST: list[Any] = [None, None]  # one-entry memo: the same dtype array passes through many steps


def categorize(names: np.ndarray) -> tuple[list[str], np.ndarray]:
    """(distinct canonical dtype names, integer code per element) for an array of dtype names.

    Peels one distinct value per pass with a vectorized comparison: O(n x distinct), no sort,
    so a million-row sweep with a handful of dtypes costs a few milliseconds.
    """
    if _LAST[0] is names:
        return _LAST[1]
    codes = np.zeros(names.shape, dtype=np.int16)
    todo = np.ones(names.shape, dtype=bool)
    distinct: list[str] = []
    while todo.any():
        first = names.flat[int(np.argmax(todo))]
        hit = names == first
        codes[hit] = len(distinct)
        distinct.append(canonical_dtype(str(first)))
        todo &= ~hit
    _LAST[0], _LAST[1] = names, (distinct, codes)
    return distinct, codes
