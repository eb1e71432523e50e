"""Rank every 1D and 2D sharding of C[M,N] = A[M,K] B[K,N] over D devices (seed 000 follow-up).

1D: one mesh axis X=D splits M, N or K. 2D: every factorization D = a x b (a, b >= 2) as a mesh X=a,
Y=b (Y innermost), each axis assigned to M, N or K (both on one dim is `M_XY`). Each strategy is a
named-axis spec, priced by the layout pricer's own rules (`sharding.layout_rules.layout_work`, the
same function `sharding.layout.price_layout` runs): the K axes leave partial sums that are
reduce-scattered onto N (onto M when N does not divide; `--output split`) or all-reduced and the
whole C all-gathered (`--output replicated`); inputs that are not resident are gathered first;
`--pad` pads each dim to the least common multiple of its shard counts, as `shardline einsum --pad`
does.

The fast path: strategies with the same spec on meshes of the same axes are evaluated together,
sizes as numpy arrays; collective times are linear in the bytes (`t = c*V + L`), so each mesh's
(c, L) per (kind, axes) is priced once. D = 4096 takes milliseconds (tests/test_compare.py).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TypedDict, Unpack

import numpy as np

from shardline.basics.dtypes import canonical_dtype, dtype_bits
from shardline.basics.kinds import CollectiveKind
from shardline.basics.options import Precision, RateOverrides
from shardline.basics.serialize import jsonable
from shardline.collectives import AxisNetwork, NetworkOptions, collective_over, mesh_networks
from shardline.collectives.networks import concurrent_rows
from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip
from shardline.ops.cost import Cost, is_tie, strictly_less
from shardline.ops.einsum import EinsumSpec, check_size, parse_einsum
from shardline.sharding.layout import (
    PlannedCollective,
    layout_cost,
    network_bytes,
    resolve_precision,
    step_time,
)
from shardline.sharding.layout_rules import LayoutSetup, layout_work, legal_choices, shard_counts

__all__ = [
    "Strategy",
    "Comparison",
    "CompareRun",
    "SweepRun",
    "compare",
    "compare_strategies",
    "divisors",
]

_DIMS = ("M", "N", "K")
_MeshAxes = tuple[tuple[str, int], ...]


class CompareRun(TypedDict, total=False):
    """Keyword options of `compare`."""

    precision: Precision | str  # a str: the dtype of A, B and C
    rates: RateOverrides | None
    network: NetworkOptions | None
    resident: Iterable[str] | None  # inputs already laid out (default A and B)
    overlap: bool  # default True
    pad: bool  # default False


class SweepRun(CompareRun, total=False):
    """Keyword options of `compare_strategies`: `compare`'s and the sweep's top device count."""

    sweep_max_devices: int  # default 4096


# The JSON keys of a strategy, in order.
_KEYS_TIMES = ("spec", "mesh", "shape", "assignment", "bound", "t_s", "t_lower_s", "t_upper_s")
_KEYS_PARTS = ("t_compute_s", "t_memory_s", "t_network_s", "flops", "hbm_bytes", "collectives")
_STRATEGY_KEYS = _KEYS_TIMES + _KEYS_PARTS


def _cost_float(name: str) -> property:
    """A read-only attribute: the strategy's `cost.<name>` as a float."""
    return property(lambda self: float(getattr(self.cost, name)), doc=f"cost.{name}")


