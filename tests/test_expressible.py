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


@pytest.mark.parametrize(
    "chip, devices, dtype",
    [("tpu-v5e", 256, "bf16"), ("tpu-v5p", 64, "bf16"), ("h100", 1024, "fp8")],
)
def test_pod_totals(
    capsys: pytest.CaptureFixture[str], chip: str, devices: int, dtype: str
) -> None:
    """N chips: N x peak, N x HBM, N x HBM bandwidth; links N L / 2 on a torus (a link has two
    ends), N L into switches; the bisection across the longest torus dimension d (two planes of
    N / d links where it wraps) or N / 2 devices' NIC share beyond one switch node."""
    from shardline.hardware import resolve_chip

    c = resolve_chip(chip)
    ic = c.interconnect
    r = _run(capsys, "hw", "totals", chip, "--devices", str(devices), "--dtype", dtype)
    assert r["peak_flops_per_s"] == pytest.approx(devices * c.peak(dtype))
    assert r["hbm_bytes"] == pytest.approx(devices * c.capacity_bytes)
    assert r["hbm_bytes_per_s"] == pytest.approx(devices * c.mem_bytes_per_s)
    if ic.topology == "switch":
        assert r["links"] == devices * ic.links_per_chip
        assert r["bisection_bytes_per_s"] == pytest.approx(
            devices / 2 * ic.scale_out.bytes_per_s_per_device
        )
    else:
        assert r["links"] == devices * ic.links_per_chip // 2
    if chip == "tpu-v5e":  # 16 x 16, both dimensions full and wrapped: 2 x 256 / 16 links
        assert r["bisection_bytes_per_s"] == pytest.approx(2 * 256 / 16 * 45e9)
    if chip == "tpu-v5p":  # 64 chips fill 16 x 4 of the 16 x 20 x 28 torus; v5p wraps any
        # multiple of 4, so the 16-chip dimension is a ring: 2 x 64 / 16 links
        assert r["bisection_bytes_per_s"] == pytest.approx(2 * 64 / 16 * ic.link_bytes_per_s)


@pytest.mark.parametrize(
    "chip, rate, per_cycle", [("tpu-v5e", 6.144e12, 1), ("h100", 6.69e13, 2), ("tpu-v5e", 3e12, 1)]
)
def test_clock_from_vector_rate(
    capsys: pytest.CaptureFixture[str], chip: str, rate: float, per_cycle: float
) -> None:
    """f = rate / (cores x lanes per core x FLOPs per lane per cycle): v5e 1 x 4096 lanes,
    H100 132 SMs x 128 fp32 lanes, an FMA two FLOPs."""
    lanes = {"tpu-v5e": 1 * 4096, "h100": 132 * 128}[chip]
    r = _run(capsys, "solve", "clock", "--hw", chip, "--vector-rate", str(rate))
    assert r["clock_hz"] == pytest.approx(rate / (lanes * per_cycle))


@pytest.mark.parametrize("hours, tokens", [(30.84e6, 15.6e12), (1e6, 1e12)])
def test_utilization_from_gpu_hours(
    capsys: pytest.CaptureFixture[str], hours: float, tokens: float
) -> None:
    """U = 6 N D / (hours x 3600 x peak); LLaMA-3.1-405B, N = 405,853,388,800 active params."""
    r = _run(
        capsys, "solve", "utilization", "--hw", "h100", "--gpu-hours", str(hours), "--model",
        "llama-3.1-405b", "--tokens", str(tokens),
    )  # fmt: skip
    assert r["utilization"] == pytest.approx(
        6 * 405_853_388_800 * tokens / (hours * 3600 * 989.4e12), rel=1e-9
    )
    r = _run(capsys, "solve", "utilization", "--hw", "h100", "--gpu-hours", "10", "--flops", "1e19")
    assert r["utilization"] == pytest.approx(1e19 / (10 * 3600 * 989.4e12))


@pytest.mark.parametrize("target", [0.3, 0.45])
def test_batch_reaching_a_target_mfu(capsys: pytest.CaptureFixture[str], target: float) -> None:
    """The answer's plan reaches the target (MFU = model FLOPs / (devices x peak x step)) and one
    item less does not, on any plan that fits."""
    argv = [
        "plan",
        "--model",
        "llama-3.1-8b",
        "--hw",
        "h100",
        "--devices",
        "8",
        "--seq-len",
        "2048",
    ]
    r = _run(capsys, *argv, "--target-mfu", str(target))
    p = r["plan"]
    assert p["mfu"] >= target
    assert p["mfu"] == pytest.approx(p["model_flops"] / (8 * 989.4e12 * p["predicted_s"]), rel=1e-9)
    if r["batch"] > 1:
        below = _run(capsys, *argv, "--batch", str(r["batch"] - 1))
        assert max(q["mfu"] for q in below["plans"] if q["fits"]) < target


def _leaf_spine(tmp_path) -> str:
    from pathlib import Path

    from shardline.hardware import systems

    text = (Path(systems.__file__).parent / "systems" / "dgx-h100.toml").read_text()
    text = text.replace('name = "dgx-h100"', 'name = "leafspine"').replace(
        'aliases = ["dgxh100", "hgx-h100"]', "aliases = []"
    )
    text = text.replace("default_for_chip = true", "nodes = 16")
    text = text.replace(
        "in_network_reduction = true",
        'in_network_reduction = true\nswitch_bytes_per_s = { value = 2.4e12, source = "test" }',
    )
    text = text.replace(
        "sharp = false",
        'sharp = false\noversubscription = { value = 2, source = "test" }\n'
        'nodes_per_leaf = { value = 4, source = "test" }',
    )
    path = tmp_path / "leafspine.toml"
    path.write_text(text)
    return str(path)


def test_switch_levels_in_a_system_file(capsys: pytest.CaptureFixture[str], tmp_path) -> None:
    """A DGX H100 cluster of 16 nodes on a 2:1 leaf/spine (4 nodes per leaf) whose NVSwitches
    carry 2.4 TB/s: bisection 16/2 x 400 GB/s / 2 = 1.6 TB/s; a device's switch share 2.4 TB/s /
    8 = 300 GB/s (under its 450 GB/s of links); a 1 GB all-reduce over 64 GPUs (8 nodes: past
    one leaf) runs NVLS inside at V/300e9 and the nodes' ring at 2 (7/8) (V/8) / (50e9/2)."""
    path = _leaf_spine(tmp_path)
    d = _run(capsys, "system", "show", path)["derived"]
    assert d["bisection_bytes_per_s"] == pytest.approx(16 / 2 * 400e9 / 2)
    assert d["switch_share_bytes_per_s"] == pytest.approx(2.4e12 / 8)
    v = 1e9
    r = _run(
        capsys, "collective", "all-reduce", "--bytes", "1e9", "--devices", "64", "--system", path
    )
    inside, across = v / 300e9, 2 * 7 / 8 * (v / 8) / 25e9
    assert r["t_bandwidth_s"] == pytest.approx(max(inside, across), rel=1e-9)
    # 32 GPUs = 4 nodes: one leaf, no spine, the full 50 GB/s per device
    r = _run(
        capsys, "collective", "all-reduce", "--bytes", "1e9", "--devices", "32", "--system", path
    )
    assert r["t_bandwidth_s"] == pytest.approx(max(v / 300e9, 2 * 3 / 4 * (v / 8) / 50e9))
