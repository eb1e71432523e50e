"""`shardline explain`: the answer's shape (bound first, derivation, sanity check, advice) and its
numbers, derived by hand here."""

from __future__ import annotations

from pathlib import Path

import pytest

from shardline.answers.variants import roofline_variants
from shardline.basics.units import fmt_time
from shardline.cli.main import build_parser, main
from shardline.ops.roofline import einsum, matmul
from shardline.report.markdown import explain_roofline, suggestions

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
    text = explain_roofline(r, roofline_variants(r))
    assert "**Answer: MEMORY-BOUND" in text
    assert "No reuse is possible: W has every dimension" in text
    tips = suggestions(r, roofline_variants(r))
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


def test_accumulate_changes_the_square_estimate(capsys: pytest.CaptureFixture[str]) -> None:
    # C += A·B on a square n: Q = s(n² + n² + 2n²) = 4sn², so I = 2n³ / (4sn²) = 2n/(4s) exactly
    n, s = 1024, 2
    text = _explain(capsys, "matmul", str(n), str(n), str(n), "--hw", "a100-40gb", "--accumulate")
    assert f"I ≈ 2n/(4s) = 2 × 1,024 / (4 × 2) = {2 * n / (4 * s):,.4g} FLOP/B" in text
    flops, q = 2 * n**3, 4 * s * n * n
    assert f"| intensity | I = F / Q | {flops:,} / {q:,} | {n / 4:,.4g} FLOP/B |" in text


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


