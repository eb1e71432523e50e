"""A fast reader for the regular subset of TOML that workload files use; None for anything else.

The standard library's `tomllib` reads a 16 MB workload of 200,000 `[[layer]]` tables in 5-20 s
(a character at a time in Python). Workload files are regular: one `key = value` a line, a few
`[table]` headers and many `[[layer]]` headers. This reader takes that subset a line at a time
(identical lines, such as a layer's einsum, are parsed once) and gives the same dict `tomllib`
gives; anything outside the subset returns None and the caller reads the file with `tomllib`,
which parses it or reports the error. tests/test_toml_subset.py checks the two agree on every
TOML file shipped and on random files, well-formed and broken.

The subset (TOML 1.0, https://toml.io/en/v1.0.0):
- lines end in LF or CRLF (`tomllib.loads` turns CRLF into LF first; any other CR is outside);
- blank lines, comment lines and comments after a value (no control characters but tab);
- `[name]` and `[[name]]` headers of one bare key (A-Za-z0-9_-), each table defined once;
- `key = value` with a bare key, once per table; values: basic strings without escapes, literal
  strings (neither multi-line), decimal integers of at most 64 characters, decimal floats
  (fraction and/or exponent), true/false, and one-line arrays and inline tables of these, nested
  at most 16 deep.
Outside it (all read by `tomllib`): escapes, multi-line strings and arrays, dotted and quoted keys,
hex/octal/binary integers, inf/nan, dates and times.

The values of identical lines are shared objects: the result is for reading, not for changing.
"""

from __future__ import annotations

import re

__all__ = ["loads_subset"]

_CTRL = r"\x00-\x08\x0a-\x1f\x7f"  # TOML's control characters, tab excepted
_BAD = re.compile(f"[{_CTRL}]")
_COMMENT = f"(?:#[^{_CTRL}]*)?"
_KEY = r"[A-Za-z0-9_-]+"
_INT = r"[+-]?(?:0|[1-9][0-9]{0,30})"
# the common line, matched at once: key = "string" | integer | true | false, maybe a comment
_SIMPLE = re.compile(
    rf'[ \t]*({_KEY})[ \t]*=[ \t]*(?:"([^"\\{_CTRL}]*)"|({_INT})|(true|false))[ \t]*{_COMMENT}'
)
_KEY_EQ = re.compile(rf"[ \t]*({_KEY})[ \t]*=[ \t]*")
_TAIL = re.compile(rf"[ \t]*{_COMMENT}")
_BLANK = re.compile(rf"[ \t]*{_COMMENT}")
_TABLE = re.compile(rf"[ \t]*\[[ \t]*({_KEY})[ \t]*\][ \t]*{_COMMENT}")
_ARRAY_TABLE = re.compile(rf"[ \t]*\[\[[ \t]*({_KEY})[ \t]*\]\][ \t]*{_COMMENT}")
_WS = re.compile(r"[ \t]*")
# tomllib's decimal number (its RE_NUMBER without hex, octal and binary)
_NUMBER = re.compile(
    r"[+-]?(?:0|[1-9](?:_?[0-9])*)"
    r"(?P<frac>\.[0-9](?:_?[0-9])*)?(?P<exp>[eE][+-]?[0-9](?:_?[0-9])*)?"
)
_MAX_NUMBER_CHARS = 64  # longer ones go to tomllib (its limit on digits, its error message)
_MAX_DEPTH = 16
_MAX_CACHED_LINES = 4096  # parsed lines kept for reuse: bounded memory on any file


class _Outside(Exception):
    """The text leaves the subset: tomllib reads it."""


def loads_subset(text: str) -> dict[str, object] | None:
    """`tomllib.loads(text)` for text in the subset above; None for any other text."""
    text = text.replace("\r\n", "\n")
    if "\r" in text:
        return None
    try:
        return _read(text.split("\n"))
    except _Outside:
        return None


_KV, _TABLE_HEADER, _ARRAY_HEADER, _NOTHING = range(4)  # what a line is


