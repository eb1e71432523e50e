"""Notebook views of the core's results: HTML tables for Jupyter and pandas DataFrames.

The core result classes carry no rendering, and importing shardline changes no class. The views
are functions of a result: `to_html(result)` (the table Jupyter shows, every value escaped) and
`to_pandas(result)` (a DataFrame; needs pandas), for `RooflineResult` (one row per multiply),
`SheetResult` (one row per sheet row), `StackResult` (one row per layer) and `PlanSet` (one row per
plan). In Jupyter, `%load_ext shardline` registers `to_html` as the HTML formatter of those classes
(`load_ipython_extension`), so that a result shown in a cell renders as its table.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from typing import Any

from shardline.answers.sheet_model import SheetResult
from shardline.basics.units import fmt_bytes, fmt_time
from shardline.basics.values import JSONDict
from shardline.io.sheet_results import sheet_records
from shardline.ops.roofline import RooflineResult
from shardline.planning.results import PlanSet
from shardline.report.frames import records_to_dataframe, to_dataframe
from shardline.report.html_table import records_table_html, result_table_html
from shardline.workload.stack import StackResult

__all__ = [
    "to_html",
    "to_pandas",
    "load_ipython_extension",
    "VIEWS",
    "stack_records",
    "plan_records",
]


def _roofline_html(result: RooflineResult) -> str:
    """The result as an HTML table in Jupyter (every value escaped)."""
    return result_table_html(result.to_dict())


def _roofline_pandas(result: RooflineResult) -> object:
    """The result as a pandas DataFrame, one row per multiply (needs pandas)."""
    return to_dataframe(result.to_dict())


def _sheet_html(result: SheetResult) -> str:
    """The rows as an HTML table in Jupyter (every value escaped)."""
    return records_table_html(sheet_records(result))


def _sheet_pandas(result: SheetResult) -> object:
    """The rows as a pandas DataFrame: every input column, then the results (needs pandas)."""
    return records_to_dataframe(sheet_records(result))


_LAYER_KEYS: tuple[str, ...] = ("name", "phase", "spec", "count", "flops", "bytes")
_LAYER_KEYS += ("intensity_flop_per_byte", "bound", "t_compute_s", "t_memory_s", "t_lower_s")
_LAYER_KEYS += ("t_upper_s", "predicted_s", "weight_bytes", "working_set_bytes")


def stack_records(result: StackResult) -> list[JSONDict]:
    """One record per layer of a stack: the JSON `layers` (FLOPs, bytes and times per instance;
    `count` instances in the stack), without the `dims` table."""
    return [{k: row.to_dict()[k] for k in _LAYER_KEYS} for row in result.layers]


def _stack_html(result: StackResult) -> str:
    """The layers as an HTML table, then the totals and the memory check (every value escaped)."""
    t, mem = result.totals, result.memory
    verdict = "fits" if mem.fits else "does not fit"
    note = (
        f"total over {t.layer_instances:,} layer instances: lower bound {fmt_time(t.t_lower_s)}, "
        f"predicted {fmt_time(t.predicted_s)}; memory {fmt_bytes(mem.total_bytes)} of "
        f"{fmt_bytes(mem.capacity_bytes)} on {result.chip.name}: {verdict}"
    )
    return records_table_html(stack_records(result)) + f"<p>{html.escape(note)}</p>"


def _stack_pandas(result: StackResult) -> object:
    """The layers as a pandas DataFrame, one row per layer (needs pandas)."""
    return records_to_dataframe(stack_records(result))


_PLAN_KEYS: tuple[str, ...] = ("microbatches", "predicted_s", "latency_s", "latency_upper_s", "mfu")
_PLAN_KEYS += ("throughput_per_s", "throughput_bound_per_s", "tokens_per_s")
_PLAN_KEYS += ("memory_per_device_bytes", "fits")
_PLAN_KEYS += ("comm_bytes", "bottleneck")


def plan_records(result: PlanSet) -> list[JSONDict]:
    """One record per plan, best first: its name, its degrees (`tp`, `pp`, `dp`, `fsdp`, ...) and
    the JSON keys of its times, memory and bottleneck."""
    records = []
    for p in result.plans:
        d = p.to_dict()
        records.append({"name": p.name, **p.degrees, **{k: d[k] for k in _PLAN_KEYS}})
    return records


def _plan_html(result: PlanSet) -> str:
    """The plans as an HTML table, then the recommendation and its reason (escaped)."""
    note = f"recommended: {result.recommended or 'none'}. {result.reason}"
    return records_table_html(plan_records(result)) + f"<p>{html.escape(note)}</p>"


def _plan_pandas(result: PlanSet) -> object:
    """The plans as a pandas DataFrame, one row per plan, best first (needs pandas)."""
    return records_to_dataframe(plan_records(result))


# The views of each result class: (HTML table, pandas DataFrame).
VIEWS: dict[type, tuple[Callable[[Any], str], Callable[[Any], Any]]] = {
    RooflineResult: (_roofline_html, _roofline_pandas),
    SheetResult: (_sheet_html, _sheet_pandas),
    StackResult: (_stack_html, _stack_pandas),
    PlanSet: (_plan_html, _plan_pandas),
}


def _views(result: object) -> tuple[Callable[[object], str], Callable[[object], object]]:
    for cls in type(result).__mro__:
        if cls in VIEWS:
            return VIEWS[cls]
    shown = ", ".join(cls.__name__ for cls in VIEWS)
    raise TypeError(f"no notebook view of a {type(result).__name__} (views: {shown})")


def to_html(result: object) -> str:
    """`result` as the HTML table a notebook shows (every value escaped)."""
    return _views(result)[0](result)


def to_pandas(result: object) -> object:
    """`result` as a pandas DataFrame (needs pandas; an InputError names the install otherwise)."""
    return _views(result)[1](result)


def load_ipython_extension(ipython: Any) -> None:
    """`%load_ext shardline` (or `%load_ext shardline.report.notebook`): IPython shows the results
    of `VIEWS` as their HTML tables (the formatter of a type, IPython's `for_type`)."""
    formatter = ipython.display_formatter.formatters["text/html"]
    for cls in VIEWS:
        formatter.for_type(cls, to_html)
