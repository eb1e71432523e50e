"""The expert-parallel dispatch and combine at the speed their libraries publish (DeepEP, HybridEP).

An all-to-all model prices a hierarchical dispatch by the bytes that cross each network at the
fabric's achievable rate. The libraries' own benchmarks measure less: with 4096 tokens of hidden
7168 per rank, HybridEP's dispatch over two H100 nodes runs at 54.47 GB/s counted its way (a
token once per node it reaches, the own node included), where the NIC alone would carry the
remote half at about 48 GB/s. `libraries/ep_kernels.toml` holds those published figures; this
module turns them into seconds for a given dispatch:

    t = tokens x D x hidden x element bytes / rate(group size)

- D: the expected nodes (convention "node") or ranks ("rank") a token's k experts fall on, the
  own one included: N (1 - C(E - E/N, k) / C(E, k)) with E experts spread evenly over N;
- element bytes: 1 + 4/128 for fp8 (the 128-value fp32 scales), else the dtype's bytes;
- rate: the published table's, linear in the group size between measured points and held at the
  ends; a "node" table measured with one NIC applies to another NIC in proportion to its line
  rate (the inter-node phase is bound by the NIC), a "rank" table to another chip in proportion
  to its scale-up (NVLink) egress.
- message size: every table was measured with one message (4096 tokens of 7168, top-8); at
  another size the caller scales the time by the all-to-all model's own realistic-over-line-rate
  ratio there over the same ratio at the measured size, so small decode messages pay the
  inefficiency the model gives any small collective.

Pure: the data file is read once from the package; numbers in, seconds out.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib import resources
from math import comb
from typing import Any

from shardline.errors import InputError

__all__ = [
    "EPKernelTable",
    "ep_tables",
    "pick_table",
    "destinations",
    "kernel_s",
    "measured_message_bytes",
]

_GB = 1e9
FP8_SCALE_BYTES_PER_ELEMENT = 4 / 128  # one fp32 scale per 128 values (both libraries' scripts)


@dataclass(frozen=True)
class EPKernelTable:
    """One published table: the library, its byte convention ("node" or "rank"), the chips it
    was measured on, the SMs its kernels ran on, the group sizes measured (ranks), and the
    dispatch (fp8, bf16) and combine rates in bytes/s at each size."""

    library: str
    convention: str
    chips: tuple[str, ...]
    sms: int
    ranks: tuple[int, ...]
    ranks_per_node: int
    link_bytes_per_s: float  # the measured system's NIC ("node") or NVLink egress ("rank")
    dispatch_fp8: tuple[float, ...]
    dispatch_bf16: tuple[float, ...]
    combine: tuple[float, ...]
    source: str

    def sizes(self) -> tuple[float, ...]:
        """The measured group sizes in the convention's unit: nodes or ranks."""
        if self.convention == "node":
            return tuple(r / self.ranks_per_node for r in self.ranks)
        return tuple(float(r) for r in self.ranks)


def _rates(raw: dict[str, Any], key: str, n: int) -> tuple[float, ...]:
    values = tuple(float(v) * _GB for v in raw[key])
    if len(values) != n:
        raise InputError(f"ep_kernels.toml: {key} has {len(values)} rates for {n} group sizes")
    return values


def _table(library: str, raw: dict[str, Any]) -> EPKernelTable:
    ranks = tuple(int(r) for r in raw["ranks"])
    combine = _rates(raw, "combine", len(ranks))
    link = raw.get("nic_gb_per_s", raw.get("nvlink_gb_per_s", {})).get("value", 0.0)
    return EPKernelTable(
        library=library,
        convention=str(raw["convention"]),
        chips=tuple(raw["chips"]),
        sms=int(raw["sms"]),
        ranks=ranks,
        ranks_per_node=int(raw.get("ranks_per_node", 1)),
        link_bytes_per_s=float(link) * _GB,
        dispatch_fp8=_rates(raw, "dispatch_fp8", len(ranks)),
        # not published where the library only dispatches in fp8: bf16 moves like the combine
        dispatch_bf16=_rates(raw, "dispatch_bf16", len(ranks))
        if "dispatch_bf16" in raw
        else combine,
        combine=combine,
        source=str(raw["source"]),
    )


