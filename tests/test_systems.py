"""Systems as data: every catalog system loads with a source for each number, apply_system turns
a system into the chip's interconnect, the flags override it, bad files are input errors."""

from __future__ import annotations

import json
import tomllib
from dataclasses import replace
from pathlib import Path

import pytest

from shardline.basics.kinds import SCALE_OUT_FABRICS
from shardline.cli.main import main
from shardline.errors import InputError
from shardline.hardware import (
    apply_system,
    default_system_for,
    fabric_table,
    list_systems,
    load_chip,
    load_system,
    override_system,
    system_from_dict,
    unsourced_fields,
)
from shardline.hardware.systems import system_files

SYSTEMS = Path(__file__).resolve().parent.parent / "src/shardline/hardware/systems"
SYSTEM_FILES = sorted(p for p in SYSTEMS.glob("*.toml") if p.name != "fabrics.toml")
CATALOG_NAMES = {p.stem for p in SYSTEM_FILES}


def _chip_or_skip(name: str):  # type: ignore[no-untyped-def]
    try:
        return load_chip(name)
    except InputError:
        pytest.skip(f"chip {name} is not in this catalog yet")


@pytest.mark.parametrize("path", [*SYSTEM_FILES, SYSTEMS / "fabrics.toml"], ids=lambda p: p.name)
def test_every_number_has_a_source(path: Path) -> None:
    assert unsourced_fields(tomllib.loads(path.read_text(encoding="utf-8"))) == []


def test_the_catalog_has_the_systems_of_the_issue() -> None:
    assert {Path(str(e)).stem for e in system_files()} == CATALOG_NAMES
    assert {s.name for s in list_systems()} == CATALOG_NAMES  # each file is named for its system
    assert {
        "dgx-a100",
        "dgx-h100",
        "dgx-h200",
        "dgx-b200",
        "gb200-nvl72",
        "mi300x-roce",
        "p5-efa",
        "a3-mega-tcpxo",
        "tpu-v5e-pod",
        "tpu-v5p-pod",
    } <= CATALOG_NAMES


@pytest.mark.parametrize("name", sorted(CATALOG_NAMES))
def test_each_system_applies_to_its_chip(name: str) -> None:
    system = load_system(name)
    chip = apply_system(_chip_or_skip(system.chip), system)
    assert chip.interconnect is not None and chip.interconnect.scale_out is not None
    assert chip.interconnect.scale_up_devices == system.scale_up_domain_devices
    assert chip.interconnect.scale_out.devices_per_node == system.gpus_per_node
    assert chip.sources["interconnect.scale_up_devices"].startswith(f"system {name}: ")


def test_fabric_table_covers_the_words_the_files_use() -> None:
    table = fabric_table()
    assert set(table) <= set(SCALE_OUT_FABRICS)
    assert {s.fabric for s in list_systems()} <= set(table)
    for fabric in table.values():
        assert fabric.hop_latency_s > 0
        assert fabric.efficiency is None or 0 < fabric.efficiency <= 1
    # NCCL's tuning model: 2.7 us per network ring step (LL) for every RDMA network
    assert table["ib"].hop_latency_s == table["roce"].hop_latency_s == 2.7e-6
    # NCCL maintainers: 24 GB/s out of a 200 Gb/s (25e9 B/s) NIC
    assert table["ib"].efficiency == pytest.approx(24e9 / 25e9)


def test_dgx_h100_gives_each_gpu_one_nic() -> None:
    system = load_system("DGX-H100")  # names are case-insensitive
    chip = apply_system(load_chip("h100-sxm"), system)
    so = chip.interconnect.scale_out  # type: ignore[union-attr]
    assert so is not None
    # 8 NICs x 50e9 B/s (400 Gb/s / 8) / 8 GPUs = 50e9 B/s per GPU
    assert so.bytes_per_s_per_device == 8 * 50e9 / 8 == 50e9
    assert so.node_bytes_per_s == 8 * 50e9  # the book's 400 GB/s node egress
    assert (so.fabric, so.nics_per_node, so.devices_per_node) == ("ib", 8, 8)
    assert so.hop_latency_s == 2.7e-6 and so.efficiency == 0.96
    assert so.in_network_reduction is False  # SHARP off unless asked for
    assert chip.interconnect.in_network_reduction is True  # type: ignore[union-attr]  # NVLS
    assert chip.interconnect.library == "nccl"  # type: ignore[union-attr]
    assert chip.interconnect.egress_bytes_per_s == 18 * 25e9  # type: ignore[union-attr]


