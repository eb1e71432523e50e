"""SI constants, parsing of quantities with units, and human formatting.

The only module that knows 1e9 and 2**30. Inside shardline every quantity is in SI units
(seconds, bytes, FLOP, FLOP/s, bytes/s); conversion happens here, at the boundary.
"""

from __future__ import annotations

import math
import re

import numpy as np

from shardline.basics.values import Scalar
from shardline.errors import InputError

__all__ = [
    "KB",
    "MB",
    "GB",
    "TB",
    "KiB",
    "MiB",
    "GiB",
    "TiB",
    "parse_quantity",
    "parse_count",
    "fmt_bytes",
    "fmt_capacity",
    "fmt_flops",
    "fmt_time",
    "fmt_usd",
    "fmt_short",
    "fmt_rate",
    "fmt_num",
    "fmt_int",
    "fmt_intensity",
    "MIN_RATE",
    "MAX_RATE",
    "MAX_TIME_S",
    "MIN_BYTES",
    "MAX_BYTES",
    "MIN_FRACTION",
    "MAX_COUNT",
    "check_rate",
    "check_time",
    "check_in_range",
    "check_whole",
    "check_real",
    "short",
]

KB, MB, GB, TB, PB = 1e3, 1e6, 1e9, 1e12, 1e15
KiB, MiB, GiB, TiB = 2**10, 2**20, 2**30, 2**40

