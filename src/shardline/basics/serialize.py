"""Turn results (dataclasses, numpy values) into JSON-ready Python values. Pure: no I/O."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import cast, overload

import numpy as np

from shardline.basics.values import JSONDict, JSONValue

__all__ = ["jsonable", "json_object"]


@overload
def jsonable(value: Mapping[str, object]) -> JSONDict: ...


@overload
def jsonable(value: object) -> JSONValue: ...


def jsonable(value: object) -> JSONValue:
    """The JSON-ready copy of a value: arrays as lists, numpy scalars as Python ones, NaN as
    null, dict keys as strings, tuples as lists, dataclasses as objects of their fields."""
    if isinstance(value, np.ndarray):
        return [jsonable(v) for v in value.tolist()]
    if isinstance(value, np.generic):
        return jsonable(value.item())
    if isinstance(value, float):
        return None if math.isnan(value) else value
    if isinstance(value, dict):
        return {str(k): jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [jsonable(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    return cast(JSONValue, value)  # str, int, bool, None: already JSON


def json_object(value: object) -> JSONDict:
    """`jsonable` of a record that serialises to one JSON object (a dataclass, a mapping)."""
    out = jsonable(value)
    assert isinstance(out, dict), type(value)
    return out
