"""How an expert-parallel all-to-all crosses nodes: plainly, or hierarchically with one copy per
destination node (DeepSeek-V3, arXiv 2412.19437, section 3.2.2; DeepEP's internode kernels and
Megatron-Core's HybridEP dispatcher run it).

A plain all-to-all over an ep group of N nodes of G devices sends each of a token's k routed
copies to the device of its expert: (N - 1) / N of them leave the node, k (N - 1) / N copies of
the token per device over the scale-out network. The hierarchical dispatch sends a token over
the scale-out network once to each remote node that holds at least one of its k experts (to
the device with the same index inside that node), which forwards it over NVLink to the devices
of its experts there; the combine mirrors it (the node sums its experts' outputs, then sends one
copy back). With routing balanced over E experts, E / N per node, a node holds none of a token's
k experts with probability C(E - E/N, k) / C(E, k) (k experts drawn without replacement), so the
token crosses the scale-out network to R = (N - 1) (1 - C(E - E/N, k) / C(E, k)) nodes in
expectation, not k (N - 1) / N times. The scale-up (NVLink) phase is the plain all-to-all's.

That is the lower bound. The realistic time of DeepEP's and HybridEP's kernels is the speed
their libraries publish (shardline.collectives.ep_kernels), where a table covers the group:
`PublishedDispatch`.

Pure: no printing, no files.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import comb, prod

from shardline.collectives import collective_over
from shardline.collectives.ep_kernels import (
    FP8_SCALE_BYTES_PER_ELEMENT,
    EPKernelTable,
    destinations,
    kernel_s,
    measured_message_bytes,
    pick_table,
)
from shardline.collectives.records import AxisNetwork
from shardline.errors import InputError
from shardline.hardware import Chip

__all__ = [
    "remote_nodes",
    "scale_out_share",
    "hierarchical_a2a_s",
    "PublishedDispatch",
    "published_dispatch",
]


def remote_nodes(experts: int, k: int, nodes: int) -> float:
    """R: the expected remote nodes a token's k experts (of `experts`, spread evenly over
    `nodes` nodes) fall on: (N - 1) (1 - C(E - E/N, k) / C(E, k))."""
    if nodes < 1 or experts % nodes or not 1 <= k <= experts:
        raise InputError(f"remote_nodes needs 1 <= k <= experts and nodes dividing {experts}")
    miss = comb(experts - experts // nodes, k) / comb(experts, k)
    return (nodes - 1) * (1.0 - miss)


def scale_out_share(experts: int, k: int, nodes: int) -> float:
    """The hierarchical dispatch's scale-out bytes over the plain all-to-all's:
    R / (k (N - 1) / N); 1 for one node."""
    if nodes <= 1:
        return 1.0
    return remote_nodes(experts, k, nodes) / (k * (nodes - 1) / nodes)


def hierarchical_a2a_s(
    net: AxisNetwork, nbytes: float, chip: Chip, share: float
) -> tuple[float, float] | None:
    """(lower bound, realistic) seconds of a V-byte all-to-all over `net` whose scale-out phase
    carries `share` of the plain all-to-all's bytes; the phases pipeline (the slower sets the
    time, as the plain hierarchical all-to-all's). None when the axis has no scale-out stage."""
    up = tuple(s for s in net.stages if not s.scale_out and s.devices > 1)
    out = tuple(s for s in net.stages if s.scale_out and s.devices > 1)
    if not out:
        return None
    total = net.devices
    parts = []
    for stages, scale in ((up, 1.0), (out, share)):
        if not stages:
            continue
        devices = 1
        for s in stages:
            devices *= s.devices
        sub = AxisNetwork(devices, stages, net.in_network_reduction, net.source, net.options)
        # the phase moves the array those devices hold: V x devices / total
        c = collective_over("all_to_all", nbytes * devices / total * scale, [sub], chip)
        parts.append((float(c.t_s), float(c.predicted_s)))
    return max(p[0] for p in parts), max(p[1] for p in parts)


@dataclass(frozen=True)
class PublishedDispatch:
    """A dispatch priced by its library's published table: `groups` nodes or ranks, `per_copy` =
    D / k (the counted bytes per byte of a message that holds k copies of each token), `link`
    this system's NIC or NVLink egress, and the ep `axis` on `chip`, whose all-to-all model
    carries the table to other message sizes (`size_factor`)."""

    table: EPKernelTable
    groups: int
    per_copy: float
    link_bytes_per_s: float
    axis: AxisNetwork
    chip: Chip
    memo: dict[float, float] = field(default_factory=dict, compare=False)

    def seconds(self, message_bytes: float, op: str, fp8: bool) -> float:
        """One `op` ("dispatch" or "combine") of a rank's k-copy message of `message_bytes`."""
        if op == "dispatch":
            op = "dispatch_fp8" if fp8 else "dispatch_bf16"
        element = 1.0 + FP8_SCALE_BYTES_PER_ELEMENT if fp8 else 1.0
        counted = message_bytes * self.per_copy * element
        t = kernel_s(self.table, op, counted, self.groups, self.link_bytes_per_s)
        return t * self.size_factor(message_bytes * (2.0 if fp8 else 1.0))  # bf16-equivalent

    def size_factor(self, bf16_message_bytes: float) -> float:
        """How much slower per byte a message of this size runs than the tables' measured one,
        by the all-to-all model's realistic-over-line-rate ratio at the two sizes (at least 1:
        never faster than published)."""
        measured = self._slowdown(measured_message_bytes())
        return max(1.0, self._slowdown(bf16_message_bytes) / measured)

    def _slowdown(self, message_bytes: float) -> float:
        if message_bytes not in self.memo:
            cost = collective_over(
                "all_to_all", message_bytes * self.axis.devices, [self.axis], self.chip
            )
            line = float(cost.t_s)
            self.memo[message_bytes] = float(cost.predicted_s) / line if line > 0 else 1.0
        return self.memo[message_bytes]


def published_dispatch(
    dispatch: str, chip: Chip, axis: AxisNetwork, experts: int, k: int, sms: int
) -> PublishedDispatch | None:
    """The published pricing of `dispatch` over the ep `axis` (its nodes when it spans several,
    else its ranks), or None when no table applies (another vendor's chip: the tables are NVIDIA
    systems') or the experts do not spread evenly. HybridEP on another vendor's chip is an
    error: it does not run there."""
    if dispatch == "hybridep" and chip.vendor != "NVIDIA":
        raise InputError(
            f"--ep-dispatch hybridep runs on NVIDIA GPUs (HybridEP is built on NVLink and "
            f"NVIDIA's RDMA stack); {chip.name} is {chip.vendor}'s: use all-to-all or hierarchical"
        )
    if chip.vendor != "NVIDIA":  # the published tables are NVIDIA systems'
        return None
    out = [s for s in axis.stages if s.scale_out and s.devices > 1]
    nodes = prod(s.devices for s in out)
    groups = nodes if nodes > 1 else axis.devices
    table = pick_table(dispatch, chip.name, nodes > 1, sms)
    if table is None or not 1 <= k <= experts or experts % groups:
        return None
    if out:
        link = min(s.bytes_per_s for s in out)
    else:
        link = chip.interconnect.egress_bytes_per_s if chip.interconnect else 0.0
    per_copy = destinations(experts, k, groups) / k
    return PublishedDispatch(table, groups, per_copy, link, axis, chip)
