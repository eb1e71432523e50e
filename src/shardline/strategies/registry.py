"""The ordered registry of parallel strategies. Adding a strategy: one module that defines a
`Strategy` (see base.py and docs/stack-and-plans.md, "Adding a strategy") and one line below.

The order is the order of `Degrees`, of the JSON `degrees` object, of the plan table's columns and
of the CLI flags; `Strategy.mesh_rank` sets the device mesh order separately."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from shardline.errors import InputError
from shardline.strategies import cp, dp, ep, fsdp, pp, tp
from shardline.strategies.base import Strategy

__all__ = ["strategies", "strategy", "names", "by_mesh", "registered"]

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


def by_mesh() -> tuple[Strategy, ...]:
    """The strategies innermost first (mesh rank 0 = the fastest-varying device index)."""
    return tuple(sorted(_REGISTRY, key=lambda s: s.mesh_rank))


@contextmanager
def registered(extra: Strategy) -> Iterator[Strategy]:
    """Register `extra` for the duration of a `with` block (tests and experiments)."""
    if extra.name in names():
        raise InputError(f"a strategy named {extra.name!r} is already registered")
    _REGISTRY.append(extra)
    try:
        yield extra
    finally:
        _REGISTRY.remove(extra)
