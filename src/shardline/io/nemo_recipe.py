"""A NeMo 2.0 recipe's Python file, read without running it: the `run.Partial` its recipe
function returns, as the `key=value` overrides of shardline.io.bridge_overrides.

NeMo 2.0's recipes (NVIDIA/NeMo nemo/collections/llm/recipes/*.py) build the run as nested
NeMo-Run configurations:

    def pretrain_recipe(num_nodes: int = 1, num_gpus_per_node: int = 8, ...) -> run.Partial:
        recipe = run.Partial(
            fn,
            model=model(),  # run.Config(LlamaModel, config=run.Config(Llama3Config8B))
            trainer=trainer(num_nodes=num_nodes, ...),  # run.Config(nl.Trainer, strategy=...)
            data=run.Config(MockDataModule, seq_length=8192, global_batch_size=512, ...),
            optim=distributed_fused_adam_with_cosine_annealing(max_lr=3e-4),
            ...
        )
        return recipe

The file is parsed with `ast` and never executed. Evaluated: literals, the file's constants,
`run.Config(X, k=v)` and `run.Partial(f, k=v)` (their keywords), calls of functions defined in
the file (their parameters bound to the call's arguments and their defaults, their statements
run in order: assignments, `recipe.a.b = v`, `list.append/extend`, an `if` whose test is known,
`return`). Read from the run: the trainer's devices x num_nodes, its `nl.MegatronStrategy`
(Megatron-Core's model-parallel names, as `model.KEY`; `ddp=run.Config(
DistributedDataParallelConfig, ...)` as `ddp.KEY`; `fsdp="megatron"`), its precision plugin (a
preset function such as `bf16_mixed()`, by name, and the fields set on it), the
MegatronCommOverlapCallback's keywords (`comm_overlap.KEY`), the data module's micro and global
batch and sequence, the model's config class (framework_models.toml [nemo2]) and the fields set
on it, and an optimizer written as `run.Config(..., config=run.Config(OptimizerConfig, ...))`.
What the reader cannot evaluate is said in one line each (`not read:`) and not guessed: a call
of a function that is not in the file (NeMo's optimizer and precision helpers), a value
computed by code, a branch on an unknown value, a loop.

Pure: text in, values out.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field
from typing import Any

from shardline.errors import InputError
from shardline.io.bridge_recipe import (
    MAX_DEPTH,
    NOT_LITERAL,
    Module,
    RecipeSettings,
    override_text,
)
from shardline.io.bridge_recipe import dotted_name as _dotted

__all__ = ["looks_like_nemo2", "read_nemo2_settings"]

# nl.MegatronStrategy fields with no effect on the step time (checkpointing, buffers' views,
# the pipeline's communication dtype, which follows the precision)
STRATEGY_PASSED = ("gradient_as_bucket_view", "pipeline_dtype", "ckpt_", "save_ckpt_format")
# what the run's other parts set that does not change the step time
QUIET_PARTS = ("log", "resume", "tokenizer", "fn")
QUIET_CALLBACKS = ("TimingCallback", "GarbageCollectionCallback")
DATA_KEYS = {
    "seq_length": "model.seq_length",
    "global_batch_size": "train.global_batch_size",
    "micro_batch_size": "train.micro_batch_size",
}
OPTIMIZER_KEYS = ("use_distributed_optimizer", "optimizer")


@dataclass
class Config:
    """A `run.Config(target, k=v)` or `run.Partial(target, k=v)`, or the call of a function
    that is not in the file (`called`: its keywords are known, what it returns is not)."""

    target: str
    fields: dict[str, Any] = field(default_factory=dict)
    line: int = 0
    called: bool = False


@dataclass(frozen=True)
class Unknown:
    """A value computed by code the reader does not evaluate."""

    text: str
    line: int


def looks_like_nemo2(text: str) -> bool:
    """A NeMo 2.0 recipe: it imports NeMo-Run and builds a run.Partial or run.Config."""
    return "nemo_run" in text and ("run.Partial(" in text or "run.Config(" in text)


class _Eval:
    def __init__(self, module: Module, origin: str, notes: list[str]) -> None:
        self.m = module
        self.origin = origin
        self.notes = notes

    def note(self, node: ast.AST, what: str) -> None:
        self.notes.append(f"line {getattr(node, 'lineno', '?')}: {what}")

    def expr(self, node: ast.expr, scope: dict[str, Any], depth: int) -> Any:
        try:
            return ast.literal_eval(node)
        except NOT_LITERAL:
            pass
        if isinstance(node, ast.Name):
            if node.id in scope:
                return scope[node.id]
            if node.id in self.m.constants:
                return self.m.constants[node.id]
        elif isinstance(node, ast.Attribute):
            name = _dotted(node)
            if name is not None and name.split(".")[0] == "torch":
                return name
            owner = self.expr(node.value, scope, depth)
            if isinstance(owner, Config) and node.attr in owner.fields:
                return owner.fields[node.attr]
        elif isinstance(node, (ast.List, ast.Tuple)):
            return [self.expr(e, scope, depth) for e in node.elts]
        elif isinstance(node, ast.Call):
            return self.call(node, scope, depth)
        return Unknown(ast.unparse(node), getattr(node, "lineno", 0))

    def call(self, node: ast.Call, scope: dict[str, Any], depth: int) -> Any:
        name = _dotted(node.func) or ast.unparse(node.func)
        keywords = {kw.arg: self.expr(kw.value, scope, depth) for kw in node.keywords if kw.arg}
        if name.split(".")[-1] in ("Config", "Partial") and node.args:
            target = _dotted(node.args[0]) or ast.unparse(node.args[0])
            return Config(target, keywords, node.lineno)
        fn = self.m.function(name)
        if fn is not None:
            return self.run(fn, node, scope, depth + 1)
        return Config(name, keywords, node.lineno, called=True)

    def run(self, fn: ast.FunctionDef, call: ast.Call | None, outer: dict, depth: int) -> Any:
        """Run one function of the file; what it returns (Unknown where no return is reached)."""
        if depth > MAX_DEPTH:
            raise InputError(f"{self.origin}: recipe calls nest deeper than {MAX_DEPTH}")
        scope = self._parameters(fn, call, outer, depth)
        done, value = self.block(fn.body, scope, depth)
        return value if done else Unknown(f"{fn.name}()", fn.lineno)

    def _parameters(
        self, fn: ast.FunctionDef, call: ast.Call | None, outer: dict, depth: int
    ) -> dict[str, Any]:
        params = [a.arg for a in fn.args.args]
        defaults = fn.args.defaults
        out: dict[str, Any] = {}
        for name, node in zip(params[len(params) - len(defaults) :], defaults, strict=True):
            out[name] = self.expr(node, {}, depth)
        for a, d in zip(fn.args.kwonlyargs, fn.args.kw_defaults, strict=True):
            if d is not None:
                out[a.arg] = self.expr(d, {}, depth)
        if call is not None:
            for name, node in zip(params, call.args, strict=False):
                out[name] = self.expr(node, outer, depth)
            for kw in call.keywords:
                if kw.arg is not None:
                    out[kw.arg] = self.expr(kw.value, outer, depth)
        return out

    def block(self, body: list[ast.stmt], scope: dict, depth: int) -> tuple[bool, Any]:
        """Run statements until a return: (True, the value) when one was reached."""
        for stmt in body:
            if isinstance(stmt, ast.Return):
                value = None if stmt.value is None else self.expr(stmt.value, scope, depth)
                return True, value
            if isinstance(stmt, ast.Assign):
                value = self.expr(stmt.value, scope, depth)
                for target in stmt.targets:
                    self.assign(target, value, scope, depth)
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call):
                self.statement_call(stmt.value, scope, depth)
            elif isinstance(stmt, ast.If):
                test = self.truth(stmt.test, scope, depth)
                if test is None:
                    self.note(
                        stmt, f"`if {ast.unparse(stmt.test)}`: a test the reader cannot evaluate"
                    )
                    continue
                done, value = self.block(stmt.body if test else stmt.orelse, scope, depth)
                if done:
                    return True, value
            elif isinstance(stmt, (ast.For, ast.While, ast.With, ast.Try, ast.AugAssign)):
                self.note(stmt, f"an `{type(stmt).__name__.lower()}` statement not read")
        return False, None

    def truth(self, test: ast.expr, scope: dict, depth: int) -> bool | None:
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            inner = self.truth(test.operand, scope, depth)
            return None if inner is None else not inner
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            a = self.expr(test.left, scope, depth)
            b = self.expr(test.comparators[0], scope, depth)
            if isinstance(a, (Unknown, Config)) or isinstance(b, (Unknown, Config)):
                return None
            ops = {ast.Eq: a == b, ast.NotEq: a != b, ast.Is: a is b, ast.IsNot: a is not b}
            return ops.get(type(test.ops[0]))
        value = self.expr(test, scope, depth)
        if isinstance(value, Unknown):
            return None
        if isinstance(value, Config):  # a configuration is truthy; its fields tell the rest
            return True
        return bool(value)

    def assign(self, target: ast.expr, value: Any, scope: dict, depth: int) -> None:
        if isinstance(target, ast.Name):
            scope[target.id] = value
            return
        if isinstance(target, ast.Attribute):
            owner = self.expr(target.value, scope, depth)
            if isinstance(owner, Config):
                owner.fields[target.attr] = value
                return
        self.note(target, f"{ast.unparse(target)} = ...: a target the reader does not follow")

    def statement_call(self, node: ast.Call, scope: dict, depth: int) -> None:
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr in ("append", "extend"):
            owner = self.expr(func.value, scope, depth)
            args = [self.expr(a, scope, depth) for a in node.args]
            if isinstance(owner, list) and len(args) == 1:
                if func.attr == "append":
                    owner.append(args[0])
                    return
                if isinstance(args[0], list):
                    owner.extend(args[0])
                    return
        if self.m.function(_dotted(func) or "") is not None:
            self.call(node, scope, depth)
            return
        self.note(node, f"{ast.unparse(func)}(...) is not in the file")


def _parts(run: Config, out: RecipeSettings, notes: list[str]) -> None:
    """The run's trainer, data, model and optimizer as settings."""
    for part, value in run.fields.items():
        if part in QUIET_PARTS:
            continue
        if part == "trainer":
            _trainer(value, out, notes)
        elif part == "data":
            _fields(value, "data", out, notes, DATA_KEYS)
        elif part == "model":
            _model(value, out, notes)
        elif part == "optim":
            _optimizer(value, out, notes)
        else:
            notes.append(f"{part} = {_text(value)}: not read")


