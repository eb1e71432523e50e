"""Every argument group that more than one command takes, built here and nowhere else.

- hardware and rate overrides: `add_chip_args` (--hw, --dtype, --compute-dtype, --flops-per-s,
  --mem-bw) and `add_operand_dtypes` (--a-dtype, --b-dtype, --out-dtype);
- a multiply: `add_matmul_args` (matmul, explain matmul), `add_einsum_args` (einsum, explain
  einsum), `add_shard_args` (shard, explain shard), `add_compare_args` (compare, plot strategies);
- mesh and network: `add_mesh_args`, `add_network_args`, `add_run_args`, `add_output_layout`;
- a workload: `add_workload_args` (stack, plan, explain plan);
- serving: `add_serving_args` (serve; the serving search);
- inputs and outputs: `add_sheet_input`, `add_json_arg`, `add_force_arg`, `add_md_output`,
  `add_plot_output`.

Only argparse is imported here: building the parser stays fast.
"""

from __future__ import annotations

import argparse
from typing import Literal

from shardline.cli.system_args import add_system_args

__all__ = [
    "add_chip_args",
    "add_power_cap_arg",
    "add_collective_mesh_arg",
    "add_compare_args",
    "add_cost_args",
    "add_einsum_args",
    "add_force_arg",
    "add_json_arg",
    "add_matmul_args",
    "add_md_output",
    "add_mesh_args",
    "add_network_args",
    "add_operand_dtypes",
    "add_output_layout",
    "add_plot_output",
    "add_run_args",
    "add_shard_args",
    "add_sheet_input",
    "add_workload_args",
    "reject_empty",
]

# --- hardware and dtypes ---------------------------------------------------------------------


def _given(text: str) -> str:
    """Every string value a command reads: an empty one (`--mem-bw ''`) is an error, never a flag
    silently left out."""
    if not text.strip():
        raise argparse.ArgumentTypeError("empty value: give one, or leave the flag out")
    return text


def reject_empty(parser: argparse.ArgumentParser) -> None:
    """Make `_given` the conversion of every argument of `parser` that names no type of its own."""
    parser.register("type", None, _given)


def add_chip_args(
    parser: argparse.ArgumentParser, *, dtype: bool = True, power_cap: bool = True
) -> None:
    """--hw, the dtypes, the rate overrides and (`power_cap`) --power-cap. Serving takes chip
    names through its caches of step times, so `serve` leaves --power-cap out."""
    reject_empty(parser)
    group = parser.add_argument_group("hardware")
    group.add_argument(
        "--hw",
        default=None,
        help="chip name or alias (see `shardline hw list`) or a chip .toml file "
        "(default: h100-sxm, or the chip of --system)",
    )
    parser.set_defaults(hw_fallback="h100-sxm")
    if dtype:
        group.add_argument(
            "--dtype",
            default=None,
            help="storage dtype of every operand (default: bf16, or fp32 on a chip without bf16)",
        )
        group.add_argument(
            "--compute-dtype",
            default=None,
            help="dtype whose peak FLOP/s applies (default: the widest input's)",
        )
    group.add_argument(
        "--flops-per-s",
        default=None,
        metavar="X",
        help="override the peak FLOP/s for the compute dtype, e.g. 1.97e14 or '197 TFLOP/s'",
    )
    group.add_argument(
        "--mem-bw",
        default=None,
        metavar="X",
        help="override the HBM bandwidth in bytes/s, e.g. 8.2e11 or '820 GB/s'",
    )
    if power_cap:
        add_power_cap_arg(group)


def add_power_cap_arg(group: argparse._ActionsContainer) -> None:
    group.add_argument(
        "--power-cap",
        default=None,
        metavar="W",
        help="run the chip under a power limit of W watts (nvidia-smi -pl): its compute rates "
        "follow the clock the limit allows (default: the chip's own limit, its design power)",
    )


OperandHelp = Literal["named", "row", "plain"]


