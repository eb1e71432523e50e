"""`Degrees`: a mapping from strategy name to degree, and what a set of degrees does to one
device's share of a workload (local sizes of each layer, sharded memory)."""

from __future__ import annotations

from collections.abc import Callable, ItemsView, Iterator, KeysView, Mapping, ValuesView
from dataclasses import replace
from math import ceil, prod
from typing import Any

from shardline.strategies.dp import batch_dims
from shardline.strategies.registry import by_mesh, names, strategies
from shardline.workload.stack import DeviceShare
from shardline.workload.workload import Layer, Workload

__all__ = ["Degrees", "local_dims", "device_share"]


class Degrees(Mapping[str, int]):
    """Degree of each registered strategy (1 when not given), in registry order:
    `Degrees(tp=2, dp=4)`, `deg["tp"]`, `deg.tp`, `deg.devices`, `deg.name`."""

    __slots__ = ("_d", "_hash", "_of")

    def __init__(self, degrees: Mapping[str, int] | None = None, **given: int) -> None:
        merged = {**(degrees or {}), **given}
        unknown = set(merged) - set(names())
        if unknown:
            raise KeyError(f"unknown strategy {', '.join(sorted(unknown))}")
        self._d = {name: int(merged.get(name, 1)) for name in names()}
        self._hash = hash(tuple(self._d.items()))  # immutable: hashed once (a cache key)
        self._of: dict[str, int] = {}  # `of`, by axis

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickled as its degrees (the hash is this process's: another computes its own)."""
        return (Degrees, (self._d,))

    def __getitem__(self, name: str) -> int:
        return self._d[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._d)

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, name: object) -> bool:
        return name in self._d

    # the dict's own views and lookups (the Mapping mixins' answers, without their Python loops)
    def keys(self) -> KeysView[str]:
        return self._d.keys()

    def items(self) -> ItemsView[str, int]:
        return self._d.items()

    def values(self) -> ValuesView[int]:
        return self._d.values()

    def get(self, name: str, default: Any = None) -> Any:
        return self._d.get(name, default)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Degrees):
            return self._d == other._d
        return isinstance(other, Mapping) and self._d == dict(other)

    def __getattr__(self, name: str) -> int:
        if name.startswith("_"):
            raise AttributeError(name)
        try:
            return self._d[name]
        except KeyError:
            raise AttributeError(name) from None

    def __repr__(self) -> str:
        return f"Degrees({', '.join(f'{k}={v}' for k, v in self._d.items())})"

    def with_(self, **changes: int) -> Degrees:
        return Degrees({**self._d, **changes})

    def of(self, axis: str) -> int:
        """Product of the degrees of the strategies that split logical axis `axis`."""
        found = self._of.get(axis)
        if found is None:
            found = prod(self._d.get(s.name, 1) for s in strategies() if axis in s.splits)
            self._of[axis] = found
        return found

    @property
    def devices(self) -> int:
        return prod(self._d.values())

    @property
    def replicas(self) -> int:
        """Ways the batch is split (data-parallel replicas times FSDP shards)."""
        return self.of("batch")

    @property
    def stages(self) -> int:
        """Pipeline stages: ways the layers are split."""
        return self.of("layers")

    @property
    def name(self) -> str:
        parts = [f"{k}{v}" for k, v in self._d.items() if v > 1]
        return "-".join(parts) if parts else "single"

    def as_dict(self) -> dict[str, int]:
        return dict(self._d)


def local_dims(
    layer: Layer, degrees: Mapping[str, int], *, batch_dim: str | None, microbatches: int = 1
) -> dict[str, int]:
    """A layer's per-device sizes: the batch dims divided by the microbatches, then each
    strategy's split, outermost first. Uneven splits round up (the slowest device sets the pace);
    ceil(ceil(x / a) / b) = ceil(x / (a b)), so the order of the batch splits does not matter."""
    dims = dict(layer.dims)
    if microbatches > 1:
        for dim in batch_dims(layer, batch_dim):
            dims[dim] = ceil(dims[dim] / microbatches)
    for s in reversed(by_mesh()):
        degree = degrees.get(s.name, 1)
        if degree > 1:
            dims = s.split_dims(layer, dims, degree, batch_dim)
    return dims


# ZeRO stage of the data-parallel axis -> the states it shards (Rajbhandari et al. 2020)
ZERO_SHARDS = {
    0: (),
    1: ("optimizer",),
    2: ("optimizer", "gradients"),
    3: ("optimizer", "gradients", "weights"),
}


def device_share(
    workload: Workload,
    degrees: Mapping[str, int],
    microbatches: int = 1,
    *,
    zero: int = 0,
    state_bytes: Callable[[str], float] | None = None,
) -> DeviceShare:
    """One device's share for the memory check: local sizes, the ways each state is sharded
    (FSDP shards all three; ZeRO stage `zero` shards some over dp), and the resident KV cache's
    sizes (every sequence of the device's replica, not one microbatch)."""

    def ways(term: str) -> int:
        return prod(
            degrees.get(s.name, 1)
            for s in strategies()
            if getattr(s.memory, term) == "sharded"
            or (s.name == "dp" and term in ZERO_SHARDS[zero])
        )

    def dims(layer: Layer) -> dict[str, int]:
        return local_dims(layer, degrees, batch_dim=workload.batch_dim, microbatches=microbatches)

    def cache_dims(layer: Layer) -> dict[str, int]:
        return local_dims(layer, degrees, batch_dim=workload.batch_dim, microbatches=1)

    share = DeviceShare(dims, ways("weights"), ways("gradients"), ways("optimizer"), cache_dims)
    return replace(share, state_bytes=state_bytes) if state_bytes is not None else share
