"""MaxText reduces its data-parallel gradients in bf16 (frameworks/maxtext.toml grad_reduce_dtype):
the weights are fp32 (base.yml weight_dtype float32) but each matmul runs in bfloat16 (base.yml
dtype), and XLA's SPMD partitioner all-reduces a matmul's partial sums at the matmul's output
(GSPMD, arXiv 2105.04663), before the cast to the fp32 weight gradient; MaxText's sharding
guide prices the data-parallel all-reduce as 'size of params (bf16)'."""

from __future__ import annotations

from pathlib import Path

from shardline.basics.framework import load_framework
from shardline.hardware import resolve_chip
from shardline.io.framework_files import read_config
from shardline.planning.api import plan
from tests.training import training_workload

MODEL = "llama-3.2-1b"


def _dp_reduce_bytes(**execution: object) -> float:
    """Bytes of the plan's data-parallel gradient all-reduces, all calls: Llama-3.2-1B on 2
    H100s in pure data parallelism."""
    w = training_workload(MODEL, 16, 1024)
    chip = resolve_chip("h100-sxm")
    result = plan(w, chip, 2, dp=2, microbatches=1, require_fit=False, **execution)
    (p,) = [c for c in result.plans if c.degrees.get("dp") == 2]
    return sum(t.bytes for t in p.comm if t.purpose == "dp")  # `bytes`: all calls together


def test_maxtext_default_reduces_in_bf16() -> None:
    assert load_framework("maxtext").defaults["grad_reduce_dtype"] == "bf16"
    assert "sharding.md" in load_framework("maxtext").sources["grad_reduce_dtype"]


def test_maxtext_gradient_bytes_by_hand() -> None:
    """The 16 blocks' matmul weights of Llama-3.2-1B (hidden 2048, 32 query and 8 KV heads of
    64, FFN 8192, gated): q and o 2048 x 2048 each, k and v 2048 x 512 each, gate, up and down
    3 x 2048 x 8192 = 60,817,408 per block, 973,078,528 in all, each gradient all-reduced once
    in bf16 (2 B); fp32 is twice that; Megatron's default (the gradients' own dtype, bf16
    here) the same bytes as MaxText's."""
    per_block = 2 * 2048 * 2048 + 2 * 2048 * 512 + 3 * 2048 * 8192
    assert per_block == 60_817_408
    bf16 = _dp_reduce_bytes(framework="maxtext")
    assert bf16 == 2 * 16 * per_block == 1_946_157_056
    assert _dp_reduce_bytes(framework="maxtext", grad_reduce_dtype="fp32") == 2 * bf16
    assert _dp_reduce_bytes() == bf16


def test_maxtext_config_dtype_sets_the_reduction(tmp_path: Path) -> None:
    """A MaxText config's `dtype` (the matmuls' dtype) sets the gradient reduction's; its
    `weight_dtype` (the stored weights) does not."""
    cases = {"dtype=float32": "fp32", "dtype=bfloat16": "bf16", "weight_dtype=float32": None}
    for key, want in cases.items():
        path = tmp_path / "run.sh"
        path.write_text(
            "python3 MaxText/train.py MaxText/configs/base.yml model_name=llama3-8b "
            f"per_device_batch_size=1 max_target_length=8192 {key}\n",
            encoding="utf-8",
        )
        assert read_config(path, 8).execution.get("grad_reduce_dtype") == want, key
