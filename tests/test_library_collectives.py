"""The library-level collective model (NCCL's tuner as data) and the cluster flags.

Every expected value is NCCL's own arithmetic written out with the constants of
src/shardline/collectives/libraries/nccl.toml (NVIDIA/nccl src/graph/tuning.cc, NCCL 2.30.7) and
the chip figures of src/shardline/hardware/catalog/h100-sxm.toml (18 NVLink 4 links x 25 GB/s
= 450 GB/s; ring bus efficiency 0.82; NVLS 0.61 of V/W; launch 4 us).
"""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from shardline.cli.main import main
from shardline.collectives import NetworkOptions, collective_cost, collective_over, mesh_networks
from shardline.errors import InputError
from shardline.hardware import load_chip
from shardline.hardware.cluster import chip_with_cluster

H100 = load_chip("h100-sxm")
US = 1e-6
RING_BUS = 0.82 * 450e9  # Simple-protocol busbw inside an 8-GPU node


def test_small_all_reduce_runs_ring_ll() -> None:
    # ring / LL: latency 6.6 + 14 steps x 0.6 us; bus min(141 GB/s Hopper LL cap, 0.5 x 369 GB/s)
    # algbw = bus x n / (2(n-1)) = 141e9 x 8/14
    v = 32768
    c = collective_cost("all_reduce", v, 8, H100)
    assert (c.algorithm, c.protocol, c.library) == ("ring", "LL", "nccl 2.30.7")
    expect = (6.6 + 14 * 0.6) * US + v / (141e9 * 8 / 14)
    assert c.predicted_s == pytest.approx(expect, rel=1e-12)
    assert c.t_s < c.predicted_s  # the line-rate bound stays below


def test_large_all_reduce_runs_nvls_in_the_switch() -> None:
    # NVLS: the switch reduces; latency 25 us (NVLink NVLS step), algbw 0.61 x 450 GB/s
    v = 2**30
    c = collective_cost("all_reduce", v, 8, H100)
    assert (c.algorithm, c.protocol) == ("in-switch", "Simple")
    assert c.predicted_s == pytest.approx(25 * US + v / (0.61 * 450e9), rel=1e-12)


def test_forced_ring_simple_and_the_candidates() -> None:
    # ring / Simple: 8.4 + 14 x 3.4 us; algbw 369 GB/s x 8/14
    v = 2**30
    c = collective_cost(
        "all_reduce", v, 8, H100, algorithm="ring", options=NetworkOptions(protocol="simple")
    )
    assert c.predicted_s == pytest.approx((8.4 + 14 * 3.4) * US + v / (RING_BUS * 8 / 14))
    assert [(p.algorithm, p.protocol) for p, _ in c.choice.candidates] == [("ring", "Simple")]
    with pytest.raises(InputError, match="unknown protocol"):
        collective_cost("all_reduce", v, 8, H100, options=NetworkOptions(protocol="LL64"))


def test_all_gather_ring_ll128_in_the_middle() -> None:
    # all-gather has no tree and no NVLS here; at 16 MiB LL128 wins: 14 + 7 x 1.9 us,
    # bus 0.92 x 369 GB/s, algbw = bus x n/(n-1) = x 8/7
    v = 16 * 2**20
    c = collective_cost("all_gather", v, 8, H100)
    assert (c.algorithm, c.protocol) == ("ring", "LL128")
    expect = (14.0 + 7 * 1.9) * US + v / (0.92 * RING_BUS * 8 / 7)
    assert c.predicted_s == pytest.approx(expect, rel=1e-12)


