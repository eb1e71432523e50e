"""Collectives over device-mesh axes: all-gather, reduce-scatter, all-reduce, all-to-all, send.

V is the bytes of the whole array (the gathered result, or one full copy being reduced); each
device holds V/X. W is one-way bytes/s: per link for rings and lines, per-device egress for a
switch. alpha is the per-hop latency. Time = latency term + bandwidth term (alpha-beta).

- `records`: kinds, topologies, stages, networks, options, priced steps and costs, and the
  realistic bus efficiency `eff(V) = eff_max * V / (V + V_half)`;
- `algorithms`: the vocabulary, one record per algorithm with its line-rate bound per kind
  (coefficient, hops, bytes each device sends, formula and source; all-reduce = reduce-scatter +
  all-gather written once) and how NCCL and RCCL price it, or that no library runs it;
  `vocabulary` looks names, stages and pairs up in it;
- `library`, `p2p`, `priced`: the library's constants and shared pricing rules, its grouped
  sends, and its choice of (algorithm, protocol) on the communicator the mesh axes form;
- `networks`: which stages each mesh axis runs over (chip default or --topology);
- `compose`: one collective priced stage by stage (hierarchical composition).
"""

from shardline.collectives.algorithms import ALGORITHMS, TABLE, VOCABULARY, Algorithm
from shardline.collectives.compose import collective_cost, collective_over
from shardline.collectives.networks import (
    axis_network,
    concurrent_s,
    mesh_links,
    mesh_networks,
    parse_topology,
)
from shardline.collectives.records import (
    KINDS,
    TOPOLOGIES,
    AxisNetwork,
    CollectiveAlgorithm,
    CollectiveCost,
    CollectiveStep,
    LibraryPricing,
    LineRate,
    NetworkOptions,
    Stage,
    bus_efficiency,
    canonical_kind,
    canonical_topology,
)
from shardline.collectives.routing import routed_send
from shardline.collectives.vocabulary import (
    algorithm_named,
    algorithms_for,
    canonical_algorithm,
    choose,
)

__all__ = [
    "KINDS",
    "TOPOLOGIES",
    "Stage",
    "AxisNetwork",
    "NetworkOptions",
    "CollectiveStep",
    "CollectiveCost",
    "bus_efficiency",
    "canonical_kind",
    "canonical_topology",
    "collective_cost",
    "axis_network",
    "concurrent_s",
    "mesh_links",
    "routed_send",
    "mesh_networks",
    "parse_topology",
    "collective_over",
    "ALGORITHMS",
    "TABLE",
    "VOCABULARY",
    "Algorithm",
    "CollectiveAlgorithm",
    "LibraryPricing",
    "LineRate",
    "algorithm_named",
    "algorithms_for",
    "canonical_algorithm",
    "choose",
]
