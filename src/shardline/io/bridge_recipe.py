"""A Megatron-Bridge recipe's Python file, read without running it: the settings one recipe
function makes on its ConfigContainer, as the `key=value` overrides of
shardline.io.bridge_overrides.

Megatron-Bridge's recipes (NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/recipes/*/ and the
performance recipes src/megatron/bridge/perf_recipes/*/GPU/*.py) are functions that build a
ConfigContainer and set its fields one statement at a time:

    def qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config() -> ConfigContainer:
        cfg = qwen3_30b_a3b_pretrain_8gpu_h100_bf16_config()
        cfg.mixed_precision = bf16_mixed()
        cfg.model.expert_model_parallel_size = 16
        cfg.comm_overlap = CommOverlapConfig(tp_comm_overlap=True)
        ...
        return cfg

The file is parsed with `ast` and never executed. Read, in the order the function runs them:
`cfg.GROUP.KEY = VALUE` where VALUE is a literal (or a module constant, or a dotted name such
as torch.bfloat16, kept as its text); `cfg.mixed_precision = PRESET()` (a preset's name, or
`_perf_precision("fp8_mx")` as the performance recipes spell it); `cfg.comm_overlap =
CommOverlapConfig(k=v, ...)` (its keywords); `cfg.model = AutoBridge.from_hf_pretrained(ID)`
(the Hugging Face model of that id); and calls of other functions defined in the same file (a
base recipe, a helper given `cfg`), followed into, with import aliases of them resolved. What
the reader cannot evaluate is said in one line each and not guessed: a call of a function not
in the file (a base recipe elsewhere: only its model, by the recipe's name), a value computed by
code, a branch (`if`, `for`, `with`, `try`).

Pure: text in, values out.
"""

from __future__ import annotations

import ast
import contextlib
import re
from dataclasses import dataclass, field
from typing import Any

from shardline.errors import InputError

__all__ = [
    "RecipeSettings",
    "read_recipe_settings",
    "parse_module",
    "Module",
    "override_text",
    "MAX_DEPTH",
    "NOT_LITERAL",
    "PERF_PRECISION",
    "dotted_name",
]

# groups of the ConfigContainer whose settings do not change the step time: not evaluated
QUIET_GROUPS = (
    "env_vars",
    "dataset",
    "tokenizer",
    "checkpoint",
    "logger",
    "scheduler",
    "rng",
    "rerun_state_machine",
    "profiling",
    "ft",
    "straggler",
    "nvrx_straggler",
    "inprocess_restart",
    "dist",
    "peft",
    "validation",
)
# _perf_precision(compute_dtype) -> the mixed-precision preset it returns
# (NVIDIA-NeMo/Megatron-Bridge src/megatron/bridge/perf_recipes/_common.py, commit 067f987d)
PERF_PRECISION = {
    "bf16": "bf16_mixed",
    "fp8_cs": "bf16_with_fp8_current_scaling_mixed",
    "fp8_ds": "bf16_with_fp8_delayed_scaling_mixed",
    "fp8_mx": "bf16_with_mxfp8_mixed",
    "nvfp4": "bf16_with_nvfp4_mixed",
}
_BASE = re.compile(r"^(.+?)_(pretrain|sft|peft|finetune)_config$")
MAX_DEPTH = 8  # calls followed into, one inside another
# what ast.literal_eval raises on an expression that is not a literal
NOT_LITERAL = (ValueError, TypeError, SyntaxError, MemoryError, RecursionError)


@dataclass
class RecipeSettings:
    """What one recipe function sets: the overrides (Megatron-Bridge's dotted keys, values as
    override text), the base recipe's name where it is not in the file, the Hugging Face id of
    the model it loads, and one line per statement not evaluated."""

    function: str
    overrides: dict[str, str] = field(default_factory=dict)
    values: dict[str, Any] = field(default_factory=dict)  # the same settings as Python values
    gpus: int | None = None  # a layout preset's num_gpus
    recipe: str | None = None
    hf_model: str | None = None
    notes: list[str] = field(default_factory=list)


def override_text(value: Any) -> str:
    """A Python value as override text (true/false, none, a list's items space-separated)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "none"
    if isinstance(value, (list, tuple)):
        return " ".join(override_text(v) for v in value)
    return str(value)


def _is_preset(node: ast.expr) -> bool:
    """A layout preset of Megatron-Bridge's performance scripts: `WorkloadBaseConfig(k=v)`,
    `replace(BASE, k=v)` or another preset's name."""
    if isinstance(node, ast.Name):
        return node.id.isupper()
    if isinstance(node, ast.Call):
        name = (_dotted(node.func) or "").split(".")[-1]
        return name == "WorkloadBaseConfig" or (
            name == "replace" and bool(node.args) and isinstance(node.args[0], ast.Name)
        )
    return False


