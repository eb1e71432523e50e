"""Reported values a careful reader checks (issue 27): total_flops counts the work replicated
over a mesh axis; a TPU batched dot product is not priced as 128 x 128 padded MXU tiles."""

from __future__ import annotations

import json

import pytest

from shardline.cli.main import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("x, z", [(4, 2), (2, 8), (8, 1)])
def test_total_flops_counts_replicated_work(
    capsys: pytest.CaptureFixture[str], x: int, z: int
) -> None:
    """In[B_X, D] W[D, F] on a mesh X, Z: Z splits nothing, so every device of a Z group repeats
    its X share: total = 2 B D F x Z; the einsum once is 2 B D F."""
    b, d, f = 4096, 1024, 2048
    mesh = f"X={x},Z={z}" if z > 1 else f"X={x}"
    r = _run(
        capsys, "einsum", "In[B_X,D] * W[D,F] -> Out[B_X,F]", "--dims", f"B={b},D={d},F={f}",
        "--mesh", mesh, "--hw", "tpu-v5e",
    )  # fmt: skip
    assert r["unsharded_flops"] == 2 * b * d * f
    assert r["total_flops"] == 2 * b * d * f * z
    assert r["per_device"]["flops"] * x * z == r["total_flops"]


@pytest.mark.parametrize("b, h, e", [(64, 32, 128), (512, 8, 64), (8, 64, 256)])
def test_tpu_batched_dot_product_runs_on_the_vpu(
    capsys: pytest.CaptureFixture[str], b: int, h: int, e: int
) -> None:
    """q[B,H,E] k[B,H,E] -> s[B,H]: M = N = 1, a dot product per (B, H). On the MXU padded to
    128 x 128 it would take 128² times its FLOPs; XLA multiplies and reduces on the VPU (v5e:
    6.144e12 FLOP/s fp32), so the time is max(2BHE / 6.144e12, bytes / 7.37e11 achievable HBM)
    with bytes = 2 B (2 BHE + BH) in bf16."""
    r = _run(
        capsys, "einsum", "q[B,H,E] * k[B,H,E] -> s[B,H]", "--dims", f"B={b},H={h},E={e}",
        "--hw", "tpu-v5e",
    )  # fmt: skip
    flops = 2 * b * h * e
    nbytes = 2 * (2 * b * h * e + b * h)
    assert r["predicted_s"] == pytest.approx(max(flops / 6.144e12, nbytes / 7.37e11), rel=1e-9)
    assert r["t_lower_s"] == pytest.approx(max(flops / 197e12, nbytes / 819e9), rel=1e-9)
