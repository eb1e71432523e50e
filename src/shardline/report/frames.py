"""Results as flat records and pandas DataFrames (pandas imported only when asked for).

`report.notebook.to_pandas(result)` of a RooflineResult is `to_dataframe(result.to_dict())`: one
row per multiply (a vectorized result gives one row per element), one column per quantity, SI
units in the names.
"""

from __future__ import annotations

from typing import Any

from shardline.errors import InputError

__all__ = ["to_records", "to_dataframe", "records_to_dataframe"]

_SCALAR_KEYS = (
    "flops",
    "intensity_flop_per_byte",
    "ridge_flop_per_byte",
    "bound",
    "t_compute_s",
    "t_memory_s",
    "t_lower_s",
    "t_upper_s",
    "predicted_s",
    "predicted_bound",
    "critical_m",
)


def _length(value: object) -> int | None:
    return len(value) if isinstance(value, list) else None


def to_records(result: dict[str, Any]) -> list[dict[str, object]]:
    """Flat records from a result's JSON dict: dims, dtypes, per-operand bytes (`bytes_<operand>`),
    counts, times. Lists (a vectorized result) become one record per element."""
    columns: dict[str, object] = {"spec": result.get("spec")}
    for name, value in (result.get("dims") or {}).items():
        columns[name] = value
    for name, value in (result.get("dtypes") or {}).items():
        columns[f"dtype_{name}"] = value
    for name, value in (result.get("bytes") or {}).items():
        columns[f"bytes_{name}"] = value
    for key in _SCALAR_KEYS:
        if key in result:
            columns[key] = result[key]
    hardware = result.get("hardware") or {}
    if isinstance(hardware, dict):
        columns["hardware"] = hardware.get("name")
        columns["flops_per_s"] = hardware.get("flops_per_s")
        columns["mem_bytes_per_s"] = hardware.get("mem_bytes_per_s")
    lengths = {n for n in (_length(v) for v in columns.values()) if n is not None}
    if len(lengths) > 1:
        raise InputError(
            f"cannot tabulate a result whose arrays differ in length: {sorted(lengths)}"
        )
    size = lengths.pop() if lengths else None
    if size is None:
        return [columns]
    return [
        {k: (v[i] if isinstance(v, list) else v) for k, v in columns.items()} for i in range(size)
    ]


def to_dataframe(result: dict[str, object]) -> object:
    """A pandas DataFrame of `to_records(result)`; a clear error when pandas is not installed."""
    return records_to_dataframe(to_records(result))


def records_to_dataframe(records: list[dict[str, object]]) -> object:
    """A pandas DataFrame of flat records; a clear error when pandas is not installed."""
    try:
        import pandas as pd
    except ImportError:
        raise InputError(
            "to_pandas() needs pandas, which is not installed: pip install pandas"
        ) from None
    return pd.DataFrame.from_records(records)
