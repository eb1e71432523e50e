"""`Degrees`: a mapping from strategy name to degree, and what a set of degrees does to one
device's share of a workload (local sizes of each layer, sharded memory)."""

from __future__ import annotations

from collections.abc import Callable, ItemsView, Iterator, KeysView, Mapping, ValuesView
from dataclasses import replace
from math import ceil, prod
from typing import Any

from shardline.errors import InputError
from shardline.strategies.dp import batch_dims, plain_batch_split
from shardline.strategies.registry import by_mesh, names, strategies
from shardline.workload.moe import EXPERT_AXIS
from shardline.workload.stack import DeviceShare
from shardline.workload.workload import Layer, Workload

__all__ = ["Degrees", "fold", "folded_from", "local_dims", "device_share"]


class Degrees(Mapping[str, int]):
    """Degree of each registered strategy (1 when not given), in registry order:
    `Degrees(tp=2, dp=4)`, `deg["tp"]`, `deg.tp`, `deg.devices`, `deg.name`.

    Parallel folding (Megatron-Core): given `etp` (expert tensor parallelism), the degrees are
    stated as Megatron-Core states them, attention on tp x cp x dp x fsdp x pp = devices and the
    experts on etp x ep x edp x pp over the same ranks (`edp` derived; an `edp` key is checked,
    not needed): `Degrees(tp=2, pp=8, dp=32, ep=64, etp=1)` on 512 devices. Inside, the
    mapping keeps the unfolded degrees every strategy prices (ep inside dp, the attention's
    view: dp 1, ep 64 x 1 / 2 = 32) and `experts` gives the degrees the expert einsums run on
    (tp = etp, ep = the experts' ep), over the same devices (`fold`)."""

    __slots__ = ("_d", "_hash", "_of", "_etp")

    def __init__(self, degrees: Mapping[str, int] | None = None, **given: int) -> None:
        merged = {**(degrees or {}), **given}
        etp = merged.pop("etp", None)
        edp = merged.pop("edp", None)
        unknown = set(merged) - set(names())
        if unknown:
            raise KeyError(f"unknown strategy {', '.join(sorted(unknown))}")
        self._d = {name: int(merged.get(name, 1)) for name in names()}
        self._etp: int | None = None
        if etp is not None:
            self._d, self._etp = fold(self._d, int(etp), edp)
        self._hash = hash((*self._d.items(), self._etp))  # immutable: hashed once (a cache key)
        self._of: dict[str, int] = {}  # `of`, by axis

    def __reduce__(self) -> tuple[object, ...]:
        """Pickled as its degrees (the hash is this process's: another computes its own)."""
        return (Degrees, (self.as_dict(),))

    @property
    def folded(self) -> bool:
        """Stated with expert tensor parallelism (`etp`): Megatron-Core's parallel folding."""
        return self._etp is not None

    @property
    def etp(self) -> int:
        """Expert tensor parallelism: the ways an expert's feed-forward is split (tp unless
        folded)."""
        return self._d["tp"] if self._etp is None else self._etp

    @property
    def expert_ep(self) -> int:
        """The ranks that split the experts and exchange the routed tokens (the all-to-all's
        group): ep unfolded, ep x tp / etp (the ep that was stated) folded."""
        return self._d["ep"] * self._d["tp"] // self.etp

    @property
    def edp(self) -> int:
        """Expert data parallelism: ranks holding the same experts of a stage (the expert
        gradients' all-reduce group): devices / (pp x etp x expert ep)."""
        return self.devices // (self.stages * self.etp * self.expert_ep)

    @property
    def experts(self) -> Degrees:
        """The unfolded degrees the expert einsums run on: tp = etp, ep = the experts' ep (the
        same devices); itself when not folded or etp = tp."""
        if self._etp is None or self._etp == self._d["tp"]:
            return self
        return Degrees({**self._d, "tp": self._etp, "ep": self.expert_ep})

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

    def get(self, name: str, default: object = None) -> Any:
        return self._d.get(name, default)

    def __hash__(self) -> int:
        return self._hash

    def __eq__(self, other: object) -> bool:
        if isinstance(other, Degrees):
            return self._d == other._d and self._etp == other._etp
        return isinstance(other, Mapping) and self._etp is None and self._d == dict(other)

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
        if self._etp is None:
            return Degrees({**self._d, **changes})
        stated = {k: v for k, v in self.as_dict().items() if k != "edp"}
        return Degrees({**stated, **changes})

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
        shown = self.as_dict()
        parts = [f"{k}{v}" for k, v in shown.items() if v > 1 and k != "edp"]
        if self._etp is not None:
            parts.append(f"etp{self._etp}")  # etp1 named too: it says the layout is folded
        return "-".join(dict.fromkeys(parts)) if parts else "single"

    def as_dict(self) -> dict[str, int]:
        """The degrees as stated: unfolded, one per strategy; folded (Megatron-Core), dp the
        attention's (every rank outside tp, cp, fsdp and pp), ep the experts', etp and edp."""
        if self._etp is None:
            return dict(self._d)
        d = dict(self._d)
        d["dp"] = self._d["dp"] * self._d["ep"]
        d["ep"] = self.expert_ep
        return {**d, "etp": self._etp, "edp": self.edp}


