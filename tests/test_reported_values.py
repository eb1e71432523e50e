"""Reported values a careful reader checks (issue 27): total_flops counts the work replicated
over a mesh axis; a TPU batched dot product is not priced as 128 x 128 padded MXU tiles."""

from __future__ import annotations

import json
from pathlib import Path

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


def _text(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(list(argv)) == 0
    return capsys.readouterr().out


def test_fsdp_memory_parts_add_to_the_total(capsys: pytest.CaptureFixture[str]) -> None:
    """weights + gradients + optimizer + activations + KV + FSDP's gathered weights = total,
    in the JSON and in the text line (which names every part)."""
    argv = ("plan", "--model", "llama-3.1-8b", "--hw", "h100", "--devices", "16", "--fsdp", "16",
            "--batch", "16", "--seq-len", "2048")  # fmt: skip
    m = _run(capsys, *argv)["plans"][0]["memory"]
    parts = ("weights_bytes", "gradients_bytes", "optimizer_bytes", "activations_bytes",
             "kv_cache_bytes", "buffers_bytes")  # fmt: skip
    assert m["buffers_bytes"] > 0
    assert sum(m[k] for k in parts) == pytest.approx(m["total_bytes"], rel=1e-12)
    line = next(x for x in _text(capsys, *argv).splitlines() if "memory per device:" in x)
    assert "gathered weights" in line


def test_batches_show_a_tensor_parallel_ranks_batch(capsys: pytest.CaptureFixture[str]) -> None:
    """A tp8 rank works on the whole batch (batch / (dp x fsdp) = batch / 1), not batch / 8."""
    out = _text(
        capsys, "plan", "--model", "llama-3.1-8b", "--hw", "h100", "--devices", "8", "--tp", "8",
        "--batches", "8,64", "--seq-len", "2048", "--phase", "decode",
    )  # fmt: skip
    rows = [x.split() for x in out.splitlines() if x.strip().startswith(("8 ", "64 "))]
    assert [(r[0], r[1], r[2]) for r in rows] == [("8", "8", "tp8"), ("64", "64", "tp8")]


def test_stack_attention_intensity_follows_the_causal_count(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A causal flash attention row keeps the full FLOP count but runs half of it: its intensity
    is (F / 2) / Q, the one its bound follows."""
    r = _run(capsys, "stack", "--model", "llama-3.2-1b", "--seq-len", "8192", "--batch", "1")
    row = next(x for x in r["layers"] if x["name"] == "attn_scores")
    assert row["intensity_flop_per_byte"] == pytest.approx(row["flops"] / 2 / row["bytes"])
    full = next(x for x in r["layers"] if x["name"] == "attn_out")
    assert full["intensity_flop_per_byte"] == pytest.approx(full["flops"] / full["bytes"])


def test_model_show_labels_the_kv_dtype(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """LLaMA-3.1-8B with an int8 cache: 32 layers x 2 x 8 KV heads x 128 x 1 B = 65,536 B per
    token, labelled int8."""
    from shardline.models import catalog

    text = (Path(catalog.__file__).parent / "catalog" / "llama-3.1-8b.toml").read_text()
    path = tmp_path / "int8kv.toml"
    path.write_text(text.replace('name = "llama-3.1-8b"', 'name = "int8kv"\nkv_dtype = "int8"'))
    out = _text(capsys, "model", "show", str(path))
    assert f"kv_bytes_per_token                 {32 * 2 * 8 * 128:,} B (int8)" in out


def test_threshold_text_keeps_a_dim_named_d(capsys: pytest.CaptureFixture[str]) -> None:
    out = _text(
        capsys, "einsum", "x[B,D_X] * w[D_X,F] -> y[B,F]", "--dims", "B=64,D=4096,F=4096",
        "--mesh", "X=8",
    )  # fmt: skip
    lines = [x for x in out.splitlines() if x.startswith("  D < ")]
    assert lines and all("n_dev" in x and "(D-1)" not in x and "·D·" not in x for x in lines)
