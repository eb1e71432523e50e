"""`Any` stays rare in the source (issue 23, "One currency"): under 10 lines that name it per 1,000
lines of `src/`, counted as `grep -rc '\\bAny\\b' src --include=*.py` counts (lines, not
occurrences). Values are typed with the shared aliases of `shardline.basics.values` (`Scalar`,
`Words`, `JSONDict`), the `Literal` vocabularies of `shardline.basics.kinds`, TypedDicts and
dataclasses, or `object` where a value is truly opaque."""

from __future__ import annotations

import re
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src"
LIMIT_PER_1000_LINES = 10
ANY = re.compile(r"\bAny\b")


def _count(text: str) -> tuple[int, int]:
    """(lines that name Any, lines), as `grep -c` and `wc -l` count them."""
    lines = text.splitlines()
    return sum(1 for line in lines if ANY.search(line)), len(lines)


def test_the_counter_counts_lines_that_name_any() -> None:
    text = "from typing import Any\nx: Any = 1  # Any\ny: int = 2\nAnyway = 3\n"
    assert _count(text) == (2, 4)  # "Anyway" is another word


def test_any_is_under_ten_per_thousand_lines_of_src() -> None:
    named = total = 0
    for path in sorted(SRC.rglob("*.py")):
        n, lines = _count(path.read_text(encoding="utf-8"))
        named, total = named + n, total + lines
    assert total > 10_000  # the whole package was read
    per_1000 = 1000 * named / total
    assert per_1000 < LIMIT_PER_1000_LINES, (
        f"{named} lines name Any in {total} lines of src/: {per_1000:.1f} per 1,000 "
        f"(limit {LIMIT_PER_1000_LINES}); type the new ones (shardline.basics.values)"
    )
