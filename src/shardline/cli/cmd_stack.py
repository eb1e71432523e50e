"""`shardline stack` (a layer stack on one device: per-layer roofline, totals, memory check) and
`shardline plan` (data, FSDP, tensor and pipeline parallel plans over D devices)."""

from __future__ import annotations

import argparse
import gc
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from math import prod
from typing import TYPE_CHECKING, Any

from shardline.cli.args import add_network_args, add_workload_args
from shardline.cli.common import (
    add_chip_args,
    add_json_arg,
    emit_json,
    load_from_args,
    overrides_from_args,
    positive_arg,
)
from shardline.cli.execution_args import (
    add_degree_args,
    add_execution_args,
    plan_options_from_args,
)
from shardline.cli.framework_io import add_emit_args, add_from_arg
from shardline.cli.plan_outputs import add_plan_output_args
from shardline.errors import InputError
from shardline.strategies import strategies

if TYPE_CHECKING:
    from shardline.workload.stack import StackResult
    from shardline.workload.workload import Workload

__all__ = ["register"]


def _add_search_args(pl: argparse.ArgumentParser) -> None:
    """What `plan` searches besides the plans at one batch (at most one of them)."""
    search = pl.add_mutually_exclusive_group()
    search.add_argument(
        "--batches",
        default=None,
        metavar="LIST",
        help="sweep the batch, e.g. 1,8,64,512: the recommended plan at each and the "
        "batch where it changes (the crossover)",
    )
    search.add_argument(
        "--max-batch",
        action="store_true",
        help="the largest batch that fits on some plan (degrees given stay fixed)",
    )
    search.add_argument(
        "--max-seq-len",
        action="store_true",
        help="the largest sequence length (decode: cached context) that fits; templates only",
    )
    search.add_argument(
        "--target-mfu",
        type=float,
        default=None,
        metavar="F",
        help="the smallest batch at which some plan that fits reaches MFU F, e.g. 0.5 (degrees "
        "given stay fixed)",
    )


def register(sub: argparse._SubParsersAction) -> None:
    st = sub.add_parser(
        "stack",
        help="a layer stack on one chip: per-layer roofline, totals, memory check",
        description="Per-layer FLOPs, bytes, bound and times of a workload on one chip, totals "
        "that add up, compute versus data-transfer time, and whether weights, "
        "activations, KV cache, gradients and optimizer state fit in memory.",
    )
    add_workload_args(st)
    add_chip_args(st, dtype=False)
    add_json_arg(st)
    st.set_defaults(func=run_stack)

    pl = sub.add_parser(
        "plan",
        help="data, FSDP, tensor and pipeline parallel plans over D devices",
        description="Evaluate every combination of tensor (tp), pipeline (pp), data (dp) and "
        "fully-sharded data (fsdp) parallelism over D devices: latency, throughput, "
        "memory per device, communication and bottleneck; recommend one and say why.",
    )
    add_workload_args(pl)
    add_chip_args(pl, dtype=False)
    pl.add_argument("--devices", required=True, metavar="D", help="number of devices")
    add_degree_args(pl)
    pl.add_argument(
        "--objective",
        default="predicted",
        choices=("predicted", "latency", "throughput"),
        help="rank plans by the realistic predicted time (default), the lower-bound latency, "
        "or the predicted throughput",
    )
    pl.add_argument(
        "--top",
        default="10",
        metavar="N",
        help="plans shown in the text table (default 10; --json lists all)",
    )
    add_execution_args(pl)
    add_network_args(
        pl.add_argument_group("network (mesh axes are the strategies: tp, cp, fsdp, dp, pp)"),
        per_axis=True,
    )
    _add_search_args(pl)
    add_from_arg(pl)
    add_emit_args(pl)
    add_plan_output_args(pl)
    add_json_arg(pl)
    pl.set_defaults(func=run_plan)


def run_stack(args: argparse.Namespace) -> int:
    from shardline.report.stack_text import render_stack
    from shardline.workload.stack import stack

    with _collector_paused():
        workload = load_from_args(args)
        result = stack(workload, args.hw, **overrides_from_args(args))
        if args.json:
            _emit_stack_json(result)
        else:
            sys.stdout.write(render_stack(result))
    return 0


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Python's cyclic garbage collector paused while a stack is read, priced and printed: the
    layers and rows are freed by reference counts (a cycle waits for the next collection), and
    the collector would walk the objects of 200,000 layers again and again as they are made
    (a third of the time)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _emit_stack_json(result: StackResult) -> None:
    """`stack --json`: the text of `emit_json(result.to_dict())`, written in pieces (a row per
    layer, 200,000 of them in a second or two); a value JSON cannot hold is emit_json's error."""
    from shardline.report.stack_json import stack_json_pieces

    try:
        pieces = stack_json_pieces(result)
    except ValueError:
        emit_json(result.to_dict())  # its one error line
        return
    for piece in pieces:
        sys.stdout.write(piece)