def test_nic_shares_of_the_cloud_and_tpu_systems() -> None:
    # AWS p5: 32 EFA cards x 100 Gb/s (12.5e9 B/s) over 8 GPUs = 50e9 B/s per GPU
    assert load_system("p5").scale_out_bytes_per_s_per_device == 32 * 12.5e9 / 8 == 50e9
    # GCP A3 Mega: 8 x 200 Gb/s (25e9 B/s) over 8 GPUs
    assert load_system("a3-mega").scale_out_bytes_per_s_per_device == 8 * 25e9 / 8
    # TPU v5e host: 2 x 100 Gb/s over 8 chips = 3.125e9 B/s, the chip file's DCN figure
    v5e = load_system("tpu-v5e-pod")
    assert v5e.scale_out_bytes_per_s_per_device == 2 * 12.5e9 / 8 == 3.125e9
    assert load_chip("tpu-v5e").interconnect.scale_out.bytes_per_s_per_device == 3.125e9  # type: ignore[union-attr]
    assert (v5e.library, v5e.nodes) == ("xla", 256 // 8)
    # GB200 NVL72: 18 trays x 4 NICs x 400 Gb/s = 3.6e12 B/s out of the rack (book Appendix A)
    nvl72 = load_system("nvl72")
    assert nvl72.domain_bytes_per_s == 18 * 4 * 50e9 == 3.6e12


def test_gpus_per_node_one_makes_every_gpu_its_own_node() -> None:
    one = override_system(load_system("dgx-h100"), gpus_per_node=1)
    assert (one.gpus_per_node, one.scale_up_domain_devices, one.nics_per_node) == (1, 1, 1)
    assert one.scale_out_bytes_per_s_per_device == 1 * 50e9 / 1  # each GPU keeps its NIC
    chip = apply_system(load_chip("h100-sxm"), one)
    assert chip.interconnect.scale_up_devices == 1  # type: ignore[union-attr]
    assert "--gpus-per-node" in one.sources["gpus_per_node"]


def test_gpus_per_node_on_a_rack_keeps_the_rack_domain() -> None:
    nvl72 = load_system("gb200-nvl72")
    two = override_system(nvl72, gpus_per_node=2)
    assert (two.scale_up_domain_devices, two.nics_per_node) == (72, 2)  # 4 NICs per 4 GPUs
    sixteen = override_system(load_system("dgx-h100"), gpus_per_node=16)
    assert (sixteen.scale_up_domain_devices, sixteen.nics_per_node) == (16, 16)
    with pytest.raises(InputError, match="multiple or a divisor"):
        override_system(nvl72, gpus_per_node=5)
    with pytest.raises(InputError, match="between 1 and 72"):
        override_system(load_system("dgx-h100"), gpus_per_node=73)
    with pytest.raises(InputError, match="give --nics-per-node"):
        override_system(load_system("tpu-v5e-pod"), gpus_per_node=1)  # 2 NICs / 8 = 0.25
    ok = override_system(load_system("tpu-v5e-pod"), gpus_per_node=1, nics_per_node=1)
    assert (ok.scale_up_domain_devices, ok.nics_per_node) == (1, 1)


def test_nic_and_fabric_flags() -> None:
    dgx = load_system("dgx-h100")
    assert override_system(dgx) is dgx
    faster = override_system(dgx, nics_per_node=4, nic_bytes_per_s=100e9, sharp=True)
    # 4 NICs x 100e9 B/s (800 Gb/s XDR) / 8 GPUs = 50e9 B/s per GPU
    assert faster.scale_out_bytes_per_s_per_device == 4 * 100e9 / 8 == 50e9
    assert faster.sharp and faster.sources["scale_out.nic_bytes_per_s"].startswith("user")
    efa = override_system(dgx, scale_out="efa")
    assert (efa.fabric, efa.scale_out_hop_latency_s) == ("efa", 20e-6)
    assert efa.scale_out_efficiency is None  # EFA has no published efficiency in the table
    assert override_system(dgx, scale_out="ib") is dgx  # the same word changes nothing
    with pytest.raises(InputError, match="unknown scale-out fabric 'myrinet'"):
        override_system(dgx, scale_out="myrinet")
    with pytest.raises(InputError, match="--nic-bw"):
        override_system(dgx, nic_bytes_per_s=0.0)
    with pytest.raises(InputError, match="--nics-per-node"):
        override_system(dgx, nics_per_node=0)


def test_default_system_for_a_chip() -> None:
    assert default_system_for("h100").name == "dgx-h100"  # type: ignore[union-attr]  # an alias
    assert default_system_for("mi300x").name == "mi300x-roce"  # type: ignore[union-attr]
    assert default_system_for("tpu-v5p").name == "tpu-v5p-pod"  # type: ignore[union-attr]
    assert default_system_for("a100-40gb") is None
    defaults = [s.chip for s in list_systems() if s.default_for_chip]
    assert len(defaults) == len(set(defaults))  # at most one default per chip


GOOD = {
    "name": "mine",
    "chip": "h100-sxm",
    "gpus_per_node": 8,
    "scale_out": {"fabric": "ib", "nics_per_node": 8, "nic_bytes_per_s": 50e9},
}


def test_a_user_file_fills_from_the_fabric_table() -> None:
    system = system_from_dict(GOOD)
    assert system.scale_up_domain_devices == 8  # the node, when the file gives no domain
    assert system.scale_out_hop_latency_s == fabric_table()["ib"].hop_latency_s
    assert system.sources["scale_out.hop_latency_s"].startswith("fabric ib: ")
    assert system.sources["scale_out.nic_bytes_per_s"] == "user file"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"chip": None}, "field 'chip' is missing"),
        ({"gpus_per_node": 0}, "field 'gpus_per_node' must be a positive"),
        ({"gpus_per_node": 96}, "between 1 and 72"),
        ({"colour": "red"}, "field 'colour' is not a system field"),
        ({"library": "mpi"}, "field 'library' must be one of"),
        ({"scale_up": {"domain_devices": 12}}, "field 'scale_up.domain_devices'"),
        ({"scale_out": {**GOOD["scale_out"], "fabric": "myrinet"}}, "'scale_out.fabric'"),  # type: ignore[dict-item]
        ({"scale_out": {**GOOD["scale_out"], "efficiency": 1.5}}, "from 0.001 to 1, got 1.5"),  # type: ignore[dict-item]
        ({"scale_out": {"fabric": "ib", "nics_per_node": 8}}, "'scale_out.nic_bytes_per_s' is"),
        ({"scale_out": {**GOOD["scale_out"], "sharp": "yes"}}, "must be true or false"),  # type: ignore[dict-item]
    ],
)
def test_bad_system_files_name_the_field(change: dict, message: str) -> None:
    data = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    with pytest.raises(InputError, match=message):
        system_from_dict(data, origin="bad.toml")