def _text(value: Any) -> str:
    if isinstance(value, Config):
        return f"{value.target}(...)"
    if isinstance(value, Unknown):
        return value.text
    return repr(value)


def _set(out: RecipeSettings, key: str, value: Any, notes: list[str], where: str) -> None:
    if isinstance(value, (Unknown, Config)):
        line = f"line {value.line}: " if value.line else ""
        notes.append(f"{line}{where} = {_text(value)}: a value the reader does not evaluate")
        return
    if value is None:
        return
    out.overrides.pop(key, None)
    out.overrides[key] = override_text(value)
    out.values[key] = value


def _fields(
    value: Any, part: str, out: RecipeSettings, notes: list[str], keys: dict[str, str]
) -> None:
    if not isinstance(value, Config) or value.called:
        notes.append(f"{part} = {_text(value)}: not read")
        return
    for name, v in value.fields.items():
        if name in keys:
            _set(out, keys[name], v, notes, f"{part}.{name}")


def _trainer(value: Any, out: RecipeSettings, notes: list[str]) -> None:
    if not isinstance(value, Config) or value.called:
        notes.append(f"trainer = {_text(value)}: not read")
        return
    f = value.fields
    devices, nodes = f.get("devices"), f.get("num_nodes", 1)
    if isinstance(devices, int) and isinstance(nodes, int):
        out.gpus = devices * nodes
    _strategy(f.get("strategy"), out, notes)
    plugins = f.get("plugins")
    if isinstance(plugins, Config) and plugins.called and plugins.target.endswith("_mixed"):
        _set(out, "mixed_precision", plugins.target.split(".")[-1], notes, "trainer.plugins")
        for name, v in plugins.fields.items():  # fields set on the preset (grad_reduce_in_fp32)
            _set(out, f"mixed_precision.{name}", v, notes, f"trainer.plugins.{name}")
    elif plugins is not None:
        notes.append(f"trainer.plugins = {_text(plugins)}: a precision not read")
    for cb in f.get("callbacks") or []:
        name = cb.target.split(".")[-1] if isinstance(cb, Config) else ""
        if name == "MegatronCommOverlapCallback":
            for key, v in cb.fields.items():
                _set(out, f"comm_overlap.{key}", v, notes, f"{name}.{key}")
        elif name not in QUIET_CALLBACKS:
            notes.append(f"trainer.callbacks: {_text(cb)}: not read")