def run_plan(args: argparse.Namespace) -> int:
    from shardline.cli.framework_io import apply_from
    from shardline.planning.api import plan, sweep_batch
    from shardline.report.plan_text import render_sweep

    imported = apply_from(args)
    if args.emit is not None and args.framework is None:
        args.framework = args.emit  # the launch is priced with its framework's defaults
    workload = load_from_args(args)
    devices = positive_arg(args.devices, "--devices")
    overrides: dict[str, Any] = dict(overrides_from_args(args))
    options = plan_options_from_args(args)
    options["objective"] = args.objective
    top = positive_arg(args.top, "--top")
    if args.max_batch or args.max_seq_len or args.target_mfu is not None:
        return _run_capacity(args, workload, devices, options, overrides)
    if args.batches is not None:
        if args.batch is not None:
            raise InputError("give --batch or --batches, not both")
        batches = [
            positive_arg(item.strip(), "--batches entry")
            for item in args.batches.split(",")
            if item.strip()
        ]
        if not batches:
            raise InputError("--batches needs at least one batch size, e.g. 1,8,64")
        sweep = sweep_batch(workload, args.hw, devices, batches, **options, **overrides)
        if args.json:
            emit_json(sweep.to_dict())
        else:
            sys.stdout.write(render_sweep(sweep))
        return 0
    whole_layout = _layout_pinned(options, devices)
    result = plan(workload, args.hw, devices, require_fit=not whole_layout, **options, **overrides)
    from shardline.cli.plan_outputs import finish_plan

    return finish_plan(args, result, top, imported=imported)


def _layout_pinned(options: dict[str, Any], devices: int) -> bool:
    """Whether the flags fix one layout: every degree given, or the given degrees already
    multiply to the devices (the rest can only be 1). The user asked about that layout, so
    `plan` answers even when it does not fit (fits false, with the memory it needs)."""
    from shardline.planning.folding import folded_pinned

    if folded_pinned(devices, options):
        return True
    if all(options[s.name] is not None for s in strategies() if not s.optional):
        return True
    given = [int(options[s.name]) for s in strategies() if options[s.name] is not None]
    return prod(given) == devices


def _run_target_mfu(args: argparse.Namespace, workload: Workload, devices: int, opts: Any) -> int:
    """`plan --target-mfu F`: the smallest batch some plan reaches MFU F at."""
    from shardline.planning.capacity import batch_for_mfu
    from shardline.report.capacity_text import render_batch_for_mfu

    if args.batch is not None:
        raise InputError("give --batch or --target-mfu, not both")
    result = batch_for_mfu(workload, args.hw, devices, args.target_mfu, options=opts)
    if args.json:
        emit_json(result.to_dict())
    else:
        sys.stdout.write(render_batch_for_mfu(result))
    return 0


def _plan_options(options: dict[str, Any], overrides: dict[str, Any]) -> Any:
    """The PlanOptions of the flags (degrees, microbatches, objective, rates, execution)."""
    from shardline.basics.options import Execution, RateOverrides
    from shardline.planning.api import PlanOptions
    from shardline.planning.search import EXECUTION_FIELDS

    return PlanOptions(
        degrees={s.name: options[s.name] for s in strategies()}
        | {k: options[k] for k in ("etp", "edp") if options.get(k) is not None},
        microbatches=options["microbatches"],
        objective=options["objective"],
        rates=RateOverrides(**overrides),
        execution=Execution(**{k: v for k, v in options.items() if k in EXECUTION_FIELDS}),
    )


def _run_capacity(
    args: argparse.Namespace,
    workload: Workload,
    devices: int,
    options: dict[str, Any],
    overrides: dict[str, object],
) -> int:
    """`plan --max-batch` / `--max-seq-len`: the largest value that fits, by doubling and
    bisection over plan searches (the degrees given stay fixed); `--target-mfu` the smallest
    batch that reaches an MFU, the same way."""
    from shardline.planning.api import max_batch, max_seq_len
    from shardline.report.capacity_text import render_capacity

    opts = _plan_options(options, overrides)
    if args.target_mfu is not None:
        return _run_target_mfu(args, workload, devices, opts)
    if args.max_batch:
        if args.batch is not None:
            raise InputError("give --batch or --max-batch, not both")
        result = max_batch(workload, args.hw, devices, options=opts)
    else:
        if args.seq_len is not None:
            raise InputError("give --seq-len or --max-seq-len, not both")
        if workload.kind not in ("transformer", "ffn"):
            raise InputError(
                "--max-seq-len applies to [transformer] and [ffn] templates; "
                f"{args.workload or args.model} is a {workload.kind}"
            )

        def rebuild(seq_len: int) -> Workload:
            return load_from_args(args, seq_len=seq_len)

        result = max_seq_len(rebuild, args.hw, devices, options=opts)
    if args.json:
        emit_json(result.to_dict())
    else:
        sys.stdout.write(render_capacity(result))
    return 0
