"""The one exception type the edges turn into `error: ...` and exit status 2."""

from __future__ import annotations

__all__ = ["InputError"]


class InputError(ValueError):
    """Bad user input: a dimension, a chip, a spec, a file. The message is shown as is."""
