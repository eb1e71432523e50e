"""The plan search: candidate degrees (one product over divisors, one factor per registered
strategy), the microbatch counts to try, and the ranking."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from itertools import product
from math import ceil, prod
from typing import Any

from shardline.collectives import NetworkOptions
from shardline.cost import TIE_RTOL
from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip
from shardline.options import Execution, RateOverrides
from shardline.planning.evaluate import Context, evaluate_plan
from shardline.planning.reasons import reason
from shardline.planning.results import OBJECTIVES, PlanResult, PlanSet
from shardline.stack import apply_overrides
from shardline.strategies import Degrees, names, strategies
from shardline.units import fmt_bytes
from shardline.workload import Workload

__all__ = ["PlanOptions", "plan", "candidates", "divisors"]


@dataclass(frozen=True)
class PlanOptions:
    """What the search may choose: fixed degrees by strategy name (None: free), a fixed
    microbatch count, the objective, whether no fit is an error, and rate overrides."""

    degrees: Mapping[str, int | None] = field(default_factory=dict)
    microbatches: int | None = None
    objective: str = "latency"
    require_fit: bool = True
    rates: RateOverrides = field(default_factory=RateOverrides)
    execution: Execution = field(default_factory=Execution)
    network: NetworkOptions | None = None  # --topology, --link-bw, --latency, library choices


EXECUTION_FIELDS = tuple(f.name for f in fields(Execution))


def divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def _microbatch_candidates(per_replica: int, deg: Degrees, training: bool) -> list[int]:
    stages = deg.stages
    if stages == 1 and not training:
        return [1]
    found = divisors(per_replica)
    if len(found) > 24:  # keep the search small: powers of two, multiples of P, the largest
        keep = {d for d in found if d & (d - 1) == 0 or d % stages == 0 and d <= 8 * stages}
        keep.add(per_replica)
        found = sorted(keep)
    return found


# sort keys round to the significant digits of the one tie tolerance (1e-9 -> 9 digits)
_TIE_DIGITS = round(-math.log10(TIE_RTOL))


def _close(value: float) -> float:
    """Times rounded to the tie tolerance's digits, so that float noise does not break a tie."""
    return float(f"{value:.{_TIE_DIGITS}g}")


def _sort_key(objective: str) -> Callable[[PlanResult], tuple[float, ...]]:
    """Plans that fit first; then the objective; ties go to the faster plan without overlap, then
    to less memory per device."""
    if objective == "throughput":
        return lambda p: (
            0 if p.fits else 1,
            -_close(p.throughput_per_s),
            _close(p.latency_s),
            _close(p.latency_upper_s),
            p.memory_per_device_bytes,
        )
    if objective == "predicted":
        return lambda p: (
            0 if p.fits else 1,
            _close(p.predicted_s),
            _close(p.latency_s),
            -_close(p.throughput_per_s),
            p.memory_per_device_bytes,
        )
    return lambda p: (
        0 if p.fits else 1,
        _close(p.latency_s),
        _close(p.latency_upper_s),
        -_close(p.throughput_per_s),
        p.memory_per_device_bytes,
    )


def _check_degree(name: str, value: int | None, devices: int) -> None:
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise InputError(f"{name} must be a positive integer, got {value!r}")
    if devices % value:
        raise InputError(f"{name}={value} does not divide the {devices} devices")


def _check_fixed(workload: Workload, devices: int, fixed: Mapping[str, int | None]) -> None:
    """The degrees the user fixed must multiply to a divisor of the devices (all of them when
    every degree is fixed), each must be valid for its strategy, and the batch must cover them."""
    given = {k: v for k, v in fixed.items() if v is not None}
    for s in strategies():
        if s.name in given:
            s.check(workload, given[s.name])
    total = prod(given.values())
    if devices % total:
        raise InputError(
            f"the degrees given ({', '.join(f'{k}={v}' for k, v in given.items())}) "
            f"multiply to {total}, which does not divide the {devices} devices"
        )
    if len(given) == len(names()) and total != devices:
        raise InputError(f"{' x '.join(names())} = {total}, not the {devices} devices")
    batch_split = [s.name for s in strategies() if "batch" in s.splits]
    replicas = prod(given.get(name, 1) for name in batch_split)
    if replicas > workload.batch:
        raise InputError(
            f"{' x '.join(batch_split)} = {replicas} splits a batch of only {workload.batch} "
            f"{workload.batch_dim or 'items'}"
        )


def candidates(
    workload: Workload, devices: int, fixed: Mapping[str, int | None], interleave: int = 1
) -> list[Degrees]:
    """Every assignment of a divisor of `devices` to each registered strategy whose product is the
    device count, that keeps the fixed degrees, that every strategy accepts (`valid`) and whose
    pipeline stages hold `interleave` chunks each."""
    _check_fixed(workload, devices, fixed)
    pp = fixed.get("pp")
    if pp is not None and not workload.chunks_fit(pp, interleave):
        raise InputError(
            f"interleave {interleave} needs at least {interleave} blocks per pipeline stage; "
            f"pp={pp} gives {min(workload.stage_blocks(pp)) if pp <= workload.repeat else 0} "
            f"of the {workload.repeat} blocks"
        )
    regs = strategies()
    options = divisors(devices)
    out: list[Degrees] = []
    for combo in product(options, repeat=len(regs)):
        if prod(combo) != devices:
            continue
        deg = Degrees(dict(zip((s.name for s in regs), combo, strict=True)))
        if any(v is not None and deg[k] != v for k, v in fixed.items()):
            continue
        if not all(s.valid(workload, deg[s.name]) for s in regs):
            continue
        if not workload.chunks_fit(deg.stages, interleave):
            continue
        if deg.replicas > workload.batch or (deg.replicas > 1 and workload.batch_dim is None):
            continue
        out.append(deg)
    if not out:
        raise InputError(
            f"no plan over {devices} devices is possible: the batch ({workload.batch}) is too "
            f"small to split and the {workload.layer_count} layers do not divide evenly"
        )
    return out


