"""Reading and grading drill answers.

A number may carry an SI or binary prefix and a unit: `455`, `4.55e2`, `2.7k`, `1.2 ms`,
`512 GiB`, `4 TFLOP`, `68.7 GFLOP`, `12.5%`, `2,048`. A word answer (the bound, a collective) is
compared case-insensitively, ignoring `-bound`, hyphens, underscores and spaces. A number is right
when it is within the question's relative tolerance of the expected value (5%); for critical-m the
answer is first rounded to the nearest integer. Nothing here raises on a user's answer: an
unreadable one is wrong, with a note saying why.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

from shardline.basics.units import GiB, KiB, MiB, TiB
from shardline.drill.questions import Question

__all__ = ["Graded", "parse_number", "normalize_word", "grade"]

_NUMBER = re.compile(r"^\s*([-+]?(?:\d+\.?\d*|\.\d+)(?:[eE][-+]?\d+)?)\s*(.*?)\s*$")
_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {"Ki": KiB, "Mi": MiB, "Gi": GiB, "Ti": TiB}
_TIME = {"s": 1.0, "sec": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "μs": 1e-6, "ns": 1e-9}
# Spellings of each question unit (compared case-insensitively), longest first.
_BASES = {
    "FLOP/B": ("flops/byte", "flop/byte", "flops/b", "flop/b", "flop/bytes"),
    "FLOP": ("flops", "flop"),
    "B": ("bytes", "byte", "b"),
    "s": (),
    "": (),
}


@dataclass(frozen=True)
class Graded:
    """A question with its answer: the text given (None: no answer), the value read, right or
    wrong, and a note (why an answer could not be read)."""

    question: Question
    answer: str | None
    value: float | str | None
    correct: bool
    note: str = ""


def parse_number(text: str, unit: str) -> float:
    """`text` in SI units of `unit` ("FLOP/B", "FLOP", "B", "s" or "" for a pure number).
    Raises ValueError when it cannot be read."""
    match = _NUMBER.match(text.replace(",", "").replace("_", ""))
    if not match:
        raise ValueError(f"cannot read {text.strip()!r} as a number")
    value, suffix = float(match.group(1)), match.group(2).replace(" ", "")
    if not math.isfinite(value):
        raise ValueError(f"{text.strip()!r} is not a finite number")
    if suffix == "%":
        return value / 100
    if unit == "s" and suffix in _TIME:
        return value * _TIME[suffix]
    for base in _BASES.get(unit, ()):
        if suffix.lower().endswith(base) and len(suffix) >= len(base):
            suffix = suffix[: len(suffix) - len(base)]
            break
    if suffix in _BINARY:
        return value * _BINARY[suffix]
    if suffix in _PREFIX:
        return value * _PREFIX[suffix]
    want = f" in {unit}" if unit else ""
    raise ValueError(f"cannot read the unit {match.group(2)!r} of {text.strip()!r}{want}")


def normalize_word(text: str) -> str:
    """'Memory-bound' -> 'memory', 'All_Gather' -> 'allgather'."""
    word = text.strip().lower()
    for tail in ("-bound", " bound", "_bound", "bound"):
        if word.endswith(tail) and len(word) > len(tail):
            word = word[: -len(tail)]
            break
    return re.sub(r"[-_\s]+", "", word)


def _close(value: float, q: Question) -> bool:
    expected = float(q.expected)
    if q.round_to_int:
        value = float(round(value))
    return abs(value - expected) <= q.tolerance * abs(expected)


def grade(q: Question, answer: str | None) -> Graded:
    """Grade one answer (None or blank: no answer, wrong)."""
    if answer is None or not answer.strip():
        return Graded(q, None, None, False, "no answer")
    if q.unit == "word":
        word = normalize_word(answer)
        return Graded(q, answer, word, word == normalize_word(str(q.expected)))
    try:
        value = parse_number(answer, q.unit)
    except ValueError as exc:
        return Graded(q, answer, None, False, str(exc))
    return Graded(q, answer, value, _close(value, q))
