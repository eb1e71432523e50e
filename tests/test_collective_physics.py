"""Collective physics a careful reader checks (issue 27): a send over several links and hops, a
ring of 2, the end-to-end efficiency of XLA's ICI collectives, in-switch reduction across nodes
(NVLS inside the node, --sharp between nodes) and a named ring that does not get the in-switch
time."""

from __future__ import annotations

import json

import pytest

from shardline.cli.main import main


def _collective(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code = main(["collective", *argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("nbytes, hops, ports", [(2**24, 8, 2), (1e8, 3, 1), (5e6, 1, 4)])
def test_send_over_ports_and_hops(
    capsys: pytest.CaptureFixture[str], nbytes: float, hops: int, ports: int
) -> None:
    """Cut-through: t = V / (P W) + H alpha; v5e ICI W = 45 GB/s one way, alpha = 1 us
    (16 MiB to the far side of a ring of 16: both directions, 8 hops = 194 us, not 374)."""
    r = _collective(
        capsys, "send", "--bytes", str(nbytes), "--devices", "16", "--hw", "tpu-v5e",
        "--hops", str(hops), "--ports", str(ports),
    )  # fmt: skip
    assert r["t_s"] == pytest.approx(nbytes / (ports * 45e9) + hops * 1e-6, rel=1e-12)
    assert r["predicted_s"] >= r["t_s"]


def test_send_to_far_side_of_a_ring_is_194_us(capsys: pytest.CaptureFixture[str]) -> None:
    r = _collective(
        capsys, "send", "--bytes", "16MiB", "--devices", "16", "--hw", "tpu-v5e",
        "--hops", "8", "--ports", "2",
    )  # fmt: skip
    assert r["t_s"] == pytest.approx(194.4e-6, rel=1e-3)


def test_send_flags_are_checked(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["collective", "all-gather", "--bytes", "1e6", "--devices", "4", "--hops", "2"])
    assert "send only" in capsys.readouterr().err
    argv = ["collective", "send", "--bytes", "1e6", "--devices", "4", "--hw", "tpu-v5e"]
    assert main([*argv, "--ports", "9"]) == 2  # v5e has 4 ICI links
    assert main([*argv, "--hops", "0"]) == 2


@pytest.mark.parametrize("nbytes", [1e8, 3e9])
def test_a_ring_of_two_is_one_link_pair(capsys: pytest.CaptureFixture[str], nbytes: float) -> None:
    """Both directions of a ring of 2 reach the same neighbour over one link pair: the
    reduce-scatter is the line's (n-1)/n V/W + alpha, not half of it (TPU v2, a wrapped axis of
    2: 1.13 ms measured where the two-link ring gave 0.56 ms)."""
    w = 62e9
    r = _collective(
        capsys, "reduce-scatter", "--bytes", str(nbytes), "--devices", "2", "--topology",
        "ring", "--link-bw", str(w), "--latency", "1e-6", "--hw", "tpu-v5e",
    )  # fmt: skip
    assert r["t_s"] == pytest.approx(0.5 * nbytes / w + 1e-6, rel=1e-12)


@pytest.mark.parametrize("nbytes, n", [(1e7, 8), (1e8, 8), (1e7, 16), (1e6, 8)])
def test_tpu_efficiency_is_end_to_end(
    capsys: pytest.CaptureFixture[str], nbytes: float, n: int
) -> None:
    """XLA's ICI all-gather reaches ~95% of the link rate from 10 MB up, latency included: the
    realistic time is max(alpha-beta bound, t_bandwidth / 0.95), the 0.95 applied once and no
    latency on top. v5e: a line of 8 ((n-1)/n V/W, W = 45 GB/s, alpha (n-1)); the full axis
    of 16 is a ring ((n-1)/n V/(2W), alpha floor(n/2))."""
    r = _collective(
        capsys, "all-gather", "--bytes", str(nbytes), "--devices", str(n), "--hw", "tpu-v5e"
    )
    if n == 16:
        t_bw, t_lat = (n - 1) / n * nbytes / (2 * 45e9), (n // 2) * 1e-6
    else:
        t_bw, t_lat = (n - 1) / n * nbytes / 45e9, (n - 1) * 1e-6
    assert r["t_s"] == pytest.approx(t_bw + t_lat, rel=1e-12)
    assert r["predicted_s"] == pytest.approx(max(t_bw + t_lat, t_bw / 0.95), rel=1e-12)
    if nbytes >= 1e7 and n == 8:
        assert t_bw / r["predicted_s"] == pytest.approx(0.95, abs=0.005)


def test_nvls_inside_the_node_and_sharp_between(capsys: pytest.CaptureFixture[str]) -> None:
    """A 1 GB all-reduce over 64 H100 (8 nodes of 8): inside the node NVLS reduces in the
    switch, V/W_nvl + 2 alpha (W = 18 x 25 GB/s); between nodes the V/8 shard runs 2 (n-1)/n
    (V/8)/W_nic + 2 alpha_nic, or with --sharp the switch's V/8 / W_nic + 2 alpha_nic (W_nic = 50
    GB/s, alpha 5 us). The levels pipeline: max of the bandwidth terms, latencies add."""
    v, w_nvl, w_nic = 1e9, 18 * 25e9, 50e9
    inside = v / w_nvl
    lat = 2 * 1e-6 + 2 * 5e-6
    plain = _collective(capsys, "all-reduce", "--bytes", "1e9", "--devices", "64", "--hw", "h100")
    assert plain["t_s"] == pytest.approx(max(inside, 2 * 7 / 8 * v / 8 / w_nic) + lat, rel=1e-9)
    sharp = _collective(
        capsys, "all-reduce", "--bytes", "1e9", "--devices", "64", "--hw", "h100", "--sharp"
    )
    assert sharp["t_s"] == pytest.approx(max(inside, v / 8 / w_nic) + lat, rel=1e-9)
    off = _collective(
        capsys, "all-reduce", "--bytes", "1e9", "--devices", "64", "--hw", "h100", "--no-sharp"
    )
    assert off["t_s"] == plain["t_s"]


def test_a_named_ring_does_not_get_the_in_switch_time(capsys: pytest.CaptureFixture[str]) -> None:
    """--algorithm ring inside one H100 node: the bound is the ring's 2 (n-1)/n V/W + 2 alpha,
    not NVLS's V/W; in `plan` too (the tensor-parallel all-reduces of a tp8 plan)."""
    v, w = 1e9, 18 * 25e9
    r = _collective(
        capsys, "all-reduce", "--bytes", "1e9", "--devices", "8", "--hw", "h100",
        "--algorithm", "ring",
    )  # fmt: skip
    assert r["t_s"] == pytest.approx(2 * 7 / 8 * v / w + 2e-6, rel=1e-9)
    plans = {}
    for alg in ([], ["--algorithm", "ring"]):
        code = main(
            ["plan", "--model", "llama-3.1-8b", "--hw", "h100", "--devices", "8", "--tp", "8",
             "--batch", "8", "--seq-len", "2048", "--json", *alg]
        )  # fmt: skip
        assert code == 0
        (p,) = json.loads(capsys.readouterr().out)["plans"]
        (term,) = [c for c in p["comm"] if c["purpose"] == "tp" and c["kind"] == "all_reduce"]
        plans[bool(alg)] = term
    nvls, ring = plans[False], plans[True]
    assert ring["bytes"] == nvls["bytes"]
    # per call V: ring 1.75 V/W + 2 alpha against V/W + 2 alpha
    per_call = ring["bytes"] / ring["calls"]
    assert ring["t_s"] == pytest.approx(ring["calls"] * (1.75 * per_call / w + 2e-6), rel=1e-9)
    assert nvls["t_s"] == pytest.approx(nvls["calls"] * (per_call / w + 2e-6), rel=1e-9)
