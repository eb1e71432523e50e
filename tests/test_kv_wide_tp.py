"""Tensor parallelism wider than the KV heads splits the KV cache over the batch (issue 27): each
of tp ranks keeps 1/tp of the cache, not 1/G of it (the cache replicated tp/G times)."""

from __future__ import annotations

import json

import pytest

from shardline.cli.main import main


def _plan(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main(["plan", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["plans"][0]


@pytest.mark.parametrize("tp, batch, seq", [(16, 256, 2048), (16, 64, 4096), (8, 32, 1024)])
def test_kv_cache_splits_over_the_batch(
    capsys: pytest.CaptureFixture[str], tp: int, batch: int, seq: int
) -> None:
    """LLaMA-3.1-70B (L = 80 layers, G = 8 KV heads, E = 128 head dim), int8 KV cache on v5e:
    per device 2 L G E T B x 1 B / tp, whatever tp is beside G; and the step reads at least the
    device's weights and cache from HBM: t_memory >= (weights + cache) / 819 GB/s."""
    p = _plan(
        capsys, "--model", "llama-3.1-70b", "--hw", "tpu-v5e", "--devices", str(tp),
        "--tp", str(tp), "--phase", "decode", "--batch", str(batch), "--seq-len", str(seq),
        "--weight-dtype", "int8", "--kv-dtype", "int8",
    )  # fmt: skip
    kv = 2 * 80 * 8 * 128 * seq * batch * 1 / tp
    assert p["memory"]["kv_cache_bytes"] == pytest.approx(kv, rel=1e-12)
    assert p["t_memory_s"] >= (p["memory"]["weights_bytes"] + kv) / 819e9


def test_batch_256_fits_a_4x4_v5e(capsys: pytest.CaptureFixture[str]) -> None:
    """The same model at batch 256 with 4,096 tokens of int8 context on 16 v5e (16 GB each):
    weights 70.6e9 x 1 B / 16 = 4.4 GB plus cache 2 x 80 x 8 x 128 x 4096 x 256 / 16 = 10.7 GB
    fit 16 GB (the cache replicated over the tp / G = 2 ranks of a KV head, 21.5 GB, did not)."""
    p = _plan(
        capsys, "--model", "llama-3.1-70b", "--hw", "tpu-v5e", "--devices", "16", "--tp", "16",
        "--phase", "decode", "--batch", "256", "--seq-len", "4096", "--weight-dtype", "int8",
        "--kv-dtype", "int8",
    )  # fmt: skip
    kv = 2 * 80 * 8 * 128 * 4096 * 256 / 16
    assert kv == pytest.approx(10.737e9, rel=1e-3)
    assert p["fits"] and p["memory"]["total_bytes"] < 16e9


def test_decode_bound_is_the_hbm_time_not_hbm_plus_collectives(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The book's LLaMA-3-70B on a 4x4 v5e (int8 weights and cache, batch 32, 8,192 tokens of
    context): the step is bound by HBM, T = (weights + cache) / (16 chips x 819 GB/s) =
    (70.55e9 + 2 x 80 x 8 x 128 x 8192 x 32) B / (16 x 819e9 B/s) = 8.66 ms (the book: 8.5 ms
    with 70e9 parameters). The TP collectives do not wait on the HBM stream of the next layer's
    weights and cache, so the bound is max(T_mem, T_math + T_comms), not T_mem + T_comms."""
    p = _plan(
        capsys, "--model", "llama-3.1-70b", "--hw", "tpu-v5e", "--devices", "16", "--tp", "16",
        "--phase", "decode", "--batch", "32", "--seq-len", "8192", "--dtype", "int8",
    )  # fmt: skip
    t_hbm = (70_553_706_496 + 2 * 80 * 8 * 128 * 8192 * 32) / (16 * 819e9)
    assert t_hbm == pytest.approx(8.66e-3, rel=1e-3)
    # the activations add 0.6% of HBM traffic beside the weights and the cache
    assert p["latency_s"] == pytest.approx(t_hbm, rel=0.01)
    assert p["t_network_s"] > 0.4 * p["t_memory_s"]  # the collectives are not free ...
    assert p["latency_s"] == pytest.approx(p["t_memory_s"], rel=1e-12)  # ... but hidden
    assert p["latency_s"] >= p["t_compute_s"] + p["t_network_s"]
    assert p["predicted_s"] >= p["latency_s"]
