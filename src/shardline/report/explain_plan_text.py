"""`shardline explain plan`: pipeline against tensor parallelism in one paragraph, the bound first,
then latency, throughput, memory per device and communication with this workload's numbers, and
the batch at which the latency answer flips (`shardline.planning.compare_pp_tp`)."""

from __future__ import annotations

from shardline.basics.units import fmt_bytes, fmt_flops, fmt_int, fmt_rate, fmt_time
from shardline.io.safe_text import md_text
from shardline.planning.compare_pp_tp import PlanNumbers, PpTpComparison
from shardline.strategies import CommTerm

__all__ = ["render_explain_plan", "paragraph"]

METRIC_WORDS = {
    "latency": "latency",
    "throughput": "throughput",
    "memory": "memory per device",
    "communication": "communication",
}


def _join(words: list[str]) -> str:
    if len(words) <= 2:
        return " and ".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


def _head(c: PpTpComparison) -> str:
    """The answer: who wins what."""
    by: dict[str, list[str]] = {}
    for metric, side in c.winners.items():
        by.setdefault(side, []).append(METRIC_WORDS[metric])
    parts = []
    for side in ("tp", "pp", "tie"):
        if side in by:
            who = {"tp": c.tp.name, "pp": c.pp.name, "tie": "neither"}[side]
            parts.append(f"{who} wins on {_join(by[side])}")
    return f"**Answer: {'; '.join(parts)}.**"


def _bound(c: PpTpComparison) -> str:
    r = c.tp.result
    dtype = c.workload.layers[0].compute_dtype or c.workload.layers[0].dtype
    if c.tp.bottleneck == c.pp.bottleneck:
        which = f"Both plans are {c.tp.bottleneck}-bound"
    else:
        which = f"{c.tp.name} is {c.tp.bottleneck}-bound and {c.pp.name} {c.pp.bottleneck}-bound"
    peak = f"{c.devices} × {fmt_rate(c.chip.peak(dtype))} ({dtype})"
    if c.tp.bottleneck == c.pp.bottleneck == "compute":
        return (
            f"{which}: the step's {fmt_flops(r.model_flops)} take at least "
            f"{fmt_time(c.compute_floor_s)} on {peak}, so each plan is judged by what it adds "
            "to that floor."
        )
    return (
        f"{which}: the step's {fmt_flops(r.model_flops)} would take only "
        f"{fmt_time(c.compute_floor_s)} at the peak of {peak}, so more than the math sets "
        "each plan's time."
    )


def _unit(c: PpTpComparison, count: float) -> str:
    return c.workload.item if count == 1 else f"{c.workload.item}s"


def _comm_terms(p: PlanNumbers, purpose: str) -> list[CommTerm]:
    return [t for t in p.result.comm if t.purpose == purpose and t.calls > 0]


def _comm_phrase(terms: list[CommTerm]) -> str:
    """'36 all-reduces of 134 MB' for each kind of traffic."""
    out = []
    for t in terms:
        calls = round(t.calls)
        kind = t.kind.replace("_", "-")
        each = fmt_bytes(t.bytes / t.calls)
        out.append(f"{fmt_int(calls)} {kind}{'s' if calls != 1 else ''} of {each}")
    return _join(out) if out else "no traffic"


def _latency(c: PpTpComparison) -> str:
    tp, pp, w = c.tp, c.pp, c.workload
    tp_b, pp_b = tp.result.predicted_breakdown_s, pp.result.predicted_breakdown_s
    rows = pp.result.microbatch_size
    bubble_s = pp_b.get("bubble_s", 0.0)
    bubble = (
        f"paying a bubble of {pp.bubble_fraction:.3g} of the step ({fmt_time(bubble_s)})"
        if bubble_s > 0
        else "with no bubble"
    )
    text = (
        f"Latency: {tp.name} finishes the batch of {fmt_int(w.batch)} {_unit(c, w.batch)} in "
        f"{fmt_time(tp.predicted_s)} (lower bound {fmt_time(tp.latency_s)}), with "
        f"{_comm_phrase(_comm_terms(tp, 'tp'))} in the way "
        f"({fmt_time(tp_b.get('exposed_comm_s', 0.0))} exposed); {pp.name} takes "
        f"{fmt_time(pp.predicted_s)} (lower bound {fmt_time(pp.latency_s)}) with m = "
        f"{pp.microbatches} microbatch{'es' if pp.microbatches != 1 else ''} of "
        f"{fmt_int(rows)} {_unit(c, rows)}, {bubble}"
    )
    extra = pp_b.get("gemm_s", 0.0) - tp_b.get("gemm_s", 0.0)
    if pp.microbatches > 1 and extra > 0:
        text += f" and {fmt_time(extra)} more GEMM time in its smaller matmuls"
    return text + "."


def _per_s(value: float) -> str:
    return f"{round(value):,}" if value >= 100 else f"{value:.3g}"


