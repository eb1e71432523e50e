"""Input files read safely: only regular files (never a FIFO, a device such as /dev/zero, a socket
or a directory, which could block or read forever), within a size limit, and every OS error (a
missing file, permission denied, a name too long) turned into one clear `InputError`.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from shardline.errors import InputError

__all__ = [
    "MAX_INPUT_BYTES",
    "regular_file_size",
    "read_input_bytes",
    "read_input_head",
    "os_reason",
]

# The largest input file read: 2 GB (a 1-million-row sheet of shapes is about 30 MB).
MAX_INPUT_BYTES = 2_000_000_000

_KINDS = (
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISFIFO, "a FIFO (named pipe)"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISSOCK, "a socket"),
)


def os_reason(exc: OSError) -> str:
    """An OSError in words ('Permission denied', 'File name too long'), without the path."""
    return exc.strerror or type(exc).__name__


def regular_file_size(path: str | Path, what: str = "input file") -> int:
    """The size of `path` in bytes, after checking that it is a regular file (stat, which never
    blocks, not open, which would wait on a FIFO)."""
    p = Path(path)
    try:
        info = os.stat(p)
    except FileNotFoundError:
        raise InputError(f"{p}: no such {what}") from None
    except (OSError, ValueError) as exc:  # ValueError: a NUL byte in the name
        reason = os_reason(exc) if isinstance(exc, OSError) else "invalid file name"
        raise InputError(f"cannot read {what} {p}: {reason}") from None
    if not stat.S_ISREG(info.st_mode):
        kind = next((name for test, name in _KINDS if test(info.st_mode)), "not a regular file")
        raise InputError(f"{p} is {kind}, not a regular {what}")
    return info.st_size


def read_input_bytes(
    path: str | Path, what: str = "input file", max_bytes: int = MAX_INPUT_BYTES
) -> bytes:
    """The bytes of a regular file of at most `max_bytes`; InputError for anything else."""
    p = Path(path)
    size = regular_file_size(p, what)
    if size > max_bytes:
        raise InputError(
            f"{p} is too large ({size:,} bytes; the limit for a {what} is {max_bytes:,})"
        )
    try:
        with open(p, "rb") as handle:
            data = handle.read(max_bytes + 1)
    except OSError as exc:
        raise InputError(f"cannot read {what} {p}: {os_reason(exc)}") from None
    if len(data) > max_bytes:  # it grew while being read
        raise InputError(f"{p} is too large (over {max_bytes:,} bytes)")
    return data


def read_input_head(path: str | Path, n_bytes: int, what: str = "input file") -> bytes:
    """The first `n_bytes` of a regular file (to tell its format)."""
    p = Path(path)
    regular_file_size(p, what)
    try:
        with open(p, "rb") as handle:
            return handle.read(n_bytes)
    except OSError as exc:
        raise InputError(f"cannot read {what} {p}: {os_reason(exc)}") from None