@cache
def _data() -> dict[str, Any]:
    entry = resources.files("shardline.collectives") / "libraries" / "ep_kernels.toml"
    return tomllib.loads(entry.read_text(encoding="utf-8"))


@cache
def ep_tables() -> tuple[EPKernelTable, ...]:
    """Every published table of libraries/ep_kernels.toml."""
    data = _data()
    return tuple(
        _table(library, raw) for library in ("hybridep", "deepep") for raw in data[library]["table"]
    )


def measured_message_bytes() -> float:
    """A rank's k-copy message in the tables' benchmarks: tokens x top_k x hidden x 2 B (bf16)."""
    m = _data()["measured"]
    return float(m["tokens_per_rank"]["value"] * m["top_k"]["value"] * m["hidden"]["value"] * 2)


LIBRARY_OF_DISPATCH = {"hybridep": "hybridep", "hierarchical": "deepep"}


def pick_table(dispatch: str, chip: str, across_nodes: bool, sms: int) -> EPKernelTable | None:
    """The table that prices `dispatch` ("hybridep", "hierarchical": DeepEP) on `chip`: a "node"
    table when the ep group spans nodes, a "rank" table inside one NVLink domain; the chip's own
    if published, else the library's first (scaled by NIC or NVLink egress in `kernel_s`); of
    those, the one measured at `sms` SMs, else the most SMs at or under it, else the most SMs.
    None for the plain all-to-all (the all-to-all model prices it then)."""
    library = LIBRARY_OF_DISPATCH.get(dispatch)
    if library is None:
        return None
    convention = "node" if across_nodes else "rank"
    tables = [t for t in ep_tables() if t.library == library and t.convention == convention]
    own = [t for t in tables if chip in t.chips]
    if own:
        tables = own
    elif tables:  # another chip's table, scaled by the NIC or the NVLink egress (kernel_s)
        tables = [t for t in tables if t.chips == tables[0].chips]
    if not tables:
        return None
    at_most = [t for t in tables if t.sms <= sms] if sms > 0 else []
    return max(at_most or tables, key=lambda t: t.sms)


def destinations(experts: int, k: int, groups: int) -> float:
    """D = N (1 - C(E - E/N, k) / C(E, k)): the expected groups (nodes or ranks) holding at least
    one of a token's k experts when E experts spread evenly over N groups."""
    if groups < 1 or experts % groups or not 1 <= k <= experts:
        raise InputError(f"destinations needs 1 <= k <= experts and groups dividing {experts}")
    return groups * (1.0 - comb(experts - experts // groups, k) / comb(experts, k))


def _interpolate(xs: tuple[float, ...], ys: tuple[float, ...], x: float) -> float:
    """Linear between measured points, the end value outside them."""
    if x <= xs[0]:
        return ys[0]
    for i in range(1, len(xs)):
        if x <= xs[i]:
            x0, x1, y0, y1 = xs[i - 1], xs[i], ys[i - 1], ys[i]
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return ys[-1]


def kernel_s(
    table: EPKernelTable, op: str, counted_bytes: float, groups: int, link_bytes_per_s: float
) -> float:
    """Seconds of one dispatch ("dispatch_fp8", "dispatch_bf16") or "combine" on one rank that
    moves `counted_bytes` in the table's convention (tokens x destinations x hidden x element
    bytes) over `groups` nodes ("node" table) or ranks ("rank"), at the table's rate for that
    size, scaled by this link's line rate over the measured one (`link_bytes_per_s`: the NIC
    for a "node" table, the NVLink egress for a "rank" table; 0 keeps the rate as published)."""
    rate = _interpolate(table.sizes(), getattr(table, op), float(groups))
    if table.link_bytes_per_s > 0 and link_bytes_per_s > 0:
        rate *= link_bytes_per_s / table.link_bytes_per_s
    return counted_bytes / rate