def test_bad_paths_and_names(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="does not exist"):
        load_system(str(tmp_path / "none.toml"))
    broken = tmp_path / "broken.toml"
    broken.write_text("name = [", encoding="utf-8")
    with pytest.raises(InputError, match="not valid TOML"):
        load_system(str(broken))
    with pytest.raises(InputError, match="unknown system 'dgx-z9'"):
        load_system("dgx-z9")
    chip = load_chip("h100-sxm")
    with pytest.raises(InputError, match="has no interconnect"):
        apply_system(replace(chip, interconnect=None), load_system("dgx-h100"))


def test_cli_system_list_and_show(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(SYSTEMS.parents[3])  # the repository root, where examples/ lies
    assert main(["system", "list"]) == 0
    table = capsys.readouterr().out
    assert all(name in table for name in CATALOG_NAMES)
    assert "8 x 400 Gb/s" in table and "32 x 100 Gb/s" in table
    assert main(["system", "show", "dgx-h100", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["name"] == "dgx-h100" and shown["path"] is None
    assert shown["derived"]["scale_out_bytes_per_s_per_device"] == 8 * 50e9 / 8
    assert shown["derived"]["node_bytes_per_s"] == 400e9
    assert shown["sources"]["scale_out.nics_per_node"]
    assert main(["system", "show", "examples/my_cluster.toml"]) == 0
    assert "file: examples/my_cluster.toml" in capsys.readouterr().out
    assert main(["system", "show", "no-such-system"]) == 2
    assert capsys.readouterr().err.startswith("error: unknown system")


def test_system_show_names_the_host_cpu_behind_the_ll_cap(
    capsys: pytest.CaptureFixture[str],
) -> None:
    # DGX H100: dual Intel Xeon 8480C (NVIDIA's datasheet); NCCL picks the LL bandwidth cap
    # across nodes by the host CPU vendor, so `system show` says which row applies
    from shardline.cli.main import main

    assert main(["system", "show", "dgx-h100"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines() if "host CPU" in x)
    assert line.split()[5] == "intel" and "8480C" in line


def test_a3_high_ring_all_gather_at_line_rate(capsys: pytest.CaptureFixture[str]) -> None:
    """GCP A3 High: 4 x 200 Gb/s GPUDirect-TCPX NICs per 8 GPUs = 100e9 B/s out of a node, 12.5e9
    per GPU. A ring all-gather of V = 8 GiB over 2 x 8 ranks sends 15/16 V out of each node:
    15/16 x 8589934592 / 100e9 = 80.53 ms at line rate (no efficiency figure for TCPX), plus
    latency."""
    a3 = load_system("a3-high")
    assert (a3.nics_per_node, a3.nic_bytes_per_s, a3.fabric) == (4, 25e9, "tcpx")
    assert a3.scale_out_bytes_per_s_per_device == 4 * 25e9 / 8 == 12.5e9
    args = ["collective", "all-gather", "--bytes", "8589934592", "--devices", "16"]
    assert main([*args, "--system", "a3-high-tcpx", "--algorithm", "ring", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)["predicted_s"]
    line_rate_s = 15 / 16 * 8589934592 / 100e9
    assert got == pytest.approx(line_rate_s, rel=0.02)
