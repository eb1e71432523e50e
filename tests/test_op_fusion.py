"""The ops between the matmuls run fused or eagerly (Execution.op_fusion, --op-fusion): the eager
byte counts of shardline.realistic.block, derived by hand from the reference PyTorch code, and
what they add to a plan."""

from __future__ import annotations

import json

import pytest

from shardline.basics.framework import load_framework
from shardline.errors import InputError
from shardline.hardware import load_chip
from shardline.ops.predict import kernel_overhead_s
from shardline.realistic.block import block_ops
from shardline.realistic.kernels import mem_rate
from shardline.workload.templates import transformer
from tests.cli_run import run_cli

# a small Llama-shaped block: d 256, d_ff 768 (SwiGLU), 8 query heads and 2 kv heads of 32
D, F, H, G, E = 256, 768, 8, 2, 32
LLAMA = dict(d_model=D, d_ff=F, heads=H, kv_heads=G, head_dim=E, layers=2)


Bytes = dict[str, list[tuple[float, float]]]  # op name -> (read, write) of each occurrence


def _ops(eager: bool, *, training: bool = True, **over: object) -> Bytes:
    model = transformer(batch=1, seq_len=64, **(LLAMA | over)).model
    assert model is not None
    out: dict[str, list[tuple[float, float]]] = {}
    ops = block_ops(model, 2, tp=1, sp=False, training=training, eager=eager)
    for op in ops:
        out.setdefault(op.name, []).append((op.read_bytes, op.write_bytes))
    return out


def test_eager_ops_count_each_pytorch_op_of_the_reference_code() -> None:
    n = 2 * 64  # tokens of 2 sequences of 64
    e = n * D  # hidden-state elements; bf16: w = 2 bytes
    fused, eager = _ops(False), _ops(True)
    # RMSNorm: x.float() (r 2, w 4), pow (r 4, w 4), mean (r 4), * rsqrt (r 4, w 4),
    # type_as (r 4, w 2), * weight (r 2, w 2): read 20, write 16 bytes per element
    assert fused["layer_norm"] == [(2 * e, 2 * e)] * 2
    assert eager["layer_norm"] == [(20 * e, 16 * e)] * 2
    # rotary over q and k, (H + G) x E elements per token: x.float() (r 2, w 4), complex
    # multiply (r 4, w 4), type_as (r 4, w 2): read 10, write 10 per element
    qk = n * (H + G) * E
    assert fused["rotary"] == [(2 * qk, 2 * qk)]
    assert eager["rotary"] == [(10 * qk, 10 * qk)]
    # SwiGLU over F per token: silu (r 2, w 2), product (r 4, w 2): read 6, write 4 per element
    f = n * F
    assert fused["swiglu"] == [(4 * f, 2 * f)]
    assert eager["swiglu"] == [(6 * f, 4 * f)]
    # repeat_kv copies k and v (G heads) to H heads: read 2 x n G E x 2 B, write H / G times that
    kv = 2 * n * G * E * 2
    assert eager["repeat_kv"] == [(kv, kv * H // G)]
    assert "repeat_kv" not in fused
    # the residual adds are one kernel either way
    assert eager["bias_dropout_add"] == fused["bias_dropout_add"]


def test_layer_norm_gelu_and_inference_are_one_kernel_eager_or_not() -> None:
    # torch.nn.functional.layer_norm and gelu are single native kernels; multi-head attention
    # has nothing to repeat; inference engines fuse their ops (the eager flag is training's)
    mpt = dict(gated=False, norm="layernorm", kv_heads=H, rotary=False)
    assert _ops(True, **mpt) == _ops(False, **mpt)
    assert _ops(True, training=False) == _ops(False, training=False)


def test_torchtitan_runs_eagerly_and_megatron_fused() -> None:
    assert load_framework("torchtitan").defaults["op_fusion"] == "eager"
    assert "op_fusion" not in load_framework("megatron").defaults  # Execution's default: fused
    with pytest.raises(InputError, match="op_fusion must be one of fused, eager"):
        from shardline.basics.options import Execution

        Execution(op_fusion="compiled")
    with pytest.raises(InputError, match="norm must be one of rmsnorm, layernorm"):
        transformer(batch=1, seq_len=64, norm="batchnorm", **LLAMA)


def test_eager_ops_add_their_bytes_at_hbm_bandwidth_to_the_plan(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Llama 3.1 8B, FSDP 8, 16 sequences of 4,096: 2 sequences (n = 8,192 tokens) per device.
    Each op's time is its bytes at the achievable HBM rate (the vector FLOPs never bind here);
    the backward moves 2 x read + write. Per block the eager code moves more by, fwd + bwd:
    two norms 2 x ((20 + 16 - 4) + (56 - 6)) e = 164 e (e = n x 4096), rotary (20 - 4 + 30 - 6)
    qe = 40 qe (qe = n x 5120), SwiGLU (5 - 3 + 8 - 5) f = 5 f (f = n x 14336 x 2 B), repeat_kv
    5 kv + 6 kv = 11 kv (kv = 2 x n x 8 x 128 x 2 B); the final norm 82 e once. Each kernel
    beyond an op's first adds the eager launch overhead: per block and pass 2 x 7 (norms) + 5
    (rotary: 3 kernels for q, 3 for k) + 1 (SwiGLU) + 2 (repeat_kv: a new op of 2 kernels), the
    final norm 7."""
    base = ("plan", "--model", "llama-3.1-8b", "--devices", "8", "--fsdp", "8", "--batch", "16")
    other = {}
    for mode in ("fused", "eager"):
        code, out, _ = run_cli(
            capsys, *base, "--seq-len", "4096", "--framework", "torchtitan",
            "--op-fusion", mode, "--json",
        )  # fmt: skip
        assert code == 0
        data = json.loads(out)
        assert data["execution"]["op_fusion"] == mode
        other[mode] = data["plans"][0]["predicted_breakdown_s"]["other_ops_s"]
    n = 2 * 4096
    e, qe, f, kv = n * 4096, n * 5120, n * 14336 * 2, 2 * n * 8 * 128 * 2
    extra_bytes = 32 * (164 * e + 40 * qe + 5 * f + 11 * kv) + 82 * e
    h100 = load_chip("h100-sxm")
    launches = 2 * (32 * (2 * 7 + 5 + 1 + 2) + 7)  # forward and backward
    expected = extra_bytes / mem_rate(h100) + launches * kernel_overhead_s(h100, cuda_graphs=False)
    assert other["eager"] - other["fused"] == pytest.approx(expected, rel=1e-6)
