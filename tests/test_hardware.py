"""The catalog as data: every chip loads, every number has a source, user files are validated."""

from __future__ import annotations

import tomllib
from importlib import resources
from pathlib import Path

import pytest

from shardline.errors import InputError
from shardline.hardware import chip_from_dict, list_chips, load_chip

REQUIRED = [
    "a100-40gb",
    "a100-80gb",
    "h100-sxm",
    "h200",
    "b200",
    "mi300x",
    "tpu-v4",
    "tpu-v5e",
    "tpu-v5p",
    "tpu-v6e",
]


def test_catalog_has_the_required_chips() -> None:
    names = {c.name for c in list_chips()}
    assert set(REQUIRED) <= names


def _numeric_leaves(node: object, path: str = "") -> list[tuple[str, object]]:
    if isinstance(node, dict):
        if "value" in node:
            return [(path, node)]
        return [
            leaf for k, v in node.items() for leaf in _numeric_leaves(v, f"{path}.{k}".strip("."))
        ]
    if isinstance(node, int | float) and not isinstance(node, bool) and path != "schema":
        return [(path, node)]
    return []


@pytest.mark.parametrize("name", REQUIRED)
def test_every_number_has_a_source(name: str) -> None:
    entry = resources.files("shardline.hardware") / "catalog" / f"{name}.toml"
    data = tomllib.loads(entry.read_text(encoding="utf-8"))
    for path, leaf in _numeric_leaves(data):
        assert isinstance(leaf, dict), f"{name}: {path} has no source"
        assert str(leaf.get("source", "")).strip(), f"{name}: {path} has an empty source"
    chip = load_chip(name)
    for dtype in chip.peak_flops_per_s:
        assert chip.sources[f"peak_flops_per_s.{dtype}"]


def test_datasheet_figures_from_the_reference_table() -> None:
    # ../shared/reference/hardware.md: NVIDIA and Google datasheets (dense peaks).
    a100 = load_chip("a100-40gb")
    assert a100.peak("bf16") == 312e12 and a100.mem_bytes_per_s == 1.555e12
    assert a100.capacity_bytes == 40e9
    assert "fp8" not in a100.peak_flops_per_s  # absent, not zero
    v5e = load_chip("tpu-v5e")
    assert v5e.peak("bf16") == 197e12 and v5e.peak("int8") == 394e12
    assert load_chip("tpu-v4").capacity_bytes == 32 * 2**30  # 32 GiB, not 32 GB
    assert load_chip("h200").mem_bytes_per_s == 4.8e12
    for chip in list_chips():
        assert all(v > 0 for v in chip.peak_flops_per_s.values())


