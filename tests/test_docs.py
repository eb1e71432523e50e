"""Every command shown in README.md and docs/*.md runs and prints exactly what is shown."""

from __future__ import annotations

import pytest

from tests.docs_runner import ROOT, doc_files, examples, python_blocks, run

CASES = [ex for path in doc_files() if path.exists() for ex in examples(path)]


@pytest.mark.parametrize("example", CASES, ids=[f"{e.path.name}:{e.command[:60]}" for e in CASES])
def test_doc_example(example) -> None:  # type: ignore[no-untyped-def]
    code, output = run(example.command)
    expected_code = 2 if example.shown.startswith("error:") else 0
    assert code == expected_code, output
    assert output == example.shown.rstrip("\n"), (
        f"{example.path.name}: `{example.command}` output changed; "
        "run python tests/docs_runner.py --update"
    )


SNIPPETS = [(path, code) for path in doc_files() if path.exists() for code in python_blocks(path)]


@pytest.mark.parametrize(
    ("path", "code"), SNIPPETS, ids=[f"{p.name}:python{i}" for i, (p, _) in enumerate(SNIPPETS)]
)
def test_doc_python_snippet(path, code, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.chdir(ROOT)
    exec(compile(code, str(path), "exec"), {"__name__": "__doc_snippet__"})
