"""One plan's step as a timeline per pipeline stage: forward and backward passes per microbatch
(and per model chunk when interleaved), the communication they wait for, the bubbles, the
data-parallel gradient traffic the backward pass cannot hide and the optimizer step.

Built from the plan result alone (`PlanResult.stages` and `predicted_breakdown_s`), as the
realistic step is: every stage runs at the slowest stage's time per microbatch, split into its
forward and backward compute and exposed communication. The schedule is simulated, not assumed:
each stage runs its passes in the order of its schedule, and a pass starts when its stage is free
and its input is ready (a forward needs the previous stage's forward of the same microbatch and
chunk, a backward the next stage's backward).

- training, 1F1B (V = 1): stage s runs min(P - s - 1, m) forwards, then alternates one forward,
  one backward, then the remaining backwards; the step is `(m + P - 1)(f + b)`;
- training, interleaved 1F1B (V chunks per stage, Narayanan et al. 2021): microbatches go in
  groups of P through chunk 0, 1, ..., V - 1 (backwards through the chunks in reverse), with
  `2 (P - s - 1) + (V - 1) P` forwards first (Megatron-LM's warm-up); the step is
  `(m + (P - 1)/V)(f + b)` when P divides m;
- forward only (prefill): the m microbatches flow through, `(m + P - 1) f`;
- decode: one token for the whole batch, microbatch j on stage s in slot (j + s) mod max(m, P).

After the last pass: the exposed gradient all-reduce, then the optimizer step, on every stage.
Events are pure data; `trace_events` turns them into Chrome trace-event JSON (Perfetto) and
shardline.report.timeline_svg into an SVG.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from shardline.errors import InputError
from shardline.planning.results import PlanResult

__all__ = ["Event", "Timeline", "plan_timeline", "trace_events", "STREAMS", "MAX_EVENTS"]

STREAMS = ("compute", "communication", "bubble")  # the trace's threads, in this order
MAX_EVENTS = 500_000  # a timeline past this is too large to draw or load


@dataclass(frozen=True)
class Event:
    name: str  # "F3" (forward of microbatch 3), "B3.1" (backward, chunk 1), "bubble", ...
    stage: int
    stream: str  # one of STREAMS
    start_s: float
    dur_s: float
    kind: str  # forward, backward, exposed_comm, bubble, dp_comm, optimizer
    microbatch: int | None = None
    chunk: int | None = None

    @property
    def end_s(self) -> float:
        return self.start_s + self.dur_s


@dataclass(frozen=True)
class Timeline:
    plan: str
    schedule: str  # "1F1B", "interleaved 1F1B (V=2)", "forward", "decode"
    stages: int
    microbatches: int
    interleave: int
    step_s: float
    predicted_s: float  # the plan's realistic step, for comparison
    events: list[Event] = field(default_factory=list)

    def per_stage_s(self, stage: int) -> dict[str, float]:
        """Seconds of one stage by kind of event."""
        out: dict[str, float] = {}
        for e in self.events:
            if e.stage == stage:
                out[e.kind] = out.get(e.kind, 0.0) + e.dur_s
        return out


@dataclass(frozen=True)
class _Times:
    f_compute: float
    f_comm: float
    b_compute: float
    b_comm: float
    dp_comm: float
    optimizer: float


def _times(plan: PlanResult, training: bool) -> _Times:
    if not plan.stages or "fwd_compute_s" not in plan.stages[0]:
        raise InputError(f"plan {plan.name} has no per-stage phase times to draw a timeline from")
    crit = max(plan.stages, key=lambda st: st["predicted_s"])
    b = plan.predicted_breakdown_s
    m = plan.microbatches
    per_mb_comm = crit["fwd_comm_s"] + crit["bwd_comm_s"]
    dp = max(0.0, b.get("exposed_comm_s", 0.0) - m * per_mb_comm) if training else 0.0
    return _Times(
        crit["fwd_compute_s"],
        crit["fwd_comm_s"],
        crit["bwd_compute_s"] if training else 0.0,
        crit["bwd_comm_s"] if training else 0.0,
        dp,
        b.get("optimizer_s", 0.0),
    )


Op = tuple[str, int, int]  # ("F" or "B", microbatch, chunk)


def _groups(m: int, p: int) -> list[range]:
    return [range(g, min(g + p, m)) for g in range(0, m, p)]


def _order(s: int, p: int, m: int, v: int) -> list[Op]:
    """Stage s's passes in schedule order (module docstring)."""
    fwd = [("F", j, c) for grp in _groups(m, p) for c in range(v) for j in grp]
    bwd = [("B", j, c) for grp in _groups(m, p) for c in reversed(range(v)) for j in grp]
    warm = (p - s - 1) if v == 1 else 2 * (p - s - 1) + (v - 1) * p
    warm = min(warm, len(fwd))
    order = fwd[:warm]
    for i in range(len(fwd) - warm):
        order += [fwd[warm + i], bwd[i]]
    return order + bwd[len(fwd) - warm :]


