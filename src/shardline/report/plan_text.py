"""Terminal rendering of parallel plans and batch sweeps: the realistic answer first, the lower
bound beside it, then the derivation with the numbers put in."""

from __future__ import annotations

from shardline.basics.units import fmt_bytes, fmt_int, fmt_num, fmt_time
from shardline.hardware.power import limit_note
from shardline.planning.api import BatchSweep, PlanResult, PlanSet
from shardline.planning.sweep import MAX_CROSSOVERS, MAX_SWEEP_PLANS
from shardline.report.plan_realistic import realistic_lines
from shardline.report.stack_text import describe, memory_parts, rate, table
from shardline.strategies import strategies, strategy
from shardline.workload.workload import Workload

__all__ = ["render_plan", "render_sweep"]


# ----------------------------------------------------------------------------------------------
# Plans


def _stage_share(w: Workload, stages: int) -> str:
    if w.pipeline_splits(stages) == "uneven":
        sizes = w.stage_blocks(stages)
        return f"{max(sizes)} or {min(sizes)} blocks (the slowest stage sets the pace)"
    if w.pipeline_splits(stages) == "blocks":
        per = w.repeat // stages
        return f"{per} block{'s' if per > 1 else ''} ({w.layer_count // stages} layers)"
    return f"{w.layer_count // stages} layers"


def _slowest_stage(p: PlanResult, w: Workload) -> list[str]:
    """Which stage sets the pipeline's pace (realistic time), and what it holds beyond its
    blocks: a model's embedding rides on the first stage, its LM head and loss on the last (a
    stack of layers has neither)."""
    slow = p.slowest_stage
    if slow is None:
        return []
    times = [s.get("predicted_s", s["t_s"]) for s in p.stages]
    fast = min(times)
    where = {}
    if w.model is not None:
        where[0] = " (it also holds the embedding)"
        where[len(times) - 1] = " (it also holds the LM head and loss)"
    return [
        f"  slowest stage: {slow} of 0-{len(times) - 1}{where.get(slow, '')}, "
        f"{fmt_int(int(p.stages[slow]['layer_instances']))} layer instances, "
        f"{fmt_time(times[slow])} per microbatch against {fmt_time(fast)} for the fastest "
        f"({100 * p.stage_imbalance:.1f}% imbalance)"
    ]


def _columns(plans: list[PlanResult]) -> tuple[str, ...]:
    """The degree columns: every strategy, and an optional one (ep, cp: some workloads or only
    when asked) when a plan shown uses it."""
    shown = tuple(
        s.name
        for s in strategies()
        if not s.optional or any(p.degrees.get(s.name, 1) > 1 for p in plans)
    )
    folded = ("etp", "edp") if any("etp" in p.degrees for p in plans) else ()
    return shown + folded  # a folded layout's experts: etp and edp (Degrees.as_dict)


def _plan_row(p: PlanResult, w: Workload, columns: tuple[str, ...]) -> tuple[str, ...]:
    per_s = p.tokens_per_s if p.tokens_per_s is not None else w.batch / p.predicted_s
    return (
        p.name,
        *(str(p.degrees.get(c, 1)) for c in columns),
        str(p.microbatches),
        fmt_time(p.predicted_s),
        fmt_time(p.latency_s),
        f"{100 * p.mfu:.1f}%",
        rate(per_s),
        fmt_bytes(p.memory_per_device_bytes),
        "yes" if p.fits else "NO",
        fmt_bytes(p.comm_bytes),
        p.bottleneck,
    )


def _batch_split(d: dict[str, int]) -> list[str]:
    """The strategies that split the batch (an optional one where used); a folded layout's ep
    is the experts' degree, outside the attention's batch split."""
    return [
        s.name
        for s in strategies()
        if "batch" in s.splits
        and (not s.optional or d[s.name] > 1)
        and not (s.name == "ep" and "etp" in d)
    ]


def _folded_line(d: dict[str, int]) -> list[str]:
    """A folded layout's expert side (Megatron-Core's parallel folding)."""
    if "etp" not in d:
        return []
    return [
        f"  experts (parallel folding) on etp × ep × edp × pp = {d['etp']} × {d['ep']} × "
        f"{d['edp']} × {d['pp']}: each expert's FFN split {d['etp']} ways, the experts over "
        f"the ep {d['ep']} (the all-to-all's group), their gradients reduced over the edp "
        f"{d['edp']}"
    ]


