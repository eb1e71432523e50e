"""`plan --from FILE` and `plan --emit FORMAT`: the frameworks' own configurations read into the
plan they describe (each rule by hand, with Megatron-LM's, torchtitan's and MaxText's own
formulas) and written back (every format round-trips to the same predicted_s); the published
configurations of benchmarks/data/e2e_runs.toml import to the plans bench_e2e prices."""

from __future__ import annotations

import importlib.util
import json
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from shardline.errors import InputError
from shardline.io.framework_files import read_config
from tests.cli_run import run_cli

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "examples" / "frameworks"


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


# --- Megatron-LM -----------------------------------------------------------------------------


def test_megatron_args_by_hand(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "train.sh",
        "TP=2\nGBS=128\n"
        "torchrun --nproc_per_node 8 pretrain_gpt.py \\\n"
        "  --num-layers 32 --hidden-size 4096 --num-attention-heads 32 \\\n"
        "  --group-query-attention --num-query-groups 8 --swiglu \\\n"
        "  --vocab-size 50257 --tensor-model-parallel-size ${TP} \\\n"
        "  --micro-batch-size 2 --global-batch-size $GBS --seq-length 4096 \\\n"
        "  --bf16 --sequence-parallel --recompute-granularity full --recompute-method uniform \\\n"
        "  --recompute-num-layers 1 --num-layers-per-virtual-pipeline-stage 4 \\\n"
        "  --pipeline-model-parallel-size 2 --use-distributed-optimizer --lr 1e-4 --frobnicate 3\n",
    )
    got = read_config(path, 32)
    # data parallel = devices / (tp x pp x cp) = 32 / (2 x 2 x 1) = 8
    assert got.degrees == {"tp": 2, "pp": 2, "dp": 8, "fsdp": 1, "ep": 1, "cp": 1}
    # microbatches = global batch / (micro batch x data parallel) = 128 / (2 x 8) = 8
    assert (got.batch, got.microbatches, got.seq_len, got.dtype) == (128, 8, 4096, "bf16")
    # --swiglu: ffn = int(4 h 2/3 / 64) x 64 = int(4 x 4096 x 2/3 / 64) x 64 = 170 x 64 = 10880
    assert got.model.d_ff == 10880
    # vocab padded to a multiple of 128 x tp = 256: ceil(50257 / 256) x 256 = 197 x 256 = 50432
    assert got.model.vocab == 50432
    assert (got.model.kv_heads, got.model.head_dim, got.model.tied_embeddings) == (8, 128, True)
    # interleave = layers / (pp x layers per virtual stage) = 32 / (2 x 4) = 4
    assert got.execution | {} == {
        "framework": "megatron",
        "recompute": "full",
        "sequence_parallel": True,
        "zero": 1,
        # --use-distributed-optimizer without --overlap-param-gather: Megatron-LM waits for the
        # parameter all-gather after the optimizer step
        "overlap_param_gather": False,
        "interleave": 4,
    }
    assert got.unknown == ("--frobnicate",)  # --lr is known and has no effect on the step


def test_megatron_block_recompute_is_full_block(tmp_path: Path) -> None:
    """--recompute-method block --recompute-num-layers 5: the first 5 blocks of each stage
    (`full-block:5`), as a flag-pinned plan; --emit megatron writes the three flags back."""
    args = (
        "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --group-query-attention "
        "--num-query-groups 8 --swiglu --vocab-size 128256 --micro-batch-size 1 "
        "--global-batch-size 64 --seq-length 4096 --bf16 --pipeline-model-parallel-size 2 "
        "--recompute-granularity full --recompute-method block --recompute-num-layers 5\n"
    )
    got = read_config(_write(tmp_path, "args.txt", args), 8)
    assert got.execution["recompute"] == "full-block:5" and got.not_modelled == ()
    bad = _write(tmp_path, "bad.txt", args.replace("method block", "method every"))
    with pytest.raises(InputError, match="--recompute-method takes uniform or block"):
        read_config(bad, 8)


def test_megatron_without_shape_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(tmp_path, "args.txt", "--num-layers 2 --tensor-model-parallel-size 1\n")
    code, out, err = run_cli(capsys, "plan", "--from", path, "--hw", "h100-sxm", "--devices", "8")
    assert code == 2 and out == ""
    assert err.startswith("error: ") and "--hidden-size" in err and err.count("\n") == 1


def test_megatron_moe_experts_split_data_parallel(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "moe.txt",
        "--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --seq-length 2048 "
        "--vocab-size 32768 --num-experts 16 --moe-router-topk 2 --moe-ffn-hidden-size 512 "
        "--expert-model-parallel-size 4 --tensor-model-parallel-size 2 --global-batch-size 64\n",
    )
    got = read_config(path, 16)
    # Megatron's data parallel 16 / 2 = 8 ranks; experts split them: dp = 8 / ep 4 = 2
    assert got.degrees == {"tp": 2, "pp": 1, "dp": 2, "fsdp": 1, "ep": 4, "cp": 1}
    assert got.microbatches == 64 // (1 * 8) and got.etp is None
    assert got.model.moe is not None and got.model.moe.experts == 16


