"""A drill session: the questions a seed gives, and the score of a list of answers.

The same (topics, chips, seed, count) always gives the same questions: every draw comes from one
`random.Random(seed)`, topic after topic in turn.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from shardline.drill.grading import Graded, grade
from shardline.drill.questions import TOPICS, Question, make_question
from shardline.errors import InputError
from shardline.hardware import Chip

__all__ = ["MAX_COUNT", "Session", "parse_topics", "check_count", "make_questions", "grade_all"]

MAX_COUNT = 1000


@dataclass(frozen=True)
class Session:
    """Graded questions, in order; `seed` and `hw` replay them."""

    graded: tuple[Graded, ...]
    seed: int
    hw: str

    @property
    def score(self) -> int:
        return sum(1 for g in self.graded if g.correct)

    @property
    def count(self) -> int:
        return len(self.graded)

    @property
    def missed_topics(self) -> list[str]:
        """Topics with at least one wrong answer, in the order first missed."""
        return list(dict.fromkeys(g.question.topic for g in self.graded if not g.correct))


def parse_topics(text: str | None) -> tuple[str, ...]:
    """'bound' or 'intensity,pipeline' -> the topics; None or 'all' -> every topic."""
    if text is None or text.strip().lower() == "all":
        return TOPICS
    words = [w.strip().lower() for w in text.split(",") if w.strip()]
    unknown = [w for w in words if w not in TOPICS]
    if unknown or not words:
        raise InputError(
            f"unknown drill topic {', '.join(unknown) or repr(text)}; topics are "
            f"{', '.join(TOPICS)} (or all)"
        )
    return tuple(dict.fromkeys(words))


def check_count(count: int) -> int:
    if not 1 <= count <= MAX_COUNT:
        raise InputError(f"--count must be between 1 and {MAX_COUNT}, got {count}")
    return count


def make_questions(
    topics: Sequence[str], chips: Sequence[Chip], seed: int, count: int
) -> list[Question]:
    """`count` questions cycling through `topics`; each draws its chip from `chips` (one chip:
    always that one)."""
    if not chips:
        raise InputError("a drill needs at least one chip")
    rng = random.Random(seed)
    out = []
    for i in range(check_count(count)):
        chip = chips[0] if len(chips) == 1 else rng.choice(list(chips))
        out.append(make_question(topics[i % len(topics)], rng, chip))
    return out


def grade_all(
    questions: Sequence[Question], answers: Sequence[str | None], seed: int, hw: str
) -> Session:
    """Grade answers in question order; a missing answer is wrong."""
    padded = list(answers) + [None] * (len(questions) - len(answers))
    graded = tuple(grade(q, a) for q, a in zip(questions, padded, strict=False))
    return Session(graded, seed, hw)