# Every datasheet figure of ../shared/reference/hardware.md (dense peaks; HBM in bytes, GB = 1e9,
# GiB = 2**30; link bandwidth one-way per link), chip by chip. H100/H200 bf16: the table rounds
# NVIDIA's 989.4e12 (Hopper whitepaper; 1,978.9 sparse / 2) to 989e12, hence rel=1e-3.
REFERENCE: dict[str, dict[str, float]] = {
    "a100-40gb": {
        "bf16": 312e12,
        "fp16": 312e12,
        "int8": 624e12,
        "tf32": 156e12,
        "fp32": 19.5e12,
        "cap": 40e9,
        "hbm": 1.555e12,
        "link": 25e9,
        "links": 12,
    },
    "a100-80gb": {
        "bf16": 312e12,
        "fp16": 312e12,
        "int8": 624e12,
        "tf32": 156e12,
        "fp32": 19.5e12,
        "cap": 80e9,
        "hbm": 2.039e12,
        "link": 25e9,
        "links": 12,
    },
    "h100-sxm": {
        "bf16": 989e12,
        "fp16": 989e12,
        "fp8": 1979e12,
        "int8": 1979e12,
        "tf32": 494.7e12,
        "fp32": 67e12,
        "cap": 80e9,
        "hbm": 3.35e12,
        "link": 25e9,
        "links": 18,
        "scale_out": 50e9,
    },
    "h200": {
        "bf16": 989e12,
        "fp8": 1979e12,
        "int8": 1979e12,
        "tf32": 494e12,
        "fp32": 67e12,
        "cap": 141e9,
        "hbm": 4.8e12,
        "link": 25e9,
        "links": 18,
        "scale_out": 50e9,
    },
    "b200": {
        "bf16": 2250e12,
        "fp8": 4500e12,
        "int8": 4500e12,
        "tf32": 1100e12,
        "fp32": 75e12,
        "cap": 180e9,
        "hbm": 8.0e12,
        "link": 50e9,
        "links": 18,
        "scale_out": 50e9,
    },
    "mi300x": {
        "bf16": 1307.4e12,
        "fp8": 2614.9e12,
        "int8": 2614.9e12,
        "fp32": 163.4e12,
        "cap": 192e9,
        "hbm": 5.3e12,
    },
    "tpu-v4": {
        "bf16": 275e12,
        "int8": 275e12,
        "cap": 32 * 2**30,
        "hbm": 1.2e12,
        "link": 4.5e10,
        "links": 6,
    },
    "tpu-v5e": {
        "bf16": 197e12,
        "int8": 394e12,
        "cap": 16e9,
        "hbm": 8.19e11,
        "link": 4.5e10,
        "links": 4,
        "scale_out": 3.125e9,
    },
    "tpu-v5p": {
        "bf16": 459e12,
        "int8": 918e12,
        "cap": 95e9,
        "hbm": 2.765e12,
        "link": 9e10,
        "links": 6,
        "scale_out": 6.25e9,
    },
    "tpu-v6e": {
        "bf16": 918e12,
        "fp8": 918e12,
        "int8": 1836e12,
        "cap": 32e9,
        "hbm": 1.64e12,
        "link": 9e10,
        "links": 4,
        "scale_out": 12.5e9,
    },
}


@pytest.mark.parametrize("name", REQUIRED)
def test_every_reference_figure(name: str) -> None:
    chip, want = load_chip(name), REFERENCE[name]
    for key, value in want.items():
        if key == "cap":
            got: float = chip.capacity_bytes
        elif key == "hbm":
            got = chip.mem_bytes_per_s
        elif key in ("link", "links", "scale_out"):
            ic = chip.interconnect
            assert ic is not None
            got = {
                "link": ic.link_bytes_per_s,
                "links": ic.links_per_chip,
                "scale_out": ic.scale_out.bytes_per_s_per_device if ic.scale_out else 0,
            }[key]
        else:
            got = chip.peak(key)
        assert got == pytest.approx(value, rel=1e-3), f"{name} {key}"
    # dtypes the reference says the chip lacks are absent, not zero
    lacks = {"a100-40gb": ["fp8"], "a100-80gb": ["fp8"], "tpu-v4": ["fp8"], "tpu-v5e": ["fp8"]}
    for dtype in lacks.get(name, []):
        assert dtype not in chip.peak_flops_per_s


def test_on_chip_memories_binary_where_the_maker_says_kib_mib() -> None:
    # hardware.md on-chip table: 164 KB / 228 KB max shared per SM (KB = 1024 B in NVIDIA's
    # tuning guides), VMEM 16 MiB (v4), 64 MiB (v5p), 128 MiB (v5e, v6e), CMEM 128 MiB (v4)
    assert load_chip("a100-40gb").on_chip.shared_bytes_per_core == 164 * 1024
    assert load_chip("h100-sxm").on_chip.shared_bytes_per_core == 228 * 1024
    assert load_chip("tpu-v4").on_chip.shared_bytes_per_core == 16 * 2**20
    assert load_chip("tpu-v4").on_chip.l2_bytes == 128 * 2**20
    assert load_chip("tpu-v5p").on_chip.shared_bytes_per_core == 64 * 2**20
    assert load_chip("tpu-v5e").on_chip.shared_bytes_per_core == 128 * 2**20
    assert load_chip("tpu-v6e").on_chip.shared_bytes_per_core == 128 * 2**20
    assert [load_chip(n).on_chip.cores for n in ("a100-40gb", "h100-sxm", "h200", "b200")] == [
        108,
        132,
        132,
        148,
    ]


