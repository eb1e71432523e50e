"""Parallel folding as plan() takes it (Megatron-Core, docs/moe.md "Parallel folding"): the
keywords of a folded layout (etp, edp), when a layout's flags are read Megatron-Core's way (dp
counting the ep ranks), and the hint an error gives with the shardline degrees of that reading.
The folded candidates themselves are `planning.search.candidates`'."""

from __future__ import annotations

from collections.abc import Mapping
from math import prod

from shardline.strategies import names

__all__ = ["FOLD_KEY", "EDP_KEY", "FOLDED_ONE", "folded_pinned", "megatron_stated", "megatron_hint"]


# the keywords of a folded layout's expert tensor parallelism and (checked, derived) expert data
# parallelism (Degrees, parallel folding)
FOLD_KEY = "etp"
EDP_KEY = "edp"


# the attention degrees a folded layout leaves at 1 when not given (dp is derived)
FOLDED_ONE = ("fsdp", "cp")


def folded_pinned(devices: int, fixed: Mapping[str, int | None]) -> bool:
    """Whether a folded layout's flags fix one layout: etp given (or Megatron-Core's
    convention) and at most one of tp, pp, dp left out (the devices derive it)."""
    if fixed.get(FOLD_KEY) is None and not megatron_stated(devices, fixed):
        return False
    return sum(fixed.get(name) is None for name in ("tp", "pp", "dp")) <= 1


def megatron_stated(devices: int, fixed: Mapping[str, int | None]) -> bool:
    """Whether the degrees given can only be read in Megatron-Core's convention, dp counting
    every rank outside tp, cp and pp (the ep ranks inside it): ep > 1 and dp given, and the
    degrees but ep already multiply to the devices (read shardline's way, ep would have no
    ranks left)."""
    given: dict[str, int] = {k: v for k in names() if (v := fixed.get(k)) is not None}
    ep, dp = given.get("ep", 1), given.get("dp")
    rest = prod(v for k, v in given.items() if k != "ep")
    return ep > 1 and dp is not None and rest == devices


def megatron_hint(given: Mapping[str, int]) -> str:
    """Where dp and ep are both given: the shardline degrees of Megatron-Core's reading (dp
    counting the ep ranks), and --etp for a layout whose experts fold across tp."""
    dp, ep = given.get("dp"), given.get("ep", 1)
    if dp is None or ep == 1:
        return ""
    if dp % ep:
        return (
            f"; read as Megatron-Core states it (dp counting the ep ranks) ep={ep} does not "
            f"divide dp={dp}: give --etp for a folded layout (the experts on etp x ep x edp)"
        )
    return (
        f"; read as Megatron-Core states it (dp counting the ep ranks), shardline's degrees are "
        f"dp={dp // ep} ep={ep}"
    )
