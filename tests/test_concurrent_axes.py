"""Collectives on mesh axes with disjoint links run at once (issue 27): the network time of a
phase or of a sharded einsum is the busiest group of links' sum, not the sum over every axis;
axes that share a link (two axes inside one NVSwitch node, two axes on one torus dimension) still
add up."""

from __future__ import annotations

import json

import pytest

from shardline.cli.main import main
from shardline.collectives import concurrent_s, mesh_links
from shardline.hardware import resolve_chip
from shardline.ops.cost import Cost
from shardline.planning.phases import Phase
from shardline.strategies import CommTerm


def test_disjoint_links_take_the_max_shared_links_the_sum() -> None:
    a, b, c = frozenset({"torus-0"}), frozenset({"torus-1"}), frozenset({"torus-0", "torus-1"})
    assert concurrent_s([(a, 3.0), (b, 2.0)]) == 3.0  # max(3, 2)
    assert concurrent_s([(a, 3.0), (a, 2.0)]) == 5.0  # 3 + 2 on one link
    # a collective over both dimensions joins the two groups: 3 + 2 + 1
    assert concurrent_s([(a, 3.0), (b, 2.0), (c, 1.0)]) == 6.0
    assert concurrent_s([(frozenset(), 1.0), (frozenset(), 2.0)]) == 3.0  # unknown: shared
    assert concurrent_s([]) == 0.0


