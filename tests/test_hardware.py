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


def test_ridge_points() -> None:
    h100 = load_chip("h100-sxm")
    assert h100.ridge("bf16") == pytest.approx(989.4e12 / 3.35e12)  # ~295 FLOP/B
    assert load_chip("tpu-v5e").ridge("bf16") == pytest.approx(197e12 / 8.19e11)  # ~240


@pytest.mark.parametrize("alias", ["H100", "h100-SXM", "h100_sxm", " h100 ", "V5E", "tpu_v5e"])
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
