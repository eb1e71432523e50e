"""Parallel folding (Megatron-Core, docs/moe.md "Parallel folding: --etp"): the attention on
tp x cp x dp x pp, the experts on etp x ep x edp x pp over the same devices; Megatron-Core's
convention of dp; the training search's run flags. Every value is derived by hand below."""

from __future__ import annotations

import json
from typing import Any

import pytest

from shardline.errors import InputError
from shardline.strategies import Degrees, local_dims
from tests.cli_run import run_cli
from tests.test_moe import D, L, _layer, _mixtral

MIXTRAL16 = ("plan", "--model", "mixtral-8x7b", "--hw", "h100-sxm", "--devices", "16")
RUN = ("--batch", "16", "--microbatches", "1", "--zero", "1", "--recompute", "full", "--json")


def _first_plan(capsys: pytest.CaptureFixture[str], *flags: str) -> dict[str, Any]:
    """The first plan of `plan` on 16 H100s with these degrees (MIXTRAL16, RUN)."""
    code, out, _ = run_cli(capsys, *MIXTRAL16, *flags, *RUN)
    assert code == 0
    plan: dict[str, Any] = json.loads(out)["plans"][0]
    return plan


def test_folded_degrees_derive_edp_and_the_experts_degrees() -> None:
    deg = Degrees(tp=2, dp=8, ep=8, etp=1)
    # attention: tp x dp = 2 x 8 = 16 devices; experts: etp x ep x edp = 1 x 8 x edp = 16
    assert deg.devices == 16 and deg.edp == 16 // (1 * 8)
    # unfolded, the attention's 8 dp ranks are dp x ep = 2 x 4 with ep = 8 x 1 / 2
    assert (deg["dp"], deg["ep"]) == (2, 4)
    assert deg.experts == Degrees(tp=1, dp=2, ep=8)
    stated = deg.as_dict()
    assert stated == {"tp": 2, "pp": 1, "dp": 8, "fsdp": 1, "ep": 8, "cp": 1, "etp": 1, "edp": 2}
    assert Degrees(stated) == deg and deg.name == "tp2-dp8-ep8-etp1"
    # DeepSeek-V3's folded recipe: 512 devices, tp 2 pp 8 ep 64 etp 1: dp = 512 / 16 = 32,
    # edp = 512 / (8 x 1 x 64) = 1
    ds = Degrees(tp=2, pp=8, dp=32, ep=64, etp=1)
    assert (ds.devices, ds.edp, ds.expert_ep) == (512, 1, 64)


def test_a_fold_that_splits_a_tensor_group_is_refused() -> None:
    # ep x etp = 2 x 1 is not a multiple of tp = 4: the expert group would split a tp group
    with pytest.raises(InputError, match="whole attention tensor-parallel groups"):
        Degrees(tp=4, dp=4, ep=2, etp=1)
    with pytest.raises(InputError, match="edp=3"):
        Degrees(tp=2, dp=8, ep=8, etp=1, edp=3)


