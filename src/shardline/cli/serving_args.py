"""The serving workload's flags (`serve` and the serving search) and the figure outputs that
`serve` and `search` write (--plot, --html)."""

from __future__ import annotations

import argparse

from shardline.cli.args import add_force_arg, reject_empty

__all__ = ["add_serving_args", "add_figure_output_args"]


def add_serving_args(parser: argparse.ArgumentParser, *, layout: bool = True) -> None:
    """A serving workload and its SLO (`serve`, and the serving search): --model, --rate, --in,
    --out, --slo, --engine, --usd-per-hour; with `layout`, --devices, --tp and --max-batch."""
    reject_empty(parser)
    g = parser.add_argument_group("serving")
    g.add_argument(
        "--model", required=True, metavar="NAME", help="a zoo model (`shardline model list`)"
    )
    g.add_argument(
        "--rate", required=True, metavar="R", help="requests per second, e.g. 20 or 20/s"
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
        default="trtllm",
        metavar="NAME",
        help="serving engine whose sourced efficiency applies: trtllm (the default), vllm, "
        "sglang or any other engine in serving/engines.toml",
    )
    g.add_argument(
        "--usd-per-hour",
        default=None,
        metavar="X",
        help="price of one device per hour (default: the costing table)",
    )
    if layout:
        g.add_argument("--devices", required=True, metavar="D", help="devices serving in all")
        g.add_argument("--tp", default="1", metavar="N", help="tensor-parallel degree of a replica")
        g.add_argument(
            "--max-batch",
            default="256",
            metavar="B",
            help="sequences per engine step (default 256)",
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
