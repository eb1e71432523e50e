"""The expert-parallel dispatch and combine at the libraries' published speeds
(shardline.collectives.ep_kernels, libraries/ep_kernels.toml)."""

from __future__ import annotations

from math import comb
from pathlib import Path

import pytest

from shardline.collectives import collective_over
from shardline.collectives.ep_kernels import destinations, kernel_s, pick_table
from shardline.hardware import load_chip
from shardline.io.workload_toml import load_workload
from shardline.planning.api import plan
from shardline.planning.network import MeshNetwork
from shardline.strategies.ep_dispatch import published_dispatch

E2E = Path(__file__).parents[1] / "examples" / "e2e"


def test_destinations_count_the_own_group() -> None:
    """D = N (1 - C(E - E/N, k) / C(E, k)): 128 experts, top-8, 2 nodes of 64 experts each."""
    assert destinations(128, 8, 2) == pytest.approx(2 * (1 - comb(64, 8) / comb(128, 8)))
    assert destinations(128, 8, 2) == pytest.approx(1.9938, abs=1e-4)
    assert destinations(128, 8, 1) == 1.0  # one group: every token goes to it once
    assert destinations(8, 8, 8) == pytest.approx(8.0)  # all experts: every group


def test_hybridep_table_over_two_h100_nodes_is_the_published_row() -> None:
    """HybridEP's own benchmark (deepseek-ai/DeepEP docs/README_Hybrid-EP.md, hybrid-ep branch
    commit 17cfb817, H100, 16 ranks, 16 SMs, torch API): 4096 tokens of hidden 7168 per rank,
    top-8 of 128 experts (8 local), bf16 dispatch at 54.47 GB/s counted a token once per node
    it reaches, own node included. The priced dispatch must be that row's time."""
    chip = load_chip("h100-sxm")
    axis = MeshNetwork(chip, {"ep": 16}).axis_network("ep")
    assert axis is not None
    priced = published_dispatch("hybridep", chip, axis, 128, 8, 32)
    assert priced is not None and priced.groups == 2 and priced.table.sms == 16
    message = 4096 * 8 * 7168 * 2  # the k-copy message the model sends
    counted = 4096 * destinations(128, 8, 2) * 7168 * 2
    assert priced.seconds(message, "dispatch", False) == pytest.approx(counted / 54.47e9)
    assert priced.seconds(message, "combine", False) == pytest.approx(counted / 53.35e9)
    # fp8 counts 1 + 4/128 bytes an element at the fp8 row's 48.26 GB/s
    fp8 = priced.seconds(message / 2, "dispatch", True)
    assert fp8 == pytest.approx(counted / 2 * (1 + 4 / 128) / 48.26e9)


def test_rates_interpolate_between_node_counts_and_scale_with_the_nic() -> None:
    table = pick_table("hybridep", "h100-sxm", True, 16)
    assert table is not None
    # 3 nodes lie halfway between the 2- and 4-node rows: (54.47 + 47.36) / 2 GB/s
    assert kernel_s(table, "dispatch_bf16", 1e9, 3, 50e9) == pytest.approx(1e9 / 50.915e9)
    # past the last row the 8-node rate holds; a NIC twice as fast doubles it
    assert kernel_s(table, "combine", 1e9, 16, 50e9) == pytest.approx(1e9 / 46.57e9)
    assert kernel_s(table, "combine", 1e9, 8, 100e9) == pytest.approx(1e9 / (2 * 46.57e9))


def test_table_choice_follows_chip_span_and_sms() -> None:
    # inside one NVLink domain a chip without its own table borrows the library's first one
    # (HybridEP on GB200), scaled by its NVLink egress: H100's 450 GB/s over GB200's 900 GB/s
    borrowed = pick_table("hybridep", "h100-sxm", False, 32)
    assert borrowed is not None and borrowed.chips == ("gb200",)
    assert kernel_s(borrowed, "combine", 1e9, 8, 450e9) == pytest.approx(1e9 / (568.94e9 / 2))
    gb200 = pick_table("hybridep", "gb200", False, 0)
    assert gb200 is not None and gb200.sms == 32  # no SMs stated: the most published
    few = pick_table("hybridep", "gb200", False, 20)
    assert few is not None and few.sms == 16  # the most SMs at or under 20
    # across nodes another chip borrows the library's measured table (scaled by its NIC)
    deepep = pick_table("hierarchical", "b200", True, 20)
    assert deepep is not None and deepep.chips == ("h800",) and deepep.sms == 24
    assert pick_table("all-to-all", "gb200", False, 0) is None  # NCCL's all-to-all model


