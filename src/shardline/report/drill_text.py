"""`shardline drill`: the question, the verdict with its tolerance, the worked answer (the bound
called first, as `explain` writes it) and the score; and the JSON object of a session."""

from __future__ import annotations

from shardline.basics.dtypes import dtype_bits
from shardline.basics.serialize import jsonable
from shardline.basics.units import fmt_flops, fmt_int, fmt_num, fmt_time
from shardline.basics.values import JSONDict
from shardline.collectives import CollectiveCost
from shardline.drill import Graded, PipelineDrill, Question, Session
from shardline.ops.roofline import RooflineResult
from shardline.report.markdown import explain_roofline
from shardline.report.markdown_sharded import explain_sharded
from shardline.report.sharding_text import render_collective
from shardline.sharding.algebra import ShardedResult

__all__ = [
    "format_expected",
    "tolerance_words",
    "worked_answer",
    "render_question",
    "render_graded",
    "render_score",
    "drill_json",
]


def format_expected(q: Question) -> str:
    """The expected answer as a person would write it, with its unit."""
    if q.unit == "word":
        return str(q.expected)
    value = float(q.expected)
    if q.unit == "FLOP/B":
        return f"{value:,.4g} FLOP/B"
    if q.unit == "FLOP":
        return f"{fmt_flops(value, 4)} ({fmt_int(value)} FLOP)"
    if q.unit == "s":
        return fmt_time(value, 4)
    if q.round_to_int:
        return fmt_int(value)
    return f"{value:.4g} ({100 * value:.2f}%)"


def tolerance_words(q: Question) -> str:
    if q.unit == "word":
        return "the word must match (case and '-bound' ignored)"
    pct = f"±{100 * q.tolerance:g}%"
    if q.round_to_int:
        return f"rounded to an integer, right within {pct}"
    return f"right within {pct}"


def _critical_lines(r: RooflineResult) -> list[str]:
    crit = r.critical_m
    assert crit is not None  # asked only where some M is compute-bound
    s = {op: dtype_bits(str(r.dtypes[op])) / 8 for op in ("a", "b", "out")}
    k, n = int(r.dims["K"]), int(r.dims["N"])
    peak, bw = float(r.hardware.flops_per_s), float(r.hardware.mem_bytes_per_s)
    bracket = 2 * k * n / peak - (s["a"] * k + s["out"] * n) / bw
    closed = s["b"] * k * n / bw / bracket
    return [
        f"**Critical M = {fmt_int(crit)}.** Compute-bound when 2MKN/P >= "
        "(s_a·MK + s_b·KN + s_out·MN)/W, i.e. M >= (s_b·K·N/W) / (2KN/P - (s_a·K + s_out·N)/W) "
        f"= ({fmt_num(s['b'] * k * n / bw)}) / ({fmt_num(bracket)}) = {closed:,.2f}; the "
        f"smallest whole M is {fmt_int(crit)} (about the ridge P/W = "
        f"{float(r.ridge_flop_per_byte):,.4g} when K and N are large, since I ≈ M for bf16). "
        "The multiply at that M:",
        "",
    ]


def _pipeline_lines(p: PipelineDrill) -> list[str]:
    bubble_cycles = p.cycles - p.microbatches
    if p.over_ideal:
        return [
            f"**Answer: bubble = {p.bubble:.4g} ({100 * p.bubble:.2f}%) of the ideal step.** "
            f"Interleaved 1F1B with V = {p.interleave} chunks per stage takes "
            f"m + (P - 1)/V = {p.microbatches} + {p.stages - 1}/{p.interleave} = {p.cycles:g} "
            "microbatch times; the ideal step is m of them.",
            "",
            f"- bubble over ideal = (P - 1)/(V·m) = {p.stages - 1}/({p.interleave} × "
            f"{p.microbatches}) = {p.bubble:.4g}",
            f"- as a share of the whole step: {bubble_cycles:g}/{p.cycles:g} = "
            f"{bubble_cycles / p.cycles:.4g}",
        ]
    return [
        f"**Answer: bubble = {p.bubble:.4g} ({100 * p.bubble:.2f}%) of the step.** A flush of "
        f"P = {p.stages} stages and m = {p.microbatches} microbatches takes m + P - 1 = "
        f"{p.cycles:g} microbatch times; every stage idles for P - 1 = {p.stages - 1} of them.",
        "",
        f"- bubble fraction = (P - 1)/(m + P - 1) = {p.stages - 1}/{p.cycles:g} = {p.bubble:.4g}",
        f"- over the ideal step: (P - 1)/m = {(p.stages - 1) / p.microbatches:.4g}; more "
        "microbatches (m >> P) or interleaved chunks shrink it",
    ]


def worked_answer(q: Question) -> str:
    """The worked answer, the bound (or the answer) first, from the record the question holds."""
    w = q.worked
    if isinstance(w, RooflineResult):
        head = _critical_lines(w) if q.topic == "critical-m" else []
        return "".join(f"{line}\n" for line in head) + explain_roofline(w, (), brief=True)
    if isinstance(w, ShardedResult):
        return explain_sharded(w, single=None, brief=True)
    if isinstance(w, CollectiveCost):
        return render_collective(w)
    if isinstance(w, PipelineDrill):
        return "\n".join(_pipeline_lines(w)) + "\n"
    return f"expected {format_expected(q)}\n"


def render_question(index: int, total: int, q: Question) -> str:
    return f"Q{index}/{total} [{q.topic}] {q.text}\n"


def render_graded(index: int, total: int, g: Graded, *, with_question: bool = True) -> str:
    """The verdict line and the worked answer (the question first unless it was just asked)."""
    q = g.question
    verdict = "RIGHT" if g.correct else "WRONG"
    given = "(no answer)" if g.answer is None else g.answer.strip()
    note = f"; {g.note}" if g.note and g.answer is not None else ""
    lines = [render_question(index, total, q).rstrip("\n")] if with_question else []
    lines.append(
        f"your answer: {given} -> {verdict} (expected {format_expected(q)}, "
        f"{tolerance_words(q)}{note})"
    )
    return "\n".join(lines) + "\n\n" + worked_answer(q)


def render_score(session: Session) -> str:
    missed = ", ".join(session.missed_topics) or "none"
    return (
        f"Score: {session.score}/{session.count} (missed topics: {missed}); "
        f"replay with --seed {session.seed} --hw {session.hw}\n"
    )


def _question_dict(g: Graded) -> JSONDict:
    q = g.question
    return {
        "topic": q.topic,
        "question": q.text,
        "inputs": q.given,  # the question's data (shape, chip, ...)
        "given": g.answer,  # the answer given, as written (None: no answer)
        "given_value": g.value,  # the number (SI) or word read from it
        "expected": q.expected,
        "unit": q.unit,
        "tolerance": q.tolerance,
        "tolerance_rule": tolerance_words(q),
        "correct": g.correct,
        "note": g.note,
        "worked_answer": worked_answer(q),
    }


def drill_json(session: Session) -> JSONDict:
    out: JSONDict = jsonable(
        {
            "questions": [_question_dict(g) for g in session.graded],
            "score": session.score,
            "count": session.count,
            "missed_topics": session.missed_topics,
            "seed": session.seed,
            "hw": session.hw,
        }
    )
    return out