def fold(stated: dict[str, int], etp: int, edp: int | None = None) -> tuple[dict[str, int], int]:
    """Folded degrees as Megatron-Core states them (attention tp x cp x dp x fsdp x pp, experts
    etp x ep x edp x pp over the same ranks) -> (the unfolded degrees every strategy prices,
    etp). The attention keeps tp, cp, fsdp and pp; its dp ranks are the unfolded dp x ep, with
    ep = the experts' ep x etp / tp (the experts' group spans etp / tp of a tp group's ranks
    per attention rank), which must be whole and divide dp. Megatron-Core, `parallel_state`
    (expert_tensor_parallel_size, "MoE Parallel Folding", arXiv 2504.14960)."""
    tp, dp, ep = stated["tp"], stated["dp"], stated["ep"]
    if etp < 1:
        raise InputError(f"etp must be a positive integer, got {etp}")
    ranks = tp * dp * stated["fsdp"] * stated.get("cp", 1)
    if ranks % (etp * ep):
        raise InputError(
            f"etp x ep = {etp} x {ep} = {etp * ep} does not divide the {ranks} ranks of a "
            f"pipeline stage (tp x cp x dp x fsdp = {ranks}): the experts run on etp x ep x edp "
            "of them"
        )
    if (ep * etp) % tp or dp % ((ep * etp) // tp):
        raise InputError(
            f"etp={etp}, ep={ep} under tp={tp}, dp={dp}: the expert-parallel group must span "
            f"whole attention tensor-parallel groups (ep x etp = {ep * etp} a multiple of tp "
            f"whose ep x etp / tp divides dp)"
        )
    inner = (ep * etp) // tp
    if edp is not None and int(edp) != ranks // (etp * ep):
        raise InputError(
            f"edp={edp}, but tp x cp x dp x fsdp / (etp x ep) = {ranks} / {etp * ep} = "
            f"{ranks // (etp * ep)}"
        )
    return {**stated, "dp": dp // inner, "ep": inner}, etp


def folded_from(unfolded: Mapping[str, int], etp: int | None) -> Degrees:
    """The layout whose unfolded degrees (what every strategy prices: `Degrees`' mapping) are
    `unfolded` and whose experts run on `etp` ways of tensor parallelism, the same devices;
    the unfolded layout itself when etp is None, 0 or its tp. Stated Megatron-Core's way for
    `fold`, which gives back `unfolded`: dp x ep attention ranks, the experts' ep = ep x tp /
    etp (`Degrees.expert_ep`), which must be whole."""
    tp, ep, dp = unfolded.get("tp", 1), unfolded.get("ep", 1), unfolded.get("dp", 1)
    if not etp or etp == tp:
        return Degrees(unfolded)
    if (ep * tp) % etp:
        raise InputError(
            f"etp={etp} does not divide ep x tp = {ep} x {tp}: the experts' ep x etp ranks "
            "must be the attention's tp x ep"
        )
    return Degrees({**unfolded, "dp": dp * ep, "ep": ep * tp // etp, "etp": etp})


def local_dims(
    layer: Layer, degrees: Mapping[str, int], *, batch_dim: str | None, microbatches: int = 1
) -> dict[str, int]:
    """A layer's per-device sizes: the batch dims divided by the microbatches, then each
    strategy's split, outermost first. Uneven splits round up (the slowest device sets the pace);
    ceil(ceil(x / a) / b) = ceil(x / (a b)), so the order of the batch splits does not matter."""
    if isinstance(degrees, Degrees) and degrees.folded and layer.axis_dims(EXPERT_AXIS):
        degrees = degrees.experts  # the expert einsums run on the experts' degrees
    dims = dict(layer.dims)
    if microbatches > 1:
        for dim in batch_dims(layer, batch_dim):
            dims[dim] = ceil(dims[dim] / microbatches)
    for s in reversed(by_mesh()):
        degree = degrees.get(s.name, 1)
        if degree > 1:
            dims = s.split_dims(layer, dims, degree, batch_dim)
    return dims


def sizes_key(degrees: Degrees) -> Any:
    """What `local_dims` reads of the degrees: the plain batch splits (dp, fsdp:
    `plain_batch_split`) only through their product, as each divides the batch dims rounding up
    (ceil(ceil(x / a) / b) = ceil(x / (a b))); every other degree as it is. Folded degrees key
    by themselves (their experts' degrees are derived from dp)."""
    if degrees.folded:
        return degrees
    plain = [s.name for s in by_mesh() if plain_batch_split(s)]
    rest = tuple((s.name, degrees[s.name]) for s in by_mesh() if s.name not in plain)
    return prod(degrees[n] for n in plain), rest


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
    terms, by_zero = ("weights", "gradients", "optimizer"), ZERO_SHARDS[zero]
    ways = dict.fromkeys(terms, 1)
    for s in strategies():  # one pass: the strategies on (degree > 1) that shard each term
        degree = degrees.get(s.name, 1)
        if degree == 1:
            continue
        for term in terms:
            if getattr(s.memory, term) == "sharded" or (s.name == "dp" and term in by_zero):
                ways[term] *= degree

    def dims(layer: Layer) -> dict[str, int]:
        return local_dims(layer, degrees, batch_dim=workload.batch_dim, microbatches=microbatches)

    def cache_dims(layer: Layer) -> dict[str, int]:
        return local_dims(layer, degrees, batch_dim=workload.batch_dim, microbatches=1)

    share = DeviceShare(dims, ways["weights"], ways["gradients"], ways["optimizer"], cache_dims)
    return replace(share, state_bytes=state_bytes) if state_bytes is not None else share