def _derivation(p: PlanResult, w: Workload, ps: PlanSet) -> list[str]:
    d = p.degrees
    m, stages = p.microbatches, d["pp"]
    unit = w.batch_dim or "items"
    out = [f"How {p.name}'s lower bound adds up (peak rates, line-rate collectives):"]
    batch_split = _batch_split(d)
    out.append(
        f"  batch {fmt_int(w.batch)} {unit} split over {' × '.join(batch_split)} = "
        f"{' × '.join(str(d[name]) for name in batch_split)} "
        f"replicas and m = {m} microbatch(es): {fmt_int(p.microbatch_size)} per microbatch "
        "per device"
    )
    out += _folded_line(d)
    V = ps_interleave(ps)
    if stages > 1:
        if w.decode:
            bubble = f"(max(m, P) - m)/m = (max({m}, {stages}) - {m})/{m}"
        elif V > 1 and w.training:
            bubble = f"(P-1)/(V m) = ({stages}-1)/({V}×{m})"
        else:
            bubble = f"(P-1)/m = ({stages}-1)/{m}"
        out.append(
            f"  {stages} pipeline stages of {_stage_share(w, stages)} each; bubble {bubble} = "
            f"{p.bubble_over_ideal:.4g} of the ideal step"
        )
        out.extend(_slowest_stage(p, w))
    if d["tp"] > 1:
        out.append(
            f"  tensor parallel over {d['tp']}: each layer's tp dims split {d['tp']} ways; "
            "a layer that contracts a split dim all-reduces its output"
        )
    out.append(
        f"  one microbatch through the slowest stage: {fmt_time(p.t_stage_s)} (per phase: "
        "max(layer rooflines, compute + critical-path traffic, busiest links))"
    )
    out += _latency_lines(p, w, V)
    decode = w.decode
    if w.training or stages == 1 or decode:
        out.append(
            f"  throughput = batch / latency = {fmt_int(w.batch)} / {fmt_time(p.latency_s)} "
            f"= {rate(p.throughput_bound_per_s)} {'token' if decode else w.item}s/s"
        )
    else:
        out.append(
            f"  throughput (a stream of batches keeps every stage busy) = batch / "
            f"(m × t_stage) = {rate(p.throughput_bound_per_s)} {w.item}s/s"
        )
    out += _comm_lines(p)
    mem = p.memory
    parts = memory_parts(mem)
    shown = " + ".join(f"{name} {fmt_bytes(v)}" for name, v in parts if v)
    host = mem.host_offload_bytes
    out.append(
        f"  memory per device: {shown} = {fmt_bytes(mem.total_bytes)} of "
        f"{fmt_bytes(mem.capacity_bytes)}"
        + (f"; activations offloaded to host memory {fmt_bytes(host)}" if host else "")
    )
    by = ", ".join(f"{k} {fmt_time(v)}" for k, v in p.time_by_bound_s.items() if v)
    out.append(f"  bottleneck {p.bottleneck}: time by what binds it: {by}")
    return out


def _latency_lines(p: PlanResult, w: Workload, V: int) -> list[str]:
    """The lower bound's schedule: cycles of the slowest stage, plus the gradient traffic."""
    out: list[str] = []
    m = p.microbatches
    n = p.t_bubble_s / p.t_stage_s + m if p.t_stage_s > 0 else float(m)
    extra = p.latency_s - n * p.t_stage_s
    formula = _cycles_text(w, V)
    if w.training:
        out.append(
            f"  latency = {formula} × t_stage + gradient all-reduce not hidden = "
            f"{n:.4g} × {fmt_time(p.t_stage_s)} + {fmt_time(max(extra, 0.0))} = "
            f"{fmt_time(p.latency_s)}"
        )
    else:
        out.append(
            f"  latency = {formula} × t_stage = {n:.4g} × "
            f"{fmt_time(p.t_stage_s)} = {fmt_time(p.latency_s)}"
        )
    return out


def ps_interleave(ps: PlanSet) -> int:
    return ps.execution.interleave if ps.execution is not None else 1


def _cycles_text(w: Workload, interleave: int) -> str:
    """The schedule's stage times per step (shardline.planning.step.cycles), in symbols."""
    if w.training:
        return "(m + (P - 1)/V)" if interleave > 1 else "(m + P - 1)"
    if w.decode:
        return "max(m, P)"
    return "(m + P - 1)"


