"""Questions issue 27 found could not be asked, now commands whose answers are derived here:
int32 matmuls, the 10 B per parameter training-memory convention."""

from __future__ import annotations

import json

import pytest

from shardline.cli.main import main


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    code = main([*argv, "--json"])
    out, err = capsys.readouterr()
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize("m, k, n", [(4096, 4096, 4096), (512, 8192, 1024)])
def test_int32_matmul_runs_on_the_vector_units(
    capsys: pytest.CaptureFixture[str], m: int, k: int, n: int
) -> None:
    """H100 has no int32 tensor-core rate: an int32 matmul runs on the CUDA cores at 33.5e12
    op/s (the chip file's vector int32 rate); 4 B per element."""
    r = _run(capsys, "matmul", str(m), str(k), str(n), "--dtype", "int32", "--hw", "h100")
    flops, nbytes = 2 * m * k * n, 4 * (m * k + k * n + m * n)
    assert r["t_lower_s"] == pytest.approx(max(flops / 3.35e13, nbytes / 3.35e12), rel=1e-12)
    assert r["predicted_s"] >= r["t_lower_s"]


def test_int32_on_a_chip_without_the_rate_is_an_input_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["matmul", "64", "64", "64", "--dtype", "int32", "--hw", "tpu-v5e"]) == 2
    assert capsys.readouterr().err.startswith("error: tpu-v5e cannot compute in int32")


@pytest.mark.parametrize("zero, convention", [(0, 16), (0, 10), (1, 16), (1, 10), (3, 10)])
def test_memory_convention(capsys: pytest.CaptureFixture[str], zero: int, convention: int) -> None:
    """Per parameter on each of 8 data-parallel devices: 16 B = bf16 weights 2 + bf16 gradients
    2 + fp32 master 4 + fp32 Adam moments 8; 10 B = weights 2 + Adam 8, no master copy and no
    gradient buffer. ZeRO-1 shards the optimizer state 8 ways, ZeRO-3 everything."""
    r = _run(
        capsys, "plan", "--model", "llama-3.1-8b", "--hw", "h100", "--devices", "8", "--dp",
        "8", "--batch", "8", "--seq-len", "1024", "--zero", str(zero), "--memory-convention",
        str(convention),
    )  # fmt: skip
    m = r["plans"][0]["memory"]
    weights, grads, state = (2.0, 2.0, 12.0) if convention == 16 else (2.0, 0.0, 8.0)
    state /= 8 if zero >= 1 else 1
    grads /= 8 if zero >= 2 else 1
    weights /= 8 if zero >= 3 else 1
    per_param = (m["weights_bytes"] + m["gradients_bytes"] + m["optimizer_bytes"]) / m["params"]
    assert per_param == pytest.approx(weights + grads + state, rel=1e-6)