class Module:
    """The file's functions, the import aliases of them, and its literal constants."""

    def __init__(self, tree: ast.Module) -> None:
        self.functions: dict[str, ast.FunctionDef] = {}
        self.aliases: dict[str, str] = {}
        self.constants: dict[str, Any] = {}
        self.presets: dict[str, ast.expr] = {}  # NAME = WorkloadBaseConfig(...) / replace(...)
        for node in tree.body:
            if isinstance(node, ast.FunctionDef):
                self.functions[node.name] = node
            elif isinstance(node, ast.ImportFrom):
                for a in node.names:
                    if a.asname:
                        self.aliases[a.asname] = a.name
            elif isinstance(node, ast.Assign) and len(node.targets) == 1:
                target = node.targets[0]
                if isinstance(target, ast.Name):
                    if _is_preset(node.value):
                        self.presets[target.id] = node.value
                    with contextlib.suppress(*NOT_LITERAL):
                        self.constants[target.id] = ast.literal_eval(node.value)

    def function(self, name: str) -> ast.FunctionDef | None:
        return self.functions.get(self.aliases.get(name, name), self.functions.get(name))


def _dotted(node: ast.expr) -> str | None:
    """`a.b.c` as text; None for anything else."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return ".".join([node.id, *reversed(parts)])


def _returned(fn: ast.FunctionDef) -> set[str]:
    """The names a function returns (`return cfg`): the ConfigContainer it builds."""
    return {
        node.value.id
        for node in ast.walk(fn)
        if isinstance(node, ast.Return) and isinstance(node.value, ast.Name)
    }


dotted_name = _dotted


def _callee(call: ast.Call) -> str | None:
    return _dotted(call.func)


class _Reader:
    def __init__(self, module: Module, origin: str, out: RecipeSettings) -> None:
        self.m = module
        self.origin = origin
        self.out = out
        self.scopes: list[dict[str, Any]] = [{}]  # the called functions' parameters' values

    def note(self, node: ast.AST, what: str) -> None:
        self.out.notes.append(f"line {getattr(node, 'lineno', '?')}: {what}")

    def value(self, node: ast.expr) -> tuple[bool, Any]:
        """(True, the value) of a literal, a module constant or a dotted name; (False, None)
        for a value computed by code."""
        try:
            return True, ast.literal_eval(node)
        except NOT_LITERAL:
            pass
        if isinstance(node, ast.Name) and node.id in self.scopes[-1]:
            return True, self.scopes[-1][node.id]
        if isinstance(node, ast.Name) and node.id in self.m.constants:
            return True, self.m.constants[node.id]
        if isinstance(node, ast.Attribute):
            name = _dotted(node)
            if name is not None and name.split(".")[0] in ("torch", "np", "numpy"):
                return True, name
        return False, None

    def run(
        self, fn: ast.FunctionDef, cfg: set[str], depth: int, call: ast.Call | None = None
    ) -> None:
        """One function's statements, in order; `cfg` the names bound to the ConfigContainer,
        the other parameters the literal arguments of `call` or their literal defaults."""
        if depth > MAX_DEPTH:
            raise InputError(f"{self.origin}: recipe calls nest deeper than {MAX_DEPTH}")
        self.scopes.append(self._parameters(fn, call, cfg))
        try:
            self.block(fn.body, cfg | _returned(fn), depth)
        finally:
            self.scopes.pop()

    def _parameters(self, fn: ast.FunctionDef, call: ast.Call | None, cfg: set[str]) -> dict:
        params = [a.arg for a in fn.args.args]
        defaults = fn.args.defaults  # the last parameters' defaults
        given: dict[str, ast.expr] = dict(
            zip(params[len(params) - len(defaults) :], defaults, strict=True)
        )
        kw_defaults = zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True)
        given |= {a.arg: d for a, d in kw_defaults if d is not None}
        if call is not None:
            given |= dict(zip(params, call.args, strict=False))
            given |= {kw.arg: kw.value for kw in call.keywords if kw.arg is not None}
        out = {}
        for name, node in given.items():
            ok, got = self.value(node)
            if ok and name not in cfg:
                out[name] = got
        return out

    def block(self, body: list[ast.stmt], cfg: set[str], depth: int) -> bool:
        """Run statements until a return (True when one was reached)."""
        for stmt in body:
            if isinstance(stmt, ast.Return):
                return True
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if stmt.value is not None:
                    for target in targets:
                        self.assign(target, stmt.value, cfg, depth)
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                self.call(stmt.value, cfg, depth)
            elif isinstance(stmt, ast.If) and self.known(stmt.test, cfg):
                if self.block(stmt.body if self.truth(stmt.test, cfg) else stmt.orelse, cfg, depth):
                    return True
            elif isinstance(stmt, (ast.If, ast.For, ast.While, ast.With, ast.Try)):
                kind = type(stmt).__name__.lower()
                self.note(stmt, f"an `{kind}` block the reader cannot evaluate")
        return False

    def setting(self, node: ast.expr, cfg: set[str]) -> tuple[bool, Any]:
        """A condition's operand: a literal, or a setting already read (`cfg.model.k`, or
        `getattr(cfg.model, "k", default)`); (False, None) when the reader does not know it."""
        ok, got = self.value(node)
        if ok and not isinstance(node, ast.Attribute):
            return True, got
        key = _dotted(node)
        if isinstance(node, ast.Call) and _callee(node) == "getattr" and len(node.args) >= 2:
            owner = _dotted(node.args[0])
            ok, attr = self.value(node.args[1])
            key = f"{owner}.{attr}" if owner and ok else None
        if key is None or key.split(".")[0] not in cfg:
            return False, None
        key = key.split(".", 1)[1]
        if key in self.out.values:
            return True, self.out.values[key]
        return False, None

    def known(self, test: ast.expr, cfg: set[str]) -> bool:
        """Whether the reader can evaluate an `if` test: comparisons of settings it has read
        with literals, joined by and, or, not."""
        if isinstance(test, ast.BoolOp):
            return all(self.known(v, cfg) for v in test.values)
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            return self.known(test.operand, cfg)
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            return self.setting(test.left, cfg)[0] and self.setting(test.comparators[0], cfg)[0]
        return self.setting(test, cfg)[0]

    def truth(self, test: ast.expr, cfg: set[str]) -> bool:
        if isinstance(test, ast.BoolOp):
            values = [self.truth(v, cfg) for v in test.values]
            return all(values) if isinstance(test.op, ast.And) else any(values)
        if isinstance(test, ast.UnaryOp):
            return not self.truth(test.operand, cfg)
        if isinstance(test, ast.Compare):
            a, b = self.setting(test.left, cfg)[1], self.setting(test.comparators[0], cfg)[1]
            ops = {
                ast.Eq: lambda: a == b,
                ast.NotEq: lambda: a != b,
                ast.Is: lambda: a is b,
                ast.IsNot: lambda: a is not b,
                ast.In: lambda: a in b,
                ast.NotIn: lambda: a not in b,
            }
            op = ops.get(type(test.ops[0]))
            if op is None:
                raise InputError(f"{self.origin}: line {test.lineno}: a comparison not read")
            return bool(op())
        return bool(self.setting(test, cfg)[1])

    def call(self, call: ast.Call, cfg: set[str], depth: int) -> bool:
        """Follow a call of a function in the file, `cfg` bound to its parameter; True when
        followed."""
        name = _callee(call) or ast.unparse(call.func)
        fn = self.m.function(name)
        if fn is None:
            if any(isinstance(a, ast.Name) and a.id in cfg for a in call.args) or any(
                (_dotted(a) or "").split(".")[0] in cfg for a in call.args
            ):
                self.note(call, f"{name}(...) is not in the file")
            return False
        params = [a.arg for a in fn.args.args]
        bound = {
            params[i]
            for i, a in enumerate(call.args[: len(params)])
            if isinstance(a, ast.Name) and a.id in cfg
        }
        self.run(fn, bound, depth + 1, call)
        return True

    def assign(self, target: ast.expr, value: ast.expr, cfg: set[str], depth: int) -> None:
        if isinstance(target, ast.Name):
            if isinstance(value, ast.Call):
                name = _callee(value) or ""
                if self.m.function(name) is not None:
                    fn = self.m.function(name)
                    assert fn is not None
                    self.run(fn, set(), depth + 1, value)
                    cfg.add(target.id)  # the ConfigContainer that function built
                    return
                if target.id not in cfg:
                    return
                base = _BASE.match(name.split(".")[-1]) or _BASE.match(
                    self.m.aliases.get(name, name).split(".")[-1]
                )
                if base:
                    self.out.recipe = base.group(1)
                    self.note(
                        value,
                        f"{name}() is not in the file (a base recipe: the model is the recipe "
                        f"{base.group(1)}'s)",
                    )
                else:
                    self.note(value, f"{name}() is not in the file")
            return
        key = _dotted(target)
        if key is None or key.split(".")[0] not in cfg:
            return
        key = key.split(".", 1)[1] if "." in key else ""
        if not key or key.split(".")[0] in QUIET_GROUPS:
            return
        if key == "mixed_precision":
            self.precision(value)
        elif key == "comm_overlap" and isinstance(value, ast.Call):
            self.comm_overlap(value)
        elif key == "model" and isinstance(value, ast.Call):
            self.model(value)
        else:
            ok, got = self.value(value)
            if ok:
                self.set(key, got)
            else:
                self.note(
                    value,
                    f"{key} = {ast.unparse(value)}: a value computed by code the reader does "
                    "not evaluate",
                )

    def set(self, key: str, value: Any) -> None:
        self.out.overrides.pop(key, None)  # the latest setting last, in the order it runs
        self.out.overrides[key] = override_text(value)
        self.out.values[key] = value

    def _drop(self, prefix: str) -> None:
        for k in [k for k in self.out.overrides if k.startswith(prefix)]:
            del self.out.overrides[k]
            self.out.values.pop(k, None)

    def precision(self, value: ast.expr) -> None:
        self._drop("mixed_precision")
        ok, got = self.value(value)
        if ok and isinstance(got, str):
            self.set("mixed_precision", got)
            return
        if isinstance(value, ast.Call):
            name = (_callee(value) or "").split(".")[-1]
            if name == "_perf_precision" and value.args:
                ok, arg = self.value(value.args[0])
                if ok and arg in PERF_PRECISION:
                    self.set("mixed_precision", PERF_PRECISION[arg])
                    return
            elif name.endswith("_mixed") and not value.args:
                self.set("mixed_precision", name)
                return
        self.note(value, f"mixed_precision = {ast.unparse(value)}: a precision not read")

    def comm_overlap(self, call: ast.Call) -> None:
        self._drop("comm_overlap.")
        for kw in call.keywords:
            ok, got = self.value(kw.value)
            if kw.arg is not None and ok:
                self.set(f"comm_overlap.{kw.arg}", got)
            else:
                self.note(call, f"CommOverlapConfig({ast.unparse(kw)}): not evaluated")

    def model(self, value: ast.Call) -> None:
        node: ast.expr = value
        while isinstance(node, (ast.Call, ast.Attribute)):
            if isinstance(node, ast.Call):
                name = _callee(node) or ""
                if name.endswith("from_hf_pretrained") and node.args:
                    ok, hf = self.value(node.args[0])
                    if ok and isinstance(hf, str):
                        self.out.hf_model = hf
                        return
                node = node.func
            else:
                node = node.value
        self.note(value, f"model = {ast.unparse(value)}: a model the reader does not evaluate")


def parse_module(text: str, origin: str) -> Module:
    """The file's functions, presets and constants (parsed, never run)."""
    return Module(_parse(text, origin))