def _comm_lines(p: PlanResult) -> list[str]:
    if not p.comm:
        return ["  communication: none"]
    out = ["  communication per step on one device (V = the array each collective moves):"]
    for c in p.comm:
        s = strategy(c.purpose)
        where = s.comm_where_by_kind.get(c.kind, s.comm_where)
        out.append(
            f"    {c.purpose:<4} {c.kind:<14} over {c.devices:>4}: {fmt_num(c.calls)} × "
            f"{fmt_bytes(c.bytes / c.calls if c.calls else 0)} = {fmt_bytes(c.bytes)}, "
            f"{fmt_time(c.t_s)} ({where})"
        )
    return out


def _framework_line(ps: PlanSet) -> str:
    """Which framework's defaults filled the execution fields the run left out."""
    from shardline.basics.framework import DEFAULT_FRAMEWORK, load_framework

    name = ps.execution.framework if ps.execution is not None else DEFAULT_FRAMEWORK
    fw = load_framework(name)
    return f"framework: {fw.display_name}; its defaults fill what the flags leave out"


def render_plan(ps: PlanSet, top: int = 10) -> str:
    w = ps.workload
    out = [
        f"{w.name} over {ps.devices} × {ps.chip.display_name} ({ps.chip.name}, "
        f"{fmt_bytes(ps.chip.usable_capacity_bytes)} each{limit_note(ps.chip)})",
        describe(w),
        _framework_line(ps),
        "",
    ]
    if ps.recommended is None:
        out.append(f"NO PLAN FITS: {ps.reason}")
    else:
        out.append(f"RECOMMENDED {ps.recommended}: {ps.reason}.")
    out.append("")
    per = "tokens/s" if w.kind != "stack" else f"{w.item}s/s"
    shown = ps.plans[:top]
    columns = _columns(shown)
    header = (
        "plan",
        *columns,
        "mb",
        "predicted",
        "lower bound",
        "MFU",
        per,
        "memory/device",
        "fits",
        "comm/step",
        "bottleneck",
    )
    out += table(
        header,
        [_plan_row(p, w, columns) for p in shown],
        (False, *(True for _ in columns), True, True, True, True, True, True, False, True, False),
    )
    if len(ps.plans) > top:
        out.append(f"  ... and {len(ps.plans) - top} more (--top N, or --json for all)")
    best = ps.best() or (ps.plans[0] if len(ps.plans) == 1 else None)
    if best is not None:
        out += [""] + realistic_lines(best, w, ps) + [""] + _derivation(best, w, ps)
    return "\n".join(out) + "\n"


def render_sweep(sw: BatchSweep) -> str:
    w = sw.workload
    per = f" of {w.tokens_per_item} tokens" if w.kind != "stack" and w.item != "token" else ""
    out = [
        f"{w.name} over {sw.devices} × {sw.chip.name}: the recommended plan by batch "
        f"({w.item}s{per}; objective {sw.objective})",
        "",
    ]
    header = (
        "batch",
        "per device",
        "recommended",
        "predicted",
        "latency",
        f"{w.item}s/s",
        "bottleneck",
    )
    rows = []
    for p in sw.points:
        rows.append(
            (
                fmt_int(p.batch),
                f"{p.batch_per_device:,.4g}" if p.batch_per_device is not None else "-",
                p.recommended or "none fits",
                fmt_time(p.predicted_s) if p.predicted_s is not None else "-",
                fmt_time(p.latency_s) if p.latency_s is not None else "-",
                rate(p.throughput_per_s) if p.throughput_per_s is not None else "-",
                p.bottleneck or "-",
            )
        )
    out += table(header, rows, (True, True, False, True, True, True, False))
    out.append("")
    if not sw.crossovers and sw.crossovers_complete:
        out.append("No crossover: the same plan wins at every batch shown.")
    for c in sw.crossovers:
        out.append(
            f"CROSSOVER at batch {fmt_int(c.batch)}: "
            f"{c.from_plan or 'nothing fits'} -> {c.to_plan or 'nothing fits'}"
        )
    if not sw.crossovers_complete:
        out.append(
            f"(the search for crossovers stopped at its limit of {MAX_SWEEP_PLANS} plan searches "
            f"or {MAX_CROSSOVERS} crossovers: give batch sizes closer together to see the rest)"
        )
    return "\n".join(out) + "\n"
