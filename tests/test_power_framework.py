"""Power limits (shardline.hardware.power, --power-cap), frameworks as data (--framework) and the
leave-one-source-out figure lists of benchmarks/e2e_loso.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from shardline.errors import InputError
from shardline.hardware import load_chip, with_power_limit
from shardline.hardware.power import clock_fraction
from tests.cli_run import run_cli

ROOT = Path(__file__).resolve().parent.parent

# H100 SXM5 chip file: tdp 700 W (datasheet), static 73 W (idle at P0), MAMF bf16 794.5e12 FLOP/s
H100_BF16 = 794.5e12
H100_FP8 = 1402.6e12
# clock at 500 W: ((500 - 73) / (700 - 73))^(1/3) = (427 / 627)^(1/3) = 0.68102^(1/3) = 0.87981
CLOCK_500W = (427 / 627) ** (1 / 3)
# Llama 3.1 8B trained over 8 devices, FSDP 8, 16 sequences per step
PLAN_8B = (
    *("plan", "--model", "llama-3.1-8b", "--devices", "8"),
    *("--fsdp", "8", "--batch", "16", "--json"),
)


def test_clock_fraction_is_the_cube_root_of_the_switching_power_share() -> None:
    power = load_chip("h100-sxm").power
    assert power is not None
    assert clock_fraction(power, 500) == pytest.approx(0.87981, abs=1e-5)
    assert clock_fraction(power, 700) == 1.0
    # 400 W: (327 / 627)^(1/3) = 0.52153^(1/3) = 0.80494
    assert clock_fraction(power, 400) == pytest.approx(0.80494, abs=1e-5)


def test_a_power_limit_slows_the_compute_rates_and_nothing_else() -> None:
    h100 = load_chip("h100-sxm")
    capped = with_power_limit(h100, 500)
    a, b = h100.achievable, capped.achievable
    assert b.matmul_flops_per_s["bf16"] == pytest.approx(H100_BF16 * CLOCK_500W)
    assert b.matmul_flops_per_s["fp8"] == pytest.approx(H100_FP8 * CLOCK_500W)
    assert b.attention_fwd_efficiency == pytest.approx(0.748 * CLOCK_500W)
    assert capped.vector_flops_per_s["fp32"] == pytest.approx(6.69e13 * CLOCK_500W)
    # the datasheet peaks (MFU, the lower bound) and the memory system stay
    assert capped.peak_flops_per_s == h100.peak_flops_per_s
    assert capped.mem_bytes_per_s == h100.mem_bytes_per_s
    assert b.mem_bytes_per_s == a.mem_bytes_per_s
    assert b.launch_overhead_s == a.launch_overhead_s


def test_the_grand_teton_h100_runs_at_500_w_and_can_be_raised_to_700() -> None:
    variant = load_chip("h100-96gb")  # pytorch/torchtitan docs/performance.md
    assert variant.power is not None and variant.power.limit_w == 500
    assert variant.mem_bytes_per_s == 2.4e12
    assert variant.capacity_bytes == 96e9
    assert variant.achievable.matmul_flops_per_s["bf16"] == pytest.approx(H100_BF16 * CLOCK_500W)
    raised = with_power_limit(variant, 700)
    assert raised.achievable.matmul_flops_per_s["bf16"] == pytest.approx(H100_BF16)


@pytest.mark.parametrize(
    ("chip", "watts", "words"),
    [
        ("h100-sxm", 900, "above the board's design power"),
        ("h100-sxm", 60, "leaves nothing for the SMs"),
        ("h100-sxm", float("nan"), "must be between"),
        ("tpu-v5e", 100, "has no power figures"),
    ],
)
def test_impossible_power_limits_are_input_errors(chip: str, watts: float, words: str) -> None:
    with pytest.raises(InputError, match=words):
        with_power_limit(load_chip(chip), watts)


def test_plan_under_a_power_cap_is_slower_and_says_so(capsys: pytest.CaptureFixture[str]) -> None:
    base = PLAN_8B
    code, out, _ = run_cli(capsys, *base)
    assert code == 0
    free = json.loads(out)
    code, out, _ = run_cli(capsys, *base, "--power-cap", "500W")
    assert code == 0
    capped = json.loads(out)
    assert capped["hardware"]["power_limit_w"] == 500
    assert free["hardware"]["power_limit_w"] == 700
    t_free, t_cap = free["plans"][0]["predicted_s"], capped["plans"][0]["predicted_s"]
    # only the compute slows (by at most 1/0.8798 = +13.7%); the lower bound stays
    assert t_free < t_cap < t_free / CLOCK_500W
    assert capped["plans"][0]["latency_s"] == free["plans"][0]["latency_s"]
    code, out, err = run_cli(capsys, *base, "--power-cap", "900")
    assert code == 2 and err.startswith("error:") and "design power 700 W" in err


def test_framework_defaults_fill_what_the_flags_leave_out(
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = PLAN_8B
    code, out, _ = run_cli(capsys, *base)
    ex = json.loads(out)["execution"]
    assert (ex["framework"], ex["grad_reduce_dtype"], ex["recompute"]) == ("megatron", None, "none")
    code, out, _ = run_cli(capsys, *base, "--framework", "maxtext")
    # MaxText base.yml: remat_policy full; its sharding guide: gradients all-reduced in bf16
    ex = json.loads(out)["execution"]
    assert (ex["framework"], ex["recompute"], ex["grad_reduce_dtype"]) == (
        "maxtext",
        "full",
        "bf16",
    )
    assert ex["cuda_graphs"] is True
    code, out, _ = run_cli(capsys, *base, "--framework", "maxtext", "--recompute", "none")
    assert json.loads(out)["execution"]["recompute"] == "none"  # the user's flag wins
    code, out, err = run_cli(capsys, *base, "--framework", "jax")
    assert code == 2 and "unknown framework 'jax'; known: deepspeed, llm-foundry" in err


def test_fp32_gradient_reduction_doubles_the_fsdp_reduce_scatter(
    capsys: pytest.CaptureFixture[str],
) -> None:
    base = PLAN_8B
    totals = {}
    for fw in ("megatron", "torchtitan"):
        code, out, _ = run_cli(capsys, *base, "--framework", fw)
        comm = json.loads(out)["plans"][0]["comm"]
        totals[fw] = {c["kind"]: c["bytes"] for c in comm}
    # torchtitan reduces gradients in fp32 (job_config mixed_precision_reduce): 4 B against 2 B
    assert totals["torchtitan"]["reduce_scatter"] == pytest.approx(
        2 * totals["megatron"]["reduce_scatter"]
    )
    assert totals["torchtitan"]["all_gather"] == totals["megatron"]["all_gather"]


def test_framework_list_and_show(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "framework", "list", "--json")
    frameworks = json.loads(out)
    assert code == 0 and set(frameworks) >= {"megatron", "torchtitan", "maxtext", "deepspeed"}
    assert frameworks["torchtitan"]["grad_reduce_dtype"] == "fp32"
    code, out, _ = run_cli(capsys, "framework", "show", "torchtitan")
    assert code == 0 and "mixed_precision_reduce" in out


def test_leave_one_source_out_removes_a_sources_measured_figures() -> None:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import e2e_loso

    figure = e2e_loso.Figure(
        "chip", "h100-sxm.toml", "achievable.matmul_flops_per_s.bf16", 794.5e12, "x", True
    )
    chip = e2e_loso.chip_without("h100-sxm", [figure])
    assert "bf16" not in chip.achievable.matmul_flops_per_s
    assert chip.achievable.matmul_flops_per_s["fp8"] == H100_FP8
    stated = [f for f in e2e_loso.figures() if f.file == "h100-sxm-96gb.toml"]
    bandwidth = next(f for f in stated if f.path == "memory.bytes_per_s")
    assert not bandwidth.measured  # a board's bandwidth says what it is, not how fast it runs
    assert e2e_loso.sources_of(bandwidth) == ["torchtitan-performance-doc"]
    assert all(f.measured for f in e2e_loso.figures() if f.path.startswith("achievable."))


def test_a_framework_sets_only_execution_fields() -> None:
    from dataclasses import fields

    from shardline.basics.framework import SETTABLE, framework_names, load_framework
    from shardline.basics.options import Execution

    assert set(SETTABLE) <= {f.name for f in fields(Execution)}
    for name in framework_names():
        fw = load_framework(name)
        assert set(fw.defaults) <= set(SETTABLE) and set(fw.sources) == set(fw.defaults)
        Execution(**fw.defaults)  # every default is a valid value


def test_attention_kernels_are_chip_data_a_framework_names() -> None:
    from shardline.realistic.sustained import with_attention_kernel

    h100 = load_chip("h100-sxm")
    # FlashAttention-3 paper (arXiv 2407.08608), H100 SXM5, head dim 128, 8k: FlashAttention-2
    # 333 TFLOP/s causal forward and 318 backward over the 989.4e12 bf16 peak
    fa2 = with_attention_kernel(h100, "fa2").achievable
    assert fa2.attention_fwd_efficiency == pytest.approx(333e12 / 989.4e12, abs=5e-4)
    assert fa2.attention_bwd_efficiency == pytest.approx(318e12 / 989.4e12, abs=5e-4)
    assert with_attention_kernel(h100, None) is h100
    a100 = load_chip("a100-80gb")  # no per-kernel figures: its generic ones stand
    assert with_attention_kernel(a100, "fa2") is a100
    # under a 500 W limit the kernels slow with the clock too
    capped = with_power_limit(h100, 500).achievable.attention_kernels["cudnn"]
    assert capped == pytest.approx((0.535 * CLOCK_500W, 0.524 * CLOCK_500W))


def test_attention_kernel_flag_orders_the_kernels(capsys: pytest.CaptureFixture[str]) -> None:
    base = [*PLAN_8B, "--seq-len", "8192"]
    times = {}
    for kernel in ("fa2", "cudnn", "fa3"):
        code, out, _ = run_cli(capsys, *base, "--attention-kernel", kernel)
        times[kernel] = json.loads(out)["plans"][0]["predicted_s"]
    assert times["fa2"] > times["cudnn"] > times["fa3"]
    code, out, _ = run_cli(capsys, *base)
    default = json.loads(out)
    assert default["execution"]["attention_kernel"] == "cudnn"  # Megatron-Core's, in training
    assert default["plans"][0]["predicted_s"] == times["cudnn"]
    code, out, _ = run_cli(capsys, *base, "--framework", "torchtitan")
    assert json.loads(out)["plans"][0]["predicted_s"] > times["fa2"] * 0.999  # fa2 + fp32 grads
    code, _, err = run_cli(capsys, *base, "--attention-kernel", "fa9")
    assert code == 2 and "invalid choice" in err


def test_overlapped_fsdp_collectives_hold_nccls_channels(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """NCCL runs one thread block per channel (nccl.toml: 16 channels on an 8-GPU NVLink node), so
    an FSDP gather or reduce-scatter beside the compute holds 16 of an H100's 132 SMs: the
    compute loses 16/132 of the collective's time (planning.combine.phase_s contention)."""
    from shardline.planning.stage_extras import gather_sm_share

    assert gather_sm_share(load_chip("h100-sxm")) == pytest.approx(16 / 132)
    assert gather_sm_share(load_chip("mi300x")) == pytest.approx(16 / 304)  # RCCL, 304 CUs
    assert gather_sm_share(load_chip("tpu-v5p")) == 0.0  # XLA's collectives run on ICI DMA
    code, out, _ = run_cli(capsys, *PLAN_8B)  # fsdp8, 1 microbatch: compute >> the gathers
    p = json.loads(out)["plans"][0]
    fsdp = sum(c["predicted_s"] for c in p["comm"] if c["purpose"] == "fsdp")
    exposed = p["predicted_breakdown_s"]["exposed_comm_s"]
    # the collectives' realistic time is at least their line-rate time and (NCCL's bus
    # efficiency 0.82 on an H100, small messages slower) not more than twice it
    assert 16 / 132 * fsdp <= exposed <= 2 * 16 / 132 * fsdp


