"""The toy strategy of docs/stack-and-plans.md "Adding a strategy", as its code block defines it
(tests of the strategy registry share it)."""

from __future__ import annotations

import re
from pathlib import Path

from shardline.strategies import Strategy

DOC = Path(__file__).resolve().parent.parent / "docs" / "stack-and-plans.md"


def doc_section() -> str:
    """The docs' "Adding a strategy" section, to the end of the page."""
    text = DOC.read_text()
    return text[text.index("## Adding a strategy") :]


def doc_strategy() -> Strategy:
    """The STRATEGY the section's Python block defines."""
    code = re.search(r"```python\n(.*?)```", doc_section(), re.S)
    assert code is not None
    scope: dict[str, object] = {"__name__": "sp_example"}
    exec(compile(code.group(1), str(DOC), "exec"), scope)
    found = scope["STRATEGY"]
    assert isinstance(found, Strategy)
    return found