def _throughput(c: PpTpComparison) -> str:
    tp, pp, w = c.tp, c.pp, c.workload
    per = f"{w.item}s/s"
    stream = not w.training and not w.decode
    how = ", its bubble hidden by a stream of batches" if stream else ""
    return (
        f"Throughput: {pp.name} serves {_per_s(pp.throughput_per_s)} {per} "
        f"(m = {pp.throughput_microbatches}{how}) against "
        f"{_per_s(tp.throughput_per_s)} {per} for {tp.name} (at peak rates "
        f"{_per_s(pp.throughput_bound_per_s)} and {_per_s(tp.throughput_bound_per_s)})."
    )


MEMORY_PARTS = (
    ("weights", "weights_bytes"),
    ("activations", "activations_bytes"),
    ("gradients", "gradients_bytes"),
    ("optimizer state", "optimizer_bytes"),
    ("KV cache", "kv_cache_bytes"),
    ("buffers", "buffers_bytes"),
)


def _memory_of(p: PlanNumbers) -> str:
    m = p.result.memory
    parts = [
        f"{word} {fmt_bytes(getattr(m, key))}"
        for word, key in MEMORY_PARTS
        if getattr(m, key, 0.0) > 0 or key in ("weights_bytes", "activations_bytes")
    ]
    fits = "" if p.fits else ", which does not fit"
    return f"{fmt_bytes(p.memory_per_device_bytes)} ({' + '.join(parts)}{fits})"


def _memory(c: PpTpComparison) -> str:
    return (
        f"Memory per device: {c.pp.name} holds {_memory_of(c.pp)} against {_memory_of(c.tp)} "
        f"for {c.tp.name}, of {fmt_bytes(c.chip.usable_capacity_bytes)}."
    )


def _communication(c: PpTpComparison) -> str:
    tp, pp = c.tp, c.pp
    ratio = tp.comm_bytes / pp.comm_bytes if pp.comm_bytes > 0 else float("inf")
    tp_s = sum(t.t_s for t in _comm_terms(tp, "tp"))
    text = (
        f"Communication per step: {tp.name} moves {fmt_bytes(tp.comm_bytes)} per device "
        f"({_comm_phrase(_comm_terms(tp, 'tp'))}, {fmt_time(tp_s)} at line rate), {pp.name} "
        f"{fmt_bytes(pp.comm_bytes)} ({_comm_phrase(_comm_terms(pp, 'pp'))})"
    )
    if pp.comm_bytes == 0 < tp.comm_bytes:
        text += ": tensor parallelism needs a fast link inside a node"
    elif ratio > 1:
        text += (
            f", {ratio:.3g}× less: tensor parallelism needs a fast link inside a node, "
            "the pipeline's point-to-point sends tolerate a slow network"
        )
    return text + "."


def _flip(c: PpTpComparison) -> str:
    f, w = c.flip, c.workload
    names = {"tp": c.tp.name, "pp": c.pp.name, "tie": "neither", None: "neither plan"}
    span = f"{fmt_int(f.searched_from)} to {fmt_int(f.searched_to)}"
    if f.batch is None:
        return (
            f"When it flips: {names[f.from_winner]} keeps the lower latency at every power of "
            f"two of the batch from {span}."
        )
    pt = next(p for p in f.points if p.batch == f.batch)
    times = f"{fmt_time(pt.tp_s, 4) if pt.tp_s else 'no fit'} for {c.tp.name}, "
    times += f"{fmt_time(pt.pp_s, 4) if pt.pp_s else 'no fit'} for {c.pp.name}"
    up = f.batch > w.batch
    near = f.previous_batch if f.previous_batch is not None else f.batch
    lo, hi = sorted((f.batch, near))
    text = (
        f"When it flips: at a batch of {fmt_int(f.batch)} (between {fmt_int(lo)} and "
        f"{fmt_int(hi)}; powers of two checked from {span}) {names[f.to_winner]} takes the "
        f"lower latency ({times})"
    )
    if up and f.to_winner == "pp":
        text += (
            f", as more {w.item}s let the pipeline run more microbatches and shrink its bubble "
            "while the all-reduces grow in step with the batch"
        )
    elif not up and f.to_winner == "tp":
        text += f", as too few {w.item}s leave the pipeline too few microbatches to hide its bubble"
    return text + "."


def paragraph(c: PpTpComparison) -> str:
    """The one-paragraph answer."""
    parts = [_head(c), _bound(c), _latency(c), _throughput(c), _memory(c), _communication(c)]
    parts.append(_flip(c))
    return " ".join(parts)


def render_explain_plan(c: PpTpComparison) -> str:
    w = c.workload
    title = (
        f"# Pipeline or tensor parallelism: {md_text(w.name)} on {c.devices} × "
        f"{md_text(c.chip.display_name)} ({md_text(c.chip.name)})"
    )
    return f"{title}\n\n{paragraph(c)}\n"
