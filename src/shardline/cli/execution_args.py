"""The `plan` flags (also `what-if precision plan`): one degree per registered strategy and the
microbatches, and how a plan runs beyond its degrees (shardline.basics.options.Execution): each
registered strategy's own flags (`Strategy.knobs`: pipeline interleaving, sequence parallelism,
overlap of tensor-parallel traffic, the ZeRO stage, the expert-parallel dispatch, the
context-parallel exchange), then recompute, the gradient-reduction dtype, the optimizer, CUDA
graphs and the tokens to train on."""

from __future__ import annotations

import argparse
from typing import Any

from shardline.basics.framework import ATTENTION_KERNELS, framework_names
from shardline.basics.options import OP_FUSIONS
from shardline.basics.recompute import TENSORS, module_names, policy_names
from shardline.basics.units import parse_count
from shardline.cli.common import count_arg
from shardline.strategies import strategies
from shardline.strategies.base import Knob

__all__ = [
    "add_degree_args",
    "add_execution_args",
    "add_run_knob_args",
    "add_recompute_arg",
    "recompute_help",
    "execution_from_args",
    "knobs",
    "plan_options_from_args",
]


def add_degree_args(parser: argparse.ArgumentParser) -> None:
    """One `--WORD N` per registered strategy (each fixes that degree) and `--microbatches`."""
    degrees = parser.add_argument_group("plan (each optional: fixes that degree)")
    for strategy in strategies():  # one flag per registered strategy
        degrees.add_argument(
            f"--{strategy.word}", dest=strategy.name, default=None, metavar="N", help=strategy.help
        )
    degrees.add_argument(
        "--etp",
        default=None,
        metavar="N",
        help="expert tensor parallelism (Megatron-Core's parallel folding): the experts run on "
        "etp x ep x edp x pp ranks and the attention on tp x cp x dp x pp, the same devices; "
        "--dp then counts every rank outside tp, cp and pp (derived when left out)",
    )
    degrees.add_argument(
        "--edp",
        default=None,
        metavar="N",
        help="expert data parallelism with --etp: derived (devices / (pp x etp x ep)); given, it "
        "is checked",
    )
    degrees.add_argument(
        "--microbatches",
        default=None,
        metavar="M",
        help="microbatches per step (default: the best for each plan)",
    )


def plan_options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """plan()'s keywords from the flags: the degrees given, the microbatches and the execution."""
    options: dict[str, object] = {
        s.name: count_arg(getattr(args, s.name), f"--{s.word}") for s in strategies()
    }
    for key in ("etp", "edp"):  # parallel folding (shardline.planning.folding)
        if getattr(args, key, None) is not None:
            options[key] = count_arg(getattr(args, key), f"--{key}")
    options["microbatches"] = count_arg(args.microbatches, "--microbatches")
    options.update(execution_from_args(args))
    if hasattr(args, "topology"):
        from shardline.cli.common import network_from_args

        options["network"] = network_from_args(args, [s.name for s in strategies()])
    return options


def add_execution_args(parser: argparse.ArgumentParser) -> None:
    """The execution flags: each registered strategy's own (`Strategy.knobs`: --interleave,
    --sequence-parallel, --zero, --cp-kind, ...), then those of the plan as a whole."""
    g = parser.add_argument_group(
        "execution (how the plan runs; shardline.basics.options.Execution)"
    )
    for knob in knobs():
        _add_knob(g, knob)
    add_recompute_arg(g)
    _add_step_args(g)


def add_run_knob_args(g: object, searched: frozenset[str]) -> None:
    """The execution flags of how a model runs that a search does not try itself (`searched`:
    the fields it tries): the strategies' knobs but those, the gradient dtype, the optimizer,
    the launch mode and the attention kernel (the training search; its own --framework,
    --recompute and --tokens)."""
    for knob in knobs():
        if knob.field in searched:
            continue
        _add_knob(g, knob)
    _add_gradient_args(g)
    _add_kernel_arg(g)


def _add_knob(g: Any, knob: Knob) -> None:
    if knob.switch:  # --no-FLAG turns off what a --framework default turns on
        g.add_argument(
            knob.flag,
            dest=knob.field,
            action=argparse.BooleanOptionalAction,
            default=None,
            help=knob.help,
        )
    else:
        g.add_argument(
            knob.flag,
            dest=knob.field,
            default=None,
            choices=knob.choices,
            metavar=knob.metavar,
            help=knob.help,
        )


def _add_step_args(g: Any) -> None:
    """The flags of the plan as a whole: gradient dtype, optimizer, launch mode, framework,
    attention kernel, tokens."""
    _add_gradient_args(g)
    g.add_argument(
        "--framework",
        default=None,
        metavar="NAME",
        help=f"the training framework whose defaults fill what the other flags leave out: "
        f"{', '.join(framework_names())} (default megatron; `shardline framework show NAME` lists "
        "each one's defaults and sources)",
    )
    _add_kernel_arg(g)
    g.add_argument(
        "--tokens",
        default=None,
        metavar="T",
        help="tokens to train on, e.g. 1T or 15e12: gives days to train",
    )


