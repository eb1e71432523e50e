"""`shardline drill [--topic T] [--hw CHIP] [--seed N] [--count K] [--answers FILE] [--json]`:
practice questions graded with a stated tolerance, each followed by its worked answer."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterator
from typing import TYPE_CHECKING

from shardline.cli.args import add_json_arg
from shardline.cli.common import emit_json
from shardline.errors import InputError

if TYPE_CHECKING:
    from shardline.drill import Question, Session
    from shardline.hardware import Chip

__all__ = ["register"]

DEFAULT_HW = "a100-40gb"


def register(sub: argparse._SubParsersAction) -> None:
    dr = sub.add_parser(
        "drill",
        help="practice: questions with realistic shapes, graded answers, worked answers",
        description="Ask questions one at a time (intensity, bound, critical M, sharding, "
        "collectives, pipeline bubble), grade each answer (numbers within 5%%, words exactly) "
        "and show the worked answer, the bound called first. Answers are read from stdin, "
        "one per line, or from --answers FILE.",
    )
    dr.add_argument(
        "--topic",
        default=None,
        help="intensity, bound, critical-m, sharding, collective or pipeline, or several "
        "separated by commas (default: all, in turn)",
    )
    dr.add_argument(
        "--hw",
        default=DEFAULT_HW,
        help=f"chip name or alias, or 'any' for a chip drawn per question (default: {DEFAULT_HW})",
    )
    dr.add_argument("--seed", type=int, default=None, help="repeat a session (default: random)")
    dr.add_argument("--count", type=int, default=5, help="questions to ask (default: 5)")
    dr.add_argument(
        "--answers",
        metavar="FILE",
        default=None,
        help="grade a file of answers, one per line in question order (a blank line: no answer)",
    )
    add_json_arg(dr)
    dr.set_defaults(func=run)


def _chips(hw: str) -> list[Chip]:
    from shardline.hardware import list_chips, load_chip

    if hw.strip().lower() == "any":
        return sorted(list_chips(), key=lambda c: c.name)
    return [load_chip(hw)]


def _read_answers(path: str) -> list[str]:
    """The answers file's lines: a regular file of sane size (a FIFO would block forever)."""
    from shardline.io.inputs import read_input_bytes

    data = read_input_bytes(path, "answers file", max_bytes=16 * 2**20)
    try:
        return data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise InputError(f"cannot read the answers file {path}: not UTF-8 text") from None


def _stdin_lines() -> Iterator[str]:
    """Answers typed at the prompt, until end of input."""
    while True:
        try:
            yield input("answer> ")
        except EOFError:
            sys.stdout.write("\n")
            return


def _interactive(questions: list[Question], seed: int, hw: str) -> Session:
    """Ask, read, grade and explain one question at a time; end of input ends the session."""
    from shardline.drill import grade_all
    from shardline.report.drill_text import render_graded, render_question

    answers: list[str] = []
    lines = _stdin_lines()
    total = len(questions)
    for i, q in enumerate(questions, start=1):
        sys.stdout.write(render_question(i, total, q))
        sys.stdout.flush()
        answer = next(lines, None)
        if answer is None:
            break
        answers.append(answer)
        graded = grade_all([q], [answer], seed, hw).graded[0]
        sys.stdout.write(render_graded(i, total, graded, with_question=False) + "\n")
    return grade_all(questions[: len(answers)], answers, seed, hw)


def run(args: argparse.Namespace) -> int:
    import random

    from shardline.drill import check_count, grade_all, make_questions, parse_topics
    from shardline.report.drill_text import drill_json, render_graded, render_score

    topics = parse_topics(args.topic)
    count = check_count(args.count)
    answers = _read_answers(args.answers) if args.answers else None
    chips = _chips(args.hw)
    hw = "any" if len(chips) > 1 else chips[0].name
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    questions = make_questions(topics, chips, seed, count)
    if answers is None and args.json:  # scripted: the answers come on stdin, no prompts
        answers = sys.stdin.read().splitlines()
    if answers is None:
        session = _interactive(questions, seed, hw)
        sys.stdout.write(render_score(session))
        return 0
    session = grade_all(questions, answers[: len(questions)], seed, hw)
    if args.json:
        emit_json(drill_json(session))
        return 0
    for i, g in enumerate(session.graded, start=1):
        sys.stdout.write(render_graded(i, session.count, g) + "\n")
    sys.stdout.write(render_score(session))
    return 0