def test_two_nodes_ring_simple_latency_and_plateau() -> None:
    # 16 H100 = 2 nodes of 8 (8 x 400 Gb/s NICs per node). Ring / Simple all-reduce: 30 steps, 2
    # of them over the network: 8.4 + 28 x max(3.4, 3 x 1.0 net overhead) + 2 x max(14, 5) us,
    # times 1.4 once a channel's chunk passes 64 B (NCCL's plateau)
    v = 2**30
    c = collective_cost(
        "all_reduce", v, 16, H100, algorithm="ring", options=NetworkOptions(protocol="Simple")
    )
    latency = (8.4 + 28 * 3.4 + 2 * 14.0) * US * 1.4
    # bus: the slower of NVLink and the ranks' NICs (8 x 50 GB/s). Across nodes 7 of a node's
    # 8 ranks send to their ring successor over NVLink and one over its NIC, so NVLink carries
    # 7/8 of a rank's traffic and allows 369 GB/s x 8/7 = 421.7 GB/s: the NICs' 400 GB/s bind.
    # The network streams through 16 channels x 4 MiB of proxy buffer: bw x V / (V + 64 MiB)
    alg = min(RING_BUS * 8 / 7, 8 * 50e9) * 16 / 30 * v / (v + 16 * 4 * 2**20)
    assert c.predicted_s == pytest.approx(latency + v / alg, rel=1e-12)
    tiers = {t["tier"]: t for t in c.to_dict()["tiers"]}
    assert tiers["scale_up"]["devices"] == 8 and tiers["scale_out"]["devices"] == 2


def test_one_process_driving_eight_gpus_launches_eight_times() -> None:
    # nccl-tests -g 8: no collective shorter than 8 launches of 4 us
    c = collective_cost("all_reduce", 8, 8, H100, options=NetworkOptions(gpus_per_process=8))
    assert c.predicted_s == pytest.approx(8 * 4 * US)


def test_rccl_and_xla_chips() -> None:
    mi = collective_cost("all_reduce", 1e9, 8, load_chip("mi300x"))
    assert mi.library.startswith("rccl") and mi.protocol == "Simple"
    # a TPU's collectives are XLA's: the bus-efficiency curve, no protocol
    v5e = collective_cost("all_gather", 1e9, 16, load_chip("tpu-v5e"))
    assert (v5e.library, v5e.protocol, v5e.choice) == ("xla", "", None)
    with pytest.raises(InputError, match="--protocol needs a collective library"):
        collective_cost("all_gather", 1e9, 16, "tpu-v5e", options=NetworkOptions(protocol="LL"))


def test_vectorized_sizes_pick_per_size() -> None:
    sizes = np.array([8.0, 2.0**30])
    c = collective_cost("all_reduce", sizes, 8, H100)
    one = [float(collective_cost("all_reduce", float(s), 8, H100).predicted_s) for s in sizes]
    assert np.allclose(c.predicted_s, one, rtol=1e-12)
    assert c.algorithm == "ring / in-switch"


# --- the book's multi-axis form ------------------------------------------------------------------


def test_data_parallel_critical_batch_on_three_v5p_axes() -> None:
    # How to Scale Your Model, training chapter: pure data parallelism is compute-bound when the
    # batch per chip exceeds C / (W_ici x n_axes): 4.59e14 / 1.8e11 = 2550 on one axis, 850 on
    # three. Gradient all-reduce of a bf16 D x F weight: V = 2 D F bytes; backward matmuls
    # T_math = 4 b D F / C for b tokens per chip; b* = T_comm x C / (4 D F).
    v5p = load_chip("tpu-v5p")
    nets = mesh_networks(v5p, [("X", 16), ("Y", 20), ("Z", 28)])
    d = f = 8192
    peak = v5p.peak("bf16")

    def critical(multi_axis: str) -> float:
        c = collective_over(
            "all_reduce", 2 * d * f, list(nets.values()), v5p, multi_axis=multi_axis
        )
        return float(c.t_bandwidth_s) * peak / (4 * d * f)

    # simultaneous: 2 (N-1)/N V / (3 rings x 2W) -> C (N-1)/N / (6W), N = 8960
    assert critical("simultaneous") == pytest.approx(peak * 8959 / 8960 / (6 * 9e10), rel=1e-9)
    assert critical("simultaneous") == pytest.approx(850, rel=0.001)
    assert critical("sequential") == pytest.approx(2550, rel=0.001)


# --- the cluster flags ---------------------------------------------------------------------------


def test_cluster_flags_change_the_scale_out() -> None:
    one = chip_with_cluster(H100, gpus_per_node=1, nics_per_node=1, nic_bytes_per_s=50e9)
    assert one.interconnect is not None and one.interconnect.scale_up_devices == 1
    c = collective_cost("all_reduce", 2**30, 2, one, algorithm="ring")
    assert [t["tier"] for t in c.to_dict()["tiers"]] == ["scale_out"]
    off = chip_with_cluster(H100, nvls=False)
    assert collective_cost("all_reduce", 2**30, 8, off).algorithm == "ring"


