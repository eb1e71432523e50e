"""User text made safe for the formats it is written to.

CSV: a cell that starts with `=`, `+`, `-`, `@`, a tab or a carriage return is run as a formula by
Excel, LibreOffice and Google Sheets ("CSV Injection", OWASP); it gets a leading single quote,
which the spreadsheet shows as text. Plain numbers ("-5", "+1.5e3") are values, not formulas, and
stay as they are. A carriage return inside text is written as a line feed, inside quotes.

Markdown: user text (names, titles, headers) is rendered as text, never as HTML or a link: `&`,
`<` and `>` become entities (no tag, no autolink such as `<javascript:...>`), the brackets of
Markdown's link and image syntax (`[x](javascript:...)`), a parenthesis right after one, the table
separator `|`, a backtick (which would open a code span) and the backslash itself are escaped
with a backslash. A line break becomes a space, so that a cell stays one table cell. A name
shown as code (`md_code`) is a code span only when it is a plain name; any other text is written
escaped, as above.

XLSX: a cell the tool writes as text is never a formula (the fast writer writes every string as an
inline string; the live template sets the text type on every name, source and label it copies, so
`=HYPERLINK(...)` or a DDE call `=cmd|' /C calc'!A0` is shown, never run).
"""

from __future__ import annotations

import re

__all__ = ["FORMULA_START", "csv_safe", "md_code", "md_text"]

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")
_PLAIN_NUMBER = re.compile(r"[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?")
_MD_SPECIAL = re.compile(r"([\\\[\]|`])")
_HTML = {"&": "&amp;", "<": "&lt;", ">": "&gt;"}


def csv_safe(value: object) -> object:
    """`value` as a CSV cell: text that a spreadsheet would run as a formula gets a leading `'`;
    a carriage return inside text becomes a line feed (which the CSV writer quotes: a bare CR
    would start a new row, whose first cell could be a formula); numbers are returned as they
    are."""
    if not isinstance(value, str):
        return value
    if value.startswith(FORMULA_START) and not _PLAIN_NUMBER.fullmatch(value):
        value = "'" + value
    return value.replace("\r\n", "\n").replace("\r", "\n") if "\r" in value else value


def md_text(text: str) -> str:
    """`text` for a Markdown table cell or heading: no raw HTML, no links, one line."""
    text = re.sub(r"[&<>]", lambda m: _HTML[m.group(0)], str(text))
    text = _MD_SPECIAL.sub(r"\\\1", text).replace("\\](", "\\]\\(")
    return re.sub(r"[\r\n]+", " ", text)


_PLAIN_NAME = re.compile(r"[A-Za-z0-9 ._+\-/:=,()]*")


def md_code(text: str) -> str:
    """`text` as a Markdown code span, backticks included, where it is a plain name (letters,
    digits, spaces and `._+-/:=,()`); anything else (a backtick would end the span early, and a
    page that renders the span's `<`, `>` as text in Markdown may still show them as HTML
    elsewhere) is written as escaped text (`md_text`) instead, without the span."""
    text = str(text)
    return f"`{text}`" if _PLAIN_NAME.fullmatch(text) else md_text(text)