_PREFIX = {"": 1.0, "k": 1e3, "K": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
_BINARY = {"Ki": KiB, "Mi": MiB, "Gi": GiB, "Ti": TiB}
_TIME = {"s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}
_QUANTITY = re.compile(r"^\s*([-+]?[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*([A-Za-zµ/]*)\s*$")


# The ranges a model input may take, one per kind of quantity; every rate flag (--flops-per-s,
# --mem-bw, --link-bw, --nic-bw), --latency and every number of a chip or system file is checked
# against its kind's range (`check_rate`, `check_time`, `check_in_range`), so that a tiny,
# subnormal or huge value is one error, never an inf, a division by zero or an empty search.
#
# Rates (FLOP/s, B/s, Hz): 1 to 1e30 per second. 1 is far below any machine (a person with pencil
# and paper does about 1 FLOP/s) and high enough that a time (a count over a rate) cannot overflow
# a float where the count itself does not; 1e30 is a billion times the fastest chip in the catalog
# (about 1e16 FLOP/s), and keeps a product of a rate and a time far from overflow.
MIN_RATE = 1.0
MAX_RATE = 1e30
# Times (a latency, an overhead, a kernel floor): 0 (where a field may be 0, as --latency) up to
# 1e6 s (11.6 days per hop or per call); a tiny positive time is a time of about 0 and is accepted.
MAX_TIME_S = 1e6
# Sizes in bytes (a memory capacity, a cache, a message size in a chip file): 1 B to 1e30 B.
MIN_BYTES = 1.0
MAX_BYTES = 1e30
# Fractions (an efficiency, a sustained share of a peak): 1e-3 (0.1%) to 1.
MIN_FRACTION = 1e-3
# Counts in a chip or system file (cores, links, devices, NICs): 1 to 1e9.
MAX_COUNT = 10**9


def short(value: object, limit: int = 40) -> str:
    """repr(value), cut to `limit` characters with its length said: errors never echo 5,000
    digits back."""
    text = repr(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def check_rate(value: object, what: str, unit: str) -> float:
    """A rate given to the model: a real, finite number from MIN_RATE to MAX_RATE `unit`s (an
    array: each element)."""
    if isinstance(value, np.ndarray):
        if value.dtype.kind not in "iuf" or not np.all(
            np.isfinite(value) & (value >= MIN_RATE) & (value <= MAX_RATE)
        ):
            raise InputError(
                f"{what} must hold finite rates of at least {MIN_RATE:g} {unit} and at most "
                f"{MAX_RATE:g} {unit}"
            )
        return value  # type: ignore[return-value]
    rate = _real(value, what, unit)
    if not math.isfinite(rate) or not MIN_RATE <= rate <= MAX_RATE:
        raise InputError(
            f"{what} must be a finite rate of at least {MIN_RATE:g} {unit} and at most "
            f"{MAX_RATE:g} {unit}, got {short(value)}"
        )
    return rate


def _real(value: object, what: str, unit: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InputError(f"{what} must be a number in {unit}, got {short(value)}")
    try:
        return float(value)
    except OverflowError:
        raise InputError(f"{what} = {short(value)} is too large for a float") from None


def check_time(value: object, what: str) -> float:
    """A time given to the model (a latency, an overhead): finite, from 0 to MAX_TIME_S seconds."""
    seconds = _real(value, what, "s")
    if not math.isfinite(seconds) or not 0 <= seconds <= MAX_TIME_S:
        raise InputError(
            f"{what} must be a finite time from 0 to {MAX_TIME_S:g} s, got {short(value)}"
        )
    return seconds


def check_in_range(value: float, what: str, low: float, high: float, unit: str = "") -> float:
    """`value` (already a finite number) within [low, high], or InputError naming the range."""
    if not low <= value <= high:
        unit = f" {unit}" if unit else ""
        raise InputError(f"{what} must be from {low:g}{unit} to {high:g}{unit}, got {value!r}")
    return value


def _whole_text(n: int) -> str:
    """A whole number as an error shows it: with commas below 1e15, else short (1e+99), and past
    a float's range by its size (Python will not print an int of over 4,300 digits)."""
    if n < 10**15:
        return f"{n:,}"
    if n.bit_length() <= 1000:
        return f"{float(n):.3g}"
    return f"a number of about {int(n.bit_length() * math.log10(2)) + 1:,} digits"


def check_whole(value: object, what: str, *, least: int = 1, most: float | None = None) -> int:
    """A whole number given to the API or read from a flag: an int (not a bool) of at least
    `least` (1: "a positive integer"; 0: "a whole number >= 0") and at most `most`."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < least:
        kind = "a positive integer" if least == 1 else f"a whole number >= {least}"
        raise InputError(f"{what} must be {kind}, got {short(value)}")
    if most is not None and value > most:
        raise InputError(f"{what} must be at most {most:,.0f}, got {_whole_text(int(value))}")
    return int(value)


def check_real(value: object, what: str) -> float:
    """A real, finite number (not a bool, a string or None): the float."""
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise InputError(f"{what}: {short(value)} is not a number")
    try:
        number = float(value)
    except OverflowError:
        raise InputError(f"{what}: {short(value)} must be finite") from None
    if not math.isfinite(number):
        raise InputError(f"{what}: {short(value)} must be finite")
    return number


def parse_quantity(text: str, unit: str) -> float:
    """Parse "3.35 TB/s", "3.35e12", "989 TFLOP/s", "1 us", "16 GiB" into SI units.

    `unit` is the base unit expected ("B/s", "FLOP/s", "B", "s"); a bare number is taken as SI.
    """
    match = _QUANTITY.match(text)
    if not match:
        raise InputError(f"cannot read {short(text)} as a quantity in {unit}")
    value = float(match.group(1))
    if not math.isfinite(value):  # 1e400 parses to inf
        raise InputError(f"cannot read {short(text)}: {value} is not a finite number")
    suffix = match.group(2)
    if suffix == "" or suffix == unit:
        return value
    if unit == "s" and suffix in _TIME:
        return value * _TIME[suffix]
    if unit == "B/s":
        bits = _bit_rate(suffix)
        if bits is not None:
            return value * bits
    aliases = {unit, unit.replace("FLOP", "FLOPS"), unit.replace("B", "bytes")}
    if unit == "FLOP/s":
        aliases |= {"FLOPS", "FLOPs", "OPS", "OP/s"}
    for base in aliases:
        if suffix.endswith(base):
            prefix = suffix[: -len(base)]
            if prefix in _BINARY:
                return value * _BINARY[prefix]
            if prefix in _PREFIX:
                return value * _PREFIX[prefix]
    raise InputError(
        f"cannot read {text!r}: expected a number in {unit} (e.g. '3.35e12' or '3.35 T{unit}')"
    )


def _bit_rate(suffix: str) -> float | None:
    """Bytes/s in one unit of a bit rate ('Gb/s', 'Gbps', 'Gbit/s': 1e9 / 8), else None. A
    lower-case b is a bit, as NICs are sold (400 Gb/s = 50 GB/s)."""
    for base in ("bit/s", "b/s", "bps"):
        if suffix.endswith(base):
            prefix = suffix[: -len(base)]
            if prefix == "":
                return 1 / 8
            if prefix in _PREFIX:
                return _PREFIX[prefix] / 8
    return None


def parse_count(text: str, what: str) -> int:
    """Parse a positive integer, allowing 4096, 4_096, 4k (=4000), 4Ki (=4096) and 1e6."""
    raw = text.strip().replace("_", "")
    try:
        if raw[-2:] in _BINARY:
            value = float(raw[:-2]) * _BINARY[raw[-2:]]
        elif raw[-1:] in "kKMGT" and raw[:-1]:
            value = float(raw[:-1]) * _PREFIX[raw[-1]]
        else:
            value = float(raw)
    except ValueError:
        raise InputError(f"{what} must be a positive integer, got {short(text)}") from None
    if not math.isfinite(value) or value != int(value):
        raise InputError(f"{what} must be a positive integer, got {short(text)}")
    return int(value)


def _scaled(value: float, unit: str, prefixes: tuple[tuple[float, str], ...], digits: int) -> str:
    if value == 0 or not math.isfinite(value):
        return f"{value:g} {unit}"
    for scale, prefix in prefixes:
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {prefix}{unit}"
    scale, prefix = prefixes[-1]
    return f"{value / scale:.{digits}g} {prefix}{unit}"


_DECIMAL = ((1e18, "E"), (1e15, "P"), (1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k"), (1.0, ""))


def fmt_bytes(value: Scalar, digits: int = 3) -> str:
    """Decimal bytes: 402653184 -> '403 MB' (GB = 1e9 B)."""
    return _scaled(float(value), "B", _DECIMAL, digits)


def fmt_capacity(value: float) -> str:
    """A memory size as its maker states it: '32 GiB = 34.36 GB' when it is a round number of
    binary units (SRAM, VMEM, TPU v4 HBM) and not of decimal ones, else decimal, '80 GB'
    (GB = 1e9 B, GiB = 2**30 B)."""
    v = float(value)

    def scaled(scales: tuple[tuple[float, str], ...]) -> tuple[float, str]:
        for scale, name in scales:
            if v >= scale:
                return v / scale, name
        return v, scales[-1][1]

    def whole(x: float, digits: int) -> bool:
        return x == float(f"{x:.{digits}g}")

    if v > 0 and math.isfinite(v):
        dec, _ = scaled(_DECIMAL)
        binary, name = scaled(((TiB, "TiB"), (GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB")))
        if v >= KiB and whole(binary, 4) and not whole(dec, 3):
            return f"{binary:.4g} {name} = {fmt_bytes(v, 4)}"
    return fmt_bytes(v, 4)


def fmt_flops(value: Scalar, digits: int = 3) -> str:
    return _scaled(float(value), "FLOP", _DECIMAL, digits)


def fmt_rate(value: Scalar, unit: str = "FLOP/s", digits: int = 3) -> str:
    return _scaled(float(value), unit, _DECIMAL, digits)


def fmt_time(seconds: Scalar, digits: int = 3) -> str:
    value = float(seconds)
    if value == 0 or not math.isfinite(value):
        return f"{value:g} s"
    for scale, name in ((1.0, "s"), (1e-3, "ms"), (1e-6, "µs"), (1e-9, "ns")):
        if abs(value) >= scale:
            return f"{value / scale:.{digits}g} {name}"
    return f"{value / 1e-9:.{digits}g} ns"


def fmt_short(value: float, digits: int = 3) -> str:
    """A count to `digits` significant figures, with k, M or B past a thousand: 987, 102k,
    1.02M, 3.4B."""
    v = float(f"{float(value):.{digits}g}")  # rounded first: 999.6 is 1k, not 1000
    if not math.isfinite(v):
        return f"{v:g}"
    for scale, name in ((1e9, "B"), (1e6, "M"), (1e3, "k")):
        if abs(v) >= scale:
            return f"{float(f'{v / scale:.{digits}g}'):g}{name}"
    return f"{v:g}"


def fmt_usd(value: float, digits: int = 3) -> str:
    """Dollars to `digits` significant figures: $987, $102k, $1.02M, $3.4B (`fmt_short`)."""
    return "$" + fmt_short(value, digits)


def fmt_num(value: Scalar, digits: int = 4) -> str:
    """A number for formulas: exact counts (ints) with separators; rates and other floats in
    short scientific form (9.894e14), so that a reader can retype them."""
    if isinstance(value, int | np.integer) and abs(int(value)) < 10**18:
        return f"{int(value):,}"
    v = float(value)
    if v == 0 or not math.isfinite(v):
        return f"{v:g}"
    if 1e-3 <= abs(v) < 1e6:
        return f"{v:.{digits}g}"
    mantissa, exponent = f"{v:.{digits - 1}e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def fmt_int(value: Scalar) -> str:
    return f"{int(value):,}"


def fmt_intensity(value: float) -> str:
    return f"{float(value):.4g} FLOP/B"
