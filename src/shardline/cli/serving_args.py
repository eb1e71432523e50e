"""The serving workload's flags (`serve` and the serving search) and the figure outputs that
`serve` and `search` write (--plot, --html)."""

from __future__ import annotations

import argparse
from typing import Any

from shardline.cli.args import add_force_arg, reject_empty

__all__ = [
    "add_serving_args",
    "add_figure_output_args",
    "add_serving_dtype_args",
    "launch_line",
]


def add_serving_args(parser: argparse.ArgumentParser, *, layout: bool = True) -> None:
    """A serving workload and its SLO (`serve`, and the serving search): --model, --rate, --in,
    --out, --slo, --engine, the dtypes, --emit, --usd-per-hour; with `layout`, the layout's."""
    reject_empty(parser)
    g = parser.add_argument_group("serving")
    g.add_argument(
        "--model", required=True, metavar="NAME", help="a zoo model (`shardline model list`)"
    )
    g.add_argument(
        "--rate",
        required=not layout,
        default=None,
        metavar="R",
        help="requests per second, e.g. 20 or 20/s (Poisson arrivals)",
    )
    g.add_argument(
        "--in",
        dest="input_tokens",
        required=True,
        metavar="I",
        help="input tokens per request: N, exp:MEAN or uniform:LOW-HIGH",
    )
    g.add_argument(
        "--out",
        dest="output_tokens",
        required=True,
        metavar="O",
        help="output tokens per request: N, exp:MEAN or uniform:LOW-HIGH",
    )
    g.add_argument(
        "--slo",
        default=None,
        metavar="SPEC",
        help="e.g. ttft=500ms,tpot=30ms (met at p99; p=90 or p=50 to change)",
    )
    g.add_argument(
        "--engine",
        default=None,
        metavar="NAME",
        help="serving engine (NAME or NAME@VERSION) whose sourced figures apply: trtllm (the "
        "default), vllm, sglang, tgi, lmdeploy (serving/engines.toml)",
    )
    add_serving_dtype_args(g)
    g.add_argument(
        "--usd-per-hour",
        default=None,
        metavar="X",
        help="price of one device per hour (default: the costing table)",
    )
    if layout:
        _add_layout_args(g)


def _add_layout_args(g: argparse._ArgumentGroup) -> None:
    """`serve`'s load and layout: --concurrency, --devices, --tp, --pp, --ep, --attention-dp
    and --max-batch."""
    g.add_argument(
        "--concurrency",
        default=None,
        metavar="N",
        help="a closed loop of N requests in flight (instead of --rate), as fixed-concurrency "
        "benchmarks run",
    )
    g.add_argument("--devices", required=True, metavar="D", help="devices serving in all")
    g.add_argument(
        "--tp", default="1", metavar="N", help="devices of a replica (its tensor-parallel size)"
    )
    g.add_argument(
        "--pp",
        default="1",
        metavar="N",
        help="pipeline stages of a replica (a replica is --tp x --pp devices; N divides the "
        "model's blocks)",
    )
    g.add_argument(
        "--ep",
        default="1",
        metavar="N",
        help="expert-parallel ranks of a replica (MoE; divides --tp)",
    )
    g.add_argument(
        "--attention-dp",
        default="1",
        metavar="N",
        help="attention data-parallel ranks of a replica (MoE, DP attention; divides --tp)",
    )
    g.add_argument(
        "--max-batch",
        default="256",
        metavar="B",
        help="sequences per engine step (default 256)",
    )


def add_serving_dtype_args(g: argparse._ArgumentGroup, frameworks: tuple[str, ...] = ()) -> None:
    """--weight-dtype and --kv-dtype of `serve` and the serving search (--dtype comes with the
    chip arguments of serve, the search's own), and --emit: an engine, or one of `frameworks`
    (the training formats search's --emit also takes: shardline.cli.framework_io)."""
    g.add_argument(
        "--weight-dtype",
        default=None,
        metavar="D",
        help="store the weights in D (fp8, fp4, mxfp4, int4; fp4 on a chip without fp4 compute "
        "is dequantized to compute in bf16; default: --dtype)",
    )
    g.add_argument(
        "--kv-dtype",
        default=None,
        metavar="D",
        help="store the KV cache in D (default: --dtype, fp8 for a 4-bit --dtype)",
    )
    g.add_argument(
        "--emit",
        default=None,
        choices=("vllm", "sglang", "trtllm") + frameworks,
        help="print the engine's launch command for the configuration priced (search: its best)"
        + (
            f"; the training search: {', '.join(frameworks)}, its best layout's launch "
            "configuration (docs/framework-configs.md)"
            if frameworks
            else ""
        ),
    )


def add_figure_output_args(parser: argparse.ArgumentParser) -> None:
    """`--plot FILE.svg|png`, `--html FILE.html` and `--force` of `serve` and `search`."""
    g = parser.add_argument_group("figures")
    g.add_argument(
        "--plot",
        default=None,
        metavar="FILE",
        help="write the figures to a .png or .svg file (needs matplotlib)",
    )
    g.add_argument(
        "--html",
        default=None,
        metavar="FILE.html",
        help="write an offline HTML page of the figures and the numbers",
    )
    add_force_arg(parser, "--plot/--html files that exist")


def launch_line(name: str, model: str, hw: str, cfg: Any, options: Any) -> str:
    """The engine's launch command for `cfg` as `serve` priced it (serving/launch.py)."""
    from shardline.hardware import resolve_chip
    from shardline.models import load_model
    from shardline.serving.launch import launch_command, model_repo
    from shardline.serving.serve import serving_step_times
    from shardline.serving.steptimes import serving_dtypes

    dtypes = serving_dtypes(resolve_chip(hw), options.dtype, options.weight_dtype, options.kv_dtype)
    st = serving_step_times(model, hw, cfg, options)
    return launch_command(name, model_repo(load_model(model)), cfg, dtypes, st.kv_fraction)