def _simulate(p: int, m: int, v: int, dur: dict[str, float]) -> dict[tuple[int, Op], float]:
    """Start time of every pass: each stage in its order, each pass when its input is ready."""
    orders = [_order(s, p, m, v) for s in range(p)]
    done: dict[tuple[str, int, int], float] = {}  # (kind, microbatch, virtual stage) -> end
    start: dict[tuple[int, Op], float] = {}
    nxt, free = [0] * p, [0.0] * p
    last = p * v - 1
    while any(nxt[s] < len(orders[s]) for s in range(p)):
        progress = False
        for s in range(p):
            while nxt[s] < len(orders[s]):
                kind, j, c = orders[s][nxt[s]]
                k = c * p + s
                dep: tuple[str, int, int] | None = (
                    ("F", j, k - 1) if kind == "F" else ("B", j, k + 1)
                )
                if kind == "F" and k == 0:
                    dep = None
                elif kind == "B" and k == last:
                    dep = ("F", j, k)
                if dep is not None and dep not in done:
                    break
                t0 = max(free[s], done[dep] if dep is not None else 0.0)
                start[(s, (kind, j, c))] = t0
                free[s] = done[(kind, j, k)] = t0 + dur[kind]
                nxt[s] += 1
                progress = True
        if not progress:
            raise InputError(f"the pipeline schedule deadlocks for P={p}, m={m}, V={v}")
    return start


def _pass_events(s: int, op: Op, t0: float, t: _Times, v: int) -> list[Event]:
    kind, j, c = op
    comp, comm = (t.f_compute, t.f_comm) if kind == "F" else (t.b_compute, t.b_comm)
    comp, comm = comp / v, comm / v
    name = f"{kind}{j}" + (f".{c}" if v > 1 else "")
    what = "forward" if kind == "F" else "backward"
    out = [Event(name, s, "compute", t0, comp, what, j, c)]
    if comm > 0:
        out.append(Event(f"{name} comm", s, "communication", t0 + comp, comm, "exposed_comm", j, c))
    return out


def _bubbles(events: list[Event], p: int, end: float) -> list[Event]:
    """The idle gaps of each stage between 0 and `end`."""
    out = []
    for s in range(p):
        spans = sorted((e.start_s, e.end_s) for e in events if e.stage == s)
        t = 0.0
        for a, b in spans:
            if a - t > 1e-12 * max(end, 1e-30):
                out.append(Event("bubble", s, "bubble", t, a - t, "bubble"))
            t = max(t, b)
        if end - t > 1e-12 * max(end, 1e-30):
            out.append(Event("bubble", s, "bubble", t, end - t, "bubble"))
    return out


