"""The collective algorithm table (`shardline.collectives.algorithms`): every entry against a
hand derivation, the NCCL double binary tree all-reduce, the automatic choice (today's algorithm
on each topology, also the cheapest at line rate), and `collective --algorithm` on the CLI."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from shardline.cli.main import main
from shardline.collectives import (
    ALGORITHMS,
    TABLE,
    VOCABULARY,
    CollectiveAlgorithm,
    NetworkOptions,
    algorithm_named,
    algorithms_for,
    canonical_algorithm,
    canonical_kind,
    canonical_topology,
    collective_cost,
)
from shardline.collectives.library import Group, Pair, load_library
from shardline.collectives.vocabulary import library_pairs
from shardline.errors import InputError
from shardline.hardware import load_chip

H100 = load_chip("h100-sxm")
V5E = load_chip("tpu-v5e")
W = 4.5e10  # one-way per link, bytes/s (the test's own number)
ALPHA = 1e-6


def cost(kind: str, v: float, n: int, topo: str, chip=V5E, algorithm=None):  # type: ignore[no-untyped-def]
    return collective_cost(
        kind,
        v,
        n,
        chip,
        topo,
        algorithm=algorithm,
        options=NetworkOptions(link_bytes_per_s=W, hop_latency_s=ALPHA),
    )


# --- the algorithm table ---------------------------------------------------------------------

_G, _AR = "(n-1)/n·V/W", "2·(n-1)/n·V/W"
# (kind, algorithm) -> n -> (coefficient, hops, bytes sent / V, formula), derived by hand:
# gathers send (n-1)/n V (every shard but one's own), an all-reduce twice that (RS + AG), the
# in-switch all-reduce V (the switch reduces), the tree 2V (in the tree where the rank is a leaf
# it sends V/2 up; where it is inner, V/2 up and 2 x V/2 down to its children), an all-to-all
# (n-1)/n² V (n-1 chunks of V/n²), a send V.
HAND = {
    ("all_gather", "ring"): lambda n: ((n - 1) / (2 * n), n // 2, (n - 1) / n),
    ("all_gather", "line"): lambda n: ((n - 1) / n, n - 1, (n - 1) / n),
    ("all_gather", "unidirectional-ring"): lambda n: ((n - 1) / n, n - 1, (n - 1) / n),
    ("all_gather", "switch"): lambda n: ((n - 1) / n, 1, (n - 1) / n),
    ("all_reduce", "ring"): lambda n: ((n - 1) / n, 2 * (n // 2), 2 * (n - 1) / n),
    ("all_reduce", "line"): lambda n: (2 * (n - 1) / n, 2 * (n - 1), 2 * (n - 1) / n),
    ("all_reduce", "unidirectional-ring"): lambda n: (
        2 * (n - 1) / n,
        2 * (n - 1),
        2 * (n - 1) / n,
    ),
    ("all_reduce", "switch"): lambda n: (2 * (n - 1) / n, 2, 2 * (n - 1) / n),
    ("all_reduce", "in-switch"): lambda n: (1, 2, 1),
    ("all_reduce", "tree"): lambda n: (2, 2 * math.ceil(math.log2(n)), 2),
    ("all_to_all", "ring"): lambda n: ((n * n - n % 2) / 8 / n**2, n // 2, (n - 1) / n**2),
    ("all_to_all", "line"): lambda n: ((n // 2) * ((n + 1) // 2) / n**2, n - 1, (n - 1) / n**2),
    ("all_to_all", "unidirectional-ring"): lambda n: ((n - 1) / (2 * n), n - 1, (n - 1) / n**2),
    ("all_to_all", "switch"): lambda n: ((n - 1) / n**2, 1, (n - 1) / n**2),
    ("send", "p2p"): lambda n: (1, 1, 1),
}
for _name in ("ring", "line", "unidirectional-ring", "switch"):
    HAND[("reduce_scatter", _name)] = HAND[("all_gather", _name)]
FORMULAS = {
    ("all_gather", "ring"): "(n-1)/n·V/(2W) + α·⌊n/2⌋",
    ("all_reduce", "ring"): "2·(n-1)/n·V/(2W) + 2·α·⌊n/2⌋",
    ("all_gather", "line"): _G + " + α·(n-1)",
    ("all_reduce", "line"): _AR + " + 2·α·(n-1)",
    ("all_reduce", "unidirectional-ring"): _AR + " + 2·α·(n-1)",
    ("all_gather", "switch"): _G + " + α",
    ("all_reduce", "switch"): _AR + " + 2·α",
    ("all_reduce", "in-switch"): "V/W + 2·α  (in-switch reduction)",
    ("all_reduce", "tree"): "2·V/W + 2·α·⌈log2 n⌉",
    ("all_to_all", "switch"): "(n-1)/n²·V/W + α",
    ("send", "p2p"): "V/W + α",
}


@pytest.mark.parametrize("n", [2, 3, 5, 8, 64])
def test_every_table_entry_by_hand(n: int) -> None:
    assert set(TABLE) == set(HAND)  # a new entry needs its hand derivation here
    for key, record in TABLE.items():
        coef, hops, sent = HAND[key](n)
        assert record.coefficient(n) == pytest.approx(coef, rel=1e-15), key
        assert record.hops(n) == hops and record.sent(n) == pytest.approx(sent, rel=1e-15), key
        assert record.source, key
        if key in FORMULAS:
            assert record.formula == FORMULAS[key]


def test_tree_all_reduce_latency_grows_with_log2_n() -> None:
    # NCCL double binary tree: depth ceil(log2 n), reduce up then broadcast down: 2·ceil(log2 n)
    # hops; each rank sends 2V (NCCL tuning.cc: tree algbw = busbw / 2): t_bw = 2·V/W at any n
    v = 1e9
    t = {n: cost("all_reduce", v, n, "switch", H100, "tree") for n in (5, 8, 64)}
    assert t[8].t_latency_s == pytest.approx(2 * 3 * ALPHA)  # log2 8 = 3
    assert t[64].t_latency_s == pytest.approx(2 * 6 * ALPHA)  # log2 64 = 6, ring: 2·32
    assert t[5].t_latency_s == pytest.approx(2 * 3 * ALPHA)  # ceil(log2 5) = 3
    for c in t.values():
        assert c.t_bandwidth_s == pytest.approx(2 * v / W) and c.bytes_sent == 2 * v
        assert c.algorithm == "tree" and not c.in_switch


@pytest.mark.parametrize(
    ("topo", "chip", "names"),
    [
        ("ring", V5E, {"ring", "p2p"}),
        ("line", V5E, {"line", "p2p"}),
        ("unidirectional-ring", V5E, {"unidirectional-ring", "p2p"}),
        ("switch", load_chip("a100-80gb"), {"switch", "p2p"}),
        ("switch", H100, {"in-switch", "switch", "p2p"}),
    ],
)
def test_automatic_choice_is_todays_and_the_cheapest(topo: str, chip, names) -> None:  # type: ignore[no-untyped-def]
    for kind in ("all_gather", "reduce_scatter", "all_reduce", "all_to_all", "send"):
        c = collective_cost(kind, 1e8, 8, chip, topo)
        # the bound runs the table's entry; on a GPU the prediction is the library's choice
        assert c.line_rate_algorithm in names and c.formula == c.steps[0].formula
        reduction = chip is H100 and topo == "switch"
        assert c.line_rate_algorithm == algorithms_for(kind, topo, reduction)[0].name
        for v in (1.0, 1e4, 1e9):  # cheapest at line rate, at any size
            auto = cost(kind, v, 8, topo, chip)
            for other in algorithms_for(kind, topo, reduction):
                assert auto.t_s <= cost(kind, v, 8, topo, chip, other.name).t_s
    sw = collective_cost("all_reduce", 1e9, 8, H100)
    assert (sw.line_rate_algorithm, sw.in_switch, sw.bytes_sent) == ("in-switch", True, 1e9)
    assert (sw.algorithm, sw.protocol) == ("in-switch", "Simple")  # NCCL's NVLS at 1 GB


def test_algorithm_errors() -> None:
    with pytest.raises(InputError, match="valid there: line"):
        cost("all_reduce", 1e6, 8, "line", V5E, "tree")  # a tree needs any-to-any links
    with pytest.raises(InputError, match="unknown algorithm 'foo'; valid: ring"):
        cost("all_reduce", 1e6, 8, "switch", H100, "foo")
    with pytest.raises(InputError, match="cannot run all-gather"):  # a tree only all-reduces
        collective_cost("all_gather", 1e6, 16, H100, algorithm="tree")


def test_tree_over_nodes_is_one_tree_at_the_nic() -> None:
    # 16 H100s = 2 nodes of 8: NCCL's tree crosses the NICs, so one tree over n = 16 at the
    # slowest stage: W = 50 GB/s per device (400 Gb/s NDR), alpha = 5 us (scale-out hop)
    # t = 2·V/W + 2·alpha·ceil(log2 16) = 2e6/50e9 + 8 × 5e-6 = 40 us + 40 us
    c = collective_cost("all_reduce", 1e6, 16, H100, algorithm="tree")
    assert c.algorithm == "tree"
    assert c.t_bandwidth_s == pytest.approx(2 * 1e6 / 50e9, rel=1e-12)
    assert c.t_latency_s == pytest.approx(2 * 4 * 5e-6, rel=1e-12)


def test_collective_algorithm_cli(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["collective", "all-reduce", "--bytes", "1e9", "--devices", "64", "--hw", "h100-sxm"]
    argv += ["--topology", "switch", "--algorithm", "tree"]
    assert main(argv) == 0
    text = capsys.readouterr().out.splitlines()
    assert text[1] == "on switch of 64 (NVLink 4); algorithm: tree, protocol Simple (nccl 2.30.7)"
    assert text[5].endswith("2·V/W + 2·α·⌈log2 n⌉")  # 2·1e9/450e9 + 12 hops x 1 µs
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["algorithm"] == "tree" and out["bytes_sent"] == 2e9
    assert out["t_s"] == pytest.approx(2e9 / 450e9 + 12e-6)
    assert main([*argv[:-1], "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: unknown algorithm 'nope'; valid: ring")


def test_bytes_sent_over_several_stages_and_vectorized_tree() -> None:
    # 16 H100 = a node of 8 + 2 over the NICs: the group's figure at n = 16, as before the table
    v = 1e9
    ag = collective_cost("all_gather", v, 16, H100)
    assert len(ag.steps) == 2 and ag.bytes_sent == pytest.approx(15 / 16 * v, rel=1e-15)
    a2a = collective_cost("all_to_all", v, 16, H100)
    assert a2a.bytes_sent == pytest.approx(15 / 256 * v, rel=1e-15)
    sizes = np.array([1e3, 1e6, 1e9])
    vec = cost("all_reduce", sizes, 8, "switch", H100, "tree")
    for i, size in enumerate(sizes):
        one = cost("all_reduce", float(size), 8, "switch", H100, "tree")
        assert vec.t_s[i] == one.t_s and vec.bytes_sent[i] == 2 * size


# --- one vocabulary: names, aliases and the library's pricing, record by record ----------------

RING_BUS = 0.82 * 450e9  # H100: Simple-protocol busbw in a node, 18 links x 25 GB/s x 0.82
NVLS_ALG = 0.61 * 450e9  # H100: in-switch all-reduce algbw, 0.61 of V/W
MIB4 = 4 * 2**20  # NCCL_BUFFSIZE: 4 MiB a channel


def _one_node(nvls: float | None = None) -> Group:
    return Group(8, 1, "nvlink", RING_BUS, None, nvls, False, "hopper")


def _two_nodes(nvls: float | None = None, sharp: bool = False) -> Group:
    # 2 x 8 H100, the node's 8 NICs at 400 GB/s x 0.96; RoCE/IB network step 11.4 us
    return Group(16, 2, "nvlink", RING_BUS, 384e9, nvls, sharp, "hopper", 11.4e-6)


def _pair(name: str, kind: str, group: Group, protocol: str = "Simple") -> Pair:
    found = library_pairs(load_library("nccl"), kind, group)
    assert all(p.algorithm in ALGORITHMS for p in found)  # the library speaks the vocabulary
    return next(p for p in found if (p.algorithm, p.protocol) == (name, protocol))


def _ring_by_hand() -> None:
    # all-gather, one node of 8, Simple: 7 steps; latency = base 8.4 + 7 x NVLink 3.4 us;
    # busbw = 369 GB/s, algbw = busbw x n/(n-1) (tuning.cc ring ratio)
    p = _pair("ring", "all_gather", _one_node())
    assert p.latency_s == pytest.approx((8.4 + 7 * 3.4) * 1e-6, rel=1e-12)
    assert p.alg_bytes_per_s == pytest.approx(RING_BUS * 8 / 7, rel=1e-12)
    assert p.bus_bytes_per_s == pytest.approx(RING_BUS, rel=1e-12)


def _tree_by_hand() -> None:
    # all-reduce, one node of 8: busbw = ring busbw x 0.92, algbw = busbw / 2; latency = 8.4 +
    # 2 x (7 chain steps x NVLink tree 4.0 us + log2i(1 node) = 0 network steps) = 64.4 us. At
    # 1 GiB (log2(V/64) = 24, past the correction table) t = latency + V / algbw.
    p = _pair("tree", "all_reduce", _one_node())
    assert p.latency_s == pytest.approx((8.4 + 2 * 7 * 4.0) * 1e-6, rel=1e-12)
    assert p.alg_bytes_per_s == pytest.approx(0.92 * RING_BUS / 2, rel=1e-12)
    assert p.time_s(2.0**30) == pytest.approx(64.4e-6 + 2**30 / (0.92 * RING_BUS / 2), rel=1e-12)
    # LL: busbw / 3.8 (below Hopper's 141 GB/s cap); latency 6.8 + 2 x 7 x 0.6 us
    ll = _pair("tree", "all_reduce", _one_node(), "LL")
    assert ll.bus_bytes_per_s == pytest.approx(0.92 * RING_BUS * 0.2631578947, rel=1e-12)
    assert ll.latency_s == pytest.approx((6.8 + 2 * 7 * 0.6) * 1e-6, rel=1e-12)


def _in_switch_by_hand() -> None:
    # NVLS in one node: latency = base 0 + NVLink NVLS step 25 us; algbw = the chip's measured
    # 0.61 x 450 GB/s; busbw = algbw x 2(n-1)/n. Across nodes NCCL runs the NVLS tree instead.
    p = _pair("in-switch", "all_reduce", _one_node(NVLS_ALG))
    assert p.latency_s == pytest.approx(25e-6, rel=1e-12)
    assert p.alg_bytes_per_s == pytest.approx(NVLS_ALG, rel=1e-12)
    assert p.bus_bytes_per_s == pytest.approx(NVLS_ALG * 14 / 8, rel=1e-12)
    found = library_pairs(load_library("nccl"), "all_reduce", _two_nodes(NVLS_ALG))
    assert "in-switch" not in {q.algorithm for q in found}


def _nvls_tree_by_hand() -> None:
    # 2 nodes of 8: algbw = min(NVLS 274.5 GB/s, network 384 GB/s x 1 (two nodes)); latency =
    # 0 + NVLink NVLS-tree 25 us + 2 x log2i(2) = 2 network steps at max(20.9, 11.4) us = 66.8
    # us; the Simple ramp over Hopper's 16 NVLS channels x 4 MiB
    p = _pair("nvls-tree", "all_reduce", _two_nodes(NVLS_ALG))
    assert p.alg_bytes_per_s == pytest.approx(NVLS_ALG, rel=1e-12)
    assert p.latency_s == pytest.approx((25 + 2 * 20.9) * 1e-6, rel=1e-12)
    assert p.net_half_bytes == 16 * MIB4


def _collnet_by_hand() -> None:
    # SHARP across 2 nodes of 8: latency = base 0 + 2 x (min(1, 7) x NVLink CollNet 3.7 us +
    # 7 x 0.4 us) + one network step max(31, 11.4) us = 13 + 31 = 44 us; busbw = min(369, 384)
    # GB/s, algbw = busbw / 2
    p = _pair("collnet-direct", "all_reduce", _two_nodes(sharp=True))
    assert p.latency_s == pytest.approx((2 * (3.7 + 7 * 0.4) + 31) * 1e-6, rel=1e-12)
    assert p.alg_bytes_per_s == pytest.approx(RING_BUS / 2, rel=1e-12)
    assert p.net_half_bytes == 16 * MIB4
    found = library_pairs(load_library("nccl"), "all_reduce", _two_nodes())  # no SHARP
    assert "collnet-direct" not in {q.algorithm for q in found}


def _pat_by_hand() -> None:
    # 4 nodes of one rank, NIC share 50 GB/s: a network step is the tree's max(14, 11.4) us
    # (one rank a node); latency = 8 + log2i(4) x 14 / 3.5 + 4 ranks x 2.8 us = 27.2 us;
    # ring busbw = 50 GB/s (the network alone: no scale-up share), x 0.75; algbw = busbw
    group = Group(4, 4, "nvlink", RING_BUS, 50e9, None, False, "hopper", 11.4e-6)
    p = _pair("pat", "all_gather", group)
    assert p.latency_s == pytest.approx((8 + 2 * 14 / 3.5 + 4 * 2.8) * 1e-6, rel=1e-12)
    assert p.bus_bytes_per_s == pytest.approx(0.75 * 50e9, rel=1e-12)
    assert p.alg_bytes_per_s == p.bus_bytes_per_s
    assert "pat" not in {
        q.algorithm for q in library_pairs(load_library("nccl"), "all_reduce", group)
    }


def _p2p_by_hand() -> None:
    # all-to-all on one node of 8, LL: latency = ring LL base 6.6 + one round of 7 local peers
    # x NVLink 0.6 us = 7.2 us; each rank's 7/8 of V/8 crosses NVLink at 369 GB/s x 0.5 (LL)
    p = _pair("p2p", "all_to_all", _one_node(), "LL")
    assert p.latency_s == pytest.approx(7.2e-6, rel=1e-12)
    v = 1e5  # messages of 1e5 / 64 = 1,562 B: LL
    assert p.time_s(v) == pytest.approx(7.2e-6 + v / 8 * 7 / 8 / (RING_BUS * 0.5), rel=1e-12)


# algorithm -> its library pricing derived by hand (a record NCCL or RCCL runs needs one here)
LIBRARY_HAND = {
    "ring": _ring_by_hand,
    "tree": _tree_by_hand,
    "in-switch": _in_switch_by_hand,
    "nvls-tree": _nvls_tree_by_hand,
    "collnet-direct": _collnet_by_hand,
    "pat": _pat_by_hand,
    "p2p": _p2p_by_hand,
}


@pytest.mark.parametrize("record", VOCABULARY, ids=[r.name for r in VOCABULARY])
def test_every_record_is_derived_by_hand(record: CollectiveAlgorithm) -> None:
    # its line-rate records are in HAND (test_every_table_entry_by_hand), its library pricing
    # in LIBRARY_HAND; a record with neither would price nothing
    assert record.line_rate or record.library is not None
    assert {r.kind for r in record.line_rate} == {k for k, name in HAND if name == record.name}
    assert all(r.name == record.name for r in record.line_rate)
    if record.library is None:
        assert record.name not in LIBRARY_HAND
        return
    assert record.library.source
    LIBRARY_HAND[record.name]()
    group = _two_nodes(NVLS_ALG, sharp=True) if record.name != "pat" else None
    for kind in record.library.kinds:  # the library runs it for exactly its kinds
        for g in (
            _one_node(NVLS_ALG),
            group or Group(4, 4, "nvlink", RING_BUS, 50e9, None, False, "hopper"),
        ):
            names = {p.algorithm for p in library_pairs(load_library("nccl"), kind, g)}
            assert names <= {r.name for r in VOCABULARY if r.library and kind in r.library.kinds}


def test_one_set_of_names_and_every_alias() -> None:
    assert ALGORITHMS == (
        "ring",
        "line",
        "unidirectional-ring",
        "switch",
        "tree",
        "in-switch",
        "nvls-tree",
        "collnet-direct",
        "pat",
        "p2p",
    )
    words = [w for r in VOCABULARY for w in r.words]
    assert len(words) == len(set(words))  # no word names two algorithms
    for record in VOCABULARY:
        for word in record.words:
            assert algorithm_named(word.upper().replace("-", "_")) is record
    assert canonical_algorithm("NVLS") == "in-switch" and canonical_algorithm("sharp") == (
        "collnet-direct"
    )


def test_the_same_name_in_text_json_and_errors(capsys: pytest.CaptureFixture[str]) -> None:
    # --algorithm nvls (NCCL's word) is the in-switch record: the bound is its V/W + 2·alpha
    # (1e9 / 450e9 + 2 us) and NCCL prices NVLS: 25 us + 1e9 / (0.61 x 450 GB/s)
    argv = ["collective", "all-reduce", "--bytes", "1e9", "--devices", "8", "--hw", "h100-sxm"]
    assert main([*argv, "--algorithm", "nvls"]) == 0
    text = capsys.readouterr().out.splitlines()
    assert (
        text[1] == "on switch of 8 (NVLink 4); algorithm: in-switch, protocol Simple (nccl 2.30.7)"
    )
    assert main([*argv, "--algorithm", "nvls", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["algorithm"] == out["line_rate_algorithm"] == "in-switch"
    assert [c["algorithm"] for c in out["candidates"]] == ["in-switch"]
    assert out["steps"][0]["algorithm"] == "in-switch"
    assert out["t_s"] == pytest.approx(1e9 / 450e9 + 2e-6, rel=1e-12)
    assert out["predicted_s"] == pytest.approx(25e-6 + 1e9 / NVLS_ALG, rel=1e-12)
    assert main([*argv, "--algorithm", "nvls_tree"]) == 2  # one node: NCCL has no NVLS tree
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: nvls-tree cannot run all-reduce")
    assert main([*argv, "--algorithm", "nope"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: unknown algorithm 'nope'; valid: {', '.join(ALGORITHMS)}"]


def test_a_library_only_algorithm_off_a_library_chip() -> None:
    with pytest.raises(InputError, match="'pat' is run only by a collective library"):
        collective_cost("all_gather", 1e6, 16, V5E, algorithm="pat")


def test_bidirectional_ring_is_the_ring() -> None:
    # an alias is the algorithm: NCCL's ring / LL on 8 H100 at 1 kB, 6.6 + 14 x 0.6 us +
    # 1e3 / (141 GB/s x 8/14), whichever word names it
    one = collective_cost("all_reduce", 1e3, 8, H100, algorithm="bidirectional-ring")
    assert (one.algorithm, one.protocol) == ("ring", "LL")
    assert one.predicted_s == pytest.approx(15e-6 + 1e3 / (141e9 * 8 / 14), rel=1e-12)
    assert (
        one.predicted_s == collective_cost("all_reduce", 1e3, 8, H100, algorithm="ring").predicted_s
    )


def test_no_other_module_names_an_algorithm() -> None:
    # adding an algorithm is its record and its test: the callers read names from the records
    # (the names that do not also name a topology or a kind; aliases such as nvls and sharp are
    # also the cluster flags' words; doctest lines show a user's call)

    def other_word(word: str) -> bool:
        for canonical in (canonical_kind, canonical_topology):
            try:
                canonical(word)
                return True
            except InputError:
                pass
        return False

    words = [r.name for r in VOCABULARY if not other_word(r.name)]
    assert words == ["tree", "in-switch", "nvls-tree", "collnet-direct", "pat"]
    root = Path(__file__).resolve().parents[1] / "src" / "shardline"
    files = [*(root / "collectives").glob("*.py"), *(root / "cli").glob("*.py")]
    files += [*(root / "report").glob("*.py")]
    for path in files:
        if path.name == "algorithms.py":
            continue
        text = "\n".join(line for line in path.read_text().splitlines() if ">>>" not in line)
        for word in words:
            assert f'"{word}"' not in text, (path.name, word)


def test_pinned_channels_set_the_network_ramp() -> None:
    """NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS = 8 (Google's GPUDirect-TCPX nccl-tests script,
    google/nccl-plugin-gpudirecttcpx scripts/run-nccl.sh) halves the Simple ring's ramp depth:
    V_half = channels x NCCL_BUFFSIZE = 8 x 4 MiB = 32 MiB instead of the file's 16 x 4 MiB; the
    multi-node plateau starts at 64 B x 8 channels x 16 ranks = 8192 B."""
    from dataclasses import replace

    pinned = replace(_two_nodes(), channels=8)
    ring = _pair("ring", "all_gather", pinned)
    assert ring.net_half_bytes == 8 * MIB4 == 32 * 2**20
    assert _pair("ring", "all_gather", _two_nodes()).net_half_bytes == 16 * MIB4
    plateau = _pair("ring", "all_reduce", pinned)
    assert plateau.plateau_from_bytes == 64.0 * 8 * 16


def test_one_gpu_per_node_runs_the_channels_nccl_logs_there() -> None:
    """Two nodes that hold one H100 and one 400 Gb/s NIC each: NCCL logs 4 collective channels there
    (NVIDIA/nccl issue 1291, two GH200 nodes: 'nRanks 2 nNodes 2 localRanks 1', 'Channel
    00/04'), so the Simple ring reaches half the network's bandwidth at 4 x NCCL_BUFFSIZE =
    16 MiB, not at the 8-GPU node's 16 x 4 MiB = 64 MiB, and the multi-node plateau starts at
    64 B x 4 channels x 2 ranks = 512 B. At 64 MiB the all-gather's bandwidth term is then
    V / (alg x 64 / (64 + 16)) instead of V / (alg x 64 / (64 + 64))."""
    from dataclasses import replace

    one = Group(2, 2, "nvlink", RING_BUS, 48e9, None, False, "hopper", 11.4e-6, gpus_per_node=1)
    ring = _pair("ring", "all_gather", one)
    assert ring.net_half_bytes == 4 * MIB4 == 16 * 2**20
    assert _pair("ring", "all_reduce", one).plateau_from_bytes == 64.0 * 4 * 2
    v = 64 * 2**20
    assert ring.time_s(v) == pytest.approx(
        ring.latency_s + v / (ring.alg_bytes_per_s * 64 / (64 + 16)), rel=1e-12
    )
    # a count the run pins still wins; two GPUs a node keep the file's 16, and so does a group of
    # one rank a node on nodes of 8 GPUs (a data-parallel group: its rank sees the node's 8 NICs)
    assert _pair("ring", "all_gather", replace(one, channels=8)).net_half_bytes == 8 * MIB4
    two = Group(4, 2, "nvlink", RING_BUS, 96e9, None, False, "hopper", 11.4e-6, gpus_per_node=2)
    assert _pair("ring", "all_gather", two).net_half_bytes == 16 * MIB4
    data_parallel = replace(one, gpus_per_node=8)
    assert _pair("ring", "all_gather", data_parallel).net_half_bytes == 16 * MIB4