def add_operand_dtypes(parser: argparse.ArgumentParser, style: OperandHelp = "named") -> None:
    """--a-dtype, --b-dtype, --out-dtype. `style`: "named" says which operand is the activations
    and which the weights; "row" adds that a sheet row's dtype is the default; "plain" is bare."""
    roles = {"a": " (activations)", "b": " (weights)", "out": ""}
    names = {"a": "A", "b": "B", "out": "C"}
    for key in ("a", "b", "out"):
        text = f"storage dtype of {names[key]}"
        if style != "plain":
            text += roles[key]
        if style == "row":
            text += "; default: the row's dtype"
        parser.add_argument(f"--{key}-dtype", help=text)


# --- a multiply ------------------------------------------------------------------------------


def _add_mnk(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("m", metavar="M")
    parser.add_argument("k", metavar="K")
    parser.add_argument("n", metavar="N")


def add_cuda_graphs_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--cuda-graphs",
        action="store_true",
        help="time the kernel as replayed from a CUDA graph: the launch overhead is hidden, the "
        "per-kernel floor stays (default: launched eagerly)",
    )


def add_warm_l2_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--warm-l2",
        action="store_true",
        help="the operands are left in the L2 by the previous call (a benchmark replaying one "
        "kernel on the same buffers): where they fit it they are read at the L2's rate "
        "(default: from memory)",
    )


def add_matmul_args(parser: argparse.ArgumentParser) -> None:
    """Arguments of `shardline matmul M K N` (also `explain matmul`)."""
    reject_empty(parser)
    _add_mnk(parser)
    add_chip_args(parser)
    add_operand_dtypes(parser)
    parser.add_argument(
        "--accumulate",
        action="store_true",
        help="C += A.B (beta != 0): the old C is read as well as written",
    )
    add_cuda_graphs_arg(parser)
    add_warm_l2_arg(parser)


def add_einsum_args(parser: argparse.ArgumentParser) -> None:
    """Arguments of `shardline einsum SPEC --dims ...` (also `explain einsum`); the mesh options
    apply when the spec names mesh axes."""
    reject_empty(parser)
    parser.add_argument(
        "spec", help="e.g. 'X[B,D] * W[D,F] -> Y[B,F]'; M_X splits M over mesh axis X"
    )
    parser.add_argument("--dims", required=True, help="sizes, e.g. B=64,D=4096,F=4096")
    parser.add_argument("--dtypes", default=None, help="per-operand dtypes, e.g. X=bf16,W=int8")
    add_chip_args(parser)
    parser.add_argument("--accumulate", action="store_true", help="the output is accumulated into")
    add_cuda_graphs_arg(parser)
    add_warm_l2_arg(parser)
    add_mesh_args(parser)


def add_shard_args(parser: argparse.ArgumentParser) -> None:
    """Arguments of `shardline shard M K N --devices D --along m|n|k` (also `explain shard`)."""
    reject_empty(parser)
    _add_mnk(parser)
    parser.add_argument("--devices", required=True, metavar="D", help="devices to split over")
    parser.add_argument(
        "--along",
        required=True,
        type=str.lower,
        choices=("m", "n", "k"),
        help="the dimension to split: m, n or k",
    )
    _add_split_network_run(parser)


def add_compare_args(parser: argparse.ArgumentParser) -> None:
    """Arguments of `shardline compare M K N --devices D` (also `plot strategies`)."""
    reject_empty(parser)
    _add_mnk(parser)
    parser.add_argument("--devices", required=True, metavar="D", help="devices to split over")
    _add_split_network_run(parser)


def _add_split_network_run(parser: argparse.ArgumentParser) -> None:
    add_output_layout(parser)
    add_chip_args(parser)
    group = parser.add_argument_group("network and run")
    add_network_args(group, per_axis=False)
    add_run_args(group)


# --- mesh and network ------------------------------------------------------------------------


def add_output_layout(parser: argparse.ArgumentParser) -> None:
    """`--output split|replicated` (also `--output-layout`), stored as `args.shard_output`
    so that commands reusing these arguments (`explain shard`, `plot strategies`) keep
    `args.out`/`args.output` free for their files."""
    parser.add_argument(
        "--output",
        "--output-layout",
        dest="shard_output",
        default="split",
        type=str.lower,
        choices=("split", "replicated"),
        help="C stays split over the devices (default) or ends whole on each",
    )


