"""`--from FILE` (a Megatron-LM argument list, a torchtitan TOML or a MaxText YAML read into the
plan's flags, as if each had been given) and `--emit FORMAT [-o FILE]` (the priced layout written
in the framework's own names) for `plan`, and `--from` for `validate --trace`
(shardline.io.framework_config)."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from shardline.errors import InputError

if TYPE_CHECKING:
    from shardline.io.framework_config import Imported
    from shardline.planning.results import PlanSet
    from shardline.workload.modelspec import ModelSpec
    from shardline.workload.workload import Workload

__all__ = [
    "add_from_arg",
    "add_emit_args",
    "add_emit_out_arg",
    "apply_from",
    "emit_plan",
    "emit_search_best",
    "check_search_flags",
    "add_search_model_args",
    "search_from",
    "search_emit",
    "emitted_text",
    "write_emitted",
    "FORMATS",
]

FORMATS = ("megatron", "torchtitan", "maxtext")


def add_from_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--from",
        dest="from_file",
        default=None,
        metavar="FILE",
        help="a framework's launch configuration: a Megatron-LM argument list or train.sh, a "
        "Megatron-Bridge override set or recipe .py (read, not run), a torchtitan job .toml or "
        "a MaxText .yml; its model, degrees, batch, sequence, precision and recompute are read "
        "as if given as flags (flags given as well win); docs/framework-configs.md",
    )
    parser.add_argument(
        "--recipe",
        default=None,
        metavar="FUNCTION",
        help="--from RECIPE.py: the recipe function (or scripts/performance layout preset) to "
        "read (default: the file's only recipe function)",
    )
    parser.add_argument(
        "--set",
        dest="bridge_set",
        action="append",
        default=None,
        metavar="KEY=VALUE",
        help="--from a Megatron-Bridge recipe or override set: a setting applied on top "
        "(model.X=V, train.X=V, comm_overlap.X=V, ...; repeat for more)",
    )


def add_emit_args(parser: argparse.ArgumentParser) -> None:
    """`plan`'s --emit FORMAT and -o FILE."""
    parser.add_argument(
        "--emit",
        default=None,
        type=str.lower,
        choices=FORMATS,
        help="write the recommended plan's launch configuration in this framework's names (the "
        "plan is priced with that framework's defaults unless --framework is given); to stdout, "
        "or to -o FILE",
    )
    add_emit_out_arg(parser)


def add_emit_out_arg(parser: argparse.ArgumentParser) -> None:
    """-o FILE of --emit (search's --emit comes with the serving flags: an engine or, for the
    training search, a framework)."""
    parser.add_argument(
        "-o",
        "--emit-out",
        dest="emit_out",
        default=None,
        metavar="FILE",
        help="--emit megatron|torchtitan|maxtext: the file to write (with --force over an "
        "existing one)",
    )


def _set(args: argparse.Namespace, name: str, value: object, given: list[str]) -> None:
    """Fill one flag from the file unless the command line gave it."""
    if getattr(args, name, None) is None:
        setattr(args, name, value)
    elif str(getattr(args, name)) != str(value):
        given.append(name)


def apply_from(args: argparse.Namespace) -> Imported | None:
    """Read --from into `args` (the flags a user would have typed); None without --from."""
    from shardline.cli.common import positive_arg
    from shardline.cli.execution_args import knobs
    from shardline.io.framework_files import read_config

    path = getattr(args, "from_file", None)
    if path is None:
        _recipe_args(args)  # refuses --recipe and --set without --from
        return None
    if getattr(args, "model", None) is not None or getattr(args, "workload", None) is not None:
        raise InputError("give --from FILE or a WORKLOAD / --model, not both")
    devices = positive_arg(args.devices, "--devices")
    imported = read_config(path, devices, *_recipe_args(args))
    kept: list[str] = []
    for name, value in imported.degrees.items():
        _set(args, name, str(value), kept)
    if hasattr(args, "etp") and imported.etp is not None:
        _set(args, "etp", str(imported.etp), kept)
    _set(args, "microbatches", str(imported.microbatches), kept)
    _set(args, "batch", str(imported.batch), kept)
    _set(args, "seq_len", str(imported.seq_len), kept)
    if imported.dtype is not None and not getattr(args, "dtype_given", False):
        args.dtype, args.dtype_given = imported.dtype, True
    if imported.attention_dtype is not None and hasattr(args, "attention_dtype"):
        _set(args, "attention_dtype", imported.attention_dtype, kept)
    switches = {k.field for k in knobs() if k.switch} | {"cuda_graphs"}
    for key, value in imported.execution.items():
        _set(args, key, bool(value) if key in switches else str(value), kept)
    args.model_spec = imported.model
    args.from_kept = kept
    return imported