def _read(lines: list[str]) -> dict[str, object]:
    """The lines in one pass: `table` is where keys go, `arrays` the [[name]] lists; a parsed
    line is kept (up to _MAX_CACHED_LINES of them) and reused when the same line comes again."""
    root: dict[str, object] = {}
    table = root
    arrays: dict[str, list[dict[str, object]]] = {}
    cache: dict[str, tuple[int, str, object]] = {}
    for line in lines:
        hit = cache.get(line)
        if hit is None:
            hit = _parse_line(line)
            if len(cache) < _MAX_CACHED_LINES:
                cache[line] = hit
        kind, key, value = hit
        if kind == _KV:
            if key in table:
                raise _Outside  # a key defined twice: tomllib's error
            table[key] = value
        elif kind == _ARRAY_HEADER:
            tables = arrays.get(key)
            if tables is None:
                if key in root:
                    raise _Outside  # [[name]] after a key or a [name]: tomllib's error
                tables = root[key] = arrays[key] = []
            table = {}
            tables.append(table)
        elif kind == _TABLE_HEADER:
            if key in root:
                raise _Outside  # a table defined twice: tomllib's error
            table = root[key] = {}
    return root


def _parse_line(line: str) -> tuple[int, str, object]:
    """(_KV, key, value), (_TABLE_HEADER or _ARRAY_HEADER, name, None) or (_NOTHING, "", None)
    for a blank or comment line."""
    m = _SIMPLE.fullmatch(line)
    if m is not None:
        key, text, integer, boolean = m.groups()
        if text is not None:
            return _KV, key, text
        if integer is not None:
            return _KV, key, int(integer)
        return _KV, key, boolean == "true"
    if _BLANK.fullmatch(line):
        return _NOTHING, "", None
    for pattern, kind in ((_ARRAY_TABLE, _ARRAY_HEADER), (_TABLE, _TABLE_HEADER)):
        m = pattern.fullmatch(line)
        if m is not None:
            return kind, m.group(1), None
    m = _KEY_EQ.match(line)
    if m is None:
        raise _Outside
    value, end = _value(line, m.end(), 0)
    if not _TAIL.fullmatch(line, end):
        raise _Outside
    return _KV, m.group(1), value


def _value(s: str, i: int, depth: int) -> tuple[object, int]:
    """The value starting at s[i] and the index after it."""
    c = s[i : i + 1]
    if c in ('"', "'"):
        return _string(s, i, c)
    if c == "[":
        return _array(s, i + 1, depth + 1)
    if c == "{":
        return _inline_table(s, i + 1, depth + 1)
    if s.startswith("true", i):
        return True, i + 4
    if s.startswith("false", i):
        return False, i + 5
    m = _NUMBER.match(s, i)
    if m is None or m.end() - i > _MAX_NUMBER_CHARS:
        raise _Outside
    text = m.group().replace("_", "")
    number = float(text) if m.group("frac") or m.group("exp") else int(text)
    return number, m.end()


def _string(s: str, i: int, quote: str) -> tuple[str, int]:
    """A one-line basic string without escapes, or a one-line literal string."""
    if s.startswith(quote * 3, i):
        raise _Outside  # multi-line strings
    end = s.find(quote, i + 1)
    if end < 0:
        raise _Outside
    body = s[i + 1 : end]
    if (quote == '"' and "\\" in body) or _BAD.search(body):
        raise _Outside
    return body, end + 1


def _array(s: str, i: int, depth: int) -> tuple[list[object], int]:
    """A one-line array after its "[": values, commas, an optional trailing comma, "]"."""
    if depth > _MAX_DEPTH:
        raise _Outside
    out: list[object] = []
    i = _WS.match(s, i).end()  # type: ignore[union-attr]  # [ \t]* always matches
    while s[i : i + 1] != "]":
        value, i = _value(s, i, depth)
        out.append(value)
        i = _WS.match(s, i).end()  # type: ignore[union-attr]
        if s[i : i + 1] == ",":
            i = _WS.match(s, i + 1).end()  # type: ignore[union-attr]
        elif s[i : i + 1] != "]":
            raise _Outside
    return out, i + 1


def _inline_table(s: str, i: int, depth: int) -> tuple[dict[str, object], int]:
    """A one-line inline table after its "{": bare keys, each once, no trailing comma."""
    if depth > _MAX_DEPTH:
        raise _Outside
    out: dict[str, object] = {}
    i = _WS.match(s, i).end()  # type: ignore[union-attr]
    if s[i : i + 1] == "}":
        return out, i + 1
    while True:
        m = _KEY_EQ.match(s, i)
        if m is None or m.group(1) in out:
            raise _Outside
        out[m.group(1)], i = _value(s, m.end(), depth)
        i = _WS.match(s, i).end()  # type: ignore[union-attr]
        c = s[i : i + 1]
        if c == "}":
            return out, i + 1
        if c != ",":
            raise _Outside
        i += 1
