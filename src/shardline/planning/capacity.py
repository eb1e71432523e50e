"""The largest batch or sequence length that fits: doubling, then bisection on the integer.

Each probe runs the plan search (`plan`) at one value with the degrees the user fixed kept fixed
and the free ones searched; a value *fits* when at least one plan fits in memory. The search
assumes that fitting is monotone: for one layout and microbatch count every memory term either
stays put (weights, gradients, optimizer state) or grows with the batch or the sequence length
(activations, KV cache), so past the first value that does not fit none does. With free degrees
a larger batch can also admit more batch-split replicas, so near the smallest batches fitting is
not strictly monotone; whatever happens in between, the answer is checked at its edge: `value`
fits and `value + 1` does not.

With free microbatches a training step splits the batch into microbatches as small as one item
(gradient accumulation), so its memory need not grow with the batch at all: the search then stops
at `limit` and says so (`at_limit`). Fix the microbatch count to bound the batch by memory.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from math import prod

from shardline.basics.serialize import jsonable
from shardline.basics.values import JSONDict
from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip
from shardline.planning.results import PlanResult, PlanSet
from shardline.planning.search import PlanOptions, plan
from shardline.strategies import strategies
from shardline.workload.workload import Workload

__all__ = [
    "Capacity",
    "BatchForMfu",
    "batch_for_mfu",
    "max_batch",
    "max_seq_len",
    "DEFAULT_LIMIT",
    "WHAT",
]

DEFAULT_LIMIT = 2**24  # the largest value the search tries unless told
WHAT = ("batch", "seq_len")


@dataclass(frozen=True)
class Capacity:
    """The largest `what` ("batch" or "seq_len") that fits on `devices` x `chip`: `value` (0 when
    even the smallest allowed does not fit), the best plan there, and how close the next value is:
    `next_needs_bytes`, the least memory per device any plan needs at `next_value` (value + 1, or
    the smallest allowed value when none fits; None when the search stopped at `limit`)."""

    what: str
    value: int
    plan: PlanResult | None
    next_value: int | None
    next_needs_bytes: float | None
    capacity_bytes: float
    probes: int  # plan searches run (each value at most once)
    limit: int
    workload: Workload  # at `value`, or at the smallest allowed value when none fits
    chip: Chip
    devices: int
    objective: str

    @property
    def at_limit(self) -> bool:
        """True when every value up to `limit` fits: the real largest may be larger."""
        return self.value == self.limit

    def to_dict(self) -> JSONDict:
        w = self.workload
        return jsonable(
            {
                f"max_{self.what}": self.value,
                "what": self.what,
                "plan": self.plan.to_dict() if self.plan is not None else None,
                "next_value": self.next_value,
                "next_needs_bytes": self.next_needs_bytes,
                "capacity_bytes": self.capacity_bytes,
                "probes": self.probes,
                "limit": self.limit,
                "at_limit": self.at_limit,
                "workload": {
                    **w.identity(),
                    "batch": w.batch,
                    "item": w.item,
                    "tokens_per_item": w.tokens_per_item,
                },
                "hardware": {"name": self.chip.name, "capacity_bytes": self.chip.capacity_bytes},
                "devices": self.devices,
                "objective": self.objective,
            }
        )


def _smallest_batch(opts: PlanOptions) -> int:
    """The smallest batch the fixed degrees allow: one item per batch-split replica (dp x fsdp),
    and with a fixed microbatch count M at least M items per replica, ceil(b / replicas) >= M,
    that is b >= replicas x (M - 1) + 1."""
    replicas = prod(
        value
        for s in strategies()
        if "batch" in s.splits and isinstance(value := opts.degrees.get(s.name), int)
    )
    m = opts.microbatches
    if isinstance(m, int) and not isinstance(m, bool) and m > 1:
        return replicas * (m - 1) + 1
    return max(replicas, 1)


def _check_limit(limit: int, smallest: int, what: str) -> int:
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise InputError(f"limit must be a positive integer, got {limit!r}")
    if limit < smallest:
        raise InputError(
            f"limit {limit} is below the smallest {what} the layout allows, {smallest}"
        )
    return limit


def _least_memory(ps: PlanSet) -> float:
    return min(p.memory_per_device_bytes for p in ps.plans)


def _fits(ps: PlanSet) -> bool:
    return ps.best() is not None


def _bracket(at: Callable[[int], PlanSet], good: int, limit: int) -> tuple[int, int | None]:
    """From a value that fits: double until one does not (or `limit` fits), then bisect, so that
    `good` fits and `bad` = good + 1 does not (bad None: every value up to `limit` fits)."""
    bad: int | None = None
    while good < limit:
        step = min(2 * good, limit)
        if not _fits(at(step)):
            bad = step
            break
        good = step
    while bad is not None and bad - good > 1:
        mid = (good + bad) // 2
        good, bad = (mid, bad) if _fits(at(mid)) else (good, mid)
    return good, bad


def _search(
    what: str,
    build: Callable[[int], Workload],
    hw: str | Chip,
    devices: int,
    opts: PlanOptions,
    bounds: tuple[int, int],
) -> Capacity:
    """Doubling from the smallest value until one does not fit (or the limit), then bisection
    between the last that fits and the first that does not."""
    smallest, limit = bounds
    chip = resolve_chip(hw)
    probe_opts = replace(opts, require_fit=False)
    memo: dict[int, PlanSet] = {}

    def at(n: int) -> PlanSet:
        if n not in memo:
            memo[n] = plan(build(n), chip, devices, options=probe_opts)
        return memo[n]

    good, bad = _bracket(at, smallest, limit) if _fits(at(smallest)) else (0, smallest)
    where = at(good or smallest)
    return Capacity(
        what=what,
        value=good,
        plan=where.best() if good else None,
        next_value=bad,
        next_needs_bytes=_least_memory(at(bad)) if bad is not None else None,
        capacity_bytes=where.chip.usable_capacity_bytes,
        probes=len(memo),
        limit=limit,
        workload=where.workload,
        chip=where.chip,
        devices=devices,
        objective=opts.objective,
    )


def max_batch(
    workload: Workload,
    hw: str | Chip,
    devices: int,
    *,
    options: PlanOptions | None = None,
    limit: int = DEFAULT_LIMIT,
) -> Capacity:
    """The largest batch (items of the workload's batch dim) for which some plan over `devices`
    fits in memory, with the degrees and microbatch count fixed in `options` kept fixed. The batch
    starts at the smallest the fixed degrees allow (dp x fsdp, and M per replica with M fixed)."""
    if not isinstance(workload, Workload):
        raise InputError(f"max_batch() needs a Workload, got {type(workload).__name__}")
    if workload.batch_dim is None:
        raise InputError(f"workload {workload.name!r} names no batch dimension (batch_dim)")
    opts = options or PlanOptions()
    smallest = _smallest_batch(opts)
    bounds = (smallest, _check_limit(limit, smallest, "batch"))
    return _search("batch", workload.with_batch, hw, devices, opts, bounds)


def max_seq_len(
    rebuild: Callable[[int], Workload],
    hw: str | Chip,
    devices: int,
    *,
    options: PlanOptions | None = None,
    limit: int = DEFAULT_LIMIT,
) -> Capacity:
    """The largest sequence length (decode: the cached context) for which some plan over
    `devices` fits in memory; `rebuild(seq_len)` builds the workload at one length (a template:
    e.g. `lambda s: transformer(shape, seq_len=s, ...)`)."""
    if not callable(rebuild):
        raise InputError("max_seq_len() needs a function seq_len -> Workload")

    def build(n: int) -> Workload:
        workload = rebuild(n)
        if not isinstance(workload, Workload):
            raise InputError(f"rebuild({n}) gave {type(workload).__name__}, not a Workload")
        return workload

    opts = options or PlanOptions()
    step = _seq_step(opts)
    bounds = (1, _check_limit(limit, step, "seq_len") // step)
    found = _search("seq_len", lambda n: build(n * step), hw, devices, opts, bounds)
    nxt = None if found.next_value is None else found.next_value * step
    return replace(found, value=found.value * step, next_value=nxt, limit=limit)


def _seq_step(opts: PlanOptions) -> int:
    """The sequence lengths the fixed degrees of the strategies that split the sequence allow
    are multiples of their product (each context-parallel rank holds an equal share of every
    sequence), so the search runs over multiples of it."""
    return prod(
        value
        for s in strategies()
        if "seq" in s.splits
        and isinstance(value := opts.degrees.get(s.name), int)
        and not isinstance(value, bool)
        and value > 1
    )


@dataclass(frozen=True)
class BatchForMfu:
    """The smallest batch at which some fitting plan reaches `target` MFU (model FLOPs over
    devices x peak x predicted step): `batch` (None when no batch up to `limit` reaches it, or
    none fits before it does), the plan that reaches it, and the largest MFU seen below it."""

    target: float
    batch: int | None
    plan: PlanResult | None
    below_batch: int | None  # the largest batch tried that stays under the target
    below_mfu: float | None
    probes: int
    limit: int
    devices: int

    def to_dict(self) -> JSONDict:
        return jsonable(
            {
                "target_mfu": self.target,
                "batch": self.batch,
                "mfu": self.plan.mfu if self.plan is not None else None,
                "plan": self.plan.to_dict() if self.plan is not None else None,
                "below_batch": self.below_batch,
                "below_mfu": self.below_mfu,
                "probes": self.probes,
                "limit": self.limit,
                "devices": self.devices,
            }
        )


def _best_mfu(ps: PlanSet) -> PlanResult | None:
    fits = [p for p in ps.plans if p.fits]
    return max(fits, key=lambda p: p.mfu) if fits else None


def batch_for_mfu(
    workload: Workload,
    hw: str | Chip,
    devices: int,
    target: float,
    *,
    options: PlanOptions | None = None,
    limit: int = DEFAULT_LIMIT,
) -> BatchForMfu:
    """The smallest batch at which some plan that fits reaches MFU `target` (the inverse of
    `plan`'s MFU): doubling from the smallest batch the fixed degrees allow until a plan
    reaches it, then bisection between the last batch below and the first at or above (MFU
    grows with the batch as the fixed costs amortize; the answer is checked at its edge:
    `batch` reaches it, `below_batch` = batch - 1 does not, where both were tried)."""
    if not isinstance(target, float | int) or isinstance(target, bool) or not 0 < target <= 1:
        raise InputError(f"the target MFU must be in (0, 1], got {target!r}")
    if workload.batch_dim is None:
        raise InputError(f"workload {workload.name!r} names no batch dimension (batch_dim)")
    opts = replace(options or PlanOptions(), require_fit=False)
    smallest = _smallest_batch(opts)
    limit = _check_limit(limit, smallest, "batch")
    chip = resolve_chip(hw)
    memo: dict[int, PlanResult | None] = {}

    def at(n: int) -> PlanResult | None:
        if n not in memo:
            memo[n] = _best_mfu(plan(workload.with_batch(n), chip, devices, options=opts))
        return memo[n]

    def reaches(n: int) -> bool:
        p = at(n)
        return p is not None and p.mfu >= target

    below, above = None, smallest
    while not reaches(above):
        if at(above) is None or above >= limit:  # nothing fits any more, or the limit
            p = at(below) if below else None
            return BatchForMfu(
                target, None, None, below, p.mfu if p else None, len(memo), limit, devices
            )
        below, above = above, min(2 * above, limit)
    while below is not None and above - below > 1:
        mid = (below + above) // 2
        below, above = (below, mid) if reaches(mid) else (mid, above)
    p = at(below) if below else None
    return BatchForMfu(
        target, above, at(above), below, p.mfu if p else None, len(memo), limit, devices
    )
