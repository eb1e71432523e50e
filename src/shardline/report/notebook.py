"""Notebook views of the core's results: `_repr_html_` (Jupyter's table) and `to_pandas()`.

The core result classes carry no rendering; `install()` (called once by the package facade,
`shardline/__init__.py`) adds these two methods to `RooflineResult` and `SheetResult`.
"""

from __future__ import annotations

from typing import Any

from shardline.io.sheet_results import sheet_records
from shardline.report.frames import records_to_dataframe, to_dataframe
from shardline.report.html_table import records_table_html, result_table_html
from shardline.roofline import RooflineResult
from shardline.sheet_model import SheetResult

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


def install() -> None:
    """Give the core result classes their notebook methods (idempotent)."""
    for cls, html, pandas in (
        (RooflineResult, _roofline_html, _roofline_pandas),
        (SheetResult, _sheet_html, _sheet_pandas),
    ):
        setattr(cls, "_repr_html_", html)  # noqa: B010 (the classes do not declare them)
        setattr(cls, "to_pandas", pandas)  # noqa: B010
