"""A serving service-level objective: a bound on time to first token and on time per output
token, met at one percentile (p99 unless told)."""

from __future__ import annotations

from dataclasses import dataclass

from shardline.basics.units import short
from shardline.errors import InputError

__all__ = ["SLO", "parse_slo", "parse_duration_s"]

_UNITS_S = {"us": 1e-6, "ms": 1e-3, "s": 1.0}
PERCENTILES = (50, 90, 99)


@dataclass(frozen=True)
class SLO:
    """`ttft_s` and `tpot_s` (None: no bound) must hold at percentile `percentile`."""

    ttft_s: float | None = None
    tpot_s: float | None = None
    percentile: int = 99

    def met(self, ttft_s: float, tpot_s: float) -> bool:
        """Whether a TTFT and a TPOT (at this SLO's percentile) meet it."""
        ok_ttft = self.ttft_s is None or ttft_s <= self.ttft_s
        ok_tpot = self.tpot_s is None or tpot_s <= self.tpot_s
        return ok_ttft and ok_tpot

    def to_dict(self) -> dict[str, float | int | None]:
        return {"ttft_s": self.ttft_s, "tpot_s": self.tpot_s, "percentile": self.percentile}


def parse_duration_s(text: str, what: str) -> float:
    """`500ms`, `0.5s`, `30 ms` or `250us`, in seconds. A number without a unit is an error:
    `ttft=500` could mean 500 ms or 500 s, and an SLO read the wrong way is silently wrong."""
    if not isinstance(text, str):
        raise InputError(f"{what}: {short(text)} is not a duration such as 500ms or 0.03s")
    value = text.strip().lower().replace(" ", "")
    for unit in ("us", "ms", "s"):
        if value.endswith(unit):
            number, scale = value[: -len(unit)], _UNITS_S[unit]
            break
    else:
        raise InputError(
            f"{what}: {text!r} has no unit; write it with one, e.g. {text.strip()}ms or "
            f"{text.strip()}s (us, ms or s)"
        )
    try:
        seconds = float(number) * scale
    except ValueError:
        raise InputError(f"{what}: {text!r} is not a duration such as 500ms or 0.03s") from None
    if not seconds > 0 or seconds == float("inf"):
        raise InputError(f"{what}: {text!r} must be a positive, finite duration")
    return seconds


def parse_slo(text: str) -> SLO:
    """`ttft=500ms,tpot=30ms` (either may be left out; `p=90` picks the percentile: 50, 90 or
    99, default 99)."""
    if not isinstance(text, str):
        raise InputError(f"--slo must be text such as ttft=500ms,tpot=30ms, got {short(text)}")
    fields: dict[str, str] = {}
    for item in text.split(","):
        if not item.strip():
            continue
        key, sep, value = item.partition("=")
        key = key.strip().lower()
        if not sep or key not in ("ttft", "tpot", "p"):
            raise InputError(
                f"--slo: {item.strip()!r} is not ttft=DURATION, tpot=DURATION or p=50|90|99 "
                "(e.g. ttft=500ms,tpot=30ms)"
            )
        if key in fields:
            raise InputError(f"--slo: {key} given twice")
        fields[key] = value
    if "ttft" not in fields and "tpot" not in fields:
        raise InputError(
            "--slo needs ttft=DURATION and/or tpot=DURATION, e.g. ttft=500ms,tpot=30ms"
        )
    percentile = 99
    if "p" in fields:
        try:
            percentile = int(fields["p"].strip().lstrip("p"))
        except ValueError:
            percentile = -1
        if percentile not in PERCENTILES:
            raise InputError(f"--slo: p={fields['p']} must be one of 50, 90, 99")
    return SLO(
        ttft_s=parse_duration_s(fields["ttft"], "--slo ttft") if "ttft" in fields else None,
        tpot_s=parse_duration_s(fields["tpot"], "--slo tpot") if "tpot" in fields else None,
        percentile=percentile,
    )