def _recipe_args(args: argparse.Namespace) -> tuple[str | None, tuple[str, ...]]:
    """--recipe FUNCTION and the --set KEY=VALUE settings (read with --from)."""
    recipe, settings = getattr(args, "recipe", None), getattr(args, "bridge_set", None) or []
    if getattr(args, "from_file", None) is None and (recipe is not None or settings):
        raise InputError("--recipe and --set go with --from FILE")
    return recipe, tuple(settings)


def _launch_layout(args: argparse.Namespace, result: PlanSet) -> Any:
    from shardline.cli.common import count_arg
    from shardline.io.framework_config import LaunchLayout
    from shardline.models import load_model
    from shardline.models.template import DEFAULT_SEQ_LEN

    best = result.best()
    if best is None and len(result.plans) == 1:
        best = result.plans[0]  # the layout the flags pin, written even where it does not fit
    if best is None:
        raise InputError("--emit: no plan fits, so there is no layout to write")
    spec = getattr(args, "model_spec", None)
    if spec is None:
        if getattr(args, "model", None) is None:
            raise InputError("--emit needs the model's shape: give --model NAME or --from FILE")
        spec = load_model(args.model)
    dtype = args.dtype if getattr(args, "dtype_given", False) else (spec.dtype or "bf16")
    return LaunchLayout(
        model=spec,
        degrees=dict(best.degrees),
        microbatches=best.microbatches,
        batch=int(result.workload.batch),
        seq_len=count_arg(args.seq_len, "--seq-len") or DEFAULT_SEQ_LEN,
        dtype=dtype,
        execution=result.execution,
        devices=result.devices,
    )


def emit_plan(args: argparse.Namespace, result: PlanSet) -> dict[str, Any] | None:
    """Write --emit's configuration: to -o FILE (returns {"format", "file"}) or, without -o,
    to stdout (returns {"format", "text"}: the caller prints nothing else)."""
    from shardline.io.framework_files import emit_config

    if args.emit is None:
        if getattr(args, "emit_out", None) is not None:
            raise InputError("-o FILE goes with --emit FORMAT")
        return None
    return write_emitted(args, emit_config(args.emit, _launch_layout(args, result)))


def write_emitted(args: argparse.Namespace, text: str) -> dict[str, Any]:
    """--emit's text to -o FILE ({"format", "file"}) or, without -o, {"format", "text"} for the
    caller to print alone."""
    if args.emit_out is None:
        return {"format": args.emit, "text": text}
    from shardline.cli.common import write_text
    from shardline.io.tables import check_output_path

    suffixes = {"megatron": (".sh", ".txt", ".args"), "torchtitan": (".toml",)}
    inputs = [p for p in (getattr(args, "from_file", None),) if p]
    out = check_output_path(
        args.emit_out,
        inputs,
        force=args.force,
        suffixes=suffixes.get(args.emit, (".yml", ".yaml")),
    )
    write_text(out, text)
    return {"format": args.emit, "file": str(out)}


