"""The value types shared by every layer: a number-or-array and a JSON-ready value. Pure: no I/O.

`Scalar` is what the cost arithmetic carries: one Python number for one layout, or a numpy array of
them that broadcasts when many layouts are priced at once (the vectorised search). `JSONValue` is
what `shardline.basics.serialize.jsonable` returns and what every `--json` output is made of;
`JSONDict` is one JSON object (a result record's `to_json`). A parsed input file (TOML, YAML,
JSON) is a `dict[str, object]` until its reader checks each value's type.
"""

from __future__ import annotations

from typing import TypeAlias

import numpy as np
from numpy.typing import NDArray

__all__ = ["Scalar", "Words", "JSONValue", "JSONDict", "as_number"]

# One number (a Python int or float; mypy reads int as a float) or a float array that broadcasts.
Scalar: TypeAlias = float | NDArray[np.float64]

# One word (a dtype's name, a bound) or a numpy array of them, one per layout priced at once.
Words: TypeAlias = str | np.ndarray

# One JSON object: keys are strings, values are JSON values (below).
JSONDict: TypeAlias = dict[str, object]
# A JSON value: null, a boolean, a number, a string, a list or an object (of JSON values).
JSONValue: TypeAlias = None | bool | int | float | str | list[object] | JSONDict


def as_number(value: Scalar) -> float:
    """A `Scalar` that holds one layout's number: that number, unconverted (an int stays an int,
    so JSON output is unchanged); a one-element array gives its element as a float."""
    if isinstance(value, np.ndarray):
        return float(value)
    return value
