"""Single-input einsums: an elementwise map (`x[B,D] -> y[B,D]`: an activation, a cast, a copy)
and a reduction (`x[B,D] -> y[B]`). Conventions (docs/single-device.md): a map does one FLOP per
output element, a reduction one add per input element; the input is read once and the output
written once; the math is priced at the vector units' rate (`Chip.vector_rate`), never the matrix
units' peak.

Rates, from the chip files (src/shardline/hardware/catalog/):
- h100-sxm: HBM W = 3.35e12 B/s (NVIDIA H100 SXM5 datasheet); vector bf16 P = 1.338e14 FLOP/s
  ("BF16 non-tensor 133.8 TFLOPS", NVIDIA Hopper architecture in-depth, via glennklockwood.com).
- a100-40gb: vector fp32 1.95e13 FLOP/s (NVIDIA A100 datasheet: FP32 19.5 TFLOPS non-tensor).
- tpu-v5e: no bf16 vector rate, so the fp32 VPU rate 6.144e12 FLOP/s stands in (4096 ALUs x
  1.5e9 Hz, How to Scale Your Model, TPU chapter).
"""

from __future__ import annotations

import json
import re

import pytest

from shardline.errors import InputError
from shardline.ops.einsum import parse_einsum, require_two_operands
from shardline.ops.roofline import einsum
from tests.cli_run import run_cli

H100_W = 3.35e12  # B/s
H100_VECTOR_BF16 = 1.338e14  # FLOP/s
B, D, S = 4096, 8192, 512


def test_parse_a_map_and_a_reduction() -> None:
    act = parse_einsum("x[B,D] -> y[B,D]")
    assert act.is_unary and act.inputs == (act.lhs,) and act.second is None
    assert act.contracted == () and act.flop_factor == 1
    assert act.text() == "x[B,D] -> y[B,D]"
    red = parse_einsum("x[B,S,D] -> y[B,D]")
    assert red.is_unary and red.contracted == ("S",) and red.flop_factor == 1
    assert [op.name for op in red.operands] == ["x", "y"]
    # a two-operand einsum is unchanged: a contraction is 2 FLOP per multiply-add
    mm = parse_einsum("a[M,K] * b[K,N] -> c[M,N]")
    assert not mm.is_unary and mm.rhs.name == "b" and mm.flop_factor == 2


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "x[B] -> y[B,D]",
            "not a dimension of the input x: a single-input einsum cannot broadcast",
        ),
        ("x[B,B] -> y[B]", "dimension B appears twice in operand x"),
        ("x[B,D] -> y[B,B]", "dimension B appears twice in operand y"),
        ("x[B,D] -> x[B]", "operand name x is repeated"),
        ("x[B,D] * g[D] * h[B] -> y[B]", "one input (x[B,D] -> y[B]) or two joined"),
    ],
)
def test_malformed_single_input_specs(spec: str, message: str) -> None:
    with pytest.raises(InputError, match=re.escape(message)):
        parse_einsum(spec)


def test_two_operand_code_refuses_a_single_input() -> None:
    spec = parse_einsum("x[B,D] -> y[B]")
    with pytest.raises(InputError, match="has a single input: sharding needs a two-operand"):
        require_two_operands(spec, "sharding")
    with pytest.raises(InputError, match="has a single input"):
        _ = spec.rhs


def test_map_on_h100_by_hand() -> None:
    r = einsum("x[B,D] -> y[B,D]", {"B": B, "D": D}, "h100-sxm", "bf16")
    # F = B·D = 4096 · 8192 = 33,554,432 (one FLOP per output element)
    assert r.flops == B * D == 33_554_432
    # Q = s_x·B·D + s_y·B·D = 2·2·4096·8192 = 134,217,728 B
    assert r.bytes == {"x": 67_108_864, "y": 67_108_864, "total": 134_217_728}
    assert r.compute_unit == "vector" and r.hardware.flops_per_s == H100_VECTOR_BF16
    assert r.intensity_flop_per_byte == pytest.approx(33_554_432 / 134_217_728)  # 0.25
    assert r.ridge_flop_per_byte == pytest.approx(H100_VECTOR_BF16 / H100_W)  # 39.94
    assert r.t_memory_s == pytest.approx(134_217_728 / H100_W)  # 40.07 us
    assert r.t_compute_s == pytest.approx(33_554_432 / H100_VECTOR_BF16)  # 250.8 ns
    assert r.bound == "memory"
    assert r.t_lower_s == pytest.approx(r.t_memory_s)


def test_reductions_on_h100_by_hand() -> None:
    r = einsum("x[B,D] -> y[B]", {"B": B, "D": D}, "h100-sxm", "bf16")
    # one add per input element: F = B·D; Q = 2·B·D + 2·B = 67,108,864 + 8,192 B
    assert r.flops == B * D
    assert r.bytes == {"x": 67_108_864, "y": 8_192, "total": 67_117_056}
    assert r.t_compute_s == pytest.approx(B * D / H100_VECTOR_BF16)
    assert r.t_memory_s == pytest.approx(67_117_056 / H100_W)
    r3 = einsum("x[B,S,D] -> y[B,D]", {"B": 8, "S": S, "D": D}, "h100-sxm", "bf16")
    # F = B·S·D = 8·512·8192 = 33,554,432; Q = 2·8·512·8192 + 2·8·8192 = 67,108,864 + 131,072
    assert r3.flops == 33_554_432
    assert r3.bytes["total"] == 67_108_864 + 131_072