@dataclass(frozen=True)
class Strategy:
    """One way to split the multiply, with its per-device `cost`; `to_dict` gives the JSON."""

    spec: str
    mesh: dict[str, int]
    shape: str  # "1D" or "2D"
    assignment: dict[str, str]  # mesh axis -> the dim it splits
    cost: Cost  # per device
    overlap: bool
    collectives: tuple[str, ...]
    t_network_serial_s: float  # the collectives one after another (the no-overlap step's)

    @property
    def bound(self) -> str:
        return str(self.cost.bound)

    @property
    def t_s(self) -> float:
        """The time under the chosen overlap rule (what the ranking uses)."""
        return float(step_time(self.cost, self.overlap, self.t_network_serial_s))

    t_lower_s = _cost_float("t_lower_s")
    t_upper_s = _cost_float("t_upper_s")
    t_compute_s = _cost_float("t_compute_s")
    t_memory_s = _cost_float("t_memory_s")
    t_network_s = _cost_float("t_network_s")
    flops = _cost_float("flops")  # per device
    hbm_bytes = _cost_float("hbm_bytes")  # per device

    def to_dict(self) -> dict[str, object]:
        return jsonable({key: getattr(self, key) for key in _STRATEGY_KEYS})


@dataclass(frozen=True)
class Comparison:
    m: int
    k: int
    n: int
    devices: int
    hardware: str
    dtype: str
    output: str
    overlap: bool
    strategies: tuple[Strategy, ...]
    excluded: int  # strategies whose splits do not divide the dims (see --pad)
    best_1d: Strategy | None
    best_2d: Strategy | None
    two_d_wins: bool
    speedup_2d_over_1d: float | None
    crossover_devices: int | None  # smallest power of two at which 2D beats 1D (sweep)
    sweep_max_devices: int
    sweep: tuple[dict[str, object], ...] = field(default=())

    def to_dict(self) -> dict[str, object]:
        out: dict[str, object] = {}
        for name in self.__dataclass_fields__:
            value = getattr(self, name)
            if isinstance(value, Strategy):
                value = value.to_dict()
            elif name == "strategies":
                value = [s.to_dict() for s in value]
            out[name] = value
        return jsonable(out)


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _meshes(devices: int) -> list[_MeshAxes]:
    meshes: list[_MeshAxes] = [(("X", devices),)] if devices > 1 else []
    for a in divisors(devices):
        b = devices // a
        if a >= 2 and b >= 2:
            meshes.append((("X", a), ("Y", b)))
    return meshes


def _spec(split: dict[str, list[str]], out: dict[str, list[str]]) -> str:
    def dim(name: str, axes: Iterable[str]) -> str:
        axes = "".join(axes)
        return f"{name}_{axes}" if axes else name

    return (
        f"A[{dim('M', split['M'])},{dim('K', split['K'])}] * "
        f"B[{dim('K', split['K'])},{dim('N', split['N'])}] -> "
        f"C[{dim('M', out['M'])},{dim('N', out['N'])}]"
    )


@functools.lru_cache(maxsize=1024)
def _parsed(spec: str) -> EinsumSpec:
    return parse_einsum(spec)


# --- the strategies --------------------------------------------------------------------------


@dataclass(frozen=True)
class _Run:
    """Everything fixed for one comparison."""

    chip: Chip
    flops_per_s: float
    dtypes: dict[str, str]  # A, B, C
    compute: str
    reduce_dtype: str
    resident: frozenset[str]
    network: NetworkOptions | None
    overlap: bool
    pad: bool
    output: str


@dataclass(frozen=True)
class _Row:
    spec: str
    mesh: _MeshAxes
    assignment: dict[str, str]
    dims: dict[str, int]  # padded where --pad


def _output_split(
    split: dict[str, list[str]], sizes: dict[str, int], size_of: dict[str, int], output: str
) -> dict[str, list[str]]:
    """C split like the inputs plus the K axes (onto N, or M when N does not divide), or whole."""
    if output == "replicated":
        return {"M": [], "N": []}
    out = {"M": list(split["M"]), "N": list(split["N"])}
    if split["K"]:
        shards = {d: math.prod(size_of[a] for a in split[d]) for d in _DIMS}
        onto = "N"
        if sizes["N"] % (shards["N"] * shards["K"]) and not sizes["M"] % (
            shards["M"] * shards["K"]
        ):
            onto = "M"
        out[onto] = out[onto] + split["K"]
    return out


