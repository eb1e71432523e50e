"""The collective algorithm table (`shardline.collectives.algorithms`): every entry against a
hand derivation, the NCCL double binary tree all-reduce, the automatic choice (today's algorithm
on each topology, also the cheapest at line rate), and `collective --algorithm` on the CLI."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from shardline.cli.main import main
from shardline.collectives import TABLE, NetworkOptions, algorithms_for, collective_cost
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