def test_expert_einsums_run_on_etp_and_the_experts_ep() -> None:
    w = _mixtral(seq=4096, batch=16)
    deg = Degrees(tp=2, dp=8, ep=8, etp=1)
    up = local_dims(_layer(w, "expert_in"), deg, batch_dim="B")
    # X = 8 experts over ep 8: 1 a device; F = 14336 whole (etp 1); the rows of its edp share:
    # 16 / 2 = 8 sequences, each with C = 4096 x 2 / 8 = 1024 slots
    assert (up["X"], up["F"], up["B"], up["C"]) == (1, 14336, 8, 1024)
    qkv = local_dims(_layer(w, "attn_qkv"), deg, batch_dim="B")
    # attention: kv heads over tp 2, the batch over dp 8
    assert (qkv["G"], qkv["B"]) == (8 // 2, 16 // 8)


def test_expert_tensor_parallelism_below_the_attentions_splits_the_expert_width() -> None:
    w = _mixtral(seq=4096, batch=16)
    # 16 devices: attention tp 4 x dp 4; experts etp 2 x ep 4 x edp 16 / 8 = 2
    deg = Degrees(tp=4, dp=4, ep=4, etp=2)
    assert deg.edp == 2 and deg.experts == Degrees(tp=2, dp=2, ep=4)
    down = local_dims(_layer(w, "expert_down"), deg, batch_dim="B")
    # F = 14336 / etp 2; X = 8 / ep 4; rows 16 / edp 2
    assert (down["F"], down["X"], down["B"]) == (14336 // 2, 2, 8)


def test_plan_folded_exchanges_tokens_over_the_experts_ep(
    capsys: pytest.CaptureFixture[str],
) -> None:
    plan = _first_plan(capsys, "--tp", "2", "--ep", "8", "--etp", "1")
    assert plan["degrees"]["etp"] == 1 and plan["degrees"]["edp"] == 2
    comm = {(c["purpose"], c["kind"]): c for c in plan["comm"]}
    a2a = comm[("ep", "all_to_all")]
    # the all-to-all spans the 8 ranks holding the 8 experts; per MoE layer 6 of them
    # (dispatch, combine and both gradients, and under --recompute full the dispatch and
    # combine again: stage_extras._rerun_terms); a device's part: 8 rows x 1 expert x 1024
    # slots x d x 2 bytes, V = 8 x that
    assert a2a["devices"] == 8
    assert a2a["calls"] == 6 * L
    assert a2a["bytes"] == 6 * L * 8 * (8 * 1024 * D * 2)
    # the expert gradients reduce over edp = 2 (ZeRO-1: reduce-scatter), the dense ones also
    # over the other 4 of the attention's 8 dp ranks
    assert comm[("dp", "reduce_scatter")]["devices"] == 2
    assert comm[("ep", "all_reduce")]["devices"] == 4


def test_megatron_convention_reads_dp_as_counting_the_ep_ranks(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Megatron-Core's "TP2 EP4 DP8" on 16 GPUs: tp x dp = 16, ep inside dp: shardline's
    # dp 8 / 4 = 2, ep 4, the experts on etp = tp = 2 (edp = 16 / (2 x 4) = 2)
    mega = _first_plan(capsys, "--tp", "2", "--ep", "4", "--dp", "8")
    assert {k: mega["degrees"][k] for k in ("tp", "dp", "ep", "etp", "edp")} == {
        "tp": 2, "dp": 8, "ep": 4, "etp": 2, "edp": 2,
    }  # fmt: skip
    plain = _first_plan(capsys, "--tp", "2", "--ep", "4", "--dp", "2")
    # the same ranks doing the same work: the same step
    assert mega["predicted_s"] == pytest.approx(plain["predicted_s"], rel=1e-12)


def test_megatron_convention_that_does_not_fit_names_the_shardline_degrees(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # tp 2 x pp 2 x dp 8 = 32 is not 16 either way; read Megatron's way dp 8 / ep 4 = 2
    code, out, err = run_cli(
        capsys, *MIXTRAL16, "--tp", "2", "--pp", "2", "--ep", "4", "--dp", "8", "--batch", "16"
    )
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and err.startswith("error: ")
    assert "shardline's degrees are dp=2 ep=4" in err


@pytest.mark.parametrize(
    ("flags", "needle"),
    [
        (("--tp", "4", "--ep", "2", "--etp", "1"), "whole attention tensor-parallel groups"),
        (("--tp", "2", "--etp", "1"), "--etp (expert tensor parallelism) needs --ep"),
        (("--ep", "8", "--edp", "2"), "it goes with --etp"),
        # edp = 16 / (1 x 8) = 2, not 4
        (("--tp", "2", "--ep", "8", "--etp", "1", "--edp", "4"), "edp=4, but"),
    ],
)
def test_bad_folds_are_one_error_line(
    capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], needle: str
) -> None:
    code, out, err = run_cli(capsys, *MIXTRAL16, *flags, "--batch", "16")
    assert code == 2 and out == "" and err.count("\n") == 1 and needle in err


def test_deepseek_v3_folded_recipe_answers(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys, "plan", "--model", "deepseek-v3", "--hw", "h100-sxm", "--devices", "512",
        "--tp", "2", "--pp", "8", "--ep", "64", "--etp", "1", "--phase", "training",
        "--batch", "1024", "--seq-len", "4096", "--dtype", "fp8", "--json",
    )  # fmt: skip
    assert code == 0
    plan = json.loads(out)["plans"][0]
    # dp = 512 / (2 x 8) = 32; edp = 512 / (8 x 1 x 64) = 1
    assert plan["degrees"] == {
        "tp": 2, "pp": 8, "dp": 32, "fsdp": 1, "ep": 64, "cp": 1, "etp": 1, "edp": 1,
    }  # fmt: skip
    a2a = next(c for c in plan["comm"] if c["kind"] == "all_to_all")
    assert a2a["devices"] == 64


def test_training_search_takes_the_run_flags_and_folds(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_cli(
        capsys, "search", "--model", "mixtral-8x7b", "--devices", "16", "--scales", "1",
        "--global-batch", "64Ki", "--seq-len", "4096", "--fix", "tp=2,pp=1,fsdp=1,cp=1",
        "--dtype", "fp8", "--ep-overlap", "--rerank", "4", "--json",
    )  # fmt: skip
    assert code == 0
    r = json.loads(out)
    assert r["assumed"]["dtype"] == "fp8" and r["assumed"]["ep_overlap"] is True
    shown = [r["best"], *r["alternatives"]]
    # tp 2 over 16 devices leaves dp x ep = 8 (ep 1, 2, 4 or 8); each is enumerated folded
    # too: etp 1, the experts over ep x 2 ranks (2, 4 or 8; 16 would not divide Mixtral's 8
    # experts), the attention's dp = dp x ep = 8
    folded = [s["degrees"] for s in shown if "etp" in s["degrees"]]
    assert folded
    assert all(d["etp"] == 1 and d["dp"] == 8 and d["ep"] in (2, 4, 8) for d in folded)


# DeepSeek-V3 technical report (arXiv 2412.19437): pre-training on 14.8T tokens took 2,664K
# H800 GPU-hours (Table 1; 2,788K with context extension and post-training) on 2,048 H800s
# (section 3.1) with PP 16, EP 64 over 8 nodes, ZeRO-1 (section 3.2) in fp8 (section 3.3), the
# all-to-all overlapped with compute (DualPipe, section 3.2.1); 4K sequences and a batch of
# 15,360 sequences after the first 469B tokens (section 4.2).
DEEPSEEK_PRETRAIN_GPU_HOURS = 2.664e6


def test_search_prices_deepseek_v3_pretraining_within_10_percent(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run_cli(
        capsys, "search", "--model", "deepseek-v3", "--hw", "h800", "--devices", "2048",
        "--tokens", "14.8T", "--seq-len", "4096", "--global-batch", str(15360 * 4096),
        "--fix", "pp=16,ep=64", "--dtype", "fp8", "--ep-overlap", "--scales", "1", "--json",
    )  # fmt: skip
    assert code == 0
    best = json.loads(out)["best"]
    assert best["degrees"]["pp"] == 16 and best["degrees"]["ep"] == 64
    # GPU-hours = devices x days x 24
    assert best["gpu_hours"] == pytest.approx(2048 * best["days_to_train"] * 24, rel=1e-9)
    assert best["gpu_hours"] == pytest.approx(DEEPSEEK_PRETRAIN_GPU_HOURS, rel=0.10)


def test_folded_from_states_the_unfolded_degrees_megatrons_way() -> None:
    from shardline.strategies import folded_from

    # 16 devices: the attention tp 4 x dp 2 x ep 2 (ep inside dp); the experts on etp 1: their
    # ep = ep x tp / etp = 2 x 4 / 1 = 8, edp = 16 / (1 x 8) = 2, the attention's dp = 2 x 2 = 4
    deg = folded_from({"tp": 4, "dp": 2, "ep": 2}, 1)
    assert deg.folded and (deg["tp"], deg["dp"], deg["ep"]) == (4, 2, 2)  # the unfolded mapping
    shown = deg.as_dict()
    assert (shown["dp"], shown["ep"], shown["etp"], shown["edp"]) == (4, 8, 1, 2)
    assert deg.experts == Degrees(tp=1, dp=2, ep=8)
    # etp = tp (or none): the layout itself, unfolded
    assert not folded_from({"tp": 4, "dp": 2, "ep": 2}, 4).folded
    assert folded_from({"tp": 4, "dp": 2, "ep": 2}, 0) == Degrees(tp=4, dp=2, ep=2)
    with pytest.raises(InputError, match="etp=3 does not divide ep x tp = 1 x 4"):
        folded_from({"tp": 4}, 3)


def test_search_enumerates_the_folded_layouts() -> None:
    from shardline.planning.train_search import search_assignments

    # Mixtral (8 experts, 8 kv heads) on 8 devices, one stage, no FSDP or cp: the unfolded
    # tp x dp x ep = 8; each with tp > 1 also folded to etp 1 where its experts' ep = ep x tp
    # divides the 8 experts: tp2 ep1 dp4 (ep 2), tp2 ep2 dp2 (ep 4), tp2 ep4 (ep 8), tp4 ep1 dp2
    # (ep 4), tp4 ep2 (ep 8), tp8 (ep 8); tp2 ep8 (ep 16) does not fold
    w = _mixtral(seq=1024, batch=64)
    fixed = {"pp": 1, "fsdp": 1, "cp": 1}
    found = search_assignments(w, 8, fixed)
    folded = sorted((d["tp"], d["ep"], d.etp, d.expert_ep) for d in found if d.folded)
    assert folded == [
        (2, 1, 1, 2),
        (2, 2, 1, 4),
        (2, 4, 1, 8),
        (4, 1, 1, 4),
        (4, 2, 1, 8),
        (8, 1, 1, 8),
    ]
    # etp held (--etp 2, --fix etp=2): the unfolded layouts of tp 2 and every fold to etp 2,
    # above tp too where etp divides tp x ep: tp 1 with ep 2, 4, 8 (the experts' ep 1, 2, 4),
    # tp 4 with ep 1, 2 and tp 8 with ep 1
    held = search_assignments(w, 8, fixed, 2)
    assert all(d.etp == 2 for d in held)
    assert sorted((d["tp"], d["ep"]) for d in held if d.folded) == [
        (1, 2), (1, 4), (1, 8), (4, 1), (4, 2), (8, 1)
    ]  # fmt: skip
    # the degrees held stated Megatron-Core's way: ep 8 is the experts' (an unfolded ep 8, or
    # tp 2 x ep 4 on etp 1, tp 4 x ep 2 on etp 1, tp 8 on etp 1)
    eight = search_assignments(w, 8, {**fixed, "ep": 8})
    assert sorted((d["tp"], d.etp) for d in eight) == [(1, 1), (2, 1), (4, 1), (8, 1)]


def test_search_holds_etp_from_fix_or_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    argv = (
        "search", "--model", "mixtral-8x7b", "--hw", "h100-sxm", "--devices", "16",
        "--seq-len", "1024", "--global-batch", "64Ki", "--scales", "1", "--rerank", "3",
    )  # fmt: skip
    code, out, _ = run_cli(capsys, *argv, "--fix", "tp=4,etp=2", "--json")
    assert code == 0
    r = json.loads(out)
    for lay in [r["best"], *r["alternatives"]]:
        assert lay["degrees"]["tp"] == 4 and lay["degrees"]["etp"] == 2
    code, _, err = run_cli(capsys, *argv, "--fix", "etp=1", "--etp", "2")
    assert code == 2 and err.strip() == "error: --etp 2 and --fix etp=1 disagree; give one"
    code, _, err = run_cli(
        capsys, "search", "--model", "llama-3.2-1b", "--devices", "8", "--etp", "1"
    )
    assert code == 2 and "needs a mixture of experts" in err


def test_moe_search_runs_tensor_parallelism_only_with_sequence_parallelism(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # Megatron-Core's MoELayer.forward raises in training when tp > 1 without sequence
    # parallelism (megatron/core/transformer/moe/moe_layer.py): the search's knob grid of a
    # tp > 1 assignment keeps sp = 1 for a mixture of experts, both for a dense model
    from shardline.planning.vector_eval import _grids
    from shardline.planning.vector_tables import ZERO_STAGES

    recomputes = 3
    dense, moe = _grids(recomputes), _grids(recomputes, tp_needs_sp=True)
    tp_dp = 3  # class 2 x (tp > 1) + (dp > 1)
    # sp x recompute x ZeRO x tp overlap: 2 x 3 x 4 x 2 dense, 1 x 3 x 4 x 2 for the experts
    assert len(dense[tp_dp]) == 2 * recomputes * len(ZERO_STAGES) * 2
    assert len(moe[tp_dp]) == 1 * recomputes * len(ZERO_STAGES) * 2
    assert set(moe[tp_dp][:, 0]) == {1} and set(dense[tp_dp][:, 0]) == {0, 1}
    assert [len(g) for g in moe[:2]] == [len(g) for g in dense[:2]]  # tp = 1: no sp to pick
    code, out, _ = run_cli(
        capsys, "search", "--model", "mixtral-8x7b", "--devices", "16", "--scales", "1",
        "--global-batch", "64Ki", "--seq-len", "4096", "--fix", "tp=2,pp=1,fsdp=1,cp=1",
        "--rerank", "8", "--json",
    )  # fmt: skip
    assert code == 0
    r = json.loads(out)
    assert all(s["sequence_parallel"] for s in [r["best"], *r["alternatives"]])