def _rows(sizes: dict[str, int], devices: int, run: _Run) -> tuple[list[_Row], int]:
    """Every strategy whose splits divide the dims (all with --pad); and how many were left out."""
    rows: list[_Row] = []
    excluded = 0
    for mesh in _meshes(devices):
        names = [a for a, _ in mesh]
        size_of = dict(mesh)
        assigns: list[tuple[str, ...]] = (
            [(d,) for d in _DIMS] if len(mesh) == 1 else [(dx, dy) for dx in _DIMS for dy in _DIMS]
        )
        for assign in assigns:
            split = {d: [a for a, t in zip(names, assign, strict=True) if t == d] for d in _DIMS}
            spec = _spec(split, _output_split(split, sizes, size_of, run.output))
            need = shard_counts(_parsed(spec), size_of)
            if any(sizes[d] % need[d] for d in _DIMS) and not run.pad:
                excluded += 1
                continue
            dims = {d: -(-sizes[d] // need[d]) * need[d] for d in _DIMS}
            assignment = dict(zip(names, assign, strict=True))
            rows.append(_Row(spec, mesh, assignment, dims))
    return rows, excluded


# --- the vectorized pricing ------------------------------------------------------------------


class _UnitPrices:
    """Per mesh and (kind, axes): seconds per byte, latency, bytes sent per byte of V."""

    def __init__(self, run: _Run) -> None:
        self.run = run
        self.nets: dict[_MeshAxes, dict[str, AxisNetwork]] = {}
        self.cache: dict[
            tuple[_MeshAxes, CollectiveKind, tuple[str, ...]], tuple[float, float, float]
        ] = {}

    def networks(self, mesh: _MeshAxes) -> dict[str, AxisNetwork]:
        if mesh not in self.nets:
            names, network = [a for a, _ in mesh], self.run.network or NetworkOptions()
            words = {a: w for a, w in (network.topology or {}).items() if a in names}
            # a bare --topology word names X and Y; 1D meshes have only X
            options = NetworkOptions(words, network.link_bytes_per_s, network.hop_latency_s)
            self.nets[mesh] = mesh_networks(self.run.chip, mesh, options)
        return self.nets[mesh]

    def __call__(
        self, mesh: _MeshAxes, kind: CollectiveKind, axes: tuple[str, ...]
    ) -> tuple[float, ...]:
        key = (mesh, kind, axes)
        if key not in self.cache:
            nets = [self.networks(mesh)[a] for a, _ in mesh if a in axes]
            cost = collective_over(kind, 1.0, nets, self.run.chip)
            sent = network_bytes(PlannedCollective(kind, "", axes, 1.0, "", "", cost))
            self.cache[key] = (float(cost.t_bandwidth_s), float(cost.t_latency_s), sent)
        return self.cache[key]


def _group_setup(run: _Run, rows: list[_Row]) -> LayoutSetup:
    """One spec on meshes with the same axes: every size a numpy array, one entry per row."""
    names = tuple(a for a, _ in rows[0].mesh)
    return LayoutSetup(
        spec=_parsed(rows[0].spec),
        dims={d: np.array([r.dims[d] for r in rows], dtype=np.float64) for d in _DIMS},
        names=names,
        sizes={a: np.array([dict(r.mesh)[a] for r in rows], dtype=np.float64) for a in names},
        bits={name: dtype_bits(t) for name, t in run.dtypes.items()},
        dtypes=run.dtypes,
        reduce_bits=dtype_bits(run.reduce_dtype),
        reduce_dtype=run.reduce_dtype,
        resident=run.resident,
    )


def _price_group(run: _Run, rows: list[_Row], unit: _UnitPrices) -> list[Strategy]:
    """The strategies of one spec, priced together (the rules of `layout_work` over arrays)."""
    s = _group_setup(run, rows)
    per_axis = legal_choices(s.spec, s.names)
    if any(len(options) != 1 for options in per_axis):
        raise ValueError(f"{rows[0].spec}: more than one legal choice; price it with price_layout")
    work = layout_work(s, {a: options[0] for a, options in zip(s.names, per_axis, strict=True)})
    assert work is not None  # every row's dims divide (padded where --pad)
    sent = np.zeros(len(rows))
    times = []
    for call in work.calls:
        c = np.array([unit(r.mesh, call.kind, call.axes) for r in rows]).T
        times.append(np.broadcast_to(c[0] * call.bytes + c[1], (len(rows),)))
        sent = sent + c[2] * call.bytes
    nets = [unit.networks(r.mesh) for r in rows]  # disjoint links at once: concurrent_rows
    t_network, serial = concurrent_rows(nets, [call.axes for call in work.calls], times), sum(times)
    rates = (run.flops_per_s, run.chip.mem_bytes_per_s)
    cost = layout_cost(work.flops, work.hbm["total"], sent, *rates, t_network, serial)
    labels = tuple(call.label() for call in work.calls)
    return [
        Strategy(
            spec=r.spec,
            mesh=dict(r.mesh),
            shape="2D" if len(r.mesh) == 2 else "1D",
            assignment=r.assignment,
            cost=Cost(*(float(np.asarray(v)[i]) for v in cost.as_dict().values())),
            overlap=run.overlap,
            collectives=labels,
            t_network_serial_s=float(np.broadcast_to(serial, (len(rows),))[i]),
        )
        for i, r in enumerate(rows)
    ]


def _evaluate(run: _Run, rows: list[_Row], unit: _UnitPrices) -> list[Strategy]:
    """Every row priced, in the order of `rows`."""
    groups: dict[tuple[str, tuple[str, ...]], list[int]] = {}
    for i, r in enumerate(rows):
        groups.setdefault((r.spec, tuple(a for a, _ in r.mesh)), []).append(i)
    priced: list[Strategy | None] = [None] * len(rows)
    for members in groups.values():
        group = _price_group(run, [rows[i] for i in members], unit)
        for i, strategy in zip(members, group, strict=True):
            priced[i] = strategy
    return [s for s in priced if s is not None]


def _before(a: tuple[int, Strategy], b: tuple[int, Strategy]) -> int:
    """Fastest first; within a tie (`is_tie`) the lower serial time, then 1D, then enumeration."""
    (i, s), (j, t) = a, b
    if not is_tie(s.t_s, t.t_s):
        return -1 if s.t_s < t.t_s else 1
    su, tu = (float(step_time(x.cost, False, x.t_network_serial_s)) for x in (s, t))
    if not is_tie(su, tu):  # the lower --no-overlap step
        return -1 if su < tu else 1
    return -1 if (s.shape, i) < (t.shape, j) else 1


def _rank(strategies: list[Strategy]) -> list[Strategy]:
    return [s for _, s in sorted(enumerate(strategies), key=functools.cmp_to_key(_before))]


# --- entry points ----------------------------------------------------------------------------


def _check(m: int, k: int, n: int, devices: int, output: str) -> None:
    for value, name in ((m, "M"), (k, "K"), (n, "N"), (devices, "--devices")):
        check_size(value, name)
    if output not in ("split", "replicated"):
        raise InputError(f"--output must be split or replicated, got {output!r}")


def _prepare(chip: Chip | str, output: str, run: CompareRun) -> _Run:
    precision = run.get("precision") or Precision()
    if isinstance(precision, str):
        precision = Precision(dtype=precision)
    rates = run.get("rates") or RateOverrides()
    base = resolve_chip(chip)
    dtypes, compute = resolve_precision(("A", "B", "C"), base, precision)
    resolved = base.with_overrides(
        compute_dtype=compute, flops_per_s=rates.flops_per_s, mem_bytes_per_s=rates.mem_bytes_per_s
    )
    resident = run.get("resident")
    return _Run(
        chip=resolved,
        flops_per_s=resolved.peak(compute),
        dtypes=dtypes,
        compute=compute,
        reduce_dtype=canonical_dtype(precision.reduce),
        resident=frozenset(r.upper() for r in resident)
        if resident is not None
        else frozenset("AB"),
        network=run.get("network"),
        overlap=run.get("overlap", True),
        pad=run.get("pad", False),
        output=output,
    )


def compare(
    m: int,
    k: int,
    n: int,
    devices: int,
    chip: Chip | str,
    *,
    output: str = "split",
    **run: Unpack[CompareRun],
) -> list[Strategy]:
    """Every 1D and 2D strategy for D devices, fastest first (ties: lower serial time, 1D first).
    `run`: `precision`, `rates`, `network`, `resident`, `overlap`, `pad` (`CompareRun`).

    >>> best = compare(8192, 8192, 8192, 8, "h100-sxm")[0]
    >>> best.bound, best.t_network_s
    ('compute', 0.0)
    """
    _check(m, k, n, devices, output)
    prepared = _prepare(chip, output, run)
    rows, _ = _rows({"M": m, "K": k, "N": n}, devices, prepared)
    return _rank(_evaluate(prepared, rows, _UnitPrices(prepared)))


def _sweep(
    sizes: dict[str, int], run: _Run, top: int, unit: _UnitPrices
) -> tuple[list[dict[str, object]], int | None]:
    """Best 1D and best 2D at every power of two from 4 to `top`; the first D where 2D wins."""
    sweep: list[dict[str, object]] = []
    crossover = None
    d = 4
    while d <= top:
        try:
            rows, _ = _rows(sizes, d, run)
            strategies = _evaluate(run, rows, unit)
        except InputError:  # beyond what the chip's network can hold
            break
        one = [s.t_s for s in strategies if s.shape == "1D"]
        two = [s.t_s for s in strategies if s.shape == "2D"]
        if one and two:
            wins = strictly_less(min(two), min(one))
            sweep.append(
                {"devices": d, "best_1d_s": min(one), "best_2d_s": min(two), "two_d_wins": wins}
            )
            if wins and crossover is None:
                crossover = d
        d *= 2
    return sweep, crossover


def compare_strategies(
    m: int,
    k: int,
    n: int,
    devices: int,
    chip: Chip | str,
    *,
    output: str = "split",
    **run: Unpack[SweepRun],
) -> Comparison:
    """`compare` plus the verdict: best 1D vs best 2D here, and the smallest power-of-two device
    count (up to max(D, sweep_max_devices)) at which 2D beats 1D for these shapes."""
    _check(m, k, n, devices, output)
    prepared = _prepare(chip, output, run)
    unknown = prepared.resident - {"A", "B"}
    if unknown:
        raise InputError(f"--resident names {', '.join(sorted(unknown))}; the inputs are A and B")
    sizes = {"M": m, "K": k, "N": n}
    rows, excluded = _rows(sizes, devices, prepared)
    if not rows:
        raise InputError(
            f"no strategy splits M={m}, K={k}, N={n} evenly over {devices} devices; "
            "pass --pad to pad the dimensions"
        )
    unit = _UnitPrices(prepared)
    strategies = _rank(_evaluate(prepared, rows, unit))
    best_1d = next((s for s in strategies if s.shape == "1D"), None)
    best_2d = next((s for s in strategies if s.shape == "2D"), None)
    speedup = best_1d.t_s / best_2d.t_s if best_1d and best_2d and best_2d.t_s > 0 else None
    top = max(devices, run.get("sweep_max_devices", 4096))
    sweep, crossover = _sweep(sizes, prepared, top, unit)
    return Comparison(
        m=m,
        k=k,
        n=n,
        devices=devices,
        hardware=prepared.chip.name,
        dtype=prepared.compute,
        output=output,
        overlap=prepared.overlap,
        strategies=tuple(strategies),
        excluded=excluded,
        best_1d=best_1d,
        best_2d=best_2d,
        two_d_wins=bool(best_1d and best_2d and strictly_less(best_2d.t_s, best_1d.t_s)),
        speedup_2d_over_1d=speedup,
        crossover_devices=crossover,
        sweep_max_devices=top,
        sweep=tuple(sweep),
    )
