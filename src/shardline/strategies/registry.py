"""The ordered registry of parallel strategies. Adding a strategy: one module that defines a
`Strategy` (see base.py and docs/stack-and-plans.md, "Adding a strategy") and one line below.

The order is the order of `Degrees`, of the JSON `degrees` object, of the plan table's columns and
of the CLI flags; `Strategy.mesh_rank` sets the device mesh order separately."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from itertools import product
from math import prod

from shardline.errors import InputError
from shardline.strategies import cp, dp, ep, fsdp, pp, tp
from shardline.strategies.base import Strategy
from shardline.workload.workload import Workload

__all__ = ["strategies", "strategy", "names", "by_mesh", "registered", "serving_layouts"]

_REGISTRY: list[Strategy] = [
    tp.STRATEGY,
    pp.STRATEGY,
    dp.STRATEGY,
    fsdp.STRATEGY,
    ep.STRATEGY,
    cp.STRATEGY,
]


def strategies() -> tuple[Strategy, ...]:
    """Every registered strategy, in registry order."""
    return tuple(_REGISTRY)


def names() -> tuple[str, ...]:
    return tuple(s.name for s in _REGISTRY)


def strategy(name: str) -> Strategy:
    for s in _REGISTRY:
        if s.name == name:
            return s
    raise InputError(f"unknown strategy {name!r}; known: {', '.join(names())}")


# by_mesh's answer for the registry as it stands (reset by `registered`: the engine asks for it
# for every layer it splits)
_MESH_ORDER: list[tuple[Strategy, ...]] = []


def by_mesh() -> tuple[Strategy, ...]:
    """The strategies innermost first (mesh rank 0 = the fastest-varying device index)."""
    if not _MESH_ORDER:
        _MESH_ORDER.append(tuple(sorted(_REGISTRY, key=lambda s: s.mesh_rank)))
    return _MESH_ORDER[0]


def serving_layouts(workload: Workload, max_devices: int) -> list[dict[str, int]]:
    """The degrees of one serving replica the serving search tries: every combination of the
    serving strategies' `serving_range` (the others at 1) with at most `max_devices` devices, in
    registry order (today tp = 1, 2, 4, 8 where it splits the model evenly)."""
    ranges = [s.serving_range(workload, max_devices) if s.serving else (1,) for s in _REGISTRY]
    return [
        dict(zip(names(), combo, strict=True))
        for combo in product(*ranges)
        if prod(combo) <= max_devices
    ]


@contextmanager
def registered(extra: Strategy) -> Iterator[Strategy]:
    """Register `extra` for the duration of a `with` block (tests and experiments)."""
    if extra.name in names():
        raise InputError(f"a strategy named {extra.name!r} is already registered")
    _REGISTRY.append(extra)
    _MESH_ORDER.clear()
    try:
        yield extra
    finally:
        _REGISTRY.remove(extra)
        _MESH_ORDER.clear()