def _options(
    microbatches: int | None, objective: str, require_fit: bool, given: Mapping[str, Any]
) -> PlanOptions:
    """PlanOptions from plan()'s keywords: a degree per strategy name (tp=2), the rate
    overrides flops_per_s and mem_bytes_per_s, and the fields of shardline.options.Execution
    (interleave=3, recompute="full", sequence_parallel=True, ...)."""
    rates = {k: given[k] for k in ("flops_per_s", "mem_bytes_per_s") if k in given}
    execution = {k: given[k] for k in EXECUTION_FIELDS if k in given and given[k] is not None}
    unknown = set(given) - set(rates) - set(names()) - set(EXECUTION_FIELDS) - {"network"}
    if unknown:
        raise TypeError(f"plan() got unexpected keyword argument(s) {', '.join(sorted(unknown))}")
    degrees = {name: given.get(name) for name in names()}
    return PlanOptions(
        degrees, microbatches, objective, require_fit, RateOverrides(**rates),
        Execution(**execution), given.get("network"),
    )  # fmt: skip


def _check_options(workload: Workload, devices: int, opts: PlanOptions) -> None:
    if not isinstance(workload, Workload):
        raise InputError(f"plan() needs a Workload, got {type(workload).__name__}")
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise InputError(f"devices must be a positive integer, got {devices!r}")
    if opts.objective not in OBJECTIVES:
        raise InputError(
            f"objective must be one of {', '.join(OBJECTIVES)}, got {opts.objective!r}"
        )
    for name, value in opts.degrees.items():
        _check_degree(name, value, devices)
    m = opts.microbatches
    if m is not None:
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise InputError(f"microbatches must be a positive integer, got {m!r}")
        if m > workload.batch:
            raise InputError(
                f"{m} microbatches is more than the batch of "
                f"{workload.batch} {workload.batch_dim or 'items'}"
            )


def plan(
    workload: Workload,
    hw: str | Chip = "h100-sxm",
    devices: int = 8,
    *,
    microbatches: int | None = None,
    objective: str = "latency",
    require_fit: bool = True,
    options: PlanOptions | None = None,
    **given: Any,
) -> PlanSet:
    """Every combination of the registered strategies' degrees (today tensor, pipeline, data and
    fully-sharded data parallelism: `tp=`, `pp=`, `dp=`, `fsdp=` fix one) over `devices`, each
    with its best microbatch count, sorted best first. `flops_per_s=` and `mem_bytes_per_s=`
    override the chip's rates; `options` gives all of it as one PlanOptions.

    With `require_fit` (the default) a workload that fits on no plan raises InputError naming the
    smallest memory per device it would need.
    """
    opts = options or _options(microbatches, objective, require_fit, given)
    _check_options(workload, devices, opts)
    rates = opts.rates
    chip = apply_overrides(resolve_chip(hw), workload, rates.flops_per_s, rates.mem_bytes_per_s)
    results = _search(workload, chip, devices, opts)
    key = _sort_key(opts.objective)
    results.sort(key=key)
    fits = [r for r in results if r.fits]
    if not fits:
        smallest = min(results, key=lambda r: r.memory_per_device_bytes)
        message = (
            f"the workload fits on no plan over {devices} x {chip.name}: the smallest needs "
            f"{fmt_bytes(smallest.memory_per_device_bytes)} per device ({smallest.name}, "
            f"{smallest.memory_per_device_bytes:.4g} B) but each has "
            f"{fmt_bytes(chip.capacity_bytes)}; add devices, shrink the batch or use a chip "
            "with more memory"
        )
        if opts.require_fit:
            raise InputError(message)
        return PlanSet(
            workload, chip, devices, opts.objective, results, None, message, opts.execution
        )
    why = reason(fits, results, opts.objective, chip)
    return PlanSet(
        workload, chip, devices, opts.objective, results, fits[0].name, why, opts.execution
    )


def _search(workload: Workload, chip: Chip, devices: int, opts: PlanOptions) -> list[PlanResult]:
    """Each candidate with its best microbatch count (on a tie the fewest microbatches, the
    simplest schedule); a candidate where nothing fits keeps its smallest-memory count."""
    ctx = Context(workload, chip, opts.execution, opts.network)
    key = _sort_key(opts.objective)
    results: list[PlanResult] = []
    for deg in candidates(workload, devices, opts.degrees, opts.execution.interleave):
        per_replica = ceil(workload.batch / deg.replicas)
        if opts.microbatches is not None:
            if opts.microbatches > per_replica:
                continue
            counts = [opts.microbatches]
        else:
            counts = _microbatch_candidates(per_replica, deg, workload.training)
        evaluated = [evaluate_plan(ctx, deg, m) for m in counts]
        fitting = [r for r in evaluated if r.fits]
        results.append(
            min(fitting, key=lambda r: (*key(r)[:4], r.microbatches))
            if fitting
            else min(evaluated, key=lambda r: (r.memory_per_device_bytes, r.latency_s))
        )
    if not results:
        raise InputError(
            f"{opts.microbatches} microbatches is more than the batch per replica of every "
            f"plan over {devices} devices"
        )
    return results
