"""The README opens with exactly two set-up commands, and CI runs the second one."""

from __future__ import annotations

import re
from pathlib import Path

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
    assert commands[1] == 'pip install -e ".[test]" && python -m pytest'


def test_ci_runs_the_readme_test_command() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python3 -m venv" in script
    commands = _setup_commands()
    assert commands[1] in script.splitlines()
    assert (ROOT / ".ci" / "run").stat().st_mode & 0o111, ".ci/run must be executable"