def _strategy(value: Any, out: RecipeSettings, notes: list[str]) -> None:
    if not isinstance(value, Config) or value.called:
        notes.append(f"trainer.strategy = {_text(value)}: not read")
        return
    for name, v in value.fields.items():
        if name.startswith(STRATEGY_PASSED):
            continue
        if name == "ddp" and isinstance(v, Config) and not v.called:
            for key, w in v.fields.items():
                _set(out, f"ddp.{key}", w, notes, f"trainer.strategy.ddp.{key}")
        elif name == "fsdp":
            if v == "megatron":
                _set(out, "ddp.use_megatron_fsdp", True, notes, "trainer.strategy.fsdp")
            elif v is not None:
                notes.append(f"trainer.strategy.fsdp = {_text(v)}: not read")
        else:
            _set(out, f"model.{name}", v, notes, f"trainer.strategy.{name}")


def _model(value: Any, out: RecipeSettings, notes: list[str]) -> None:
    config = value.fields.get("config") if isinstance(value, Config) else None
    if not isinstance(config, Config) or config.called:
        notes.append(f"model = {_text(value)}: a model the reader does not evaluate")
        return
    out.recipe = config.target.split(".")[-1]  # the config class (framework_models.toml [nemo2])
    for name, v in config.fields.items():
        _set(out, f"model.{name}", v, notes, f"model.config.{name}")


