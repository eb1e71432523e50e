"""Fused attention's efficiency by sequence length (attention_length.toml): the factor on the
chip file's long-sequence attention efficiency for a launch over sequences of `length` tokens.

    factor(L) = mean over the measured kernels of tflops_k(L) / tflops_k(reference)

with tflops_k linear in log2(L) between the measured lengths, the shortest's value below them,
and factor = 1 at the reference length (8k) and beyond."""

from __future__ import annotations

import math
import tomllib
from functools import cache
from importlib.resources import files

__all__ = ["attention_length_factor", "length_ratios"]


@cache
def _table() -> tuple[float, tuple[tuple[tuple[float, ...], tuple[float, ...]], ...]]:
    text = files("shardline.realistic").joinpath("attention_length.toml").read_text("utf-8")
    data = tomllib.loads(text)
    kernels = tuple(
        (tuple(float(x) for x in k["lengths"]), tuple(float(x) for x in k["tflops"]))
        for k in data["kernel"]
    )
    return float(data["reference"]["length"]["value"]), kernels


def _interp_log2(lengths: tuple[float, ...], values: tuple[float, ...], length: float) -> float:
    """values at `length`, linear in log2(length) between the points, clamped at both ends."""
    if length <= lengths[0]:
        return values[0]
    if length >= lengths[-1]:
        return values[-1]
    for i in range(1, len(lengths)):
        if length <= lengths[i]:
            l0, l1, v0, v1 = lengths[i - 1], lengths[i], values[i - 1], values[i]
            t = (math.log2(length) - math.log2(l0)) / (math.log2(l1) - math.log2(l0))
            return v0 + t * (v1 - v0)
    return values[-1]


def length_ratios(length: float) -> list[float]:
    """Each measured kernel's rate at `length` over its rate at the reference length."""
    reference, kernels = _table()
    return [_interp_log2(ls, vs, length) / _interp_log2(ls, vs, reference) for ls, vs in kernels]


def attention_length_factor(length: float) -> float:
    """The factor on a long-sequence attention efficiency for sequences of `length` tokens."""
    reference, _ = _table()
    if length >= reference:
        return 1.0
    ratios = length_ratios(length)
    return sum(ratios) / len(ratios)