def add_collective_mesh_arg(parser: argparse.ArgumentParser) -> None:
    """`collective --mesh`: one collective over every axis of a mesh."""
    parser.add_argument(
        "--mesh",
        default=None,
        metavar="X=16,Y=20",
        help="a collective over every axis of this mesh at once (instead of --devices; "
        "--multi-axis says whether the axes' links work together)",
    )


def add_network_args(group: argparse._ArgumentGroup, *, per_axis: bool) -> None:
    words = "ring, line, unidirectional-ring, switch, torus, hierarchical"
    example = "X=ring,Y=line (or one word for every axis)" if per_axis else "one word"
    group.add_argument(
        "--topology", default=None, help=f"{example}: {words} (default: the chip's own layout)"
    )
    group.add_argument(
        "--link-bw",
        default=None,
        metavar="B/S",
        help="one-way bytes/s per link, e.g. 4.5e10 or '45 GB/s' (a switch's "
        "egress is this times the chip's links)",
    )
    group.add_argument(
        "--latency", default=None, metavar="S", help="seconds per hop, e.g. 1e-6 or '1 us'"
    )
    group.add_argument(
        "--algorithm",
        metavar="NAME",
        help="the collective algorithm, by name or alias, e.g. ring, tree, in-switch (nvls), "
        "switch (default: each stage's own for the bound and the library's choice; an unknown "
        "name lists every valid one; docs/collectives.md)",
    )
    group.add_argument(
        "--gpus-per-process",
        default=None,
        metavar="G",
        help="GPUs one process drives (nccl-tests -g G): their launches serialize (default 1)",
    )
    add_system_args(group)


def add_run_args(group: argparse._ArgumentGroup) -> None:
    overlap = group.add_mutually_exclusive_group()  # --overlap --no-overlap: an error
    overlap.add_argument(
        "--overlap",
        dest="overlap",
        action="store_true",
        default=True,
        help="communication overlaps compute: time = max (default)",
    )
    overlap.add_argument(
        "--no-overlap",
        dest="overlap",
        action="store_false",
        help="no overlap: max(t_compute, t_memory) + t_network",
    )
    group.add_argument(
        "--resident",
        default=None,
        metavar="OPERAND[,..]",
        help="inputs already laid out as the spec says (e.g. weights); the others "
        "start 1/D per device and are all-gathered first "
        "(default: every input is resident; 'none' for none)",
    )
    group.add_argument(
        "--pad",
        action="store_true",
        help="pad dimensions that do not divide by their shards (never silent)",
    )
    group.add_argument(
        "--reduce-dtype",
        default=None,
        metavar="DTYPE",
        help="dtype of the partial sums that are reduced over the network "
        "(default fp32, the accumulator)",
    )


def add_mesh_args(parser: argparse.ArgumentParser) -> None:
    """--mesh and friends, for `shardline einsum` with a sharded spec."""
    group = parser.add_argument_group("mesh (sharded specs such as A[M_X,K])")
    group.add_argument(
        "--mesh",
        default=None,
        metavar="X=4,Y=2",
        help="named mesh axes (single upper-case letters) and their sizes",
    )
    group.add_argument(
        "--devices",
        default=None,
        metavar="D",
        help="total devices; must equal the product of the mesh",
    )
    add_network_args(group, per_axis=True)
    add_run_args(group)
    group.add_argument(
        "--unreduced",
        default=None,
        metavar="AXIS[,..]",
        help="leave the output's partial sums over these axes unreduced ({U_X})",
    )


# --- inputs and outputs ----------------------------------------------------------------------