def _optimizer(value: Any, out: RecipeSettings, notes: list[str]) -> None:
    config = value.fields.get("config") if isinstance(value, Config) else None
    if isinstance(value, Config) and value.called or not isinstance(config, Config):
        notes.append(
            f"optim = {_text(value)}: not in the file; its optimizer settings are not read "
            "(the distributed optimizer: ddp.use_distributed_optimizer with --set)"
        )
        return
    for name in OPTIMIZER_KEYS:
        if name in config.fields:
            _set(out, f"optimizer.{name}", config.fields[name], notes, f"optim.config.{name}")


def read_nemo2_settings(module: Module, origin: str, function: str | None) -> RecipeSettings:
    """The settings of recipe `function` (default `pretrain_recipe`) of a NeMo 2.0 file."""
    name = function or "pretrain_recipe"
    fn = module.function(name)
    if fn is None:
        listed = ", ".join(n for n in module.functions if n.endswith("recipe")) or "none"
        raise InputError(f"{origin}: no recipe function {name!r} (recipes: {listed})")
    out = RecipeSettings(function=name)
    run = _Eval(module, origin, out.notes).run(fn, None, {}, 0)
    if not isinstance(run, Config) or run.called:
        raise InputError(f"{origin}: {name} does not return a run.Partial the reader follows")
    _parts(run, out, out.notes)
    return out