def _parse(text: str, origin: str) -> ast.Module:
    try:
        return ast.parse(text, filename=origin)
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, nesting too deep
        raise InputError(f"{origin}: not Python a recipe reader can parse ({exc})") from None
    except SyntaxError as exc:
        raise InputError(
            f"{origin}: not Python a recipe reader can parse ({exc.msg}, line {exc.lineno})"
        ) from None


def read_recipe_settings(
    module: Module, origin: str, function: str | None = None
) -> RecipeSettings:
    """The settings recipe `function` of the file makes (the file's only recipe when None)."""
    if function is None:
        found = [n for n in module.functions if not n.startswith("_") and n.endswith("_config")]
        if len(found) != 1:
            listed = ", ".join(found) or "none"
            raise InputError(
                f"{origin}: {len(found)} recipe functions ({listed}); name one with --recipe"
            )
        function = found[0]
    fn = module.function(function)
    if fn is None:
        listed = ", ".join(n for n in module.functions if not n.startswith("_")) or "none"
        presets = f"; {len(module.presets)} layout presets" if module.presets else ""
        raise InputError(f"{origin}: no function {function!r} (defined: {listed}{presets})")
    out = RecipeSettings(function=function)
    _Reader(module, origin, out).run(fn, set(), 0)
    return out
