"""The named-axis sharding algebra: which collectives a sharded einsum needs, and what it costs.

docs/sharding.md, in the notation of "How to Scale Your Model" (sharding chapter):
`A[M_X, K] * B[K, N_Y] -> C[M_X, N_Y]` on a mesh `X=4, Y=2`. The layout pricer
(`shardline.sharding.layout.price_layout`) decides, for every mesh axis, which dimension it splits
during the local multiply and which collectives that needs (`shardline.sharding.layout_rules`: the
four cases), prices every legal choice and keeps the cheapest (by time, then by serial time; on a
tie, the book's default, all-gather).

This module wraps it for `shardline einsum --mesh` and `shardline shard`: the checks, the
result record (`ShardedResult`, which holds the per-device `Cost` and flattens it only in
`to_dict`), and the network-bound thresholds. Bound = the largest of t_compute, t_memory,
t_network; t_lower_s (overlapped) is the max of all three and t_upper_s (the serial bound, as in
every `Cost`) is t_compute + t_memory + the collectives one after another. `t_s` is the step:
t_lower_s with `--overlap`, max(t_compute, t_memory) + the collectives one after another with
`--no-overlap` (the network step waits for, and is waited on by, the local multiply).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypedDict, Unpack

from shardline.basics.dtypes import ACCUMULATOR_BYTES, dtype_bits
from shardline.basics.options import DEFAULT_REDUCE_DTYPE, Precision, RateOverrides
from shardline.basics.serialize import jsonable
from shardline.basics.values import JSONDict, as_number
from shardline.collectives import AxisNetwork, NetworkOptions, mesh_networks
from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip
from shardline.ops.cost import Cost
from shardline.ops.einsum import EinsumSpec, check_size, parse_einsum, require_two_operands
from shardline.sharding.layout import (
    LayoutPrice,
    PlannedCollective,
    ShardOptions,
    check_layout,
    price_layout,
    resolve_precision,
    serial_network_s,
    step_time,
)
from shardline.sharding.mesh import Mesh, parse_mesh

__all__ = [
    "Mesh",
    "ShardOptions",
    "PerDevice",
    "PlannedCollective",
    "Threshold",
    "ShardedResult",
    "ShardRun",
    "parse_mesh",
    "shard_einsum",
    "plan_sharded",
    "shard_matmul",
    "matmul_spec",
    "DEFAULT_REDUCE_DTYPE",
]

# Partial sums cross the network in the accumulator dtype unless told (docs/sharding.md, s_acc).
assert dtype_bits(DEFAULT_REDUCE_DTYPE) == 8 * ACCUMULATOR_BYTES


@dataclass(frozen=True)
class PerDevice:
    """The per-device counts as the JSON `per_device` object (a view of the result's Cost)."""

    flops: float
    bytes: dict[str, int]  # per operand and "total"
    network_bytes: float  # bytes each device sends over all collectives
    t_compute_s: float
    t_memory_s: float
    shapes: dict[str, list[int]]  # local shapes at compute time


@dataclass(frozen=True)
class Threshold:
    name: str
    formula: str
    value: float
    dim: str
    current: int
    network_bound: bool


_KEYS_BEFORE = ("spec", "strategy", "dims", "padded", "mesh", "devices", "topology", "dtypes")
_KEYS_AFTER = (
    "t_network_s",
    "t_network_predicted_s",
    "bound",
    "overlap",
    "t_s",
    "t_lower_s",
    "t_upper_s",
    "thresholds",
    "total_flops",
    "unsharded_flops",
    "steps",
    "alternatives",
    "hardware",
)


@dataclass(frozen=True)
class ShardedResult:
    """A sharded einsum on a mesh: the per-device `cost` and the collectives. `to_dict` gives the
    JSON keys (the Cost flattened into `per_device` and the top-level times)."""

    spec: str
    dims: dict[str, int]
    mesh: dict[str, int]
    devices: int
    topology: dict[str, str]
    dtypes: dict[str, str]
    cost: Cost  # per device
    hbm_bytes: dict[str, int]  # per operand and "total"
    shapes: dict[str, list[int]]  # local shapes at compute time
    collectives: tuple[PlannedCollective, ...]
    t_network_predicted_s: float
    overlap: bool
    thresholds: tuple[Threshold, ...]
    total_flops: float  # every device's FLOPs: the work replicated over an axis counts each time
    steps: tuple[str, ...]  # the decisions, in words
    alternatives: tuple[dict[str, Any], ...]  # JSON objects the text reads back
    hardware: dict[str, Any]  # JSON: name, rates and dtype, read back by the text
    padded: dict[str, list[int]] = field(default_factory=dict)
    resident: tuple[str, ...] = ()
    strategy: str | None = None  # `shard`: "along k, output split"
    chip: Chip | None = field(default=None, repr=False, compare=False)
    networks: dict[str, AxisNetwork] = field(default_factory=dict, repr=False, compare=False)

    @property
    def per_device(self) -> PerDevice:
        c = self.cost
        return PerDevice(
            as_number(c.flops),
            self.hbm_bytes,
            as_number(c.net_bytes),
            as_number(c.t_compute_s),
            as_number(c.t_memory_s),
            self.shapes,
        )

    @property
    def t_network_s(self) -> float:
        return as_number(self.cost.t_network_s)

    @property
    def unsharded_flops(self) -> int:
        """The einsum's FLOPs once, on one device (2 x the product of its dims)."""
        from shardline.ops.einsum import parse_einsum

        return parse_einsum(self.spec).flops(self.dims)

    @property
    def bound(self) -> str:
        return str(self.cost.bound)

    @property
    def t_s(self) -> float:
        """The step under the chosen overlap rule."""
        return as_number(step_time(self.cost, self.overlap, serial_network_s(self.collectives)))

    @property
    def t_lower_s(self) -> float:
        return as_number(self.cost.t_lower_s)

    @property
    def t_upper_s(self) -> float:
        """The serial bound: t_compute + t_memory + the collectives one after another."""
        return as_number(self.cost.t_upper_s)

    def to_dict(self) -> JSONDict:
        out: dict[str, object] = {name: getattr(self, name) for name in _KEYS_BEFORE}
        out["resident"] = self.resident
        out["per_device"] = self.per_device
        out["collectives"] = [c.to_dict() for c in self.collectives]
        out.update({name: getattr(self, name) for name in _KEYS_AFTER})
        if out["strategy"] is None:
            out.pop("strategy")
        return jsonable(out)


# --- the planner -----------------------------------------------------------------------------


def _result(
    spec: EinsumSpec, mesh: Mesh, chip: Chip, nets: dict[str, AxisNetwork], price: LayoutPrice
) -> ShardedResult:
    return ShardedResult(
        spec=spec.text(),
        dims=dict(price.dims),
        mesh=dict(mesh.axes),
        devices=mesh.devices,
        topology={a: nets[a].describe() for a in mesh.names},
        dtypes=dict(price.dtypes),
        cost=price.cost,
        hbm_bytes=dict(price.hbm_bytes),
        shapes={k: list(v) for k, v in price.shapes.items()},
        collectives=price.collectives,
        t_network_predicted_s=price.t_network_predicted_s,
        overlap=price.overlap,
        thresholds=(),
        # what the devices run together: per device x devices (an axis that splits no dim of
        # the work repeats it: 2BDF x Z), padding included
        total_flops=as_number(price.cost.flops) * mesh.devices,
        steps=price.steps,
        alternatives=tuple(a.to_dict() for a in price.alternatives),
        hardware={
            "name": chip.name,
            "flops_per_s": price.flops_per_s,
            "mem_bytes_per_s": chip.mem_bytes_per_s,
            "compute_dtype": price.dtypes["compute"],
        },
        padded=dict(price.padded),
        resident=price.resident,
        chip=chip,
        networks=nets,
    )


def plan_sharded(
    spec: EinsumSpec,
    dims: Mapping[str, int],
    mesh: Mesh,
    chip: Chip,
    precision: Precision | None = None,
    network: NetworkOptions | None = None,
    options: ShardOptions | None = None,
) -> ShardedResult:
    """The core: choose the collectives for `spec` on `mesh` and cost the step per device
    (`shardline.sharding.layout.price_layout`), with the network-bound thresholds."""
    require_two_operands(spec, "sharding over a mesh")
    options = options or ShardOptions()
    check_layout(spec, dims, mesh, options)  # the spec's own errors before the network's
    nets = mesh_networks(chip, mesh.axes, network)
    price = price_layout(spec, dims, mesh, nets, chip, precision, options)
    return _with_thresholds(_result(spec, mesh, chip, nets, price), spec)


# --- thresholds ------------------------------------------------------------------------------


def _closed_form(
    c: PlannedCollective, net: AxisNetwork, dim: str, size_name: str, others: Sequence[str]
) -> str | None:
    """`dim < s·P·(D-1)/(2W) + ...` for one collective over one single-stage axis, when its array
    is exactly the product of the other dims (the seed's 1D cases)."""
    active = [s for s in net.stages if s.devices > 1]
    if len(active) != 1:
        return None
    topo = active[0].topology
    sharp = bool(c.cost.in_switch)
    # t_network = c·V/W + hops·α with V = s·(other dims); t_compute = 2·(all dims)/(D·P), so
    # dim* = D·P·c·s/(2W) + hops·α·D·P/(2·others). D·c/2 per topology and kind, as (num, den):
    w = "W" if topo == "switch" else "W_link"
    table = {
        ("all_gather", "ring"): ("(D-1)", f"4·{w}"),
        ("reduce_scatter", "ring"): ("(D-1)", f"4·{w}"),
        ("all_reduce", "ring"): ("(D-1)", f"2·{w}"),
        ("all_gather", "switch"): ("(D-1)", f"2·{w}"),
        ("reduce_scatter", "switch"): ("(D-1)", f"2·{w}"),
        ("all_reduce", "switch"): ("D", f"2·{w}") if sharp else ("(D-1)", w),
    }
    hops_table = {"ring": "⌊D/2⌋", "switch": "", "line": "(D-1)", "unidirectional-ring": "(D-1)"}
    for t in ("line", "unidirectional-ring"):
        table[("all_gather", t)] = ("(D-1)", f"2·{w}")
        table[("reduce_scatter", t)] = ("(D-1)", f"2·{w}")
        table[("all_reduce", t)] = ("(D-1)", w)
    if (c.kind, topo) not in table:
        return None
    num, den = table[(c.kind, topo)]
    hops = hops_table[topo]
    if c.kind == "all_reduce":
        hops = "2·" + hops if hops else "2"
    lat = f"α·{hops}" if hops else "α"
    den = f"({den})" if "·" in den else den
    n, p = _symbols([*others, dim])
    num, lat = num.replace("D", n), lat.replace("D", n)
    return f"{dim} < {size_name}·{p}·{num}/{den} + {lat}·{n}·{p}/(2·{'·'.join(others)})"


def _symbols(dims: Sequence[str]) -> tuple[str, str]:
    """The symbols of the device count and the peak rate in a threshold's formula: D and P,
    unless the einsum names a dim so (then n_dev, P_peak: one letter, one meaning)."""
    taken = set(dims)
    return ("n_dev" if "D" in taken else "D"), ("P_peak" if "P" in taken else "P")


def _formula(result: ShardedResult, spec: EinsumSpec, d: str, others: Sequence[str]) -> str:
    """The closed form for one collective over one single-level axis, else the general one."""
    if len(result.collectives) == 1 and len(result.mesh) == 1:
        c = result.collectives[0]
        op = next(o for o in spec.operands if o.name == c.operand)
        if set(op.dims) == set(others) and len(c.axes) == 1:
            size = f"s_{c.dtype}"
            formula = _closed_form(c, result.networks[c.axes[0]], d, size, list(others))
            if formula is not None:
                return formula
    n, p = _symbols([*others, d])
    return f"{d} < {n}·{p}·t_network/(2·{'·'.join(others)})"


def _dim_thresholds(
    result: ShardedResult, spec: EinsumSpec, d: str, t_bandwidth: float
) -> list[Threshold]:
    others = [o for o in spec.all_dims if o != d]
    formula = _formula(result, spec, d, others)
    # First the bandwidth-only form of docs/sharding.md (K < s_acc·P·(D-1)/(2W) on a
    # switch), then the same with the per-hop latency, which is what `bound` uses.
    current = result.dims[d]
    t_compute = as_number(result.cost.t_compute_s)
    bandwidth_value = current * t_bandwidth / t_compute
    value = current * result.t_network_s / t_compute
    out = [
        Threshold(
            name=f"{d}_network_bound_below",
            formula=formula.split(" + α")[0],
            value=bandwidth_value,
            dim=d,
            current=current,
            network_bound=current < bandwidth_value,
        )
    ]
    if value != bandwidth_value:
        out.append(
            Threshold(
                name=f"{d}_network_bound_below_with_latency",
                formula=formula,
                value=value,
                dim=d,
                current=current,
                network_bound=current < value,
            )
        )
    return out


def _with_thresholds(result: ShardedResult, spec: EinsumSpec) -> ShardedResult:
    """For each dim that no collective's array depends on, the size below which t_network >
    t_compute: t_compute is proportional to the dim, t_network does not change with it, so
    d* = d * t_network / t_compute = D_c·P·t_network / (2·prod(other dims)), D_c = compute split."""
    if not result.collectives or not result.t_network_s > 0 or not spec.contracted:
        return result
    in_arrays: set[str] = set()
    for c in result.collectives:
        op = next(o for o in spec.operands if o.name == c.operand)
        in_arrays |= set(op.dims)
    t_bandwidth = sum((float(c.cost.t_bandwidth_s) for c in result.collectives), 0.0)
    thresholds = [
        t
        for d in spec.all_dims
        if d not in in_arrays
        for t in _dim_thresholds(result, spec, d, t_bandwidth)
    ]
    return dataclasses.replace(result, thresholds=tuple(thresholds))


# --- convenience entry points ----------------------------------------------------------------


class ShardRun(TypedDict, total=False):
    """Keyword options of `shard_matmul` (passed on to `shard_einsum`)."""

    precision: Precision | str  # a str: the dtype of every operand
    rates: RateOverrides | None
    network: NetworkOptions | None
    options: ShardOptions | None


def shard_einsum(
    spec: str | EinsumSpec,
    dims: Mapping[str, int],
    mesh: str | Mapping[str, int] | Mesh,
    hw: str | Chip = "h100-sxm",
    precision: Precision | str | None = None,
    rates: RateOverrides | None = None,
    network: NetworkOptions | None = None,
    options: ShardOptions | None = None,
) -> ShardedResult:
    """A sharded two-operand einsum on a mesh, e.g.
    `shard_einsum("A[M_X,K] * B[K,N_Y] -> C[M_X,N_Y]", {"M": 8192, "K": 8192, "N": 8192},
    "X=4,Y=2", "h100-sxm")`. `precision`: a dtype name for every operand, or a `Precision`
    (per-operand dtypes, compute and reduce dtypes); None: the chip's default dtype.
    """
    parsed = parse_einsum(spec) if isinstance(spec, str) else spec
    require_two_operands(parsed, "sharding over a mesh")
    if isinstance(precision, str):
        precision = Precision(dtype=precision)
    precision = precision or Precision()
    rates = rates or RateOverrides()
    chip = resolve_chip(hw)
    names = (parsed.lhs.name, parsed.rhs.name, parsed.out.name)
    dtypes, compute = resolve_precision(names, chip, precision)
    chip = chip.with_overrides(
        compute_dtype=compute, flops_per_s=rates.flops_per_s, mem_bytes_per_s=rates.mem_bytes_per_s
    )
    resolved = dataclasses.replace(precision, operands=dtypes, compute=compute)
    return plan_sharded(parsed, dims, parse_mesh(mesh), chip, resolved, network, options)


def matmul_spec(along: str, output: str, n_divisible: bool = True) -> str:
    """The seed's 1D strategies as named-axis specs over one mesh axis X."""
    along, output = along.lower(), output.lower()
    if along not in ("m", "n", "k"):
        raise InputError(f"--along must be m, n or k, got {along!r}")
    if output not in ("split", "replicated"):
        raise InputError(f"--output must be split or replicated, got {output!r}")
    whole = output == "replicated"
    if along == "m":
        return f"A[M_X,K] * B[K,N] -> C[{'M' if whole else 'M_X'},N]"
    if along == "n":
        return f"A[M,K] * B[K,N_X] -> C[M,{'N' if whole else 'N_X'}]"
    if whole:
        return "A[M,K_X] * B[K_X,N] -> C[M,N]"
    return "A[M,K_X] * B[K_X,N] -> C[M,N_X]" if n_divisible else "A[M,K_X] * B[K_X,N] -> C[M_X,N]"


def shard_matmul(
    m: int,
    k: int,
    n: int,
    devices: int,
    along: str,
    hw: str | Chip = "h100-sxm",
    *,
    output: str = "split",
    **run: Unpack[ShardRun],
) -> ShardedResult:
    """C[M,N] = A[M,K] B[K,N] split over D devices along M, N or K (seed 000 Part 2).

    Along K with a split output the partial sums are reduce-scattered onto N (onto M when N does
    not divide by D). `run`: `precision`, `rates`, `network`, `options` as for `shard_einsum`.
    """
    devices = check_size(int(devices), "--devices")
    spec = matmul_spec(along, output, n_divisible=n % devices == 0 or m % devices != 0)
    result = shard_einsum(spec, {"M": m, "K": k, "N": n}, {"X": devices}, hw, **run)
    return dataclasses.replace(result, strategy=f"along {along.lower()}, output {output.lower()}")
