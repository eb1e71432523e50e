"""Leave one source out for the serving rows: which figure of the data files came from which
serving publication, and the chip and engine a row is scored against out of its own source.

Every row of benchmarks/data/serving_published.csv names its publication in its `source` text;
benchmarks/data/serving_sources.toml lists each publication with the strings that name it in a
row's source (`rows`) and in a figure's source text (`matches`). The figures a serving prediction
reads: the chip file's (its `achievable.*` rates and kernel floors are measured, the rest
stated: benchmarks/e2e_loso.py), the collective libraries' (all measured), and the engine's table
of src/shardline/serving/engines.toml, whose one measured figure is the scheduling overhead (a
share of a step timed by a publication); its KV budget rule, memory fraction, chunk, reservation,
CUDA-graph batch and kernels are the engine's stated configuration. Out of source S:

- a measured chip figure naming S is taken out of the row's chip file: another publication's
  value where serving_sources.toml gives one (`[[fallback]]`), the loader's default otherwise;
- a measured engine figure naming S is another publication's value (`[[fallback]]`), or the row
  is refused (no out-of-source error: the figure could not be rebuilt without S);
- a collective library figure naming S refuses the row (a library serves every chip);
- a stated figure naming S is kept (it says what the engine is configured to do, not how fast
  it runs) and listed.

    python benchmarks/serving_loso.py    # every figure that names a serving source
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import sys
import tomllib
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from e2e_loso import Figure, chip_file, chip_without, figures  # noqa: E402

SOURCES = ROOT / "benchmarks" / "data" / "serving_sources.toml"
ROWS = ROOT / "benchmarks" / "data" / "serving_published.csv"
ENGINES = ROOT / "src" / "shardline" / "serving" / "engines.toml"
CATALOG = ROOT / "src" / "shardline" / "hardware" / "catalog"
ENGINE_MEASURED = ("scheduling_overhead_fraction",)  # timed shares; the rest is configuration


@cache
def _data(path: Path = SOURCES) -> dict[str, Any]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def _patterns(key: str) -> dict[str, tuple[str, ...]]:
    return {s["id"]: tuple(m.lower() for m in s[key]) for s in _data()["source"]}


def names(text: str, key: str = "matches") -> list[str]:
    """The serving source ids a text names (`key`: "matches" for a figure's source text, "rows"
    for a row's)."""
    low = text.lower()
    return [sid for sid, pats in _patterns(key).items() if any(p in low for p in pats)]


def row_source(row: dict[str, str]) -> str:
    """The one serving source a row's source text names (a row naming none or two stops)."""
    found = names(row["source"], "rows")
    if len(found) != 1:
        raise SystemExit(f"{row['name']}: its source names {found or 'no'} serving source")
    return found[0]


@cache
def engine_figures() -> tuple[Figure, ...]:
    """Every figure of engines.toml: kind "engine", file the engine's name, path the field."""
    data = tomllib.loads(ENGINES.read_text(encoding="utf-8"))["engine"]
    out = []
    for name, table in data.items():
        for key, value in table.items():
            source = table.get(f"{key}_source")
            if key.endswith("_source") or source is None:
                continue
            out.append(Figure("engine", name, key, value, str(source), key in ENGINE_MEASURED))
    return tuple(out)


@dataclass(frozen=True)
class OwnFigures:
    """The figures of one source a row on one chip and engine reads."""

    chip: list[Figure]  # measured, of the row's chip file: taken out
    engine: list[Figure]  # measured, of the row's engine: another publication's value, or refused
    shared: list[Figure]  # measured, of a collective library: refuses the row
    stated: list[Figure]  # stated configuration naming the source: kept

    @property
    def removed(self) -> list[Figure]:
        return self.chip + self.engine + self.shared


def own_figures(source_id: str, chip_name: str, engine_name: str) -> OwnFigures:
    """The figures naming `source_id` that a row on `chip_name` served by `engine_name` reads."""
    file = chip_file(chip_name)
    every = [f for f in figures() if f.kind in ("chip", "collective library")]
    every = [f for f in every if f.kind != "chip" or f.file == file]
    every += [f for f in engine_figures() if f.file == engine_name]
    mine = [f for f in every if source_id in names(f.source)]
    return OwnFigures(
        chip=[f for f in mine if f.measured and f.kind == "chip"],
        engine=[f for f in mine if f.measured and f.kind == "engine"],
        shared=[f for f in mine if f.measured and f.kind == "collective library"],
        stated=[f for f in mine if not f.measured],
    )


def _fallbacks() -> list[dict[str, Any]]:
    return list(_data().get("fallback", []))


def chip_out_of(chip_name: str, removed: list[Figure]) -> Any:
    """The chip without the `removed` figures: another publication's value where
    serving_sources.toml gives one, the loader's default otherwise."""
    from shardline.hardware import chip_from_dict

    name = chip_file(chip_name) or ""
    other = {e["path"]: e for e in _fallbacks() if name in e.get("files", ())}
    if not any(f.path in other for f in removed):
        return chip_without(chip_name, removed)
    data = tomllib.loads((CATALOG / name).read_text(encoding="utf-8"))
    for figure in removed:
        node = data
        *parents, leaf = figure.path.split(".")
        for part in parents:
            node = node[part]
        if figure.path in other:
            entry = other[figure.path]
            node[leaf] = {"value": entry["value"], "source": entry["source"]}
        else:
            node.pop(leaf, None)
    return chip_from_dict(data, origin=f"{name} without its own source's figures")


def engine_out_of(engine_name: str, removed: list[Figure]) -> Any | None:
    """The engine with each `removed` figure at another publication's value (serving_sources.toml
    `[[fallback]]` with `engine` and `field`); None where one has no other value (refused)."""
    from shardline.serving.engines import engine

    eng = engine(engine_name)
    changes = {}
    for figure in removed:
        other = [
            e
            for e in _fallbacks()
            if e.get("engine") == engine_name and e.get("field") == figure.path
        ]
        if not other:
            return None
        changes[figure.path] = type(getattr(eng, figure.path))(other[0]["value"])
    return dataclasses.replace(eng, **changes) if changes else eng


def load_rows(path: Path = ROWS) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.parse_args(argv)
    rows = load_rows()
    by_source: dict[str, set[tuple[str, str]]] = {}
    for row in rows:
        by_source.setdefault(row_source(row), set()).add((row["hw"], row["engine"]))
    for sid, setups in sorted(by_source.items()):
        count = sum(row_source(r) == sid for r in rows)
        print(f"{sid}: {count} rows on {', '.join(sorted({hw for hw, _ in setups}))}")
        for hw, eng in sorted(setups):
            own = own_figures(sid, hw, eng)
            for kind, figs in (("removed", own.removed), ("stated, kept", own.stated)):
                for f in figs:
                    print(f"  {hw}/{eng}: {kind}: {f.kind} {f.file} {f.path} = {f.value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