def test_ridge_points() -> None:
    h100 = load_chip("h100-sxm")
    assert h100.ridge("bf16") == pytest.approx(989.4e12 / 3.35e12)  # ~295 FLOP/B
    assert load_chip("tpu-v5e").ridge("bf16") == pytest.approx(197e12 / 8.19e11)  # ~240


@pytest.mark.parametrize(
    "alias",
    ["H100", "h100-SXM", "h100_sxm", " h100 ", "V5E", "tpu_v5e", "NVIDIA H100", "Google TPU v5e"],
)
def test_names_are_case_insensitive_with_aliases(alias: str) -> None:
    assert load_chip(alias).name in {"h100-sxm", "tpu-v5e"}


def test_unknown_chip_lists_valid_ones() -> None:
    with pytest.raises(InputError, match="unknown chip 'h900'.*a100-40gb.*tpu-v6e"):
        load_chip("h900")


def _write(tmp_path: Path, text: str) -> str:
    path = tmp_path / "chip.toml"
    path.write_text(text, encoding="utf-8")
    return str(path)


MINIMAL = """
name = "My-Chip"
kind = "gpu"
[peak_flops_per_s]
bf16 = { value = 100e12, source = "my measurement" }
[memory]
capacity_bytes = 24e9
bytes_per_s = 1e12
"""


def test_user_file_is_accepted(tmp_path: Path) -> None:
    chip = load_chip(_write(tmp_path, MINIMAL))
    assert chip.name == "my-chip" and chip.ridge("bf16") == pytest.approx(100.0)
    assert chip.sources["peak_flops_per_s.bf16"] == "my measurement"
    assert chip.sources["memory.bytes_per_s"] == "user file"


@pytest.mark.parametrize(
    ("text", "field"),
    [
        (MINIMAL.replace("bytes_per_s = 1e12", ""), "memory.bytes_per_s"),
        (MINIMAL.replace("bytes_per_s = 1e12", "bytes_per_s = -1e12"), "memory.bytes_per_s"),
        (MINIMAL.replace("bytes_per_s = 1e12", 'bytes_per_s = "fast"'), "memory.bytes_per_s"),
        (MINIMAL.replace("bf16 =", "bf17 ="), "peak_flops_per_s.bf17"),
        (MINIMAL.replace('kind = "gpu"', 'kind = "fpga"'), "kind"),
        ("foo = 1\n" + MINIMAL, "foo"),
        (MINIMAL + "\nfoo = 1\n", "memory.foo"),
        (MINIMAL.replace("bytes_per_s = 1e12", "bytes_per_s = inf"), "memory.bytes_per_s"),
        (MINIMAL.replace("bytes_per_s = 1e12", "bytes_per_s = nan"), "memory.bytes_per_s"),
        (MINIMAL.replace("[memory]", "bfloat16 = 2e14\n[memory]"), "peak_flops_per_s.bfloat16"),
        (MINIMAL.replace('name = "My-Chip"', 'name = " "'), "name"),
        ("measured_on = 3\n" + MINIMAL, "measured_on"),
    ],
)
def test_invalid_user_file_names_the_field(tmp_path: Path, text: str, field: str) -> None:
    with pytest.raises(InputError, match=f"field '{field}'"):
        load_chip(_write(tmp_path, text))


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="not valid TOML"):
        load_chip(_write(tmp_path, "name = [unclosed"))
    with pytest.raises(InputError, match="does not exist"):
        load_chip(str(tmp_path / "missing.toml"))
    binary = tmp_path / "binary.toml"
    binary.write_bytes(b"\xff\xfe\x00")
    with pytest.raises(InputError, match="not UTF-8"):
        load_chip(str(binary))


def test_chip_from_dict_bare_numbers() -> None:
    chip = chip_from_dict(
        {
            "name": "x",
            "kind": "cpu",
            "peak_flops_per_s": {"fp32": 1e12},
            "memory": {"capacity_bytes": 1e9, "bytes_per_s": 1e10},
        }
    )
    assert chip.peak("float32") == 1e12