def test_megatron_expert_tensor_parallel_folds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write(
        tmp_path,
        "fold.txt",
        "--num-layers 4 --hidden-size 1024 --num-attention-heads 8 --seq-length 2048 "
        "--vocab-size 32768 --num-experts 16 --moe-router-topk 2 --moe-ffn-hidden-size 512 "
        "--expert-model-parallel-size 8 --expert-tensor-parallel-size 1 "
        "--tensor-model-parallel-size 2 --global-batch-size 64 --bf16\n",
    )
    common = ["--hw", "h100-sxm", "--devices", "16"]
    out = tmp_path / "again.sh"
    got = _plan_json(capsys, "--from", path, *common, "--emit", "megatron", "-o", str(out))
    plan = got["plans"][0]
    # parallel folding as the plan's --etp takes it: dp is Megatron's 16 / tp 2 = 8; the experts
    # on etp 1 x ep 8 x edp = 16 devices, so edp = 2
    assert plan["degrees"] | {} == {
        "tp": 2,
        "pp": 1,
        "dp": 8,
        "fsdp": 1,
        "ep": 8,
        "cp": 1,
        "etp": 1,
        "edp": 2,
    }
    assert "--expert-tensor-parallel-size 1" in out.read_text()
    again = _plan_json(capsys, "--from", str(out), *common)
    assert again["plans"][0]["predicted_s"] == plan["predicted_s"]


# --- torchtitan and MaxText ------------------------------------------------------------------


def test_torchtitan_rules_by_hand(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "job.toml",
        '[model]\nname = "llama3"\nflavor = "8B"\n'
        "[training]\nlocal_batch_size = 4\nglobal_batch_size = 64\nseq_len = 4096\n"
        "[parallelism]\ndata_parallel_replicate_degree = 2\ndata_parallel_shard_degree = -1\n"
        "tensor_parallel_degree = 2\npipeline_parallel_degree = 2\n"
        "pipeline_parallel_microbatch_size = 1\n"
        '[activation_checkpoint]\nmode = "selective"\nselective_ac_option = "2"\n'
        "[experimental]\nfoo = 1\n[mystery]\nbar = 2\n",
    )
    got = read_config(path, 32)
    # shard = 32 / (replicate 2 x tp 2 x pp 2) = 4
    assert got.degrees == {"tp": 2, "pp": 2, "dp": 2, "fsdp": 4, "ep": 1, "cp": 1}
    # accumulation = 64 / (4 x 2 x 4) = 2; with pipelining 4 / 1 microbatches each: 2 x 4 = 8
    assert (got.batch, got.microbatches, got.seq_len) == (64, 8, 4096)
    assert got.execution["recompute"] == "layer-2"
    assert got.model.name == "llama-3.1-8b"
    assert got.unknown == ("[mystery]",)


def test_maxtext_scale_and_mesh_by_hand(tmp_path: Path) -> None:
    got = read_config(str(DATA / "maxtext_32b.yml"), 64)
    # global_parameter_scale 32: log2 = 5 = 3 x 1 + 2, so b = 1, r = 2: embedding x 2^(1+1) = 4,
    # heads and MLP x 2^(1+1) = 4, layers x 2^1 = 2
    m = got.model
    assert (m.d_model, m.heads, m.kv_heads, m.d_ff, m.layers) == (10240, 32, 32, 32768, 32)
    assert (m.gated, m.tied_embeddings, m.head_dim, m.vocab) == (False, True, 256, 32768)
    # ici_fsdp -1 = 64 / tensor 4 = 16; batch = per-device 8 x 64 chips = 512
    assert got.degrees == {"tp": 4, "pp": 1, "dp": 1, "fsdp": 16, "ep": 1, "cp": 1}
    assert (got.batch, got.microbatches, got.seq_len) == (512, 1, 2048)
    assert got.execution["recompute"] == "minimal" and got.unknown == ()


def test_maxtext_overrides_command(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "run.sh",
        "python3 MaxText/train.py MaxText/configs/base.yml run_name=x model_name=llama3-8b \\\n"
        "  per_device_batch_size=2 ici_fsdp_parallelism=4 ici_tensor_parallelism=2 \\\n"
        "  max_target_length=4096 remat_policy=save_qkv_proj mystery_knob=7\n",
    )
    got = read_config(path, 8)
    assert got.model.name == "llama-3.1-8b"
    assert got.degrees["fsdp"] == 4 and got.degrees["tp"] == 2
    assert (got.batch, got.execution["recompute"]) == (2 * 8, "save_qkv_proj")
    assert got.unknown == ("mystery_knob",)


def test_maxtext_custom_remat_offloads_and_plain_sgd(tmp_path: Path) -> None:
    """custom_moe_700b's remat (benchmarks/maxtext_trillium_model_configs.py at 3662540e):
    decoder_layer_input, query_proj, key_proj, value_proj and out_proj 'offload', the rest
    base.yml's 'remat': kept q, k, v, attn_proj (and x), all five offloaded; opt_type sgd is
    optax.sgd without momentum, with bf16 weights no state at all (sgd-plain)."""
    path = _write(
        tmp_path,
        "run.sh",
        "python3 MaxText/train.py MaxText/configs/base.yml model_name=llama3-8b \\\n"
        "  per_device_batch_size=1 remat_policy=custom decoder_layer_input=offload \\\n"
        "  query_proj=offload key_proj=offload value_proj=offload out_proj=offload \\\n"
        "  mlpwo=device opt_type=sgd weight_dtype=bfloat16 max_target_length=8192\n",
    )
    got = read_config(path, 8)
    assert got.execution["recompute"] == "keep:q,k,v,attn_proj,ffn_out"
    assert got.execution["offload"] == ("x", "q", "k", "v", "attn_proj")
    assert got.execution["optimizer"] == "sgd-plain" and got.unknown == ()
    preset = _write(
        tmp_path,
        "p.sh",
        "python3 MaxText/train.py base.yml model_name=llama3-8b per_device_batch_size=1 "
        "remat_policy=qkv_proj_offloaded max_target_length=8192\n",
    )
    ex = read_config(preset, 8).execution
    assert (ex["recompute"], ex["offload"]) == ("keep:q,k,v", ("q", "k", "v"))


# --- the published configurations import to the plans the validation prices --------------------


