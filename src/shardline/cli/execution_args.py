"""The `plan` flags (also `what-if precision plan`): one degree per registered strategy and the
microbatches, and how a plan runs beyond its degrees (shardline.options.Execution): pipeline
interleaving, recompute, sequence parallelism, overlap of tensor-parallel traffic, the ZeRO stage,
the optimizer, CUDA graphs, and the tokens to train on."""

from __future__ import annotations

import argparse
from typing import Any

from shardline.cli.common import count_arg
from shardline.errors import InputError
from shardline.options import EP_DISPATCHES
from shardline.strategies import strategies
from shardline.units import parse_count

__all__ = [
    "add_degree_args",
    "add_execution_args",
    "execution_from_args",
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
        "--microbatches",
        default=None,
        metavar="M",
        help="microbatches per step (default: the best for each plan)",
    )


def plan_options_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """plan()'s keywords from the flags: the degrees given, the microbatches and the execution."""
    options: dict[str, Any] = {
        s.name: count_arg(getattr(args, s.name), f"--{s.word}") for s in strategies()
    }
    options["microbatches"] = count_arg(args.microbatches, "--microbatches")
    options.update(execution_from_args(args))
    if hasattr(args, "topology"):
        from shardline.cli.common import network_from_args

        options["network"] = network_from_args(args, [s.name for s in strategies()])
    return options


def add_execution_args(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("execution (how the plan runs; shardline.options.Execution)")
    g.add_argument(
        "--interleave",
        default=None,
        metavar="V",
        help="model chunks per pipeline stage (interleaved 1F1B: bubble (P-1)/(V m)); default 1",
    )
    g.add_argument(
        "--recompute",
        default=None,
        choices=("none", "selective", "full"),
        help="activation recompute in the backward pass (selective: the attention core)",
    )
    g.add_argument(
        "--sequence-parallel",
        action="store_true",
        help="tensor parallelism with reduce-scatter + all-gather, norms and dropouts split",
    )
    g.add_argument(
        "--tp-overlap",
        action="store_true",
        help="hide tensor-parallel collectives behind the GEMMs (default: on the critical path)",
    )
    _add_ep_args(g)
    _add_grad_reduce_arg(g)
    g.add_argument(
        "--zero",
        default=None,
        choices=("0", "1", "2", "3"),
        help="ZeRO stage over dp: 1 shards optimizer state, 2 also gradients, 3 also weights",
    )
    g.add_argument(
        "--optimizer",
        default=None,
        metavar="NAME|BYTES",
        help="adam (default), adam-bf16, sgd, adafactor, or optimizer bytes per parameter",
    )
    g.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="kernels replayed from CUDA graphs: no per-kernel launch overhead (decode)",
    )
    g.add_argument(
        "--cp-kind",
        default=None,
        choices=("ring", "all-gather"),
        help="context parallelism's K/V exchange: ring (default) or all-gather (Llama 3)",
    )
    g.add_argument(
        "--tokens",
        default=None,
        metavar="T",
        help="tokens to train on, e.g. 1T or 15e12: gives days to train",
    )


def _add_grad_reduce_arg(g: argparse._ArgumentGroup) -> None:
    g.add_argument(
        "--grad-reduce-dtype",
        default=None,
        metavar="D",
        help="dtype the weight gradients are reduced in over dp/fsdp/cp/ep (default: their own; "
        "fp32 as Megatron-LM's grad_reduce_in_fp32)",
    )


def _add_ep_args(g: argparse._ArgumentGroup) -> None:
    """The expert-parallel execution flags (shardline.strategies.ep, docs/moe.md)."""
    g.add_argument(
        "--ep-overlap",
        action="store_true",
        help="hide the expert-parallel all-to-alls behind another microbatch's compute",
    )
    g.add_argument(
        "--ep-dispatch",
        default=None,
        choices=EP_DISPATCHES,
        help="expert-parallel dispatch: all-to-all (default), hierarchical (DeepEP: one copy per "
        "destination node, at DeepEP's published speed) or hybridep (the same at HybridEP's "
        "published speed, with its all-gather of the routing map before each MoE layer's "
        "dispatch)",
    )
    g.add_argument(
        "--ep-comm-sms",
        default=None,
        metavar="N",
        help="SMs the expert-parallel dispatch kernels hold (DeepEP/HybridEP num_sms); with "
        "--ep-overlap the compute beside them runs on the rest (default 0)",
    )


def _sm_count(text: str) -> int:
    """--ep-comm-sms: a whole number of SMs, 0 or more (0: the dispatch holds none)."""
    wrong = InputError(f"--ep-comm-sms must be a whole number >= 0, got {text!r}")
    try:
        n = parse_count(text, "--ep-comm-sms")
    except InputError:
        raise wrong from None
    if n < 0:
        raise wrong
    return n


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


def execution_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """The Execution keywords the user gave (plan() fills the rest with defaults)."""
    out: dict[str, Any] = {}
    if args.interleave is not None:
        value = parse_count(args.interleave, "--interleave")
        if value < 1:
            raise InputError(f"--interleave must be a positive integer, got {args.interleave!r}")
        out["interleave"] = value
    if args.recompute is not None:
        out["recompute"] = args.recompute
    if args.sequence_parallel:
        out["sequence_parallel"] = True
    if args.tp_overlap:
        out["tp_overlap"] = True
    if getattr(args, "ep_dispatch", None) is not None:
        out["ep_dispatch"] = args.ep_dispatch
    if getattr(args, "ep_overlap", False):
        out["ep_overlap"] = True
    if getattr(args, "ep_comm_sms", None) is not None:
        out["ep_comm_sms"] = _sm_count(args.ep_comm_sms)
    if getattr(args, "grad_reduce_dtype", None) is not None:
        out["grad_reduce_dtype"] = args.grad_reduce_dtype
    if args.zero is not None:
        out["zero"] = int(args.zero)
    if args.optimizer is not None:
        out["optimizer"] = _optimizer(args.optimizer)
    if args.cuda_graphs:
        out["cuda_graphs"] = True
    if args.tokens is not None:
        out["tokens"] = _tokens(args.tokens)
    if getattr(args, "cp_kind", None) is not None:
        out["cp_kind"] = args.cp_kind
    return out
