"""Megatron-Core's module-level recompute (`--recompute modules:M1,M2,...`, recompute.toml's
`module` tables; Megatron-LM transformer_config.py `recompute_modules`): the tensors each module
discards and the ops the backward reruns, derived by hand below."""

from __future__ import annotations

import json

import pytest

from shardline.basics.recompute import policy, rerun_ops, stored_tensors
from shardline.errors import InputError
from tests.cli_run import run_cli

# Mixtral 8x7B (tests/test_moe.py): top-2 of 8 experts of width 14336, bf16 activations
S, K, F = 4096, 2, 14336


def test_modules_discard_their_tensors_and_rerun_their_ops() -> None:
    moe_act = policy("modules:moe_act")
    # the activation's output is freed; the activation reruns from the kept gate and up
    assert rerun_ops(moe_act, gated=True, flash=True) == ("activation",)
    assert "act" not in stored_tensors(moe_act, gated=True, flash=True)
    both = policy("modules:mla_up_proj,layernorm")
    # q, k, v rerun from norm1, which the layernorm module also frees: it reruns from x
    assert rerun_ops(both, gated=True, flash=True) == (
        "norm1", "q_proj", "k_proj", "v_proj", "norm2",
    )  # fmt: skip
    # core_attn alone is Megatron's default selective recompute
    assert rerun_ops(policy("modules:core_attn"), gated=True, flash=False) == ("attention",)
    with pytest.raises(InputError, match="modules are core_attn, moe_act"):
        policy("modules:attention")


def test_moe_act_keeps_one_activation_less_per_block(capsys: pytest.CaptureFixture[str]) -> None:
    kept = {}
    for name in ("none", "modules:moe_act"):
        code, out, _ = run_cli(
            capsys, "plan", "--model", "mixtral-8x7b", "--hw", "h100-sxm", "--devices", "8",
            "--ep", "8", "--batch", "8", "--microbatches", "1", "--seq-len", str(S),
            "--recompute", name, "--zero", "1", "--json",
        )  # fmt: skip
        assert code == 0
        kept[name] = json.loads(out)["plans"][0]["recompute"]["kept_bytes_per_block"]
    # one sequence per device: its S tokens' activation output over the k active experts'
    # width, 2 bytes (bf16)
    assert kept["none"] - kept["modules:moe_act"] == S * K * F * 2