def _bench() -> Any:
    spec = importlib.util.spec_from_file_location("bench_e2e", ROOT / "benchmarks" / "bench_e2e.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("bench_e2e", module)
    spec.loader.exec_module(module)
    return module


def _row(name: str) -> dict[str, Any]:
    runs = tomllib.loads((ROOT / "benchmarks/data/e2e_runs.toml").read_text())["run"]
    return next(r for r in runs if r["name"] == name)


def _bench_predicted(name: str) -> float:
    bench = _bench()
    run = _row(name)
    notes: list[str] = []
    return float(bench.plan_run(run, bench.load_run_workload(run, notes), notes).predicted_s)


def _plan_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    code, out, err = run_cli(capsys, "plan", *argv, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.parametrize(
    ("run", "file", "extra"),
    [
        ("megatron-lm-gpt-1.7b-h100-48gpu", "megatron_gpt_1.7b.sh", []),
        ("tt-llama3.1-8b-h100-fsdp8", "torchtitan_llama3_8b.toml", ["--power-cap", "500"]),
        ("maxtext-32b-v5p-128", "maxtext_32b.yml", []),
    ],
)
def test_published_config_imports_to_the_validated_plan(
    capsys: pytest.CaptureFixture[str], run: str, file: str, extra: list[str]
) -> None:
    row = _row(run)
    got = _plan_json(
        capsys,
        "--from",
        str(DATA / file),
        "--hw",
        row["hw"],
        "--devices",
        str(row["devices"]),
        *extra,
    )
    plan = got["plans"][0]
    assert {k: plan["degrees"][k] for k in ("tp", "pp", "dp", "fsdp")} == {
        k: row[k] for k in ("tp", "pp", "dp", "fsdp")
    }
    assert plan["microbatches"] == row["microbatches"]
    assert got["execution"]["recompute"] == row["recompute"]
    assert plan["predicted_s"] == pytest.approx(_bench_predicted(run), rel=1e-12)


# --- every --emit format round-trips ---------------------------------------------------------


@pytest.mark.parametrize(
    ("fmt", "suffix", "layout"),
    [
        (
            "megatron",
            ".sh",
            ["--tp", "2", "--pp", "2", "--dp", "2", "--fsdp", "1", "--interleave", "2"],
        ),
        # Megatron's block method: the first 3 blocks of each of the 4 virtual stages
        (
            "megatron",
            ".sh",
            [
                *("--tp", "2", "--pp", "2", "--dp", "2", "--fsdp", "1", "--interleave", "2"),
                *("--recompute", "full-block:3"),
            ],
        ),
        ("torchtitan", ".toml", ["--tp", "2", "--pp", "1", "--dp", "1", "--fsdp", "4"]),
        ("maxtext", ".yml", ["--tp", "2", "--pp", "2", "--dp", "1", "--fsdp", "2"]),
    ],
)
def test_emit_round_trips(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fmt: str, suffix: str, layout: list[str]
) -> None:
    out = tmp_path / f"launch{suffix}"
    common = ["--hw", "h100-sxm", "--devices", "8"]
    first = _plan_json(
        capsys,
        "--model",
        "llama-3.1-8b",
        *common,
        *layout,
        "--batch",
        "32",
        "--seq-len",
        "4096",
        "--microbatches",
        "8",
        "--emit",
        fmt,
        "-o",
        str(out),
    )
    assert first["emit"] == {"format": fmt, "file": str(out)}
    again = _plan_json(capsys, "--from", str(out), *common)
    assert again["from"]["unknown"] == [] and again["from"]["not_modelled"] == []
    assert again["plans"][0]["degrees"] == first["plans"][0]["degrees"]
    assert again["plans"][0]["predicted_s"] == first["plans"][0]["predicted_s"]
    assert again["execution"] == first["execution"]


# Llama 3.1 8B over 8 H100s, FSDP 8, 16 sequences a step
PLAN_8B_FSDP8 = (
    *("plan", "--model", "llama-3.1-8b", "--hw", "h100-sxm"),
    *("--devices", "8", "--fsdp", "8", "--batch", "16"),
)


def test_emit_to_stdout_is_the_configuration_alone(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys,
        *PLAN_8B_FSDP8,
        "--seq-len",
        "4096",
        "--emit",
        "torchtitan",
    )
    assert code == 0, err
    data = tomllib.loads(out)
    assert data["model"] == {"name": "llama3", "flavor": "8B"}
    assert data["parallelism"]["data_parallel_shard_degree"] == 8
    # local batch = global 16 / 8 shards = 2
    assert data["training"]["local_batch_size"] == 2


def test_emit_refuses_what_the_format_cannot_say(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys,
        *PLAN_8B_FSDP8,
        "--recompute",
        "minimal",
        "--emit",
        "megatron",
    )
    assert code == 2 and out == "" and "recompute policy 'minimal'" in err
    # Megatron's block method has no torchtitan or MaxText setting: one line each
    for fmt in ("torchtitan", "maxtext"):
        code, out, err = run_cli(
            capsys, *PLAN_8B_FSDP8, "--recompute", "full-block:4", "--emit", fmt
        )
        assert code == 2 and out == "" and "'full-block:4'" in err and len(err.splitlines()) == 1


def test_bridge_block_recompute_override(tmp_path: Path) -> None:
    """model.recompute_method=block with model.recompute_num_layers=3: Megatron-LM's flags,
    full-block:3 (the first 3 blocks of each of the 2 stages)."""
    path = _write(
        tmp_path,
        "run.sh",
        "python pretrain_llama3_8b.py model.tensor_model_parallel_size=1 "
        "model.pipeline_model_parallel_size=2 model.context_parallel_size=1 "
        "train.micro_batch_size=1 train.global_batch_size=32 model.seq_length=4096 "
        "model.recompute_granularity=full model.recompute_method=block "
        "model.recompute_num_layers=3\n",
    )
    got = read_config(path, 8)
    assert got.execution["recompute"] == "full-block:3" and got.unknown == ()


def test_torchtitan_unknown_flavor_lists_the_known(tmp_path: Path) -> None:
    path = _write(tmp_path, "j.toml", '[model]\nname = "llama3"\nflavor = "13B"\n')
    with pytest.raises(InputError, match="known: 405B, 70B, 8B"):
        read_config(path, 8)


@pytest.mark.parametrize("option", ["0", "x", "²"])
def test_torchtitan_bad_ac_option_is_an_input_error(tmp_path: Path, option: str) -> None:
    """'²' is a digit to str.isdigit but not to int: still the one InputError."""
    text = '[model]\nname = "llama3"\nflavor = "8B"\n[activation_checkpoint]\nmode = "selective"\n'
    path = _write(tmp_path, "j.toml", text + f'selective_ac_option = "{option}"\n')
    with pytest.raises(InputError, match="selective_ac_option must be 'op' or a positive"):
        read_config(path, 8)


def test_search_emit_round_trips(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "best.sh"
    argv = ["--model", "llama-3.1-8b", "--devices", "16", "--scales", "1", "--quiet"]
    code, text, err = run_cli(
        capsys, "search", *argv, "--emit", "megatron", "-o", str(out), "--json"
    )
    assert code == 0, err
    emitted = json.loads(text)["emit"]
    best = json.loads(text)["best"]
    again = _plan_json(capsys, "--from", str(out), "--hw", "h100-sxm", "--devices", "16")
    assert again["plans"][0]["degrees"] == best["degrees"]
    # the best as Megatron-LM runs it: ZeRO 2 has no Megatron flag, stage 1 is priced instead
    assert again["plans"][0]["predicted_s"] == emitted["predicted_s"]
    assert all("ZeRO" in c for c in emitted["changes"])
    code, text, err = run_cli(capsys, "search", "--from", str(out), *argv[2:], "--json")
    assert code == 0, err
    assert json.loads(text)["from"]["format"] == "megatron"


# --- Megatron-Bridge / NeMo 2 override sets ---------------------------------------------------

BRIDGE = (
    "python examples/recipes/llama/pretrain_llama3_8b.py \\\n"
    "  model.tensor_model_parallel_size=2 model.pipeline_model_parallel_size=1 \\\n"
    "  model.context_parallel_size=1 model.sequence_parallel=true \\\n"
    "  train.micro_batch_size=1 train.global_batch_size=128 model.seq_length=8192 \\\n"
    "  mixed_precision=bf16_mixed ddp.use_distributed_optimizer=true \\\n"
    "  model.recompute_granularity=selective optimizer.lr=3e-4 model.mystery_knob=3\n"
)
SAME_AS_FLAGS = (
    "--num-layers 32 --hidden-size 4096 --ffn-hidden-size 14336 --num-attention-heads 32 "
    "--group-query-attention --num-query-groups 8 --swiglu --normalization RMSNorm "
    "--position-embedding-type rope --untie-embeddings-and-output-weights --vocab-size 128256 "
    "--tensor-model-parallel-size 2 --sequence-parallel --micro-batch-size 1 "
    "--global-batch-size 128 --seq-length 8192 --bf16 --use-distributed-optimizer "
    "--recompute-granularity selective\n"
)


def test_bridge_override_set_is_the_megatron_flags(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bridge = _write(tmp_path, "run.sh", BRIDGE)
    flags = _write(tmp_path, "args.txt", SAME_AS_FLAGS)
    common = ["--hw", "h100-sxm", "--devices", "16"]
    got = _plan_json(capsys, "--from", bridge, *common)
    want = _plan_json(capsys, "--from", flags, *common)
    assert got["from"]["format"] == "megatron-bridge" and got["from"]["model"] == "llama-3.1-8b"
    assert got["from"]["unknown"] == ["model.mystery_knob"]  # optimizer.lr: no effect, passed over
    # dp = 16 / tp 2 = 8; microbatches = 128 / (1 x 8) = 16
    assert got["plans"][0]["degrees"]["dp"] == 8 and got["plans"][0]["microbatches"] == 16
    assert got["plans"][0]["predicted_s"] == want["plans"][0]["predicted_s"]


def test_nemo2_names_and_missing_layout(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "nemo.txt",
        "--factory llama3_70b trainer.strategy.tensor_model_parallel_size=4 "
        "trainer.strategy.pipeline_model_parallel_size=2 "
        "trainer.strategy.context_parallel_size=1 data.micro_batch_size=1 "
        "data.global_batch_size=64 data.seq_length=4096\n",
    )
    got = read_config(path, 32)
    assert got.model.name == "llama-3.1-70b"
    # dp = 32 / (4 x 2) = 4; microbatches = 64 / (1 x 4) = 16
    assert got.degrees["tp"] == 4 and got.degrees["dp"] == 4 and got.microbatches == 16
    short = _write(
        tmp_path, "short.txt", "--factory llama3_70b model.tensor_model_parallel_size=4\n"
    )
    with pytest.raises(InputError, match="train.micro_batch_size"):
        read_config(short, 32)


# --- Megatron-Bridge recipe files, read without running them -----------------------------------

RECIPES = ROOT / "tests" / "data" / "frameworks"
QWEN_H100 = str(DATA / "bridge_qwen3_30b_a3b_h100.py")  # recipes/qwen/h100/qwen3_moe.py
QWEN_GB200 = str(RECIPES / "bridge_qwen3_moe_gb200.py")  # perf_recipes/qwen/gb200 + helpers
DSV3_GB200 = str(RECIPES / "bridge_deepseek_v3_gb200.py")  # perf_recipes/deepseek/gb200 + helpers


# the MoE tables' routing is force-balanced (their note), which the family configs of the
# performance scripts set, not the layout preset: cfg.model.moe_router_force_load_balancing =
# True in scripts/performance/configs/qwen/qwen3_llm_pretrain.py at c0b9a000 and 5776a6d9,
# and in deepseek_llm_pretrain.py and gpt_oss_llm_pretrain.py at 21d102f5
FORCED = ("--set", "model.moe_router_force_load_balancing=true")


@pytest.mark.parametrize(
    ("run", "file", "extra"),
    [
        (
            "qwen3-30b-a3b-h100-ep16-bf16-overlap-off",
            QWEN_H100,
            # the measured run's routing is forced-balanced (the row's how); the recipe leaves
            # moe_router_force_load_balancing off
            ["--recipe", "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config", *FORCED],
        ),
        # the A/B run: the same recipe with the expert-parallel overlap on, nothing else changed
        (
            "qwen3-30b-a3b-h100-ep16-bf16-overlap-on",
            QWEN_H100,
            [
                *("--recipe", "qwen3_30b_a3b_pretrain_16gpu_h100_bf16_config", *FORCED),
                *("--set", "comm_overlap.overlap_moe_expert_parallel_comm=true"),
            ],
        ),
        (
            "qwen3-30b-a3b-gb200-ep8-fp8-2608",
            QWEN_GB200,
            ["--recipe", "qwen3_30b_a3b_pretrain_8gpu_gb200_fp8mx_config"],
        ),
        (
            "qwen3-235b-a22b-gb200-pp8-vp3-ep32-fp8-2608",
            QWEN_GB200,
            ["--recipe", "qwen3_235b_a22b_pretrain_256gpu_gb200_fp8mx_config"],
        ),
        # recompute_granularity selective with recompute_modules ["mla_up_proj"]: that module
        (
            "deepseek-v3-gb200-pp4-vp4-ep64-fp8-2608",
            DSV3_GB200,
            ["--recipe", "deepseek_v3_pretrain_256gpu_gb200_fp8mx_config"],
        ),
    ],
)
def test_bridge_recipe_imports_to_the_validated_plan(
    capsys: pytest.CaptureFixture[str], run: str, file: str, extra: list[str]
) -> None:
    row = _row(run)
    got = _plan_json(
        capsys, "--from", file, "--hw", row["hw"], "--devices", str(row["devices"]), *extra
    )
    _is_the_validated_plan(got, run)


def _is_the_validated_plan(got: dict[str, Any], run: str) -> None:
    """`plan --json` is bench_e2e's plan of the run: its degrees, microbatches, execution
    choices and fp8 attention as the row states them, nothing unknown, the same predicted_s."""
    row = _row(run)
    plan = got["plans"][0]
    assert {k: plan["degrees"][k] for k in ("tp", "pp", "dp", "fsdp", "ep")} == {
        k: row.get(k, 1) for k in ("tp", "pp", "dp", "fsdp", "ep")
    }
    assert plan["degrees"].get("etp") == row.get("etp")
    assert plan["microbatches"] == row["microbatches"]
    ex = got["execution"]
    for key in ("recompute", "interleave", "cuda_graphs", "ep_dispatch", "ep_overlap", "zero"):
        # a row without the key runs bench_e2e's default (no CUDA graphs, all-to-all, no overlap)
        assert ex[key] == row.get(key, {"ep_dispatch": "all-to-all"}.get(key, False)), key
    assert ex["sequence_parallel"] == row["sequence_parallel"]
    assert got["from"]["attention_dtype"] == row.get("attention_dtype")
    assert got["from"]["unknown"] == []
    assert plan["predicted_s"] == pytest.approx(_bench_predicted(run), rel=1e-12)


def test_bridge_recipe_statements_by_hand(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "recipe.py",
        'HF = "Qwen/Qwen3-30B-A3B"\n'
        "def _common(cfg, sms=24):\n"
        '    if getattr(cfg.model, "moe_flex_dispatcher_backend", None) == "hybridep":\n'
        "        cfg.model.moe_hybridep_num_sms = sms\n"
        "    if cfg.model.sequence_parallel:\n"
        "        cfg.model.moe_hybridep_num_sms = 1\n"
        "    helper_elsewhere(cfg)\n"
        "def base_config() -> ConfigContainer:\n"
        "    cfg = _pretrain_common()\n"
        "    cfg.model = AutoBridge.from_hf_pretrained(HF).to_megatron_provider()\n"
        "    cfg.model.tensor_model_parallel_size = 2\n"
        "    cfg.model.recompute_granularity = 'full'\n"
        "    return cfg\n"
        "def run_config() -> ConfigContainer:\n"
        "    cfg = base_config()\n"
        "    cfg.mixed_precision = _perf_precision('fp8_cs')\n"
        "    cfg.model.tensor_model_parallel_size = 1\n"
        "    cfg.model.pipeline_model_parallel_size = 1\n"
        "    cfg.model.context_parallel_size = 1\n"
        "    cfg.model.expert_model_parallel_size = 8\n"
        "    cfg.model.seq_length = 4096\n"
        "    cfg.train.micro_batch_size = 2\n"
        "    cfg.train.global_batch_size = 64\n"
        "    cfg.model.sequence_parallel = False\n"
        "    cfg.model.moe_token_dispatcher_type = 'flex'\n"
        "    cfg.model.moe_flex_dispatcher_backend = 'hybridep'\n"
        "    cfg.model.cuda_graph_impl = 'transformer_engine'\n"
        "    cfg.model.cuda_graph_scope = ['attn']\n"
        "    cfg.comm_overlap = CommOverlapConfig(overlap_moe_expert_parallel_comm=True)\n"
        "    cfg.model.num_experts_typo = os.environ['X']\n"
        "    _common(cfg)\n"
        "    return cfg\n"
        "    cfg.model.tensor_model_parallel_size = 8\n",
    )
    got = read_config(path, 8, "run_config")
    assert got.model.name == "qwen3-30b-a3b" and got.dtype == "fp8"
    # the last setting of tp wins (1, not the base's 2); dp = 8 / (tp 1 x pp 1 x cp 1) = 8
    # Megatron ranks, the experts split them: ep 8, dp 8 / 8 = 1; microbatches = 64 / (2 x 8) = 4
    assert got.degrees == {"tp": 1, "pp": 1, "dp": 1, "fsdp": 1, "ep": 8, "cp": 1}
    assert got.microbatches == 4 and got.batch == 64 and got.seq_len == 4096
    ex = got.execution
    # the helper's default sms=24 under a condition the reader evaluates (backend hybridep);
    # the second condition (sequence parallel off) is false
    assert ex["ep_comm_sms"] == 24 and ex["ep_dispatch"] == "hybridep" and ex["ep_overlap"]
    assert ex["recompute"] == "full" and "cuda_graphs" not in ex  # scoped graphs: priced off
    # what the reader did not evaluate, one line each (the lines of the file above)
    assert got.not_read == (
        "line 9: _pretrain_common() is not in the file",
        "line 30: model.num_experts_typo = os.environ['X']: a value computed by code the reader "
        "does not evaluate",
        "line 7: helper_elsewhere(...) is not in the file",
    )
    assert any("cuda_graph_scope attn" in n for n in got.not_modelled)
    with pytest.raises(InputError, match="2 recipe functions"):
        read_config(path, 8)
    with pytest.raises(InputError, match="no function 'nope'"):
        read_config(path, 8, "nope")


def test_bridge_recipe_never_runs_the_file(tmp_path: Path) -> None:
    marker = tmp_path / "ran"
    path = _write(
        tmp_path,
        "evil.py",
        f"open({str(marker)!r}, 'w').write('x')\n"
        "def only_config():\n"
        f"    open({str(marker)!r}, 'w').write('x')\n"
        "    cfg = llama3_8b_pretrain_config()\n"
        "    return cfg\n",
    )
    # the base recipe's layout is not in the file: an error naming what to --set
    with pytest.raises(InputError, match="does not set model.tensor_model_parallel_size"):
        read_config(path, 8)
    got = read_config(
        path,
        8,
        None,
        (
            *("model.tensor_model_parallel_size=1", "model.pipeline_model_parallel_size=1"),
            *("model.context_parallel_size=1", "train.micro_batch_size=1"),
            *("train.global_batch_size=16", "model.seq_length=8192"),
        ),
    )
    assert not marker.exists()
    # the base recipe's name gives the model; microbatches = 16 / (1 x 8) = 2
    assert got.model.name == "llama-3.1-8b" and got.microbatches == 2


def test_recipe_and_set_need_a_bridge_file(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(
        capsys,
        *("plan", "--from", str(DATA / "megatron_gpt_1.7b.sh"), "--hw", "h100-sxm"),
        *("--devices", "48", "--set", "model.seq_length=2048"),
    )
    assert code == 2 and out == "" and "--set applies to a Megatron-Bridge" in err
    code, out, err = run_cli(
        capsys,
        *("plan", "--model", "llama-3.1-8b", "--hw", "h100-sxm", "--devices", "8"),
        *("--recipe", "x_config"),
    )
    assert code == 2 and "--recipe and --set go with --from FILE" in err


# --- the layout presets of Megatron-Bridge's performance scripts -----------------------------
# scripts/performance/configs/FAMILY/*_workload_base_configs.py at the commit of each summary;
# the preset is the layout, its base recipe (src/megatron/bridge/recipes, not in the file) the
# rest: what the base recipe sets that the plan needs is given with --set, as the recipes write
# it (llama3_70b_pretrain_config and the Qwen3 MoE recipes: cfg.ddp.use_distributed_optimizer =
# True, cfg.ddp.overlap_param_gather = True; llama3_70b_pretrain_config: cfg.model.seq_length =
# 8192 and CommOverlapConfig(tp_comm_overlap=True); the Qwen3 performance scripts: seq 4096)
BASE_DDP = ("--set", "ddp.use_distributed_optimizer=true", "--set", "ddp.overlap_param_gather=true")
SEQ_4096 = ("--set", "model.seq_length=4096")
MOE_4096 = (*SEQ_4096, *FORCED)


@pytest.mark.parametrize(
    ("run", "file", "preset", "extra"),
    [
        (
            "llama3-70b-h100-tp4pp8-fp8",
            "bridge_llama3_presets_00919dcf.py",
            "LLAMA3_70B_PRETRAIN_CONFIG_H100_FP8_CS_V1",
            ("--set", "model.seq_length=8192", "--set", "comm_overlap.tp_comm_overlap=true"),
        ),
        (
            "llama3-8b-b200-dp8-fp8",
            "bridge_llama3_presets_00919dcf.py",
            "LLAMA3_8B_PRETRAIN_CONFIG_B200_FP8_CS_V1",
            ("--set", "model.seq_length=8192"),
        ),
        (
            "qwen3-30b-a3b-gb200-ep8-fp8",
            "bridge_qwen3_presets_c0b9a000.py",
            "QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1",
            MOE_4096,
        ),
        (
            "qwen3-235b-a22b-gb200-pp8-ep32-fp8",
            "bridge_qwen3_presets_c0b9a000.py",
            "QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2",
            MOE_4096,
        ),
        (
            "qwen3-30b-a3b-b200-ep8-fp8-2604",
            "bridge_qwen3_presets_21d102f5.py",
            "QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_MX_V1",
            MOE_4096,
        ),
        (
            "qwen3-235b-a22b-h100-pp8-vp4-ep32-fp8-2604",
            "bridge_qwen3_presets_21d102f5.py",
            "QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V2",
            MOE_4096,
        ),
        # the 25.11 summary's commit names its presets ..._BASE_CONFIG in place of a version
        (
            "qwen3-235b-a22b-h100-pp8-vp4-ep32-fp8-2511",
            "bridge_qwen3_presets_5776a6d9.py",
            "QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_BASE_CONFIG",
            MOE_4096,
        ),
        (
            "qwen3-30b-a3b-h100-ep16-fp8-2606",
            "bridge_qwen3_presets_63b08b39.py",
            "QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1",
            MOE_4096,
        ),
        # the row leaves out, as its recompute_source says, the MLP module of the recompute (the
        # 3 dense blocks only) and takes DeepEP's SMs at Megatron-Core's default of 20
        (
            "deepseek-v3-b200-pp8-vp2-ep32-fp8-2604",
            "bridge_deepseek_presets_21d102f5.py",
            "DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2",
            (
                *MOE_4096,
                *("--set", "model.recompute_modules=mla_up_proj"),
                *("--set", "model.moe_deepep_num_sms=20"),
            ),
        ),
        # the first 5 of the 32 blocks recomputed (the preset's recompute_num_layers: Megatron's
        # block method); Megatron FSDP as the table's run was launched (--use_megatron_fsdp:
        # _set_megatron_fsdp_overrides in scripts/performance/utils/overrides.py)
        (
            "llama3-8b-h100-fsdp-fp8",
            "bridge_llama3_presets_00919dcf.py",
            "LLAMA3_8B_PRETRAIN_CONFIG_H100_FP8_CS_V1",
            (
                *("--set", "model.seq_length=8192", "--set", "ddp.use_megatron_fsdp=true"),
                *("--set", "ddp.data_parallel_sharding_strategy=optim_grads_params"),
            ),
        ),
        # the preset's recompute of the layer norms and the expert activation (V1's
        # recompute_modules, which V2 keeps) is the row's modules:layernorm,moe_act
        (
            "gpt-oss-120b-h100-pp4-ep8-bf16-2604",
            "bridge_gpt_oss_presets_21d102f5.py",
            "GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V2",
            MOE_4096,
        ),
    ],
)
def test_bridge_layout_preset_imports_to_the_validated_plan(
    capsys: pytest.CaptureFixture[str], run: str, file: str, preset: str, extra: tuple[str, ...]
) -> None:
    row = _row(run)
    got = _plan_json(
        capsys,
        *("--from", str(RECIPES / file), "--recipe", preset),
        *("--hw", row["hw"], "--devices", str(row["devices"]), *BASE_DDP, *extra),
    )
    _is_the_validated_plan(got, run)


def test_layout_preset_by_hand(tmp_path: Path) -> None:
    path = _write(
        tmp_path,
        "presets.py",
        "from dataclasses import replace\n"
        "BASE_QWEN3_30B_A3B_CONFIG = WorkloadBaseConfig(expert_model_parallel_size=8,\n"
        "    global_batch_size=512, moe_flex_dispatcher_backend='deepep')\n"
        "QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1 = replace(BASE_QWEN3_30B_A3B_CONFIG,\n"
        "    num_gpus=16, tensor_model_parallel_size=2, micro_batch_size=2, moe_a2a_overlap=True,\n"
        "    recompute_num_layers=4, pp_layout=compute_layout())\n"
        "QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_MX_V1 = \\\n"
        "    QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1\n",
    )
    got = read_config(
        path, 32, "QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_MX_V1", ("model.seq_length=4096",)
    )
    # the model and precision by the preset's name: qwen3_30b_a3b, FP8_MX (an fp8 preset)
    assert got.model.name == "qwen3-30b-a3b" and got.dtype == "fp8"
    # Megatron's data parallel = 32 / tp 2 = 16 ranks, split by ep 8: dp 2;
    # microbatches = 512 / (2 x 16) = 16; sequence parallel with tp > 1 (WorkloadBaseConfig)
    assert got.degrees == {"tp": 2, "pp": 1, "dp": 2, "fsdp": 1, "ep": 8, "cp": 1}
    assert got.microbatches == 16 and got.batch == 512
    ex = got.execution
    assert ex["sequence_parallel"] and ex["ep_overlap"] and ex["ep_dispatch"] == "hierarchical"
    # recompute_num_layers 4: full recompute, method block: the first 4 blocks of the stage
    assert ex["recompute"] == "full-block:4"
    assert not any("recompute" in n for n in got.not_modelled)
    # a field computed by code is not read, and the preset's num_gpus is not the devices
    assert got.not_read == (
        "line 6: pp_layout = compute_layout(): not read",
        "QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_MX_V1: 16 GPUs; priced on --devices 32",
    )
    with pytest.raises(InputError, match="does not set model.seq_length"):
        read_config(path, 32, "QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_MX_V1")


@pytest.mark.parametrize(
    ("name", "model", "dtype"),
    [
        ("QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V2", "qwen3-30b-a3b", "fp8"),  # 00919dcf on
        (
            "QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_BF16_BASE_CONFIG",
            "qwen3-30b-a3b",
            "bf16",
        ),  # 5776a6d9
        ("QWEN3_30B_A3B_B200_FP8_MX_BASE_CONFIG", "qwen3-30b-a3b", "fp8"),  # the 0.2 releases
    ],
)
def test_preset_names_of_each_convention(tmp_path: Path, name: str, model: str, dtype: str) -> None:
    """The model and precision are read from each naming convention the scripts have used."""
    path = _write(
        tmp_path,
        "presets.py",
        f"{name} = WorkloadBaseConfig(expert_model_parallel_size=8, global_batch_size=64)\n",
    )
    got = read_config(path, 8, name, ("model.seq_length=4096",))
    assert (got.model.name, got.dtype, got.degrees["ep"], got.batch) == (model, dtype, 8, 64)


def test_recipe_files_refused_in_one_line(tmp_path: Path) -> None:
    bad = _write(tmp_path, "bad.py", "def x_config(:\n")
    with pytest.raises(InputError, match="not Python a recipe reader can parse"):
        read_config(bad, 8)
    # a 4-bit preset is refused, not priced as bf16 or fp8 in its place
    fp4 = _write(
        tmp_path,
        "fp4.py",
        "BASE = WorkloadBaseConfig(global_batch_size=8)\n"
        "LLAMA3_8B_PRETRAIN_CONFIG_B200_NVFP4_V1 = replace(BASE, micro_batch_size=1)\n",
    )
    with pytest.raises(InputError, match="4-bit training presets are not read"):
        read_config(fp4, 8, "LLAMA3_8B_PRETRAIN_CONFIG_B200_NVFP4_V1", ("model.seq_length=8192",))
    # a name of no convention: its model is not guessed
    odd = _write(tmp_path, "odd.py", "MY_LAYOUT = WorkloadBaseConfig(global_batch_size=8)\n")
    with pytest.raises(InputError, match="is not named MODEL_TASK_CONFIG_GPU_PRECISION_VERSION"):
        read_config(odd, 8, "MY_LAYOUT", ("model.seq_length=8192",))


# --- NeMo 2.0 recipes (NeMo-Run's run.Partial), read without running them ---------------------

NEMO2_8B = str(RECIPES / "nemo2_llama3_8b_aed13ee8.py")  # nemo/collections/llm/recipes/llama3_8b.py


def test_nemo2_recipe_by_hand(capsys: pytest.CaptureFixture[str]) -> None:
    """pretrain_recipe() of NeMo 2.0's llama3_8b.py: trainer() at its defaults (tp 1, pp 1,
    context parallel 2, one node of 8 GPUs), MockDataModule(seq_length=8192,
    global_batch_size=512, micro_batch_size=1), bf16_mixed(), the DDP config's
    grad_reduce_in_fp32=True; performance_mode False leaves the `if` untaken."""
    got = read_config(NEMO2_8B, 8)
    assert got.format == "nemo2-recipe" and got.model.name == "llama-3.1-8b"
    # data parallel = 8 / (tp 1 x pp 1 x cp 2) = 4; microbatches = 512 / (1 x 4) = 128
    assert got.degrees == {"tp": 1, "pp": 1, "dp": 4, "fsdp": 1, "ep": 1, "cp": 2}
    assert (got.batch, got.microbatches, got.seq_len, got.dtype) == (512, 128, 8192, "bf16")
    assert got.execution["grad_reduce_dtype"] == "fp32" and "zero" not in got.execution
    # Megatron-LM reads --overlap-param-gather only beside the distributed optimizer, which the
    # file does not set (below: given with --set, it is read)
    assert got.unknown == ("ddp.overlap_param_gather",)
    # the optimizer helper is NeMo's, not the file's: said, and its distributed optimizer not
    # guessed
    (line,) = got.not_read
    assert line.startswith("optim = distributed_fused_adam_with_cosine_annealing(...): not in")
    # with the distributed optimizer given, the plan is the flag-pinned one
    imported = _plan_json(
        capsys, "--from", NEMO2_8B, "--hw", "h100-sxm", "--devices", "8",
        "--set", "ddp.use_distributed_optimizer=true",
    )  # fmt: skip
    pinned = _plan_json(
        capsys, "--model", "llama-3.1-8b", "--hw", "h100-sxm", "--devices", "8",
        "--tp", "1", "--pp", "1", "--dp", "4", "--fsdp", "1", "--cp", "2",
        "--batch", "512", "--seq-len", "8192", "--microbatches", "128", "--dtype", "bf16",
        "--phase", "training", "--framework", "megatron", "--recompute", "none",
        "--zero", "1", "--overlap-param-gather", "--grad-reduce-dtype", "fp32",
    )  # fmt: skip
    assert imported["from"]["unknown"] == []
    assert imported["execution"] == pinned["execution"]
    assert imported["plans"][0]["predicted_s"] == pinned["plans"][0]["predicted_s"]


def test_nemo2_performance_mode_and_what_is_not_read(tmp_path: Path) -> None:
    """The same file with a recipe that calls pretrain_recipe(performance_mode=True, num_nodes=2):
    pretrain_performance_optimizations runs (`if not recipe.trainer.callbacks` is False: the
    TimingCallback is there), adding MegatronCommOverlapCallback(tp_comm_overlap=False) and
    setting the precision plugin's grad_reduce_in_fp32 = False; the optimizer's own config is
    a helper's, so setting a field of it is said, not followed."""
    text = Path(NEMO2_8B).read_text(encoding="utf-8")
    text += (
        "\n\ndef fast_recipe():\n    return pretrain_recipe(performance_mode=True, num_nodes=2)\n"
    )
    path = _write(tmp_path, "llama3_8b.py", text)
    got = read_config(path, 16, "fast_recipe")
    # 2 nodes x 8 GPUs = 16: data parallel 16 / 2 = 8, microbatches 512 / 8 = 64
    assert got.degrees["dp"] == 8 and got.microbatches == 64
    assert got.execution.get("grad_reduce_dtype") is None  # the plugin's False, set last
    # both callbacks followed (the overlap callback's tp_comm_overlap False: no tp overlap)
    assert got.execution.get("tp_overlap") is None
    assert not any("callbacks" in n for n in got.not_read)
    assert any("recipe.optim.config.use_precision_aware_optimizer" in n for n in got.not_read)
    with pytest.raises(InputError, match="no recipe function 'nope'"):
        read_config(path, 16, "nope")
    bare = _write(
        tmp_path,
        "bare.py",
        "import nemo_run as run\n\ndef pretrain_recipe():\n"
        "    return run.Partial(pretrain, data=run.Config(MockDataModule, seq_length=4096))\n",
    )
    with pytest.raises(InputError, match="does not set model.tensor_model_parallel_size"):
        read_config(bare, 8)