def _json(argv: list[str], capsys: pytest.CaptureFixture[str]) -> dict:  # type: ignore[type-arg]
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def test_collective_cli_contract(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["collective", "all-reduce", "--bytes", "131072", "--devices", "16", "--hw", "h100"]
    argv += ["--gpus-per-node", "8", "--nics-per-node", "8", "--nic-bw", "400 Gb/s"]
    out = _json([*argv, "--scale-out", "roce"], capsys)
    for key in ("predicted_s", "t_s", "algorithm", "protocol", "tiers", "library"):
        assert key in out
    assert out["tiers"][1]["bus_bytes_per_s"] == pytest.approx(8 * 50e9 * 0.96)  # RoCE 0.96
    efa = _json([*argv, "--scale-out", "efa"], capsys)
    assert efa["predicted_s"] > out["predicted_s"]  # EFA: 20 us per network step, not 2.7-14
    sys_out = _json(["collective", "all-gather", "--bytes", "1e9", "--devices", "16",
                     "--system", "dgx-h100"], capsys)  # fmt: skip
    assert sys_out["devices"] == 16 and sys_out["protocol"] == "Simple"


def test_system_flags_reach_shard_einsum_compare_and_plan(
    capsys: pytest.CaptureFixture[str],
) -> None:
    slow, fast = ["--nic-bw", "10 Gb/s"], ["--nic-bw", "800 Gb/s"]
    einsum = ["einsum", "A[M,K_X] * B[K_X,N] -> C[M,N]", "--dims", "M=8192,K=8192,N=8192"]
    einsum += ["--mesh", "X=16"]
    shard = ["shard", "8192", "8192", "8192", "--devices", "16", "--along", "k"]
    compare = ["compare", "8192", "8192", "8192", "--devices", "16"]
    for argv in (einsum, shard, compare):
        a, b = _json([*argv, *slow], capsys), _json([*argv, *fast], capsys)
        assert json.dumps(a) != json.dumps(b), argv
    plan = ["plan", "examples/seed003_stack.toml", "--devices", "16", "--tp", "16"]
    a, b = _json([*plan, *slow], capsys), _json([*plan, *fast], capsys)
    assert a["plans"][0]["predicted_s"] > b["plans"][0]["predicted_s"]


def test_bad_cluster_flags(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["collective", "all-reduce", "--bytes", "1e6", "--devices", "16"]
    for extra, words in (
        (["--nic-bw", "-5"], "--nic-bw must be a finite rate of at least 1 B/s"),
        (["--scale-out", "carrier-pigeon"], "unknown scale-out fabric"),
        (["--system", "no-such-system"], "system"),
        (["--protocol", "LL64"], "unknown protocol"),
        (["--gpus-per-node", "0"], "gpus-per-node"),
        # 16 devices on nodes of 6: 2 full nodes and 4 left over, not two equal nodes of 8
        (["--gpus-per-node", "6"], "(2 full node(s) and 4 device(s) left over)"),
    ):
        assert main([*base, *extra]) == 2, extra
        err = capsys.readouterr().err.strip().splitlines()
        assert len(err) == 1 and err[0].startswith("error:") and words in err[0], (extra, err)


def test_collective_over_a_mesh_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    # the same v5p pod as above through `collective --mesh`: V = 2 x 8192 x 8192 bf16 gradient
    argv = ["collective", "all-reduce", "--bytes", str(2 * 8192 * 8192), "--hw", "tpu-v5p"]
    argv += ["--mesh", "X=16,Y=20,Z=28"]
    at_once = _json(argv, capsys)
    one_by_one = _json([*argv, "--multi-axis", "sequential"], capsys)
    # 2 (N-1)/N V / (3 x 2W) against the sum of three rings' 2 (n-1)/n V_i / (2W)
    v, w = 2 * 8192 * 8192, 9e10
    assert at_once["t_bandwidth_s"] == pytest.approx(2 * 8959 / 8960 * v / (6 * w), rel=1e-9)
    assert one_by_one["t_bandwidth_s"] / at_once["t_bandwidth_s"] == pytest.approx(3, rel=0.01)
    assert main([*argv, "--devices", "64"]) == 2
    assert "not the product of --mesh" in capsys.readouterr().err


def test_a_calibrated_floor_holds_without_a_library() -> None:
    # a chip file written by `calibrate --collectives` (library "none"): the bus-efficiency curve
    # gives 2 us for a tiny all-reduce, the measured floor of 1.92 ms wins
    import dataclasses

    assert H100.interconnect is not None
    chip = dataclasses.replace(
        H100,
        interconnect=dataclasses.replace(H100.interconnect, library="none"),
        achievable=dataclasses.replace(H100.achievable, collective_latency_s=1.92e-3),
    )
    c = collective_cost("all_reduce", 8, 8, chip)
    assert c.predicted_s == pytest.approx(1.92e-3) and c.choice is None


@pytest.mark.parametrize("name", ["nccl", "rccl"])
def test_every_library_table_names_its_source(name: str) -> None:
    from shardline.collectives.library import load_library

    lib = load_library(name)
    expected = {"version", "base_latency_us", "generation_caps_gb_s", "generations"}
    expected |= {"protocol_factors", "network_step_us"}
    expected |= {f"hw_latency_us.{link}" for link in ("nvlink", "pci", "net")}
    assert expected <= set(lib.sources)
    assert all(len(text) > 20 for text in lib.sources.values()), lib.sources
    # the constants NCCL's tuner uses for a ring over NVLink (tuning.cc, commit 5067397)
    assert lib.base_latency_s["ring"] == pytest.approx((6.6e-6, 14e-6, 8.4e-6))
    assert lib.hw_latency_s["nvlink"]["ring"] == pytest.approx((0.6e-6, 1.9e-6, 3.4e-6))


def test_nvls_tree_network_share_two_nodes_against_ten() -> None:
    # NCCL's NVLS tree joins the nodes with a double binary tree, each tree carrying V/2.
    # On 2 nodes a node is one tree's root (one child) and the other's leaf: V each way, so
    # algbw = network. From 3 nodes on an inner node has two children: 2V each way, algbw =
    # network / 2. DGX H100 figures: network 8 x 50 GB/s x 0.96 = 384 GB/s; NVLS 0.61 x 450.
    from shardline.collectives.algorithms import tree_net_share
    from shardline.collectives.library import Group, load_library
    from shardline.collectives.vocabulary import library_pairs

    assert (tree_net_share(2), tree_net_share(3), tree_net_share(10)) == (1.0, 0.5, 0.5)
    lib = load_library("nccl")
    nvls = 0.61 * 450e9  # 274.5 GB/s, below 384 GB/s

    def nvls_tree(nodes: int):  # type: ignore[no-untyped-def]
        group = Group(8 * nodes, nodes, "nvlink", RING_BUS, 384e9, nvls, False, "hopper", 11.4e-6)
        return next(
            p for p in library_pairs(lib, "all_reduce", group) if p.algorithm == "nvls-tree"
        )

    assert nvls_tree(2).alg_bytes_per_s == pytest.approx(nvls)  # min(274.5, 384 x 1)
    ten = nvls_tree(10)
    assert ten.alg_bytes_per_s == pytest.approx(384e9 / 2)  # min(274.5, 384 / 2) = 192 GB/s
    # latency: NVLink NVLS-tree step 25 us + 2 x floor(log2 10) = 6 network steps at
    # max(NCCL's NET NVLS-tree 20.9 us, the fabric's 11.4 us) = 25 + 6 x 20.9 us
    assert ten.latency_s == pytest.approx((25 + 6 * 20.9) * US)


def test_ring_across_nodes_uses_nvlink_for_seven_of_eight_sends() -> None:
    # 2 nodes of 8: each channel's ring enters a node at one GPU's NIC and leaves at another's,
    # so 7 of the 8 ranks send over the scale-up link and 1 over the network. A node whose
    # NICs outrun its scale-up ring (in-node busbw 315 GB/s, network 8 x 50 x 0.96 = 384 GB/s,
    # MI300X-like figures) reaches 315 x 8/7 = 360 GB/s of bus bandwidth across nodes.
    from shardline.collectives.library import Group, load_library, scale_up_share
    from shardline.collectives.vocabulary import library_pairs

    assert (scale_up_share(8, 1), scale_up_share(8, 2), scale_up_share(1, 2)) == (1.0, 7 / 8, 0.0)
    group = Group(16, 2, "nvlink", 315e9, 384e9, None, False, "hopper", 11.4e-6)
    ring = next(
        p
        for p in library_pairs(load_library("nccl"), "all_reduce", group)
        if (p.algorithm, p.protocol) == ("ring", "Simple")
    )
    assert ring.bus_bytes_per_s == pytest.approx(360e9)
    assert ring.alg_bytes_per_s == pytest.approx(360e9 * 16 / 30)  # algbw = busbw x n / 2(n-1)


def test_nvls_tree_ramps_over_nccls_nvls_channel_count() -> None:
    # NCCL gives NVLS 16 channels on Hopper and 32 on Blackwell across nodes, 24 on more than
    # 2 nodes with >= 48 GB/s NICs and <= 8 ranks a node (src/transport/nvls.cc). The Simple
    # protocol across nodes reaches half its rate at channels x 4 MiB (NCCL_BUFFSIZE).
    from shardline.collectives.library import Group, load_library, nvls_channels
    from shardline.collectives.vocabulary import library_pairs

    lib = load_library("nccl")

    def group(generation: str, nodes: int, ppn: int = 8) -> Group:
        n = ppn * nodes
        return Group(n, nodes, "nvlink", 680e9, 384e9, 425e9, False, generation, 11.4e-6, 0.0, 50e9)

    assert nvls_channels(lib, group("hopper", 2)) == 16
    assert nvls_channels(lib, group("blackwell", 2, 64)) == 32
    assert nvls_channels(lib, group("blackwell", 4)) == 24
    tree = next(
        p
        for p in library_pairs(lib, "all_reduce", group("blackwell", 2, 64))
        if p.algorithm == "nvls-tree"
    )
    assert tree.net_half_bytes == 32 * 4 * 2**20  # 128 MiB
    ring = next(
        p
        for p in library_pairs(lib, "all_reduce", group("blackwell", 2, 64))
        if (p.algorithm, p.protocol) == ("ring", "Simple")
    )
    assert ring.net_half_bytes == 16 * 4 * 2**20  # the ring keeps 16 channels: 64 MiB


def test_ll_cap_across_nodes_follows_the_host_cpu() -> None:
    # NCCL's llMaxBws: in one node the GPU generation's row (Hopper 141 GB/s); across nodes the
    # host CPU's row, AMD hosts [22.5 GB/s on 2 nodes, 19.0 on more], every other host
    # [39.0, 20.4] (src/graph/tuning.cc, index1 = nNodes == 1 ? compCap : cpuVendor == AMD).
    # Ring / LL bus = min(cap, 0.5 x Simple bus); the Simple bus across 2 nodes of 8 H100 is
    # min(369 x 8/7, 384) = 384 GB/s, half of it 192 GB/s, so the cap binds everywhere.
    from shardline.collectives.library import Group, load_library
    from shardline.collectives.vocabulary import library_pairs

    lib = load_library("nccl")

    def ring_ll_bus(nodes: int, host: str | None) -> float:
        n = 8 * nodes
        g = Group(
            n, nodes, "nvlink", RING_BUS, 384e9, None, False, "hopper", 11.4e-6, 0.0, None, host
        )
        pair = next(
            p
            for p in library_pairs(lib, "all_reduce", g)
            if (p.algorithm, p.protocol) == ("ring", "LL")
        )
        return pair.bus_bytes_per_s

    assert ring_ll_bus(2, "amd") == pytest.approx(22.5e9)
    assert ring_ll_bus(2, "intel") == pytest.approx(39.0e9)
    assert ring_ll_bus(2, None) == pytest.approx(39.0e9)  # NCCL's non-AMD row
    assert ring_ll_bus(4, "amd") == pytest.approx(19.0e9)
    assert ring_ll_bus(4, "arm") == pytest.approx(20.4e9)
    assert ring_ll_bus(1, "amd") == pytest.approx(min(141e9, 0.5 * RING_BUS))  # one node: GPU row


def test_host_cpu_flag_and_system_field(capsys: pytest.CaptureFixture[str]) -> None:
    from shardline.hardware.systems import load_system

    assert load_system("dgx-a100").host_cpu == "amd"
    assert load_system("dgx-h100").host_cpu == "intel"
    times = {}
    base = ["collective", "all-reduce", "--bytes", "1048576", "--devices", "16", "--json"]
    for host in ("amd", "intel"):
        forced = ["--host-cpu", host, "--algorithm", "ring", "--protocol", "LL"]
        assert main(base + forced) == 0
        times[host] = json.loads(capsys.readouterr().out)["predicted_s"]
    assert times["amd"] > times["intel"]  # 22.5 against 39 GB/s of LL bus bandwidth
    with pytest.raises(SystemExit) as bad:
        main(["collective", "all-reduce", "--bytes", "8", "--devices", "16", "--host-cpu", "x"])
    assert bad.value.code == 2
    assert capsys.readouterr().err.startswith("error: argument --host-cpu")


def test_two_node_tree_reads_intra_bandwidth_from_nccl_2_14_3() -> None:
    # NCCL >= 2.14.3 reads a tree's intra-node bandwidth on <= 2 nodes (tuning.cc) and its
    # search raises that to at most 2 x the network's (search.cc pass 2). 2 nodes of 8 A100,
    # four 100 Gb/s EFA NICs (p4de): network 50 GB/s x 0.95 = 47.5 GB/s, in-node ring 230 GB/s.
    # Tree bus = min(230, 2 x 47.5) x 0.92 = 87.4 GB/s (under 16 channels x Ampere's 23.6 GB/s
    # per channel on 2 nodes = 377.6); algbw = bus / 2 = 43.7 GB/s, against the ring's
    # 47.5 x 16/30 = 25.3 GB/s. NCCL 2.9.9 predates it: the tree's bus is the ring's, 47.5.
    from shardline.collectives.library import Group, load_library, version_at_least
    from shardline.collectives.vocabulary import library_pairs

    lib = load_library("nccl")

    def simple(version: str, algorithm: str, nodes: int = 2) -> float:
        g = Group(8 * nodes, nodes, "nvlink", 230e9, 47.5e9, None, False, "ampere", 20e-6)
        g = dataclasses.replace(g, library_version=version)
        return next(
            p.alg_bytes_per_s
            for p in library_pairs(lib, "all_reduce", g)
            if (p.algorithm, p.protocol) == (algorithm, "Simple")
        )

    assert simple("2.18.3", "tree") == pytest.approx(min(230e9, 2 * 47.5e9) * 0.92 / 2)
    assert simple("", "tree") == pytest.approx(43.7e9)  # unknown: the current release
    assert simple("2.9.9", "tree") == pytest.approx(47.5e9 * 0.92 / 2)
    assert simple("2.18.3", "ring") == pytest.approx(47.5e9 * 16 / 30)
    # three nodes: the network bandwidth again (bwInter), min(230 / (7/8), 47.5) x 0.92 / 2
    assert simple("2.18.3", "tree", nodes=3) == pytest.approx(47.5e9 * 0.92 / 2)
    # RCCL loads hand-built topology models instead of NCCL's search: no raise, the ring's bus
    rccl = load_library("rccl")
    g = Group(16, 2, "nvlink", 230e9, 47.5e9, None, False, "cdna4", 20e-6)
    tree = next(
        p.alg_bytes_per_s
        for p in library_pairs(rccl, "all_reduce", g)
        if (p.algorithm, p.protocol) == ("tree", "Simple")
    )
    assert tree == pytest.approx(47.5e9 * 0.92 / 2)
    assert version_at_least("2.14.3", "2.14.3") and not version_at_least("2.9.9", "2.14.3")
    assert version_at_least("unknown (not printed)", "2.14.3")


def test_library_version_reaches_the_price_of_a_two_node_all_reduce() -> None:
    # 1 GiB over 2 p4de-like nodes: NCCL 2.9.9 prices the ring (25.3 GB/s of algbw), the
    # current release the tree at up to 1.7x that (43.7 GB/s); both with the same latency terms.
    chip = chip_with_cluster(
        load_chip("a100-80gb"),
        gpus_per_node=8,
        nics_per_node=4,
        nic_bytes_per_s=12.5e9,
        scale_out="efa",
    )
    v = 2**30
    old = collective_cost(
        "all_reduce", v, 16, chip, options=NetworkOptions(library_version="2.9.9")
    )
    new = collective_cost("all_reduce", v, 16, chip)
    assert (old.algorithm, new.algorithm) == ("ring", "tree")
    assert 1.4 < old.predicted_s / new.predicted_s < 1.75


# --- the network plugin's own latency (aws-ofi-nccl on EFA) ---------------------------------


def _efa_candidates(chip: str) -> dict[tuple[str, str], float]:
    """(algorithm, protocol) -> latency (us) of each pair NCCL could run for a 32 KiB all-reduce
    over 2 nodes of 8 GPUs with 4 x 100 Gb/s EFA NICs each (p4de.24xlarge's shape)."""
    gpu = chip_with_cluster(
        load_chip(chip), gpus_per_node=8, nics_per_node=4, nic_bytes_per_s=12.5e9, scale_out="efa"
    )
    cost = collective_cost("all_reduce", 32768, 16, gpu)
    return {(p.algorithm, p.protocol): p.latency_s / US for p, _ in cost.choice.candidates}


def test_efa_plugin_latency_joins_each_network_step_on_a100() -> None:
    """On p4d/p4de (A100) aws-ofi-nccl reports a network latency of 75 us to NCCL
    (src/platform-aws.cpp platform_data_map) and NCCL's own tuner adds it to every network step,
    twice for Simple (tuning.cc: interLat = hwLat[NET] + latencyInter; the flush adds it again).
    One node's 8 ranks: 7 NVLink steps a tree direction, 2(16-1) - 2 = 28 NVLink steps and 2
    network steps a ring; NVLink per step: tree LL 0.6, tree Simple 4.0, ring LL 0.6 raised to
    the 1 us network proxy overhead, ring Simple 3.4 (x3 proxy overhead = 3.0 is lower)."""
    got = _efa_candidates("a100-80gb")
    assert got[("tree", "LL")] == pytest.approx(6.8 + 2 * (7 * 0.6 + (5.0 + 75.0)))  # 175.2
    assert got[("tree", "Simple")] == pytest.approx(8.4 + 2 * (7 * 4.0 + (14.0 + 2 * 75.0)))
    assert got[("ring", "LL")] == pytest.approx(6.6 + 28 * 1.0 + 2 * (2.7 + 75.0))  # 190.0
    assert got[("ring", "Simple")] == pytest.approx(8.4 + 28 * 3.4 + 2 * (14.0 + 2 * 75.0))


def test_efa_on_hopper_keeps_aws_tuner_step() -> None:
    """On p5 (H100) aws-ofi-nccl's own tuner decides, with its 20 us network step
    (nccl_ofi_model.cpp, P5 net_lat); the A100 plugin latency does not apply: tree LL = 6.8 +
    2 x (7 x 0.6 + max(5.0, 20)) us."""
    got = _efa_candidates("h100-sxm")
    assert got[("tree", "LL")] == pytest.approx(6.8 + 2 * (7 * 0.6 + 20.0))  # 55.2


def test_plugin_latency_is_efa_only() -> None:
    """The same A100 nodes on InfiniBand pay NCCL's measured RDMA step (network_step_us.ib,
    11.4 us), not the EFA plugin's 75 us: tree LL = 6.8 + 2 x (7 x 0.6 + 11.4) us."""
    gpu = chip_with_cluster(
        load_chip("a100-80gb"), gpus_per_node=8, nics_per_node=4, nic_bytes_per_s=25e9,
        scale_out="ib",
    )  # fmt: skip
    lowest = NetworkOptions(protocol="LL")
    cost = collective_cost("all_reduce", 32768, 16, gpu, algorithm="tree", options=lowest)
    assert cost.choice.latency_s == pytest.approx((6.8 + 2 * (7 * 0.6 + 11.4)) * US)