def _add_gradient_args(g: Any) -> None:
    """--grad-reduce-dtype, --optimizer, --cuda-graphs, --op-fusion."""
    g.add_argument(
        "--grad-reduce-dtype",
        default=None,
        metavar="D",
        help="dtype the weight gradients are reduced in over dp/fsdp/cp/ep (default: their own; "
        "fp32 as Megatron-LM's grad_reduce_in_fp32)",
    )
    g.add_argument(
        "--optimizer",
        default=None,
        metavar="NAME|BYTES",
        help="adam (default), adam-bf16, adam-no-master, sgd, adafactor, sgd-plain, or "
        "optimizer bytes per parameter",
    )
    _memory_args(g)
    g.add_argument(
        "--cuda-graphs",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="kernels replayed from CUDA graphs: no per-kernel launch overhead (decode)",
    )
    g.add_argument(
        "--op-fusion",
        default=None,
        choices=OP_FUSIONS,
        help="how the memory-bound ops between the matmuls run in training: fused (Megatron's "
        "and Transformer Engine's kernels, torch.compile, XLA) or eager (PyTorch op by op; "
        "default: the framework's, fused for megatron)",
    )


def _add_kernel_arg(g: Any) -> None:
    g.add_argument(
        "--attention-kernel",
        default=None,
        choices=ATTENTION_KERNELS,
        help="the fused attention kernel: its measured efficiencies where the chip file gives "
        "them (achievable.attention_kernels; default: the framework's, Megatron-Core's cudnn in "
        "training)",
    )


def recompute_help() -> str:
    """--recompute's help: every policy name (shardline.basics.recompute, recompute.toml)."""
    return (
        "activation recompute policy in the backward pass (docs/whole-model.md#recompute-policies):"
        f" {', '.join(policy_names())}; layer-N (every Nth block fully recomputed, torchtitan); "
        "full-block:N (the first N blocks of each pipeline stage, of each virtual stage with "
        "--interleave, fully recomputed: Megatron-LM's --recompute-method block); "
        f"keep:T1,T2,... (keep these block tensors: {', '.join(TENSORS)}); modules:M1,M2,... "
        f"(Megatron-Core's recompute_modules: {', '.join(module_names())}). Default none"
    )


def add_recompute_arg(g: Any) -> None:
    """--recompute, and --offload (kept tensors held in host memory)."""
    g.add_argument("--recompute", default=None, metavar="POLICY", help=recompute_help())
    g.add_argument(
        "--offload",
        default=None,
        metavar="T1,T2,...",
        help="block tensors the recompute policy keeps that are held in host memory between the "
        "forward and the backward pass, not the device's (MaxText's remat_policy custom with "
        f"the tensor set to offload): {', '.join(TENSORS)}; their copies are not priced",
    )


def knobs() -> tuple[Knob, ...]:
    """Every registered strategy's execution flags, in registry order."""
    return tuple(knob for s in strategies() for knob in s.knobs)


def _memory_args(g: Any) -> None:
    g.add_argument(
        "--memory-convention",
        type=int,
        choices=(16, 10),
        default=None,
        help="training state per parameter: 16 B (bf16 weights + bf16 gradients + fp32 master "
        "+ fp32 Adam, the default) or 10 B (bf16 weights + fp32 Adam, no master copy, no "
        "gradient buffer: How to Scale Your Model's count)",
    )


def _optimizer(text: str | None) -> str | float | None:
    if text is None:
        return None
    try:
        return float(text)
    except ValueError:
        return text.strip().lower()


def _tokens(text: str | None) -> float | None:
    if text is None:
        return None
    return float(parse_count(text, "--tokens"))


def execution_from_args(args: argparse.Namespace) -> dict[str, object]:
    """The Execution keywords the user gave (plan() fills the rest with defaults)."""
    out: dict[str, object] = {}
    for knob in knobs():
        value = getattr(args, knob.field, None)
        if knob.switch:
            if value is not None:
                out[knob.field] = bool(value)
        elif value is not None:
            out[knob.field] = knob.parse(value) if knob.parse is not None else value
    if getattr(args, "recompute", None) is not None:
        out["recompute"] = args.recompute
    if getattr(args, "offload", None) is not None:
        out["offload"] = args.offload
    if getattr(args, "grad_reduce_dtype", None) is not None:
        out["grad_reduce_dtype"] = args.grad_reduce_dtype
    if getattr(args, "optimizer", None) is not None:
        out["optimizer"] = _optimizer(args.optimizer)
    if getattr(args, "memory_convention", None) is not None:
        out["memory_convention"] = args.memory_convention
    if getattr(args, "cuda_graphs", None) is not None:
        out["cuda_graphs"] = bool(args.cuda_graphs)
    if getattr(args, "tokens", None) is not None:
        out["tokens"] = _tokens(args.tokens)
    if getattr(args, "framework", None) is not None:
        out["framework"] = args.framework
    if getattr(args, "attention_kernel", None) is not None:
        out["attention_kernel"] = args.attention_kernel
    if getattr(args, "op_fusion", None) is not None:
        out["op_fusion"] = args.op_fusion
    return out
