"""The README opens with exactly two set-up commands, and CI runs the second one."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _setup_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    first_block = re.search(r"```\n(.*?)```", text, re.S)
    assert first_block, "README must open with a code block of set-up commands"
    return [line for line in first_block.group(1).splitlines() if line.strip()]


def test_readme_opens_with_two_setup_commands() -> None:
    commands = _setup_commands()
    assert len(commands) == 2
    assert commands[0].startswith("pip install . && shardline ")
    assert commands[1] == 'pip install -e ".[test]" && python -m pytest -n auto'


def test_ci_runs_the_readme_test_command() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python3 -m venv" in script
    commands = _setup_commands()
    assert commands[1] in script.splitlines()
    assert (ROOT / ".ci" / "run").stat().st_mode & 0o111, ".ci/run must be executable"


COUNT_SLACK = 0.05  # other work lands tests between measurements: 5% before the README is stale


def test_readme_test_count_is_the_suite_s(request: pytest.FixtureRequest) -> None:
    """The README's count of the fast suite's tests ("1,932 tests in ...") within 5% of the tests
    this session collected, when the session is that suite (every test file, no -k, slow ones
    deselected); a partial run has nothing to compare."""
    items = request.session.items
    files = {Path(item.path) for item in items}
    every = set((ROOT / "tests").glob("test_*.py"))
    config = request.config
    if files != every or config.option.keyword or config.option.markexpr != "not slow":
        pytest.skip("not the whole fast suite: the count is checked when it runs")
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    found = re.search(r"([\d,]+) tests in \d+ s", text)
    assert found, "the README states the fast suite's size as 'N tests in T s'"
    stated = int(found.group(1).replace(",", ""))
    assert abs(len(items) - stated) <= COUNT_SLACK * stated, (
        f"the README says {stated:,} tests; the suite has {len(items):,}"
    )
