"""Leave one source out: which figure of the data files came from which published source, and the
chip a run is scored against when its own source's figures are taken away.

Every number of the shipped data files (chips, systems, collective libraries, frameworks) carries
a source text. A figure is *measured* when its value was derived from timings (a chip's
`achievable.*` figures, every figure of a collective library file) and *stated* otherwise (a
datasheet's peak, a board's memory, a framework's configuration default): a stated figure says
what the hardware or the software is, a measured one how fast it runs, and only the latter can
carry a source's timing into a prediction of that same source's runs.

The published sources of benchmarks/data/e2e_runs.toml are named in e2e_sources.toml with the
strings that identify them in a figure's source text. A run of source S is scored out of source
against its chip file with every measured figure of S removed (the loader's assumed default, or
the chip's peak, stands in); a measured figure of S in a file that cannot be rebuilt per run (a
collective library) refuses the run, which is then reported without an out-of-source error.

    python benchmarks/e2e_loso.py            # every measured figure and the sources it names
    python benchmarks/e2e_loso.py --all      # the stated figures too
"""

from __future__ import annotations

import argparse
import sys
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))

PACKAGE = ROOT / "src" / "shardline"
SOURCES = ROOT / "benchmarks" / "data" / "e2e_sources.toml"
DATA_FOLDERS = {
    "chip": PACKAGE / "hardware" / "catalog",
    "system": PACKAGE / "hardware" / "systems",
    "collective library": PACKAGE / "collectives" / "libraries",
    "framework": PACKAGE / "basics" / "frameworks",
}


@dataclass(frozen=True)
class Figure:
    """One sourced number of a data file."""

    kind: str  # chip, system, collective library, framework
    file: str  # file name
    path: str  # dotted field path
    value: Any
    source: str
    measured: bool


def _leaves(node: Any, prefix: str = "") -> list[tuple[str, Any, str]]:
    """(dotted path, value, source) of every {value, source} table under `node`."""
    out: list[tuple[str, Any, str]] = []
    if isinstance(node, dict):
        if "value" in node and "source" in node:
            return [(prefix, node["value"], str(node["source"]))]
        for key, child in node.items():
            out += _leaves(child, f"{prefix}.{key}" if prefix else key)
    elif isinstance(node, list):
        for i, child in enumerate(node):
            out += _leaves(child, f"{prefix}[{i}]")
    return out


def _is_measured(kind: str, path: str) -> bool:
    return kind == "collective library" or (kind == "chip" and path.startswith("achievable."))


@cache
def figures() -> tuple[Figure, ...]:
    out: list[Figure] = []
    for kind, folder in DATA_FOLDERS.items():
        for path in sorted(folder.glob("*.toml")):
            data = tomllib.loads(path.read_text(encoding="utf-8"))
            out += [
                Figure(kind, path.name, where, value, source, _is_measured(kind, where))
                for where, value, source in _leaves(data)
            ]
    return tuple(out)


@cache
def source_patterns(path: Path = SOURCES) -> dict[str, tuple[str, ...]]:
    """source_id -> the lower-case strings that name that source in a figure's source text."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    return {s["id"]: tuple(m.lower() for m in s["matches"]) for s in data.get("source", [])}


def sources_of(figure: Figure) -> list[str]:
    """The e2e source ids a figure's source text names."""
    text = figure.source.lower()
    return [sid for sid, pats in source_patterns().items() if any(p in text for p in pats)]


def own_figures(source_id: str | None, chip_file: str | None) -> tuple[list[Figure], list[Figure]]:
    """The measured figures of `source_id` a run on `chip_file` would use: (those of its chip
    file, which can be removed; those of shared files, which refuse the run)."""
    if not source_id:
        return [], []
    mine = [f for f in figures() if f.measured and source_id in sources_of(f)]
    chip = [f for f in mine if f.kind == "chip" and f.file == chip_file]
    shared = [f for f in mine if f.kind == "collective library"]
    return chip, shared


def _drop(data: dict[str, Any], dotted: str) -> None:
    node = data
    parts = dotted.split(".")
    for part in parts[:-1]:
        node = node[part]
    node.pop(parts[-1], None)


def chip_without(chip_name: str, removed: list[Figure]) -> Any:
    """The catalog chip rebuilt from its file without the `removed` figures."""
    from shardline.hardware import chip_from_dict, load_chip

    chip = load_chip(chip_name)
    if not removed:
        return chip
    path = Path(chip.path or "")
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    for figure in removed:
        _drop(data, figure.path)
    return chip_from_dict(data, origin=f"{path.name} without its own source's figures")


def chip_file(chip_name: str) -> str | None:
    from shardline.hardware import load_chip

    path = load_chip(chip_name).path
    return Path(path).name if path else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--all", action="store_true", help="the stated figures too")
    args = parser.parse_args(argv)
    rows = [f for f in figures() if f.measured or args.all]
    for f in rows:
        named = ", ".join(sources_of(f)) or "-"
        kind = "measured" if f.measured else "stated"
        print(f"{f.kind:<18} {f.file:<22} {f.path:<48} {kind:<8} e2e sources: {named}")
    tainted = [f for f in figures() if f.measured and sources_of(f)]
    print(f"\n{len(rows)} figures listed; {len(tainted)} measured figures name an e2e source")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
