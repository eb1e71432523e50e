"""Notebook views of the core's results: `_repr_html_` (Jupyter's table) and `to_pandas()`.

The core result classes carry no rendering; `install()` (called once by the package facade,
`shardline/__init__.py`) adds these two methods to `RooflineResult`, `SheetResult`, `StackResult`
(one row per layer) and `PlanSet` (one row per plan).
"""

from __future__ import annotations

import html
from typing import Any

from shardline.io.sheet_results import sheet_records
from shardline.planning.results import PlanSet
from shardline.report.frames import records_to_dataframe, to_dataframe
from shardline.report.html_table import records_table_html, result_table_html
from shardline.roofline import RooflineResult
from shardline.sheet_model import SheetResult
from shardline.stack import StackResult
from shardline.units import fmt_bytes, fmt_time

__all__ = ["install"]


def _roofline_html(self: RooflineResult) -> str:
    """The result as an HTML table in Jupyter (every value escaped)."""
    return result_table_html(self.to_dict())


def _roofline_pandas(self: RooflineResult) -> Any:
    """The result as a pandas DataFrame, one row per multiply (needs pandas)."""
    return to_dataframe(self.to_dict())


def _sheet_html(self: SheetResult) -> str:
    """The rows as an HTML table in Jupyter (every value escaped)."""
    return records_table_html(sheet_records(self))


def _sheet_pandas(self: SheetResult) -> Any:
    """The rows as a pandas DataFrame: every input column, then the results (needs pandas)."""
    return records_to_dataframe(sheet_records(self))


_LAYER_KEYS: tuple[str, ...] = ("name", "phase", "spec", "count", "flops", "bytes")
_LAYER_KEYS += ("intensity_flop_per_byte", "bound", "t_compute_s", "t_memory_s", "t_lower_s")
_LAYER_KEYS += ("t_upper_s", "predicted_s", "weight_bytes", "working_set_bytes")


def stack_records(result: StackResult) -> list[dict[str, Any]]:
    """One record per layer of a stack: the JSON `layers` (FLOPs, bytes and times per instance;
    `count` instances in the stack), without the `dims` table."""
    return [{k: row.to_dict()[k] for k in _LAYER_KEYS} for row in result.layers]


def _stack_html(self: StackResult) -> str:
    """The layers as an HTML table, then the totals and the memory check (every value escaped)."""
    t, mem = self.totals, self.memory
    verdict = "fits" if mem.fits else "does not fit"
    note = (
        f"total over {t.layer_instances:,} layer instances: lower bound {fmt_time(t.t_lower_s)}, "
        f"predicted {fmt_time(t.predicted_s)}; memory {fmt_bytes(mem.total_bytes)} of "
        f"{fmt_bytes(mem.capacity_bytes)} on {self.chip.name}: {verdict}"
    )
    return records_table_html(stack_records(self)) + f"<p>{html.escape(note)}</p>"


def _stack_pandas(self: StackResult) -> Any:
    """The layers as a pandas DataFrame, one row per layer (needs pandas)."""
    return records_to_dataframe(stack_records(self))


_PLAN_KEYS: tuple[str, ...] = ("microbatches", "predicted_s", "latency_s", "latency_upper_s", "mfu")
_PLAN_KEYS += ("throughput_per_s", "tokens_per_s", "memory_per_device_bytes", "fits")
_PLAN_KEYS += ("comm_bytes", "bottleneck")


def plan_records(result: PlanSet) -> list[dict[str, Any]]:
    """One record per plan, best first: its name, its degrees (`tp`, `pp`, `dp`, `fsdp`, ...) and
    the JSON keys of its times, memory and bottleneck."""
    records = []
    for p in result.plans:
        d = p.to_dict()
        records.append({"name": p.name, **p.degrees, **{k: d[k] for k in _PLAN_KEYS}})
    return records


def _plan_html(self: PlanSet) -> str:
    """The plans as an HTML table, then the recommendation and its reason (escaped)."""
    note = f"recommended: {self.recommended or 'none'}. {self.reason}"
    return records_table_html(plan_records(self)) + f"<p>{html.escape(note)}</p>"


def _plan_pandas(self: PlanSet) -> Any:
    """The plans as a pandas DataFrame, one row per plan, best first (needs pandas)."""
    return records_to_dataframe(plan_records(self))


def install() -> None:
    """Give the core result classes their notebook methods (idempotent)."""
    for cls, to_html, to_pandas in (
        (RooflineResult, _roofline_html, _roofline_pandas),
        (SheetResult, _sheet_html, _sheet_pandas),
        (StackResult, _stack_html, _stack_pandas),
        (PlanSet, _plan_html, _plan_pandas),
    ):
        setattr(cls, "_repr_html_", to_html)  # noqa: B010 (the classes do not declare them)
        setattr(cls, "to_pandas", to_pandas)  # noqa: B010
