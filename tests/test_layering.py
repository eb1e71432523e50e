"""The layers of the package, checked on the source (ast), not by convention.

Rooms, innermost first (LAYERS below; docs/architecture.md draws them). A room is a package
under `shardline/` (or `errors.py`); rooms on one line are peers:

    errors -> basics -> hardware -> ops -> collectives -> sharding -> realistic -> workload
    -> models | answers -> strategies -> planning -> costing -> serving | drill
    -> io -> calibrate -> report -> cli

Rules (every import counts: module level, inside a function (lazy), under `if TYPE_CHECKING:`,
`from shardline import report`, relative imports, and `importlib.import_module("shardline....")`
with a literal name):

0. The order of every room: a module imports only its own room and rooms further in (earlier in
   LAYERS), never a peer on its own line, never a room further out. The few imports that point
   outwards on purpose are listed in BACK_EDGES, each with its reason; an entry no import uses
   any more fails too. Every top-level module and package is in LAYERS, and at most six loose
   modules sit at the top level (the facade, `__main__`, `errors` and a few shared basics).
1. The edges: a core module imports none of `shardline.cli`, `shardline.io`,
   `shardline.report`, `shardline.calibrate`. The core is every module except those four
   packages and the package facade `shardline/__init__.py`. The facade is exempt from rules 0
   and 1: it only re-exports the public API and may wire an edge (say, a file loader) into
   `import shardline`; it is still a node of the cycle check below, so it cannot hide a cycle.
2. Nothing outside `shardline.cli` imports `shardline.cli`: the command line is the outermost room.
3. io and report do not import each other both ways. The allowed direction: report may import io
   (it renders the records io reads, e.g. a sheet's rows); io never imports report.
4. No `shardline/cli/cmd_*.py` module imports another `cmd_*` module: what several commands share
   lives in `cli/args.py` (argument groups) or `cli/common.py` (turning arguments into values).
5. No import cycle between shardline modules, over the graph of ALL the imports above.
   `from pkg import name` is an edge to `pkg.name` when that is a module, else to `pkg`. The
   implicit import of a parent package (importing `a.b` first runs `a/__init__.py`) is not an edge;
   an explicit `from shardline import matmul` is an edge to the facade.
6. A package's `__init__.py` (the facade aside) has no import side effects: a docstring, imports,
   definitions, `__all__` and plain constants; no call, loop or try at module level.

And the shape of the command line: one top-level command per `cli/cmd_*.py` module, every such
module registered by `cli/main.py`, and the shared flags (--json, --force, rate overrides,
operand dtypes, mesh and network options) defined only in `cli/args.py`.
"""

from __future__ import annotations

import argparse
import ast
import importlib
from dataclasses import dataclass
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parent.parent / "src"
PACKAGE = "shardline"
EDGE_PACKAGES = ("cli", "io", "report", "calibrate")

# Innermost first; a tuple holds peers (neither imports the other).
LAYERS: list[tuple[str, ...]] = [
    ("errors",),  # InputError: every layer raises it
    ("basics",),  # units, dtypes, kinds, serialize, options
    ("hardware",),  # chips, systems and clusters as data
    ("ops",),  # one einsum on one chip: einsum, layer, cost, roofline, tiling, predict
    ("collectives",),  # algorithm table, composer, the library's tuner
    ("sharding",),  # one einsum on a mesh: mesh, layout pricer, algebra, compare
    ("realistic",),  # the realistic whole-model time: kernels, block, activations, flops
    ("workload",),  # a model as layers: templates, MoE, attention variants, precision, stack
    ("models", "answers"),  # the model zoo | single-device answers (curves, what-if, sheets)
    ("strategies",),  # dp, fsdp, tp, pp, cp, ep and their registry
    ("planning",),  # the plan API, search, evaluation, step, memory, executors
    ("costing",),  # USD, power and energy of a plan
    ("serving", "drill"),  # serving replicas and engines | the drill questions
    ("io",),  # reading and writing files
    ("calibrate",),  # measuring this machine, writing chip files
    ("report",),  # text, Markdown, HTML and plots
    ("cli",),  # one module per command (and `python -m shardline`)
]
RANK = {room: i for i, rooms in enumerate(LAYERS) for room in rooms}