def test_mesh_links_follow_the_fabric() -> None:
    """H100: 8 GPUs per NVSwitch node, filled from the innermost axis (tp); what does not fit
    goes over the NICs. v5e: a 16 x 16 torus, one axis per dimension."""
    h100 = mesh_links(resolve_chip("h100-sxm"), [("fsdp", 8), ("tp", 8)])
    assert h100 == {"fsdp": frozenset({"scale-out"}), "tp": frozenset({"scale-up"})}
    inside = mesh_links(resolve_chip("h100-sxm"), [("fsdp", 2), ("tp", 4)])
    assert inside["fsdp"] == inside["tp"] == frozenset({"scale-up"})  # one node: shared NVLink
    v5e = mesh_links(resolve_chip("tpu-v5e"), [("Y", 16), ("X", 16)])
    assert v5e["X"] != v5e["Y"] and not v5e["X"] & v5e["Y"]


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_fsdp_beside_tp_einsum_on_two_torus_axes(capsys: pytest.CaptureFixture[str]) -> None:
    """The book's mixed FSDP + TP layer In[B_X, D_Y] W[D_X, F_Y] on a v5p mesh X=8 (FSDP),
    Y=8 (TP), 128 tokens per chip (B = 8192): In is gathered over Y, W over X, each a ring of 8
    on its own torus dimension, W = 90 GB/s per link one way, alpha = 1 us:
        t = (n-1)/n V / (2 W) + alpha floor(n/2)
    In: V = 2 B x (8192/8) x 8192; W: V = 2 B x 8192 x (32768/8). The step's network time is the
    larger (they use different links), the serial upper bound has both."""
    r = _run(
        capsys, "einsum", "In[B_X,D_Y] * W[D_X,F_Y] -> Out[B_X,F_Y]",
        "--dims", "B=8192,D=8192,F=32768", "--mesh", "X=8,Y=8", "--hw", "tpu-v5p", "--json",
    )  # fmt: skip
    w, alpha, n = 90e9, 1e-6, 8

    def ring(v: float) -> float:
        return (n - 1) / n * v / (2 * w) + alpha * (n // 2)

    t_in, t_w = ring(2 * 1024 * 8192), ring(2 * 8192 * 4096)
    t_compute = 2 * 1024 * 8192 * 4096 / 459e12
    assert r["t_network_s"] == pytest.approx(max(t_in, t_w), rel=1e-9)
    assert r["t_lower_s"] == pytest.approx(max(t_compute, t_in, t_w), rel=1e-9)
    # the serial bound: nothing overlapped, the two all-gathers one after the other
    t_memory = r["per_device"]["t_memory_s"]
    assert r["t_upper_s"] == pytest.approx(t_compute + t_memory + t_in + t_w, rel=1e-9)


def _term(axis: str, seconds: float, critical: bool) -> CommTerm:
    return CommTerm(axis, "all_gather", 8, 1, 1.0, seconds, critical=critical)


@pytest.mark.parametrize(
    "links, expected_s, bound",
    [
        # disjoint: max(local + crit, fsdp, tp) = max(2 + 1.5, 3, 1.5) = 3.5; the busiest
        # links (3) carry more than the local compute (2): network-bound
        ({"tp": frozenset({"scale-up"}), "fsdp": frozenset({"scale-out"})}, 3.5, "network"),
        # shared: max(local, fsdp) + crit = max(2, 3) + 1.5 = 4.5
        ({"tp": frozenset({"scale-up"}), "fsdp": frozenset({"scale-up"})}, 4.5, "network"),
    ],
)
def test_phase_overlaps_axes_on_separate_links(links: dict, expected_s: float, bound: str) -> None:
    ph = Phase(local=Cost(t_compute_s=2.0, t_lower_s=2.0), links=links)
    ph.add_comm(_term("tp", 1.5, critical=True))
    ph.add_comm(_term("fsdp", 3.0, critical=False))
    assert ph.time_s() == pytest.approx(expected_s)
    into = {"compute": 0.0, "memory": 0.0, "network": 0.0}
    ph.attribute(into, 1)
    assert max(into, key=into.__getitem__) == bound


def test_tp_beside_fsdp_stays_compute_bound_on_separate_links() -> None:
    """local 4, TP (critical) 1.5 on NVLink, FSDP (overlapped) 3 over the NICs: each link group
    carries less than the compute (max(1.5, 3) = 3 < 4), so the phase is compute-bound and takes
    local + critical = 5.5; on one shared link 1.5 + 3 = 4.5 > 4 is network-bound."""
    apart = {"tp": frozenset({"scale-up"}), "fsdp": frozenset({"scale-out"})}
    shared = {"tp": frozenset({"scale-up"}), "fsdp": frozenset({"scale-up"})}
    out = {}
    for name, links in (("apart", apart), ("shared", shared)):
        ph = Phase(local=Cost(t_compute_s=4.0, t_lower_s=4.0), links=links)
        ph.compute_bound_s = 4.0
        ph.add_comm(_term("tp", 1.5, critical=True))
        ph.add_comm(_term("fsdp", 3.0, critical=False))
        into = {"compute": 0.0, "memory": 0.0, "network": 0.0}
        ph.attribute(into, 1)
        out[name] = (ph.time_s(), max(into, key=into.__getitem__))
    assert out["apart"] == (pytest.approx(4.0 + 1.5), "compute")
    assert out["shared"] == (pytest.approx(max(4.0, 3.0) + 1.5), "network")


@pytest.mark.parametrize("dp_links, bound", [("scale-out", "compute"), ("torus-0", "network")])
def test_data_parallel_gradients_beside_fsdp(dp_links: str, bound: str) -> None:
    """The last backward pass: local 4, FSDP's overlapped 3 on torus-0, the data-parallel
    gradient all-reduce's 2.5 (once per step) on DCN: max(3, 2.5) = 3 < 4 stays compute-bound;
    were the gradients on FSDP's links they would compete, 3 + 2.5 = 5.5 > 4."""
    links = {"fsdp": frozenset({"torus-0"}), "dp": frozenset({dp_links})}
    ph = Phase(local=Cost(t_compute_s=4.0, t_lower_s=4.0), links=links)
    ph.compute_bound_s = 4.0
    ph.add_comm(_term("fsdp", 3.0, critical=False))
    into = {"compute": 0.0, "memory": 0.0, "network": 0.0}
    ph.attribute(into, 1, {"dp": 2.5})
    assert max(into, key=into.__getitem__) == bound
    assert ph.time_s({"dp": 2.5}) == pytest.approx(4.0 if bound == "compute" else 5.5)