def emit_search_best(
    args: argparse.Namespace,
    workload: Workload,
    spec: ModelSpec,
    best: dict[str, Any],
    sizes: tuple[int, str],
) -> dict[str, Any]:
    """`search --emit`: the best layout priced once more by the plan engine (the framework's
    defaults resolved, as `plan` prices it), written in the framework's names; `sizes` the
    sequence length and the dtype."""
    from shardline.io.framework_config import LaunchLayout, runnable_knobs
    from shardline.io.framework_files import emit_config
    from shardline.planning.api import plan

    searched = ("interleave", "sequence_parallel", "recompute", "zero", "tp_overlap")
    knobs, changes = runnable_knobs(
        args.emit, {k: best[k] for k in searched}, best["degrees"].get("tp", 1)
    )
    result = plan(
        workload,
        best["hardware"],
        best["devices"],
        require_fit=False,
        microbatches=best["microbatches"],
        framework=args.framework,
        **best["degrees"],
        **knobs,
    )
    layout = LaunchLayout(
        model=spec,
        degrees=dict(best["degrees"]),
        microbatches=best["microbatches"],
        batch=int(workload.batch),
        seq_len=sizes[0],
        dtype=sizes[1],
        execution=result.execution,
        devices=best["devices"],
    )
    emitted = write_emitted(args, emit_config(args.emit, layout))
    priced = result.plans[0]
    return emitted | {"plan": priced.name, "predicted_s": priced.predicted_s, "changes": changes}


# --- search --from / --emit ------------------------------------------------------------------


def add_search_model_args(parser: argparse.ArgumentParser) -> None:
    """search's --model NAME or --from FILE, and -o FILE of its --emit FORMAT."""
    parser.add_argument(
        "--model",
        default=None,
        metavar="NAME",
        help="a zoo model or model .toml (or --from a framework configuration)",
    )
    add_from_arg(parser)
    add_emit_out_arg(parser)


def check_search_flags(args: argparse.Namespace, phase: str) -> None:
    """--model or --from; the serving flags refused by the training search, --from and -o by
    the serving search; search's --emit takes a framework (the training search) or an engine
    (the serving search)."""
    if (args.model is None) == (args.from_file is None):
        raise InputError("search needs --model NAME or --from FILE (one of them)")
    if phase == "training":
        if args.emit is not None and args.emit not in FORMATS:
            raise InputError(f"--emit {args.emit} applies to the serving search (--slo)")
        for flag in ("engine", "weight_dtype", "kv_dtype", "disagg"):
            if getattr(args, flag, None) not in (None, False):
                name = "--" + flag.replace("_", "-")
                raise InputError(f"{name} applies to the serving search (--slo), not training")
        return
    if args.from_file is not None or args.emit in FORMATS or args.emit_out is not None:
        raise InputError(
            "--from, -o and --emit megatron|torchtitan|maxtext apply to the training search"
        )


def search_from(args: argparse.Namespace, devices: int) -> Imported | None:
    """`search --from FILE`: the configuration (its model, sequence, batch and dtype are the
    search's; its framework's defaults run every layout); and --emit's framework by default."""
    imported = None
    _recipe_args(args)
    if args.from_file is not None:
        from shardline.io.framework_files import read_config

        imported = read_config(args.from_file, devices, *_recipe_args(args))
        args.framework = args.framework or imported.execution.get("framework")
    if args.emit is not None and args.framework is None:
        args.framework = args.emit  # the launch is priced with its framework's defaults
    return imported


def search_emit(
    args: argparse.Namespace,
    run: tuple[Workload, Any, int],
    result: dict[str, Any],
    imported: Imported | None,
) -> dict[str, object]:
    """--emit of the search's best layout (`run`: the workload, the model, the sequence):
    {"emit": ...} (with -o, or --json) or {"emit_text": ...} to print alone."""
    workload, spec, seq_len = run
    if result.get("best") is None:
        raise InputError("--emit: no layout fits, so there is none to write")
    dtype = (imported.dtype if imported is not None else None) or spec.dtype or "bf16"
    emitted = emit_search_best(args, workload, spec, result["best"], (seq_len, dtype))
    if "text" in emitted and not args.json:
        return {"emit_text": emitted["text"]}
    return {"emit": emitted}


def emitted_text(result: dict[str, Any]) -> str:
    """The line under the search's text where --emit -o wrote (empty without)."""
    if "emit" not in result:
        return ""
    from shardline.report.framework_text import render_emitted

    return render_emitted(result["emit"])
