"""`shardline explain`: the answer's shape (bound first, derivation, sanity check, advice) and its
numbers, derived by hand here."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardline.cli.main import build_parser, main
from shardline.report.markdown import explain_roofline, suggestions
from shardline.roofline import einsum, matmul
from shardline.units import fmt_time

A100_BF16_FLOPS = 312e12  # NVIDIA A100 datasheet, dense BF16
A100_BYTES_PER_S = 1.555e12  # NVIDIA A100 40GB datasheet


def _explain(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    assert main(["explain", *argv]) == 0
    return capsys.readouterr().out


def _sections(text: str) -> list[str]:
    return [line[3:] for line in text.splitlines() if line.startswith("## ")]


def test_memory_bound_decode_answer(capsys: pytest.CaptureFixture[str]) -> None:
    m, k, n = 16, 4096, 16384
    text = _explain(capsys, "matmul", str(m), str(k), str(n), "--hw", "a100-40gb")
    flops = 2 * m * k * n
    q = 2 * (m * k + k * n + m * n)
    t_memory = q / A100_BYTES_PER_S
    assert _sections(text) == [
        "Assumptions",
        "The bound, called before the arithmetic",
        "Counts",
        "Times",
        "Sanity check",
        "Bottleneck and what would help",
    ]
    answer = text.splitlines()[2]
    assert answer.startswith(f"**Answer: MEMORY-BOUND, about {fmt_time(t_memory)}.**")
    # the call comes before the counts, from the small-M estimate I ~ 2M/s_b = 2*16/2 = 16 FLOP/B
    assert text.index("I ≈ 2M/s_b = 2 × 16 / 2 = 16 FLOP/B") < text.index("## Counts")
    assert f"| {flops:,} FLOP" in text
    assert f"{2 * k * n:,} B" in text and f"{q:,} B" in text
    assert (
        "1.555 TB/s" in text and "312 TFLOP/s" in text and "source: NVIDIA A100 datasheet" in text
    )
    # sanity check: attainable = I*W for a memory-bound multiply, F / attainable = t_memory
    assert "the same as the lower bound" in text
    crit = matmul(m, k, n, hw="a100-40gb").critical_m
    assert f"grow M from 16 to {crit:,} (the critical M)" in text
    # int8 weights: bytes 2MK + KN + 2MN, time Q'/W
    q8 = 2 * m * k + k * n + 2 * m * n
    assert (
        f"time {fmt_time(t_memory)} -> {fmt_time(q8 / A100_BYTES_PER_S)} ({q / q8:.2f}x faster)"
        in text
    )


def test_compute_bound_square_suggests_a_faster_dtype(capsys: pytest.CaptureFixture[str]) -> None:
    text = _explain(capsys, "matmul", "8192", "8192", "8192", "--hw", "h100-sxm")
    assert "**Answer: COMPUTE-BOUND" in text
    # nearly square: I ~ 2n/(3s) = 2*8192/(3*2) = 2731 FLOP/B
    assert "I ≈ 2n/(3s) = 2 × 8,192 / (3 × 2) = 2,731 FLOP/B" in text
    # H100: fp8 dense 1979 TFLOP/s vs bf16 989.4: the fp8 time is F/P_fp8, bytes halve too
    t_bf16 = 2 * 8192**3 / 989.4e12
    t_fp8 = 2 * 8192**3 / 1979e12
    assert "Compute in fp8" in text and f"({t_bf16 / t_fp8:.2f}x faster)" in text
    assert "Split M over 2 devices" in text


def test_no_reuse_for_per_example_weights() -> None:
    """seed 001 Question 4: int8[B,D] x int8[B,D,F] -> int8[B,F] has intensity near 2 for any B."""
    r = einsum("X[B,D] * W[B,D,F] -> Y[B,F]", {"B": 64, "D": 4096, "F": 4096}, "tpu-v5e", "int8")
    text = explain_roofline(r)
    assert "**Answer: MEMORY-BOUND" in text
    assert "No reuse is possible: W has every dimension" in text
    tips = suggestions(r)
    assert tips[1].change.startswith("Store W in int4")
    assert tips[1].result.bytes["W"] == 64 * 4096 * 4096 // 2  # 0.5 B per int4 element


def test_accumulate_and_int8_weights_are_stated(capsys: pytest.CaptureFixture[str]) -> None:
    text = _explain(
        capsys,
        "matmul",
        "128",
        "4096",
        "4096",
        "--hw",
        "tpu-v5e",
        "--b-dtype",
        "int8",
        "--accumulate",
    )
    assert "b int8 (1 B/element)" in text and "the math runs at the bf16 rate" in text
    assert "(and read once more: C += A·B)" in text
    assert "| 2·s_out·M·N | 2 × 2 B × 128 × 4,096 |" in text


def test_explain_takes_exactly_the_matmul_and_einsum_arguments() -> None:
    parser = build_parser()
    subs: dict = next(a for a in parser._actions if a.dest == "command").choices  # type: ignore[assignment]
    explain: dict = next(a for a in subs["explain"]._actions if a.dest == "what").choices  # type: ignore[assignment]
    for name in ("matmul", "einsum", "shard"):
        if name not in subs:
            continue
        original = {s for a in subs[name]._actions for s in a.option_strings} - {"--json"}
        mine = {s for a in explain[name]._actions for s in a.option_strings} - {
            "-o",
            "--out",
            "--force",
        }
        assert original == mine, name


def test_explain_writes_markdown_file_and_refuses(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "answer.md"
    text = _explain(
        capsys,
        "einsum",
        "X[B,D] * W[D,F] -> Y[B,F]",
        "--dims",
        "B=64,D=4096,F=4096",
        "--hw",
        "tpu-v5e",
        "-o",
        str(out),
    )
    assert out.read_text(encoding="utf-8") == text
    assert main(["explain", "matmul", "8", "8", "8", "-o", str(out)]) == 2
    assert main(["explain", "matmul", "0", "8", "8"]) == 2
    assert main(["explain", "matmul", "8", "8", "8", "-o", str(tmp_path / "no" / "a.md")]) == 2
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 3 and all(line.startswith("error: ") for line in err)
    assert "already exists" in err[0] and "dimension M" in err[1] and "does not exist" in err[2]


def test_explain_shard_network_bound(capsys: pytest.CaptureFixture[str]) -> None:
    m = k = n = 8192
    text = _explain(
        capsys,
        "shard",
        str(m),
        str(k),
        str(n),
        "--devices",
        "8",
        "--along",
        "k",
        "--hw",
        "h100-sxm",
    )
    assert text.splitlines()[2].startswith("**Answer: NETWORK-BOUND")
    assert text.index("K <") < text.index("## Per-device counts")  # the threshold before the counts
    # each device computes 2*M*(K/8)*N; the total is conserved
    assert f"| {2 * m * (k // 8) * n:,} FLOP" in text
    per_device, total = 2 * m * (k // 8) * n, 2 * m * k * n
    assert f"8 devices × {per_device:,} = {total:,} FLOP" in text and "✓" in text
    # reduce-scatter of the fp32 partial sums of C: V = 4*M*N bytes
    assert f"V = {4 * m * n:,} B (fp32)" in text
    assert "the fastest of the strategies `shardline compare` ranks" in text


def test_explain_sharded_einsum(capsys: pytest.CaptureFixture[str]) -> None:
    text = _explain(
        capsys,
        "einsum",
        "A[M_X,K] * B[K,N] -> C[M_X,N]",
        "--dims",
        "M=4096,K=4096,N=4096",
        "--mesh",
        "X=4",
        "--hw",
        "h100-sxm",
    )
    assert "over 4 devices (X=4)" in text.splitlines()[0]
    assert f"| {2 * 1024 * 4096 * 4096:,} FLOP" in text  # M split 4 ways
