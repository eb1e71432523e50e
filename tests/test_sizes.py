"""Small pieces: limits on every Python module under src/shardline, checked on the source (ast).

- No function (or method, or nested function) longer than 60 lines, counted from its `def` line to
  its last line, both included (decorators not counted).
- No module longer than 500 lines. Only `.py` files count: rendering templates and chip tables kept
  as data files (.toml, .html, ...) are data, not code.
- No function with more than 8 parameters: positional-only, ordinary and keyword-only parameters
  each count 1, `*args` and `**kwargs` count 1 each, and `self`/`cls` do not count. Long lists are
  grouped with `Precision`, `RateOverrides` and `NetworkOptions`.

Each failure lists every offender, one line each: `path:line name size`.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE_DIR = ROOT / "src" / "shardline"
MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 500
MAX_PARAMETERS = 8

Function = ast.FunctionDef | ast.AsyncFunctionDef


def _sources() -> list[tuple[str, str]]:
    """(path relative to the repository, text) of every module under src/shardline."""
    paths = sorted(PACKAGE_DIR.rglob("*.py"))
    return [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in paths]


SOURCES = _sources()


def _functions(text: str) -> list[Function]:
    tree = ast.parse(text)
    found = [n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)]
    return sorted(found, key=lambda n: n.lineno)


def function_lines(node: Function) -> int:
    end = node.end_lineno if node.end_lineno is not None else node.lineno
    return end - node.lineno + 1


def parameter_count(node: Function) -> int:
    args = node.args
    named = [*args.posonlyargs, *args.args, *args.kwonlyargs]
    count = sum(1 for a in named if a.arg not in ("self", "cls"))
    return count + (args.vararg is not None) + (args.kwarg is not None)


def module_lines(text: str) -> int:
    return len(text.splitlines())


def _fail_if(bad: list[str], header: str) -> None:
    if bad:
        pytest.fail(f"{header} ({len(bad)}):\n" + "\n".join(bad), pytrace=False)


def test_the_counts_on_a_made_up_module() -> None:
    """The measures themselves, on code whose sizes are known by construction."""
    body = "\n".join(f"    x{i} = {i}" for i in range(59))
    text = (
        f"def long(a, b, /, c, *args, d, e=1, **kw):\n{body}\n"
        "class K:\n"
        "    def method(self, a, b):\n"
        "        return a\n"
        "    @classmethod\n"
        "    def build(cls, *, a):\n"
        "        return a\n"
    )
    long, method, build = _functions(text)
    # def line + 59 body lines: 60 lines, at the limit
    assert (long.name, function_lines(long)) == ("long", 60)
    # a, b (positional-only), c, *args, d, e (keyword-only), **kw: 7
    assert parameter_count(long) == 7
    assert (parameter_count(method), function_lines(method)) == (2, 2)
    assert parameter_count(build) == 1
    assert module_lines(text) == 1 + 59 + 6


def test_no_function_over_60_lines() -> None:
    bad = []
    for path, text in SOURCES:
        for node in _functions(text):
            size = function_lines(node)
            if size > MAX_FUNCTION_LINES:
                bad.append(f"{path}:{node.lineno} {node.name} {size}")
    _fail_if(bad, f"functions over {MAX_FUNCTION_LINES} lines")


def test_no_module_over_500_lines() -> None:
    bad = []
    for path, text in SOURCES:
        size = module_lines(text)
        if size > MAX_MODULE_LINES:
            bad.append(f"{path}:1 {Path(path).stem} {size}")
    _fail_if(bad, f"modules over {MAX_MODULE_LINES} lines")


def test_no_function_with_more_than_8_parameters() -> None:
    bad = []
    for path, text in SOURCES:
        for node in _functions(text):
            size = parameter_count(node)
            if size > MAX_PARAMETERS:
                bad.append(f"{path}:{node.lineno} {node.name} {size}")
    _fail_if(bad, f"functions with more than {MAX_PARAMETERS} parameters")
