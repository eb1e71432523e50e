"""Every command shown in README.md and docs/*.md runs and prints exactly what is shown."""

from __future__ import annotations

import pytest

from tests.docs_runner import doc_files, examples, run

CASES = [ex for path in doc_files() if path.exists() for ex in examples(path)]


@pytest.mark.parametrize("example", CASES, ids=[f"{e.path.name}:{e.command[:60]}" for e in CASES])
def test_doc_example(example) -> None:  # type: ignore[no-untyped-def]
    code, output = run(example.command)
    expected_code = 2 if example.shown.startswith("error:") else 0
    assert code == expected_code, output
    assert output == example.shown.rstrip("\n"), f"{example.path.name}: `{example.command}` output changed; run python tests/docs_runner.py --update"
