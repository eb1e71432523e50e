"""The plan search: candidate degrees (one product over divisors, one factor per registered
strategy), the microbatch counts to try, and the ranking."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, fields
from itertools import islice
from math import ceil, gcd, prod
from pathlib import PurePath
from typing import Any

from shardline.basics.framework import load_framework
from shardline.basics.options import Execution, RateOverrides
from shardline.basics.units import fmt_bytes, short
from shardline.collectives import NetworkOptions
from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip
from shardline.models import workload_of
from shardline.ops.cost import TIE_RTOL
from shardline.planning.evaluate import Context, evaluate_plan
from shardline.planning.folding import (
    EDP_KEY,
    FOLD_KEY,
    FOLDED_ONE,
    megatron_hint,
    megatron_stated,
)
from shardline.planning.reasons import reason
from shardline.planning.results import OBJECTIVES, PlanResult, PlanSet
from shardline.strategies import Degrees, Strategy, names, strategies, strategy
from shardline.strategies.base import divisors as strategy_divisors
from shardline.strategies.pp import MAX_STAGES
from shardline.strategies.tp import tensor_room, tensor_rooms
from shardline.workload.modelspec import ModelSpec
from shardline.workload.stack import apply_overrides
from shardline.workload.workload import Workload

__all__ = [
    "PlanOptions",
    "plan",
    "plan_with",
    "candidates",
    "assignments",
    "divisors",
    "tensor_limit",
    "MAX_DEVICES",
    "MAX_STAGES",
]


@dataclass(frozen=True)
class PlanOptions:
    """What the search may choose: fixed degrees by strategy name (None: free), a fixed
    microbatch count, the objective, whether no fit is an error, and rate overrides."""

    degrees: Mapping[str, int | None] = field(default_factory=dict)
    microbatches: int | None = None
    objective: str = "predicted"
    require_fit: bool = True
    rates: RateOverrides = field(default_factory=RateOverrides)
    execution: Execution = field(default_factory=Execution)
    network: NetworkOptions | None = None  # --topology, --link-bw, --latency, library choices


EXECUTION_FIELDS = tuple(f.name for f in fields(Execution))


def divisors(n: int) -> list[int]:
    """The divisors of n, ascending (from its prime factors)."""
    return list(strategy_divisors(n))


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
        relation = "exceeds" if total > devices else "does not divide"
        raise InputError(
            f"the degrees given ({', '.join(f'{k}={v}' for k, v in given.items())}) "
            f"multiply to {total}, which {relation} the {devices} devices{megatron_hint(given)}"
        )
    if len(given) == len(names()) and total != devices:
        raise InputError(f"{' x '.join(names())} = {total}, not the {devices} devices")
    batch_split = [
        s.name for s in strategies() if "batch" in s.splits and (not s.optional or s.name in given)
    ]
    replicas = prod(given.get(name, 1) for name in batch_split)
    if replicas > workload.batch:
        raise InputError(
            f"{' x '.join(batch_split)} = {replicas} splits a batch of only {workload.batch} "
            f"{workload.item}s (the batch dim {workload.batch_dim}): each replica needs one"
        )


# At most 2**24 = 16,777,216 devices: about 80 times the largest clusters built so far (about
# 200,000 GPUs in 2024-2025), and small enough that its divisors (at most 25 for a power of two,
# a few thousand for the most composite counts below it) keep the search to seconds.
MAX_DEVICES = 2**24
# At most 1,000 candidate plans per search (each costs a few milliseconds with its microbatch
# counts): 8 to 4,096 devices give tens to a few hundred; past it the search asks for fixed degrees.
MAX_CANDIDATES = 1000


def tensor_limit(workload: Workload) -> tuple[int, str]:
    """The largest tensor-parallel degree every layer can split, and the layer that sets it
    (strategies/tp.py's `tensor_room`; MAX_DEVICES when no layer has tensor-parallel dims)."""
    return tensor_room(workload) or (MAX_DEVICES, "")


def _degree_ok(workload: Workload, s: Strategy, degree: int, free: bool, every: bool) -> bool:
    """May the search use this degree? A fixed one: the strategy must accept it (`valid`); a
    free one: the strategy's search must try it (`tries`, within `bound`). A strategy the plan
    search leaves alone (`searched` False: cp) is tried only when fixed, or when `every` asks for
    the whole space (`shardline search`)."""
    if degree == 1:
        return True
    if not free:
        return s.valid(workload, degree)
    if not s.searched and not every:
        return False
    bound = s.bound(workload)
    return (bound is None or degree <= bound) and s.tries(workload, degree)


def _degree_options(
    workload: Workload, s: Strategy, left: int, last: bool, want: int | None, every: bool
) -> tuple[int, ...]:
    """The degrees of strategy `s` a branch tries with `left` devices left, ascending: the fixed
    one, the rest of the devices for the last strategy, else the strategy's `search_range` (1
    alone for one the search leaves alone)."""
    if want is not None:
        ok = left % want == 0 and (not last or want == left)
        return (want,) if ok and _degree_ok(workload, s, want, False, every) else ()
    if last:
        return (left,) if _degree_ok(workload, s, left, True, every) else ()
    if not s.searched and not every:
        return (1,)
    return s.search_range(workload, left)


def assignments(
    workload: Workload, devices: int, fixed: Mapping[str, int | None], every: bool = False
) -> Iterator[Degrees]:
    """Each registered strategy a degree from its range (`_degree_options`) out of what the
    strategies before it leave, the last the rest, in ascending lexicographic order; a branch
    stops as soon as its batch splits exceed the batch, so that the work follows the plans that
    can run, not the divisors of D to the fourth power. `every`: strategies the plan search
    leaves at 1 (`searched` False) are searched too (the training search)."""
    regs = strategies()
    last = len(regs) - 1

    def walk(i: int, left: int, chosen: tuple[int, ...], replicas: int) -> Iterator[Degrees]:
        s = regs[i]
        for d in _degree_options(workload, s, left, i == last, fixed.get(s.name), every):
            split = replicas * d if "batch" in s.splits else replicas
            if split > workload.batch or (split > 1 and workload.batch_dim is None):
                break  # the degrees ascend: larger ones split the batch further still
            if i == last:
                yield Degrees(dict(zip((r.name for r in regs), (*chosen, d), strict=True)))
            else:
                yield from walk(i + 1, left // d, (*chosen, d), split)

    yield from walk(0, devices, (), 1)


def _searched_flags() -> str:
    """The flags of the strategies every plan search sets: "--tp, --pp, --dp, --fsdp"."""
    return ", ".join(f"--{s.word}" for s in strategies() if s.searched and not s.optional)


def _folded(
    workload: Workload, devices: int, fixed: Mapping[str, int | None], interleave: int
) -> list[Degrees]:
    """The candidates of a folded layout (`--etp`, or Megatron-Core's convention with etp =
    tp): the attention's degrees (tp, pp, dp, fsdp, cp; the free ones searched, dp derived)
    over the devices, each folded with the experts' ep and etp (Degrees, `fold`); the first
    fold's refusal when none folds."""
    etp, edp = fixed.get(FOLD_KEY), fixed.get(EDP_KEY)
    attention = {k: v for k, v in fixed.items() if k not in (FOLD_KEY, EDP_KEY)}
    for name in FOLDED_ONE:  # folded layouts state no FSDP and no cp unless given
        attention[name] = attention.get(name) or 1
    ep = attention.pop("ep") or 1  # _check_options: --etp needs --ep
    if etp is None:
        etp = attention.get("tp") or 1
    attention["ep"] = 1
    strategy("ep").check(workload, ep)  # a MoE workload whose experts ep divides
    out: list[Degrees] = []
    refused: InputError | None = None
    for deg in candidates(workload, devices, attention, interleave):
        stated: dict[str, int] = {**deg.as_dict(), "ep": ep, FOLD_KEY: etp}
        if edp is not None:  # checked against the derived one (Degrees, fold)
            stated[EDP_KEY] = edp
        try:
            out.append(Degrees(stated))
        except InputError as e:
            refused = refused or e
    if not out and refused is not None:
        raise refused
    return out


def candidates(
    workload: Workload, devices: int, fixed: Mapping[str, int | None], interleave: int = 1
) -> list[Degrees]:
    """Every assignment of a divisor of `devices` to each registered strategy whose product is the
    device count, that keeps the fixed degrees, that every strategy accepts (`valid`) and whose
    pipeline stages hold `interleave` chunks each. A folded layout (`etp` given, or Megatron-Core's
    convention: `megatron_stated`) gives its folded candidates (`_folded`)."""
    if fixed.get(FOLD_KEY) is not None or megatron_stated(devices, fixed):
        return _folded(workload, devices, fixed, interleave)
    _check_fixed(workload, devices, fixed)
    for s in strategies():  # the pipeline's fixed stages must hold the interleaved chunks
        stages = fixed.get(s.name)
        if (
            "layers" in s.splits
            and stages is not None
            and not workload.chunks_fit(stages, interleave)
        ):
            held = min(workload.stage_blocks(stages)) if stages <= workload.repeat else 0
            raise InputError(
                f"interleave {interleave} needs at least {interleave} blocks per pipeline stage; "
                f"{s.name}={stages} gives {held} of the {workload.repeat} blocks"
            )
    found = (
        d
        for d in assignments(workload, devices, fixed)
        if workload.chunks_fit(d.stages, interleave)
    )
    out = list(islice(found, MAX_CANDIDATES + 1))
    if len(out) > MAX_CANDIDATES:
        raise InputError(
            f"{devices:,} devices give more than {MAX_CANDIDATES:,} candidate plans for this "
            f"workload, too many to evaluate in seconds; fix some degrees ({_searched_flags()}) "
            "or give a device count with fewer divisors"
        )
    if not out:
        room = tensor_limit(workload)[0]
        common = gcd(*(size for size, _ in tensor_rooms(workload))) or room
        raise InputError(
            f"no plan over {devices:,} devices is possible: the degrees must multiply to "
            f"{devices:,}, the batch splits at most the batch ({workload.batch:,}), a searched "
            f"tensor-parallel degree divide every layer's tensor-parallel dims (a divisor of "
            f"{common:,}; --tp may fix an uneven one up to {room:,}) and pipeline stages split "
            f"the {workload.layer_count:,} layers (at most {MAX_STAGES:,} stages); give another "
            f"device count or fix the degrees ({_searched_flags()})"
        )
    return out


def _options(
    microbatches: int | None, objective: str, require_fit: bool, given: Mapping[str, Any]
) -> PlanOptions:
    """PlanOptions from plan()'s keywords: a degree per strategy name (tp=2), the rate
    overrides flops_per_s and mem_bytes_per_s, and the fields of shardline.basics.options.Execution
    (interleave=3, recompute="full", sequence_parallel=True, ...)."""
    rates = {k: given[k] for k in ("flops_per_s", "mem_bytes_per_s") if k in given}
    execution = {k: given[k] for k in EXECUTION_FIELDS if k in given and given[k] is not None}
    execution = framework_defaults(execution.get("framework")) | execution
    unknown = (
        set(given)
        - set(rates)
        - set(names())
        - set(EXECUTION_FIELDS)
        - {"network", FOLD_KEY, EDP_KEY}
    )
    if unknown:
        raise TypeError(f"plan() got unexpected keyword argument(s) {', '.join(sorted(unknown))}")
    degrees = {name: given.get(name) for name in names()}
    for key in (FOLD_KEY, EDP_KEY):
        if given.get(key) is not None:
            degrees[key] = given[key]
    return PlanOptions(
        degrees,
        microbatches,
        objective,
        require_fit,
        RateOverrides(**rates),
        Execution(**execution),
        given.get("network"),
    )


def framework_defaults(name: str | None) -> dict[str, Any]:
    """The execution fields a framework sets when the run does not (shardline.basics.framework),
    with its name; {} for the default framework, whose defaults are Execution's own."""
    if name is None:
        return {}
    fw = load_framework(name)
    return {**fw.defaults, "framework": fw.name}


def _check_execution(ex: Execution) -> None:
    """What Execution itself lets through: booleans for numbers, tokens past a float."""
    if isinstance(ex.zero, bool):
        raise InputError(f"zero must be 0, 1, 2 or 3, got {ex.zero!r}")
    t = ex.tokens
    if t is not None and (isinstance(t, bool) or not t < 1e30):
        raise InputError(f"tokens must be a positive number below 1e30, got {short(t)}")


def _check_options(workload: Workload, devices: int, opts: PlanOptions) -> None:
    if not isinstance(workload, Workload):
        raise InputError(f"plan() needs a Workload, got {type(workload).__name__}")
    if isinstance(devices, bool) or not isinstance(devices, int) or devices < 1:
        raise InputError(f"devices must be a positive integer, got {devices!r}")
    if devices > MAX_DEVICES:
        raise InputError(
            f"devices = {short(devices)} is more than the {MAX_DEVICES:,} (2**24) a plan searches"
        )
    _check_execution(opts.execution)
    if opts.objective not in OBJECTIVES:
        raise InputError(
            f"objective must be one of {', '.join(OBJECTIVES)}, got {opts.objective!r}"
        )
    for name, value in opts.degrees.items():
        _check_degree(name, value, devices)
    if opts.degrees.get(EDP_KEY) is not None and opts.degrees.get(FOLD_KEY) is None:
        raise InputError("--edp (expert data parallelism) is derived; it goes with --etp")
    if opts.degrees.get(FOLD_KEY) is not None and opts.degrees.get("ep") is None:
        raise InputError(
            "--etp (expert tensor parallelism) needs --ep: the experts run on etp x ep x edp "
            "x pp ranks"
        )
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
    workload: Workload | str | PurePath | ModelSpec,
    hw: str | Chip = "h100-sxm",
    devices: int = 8,
    *,
    microbatches: int | None = None,
    objective: str = "predicted",
    require_fit: bool = True,
    options: PlanOptions | None = None,
    **given: object,
) -> PlanSet:
    """Every combination of the registered strategies' degrees over `devices` (a keyword per
    strategy fixes its degree: `tp=`, `pp=`, `dp=`, `fsdp=`, `ep=`, `cp=` today; each strategy's
    `search_range` gives the free ones), each with its best microbatch count, sorted best first.
    `flops_per_s=` and `mem_bytes_per_s=` override the chip's rates; `options` gives all of it as
    one PlanOptions.

    With `require_fit` (the default) a workload that fits on no plan raises InputError naming the
    smallest memory per device it would need. `workload` may also be a zoo model's name, a model
    .toml file or a ModelSpec: its training step at batch 1 and 4096 tokens, as `--model` gives
    (`shardline.models.workload_of` for another phase, batch or length).
    """
    w = _as_workload(workload)
    opts = options or _options(microbatches, objective, require_fit, given)
    return plan_with(w, hw, devices, opts, None)


def plan_with(w: Workload, hw: str | Chip, devices: int, opts: PlanOptions, shared: Any) -> PlanSet:
    """`plan` of a Workload under `opts`; `shared`: None, or a batch sweep's hook (`_search`)."""
    _check_options(w, devices, opts)
    rates = opts.rates
    chip = apply_overrides(resolve_chip(hw), w, rates.flops_per_s, rates.mem_bytes_per_s)
    _check_comm_sms(opts.execution.ep_comm_sms, chip)
    results = _search(w, chip, devices, opts, shared)
    key = _sort_key(opts.objective)
    results.sort(key=key)
    fits = [r for r in results if r.fits]
    if not fits:
        smallest = min(results, key=lambda r: r.memory_per_device_bytes)
        message = (
            f"the workload fits on no plan over {devices} x {chip.name}: the smallest needs "
            f"{fmt_bytes(smallest.memory_per_device_bytes)} per device ({smallest.name}, "
            f"{smallest.memory_per_device_bytes:.4g} B) but each has "
            f"{fmt_bytes(chip.usable_capacity_bytes)}; add devices, shrink the batch or use a chip "
            "with more memory"
        )
        if opts.require_fit:
            raise InputError(message)
        return PlanSet(w, chip, devices, opts.objective, results, None, message, opts.execution)
    why = reason(fits, results, opts.objective, chip)
    return PlanSet(w, chip, devices, opts.objective, results, fits[0].name, why, opts.execution)


def _as_workload(workload: Any) -> Workload:
    """A zoo model's name, a model file or a ModelSpec as its Workload (`workload_of`'s
    defaults); anything else must be a Workload already (`_check_options` says so)."""
    if isinstance(workload, str | PurePath | ModelSpec):
        return workload_of(workload)
    return workload


def _check_comm_sms(sms: int, chip: Chip) -> None:
    """The dispatch kernels must leave the compute some SMs (cores)."""
    cores = chip.on_chip.cores if chip.on_chip is not None else None
    if sms and cores and sms >= cores:
        raise InputError(
            f"--ep-comm-sms {sms} leaves no SMs for the compute: {chip.name} has {cores}"
        )


def _search(
    workload: Workload, chip: Chip, devices: int, opts: PlanOptions, shared: Any = None
) -> list[PlanResult]:
    """Each candidate with its best microbatch count (on a tie the fewest microbatches, the
    simplest schedule); a candidate where nothing fits keeps its smallest-memory count."""
    ctx = Context(workload, chip, opts.execution, opts.network)
    if shared is not None:  # a batch sweep's (`sweep.batch_planner`)
        shared(ctx)
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