def _tail(p: int, end: float, t: _Times) -> list[Event]:
    out = []
    for s in range(p):
        if t.dp_comm > 0:
            out.append(Event("dp all-reduce", s, "communication", end, t.dp_comm, "dp_comm"))
        if t.optimizer > 0:
            out.append(Event("optimizer", s, "compute", end + t.dp_comm, t.optimizer, "optimizer"))
    return out


def _decode_events(p: int, m: int, t: _Times) -> list[Event]:
    n = max(m, p)
    f = t.f_compute + t.f_comm
    events = []
    for s in range(p):
        for j in range(m):
            events += _pass_events(s, ("F", j, 0), ((j + s) % n) * f, t, 1)
    return events


def plan_timeline(
    plan: PlanResult, *, training: bool, decode: bool = False, interleave: int = 1
) -> Timeline:
    """The timeline of `plan`'s step (module docstring); `interleave` the execution's V."""
    p, m = plan.degrees.get("pp", 1), plan.microbatches
    v = max(1, interleave) if training and p > 1 else 1
    t = _times(plan, training)
    passes = p * m * v * (2 if training else 1)
    if 3 * passes > MAX_EVENTS:
        raise InputError(
            f"the timeline of {plan.name} has {passes:,} passes; at most ~{MAX_EVENTS // 3:,}"
        )
    if decode and not training:
        events = _decode_events(p, m, t)
        schedule = "decode"
        end = max(m, p) * (t.f_compute + t.f_comm)
    else:
        dur = {"F": (t.f_compute + t.f_comm) / v, "B": (t.b_compute + t.b_comm) / v}
        ops = [(s, op) for s in range(p) for op in _order(s, p, m, v) if training or op[0] == "F"]
        start = _simulate(p, m, v, dur) if training else _forward_starts(p, m, dur["F"])
        events = [e for s, op in ops for e in _pass_events(s, op, start[(s, op)], t, v)]
        schedule = "forward" if not training else "1F1B" if v == 1 else f"interleaved 1F1B (V={v})"
        end = max((e.end_s for e in events), default=0.0)
    events += _bubbles(events, p, end) + _tail(p, end, t)
    step = end + t.dp_comm + t.optimizer
    events.sort(key=lambda e: (e.stage, e.start_s, STREAMS.index(e.stream)))
    return Timeline(plan.name, schedule, p, m, v, step, plan.predicted_s, events)


def _forward_starts(p: int, m: int, f: float) -> dict[tuple[int, Op], float]:
    return {(s, ("F", j, 0)): (j + s) * f for s in range(p) for j in range(m)}


def trace_events(timeline: Timeline) -> dict[str, object]:
    """Chrome trace-event JSON: complete events ("ph": "X", microseconds), one process per
    pipeline stage, one thread per stream (compute, communication, bubble)."""
    meta: list[dict[str, object]] = []
    for s in range(timeline.stages):
        meta.append(
            {
                "ph": "M",
                "name": "process_name",
                "pid": s,
                "tid": 0,
                "args": {"name": f"pipeline stage {s}"},
            }
        )
        meta += [
            {"ph": "M", "name": "thread_name", "pid": s, "tid": i, "args": {"name": stream}}
            for i, stream in enumerate(STREAMS)
        ]
    events = [
        {
            "name": e.name,
            "cat": e.kind,
            "ph": "X",
            "ts": e.start_s * 1e6,
            "dur": e.dur_s * 1e6,
            "pid": e.stage,
            "tid": STREAMS.index(e.stream),
            "args": {
                k: val
                for k, val in (("microbatch", e.microbatch), ("chunk", e.chunk))
                if val is not None
            },
        }
        for e in timeline.events
    ]
    return {
        "traceEvents": meta + events,
        "displayTimeUnit": "ms",
        "otherData": {
            "plan": timeline.plan,
            "schedule": timeline.schedule,
            "step_s": timeline.step_s,
            "predicted_s": timeline.predicted_s,
        },
    }
