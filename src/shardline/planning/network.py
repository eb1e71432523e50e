"""Collective times of one plan, placed on the device mesh (shardline.collectives)."""

from __future__ import annotations

from collections.abc import Mapping

from shardline.collectives import (
    AxisNetwork,
    NetworkOptions,
    collective_over,
    mesh_networks,
)
from shardline.errors import InputError
from shardline.hardware import Chip
from shardline.strategies import by_mesh

__all__ = ["MeshNetwork"]


class MeshNetwork:
    """The plan's axes form a mesh with the strategies in mesh order, innermost first (today
    tp, cp, fsdp, dp, pp: Megatron's order, tensor parallelism inside a node), laid onto the chip's
    fabric by `mesh_networks`: an axis that spans nodes runs hierarchically (NVLink inside, the
    scale-out NICs between), a TPU axis rides its torus dimensions."""

    def __init__(
        self,
        chip: Chip,
        degrees: Mapping[str, int],
        memo: dict[object, tuple[float, float]] | None = None,
        options: NetworkOptions | None = None,
    ) -> None:
        self.chip = chip
        self.nets: dict[str, AxisNetwork] = {}
        # the physical links each axis sends over (`mesh_links`): axes with disjoint sets move
        # their bytes concurrently (shardline.collectives.concurrent_s)
        self.links: dict[str, frozenset[str]] = {}
        devices = 1
        for d in degrees.values():
            devices *= d
        if devices > 1:
            if chip.interconnect is None:
                raise InputError(
                    f"{chip.name} has no interconnect in its chip file; a plan over "
                    "several devices needs one"
                )
            outer_first = [(s.name, degrees.get(s.name, 1)) for s in reversed(by_mesh())]
            self.nets = mesh_networks(chip, outer_first, options)
            self.links = {axis: net.links for axis, net in self.nets.items()}
        self._cache: dict[tuple[str, float, str], tuple[float, float]] = {}
        # strategies' priced work, shared by the networks of one search (keys name their axis)
        self.memo: dict[object, tuple[float, float]] = {} if memo is None else memo

    def axis_network(self, axis: str) -> AxisNetwork | None:
        net = self.nets.get(axis)
        return net if net is not None and net.devices > 1 else None

    def time(self, kind: str, nbytes: float, axis: str) -> float:
        """Seconds for `kind` ("all_reduce", "all_gather", "reduce_scatter", "send") of a V-byte
        array over the plan's `axis`: alpha-beta at line rate (the lower bound)."""
        return self._priced(kind, nbytes, axis)[0]

    def predicted(self, kind: str, nbytes: float, axis: str) -> float:
        """The same collective's realistic seconds: `predicted_s` of shardline.collectives (the
        bus efficiency at that message size, and the latency terms)."""
        return self._priced(kind, nbytes, axis)[1]

    def _priced(self, kind: str, nbytes: float, axis: str) -> tuple[float, float]:
        net = self.nets.get(axis)
        if net is None or net.devices <= 1 or nbytes <= 0:
            return 0.0, 0.0
        key = (kind, float(nbytes), axis)
        found = self._cache.get(key)
        if found is None:
            found = self._cache[key] = self._shared(kind, float(nbytes), net)
        return found

    def _shared(self, kind: str, nbytes: float, net: AxisNetwork) -> tuple[float, float]:
        """(line-rate, realistic) seconds from `collective_over`, whose answer depends on the
        kind, the bytes, the axis's network (by value: its stages and options) and the chip
        alone: shared through `memo` by every network of one search (one chip) whose axis lands
        on the same stages."""
        key = ("collective", kind, nbytes, net)
        found = self.memo.get(key)
        if found is None:
            c = collective_over(kind, nbytes, [net], self.chip)
            found = self.memo[key] = (float(c.t_s), float(c.predicted_s))
        return found