def test_two_node_qwen3_step_communication_matches_nsight() -> None:
    """Qwen3-30B-A3B on 16 H100s (two nodes), EP 16, MBS 1, GBS 1024, bf16, HybridEP, overlap
    off. NVIDIA's profile of this run (NVIDIA-NeMo/Megatron-Bridge skills/
    nemo-mbridge-perf-moe-comm-overlap/SKILL.md, commit 067f987d) puts its communication at
    8.25 s of the 24.71 s step. Per block and microbatch the model runs a dispatch and a combine
    forward and their gradients backward (a combine and a dispatch), each of 4096 tokens x D x
    2048 x 2 B at HybridEP's two-node rates, plus the routing map's all-gather (4096 x 128
    bools a rank): 64 x 48 x (2 x counted / 54.47e9 + 2 x counted / 53.35e9) x f + that, where
    f carries the tables' 4096 x 7168 message to this one of 4096 x 2048 (size_factor, a few
    percent)."""
    workload = load_workload(E2E / "qwen3-30b-a3b-bf16.toml").with_batch(1024)
    chosen = plan(
        workload, "h100-sxm", 16, tp=1, pp=1, dp=1, fsdp=1, ep=16, microbatches=64,
        ep_dispatch="hybridep", ep_comm_sms=32, zero=1, require_fit=False,
    ).plans[0]  # fmt: skip
    counted = 4096 * destinations(128, 8, 2) * 2048 * 2
    a2a_s = 64 * 48 * (2 * counted / 54.47e9 + 2 * counted / 53.35e9)
    assert a2a_s == pytest.approx(7.63, abs=0.01)
    chip = load_chip("h100-sxm")
    net = MeshNetwork(chip, {"ep": 16})
    routing_s = 64 * 48 * net.predicted("all_gather", 16 * 4096 * 128, "ep")
    axis = net.axis_network("ep")
    assert axis is not None
    priced = published_dispatch("hybridep", chip, axis, 128, 8, 32)
    assert priced is not None
    factor = priced.size_factor(4096 * 8 * 2048 * 2)
    assert 1.0 < factor < 1.1  # a message 3.5 times smaller than the tables' runs a little slower
    exposed = chosen.predicted_breakdown_s["exposed_comm_s"]
    assert exposed == pytest.approx(a2a_s * factor + routing_s, rel=1e-6)
    assert exposed == pytest.approx(8.25, rel=0.06)


def test_small_decode_messages_pay_the_all_to_all_models_size_penalty() -> None:
    """A decode step's dispatch is far smaller than the tables' 4096 x 7168 tokens: its time is
    the table's rate scaled by the all-to-all model's realistic-over-line-rate ratio at its size
    over the same ratio at the tables' size, never below the table (factor 1 at the measured
    size)."""
    chip = load_chip("h800")
    axis = MeshNetwork(chip, {"ep": 8}).axis_network("ep")
    assert axis is not None
    priced = published_dispatch("hierarchical", chip, axis, 256, 8, 0)
    assert priced is not None
    assert priced.size_factor(4096 * 8 * 7168 * 2) == pytest.approx(1.0)
    small = 16 * 8 * 7168 * 2  # 16 tokens a rank
    cost = collective_over("all_to_all", small * 8, [axis], chip)
    big = collective_over("all_to_all", 4096 * 8 * 7168 * 2 * 8, [axis], chip)
    ratio = (cost.predicted_s / cost.t_s) / (big.predicted_s / big.t_s)
    assert priced.size_factor(small) == pytest.approx(ratio) and ratio > 5


def test_fp8_training_sends_gradients_in_bf16() -> None:
    """Under fp8 training the tokens travel in bf16 between kernels, and so do their gradients:
    every all-to-all of Qwen3-30B-A3B over 8 GB200s (MBS 4) moves V = 8 ranks x 16,384 tokens
    x 8 copies x 2048 x 2 B, forward and backward alike (the dispatch's gradient was once sent
    at the block's 1 byte)."""
    workload = load_workload(E2E / "qwen3-30b-a3b-fp8.toml")
    chosen = plan(
        workload, "gb200", 8, tp=1, pp=1, dp=1, fsdp=1, ep=8, microbatches=16,
        ep_dispatch="hybridep", zero=1, require_fit=False,
    ).plans[0]  # fmt: skip
    (a2a,) = [c for c in chosen.comm if c.kind == "all_to_all"]
    assert a2a.calls == 16 * 48 * 4
    assert a2a.bytes / a2a.calls == pytest.approx(8 * 16384 * 8 * 2048 * 2)


def test_hybridep_is_refused_off_nvidia_and_tables_stay_on_nvidia(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from tests.cli_run import run_cli

    argv = ["plan", "--model", "mixtral-8x7b", "--devices", "8", "--ep", "8", "--batch", "8"]
    argv += ["--phase", "prefill"]
    code, out, err = run_cli(capsys, *argv, "--hw", "mi300x", "--ep-dispatch", "hybridep")
    assert code == 2 and out == "" and err.startswith("error: --ep-dispatch hybridep runs on")
    # DeepEP's idea (one copy per node) still prices on AMD, by the all-to-all model alone
    chip = load_chip("mi300x")
    axis = MeshNetwork(chip, {"ep": 8}).axis_network("ep")
    assert axis is not None and published_dispatch("hierarchical", chip, axis, 8, 2, 0) is None
    assert run_cli(capsys, *argv, "--hw", "mi300x", "--ep-dispatch", "hierarchical")[0] == 0
    # the dispatch kernels cannot hold every SM (an H100 has 132)
    code, _, err = run_cli(capsys, *argv, "--hw", "h100-sxm", "--ep-comm-sms", "132")
    assert code == 2 and "leaves no SMs for the compute: h100-sxm has 132" in err
