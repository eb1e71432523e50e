"""`shardline drill`: practice questions with realistic shapes and chips, graded with a stated
tolerance (numbers within 5%, words exactly), each with a worked answer.

- `questions`: the topics and one generator per topic (expected values from the library);
- `grading`: reading an answer (a number with units, or a word) and comparing it;
- `session`: the seeded list of questions and the score.
"""

from shardline.drill.grading import Graded, grade, normalize_word, parse_number
from shardline.drill.questions import REL_TOLERANCE, TOPICS, PipelineDrill, Question
from shardline.drill.session import (
    MAX_COUNT,
    Session,
    check_count,
    grade_all,
    make_questions,
    parse_topics,
)

__all__ = [
    "TOPICS",
    "REL_TOLERANCE",
    "MAX_COUNT",
    "Question",
    "PipelineDrill",
    "Graded",
    "Session",
    "grade",
    "grade_all",
    "make_questions",
    "parse_topics",
    "check_count",
    "parse_number",
    "normalize_word",
]
