"""All-to-all as NCCL runs it: grouped point-to-point sends (collectives/p2p.py).

Every expected value is derived here by hand from NCCL's constants (libraries/nccl.toml):
ring base latency LL 6.6 us / Simple 8.4 us; NVLink step LL 0.6 us / Simple 3.4 us; network
step max(NCCL's ring step, the fabric's measured 11.4 us on InfiniBand); the proxy's overhead
1 us a remote peer (x3 for Simple, x2 on AMD hosts); LL up to 16 KiB a message; p2p channels
32 in one node and 16 across nodes (2 a network peer), 8 ops a channel at once; ramp channels x
chunk (512 KiB NVLink, 128 KiB network).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from shardline.cli.main import main
from shardline.collectives import collective_cost
from shardline.collectives.library import Group, load_library
from shardline.collectives.p2p import P2pPair, all_to_all_pairs, p2p_rounds
from shardline.hardware import load_chip

US = 1e-6
NVL_BUS = 450e9 * 0.82  # H100: 18 NVLink 4 links x 25 GB/s x the bus efficiency 0.82


def _group(ranks: int, nodes: int) -> Group:
    # 8 NICs of 50 GB/s per node, the fabric's efficiency 1: 400 GB/s for the node's 8 ranks
    inter = 400e9 * (ranks // nodes) / 8 if nodes > 1 else None
    net_step = 11.4e-6 if nodes > 1 else 0.0
    return Group(ranks, nodes, "nvlink", NVL_BUS, inter, None, False, "hopper", net_step, 0.0)


def _pair(group: Group, protocol: str) -> P2pPair:
    found = all_to_all_pairs(load_library("nccl"), group, "p2p")
    pair = next(p for p in found if p.protocol == protocol)
    assert isinstance(pair, P2pPair)
    return pair


def test_64_ranks_on_8_nodes_small_message_pays_the_proxy_per_remote_peer() -> None:
    # V = 1e6 B over 64 ranks: messages of 1e6 / 64^2 = 244 B, LL. 7 local and 56 remote
    # peers, each set in one round (16 channels / 2 a peer x 8 = 64 at once).
    # latency = 6.6 + 0.6 + 11.4 + 56 x 1.0 = 74.6 us
    # network: 1e6/64 x 56/64 = 13,671.875 B at 50 GB/s x 0.5 (LL) = 0.546875 us
    # scale-up: 1e6/64 x 7/64 = 1,708.98 B at 369 GB/s x 0.5 = 0.00926 us; the NIC is slower
    chip = load_chip("h100-sxm")
    c = collective_cost("all_to_all", 1e6, 64, chip)
    assert (c.algorithm, c.protocol) == ("p2p", "LL")
    assert c.predicted_s == pytest.approx((74.6 + 0.546875) * US, rel=1e-9)
    pair = _pair(_group(64, 8), "LL")
    assert pair.latency_s == pytest.approx(74.6 * US)


def test_one_node_32_mib_a_rank_matches_nccl_tests_on_8_h100() -> None:
    # nccl-tests alltoall size 32 MiB (one rank's buffer) on 8 x H100: V = 8 x 32 MiB.
    # Messages of 4 MiB: Simple. latency = 8.4 + 3.4 = 11.8 us (7 peers, one round: 4 channels
    # a peer, 32 / 4 x 8 = 64 at once). Scale-up: 7/8 x 32 MiB = 29,360,128 B plus the ramp
    # 32 x 512 KiB = 16,777,216 B at 369 GB/s = 125.03 us; t = 136.83 us.
    # xxrjun/nccl-tests-cluster measured 124.79 us (benchmarks/data/collectives_published.csv).
    expected = 11.8 * US + (29_360_128 + 16_777_216) / NVL_BUS
    c = collective_cost("all_to_all", 8 * 32 * 2**20, 8, "h100-sxm")
    assert (c.algorithm, c.protocol) == ("p2p", "Simple")
    assert c.predicted_s == pytest.approx(expected, rel=1e-9)
    assert c.predicted_s == pytest.approx(124.79 * US, rel=0.10)


def test_nccl_switches_to_simple_above_16_kib_a_message() -> None:
    # LL while V / n^2 <= 16384 B (NCCL_P2P_LL_THRESHOLD), even where Simple would be faster
    n = 8
    at = 16384.0 * n * n
    sizes = np.array([at, at + n * n])
    c = collective_cost("all_to_all", sizes, n, "h100-sxm")
    assert c.choice is not None and c.choice.protocol == "LL / Simple"
    ll = _pair(_group(8, 1), "LL")
    assert ll.selected(at) and not ll.selected(at + n * n)


def test_amd_hosts_double_the_proxy_overhead_and_simple_triples_it() -> None:
    # 16 ranks on 2 nodes: 8 remote peers. LL: 6.6 + 0.6 + 11.4 + 8 x 1 = 26.6 us (Intel and
    # others), 6.6 + 0.6 + 11.4 + 8 x 2 = 34.6 us (AMD); Simple (Intel): 8.4 + 3.4 +
    # max(14.0, 11.4) + 8 x 3 = 49.8 us
    intel = _group(16, 2)
    amd = dataclasses.replace(intel, host_cpu="amd")
    assert _pair(intel, "LL").latency_s == pytest.approx(26.6 * US)
    assert _pair(amd, "LL").latency_s == pytest.approx(34.6 * US)
    assert _pair(intel, "Simple").latency_s == pytest.approx(49.8 * US)


def test_rounds_of_concurrent_peers() -> None:
    # across nodes 16 p2p channels / 2 a peer x 8 ops = 64 peers at once; in one node of 8,
    # 4 channels a peer (4 x 8 <= 32), 32 / 4 x 8 = 64
    lib = load_library("nccl")
    assert p2p_rounds(lib, _group(256, 32), 248) == 4  # ceil(248 / 64)
    assert p2p_rounds(lib, _group(256, 32), 64) == 1
    assert p2p_rounds(lib, _group(8, 1), 7) == 1
    assert p2p_rounds(lib, _group(8, 1), 0) == 0


def test_large_all_to_all_runs_at_the_nic_share() -> None:
    # 80 ranks on 10 nodes, V = 80 x 16 GiB: each rank sends 72/80 of its 16 GiB over its
    # 50 GB/s NIC share, 7/80 over NVLink; nccl-tests busbw = algbw x 79/80 -> 50 x 79/72
    pair = _pair(_group(80, 10), "Simple")
    assert pair.bus_bytes_per_s == pytest.approx(50e9 * 79 / 72)
    v = 80 * 16 * 2**30
    remote = v / 80 * 72 / 80
    t_net, t_link = pair.parts_s(v)
    assert float(t_net) == pytest.approx((remote + 16 * 131072) / 50e9)
    assert float(t_net) > float(t_link)


def test_forcing_a_collective_algorithm_leaves_sends_alone() -> None:
    # NCCL_ALGO does not reach ncclSend/ncclRecv: --algorithm ring still prices p2p
    forced = collective_cost("all_to_all", 1e6, 8, "h100-sxm", algorithm="ring")
    plain = collective_cost("all_to_all", 1e6, 8, "h100-sxm")
    assert forced.algorithm == "p2p"
    assert forced.predicted_s == pytest.approx(plain.predicted_s)


def test_cli_json_keeps_the_contract(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["collective", "all-to-all", "--bytes", "1e6", "--devices", "64"]
    assert main([*argv, "--hw", "h100-sxm", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["algorithm"] == "p2p" and data["protocol"] == "LL"
    assert data["predicted_s"] == pytest.approx(75.146875 * US, rel=1e-9)
    assert data["t_s"] < data["predicted_s"]
    assert [t["tier"] for t in data["tiers"]] == ["scale_up", "scale_out"]
