"""The fast reader of workload TOML (shardline.io.toml_subset) against the standard library's
tomllib: the same dict on every TOML file shipped and on random files, or None (tomllib reads
those); never a dict where tomllib gives another or an error."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardline.io.toml_subset import loads_subset

ROOT = Path(__file__).resolve().parent.parent


def _agrees(text: str) -> dict | None:
    """loads_subset(text), checked against tomllib: None, or tomllib's own dict."""
    fast = loads_subset(text)
    if fast is not None:
        assert fast == tomllib.loads(text)
    return fast


def test_every_shipped_toml_file_reads_as_tomllib_reads_it() -> None:
    files = [p for p in ROOT.rglob("*.toml") if ".venv" not in p.parts and ".git" not in p.parts]
    assert len(files) > 100
    read = [p for p in files if _agrees(p.read_text(encoding="utf-8")) is not None]
    # every layer stack shipped is in the subset (templates with dotted tables go to tomllib)
    assert {p.name for p in read} >= {"seed003_stack.toml", "transformer_block.toml"}


@pytest.mark.parametrize(
    "text",
    [
        "a = 1\na = 2\n",  # a key twice
        "a = 1\n[[a]]\n",  # an array of tables over a key
        "[a]\n[a]\n",  # a table twice
        "[[a]]\n[a]\n",
        'a = "x\\ny"\n',  # escapes: tomllib's
        "a = 1\r\n",  # CRLF is in the subset
        "a = 1\rb = 2\n",  # a lone CR: tomllib's error
        "a = 1 # \x01\n",  # a control character in a comment
        "d = 1979-05-27\n",
        "h = 0x10\n",
        "f = inf\n",
        "x = [1, 2, ]\n",
        "t = { a = 1, }\n",
        "t = { a.b = 1 }\n",
        "a.b = 1\n",
        "n = 012\n",
        "s = '''x'''\n",
        's = """x"""\n',
        "x = [\n1]\n",
        "k = 1e400\n",
        "k = 1_000.5e-3\n",
        "[ t ] # c\nk = -0\n[[ l ]]\n",
        "[ [l]]\n",
        "k = " + "9" * 5000 + "\n",
        "\ufeffa = 1\n",
    ],
)
def test_edges_agree_with_tomllib(text: str) -> None:
    try:
        tomllib.loads(text)
    except (tomllib.TOMLDecodeError, ValueError):
        assert loads_subset(text) is None
    else:
        _agrees(text)


def test_the_common_lines_are_in_the_subset() -> None:
    text = (
        'name = "s"  # a comment\nrepeat = 2\n[dims]\nM = 8_192\n[[layer]]\n'
        "name = 'l1'\nshapes = { w = [8192, 32768], x = [] }\nweights = [\"w\",]\n"
        "[[layer]]\ncount = +3\nf = -1.5e3\nok = true\n"
    )
    assert _agrees(text) == {
        "name": "s",
        "repeat": 2,
        "dims": {"M": 8192},
        "layer": [
            {"name": "l1", "shapes": {"w": [8192, 32768], "x": []}, "weights": ["w"]},
            {"count": 3, "f": -1500.0, "ok": True},
        ],
    }


# --- random files ------------------------------------------------------------------------------
_KEYS = st.from_regex(r"[A-Za-z0-9_-]{1,6}", fullmatch=True)
_SPACE = st.sampled_from(["", " ", "\t", "  "])
_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=8)


def _scalar() -> st.SearchStrategy[str]:
    basic = _TEXT.filter(lambda s: not any(c in s for c in '"\\') and s.isprintable())
    literal = _TEXT.filter(lambda s: "'" not in s and s.isprintable())
    return st.one_of(
        basic.map(lambda s: f'"{s}"'),
        literal.map(lambda s: f"'{s}'"),
        st.integers(-(10**20), 10**20).map(str),
        st.integers(0, 10**9).map(lambda i: f"{i:_}"),
        st.floats(allow_nan=False, allow_infinity=False).map(repr),
        st.sampled_from(["true", "false"]),
    )


def _value() -> st.SearchStrategy[str]:
    def compound(inner: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
        array = st.tuples(st.lists(inner, max_size=3), _SPACE, st.booleans()).map(
            lambda t: "[" + t[1] + ", ".join(t[0]) + ("," if t[2] and t[0] else "") + "]"
        )
        table = st.dictionaries(_KEYS, inner, max_size=3).map(
            lambda d: "{" + ", ".join(f"{k} = {v}" for k, v in d.items()) + "}"
        )
        return st.one_of(array, table)

    return st.recursive(_scalar(), compound, max_leaves=6)


def _pairs() -> st.SearchStrategy[list[str]]:
    comment = st.one_of(st.just(""), _TEXT.filter(str.isprintable).map(lambda s: " #" + s))
    line = st.tuples(_KEYS, _SPACE, _value(), comment).map(
        lambda t: f"{t[0]}{t[1]}={t[1]}{t[2]}{t[3]}"
    )
    return st.lists(line, max_size=4, unique_by=lambda s: s.split("=")[0].strip())


# built once: a strategy built inside each draw is validated (and its lambdas described) anew
# every time, most of the test's time
_PAIRS = _pairs()
_NEWLINES = st.sampled_from(["\n", "\r\n"])


@st.composite
def _documents(draw: st.DrawFn) -> str:
    lines = draw(_PAIRS)
    roots = {line.split("=")[0].strip() for line in lines}
    names = draw(st.lists(_KEYS.filter(lambda k: k not in roots), max_size=3, unique=True))
    for name in names:
        if draw(st.booleans()):
            lines.append(f"[{name}]")
            lines += draw(_PAIRS)
        else:
            for _ in range(draw(st.integers(1, 3))):
                lines.append(f"[[{name}]]")
                lines += draw(_PAIRS)
    return draw(_NEWLINES).join(lines) + "\n"


@settings(max_examples=150, deadline=None)
@given(_documents())
def test_random_files_in_the_subset_read_as_tomllib_reads_them(text: str) -> None:
    assert _agrees(text) is not None


_PIECES = [*"\"'[]{},=#\\\r\n\x00\x7f. e_-+x0:\t", "", "true", "[[a]]", "a = 1"]
_EDITS = st.lists(
    st.tuples(st.integers(0, 10**6), st.sampled_from(_PIECES)), min_size=1, max_size=4
)


@settings(max_examples=300, deadline=None)
@given(_documents(), _EDITS)
def test_broken_random_files_are_read_as_tomllib_reads_them_or_left_to_it(
    text: str, edits: list[tuple[int, str]]
) -> None:
    """Characters put in (or a span taken out) at random places: the reader gives tomllib's
    dict or None, and None whenever tomllib reports an error."""
    for at, piece in edits:
        at %= len(text) + 1
        text = text[:at] + piece + text[at + (0 if piece else 3) :]
    _agrees(text)