# Imports that point outwards on purpose: (importing module, room imported) -> why.
BACK_EDGES: dict[tuple[str, str], str] = {
    # The search answer adds USD and MWh where the costing tables price the chip (a lazy import,
    # guarded by ImportError); costing prices a PlanResult (costing/plan_cost.py), so it sits
    # outside planning.
    ("shardline.planning.search_answer", "costing"): "search results priced in USD and MWh",
}
MAX_LOOSE_MODULES = 6  # the facade, __main__, errors and a few shared basics


@dataclass(frozen=True)
class Import:
    source: str  # importing module, e.g. shardline.ops.roofline
    target: str  # imported shardline module, e.g. shardline.report.text
    line: int
    text: str  # the import as written, e.g. "from shardline.report import text"
    path: str  # file of the importing module, relative to the repository


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted((SRC / PACKAGE).rglob("*.py"))}


MODULES = _modules()


def _resolve(name: str) -> str | None:
    """The longest shardline module that `name` names (or lies inside), else None."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


def _base(module: str, node: ast.ImportFrom) -> str:
    """The absolute module an ImportFrom reads from (relative imports resolved)."""
    if not node.level:
        return node.module or ""
    is_package = MODULES[module].name == "__init__.py"
    package = module.split(".") if is_package else module.split(".")[:-1]
    anchor = package[: len(package) - (node.level - 1)]
    return ".".join(anchor + ([node.module] if node.module else []))


def _literal_import(node: ast.Call) -> str | None:
    """`importlib.import_module("shardline.x")` or `__import__("shardline.x")`: the name."""
    func = node.func
    name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", None)
    if name not in ("import_module", "__import__") or not node.args:
        return None
    first = node.args[0]
    if isinstance(first, ast.Constant) and isinstance(first.value, str):
        return first.value
    return None


def _targets(module: str, node: ast.AST) -> list[tuple[str, str]]:
    """(target module, import text) for one ast node; [] when it is no shardline import."""
    found: list[tuple[str | None, str]] = []
    if isinstance(node, ast.Import):
        found = [(_resolve(a.name), f"import {a.name}") for a in node.names]
    elif isinstance(node, ast.ImportFrom):
        base = _base(module, node)
        text = f"from {'.' * node.level}{node.module or ''} import "
        for alias in node.names:
            sub = f"{base}.{alias.name}"
            found.append((sub if sub in MODULES else _resolve(base), text + alias.name))
    elif isinstance(node, ast.Call) and (name := _literal_import(node)):
        found = [(_resolve(name), f"import_module({name!r})")]
    return [(t, text) for t, text in found if t is not None and t != module]


def _imports() -> list[Import]:
    root = SRC.parent
    out = []
    for module, path in MODULES.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        for node in ast.walk(tree):
            for target, text in _targets(module, node):
                rel = str(path.relative_to(root))
                out.append(Import(module, target, getattr(node, "lineno", 0), text, rel))
    return out


IMPORTS = _imports()


def room(module: str) -> str:
    """The room of a module: 'facade', or its top-level package (or module) under shardline."""
    parts = module.split(".")
    if parts == [PACKAGE]:
        return "facade"
    if parts == [PACKAGE, "__main__"]:  # `python -m shardline`: the command line's own entry
        return "cli"
    return parts[1]


def layer(module: str) -> str:
    """'facade', one of EDGE_PACKAGES, or 'core'."""
    r = room(module)
    return r if r in ("facade", *EDGE_PACKAGES) else "core"


def _outward(imp: Import) -> bool:
    """The import points at a peer or a room further out (rule 0); the facade is exempt."""
    src, dst = room(imp.source), room(imp.target)
    if "facade" in (src, dst) or src == dst:
        return False
    return RANK[dst] >= RANK[src]


def _describe(imp: Import) -> str:
    return f"{imp.path}:{imp.line} {imp.source}: {imp.text}"


def _breaks(rule: str, imp: Import) -> bool:
    src, dst = layer(imp.source), layer(imp.target)
    if rule == "core":
        return src == "core" and dst in EDGE_PACKAGES
    if rule == "cli":
        return dst == "cli" and src != "cli"
    if rule == "io":
        return src == "io" and dst == "report"
    assert rule == "cmd", rule
    return _is_command(imp.source) and _is_command(imp.target)


def _violations(rule: str) -> list[str]:
    return [_describe(imp) for imp in IMPORTS if _breaks(rule, imp)]


def _fail_if(bad: list[str], header: str) -> None:
    if bad:
        pytest.fail(header + "\n" + "\n".join(bad), pytrace=False)


def _is_command(module: str) -> bool:
    return module.startswith(f"{PACKAGE}.cli.cmd_")


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for imp in IMPORTS:
        graph[imp.source].add(imp.target)
    return graph


def _components(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    result: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    members.append(member)
                    if member == node:
                        break
                if len(members) > 1:
                    result.append(sorted(members))
    return result


def _cycle_path(graph: dict[str, set[str]], members: list[str]) -> list[str]:
    """One concrete cycle inside a component: the shortest path from its first module back."""
    inside = set(members)
    start = members[0]
    parents: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for node in frontier:
            for child in sorted(graph[node] & inside):
                if child == start:
                    path = [start]
                    while node != start:
                        path.append(node)
                        node = parents[node]
                    return [start, *reversed(path[1:]), start]
                if child not in parents:
                    parents[child] = node
                    nxt.append(child)
        frontier = nxt
    raise AssertionError(f"no cycle found in component {members}")


def _cycle_text(graph: dict[str, set[str]], members: list[str]) -> str:
    path = _cycle_path(graph, members)
    hops = []
    for a, b in zip(path, path[1:], strict=False):
        where = next(i for i in IMPORTS if i.source == a and i.target == b)
        hops.append(f"    {_describe(where)}")
    return " -> ".join(path) + "\n" + "\n".join(hops)


# --- the rules --------------------------------------------------------------------------------


def test_the_scan_sees_lazy_relative_and_from_package_imports() -> None:
    """The parser itself: the forms that hide an edge are all resolved (made-up imports of a
    top-level module)."""
    source = (
        "import shardline.report.text as t\n"
        "from shardline import report\n"
        "from . import io\n"
        "from .report import text\n"
        "def f():\n"
        "    from shardline.cli import main\n"
        "    import importlib\n"
        "    importlib.import_module('shardline.io.sheets')\n"
    )
    tree = ast.parse(source)
    found = [t for node in ast.walk(tree) for t, _ in _targets("shardline.errors", node)]
    assert sorted(found) == sorted(
        [
            "shardline.report.text",
            "shardline.report",
            "shardline.io",
            "shardline.report.text",
            "shardline.cli.main",
            "shardline.io.sheets",
        ]
    )
    assert layer("shardline.ops.roofline") == "core" and layer("shardline") == "facade"
    assert layer("shardline.calibrate.fit") == "calibrate"
    assert room("shardline.ops.roofline") == "ops" and room("shardline.__main__") == "cli"


def test_the_order_check_on_made_up_imports() -> None:
    """Inwards passes; outwards and sideways (a peer) fail; the facade is exempt."""

    def imp(source: str, target: str) -> Import:
        return Import(source, target, 1, "", "")

    assert not _outward(imp("shardline.ops.roofline", "shardline.basics.units"))
    assert _outward(imp("shardline.ops.roofline", "shardline.workload.stack"))
    assert _outward(imp("shardline.models.catalog", "shardline.answers.curves"))
    assert not _outward(imp("shardline", "shardline.report.notebook"))
    assert not _outward(imp("shardline.io.sheets", "shardline.io.tables"))


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a", "d"}, "d": set()}
    (members,) = _components(graph)
    assert members == ["a", "b", "c"]
    assert _cycle_path(graph, members) == ["a", "b", "c", "a"]
    assert _components({"a": {"b"}, "b": set()}) == []


def test_every_room_is_in_the_layers() -> None:
    rooms = {room(m) for m in MODULES} - {"facade"}
    missing = sorted(rooms - set(RANK))
    _fail_if(missing, "top-level modules or packages missing from LAYERS (place each in a layer):")
    assert len(RANK) == sum(len(rooms) for rooms in LAYERS), "a room listed twice in LAYERS"


def test_few_loose_modules_at_the_top() -> None:
    loose = sorted(p.name for p in (SRC / PACKAGE).glob("*.py"))
    assert len(loose) <= MAX_LOOSE_MODULES, f"loose modules at the top of shardline/: {loose}"


def test_every_layer_imports_only_inwards() -> None:
    bad = []
    for imp in IMPORTS:
        if _outward(imp) and (imp.source, room(imp.target)) not in BACK_EDGES:
            src, dst = room(imp.source), room(imp.target)
            bad.append(f"{_describe(imp)}   ({src} -> {dst})")
    _fail_if(
        bad,
        "imports that point outwards (a module imports its own room or rooms earlier in LAYERS; "
        "move the code inwards, or list the import in BACK_EDGES with its reason):",
    )


def test_every_back_edge_is_still_used() -> None:
    used = {(imp.source, room(imp.target)) for imp in IMPORTS if _outward(imp)}
    stale = [f"{src} -> {dst}" for src, dst in BACK_EDGES if (src, dst) not in used]
    _fail_if(stale, "BACK_EDGES entries no import needs any more (remove them):")


def _side_effect_free(tree: ast.Module) -> list[int]:
    """Lines of the module-level statements that are not a docstring, an import, a definition,
    `__all__` or a plain constant (a call, a loop, a try: code run at import)."""
    bad = []
    for i, node in enumerate(tree.body):
        if isinstance(node, ast.Import | ast.ImportFrom | ast.FunctionDef | ast.ClassDef):
            continue
        if i == 0 and isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            continue
        if isinstance(node, ast.Assign | ast.AnnAssign) and not any(
            isinstance(n, ast.Call) for n in ast.walk(node)
        ):
            continue
        bad.append(node.lineno)
    return bad


def test_package_inits_have_no_import_side_effects() -> None:
    bad = []
    for module, path in MODULES.items():
        if path.name != "__init__.py" or module == PACKAGE:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"))
        bad += [f"{path.relative_to(SRC.parent)}:{line}" for line in _side_effect_free(tree)]
    _fail_if(bad, "package __init__ modules that run code at import (keep them to re-exports):")


def test_core_does_not_import_cli_io_report_or_calibrate() -> None:
    _fail_if(_violations("core"), "core modules import an outer room (cli/io/report/calibrate):")


def test_nothing_outside_cli_imports_cli() -> None:
    _fail_if(_violations("cli"), "only the command line imports shardline.cli:")


def test_io_does_not_import_report() -> None:
    _fail_if(
        _violations("io"), "io imports report (report may read io's records, not the reverse):"
    )


def test_no_command_module_imports_another() -> None:
    assert any(_is_command(m) for m in MODULES)
    _fail_if(
        _violations("cmd"),
        "a cli/cmd_* module imports another (share through cli/args.py or cli/common.py):",
    )


def test_no_import_cycles() -> None:
    graph = _graph()
    cycles = [_cycle_text(graph, members) for members in _components(graph)]
    _fail_if(cycles, "import cycles between shardline modules:")


# --- the command line ----------------------------------------------------------------------

# Modules that register more than one top-level command: cmd_stack.py (`stack` and `plan` share
# the workload arguments).
MULTI_COMMAND = {"stack": ["plan", "stack"]}

# Flags every command takes from cli/args.py and never defines itself.
SHARED_FLAGS = frozenset(
    [
        "--json",
        "--force",
        "--flops-per-s",
        "--mem-bw",
        "--a-dtype",
        "--b-dtype",
        "--out-dtype",
        "--output-layout",
        "--mesh",
        "--topology",
        "--link-bw",
        "--latency",
        "--overlap",
        "--resident",
        "--pad",
        "--reduce-dtype",
        "--unreduced",
    ]
)


def test_one_top_level_command_per_cli_module() -> None:
    from shardline.cli.main import COMMANDS

    files = sorted(p.stem.removeprefix("cmd_") for p in (SRC / PACKAGE / "cli").glob("cmd_*.py"))
    assert sorted(COMMANDS) == files, "cli/main.py COMMANDS must list every cli/cmd_*.py module"
    for name in COMMANDS:
        sub = argparse.ArgumentParser(prog="shardline").add_subparsers()
        importlib.import_module(f"{PACKAGE}.cli.cmd_{name}").register(sub)
        # a hyphenated command lives in a module with an underscore (what-if: cmd_what_if.py)
        assert sorted(sub.choices) == MULTI_COMMAND.get(name, [name.replace("_", "-")]), name


def test_shared_flags_are_defined_only_in_cli_args() -> None:
    bad = []
    for module, path in MODULES.items():
        if layer(module) != "cli" or module == f"{PACKAGE}.cli.args":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
                continue
            if node.func.attr != "add_argument":
                continue
            flags = {a.value for a in node.args if isinstance(a, ast.Constant)}
            for flag in sorted(flags & SHARED_FLAGS):
                bad.append(f"{path.relative_to(SRC.parent)}:{node.lineno} {module}: {flag}")
    _fail_if(bad, "shared flags defined outside cli/args.py (use its add_* functions):")