def test_a_chip_without_measured_rates_gets_its_peaks_under_a_lower_limit() -> None:
    import tomllib

    from shardline.hardware import chip_from_dict

    path = load_chip("h100-sxm").path
    assert path is not None
    with open(path, "rb") as f:
        data = tomllib.load(f)
    del data["achievable"]["matmul_flops_per_s"]
    chip = chip_from_dict(data, origin="h100 without measured matmul rates")
    assert with_power_limit(chip, 700).achievable.matmul_flops_per_s == {}  # the clock stays
    capped = with_power_limit(chip, 500).achievable.matmul_flops_per_s
    assert capped["bf16"] == pytest.approx(989.4e12 * CLOCK_500W)


def test_serving_takes_no_power_cap(capsys: pytest.CaptureFixture[str]) -> None:
    """Serving prices chips by name (its step-time caches): `serve` has no --power-cap and the
    serving search refuses it with one line, never a traceback."""
    load = ("--rate", "1", "--in", "512", "--out", "128", "--power-cap", "500")
    code, _, err = run_cli(capsys, "serve", "--model", "llama-3.1-8b", "--devices", "1", *load)
    assert code == 2 and "unrecognized arguments: --power-cap" in err
    code, _, err = run_cli(capsys, "search", "--model", "llama-3.1-8b", "--slo", "ttft=1s", *load)
    assert code == 2 and err.startswith("error: --power-cap applies to the training search")
