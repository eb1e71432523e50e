"""A small evaluator for the spreadsheet formulas `shardline template` writes, so that tests can
recompute a workbook the way Excel, LibreOffice or Google Sheets would and compare with the library.

Supported (the subset the template emits; anything else raises): numbers, "strings", TRUE/FALSE,
A1 and $A$1 references, A1:B9 ranges, + - * / & = <> < <= > >=, unary -, parentheses, and the
functions IF, MAX, SUM, SUMPRODUCT, VLOOKUP (exact match), ROUNDUP, COUNTIF (equality).
Semantics follow Excel: an empty cell is 0 in arithmetic and "" in comparisons, text in
SUMPRODUCT/SUM ranges counts as 0, text comparisons ignore case.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from typing import Any

FUNCTIONS = {"IF", "MAX", "SUM", "SUMPRODUCT", "VLOOKUP", "ROUNDUP", "COUNTIF"}

_TOKEN = re.compile(
    r"""
    (?P<ws>\s+)
  | (?P<number>\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?)
  | (?P<string>"(?:[^"]|"")*")
  | (?P<range>\$?[A-Z]{1,3}\$?\d+:\$?[A-Z]{1,3}\$?\d+)
  | (?P<func>[A-Z][A-Z0-9.]*(?=\())
  | (?P<bool>TRUE|FALSE)
  | (?P<cell>\$?[A-Z]{1,3}\$?\d+)
  | (?P<op><>|<=|>=|[-+*/&=<>(),])
""",
    re.X,
)


def tokenize(text: str) -> list[tuple[str, str]]:
    tokens, pos = [], 0
    while pos < len(text):
        match = _TOKEN.match(text, pos)
        if not match:
            raise ValueError(f"cannot tokenize {text[pos:]!r} in {text!r}")
        pos = match.end()
        kind = match.lastgroup
        assert kind is not None
        if kind != "ws":
            tokens.append((kind, match.group()))
    return tokens


def _col_index(letters: str) -> int:
    value = 0
    for ch in letters:
        value = value * 26 + ord(ch) - 64
    return value


def _split_ref(ref: str) -> tuple[int, int]:
    match = re.fullmatch(r"\$?([A-Z]{1,3})\$?(\d+)", ref)
    assert match, ref
    return _col_index(match.group(1)), int(match.group(2))


class Range:
    def __init__(self, rows: list[list[Any]]) -> None:
        self.rows = rows

    def flat(self) -> list[Any]:
        return [v for row in self.rows for v in row]


def _num(value: Any) -> float:
    if value is None or value == "":
        return 0.0
    if isinstance(value, bool):
        return 1.0 if value else 0.0
    if isinstance(value, int | float):
        return float(value)
    raise TypeError(f"#VALUE!: {value!r} is not a number")


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


def _compare(op: str, a: Any, b: Any) -> bool:
    a = "" if a is None else a
    b = "" if b is None else b
    if isinstance(a, str) or isinstance(b, str):
        if isinstance(a, str) and isinstance(b, str):
            x, y = a.lower(), b.lower()
        else:  # Excel: numbers sort before text and never equal it
            if op in ("=", "<>"):
                return op == "<>"
            x, y = (0, 1) if not isinstance(a, str) else (1, 0)
    else:
        x, y = _num(a), _num(b)
    return {"=": x == y, "<>": x != y, "<": x < y, "<=": x <= y, ">": x > y, ">=": x >= y}[op]


class Workbook:
    """Evaluate formulas over a grid of cells {(col, row): value}; formulas are strings with '='."""

    def __init__(self, cells: dict[tuple[int, int], Any]) -> None:
        self.cells = cells
        self.cache: dict[tuple[int, int], Any] = {}
        self.functions_used: set[str] = set()

    @classmethod
    def from_openpyxl(cls, ws: Any) -> Workbook:
        cells = {}
        for row in ws.iter_rows():
            for cell in row:
                if cell.value is not None:
                    cells[(cell.column, cell.row)] = cell.value
        return cls(cells)

    def value(self, ref: str) -> Any:
        return self._cell(*_split_ref(ref))

    def set(self, ref: str, value: Any) -> None:
        self.cells[_split_ref(ref)] = value
        self.cache.clear()

    def _cell(self, col: int, row: int) -> Any:
        key = (col, row)
        if key in self.cache:
            return self.cache[key]
        raw = self.cells.get(key)
        value = self.evaluate(raw[1:]) if isinstance(raw, str) and raw.startswith("=") else raw
        self.cache[key] = value
        return value

    def _range(self, text: str) -> Range:
        a, b = text.split(":")
        c1, r1 = _split_ref(a)
        c2, r2 = _split_ref(b)
        return Range([[self._cell(c, r) for c in range(c1, c2 + 1)] for r in range(r1, r2 + 1)])

    def evaluate(self, formula: str) -> Any:
        tokens = tokenize(formula)
        parser = _Parser(tokens, self)
        thunk = parser.expression()
        if parser.pos != len(tokens):
            raise ValueError(f"trailing tokens in {formula!r}")
        return thunk()


class _Parser:
    """Recursive descent to thunks (so IF evaluates only the branch it takes)."""

    def __init__(self, tokens: list[tuple[str, str]], book: Workbook) -> None:
        self.tokens, self.pos, self.book = tokens, 0, book

    def peek(self) -> tuple[str, str] | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self, text: str | None = None) -> tuple[str, str]:
        token = self.tokens[self.pos]
        if text is not None and token[1] != text:
            raise ValueError(f"expected {text!r}, got {token[1]!r}")
        self.pos += 1
        return token

    def expression(self) -> Callable[[], Any]:
        left = self.concat()
        token = self.peek()
        if token and token[1] in ("=", "<>", "<", "<=", ">", ">="):
            op = self.take()[1]
            right = self.concat()
            return lambda: _compare(op, left(), right())
        return left

    def concat(self) -> Callable[[], Any]:
        left = self.additive()
        while (token := self.peek()) and token[1] == "&":
            self.take()
            right = self.additive()
            left = (lambda lf, rt: lambda: _text(lf()) + _text(rt()))(left, right)
        return left

    def additive(self) -> Callable[[], Any]:
        left = self.term()
        while (token := self.peek()) and token[1] in "+-" and token[0] == "op":
            op = self.take()[1]
            right = self.term()
            if op == "+":
                left = (lambda lf, rt: lambda: _num(lf()) + _num(rt()))(left, right)
            else:
                left = (lambda lf, rt: lambda: _num(lf()) - _num(rt()))(left, right)
        return left

    def term(self) -> Callable[[], Any]:
        left = self.unary()
        while (token := self.peek()) and token[1] in ("*", "/"):
            op = self.take()[1]
            right = self.unary()
            if op == "*":
                left = (lambda lf, rt: lambda: _num(lf()) * _num(rt()))(left, right)
            else:

                def divide(lf: Callable[[], Any] = left, rt: Callable[[], Any] = right) -> float:
                    denominator = _num(rt())
                    if denominator == 0:
                        raise ZeroDivisionError("#DIV/0!")
                    return _num(lf()) / denominator

                left = divide
        return left

    def unary(self) -> Callable[[], Any]:
        token = self.peek()
        if token and token[1] in ("-", "+") and token[0] == "op":
            op = self.take()[1]
            inner = self.unary()
            return (lambda: -_num(inner())) if op == "-" else (lambda: _num(inner()))
        return self.primary()

    def primary(self) -> Callable[[], Any]:
        kind, text = self.take()
        if kind == "number":
            value = float(text)
            return lambda: value
        if kind == "string":
            s = text[1:-1].replace('""', '"')
            return lambda: s
        if kind == "bool":
            b = text == "TRUE"
            return lambda: b
        if kind == "cell":
            return lambda: self.book.value(text)
        if kind == "range":
            return lambda: self.book._range(text)
        if kind == "func":
            return self.function(text)
        if text == "(":
            inner = self.expression()
            self.take(")")
            return inner
        raise ValueError(f"unexpected token {text!r}")

    def function(self, name: str) -> Callable[[], Any]:
        if name not in FUNCTIONS:
            raise ValueError(f"function {name} is not in the supported subset")
        self.book.functions_used.add(name)
        self.take("(")
        args: list[Callable[[], Any]] = []
        if self.peek() and self.peek()[1] != ")":  # type: ignore[index]
            args.append(self.expression())
            while self.peek() and self.peek()[1] == ",":  # type: ignore[index]
                self.take(",")
                args.append(self.expression())
        self.take(")")
        return lambda: _call(name, args)


def _values(items: list[Any]) -> list[Any]:
    out: list[Any] = []
    for item in items:
        out += item.flat() if isinstance(item, Range) else [item]
    return out


def _call(name: str, args: list[Callable[[], Any]]) -> Any:
    if name == "IF":
        condition = args[0]()
        if isinstance(condition, str):
            raise TypeError("#VALUE!: IF condition is text")
        return args[1]() if condition else (args[2]() if len(args) > 2 else False)
    values = [a() for a in args]
    if name == "MAX":
        numbers = [
            v for v in _values(values) if isinstance(v, int | float) and not isinstance(v, bool)
        ]
        return max(numbers) if numbers else 0.0
    if name == "SUM":
        return float(
            sum(
                v for v in _values(values) if isinstance(v, int | float) and not isinstance(v, bool)
            )
        )
    if name == "SUMPRODUCT":
        columns = [v.flat() for v in values]
        total = 0.0
        for row in zip(*columns, strict=True):
            product = 1.0
            for v in row:  # text and empty cells are 0 in SUMPRODUCT
                product *= (
                    float(v) if isinstance(v, int | float) and not isinstance(v, bool) else 0.0
                )
            total += product
        return total
    if name == "VLOOKUP":
        key, table, col, approximate = values
        if approximate:
            raise ValueError("only exact VLOOKUP is supported")
        for row in table.rows:
            if _compare("=", row[0], key) and row[0] is not None:
                result = row[int(_num(col)) - 1]
                return 0.0 if result is None else result
        raise LookupError(f"#N/A: {key!r} not found")
    if name == "ROUNDUP":
        x, digits = _num(values[0]), int(_num(values[1]))
        scale = 10.0**digits
        return math.copysign(math.ceil(abs(x) * scale) / scale, x)
    if name == "COUNTIF":
        rng, criterion = values
        return float(sum(1 for v in rng.flat() if v is not None and _compare("=", v, criterion)))
    raise ValueError(name)
