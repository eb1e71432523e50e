"""Which numbers of a data file (chip, system, fabric) lack a source: every number must be
`{value, source}` with a non-empty source."""

from __future__ import annotations

__all__ = ["unsourced_fields"]


def _is_number(node: object) -> bool:
    return isinstance(node, int | float) and not isinstance(node, bool)


def unsourced_fields(data: dict[str, object], path: str = "") -> list[str]:
    """Every fact in a parsed chip file that lacks a source: each number, or list of numbers, must
    be a table `{value = ..., source = "..."}` with a non-empty source. The dotted paths of those
    that are not, each with why. (`schema` is the file format's version, not a fact.)"""
    missing: list[str] = []
    for key, node in data.items():
        where = f"{path}.{key}" if path else key
        if where == "schema":
            continue
        if isinstance(node, dict) and "value" in node:
            source = node.get("source")
            if not isinstance(source, str) or not source.strip():
                missing.append(f"{where}: empty or missing source")
        elif isinstance(node, dict):
            missing += unsourced_fields(node, where)
        elif _is_number(node) or (isinstance(node, list) and any(map(_is_number, node))):
            missing.append(f"{where}: a bare value, not {{value, source}}")
    return missing