def add_json_arg(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print one JSON object (SI units)")


def add_force_arg(parser: argparse.ArgumentParser, what: str) -> None:
    """`--force`: "replace {what}"."""
    parser.add_argument("--force", action="store_true", help=f"replace {what}")


def add_sheet_input(parser: argparse.ArgumentParser) -> None:
    reject_empty(parser)
    parser.add_argument(
        "--sheet",
        default=None,
        metavar="NAME",
        help="worksheet to read in an .xlsx (default: the first)",
    )


def add_md_output(parser: argparse.ArgumentParser) -> None:
    """`-o/--out OUT.md` and `--force` of the explain commands."""
    parser.add_argument(
        "-o",
        "--out",
        dest="out",
        metavar="OUT.md",
        default=None,
        help="also write the Markdown to this file",
    )
    add_force_arg(parser, "OUT.md if it exists")


def add_plot_output(parser: argparse.ArgumentParser) -> None:
    """`-o/--out OUT` (required) and `--force` of the plot commands."""
    parser.add_argument(
        "-o", "--out", dest="out", metavar="OUT", required=True, help="a .png or .svg file"
    )
    add_force_arg(parser, "OUT if it exists")


def add_cost_args(parser: argparse.ArgumentParser) -> None:
    """`--usd-per-hour X` and `--prices FILE`: the price of one chip-hour (shardline.costing)."""
    g = parser.add_argument_group(
        "cost (USD per chip-hour; default: shardline/costing/prices.toml)"
    )
    g.add_argument(
        "--usd-per-hour",
        default=None,
        metavar="X",
        help="price of one chip for one hour in USD (overrides the default table)",
    )
    g.add_argument(
        "--prices",
        default=None,
        metavar="FILE",
        help="a TOML of [chip-name] usd_per_hour = X laid over the default prices",
    )


# --- a workload ---------------------------------------------------------------------------


def add_workload_args(parser: argparse.ArgumentParser, *, dtype: bool = True) -> None:
    """The WORKLOAD positional and its overrides (`stack`, `plan`, `explain plan`); `dtype=False`
    where the chip arguments bring their own --dtype (`report`)."""
    reject_empty(parser)
    parser.add_argument(
        "workload",
        metavar="WORKLOAD",
        nargs="?",
        default=None,
        help="a workload .toml (a [[layer]] stack, or a [transformer] / [ffn] "
        "template) or a .csv/.xlsx sheet of (M, K, N) rows; or leave it out and give --model",
    )
    group = parser.add_argument_group("workload")
    group.add_argument(
        "--model",
        default=None,
        metavar="NAME",
        help="a zoo model (see `shardline model list`) or a model .toml instead of WORKLOAD: "
        "the [transformer] template of a dense model (default --phase training, --batch 1, "
        "--seq-len 4096)",
    )
    group.add_argument(
        "--phase",
        default=None,
        choices=("forward", "training", "prefill", "decode"),
        help="override the file's phase (prefill and decode: templates only)",
    )
    group.add_argument(
        "--batch",
        default=None,
        metavar="N",
        help="override the batch (the size of the workload's batch dim)",
    )
    group.add_argument(
        "--seq-len",
        default=None,
        metavar="N",
        help="override a template's sequence length (decode: the cached context)",
    )
    group.add_argument(
        "--sheet",
        default=None,
        metavar="NAME",
        help="worksheet of an .xlsx workload (default: the first)",
    )
    _add_precision_args(group, dtype=dtype)


def _add_precision_args(group: argparse._ArgumentGroup, *, dtype: bool) -> None:
    """--dtype (unless the chip arguments bring it), --weight-dtype, --kv-dtype and
    --attention-dtype:
    docs/whole-model.md, "Precision per tensor class"."""
    if dtype:
        group.add_argument(
            "--dtype",
            default=None,
            metavar="D",
            help="the compute and activations' dtype, over the file's (fp8 training as "
            "Transformer Engine runs it: fp8 matmuls, bf16 activations and weights)",
        )
    group.add_argument(
        "--weight-dtype",
        default=None,
        metavar="D",
        help="store the weights in D (e.g. int4, fp8) while --dtype sets the activations and the "
        "compute (default: the workload's; 8-bit training keeps bf16 weights)",
    )
    group.add_argument(
        "--kv-dtype",
        default=None,
        metavar="D",
        help="store the KV cache in D (e.g. fp8; default: the workload's)",
    )
    group.add_argument(
        "--attention-dtype",
        default=None,
        metavar="D",
        help="run the fused attention kernel in D (default: the workload's; 8-bit training runs "
        "it in bf16, as Transformer Engine does unless fp8 attention is turned on)",
    )