def test_a_cast_reads_and_writes_each_dtype() -> None:
    # bf16 -> fp32: Q = 2·B·D + 4·B·D; the math in the input's dtype (bf16), the vector rate
    r = einsum("x[B,D] -> y[B,D]", {"B": B, "D": D}, "h100-sxm", "bf16", dtypes={"y": "fp32"})
    assert r.bytes["total"] == 6 * B * D
    assert r.dtypes["compute"] == "bf16" and r.hardware.flops_per_s == H100_VECTOR_BF16
    # fp32 on an A100: 1.95e13 FLOP/s on the CUDA cores, not the 1.56e14 TF32 tensor peak
    a100 = einsum("x[B,D] -> y[B]", {"B": B, "D": D}, "a100-40gb", "fp32")
    assert a100.hardware.flops_per_s == 1.95e13 and a100.compute_unit == "vector"


def test_tpu_falls_back_to_the_fp32_vector_rate() -> None:
    r = einsum("x[B,D] -> y[B,D]", {"B": B, "D": D}, "tpu-v5e", "bf16")
    assert r.compute_unit == "vector" and r.hardware.flops_per_s == 6.144e12
    assert r.t_compute_s == pytest.approx(B * D / 6.144e12)


def test_cli_text_derives_every_step(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys, "einsum", "x[B,D] -> y[B,D]", "--dims", "B=4096,D=8192", "--hw", "h100"
    )
    assert code == 0, err
    for line in (
        "MEMORY-BOUND: intensity 0.25 FLOP/B < ridge 39.94 FLOP/B",
        "F = B·D = 4,096 × 8,192 = 33,554,432 FLOP",
        "one FLOP per output element",
        "Q = s_x·B·D + s_y·B·D   (the input read once, the output written once)",
        "= 67,108,864 + 67,108,864 = 134,217,728 B",
        "I = F / Q = 33,554,432 / 134,217,728 = 0.25 FLOP/B",
        "R = P / W = 1.338e14 FLOP/s / 3.35e12 B/s = 39.94 FLOP/B  (P: the vector units",
        "t_compute  F / P = 33,554,432 / 1.338e14",
        "t_memory   Q / W = 134,217,728 / 3.35e12 = 40.1 µs",
    ):
        assert line in out, line
    code, out, _ = run_cli(
        capsys, "einsum", "x[B,D] -> y[B]", "--dims", "B=4096,D=8192", "--hw", "h100"
    )
    assert code == 0 and "F = B·D = 4,096" in out and "2·B·D" not in out
    assert "a reduction over D: one add per input element" in out


def test_cli_json_has_the_einsum_keys(capsys: pytest.CaptureFixture[str]) -> None:
    def json_of(spec: str, dims: str) -> dict:  # type: ignore[type-arg]
        code, out, err = run_cli(capsys, "einsum", spec, "--dims", dims, "--hw", "h100", "--json")
        assert code == 0, err
        return json.loads(out)  # type: ignore[no-any-return]

    unary = json_of("x[B,D] -> y[B]", "B=4096,D=8192")
    binary = json_of("x[B,D] * g[D] -> y[B,D]", "B=4096,D=8192")
    assert set(unary) == set(binary)
    assert unary["flops"] == B * D and unary["compute_unit"] == "vector"
    assert unary["bytes"] == {"x": 2 * B * D, "y": 2 * B, "total": 2 * B * D + 2 * B}
    assert unary["hardware"]["flops_per_s"] == H100_VECTOR_BF16
    pred = unary["prediction"]  # one streaming kernel at the achievable HBM rate
    assert pred["streaming_kernel"] is True
    assert pred["t_memory_s"] == pytest.approx(
        unary["bytes"]["total"] / pred["achievable_mem_bytes_per_s"]
    )
    assert unary["predicted_s"] >= unary["t_lower_s"]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["einsum", "x[B_X,D] -> y[B_X,D]", "--mesh", "X=2"], "sharding over a mesh needs"),
        (["einsum", "x[B,D] -> y[B,D]", "--mesh", "X=2"], "sharding over a mesh needs"),
        (["einsum", "x[B] -> y[B,D]"], "cannot broadcast to a new dim"),
        (["what-if", "precision", "einsum", "x[B,D] -> y[B]"], "what-if precision einsum needs"),
    ],
)
def test_cli_refuses_in_one_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, _, err = run_cli(capsys, *argv, "--dims", "B=64,D=128", "--hw", "h100")
    lines = err.strip().splitlines()
    assert code == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert message in lines[0]


def test_a_workload_layer_refuses_a_single_input() -> None:
    from shardline.ops.layer import Layer
    from shardline.sharding.algebra import shard_einsum

    with pytest.raises(InputError, match="single input: a workload layer needs a two-operand"):
        Layer(name="act", spec="x[B,D] -> y[B,D]", dims={"B": 64, "D": 128})
    with pytest.raises(InputError, match="single input: sharding over a mesh needs"):
        shard_einsum("x[B_X,D] -> y[B_X,D]", {"B": 64, "D": 128}, "X=2")


def test_an_array_of_dtypes_keeps_the_vector_rate_per_element() -> None:
    import numpy as np

    r = einsum("x[B,D] -> y[B]", {"B": B, "D": D}, "h100-sxm", np.array(["bf16", "fp32"]))
    # h100-sxm vector rates: bf16 1.338e14, fp32 6.69e13 FLOP/s (NVIDIA Hopper in-depth, FP32
    # 66.9 TFLOPS non-tensor), not the tensor-core bf16 peak 9.894e14
    assert list(r.hardware.flops_per_s) == [H100_VECTOR_BF16, 6.69e13]
    assert list(r.t_compute_s) == pytest.approx([B * D / H100_VECTOR_BF16, B * D / 6.69e13])
    # bytes: bf16 2·B·D + 2·B; fp32 4·B·D + 4·B
    assert list(r.bytes["total"]) == [2 * B * D + 2 * B, 4 * B * D + 4 * B]
