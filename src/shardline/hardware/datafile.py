"""Reading a user's data file (a chip or system TOML): a regular file of a sane size, UTF-8 TOML,
or one clear InputError. A FIFO or /dev/zero would otherwise be read forever, and a deeply nested
file would overflow the parser's recursion."""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path

from shardline.errors import InputError

__all__ = ["read_data_toml", "MAX_DATA_FILE_BYTES", "SourcedReader"]

MAX_DATA_FILE_BYTES = 16 * 2**20  # a chip file is a few kB; 16 MiB leaves room and stops a bomb
MAX_FILE_INT = 10**300  # an integer field past this is refused (a float holds at most ~1.8e308)


def _regular(path: Path, what: str) -> int:
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise InputError(f"{what} {str(path)!r} does not exist") from None
    except OSError as exc:
        raise InputError(f"cannot read {what} {str(path)!r}: {exc.strerror}") from None
    if not stat.S_ISREG(info.st_mode):
        raise InputError(f"{what} {str(path)!r} is not a regular file")
    if info.st_size > MAX_DATA_FILE_BYTES:
        raise InputError(
            f"{what} {str(path)!r} is too large ({info.st_size:,} bytes; at most "
            f"{MAX_DATA_FILE_BYTES:,})"
        )
    return info.st_size


def read_data_toml(path: Path, what: str) -> dict[str, object]:
    """The parsed TOML of `path` ("chip file", "system file"), or InputError saying why not."""
    _regular(path, what)
    try:
        with path.open("rb") as handle:
            raw = handle.read(MAX_DATA_FILE_BYTES + 1)
    except OSError as exc:
        raise InputError(f"cannot read {what} {str(path)!r}: {exc.strerror}") from None
    if len(raw) > MAX_DATA_FILE_BYTES:
        raise InputError(f"{what} {str(path)!r} is too large (over {MAX_DATA_FILE_BYTES:,} bytes)")
    try:
        return tomllib.loads(raw.decode("utf-8"))
    except UnicodeDecodeError:
        raise InputError(f"{what} {str(path)!r} is not valid TOML: not UTF-8 text") from None
    except tomllib.TOMLDecodeError as exc:
        raise InputError(f"{what} {str(path)!r} is not valid TOML: {exc}") from None
    except RecursionError:
        raise InputError(f"{what} {str(path)!r} is nested too deeply") from None
    except ValueError as exc:  # an integer of more than 4,300 digits
        raise InputError(f"{what} {str(path)!r}: {str(exc).split(';')[0]}") from None


class SourcedReader:
    """Reads fields out of a parsed data file whose numbers are `{value, source}` (or bare, from
    a user's own file), recording each one's source and naming a bad field in its error. The
    chip and model loaders add their typed readers on top."""

    value_word = "value"  # what the error calls a field's plain form ("number" for chips)

    def __init__(self, data: dict[str, object], origin: str) -> None:
        self.data = data
        self.origin = origin
        self.sources: dict[str, str] = {}

    def fail(self, path: str, why: str) -> InputError:
        return InputError(f"{self.origin}: field '{path}' {why}")

    def raw(self, path: str) -> object:
        """The field at a dotted path as the file has it, or None."""
        node: object = self.data
        for part in path.split("."):
            if not isinstance(node, dict) or part not in node:
                return None
            node = node[part]
        return node

    def sourced(self, path: str) -> object:
        """The value of a field (None when absent), unwrapping `{value, source}` and recording
        the source."""
        raw = self.raw(path)
        if raw is None:
            return None
        source = "user file"
        if isinstance(raw, dict):
            if "value" not in raw or set(raw) - {"value", "source", "note"}:
                kind = self.value_word
                raise self.fail(
                    path, f'must be a {kind} or a table {{value = ..., source = "..."}}'
                )
            source = str(raw.get("source", source))
            raw = raw["value"]
        if isinstance(raw, int) and not isinstance(raw, bool) and abs(raw) > MAX_FILE_INT:
            # TOML integers are unbounded: past a float's range a later range check would fail
            # with OverflowError (int too large to convert to float)
            raise self.fail(path, f"is too large a number ({len(str(abs(raw))):,} digits)")
        self.sources[path] = source
        return raw