def test_explain_shard_memory_bound_units_roofline_and_advice(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # decode-sized M over 4 TPU v5e chips, N split: each chip reads its quarter of the weight
    m, k, n, d = 16, 8192, 8192, 4
    text = _explain(
        capsys,
        "shard",
        str(m),
        str(k),
        str(n),
        "--devices",
        str(d),
        "--along",
        "n",
        "--hw",
        "tpu-v5e",
    )
    p, w = 197e12, 8.19e11  # Google Cloud TPU v5e docs: bf16 peak, HBM bytes/s
    flops = 2 * m * k * (n // d)
    a, b, c = 2 * m * k, 2 * k * (n // d), 2 * m * (n // d)  # bf16 local shards, bytes
    q = a + b + c
    assert text.splitlines()[2].startswith("**Answer: MEMORY-BOUND")
    # the times carry units on the numbers put in
    assert f"= {flops:,} FLOP / 1.97e14 FLOP/s = **{fmt_time(flops / p)}**" in text
    assert f"= {q:,} B / 8.19e11 B/s = **{fmt_time(q / w)}**" in text
    # the local work placed on the roofline: I = F / Q below R = P / W
    assert f"I = F / Q = {flops / q:,.4g} FLOP/B < R = P / W = {p / w:,.4g} FLOP/B" in text
    # advice with its effect: B (the weight shard) in int8 halves its bytes, nothing else changes
    t_mem_new = (q - b / 2) / w
    assert (
        f"Store B ({100 * b / q:.1f}% of the bytes each device reads) in int8 instead of bf16"
        in text
    )
    assert f"step {fmt_time(q / w)} -> {fmt_time(t_mem_new)} ({(q / w) / t_mem_new:.2f}x" in text


def test_explain_shard_no_overlap_advice_gives_the_overlapped_time(
    capsys: pytest.CaptureFixture[str],
) -> None:
    m, k, n, d = 4096, 8192, 8192, 8
    text = _explain(
        capsys,
        "shard",
        str(m),
        str(k),
        str(n),
        "--devices",
        str(d),
        "--along",
        "k",
        "--hw",
        "h100-sxm",
        "--no-overlap",
    )
    p, w = 989.4e12, 3.35e12  # NVIDIA H100 SXM5 datasheet: dense bf16, HBM bytes/s
    t_compute = 2 * m * (k // d) * n / p
    t_memory = 2 * (m * (k // d) + (k // d) * n + m * n) / w
    # reduce-scatter of fp32 partial sums over an NVSwitch of 8: (D-1)/D * V / W_link + alpha
    t_network = (d - 1) / d * 4 * m * n / 450e9
    step = max(t_compute, t_memory) + t_network
    line = next(x for x in text.splitlines() if "Overlap the collective" in x)
    assert line.startswith("2. Overlap the collective with computation (--overlap)")
    # before: max(t_compute, t_memory) + t_network; after: the max of the three (= t_network);
    # the per-hop latency alpha adds about a microsecond to both
    before, after = (
        float(part.rsplit(", ", 1)[-1].split(" µs")[0]) * 1e-6 for part in line.split(" -> ")
    )
    assert before == pytest.approx(step, abs=3e-6)
    assert after == pytest.approx(t_network, abs=3e-6)
    assert f"({before / after:.2f}x faster)" in line or f"({step / t_network:.2f}x" in line


def test_einsum_with_its_own_operand_names_gets_the_estimate(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # a matmul spelled with other operand names (once a KeyError on "a"): int8 weights W, M small,
    # so I ≈ 2M/s_W = 2 × 16 / 1 = 32 FLOP/B
    text = _explain(
        capsys,
        "einsum",
        "X[M,K] * W[K,N] -> Y[M,N]",
        "--dims",
        "M=16,K=4096,N=4096",
        "--hw",
        "a100-40gb",
        "--dtypes",
        "W=int8",
    )
    assert "I = F / Q = 1 / (s_X/(2N) + s_W/(2M) + s_Y/(2K))" in text
    assert "I ≈ 2M/s_W = 2 × 16 / 1 = 32 FLOP/B" in text
    # exact: F = 2·16·4096·4096, Q = 2·16·4096 + 1·4096·4096 + 2·16·4096
    flops, q = 2 * 16 * 4096 * 4096, 2 * 16 * 4096 + 4096 * 4096 + 2 * 16 * 4096
    assert f"| intensity | I = F / Q | {flops:,} / {q:,} | {flops / q:,.4g} FLOP/B |" in text


def test_variants_are_computed_in_the_core() -> None:
    """The alternatives explain words are plain results: a memory-bound decode GEMM on the A100
    grows M to the critical M and stores b in int8 (Q' = 2MK + KN + 2MN)."""
    from shardline.answers.variants import roofline_variants

    m, k, n = 16, 4096, 16384
    r = matmul(m, k, n, hw="a100-40gb")
    variants = roofline_variants(r)
    assert [v.kind for v in variants] == ["grow", "store"]
    grow, store = variants
    assert (grow.operand, grow.dim, grow.size) == ("b", "M", r.critical_m)
    assert grow.result.flops == 2 * r.critical_m * k * n
    assert (store.operand, store.dtype) == ("b", "int8")
    assert store.result.bytes["total"] == 2 * m * k + k * n + 2 * m * n
    assert store.result.t_memory_s == pytest.approx(
        (2 * m * k + k * n + 2 * m * n) / A100_BYTES_PER_S, rel=1e-12
    )
    # the words only read what they are given
    tips = suggestions(r, variants)
    assert [t.result for t in tips] == [grow.result, store.result]
    assert suggestions(r, []) == []


def test_single_device_is_the_unsharded_multiply() -> None:
    from shardline.answers.variants import single_device, unsharded_spec
    from shardline.sharding.algebra import shard_einsum

    assert str(unsharded_spec("A[M,K_X] * B[K_X,N] -> C[M,N_X]").lhs.dims) == "('M', 'K')"
    r = shard_einsum(
        "A[M,K_X] * B[K_X,N] -> C[M,N_X]", {"M": 8192, "K": 8192, "N": 8192}, {"X": 8}, "h100-sxm"
    )
    one = single_device(r)
    assert one is not None
    # F / P on one H100 (989.4 TFLOP/s dense bf16): 2·8192³ FLOP is compute-bound
    assert one.flops == 2 * 8192**3
    assert one.t_lower_s == pytest.approx(2 * 8192**3 / 989.4e12, rel=1e-12)
