"""Rank every 1D and 2D sharding of C[M,N] = A[M,K] B[K,N] over D devices (seed 000 follow-up).

1D: one mesh axis X=D splits M, N or K. 2D: every factorization D = a x b (a, b >= 2) as a mesh
X=a, Y=b (Y innermost), each axis assigned to M, N or K (both on one dim is `M_XY`). For each
strategy the per-device counts and the collectives follow the rules of `shardline.sharding`
(which the tests check strategy by strategy): the K axes leave partial sums that are
reduce-scattered onto N (onto M when N does not divide; `--output split`) or all-reduced and the
whole C all-gathered (`--output replicated`); inputs that are not resident are gathered first.

Collective times are linear in the bytes (`t = c*V + L` for a fixed network), so each network's
(c, L) pairs are priced once per factorization with `shardline.collectives` and the strategies are
then evaluated together with numpy: D = 4096 (13 divisors, about 100 strategies) takes
milliseconds.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardline.collectives import NetworkOptions, collective_over, mesh_networks
from shardline.cost import bound_of
from shardline.dtypes import canonical_dtype, dtype_bits
from shardline.einsum import check_size
from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip
from shardline.serialize import jsonable
from shardline.sharding import DEFAULT_REDUCE_DTYPE

__all__ = ["Strategy", "Comparison", "compare", "compare_strategies", "divisors"]

_DIMS = ("M", "N", "K")


@dataclass(frozen=True)
class Strategy:
    """One way to split the multiply. Field names are the JSON keys (`to_dict`)."""

    spec: str
    mesh: dict[str, int]
    shape: str  # "1D" or "2D"
    assignment: dict[str, str]  # mesh axis -> the dim it splits
    bound: str
    t_s: float  # the time under the chosen overlap rule (what the ranking uses)
    t_lower_s: float
    t_upper_s: float
    t_compute_s: float
    t_memory_s: float
    t_network_s: float
    flops: float  # per device
    hbm_bytes: float  # per device
    collectives: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return jsonable(self)


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
    sweep: tuple[dict[str, Any], ...] = field(default=())

    def to_dict(self) -> dict[str, Any]:
        return jsonable(self)


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, math.isqrt(n) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _meshes(devices: int) -> list[tuple[tuple[str, int], ...]]:
    meshes: list[tuple[tuple[str, int], ...]] = [(("X", devices),)] if devices > 1 else []
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


@dataclass
class _Rows:
    """Column arrays of the strategies, filled per factorization, evaluated at once."""

    specs: list[str] = field(default_factory=list)
    meshes: list[dict[str, int]] = field(default_factory=list)
    assignments: list[dict[str, str]] = field(default_factory=list)
    names: list[tuple[str, ...]] = field(default_factory=list)
    cols: dict[str, list[float]] = field(default_factory=dict)

    def add(self, **values: float) -> None:
        for key, value in values.items():
            self.cols.setdefault(key, []).append(value)


def _coefficients(
    chip: Chip,
    nets: dict[str, Any],
    kind: str,
    axes: list[str],
    cache: dict[tuple[str, tuple[str, ...]], tuple[float, float]],
) -> tuple[float, float]:
    """(c, L) with t = c * V + L for `kind` over `axes` of this mesh (0, 0 when no axes)."""
    if not axes:
        return 0.0, 0.0
    key = (kind, tuple(axes))
    if key not in cache:
        cost = collective_over(kind, 1.0, [nets[a] for a in axes], chip)
        cache[key] = (float(cost.t_bandwidth_s), float(cost.t_latency_s))
    return cache[key]


def _enumerate(
    m: int,
    k: int,
    n: int,
    devices: int,
    chip: Chip,
    output: str,
    resident: frozenset[str],
    network: NetworkOptions | None,
    pad: bool,
) -> tuple[_Rows, int]:
    rows = _Rows()
    excluded = 0
    sizes = {"M": m, "N": n, "K": k}
    for mesh in _meshes(devices):
        names = [a for a, _ in mesh]
        words = {
            a: w for a, w in ((network.topology or {}) if network else {}).items() if a in names
        }  # a bare --topology word names X and Y; 1D meshes have only X
        options = NetworkOptions(
            words,
            network.link_bytes_per_s if network else None,
            network.hop_latency_s if network else None,
        )
        nets = mesh_networks(chip, mesh, options)
        cache: dict[tuple[str, tuple[str, ...]], tuple[float, float]] = {}
        size_of = dict(mesh)
        choices: list[tuple[str, ...]] = (
            [(d,) for d in _DIMS] if len(mesh) == 1 else [(dx, dy) for dx in _DIMS for dy in _DIMS]
        )
        for assign in choices:
            split = {d: [a for a, t in zip(names, assign, strict=True) if t == d] for d in _DIMS}
            shards = {d: math.prod(size_of[a] for a in split[d]) for d in _DIMS}
            out = {"M": list(split["M"]), "N": list(split["N"])}
            if output == "split" and split["K"]:
                onto = "N"
                if n % (shards["N"] * shards["K"]) and not m % (shards["M"] * shards["K"]):
                    onto = "M"
                out[onto] = out[onto] + split["K"]
            elif output == "replicated":
                out = {"M": [], "N": []}
            out_shards = {d: math.prod(size_of[a] for a in out[d]) for d in ("M", "N")}
            even = all(sizes[d] % shards[d] == 0 for d in _DIMS) and all(
                sizes[d] % out_shards[d] == 0 for d in ("M", "N")
            )
            if not even and not pad:
                excluded += 1
                continue
            gather_a = [a for a in names if a not in split["M"] + split["K"]]
            gather_b = [a for a in names if a not in split["K"] + split["N"]]
            c_red, l_red = _coefficients(
                chip,
                nets,
                "reduce_scatter" if output == "split" else "all_reduce",
                split["K"],
                cache,
            )
            c_out, l_out = _coefficients(
                chip,
                nets,
                "all_gather",
                split["M"] + split["N"] if output == "replicated" else [],
                cache,
            )
            c_ga, l_ga = _coefficients(
                chip, nets, "all_gather", gather_a if "A" not in resident else [], cache
            )
            c_gb, l_gb = _coefficients(
                chip, nets, "all_gather", gather_b if "B" not in resident else [], cache
            )
            names_row = []
            if "A" not in resident and gather_a:
                names_row.append(f"all_gather A over {''.join(gather_a)}")
            if "B" not in resident and gather_b:
                names_row.append(f"all_gather B over {''.join(gather_b)}")
            if split["K"]:
                kind = "reduce_scatter" if output == "split" else "all_reduce"
                names_row.append(f"{kind} C over {''.join(split['K'])}")
            if output == "replicated" and split["M"] + split["N"]:
                names_row.append(f"all_gather C over {''.join(split['M'] + split['N'])}")
            rows.specs.append(_spec(split, out))
            rows.meshes.append(dict(mesh))
            rows.assignments.append({a: d for a, d in zip(names, assign, strict=True)})
            rows.names.append(tuple(names_row))
            rows.add(
                pm=shards["M"],
                pn=shards["N"],
                pk=shards["K"],
                two_d=float(len(mesh) == 2),
                c_red=c_red,
                l_red=l_red,
                c_out=c_out,
                l_out=l_out,
                c_ga=c_ga,
                l_ga=l_ga,
                c_gb=c_gb,
                l_gb=l_gb,
            )
    return rows, excluded


def _evaluate(
    rows: _Rows,
    m: int,
    k: int,
    n: int,
    chip: Chip,
    bits: dict[str, int],
    peak: float,
    overlap: bool,
) -> dict[str, Any]:
    col = {key: np.asarray(values, dtype=np.float64) for key, values in rows.cols.items()}
    lm, lk, ln = np.ceil(m / col["pm"]), np.ceil(k / col["pk"]), np.ceil(n / col["pn"])

    def nbytes(elements: Any, b: int) -> Any:
        return np.ceil(elements * b / 8)

    flops = 2 * lm * lk * ln
    a_bytes, b_bytes = nbytes(lm * lk, bits["A"]), nbytes(lk * ln, bits["B"])
    hbm = a_bytes + b_bytes + nbytes(lm * ln, bits["C"])
    v_red = nbytes(lm * ln, bits["reduce"])
    v_out = nbytes(lm * col["pm"] * ln * col["pn"], bits["C"])
    t_net = (
        np.where(col["c_red"] > 0, col["c_red"] * v_red + col["l_red"], 0.0)
        + np.where(col["c_out"] > 0, col["c_out"] * v_out + col["l_out"], 0.0)
        + np.where(col["c_ga"] > 0, col["c_ga"] * a_bytes + col["l_ga"], 0.0)
        + np.where(col["c_gb"] > 0, col["c_gb"] * b_bytes + col["l_gb"], 0.0)
    )
    t_comp = flops / peak
    t_mem = hbm / chip.mem_bytes_per_s
    lower = np.maximum(np.maximum(t_comp, t_mem), t_net)
    serial = np.maximum(t_comp, t_mem) + t_net  # MODEL.md section 5, no overlap
    t_s = lower if overlap else serial
    return {
        "flops": flops,
        "hbm": hbm,
        "t_compute": t_comp,
        "t_memory": t_mem,
        "t_network": t_net,
        "t_lower": lower,
        "t_upper": serial,
        "t_s": t_s,
        "bound": bound_of(t_comp, t_mem, t_net),
        "two_d": col["two_d"],
    }


def _setup(
    chip: Chip | str,
    dtype: str,
    compute_dtype: str | None,
    reduce_dtype: str,
    flops_per_s: float | None,
    mem_bytes_per_s: float | None,
) -> tuple[Chip, dict[str, int], float, str]:
    dtype = canonical_dtype(dtype)
    compute = canonical_dtype(compute_dtype) if compute_dtype else dtype
    resolved = resolve_chip(chip).with_overrides(
        compute_dtype=compute, flops_per_s=flops_per_s, mem_bytes_per_s=mem_bytes_per_s
    )
    bits = {
        "A": dtype_bits(dtype),
        "B": dtype_bits(dtype),
        "C": dtype_bits(dtype),
        "reduce": dtype_bits(reduce_dtype),
    }
    return resolved, bits, resolved.peak(compute), compute


def _rank(rows: _Rows, ev: dict[str, Any]) -> list[Strategy]:
    order = np.lexsort((np.arange(len(rows.specs)), ev["two_d"], ev["t_upper"], ev["t_s"]))
    strategies = []
    for i in order:
        strategies.append(
            Strategy(
                spec=rows.specs[i],
                mesh=rows.meshes[i],
                shape="2D" if ev["two_d"][i] else "1D",
                assignment=rows.assignments[i],
                bound=str(ev["bound"][i]),
                t_s=float(ev["t_s"][i]),
                t_lower_s=float(ev["t_lower"][i]),
                t_upper_s=float(ev["t_upper"][i]),
                t_compute_s=float(ev["t_compute"][i]),
                t_memory_s=float(ev["t_memory"][i]),
                t_network_s=float(ev["t_network"][i]),
                flops=float(ev["flops"][i]),
                hbm_bytes=float(ev["hbm"][i]),
                collectives=rows.names[i],
            )
        )
    return strategies


def _check(m: int, k: int, n: int, devices: int, output: str) -> None:
    for value, name in ((m, "M"), (k, "K"), (n, "N"), (devices, "--devices")):
        check_size(value, name)
    if output not in ("split", "replicated"):
        raise InputError(f"--output must be split or replicated, got {output!r}")


def compare(
    m: int,
    k: int,
    n: int,
    devices: int,
    chip: Chip | str,
    *,
    dtype: str = "bf16",
    compute_dtype: str | None = None,
    output: str = "split",
    resident: Iterable[str] | None = None,
    network: NetworkOptions | None = None,
    overlap: bool = True,
    pad: bool = False,
    reduce_dtype: str = DEFAULT_REDUCE_DTYPE,
    flops_per_s: float | None = None,
    mem_bytes_per_s: float | None = None,
) -> list[Strategy]:
    """Every 1D and 2D strategy for D devices, fastest first (ties: lower serial time, 1D first).

    >>> best = compare(8192, 8192, 8192, 8, "h100-sxm")[0]
    >>> best.bound, best.t_network_s
    ('compute', 0.0)
    """
    _check(m, k, n, devices, output)
    resolved, bits, peak, _ = _setup(
        chip, dtype, compute_dtype, reduce_dtype, flops_per_s, mem_bytes_per_s
    )
    names = frozenset(r.upper() for r in resident) if resident is not None else frozenset("AB")
    rows, _ = _enumerate(m, k, n, devices, resolved, output, names, network, pad)
    if not rows.specs:
        return []
    return _rank(rows, _evaluate(rows, m, k, n, resolved, bits, peak, overlap))


def compare_strategies(
    m: int,
    k: int,
    n: int,
    devices: int,
    chip: Chip | str,
    *,
    dtype: str = "bf16",
    compute_dtype: str | None = None,
    output: str = "split",
    resident: Iterable[str] | None = None,
    network: NetworkOptions | None = None,
    overlap: bool = True,
    pad: bool = False,
    reduce_dtype: str = DEFAULT_REDUCE_DTYPE,
    flops_per_s: float | None = None,
    mem_bytes_per_s: float | None = None,
    sweep_max_devices: int = 4096,
) -> Comparison:
    """`compare` plus the verdict: best 1D vs best 2D here, and the smallest power-of-two device
    count (up to max(D, sweep_max_devices)) at which 2D beats 1D for these shapes."""
    _check(m, k, n, devices, output)
    resolved, bits, peak, compute = _setup(
        chip, dtype, compute_dtype, reduce_dtype, flops_per_s, mem_bytes_per_s
    )
    names = frozenset(r.upper() for r in resident) if resident is not None else frozenset("AB")
    unknown = names - {"A", "B"}
    if unknown:
        raise InputError(f"--resident names {', '.join(sorted(unknown))}; the inputs are A and B")
    rows, excluded = _enumerate(m, k, n, devices, resolved, output, names, network, pad)
    if not rows.specs:
        raise InputError(
            f"no strategy splits M={m}, K={k}, N={n} evenly over {devices} devices; "
            "pass --pad to pad the dimensions"
        )
    strategies = _rank(rows, _evaluate(rows, m, k, n, resolved, bits, peak, overlap))
    best_1d = next((s for s in strategies if s.shape == "1D"), None)
    best_2d = next((s for s in strategies if s.shape == "2D"), None)
    speedup = best_1d.t_s / best_2d.t_s if best_1d and best_2d and best_2d.t_s > 0 else None
    sweep: list[dict[str, Any]] = []
    crossover = None
    top = max(devices, sweep_max_devices)
    d = 4
    while d <= top:
        try:
            sub_rows, _ = _enumerate(m, k, n, d, resolved, output, names, network, pad)
        except InputError:  # beyond what the chip's network can hold
            break
        if sub_rows.specs:
            ev = _evaluate(sub_rows, m, k, n, resolved, bits, peak, overlap)
            one = ev["t_s"][ev["two_d"] == 0]
            two = ev["t_s"][ev["two_d"] == 1]
            if one.size and two.size:
                wins = bool(two.min() < one.min() * (1 - 1e-9))
                sweep.append(
                    {
                        "devices": d,
                        "best_1d_s": float(one.min()),
                        "best_2d_s": float(two.min()),
                        "two_d_wins": wins,
                    }
                )
                if wins and crossover is None:
                    crossover = d
        d *= 2
    return Comparison(
        m=m,
        k=k,
        n=n,
        devices=devices,
        hardware=resolved.name,
        dtype=compute,
        output=output,
        overlap=overlap,
        strategies=tuple(strategies),
        excluded=excluded,
        best_1d=best_1d,
        best_2d=best_2d,
        two_d_wins=bool(best_1d and best_2d and best_2d.t_s < best_1d.t_s * (1 - 1e-9)),
        speedup_2d_over_1d=speedup,
        crossover_devices=crossover,
        sweep_max_devices=top,
        sweep=tuple(sweep),
    )
