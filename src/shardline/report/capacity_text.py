"""Terminal rendering of the largest batch or sequence length that fits (`plan --max-batch`,
`plan --max-seq-len`): the answer first, then how close the next value is."""

from __future__ import annotations

from shardline.basics.units import fmt_bytes, fmt_int, fmt_time
from shardline.planning.capacity import BatchForMfu, Capacity

__all__ = ["render_capacity", "render_batch_for_mfu"]


def _distinct(*values: float) -> list[str]:
    """The byte counts with enough digits that different values read differently (79.99 GB and
    80 GB, not 80 GB twice)."""
    for digits in range(3, 13):
        shown = [fmt_bytes(v, digits) for v in values]
        if len(set(shown)) == len(set(values)):
            return shown
    return [f"{v:,.0f} B" for v in values]


def _amount(n: int, unit: str) -> str:
    return f"{fmt_int(n)} {unit}{'' if n == 1 else 's'}"


def _answer(c: Capacity) -> list[str]:
    w = c.workload
    batch = c.what == "batch"
    title = "LARGEST BATCH" if batch else "LONGEST SEQUENCE"
    where = "" if batch else f" at batch {fmt_int(w.batch)}"
    unit = w.item if batch else "token"
    context = "" if batch or not w.kv_cache_formula or w.tokens_per_item != 1 else " of context"
    if c.plan is None:
        need, cap = _distinct(c.next_needs_bytes or 0.0, c.capacity_bytes)
        return [
            f"NOTHING FITS{where}: the smallest {'batch' if batch else 'sequence length'}, "
            f"{_amount(c.next_value or 0, unit)}{context}, needs at least {need} per device; "
            f"each has {cap}"
        ]
    amount = _amount(c.value, unit) + context
    if c.next_needs_bytes is None:
        mem, cap = _distinct(c.plan.memory_per_device_bytes, c.capacity_bytes)
        lines = [
            f"{title} that fits{where}: at least {amount}, the search limit ({c.plan.name}, "
            f"{mem} of {cap} per device); no memory limit found below it"
        ]
        if batch:
            lines.append(
                "  (with free microbatches a plan can run the batch in microbatches of any size, "
                "so its memory need not grow with the batch; give --microbatches to bound it)"
            )
        return lines
    mem, cap, need = _distinct(c.plan.memory_per_device_bytes, c.capacity_bytes, c.next_needs_bytes)
    return [
        f"{title} that fits{where}: {amount} ({c.plan.name}, {mem} of {cap} per device); "
        f"{fmt_int(c.next_value or 0)} needs at least {need}"
    ]


def render_capacity(c: Capacity) -> str:
    w, chip = c.workload, c.chip
    out = [
        f"{w.name} over {c.devices} × {chip.display_name} ({chip.name}, "
        f"{fmt_bytes(chip.usable_capacity_bytes)} each), {w.phase}",
        "",
        *_answer(c),
        f"{c.probes} plan search{'' if c.probes == 1 else 'es'} (doubling, then bisection); "
        "the degrees given stay fixed, the others are searched",
    ]
    return "\n".join(out) + "\n"


def render_batch_for_mfu(r: BatchForMfu) -> str:
    """`plan --target-mfu F`: the smallest batch a fitting plan reaches MFU F at."""
    if r.batch is None or r.plan is None:
        where = (
            f"the best below it is {r.below_mfu:.1%} at batch {fmt_int(r.below_batch)}"
            if r.below_batch is not None and r.below_mfu is not None
            else "no plan fits"
        )
        return (
            f"MFU {r.target:.1%} is not reached on {r.devices} devices up to batch "
            f"{fmt_int(r.limit)} or the largest batch that fits: {where}\n"
        )
    p = r.plan
    out = [
        f"BATCH {fmt_int(r.batch)}: the smallest batch at which a plan reaches MFU "
        f"{r.target:.1%} on {r.devices} devices ({p.name}: MFU {p.mfu:.1%}, predicted "
        f"{fmt_time(p.predicted_s)}, {fmt_bytes(p.memory_per_device_bytes)} per device)"
    ]
    if r.below_batch is not None and r.below_mfu is not None:
        out.append(
            f"  batch {fmt_int(r.below_batch)} reaches {r.below_mfu:.1%} at best; "
            f"{r.probes} batches planned"
        )
    return "\n".join(out) + "\n"
