"""The catalog as data: every chip loads, every number has a source, user files are validated."""

from __future__ import annotations

import json
import tomllib
from pathlib import Path
from typing import Any, get_args

import pytest

import shardline.hardware
from shardline import collectives
from shardline.basics.kinds import (
    BOTTLENECKS,
    BOUNDS,
    CHIP_KINDS,
    CHIP_TOPOLOGIES,
    COLLECTIVE_KINDS,
    PHASES,
    PREDICTED_BOUNDS,
    TEMPLATE_PHASES,
    TOPOLOGIES,
    WRAPAROUNDS,
    Bound,
    ChipKind,
)
from shardline.errors import InputError
from shardline.hardware import (
    ASSUMED,
    DEFAULTS,
    catalog_files,
    chip_from_dict,
    list_chips,
    load_chip,
    unsourced_fields,
)
from shardline.ops.cost import bound_of
from shardline.report.hardware import chip_detail, render_chip
from shardline.workload import templates, workload

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
    "gb200",
    "b300",
    "h100-pcie",
    "h800",
    "h20",
    "l40s",
    "mi325x",
    "mi355x",
    "tpu-v7",
    "trainium2",
]


def test_catalog_has_the_required_chips() -> None:
    names = {c.name for c in list_chips()}
    assert set(REQUIRED) <= names


# The catalog folder, globbed when the tests are collected: a new chip file is checked with no
# edit here.
CATALOG_DIR = Path(shardline.hardware.__file__).parent / "catalog"
CATALOG_FILES = sorted(CATALOG_DIR.glob("*.toml"))


def _numeric_leaves(node: object, path: str = "") -> list[tuple[str, object]]:
    """Every number (or list of numbers) in a parsed chip file, bare or as {value, source}."""
    if isinstance(node, dict):
        if "value" in node:
            return [(path, node)]
        return [
            leaf for k, v in node.items() for leaf in _numeric_leaves(v, f"{path}.{k}".strip("."))
        ]
    if isinstance(node, list) and any(_numeric_leaves(v, path) for v in node):
        return [(path, node)]
    if isinstance(node, int | float) and not isinstance(node, bool) and path != "schema":
        return [(path, node)]
    return []


def test_the_catalog_glob_finds_every_chip() -> None:
    assert len(CATALOG_FILES) >= len(REQUIRED)
    assert {Path(str(e)) for e in catalog_files()} == set(CATALOG_FILES)
    assert {Path(str(c.path)) for c in list_chips()} == set(CATALOG_FILES)


def _source_problems(path: Path) -> list[str]:
    """The check every catalog file must pass: each number (or list of numbers) is a table
    {value, source} with a non-empty source. Two walks: this file's own and the library's."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    own = [
        f"{where}: no source"
        for where, leaf in _numeric_leaves(data)
        if not isinstance(leaf, dict) or not str(leaf.get("source", "")).strip()
    ]
    return own + unsourced_fields(data)


@pytest.mark.parametrize("path", CATALOG_FILES, ids=lambda p: p.name)
def test_every_number_has_a_source(path: Path) -> None:
    assert _source_problems(path) == []
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    leaves = _numeric_leaves(data)
    assert len(leaves) >= 5, f"{path.name}: too few numbers found"  # peaks, memory, ...
    chip = chip_from_dict(data, origin=path.name, path=str(path))
    for where, _ in leaves:  # the loader keeps each of those sources
        assert chip.sources[where] == _data_at(data, where)["source"]


def _data_at(data: dict[str, Any], path: str) -> Any:
    node: Any = data
    for part in path.split("."):
        node = node[part]
    return node


def test_the_source_check_fails_on_a_number_without_a_source() -> None:
    h100 = CATALOG_DIR / "h100-sxm.toml"
    data = tomllib.loads(h100.read_text(encoding="utf-8"))
    assert unsourced_fields(data) == []
    data["memory"]["bytes_per_s"] = 3.35e12  # a bare number
    del data["interconnect"]["hop_latency_s"]["source"]  # {value} without a source
    data["on_chip"]["cores"]["source"] = "  "  # an empty source
    data["interconnect"]["torus_dims"] = [2, 4]  # a bare list of numbers
    assert unsourced_fields(data) == [
        "memory.bytes_per_s: a bare value, not {value, source}",
        "on_chip.cores: empty or missing source",
        "interconnect.hop_latency_s: empty or missing source",
        "interconnect.torus_dims: a bare value, not {value, source}",
    ]
    # names, switches and the format version are not numbers that need a source
    assert unsourced_fields({"schema": 1, "name": "x", "aliases": ["a"], "flag": True}) == []


def test_the_source_check_fails_on_a_new_chip_file_in_the_folder(tmp_path: Path) -> None:
    # the check the parametrized test runs, over a folder that also holds a file without sources
    sourced = MINIMAL.replace("= 24e9", '= { value = 24e9, source = "s" }')
    sourced = sourced.replace("= 1e12", '= { value = 1e12, source = "s" }')
    (tmp_path / "good.toml").write_text(sourced, encoding="utf-8")
    (tmp_path / "bad.toml").write_text(MINIMAL, encoding="utf-8")
    found = {p.name: _source_problems(p) for p in sorted(tmp_path.glob("*.toml"))}
    assert found == {
        "bad.toml": [
            "memory.capacity_bytes: no source",
            "memory.bytes_per_s: no source",
            "memory.capacity_bytes: a bare value, not {value, source}",
            "memory.bytes_per_s: a bare value, not {value, source}",
        ],
        "good.toml": [],
    }


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
        "cap": 95 * 2**30,  # Google Cloud TPU docs: "HBM capacity per chip (GiB) 95"
        "hbm": 2.765e12,
        "link": 9e10,
        "links": 6,
        "scale_out": 6.25e9,
    },
    "tpu-v6e": {
        "bf16": 918e12,
        "fp8": 918e12,
        "int8": 1836e12,
        "cap": 32 * 2**30,  # Google Cloud TPU docs: "HBM capacity per chip (GiB) ... 32"
        "hbm": 1.64e12,
        "link": 9e10,
        "links": 4,
        "scale_out": 12.5e9,
    },
    # Chips added later: the figures their catalog files cite (tests/test_chip_catalog_2026.py
    # writes each figure out with its source).
    "gb200": {"bf16": 2500e12, "fp8": 5000e12, "fp4": 10000e12, "cap": 186e9, "hbm": 8.0e12},
    "b300": {"bf16": 2250e12, "fp8": 4500e12, "fp4": 13500e12, "cap": 288e9, "hbm": 8.0e12},
    "h100-pcie": {"bf16": 756e12, "fp8": 1513e12, "cap": 80e9, "hbm": 2.0e12, "link": 64e9},
    "h800": {"bf16": 989.4e12, "cap": 80e9, "hbm": 3.35e12, "link": 25e9, "links": 8},
    "h20": {"bf16": 148e12, "fp8": 296e12, "cap": 96e9, "hbm": 4.0e12, "links": 18},
    "l40s": {"bf16": 362e12, "fp8": 733e12, "cap": 48e9, "hbm": 864e9, "link": 32e9},
    "mi325x": {"bf16": 1307.4e12, "cap": 256e9, "hbm": 6.0e12, "links": 7},
    "mi355x": {"bf16": 2516.6e12, "fp4": 10066.3e12, "cap": 288e9, "hbm": 8.0e12},
    "tpu-v7": {"bf16": 2307e12, "fp8": 4614e12, "cap": 192e9, "hbm": 7.38e12, "links": 6},
    "trainium2": {"bf16": 667e12, "fp8": 1299e12, "cap": 96 * 2**30, "hbm": 2.9e12},
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
        (
            MINIMAL + '\n[on_chip]\ngemm_epilogue_overlapped = "yes"\n',
            "on_chip.gemm_epilogue_overlapped",
        ),
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


# Defaults the loader fills: assumptions, named in Chip.sources and in `hw show`.

INTERCONNECT = """
[interconnect]
link_bytes_per_s = { value = 50e9, source = "my datasheet" }
links_per_chip = 4
"""


def test_catalog_defaults_are_named_assumptions() -> None:
    # The catalog gives every default-able field but these (no public figure found):
    # MI300X xGMI per-hop latency, TPU DCN per-hop latency.
    want = {
        "mi300x": {"interconnect.hop_latency_s"},
        "tpu-v4": {"interconnect.scale_out.hop_latency_s"},
        "tpu-v5e": {"interconnect.scale_out.hop_latency_s"},
        "tpu-v5p": {"interconnect.scale_out.hop_latency_s"},
        "tpu-v6e": {"interconnect.scale_out.hop_latency_s"},
        "tpu-v7": {"interconnect.scale_out.hop_latency_s"},
        "h100-pcie": {"interconnect.hop_latency_s"},
        "l40s": {"interconnect.hop_latency_s"},
        "mi325x": {"interconnect.hop_latency_s", "interconnect.scale_out.hop_latency_s"},
        "mi355x": {"interconnect.hop_latency_s"},
        "trainium2": {"interconnect.hop_latency_s", "interconnect.scale_out.hop_latency_s"},
    }
    for chip in list_chips():
        assert set(chip.assumptions) == want.get(chip.name, set()), chip.name
        for path, text in chip.assumptions.items():
            assert text == ASSUMED + DEFAULTS[path][1]
    mi300x = load_chip("mi300x").interconnect
    assert mi300x is not None and mi300x.hop_latency_s == 1e-6
    v5e = load_chip("tpu-v5e").interconnect
    assert v5e is not None and v5e.scale_out is not None
    assert v5e.scale_out.hop_latency_s == 5e-6


def test_every_default_says_why_and_cites_or_admits() -> None:
    for path, (_value, why) in DEFAULTS.items():
        assert why.strip(), path
    # the numeric defaults cite where their number comes from
    for path in ("interconnect.hop_latency_s", "interconnect.scale_out.hop_latency_s"):
        assert "fridayswithfaraday.com" in DEFAULTS[path][1]
    assert "How to Scale Your Model" in DEFAULTS["interconnect.scale_up_devices"][1]
    assert DEFAULTS["interconnect.hop_latency_s"][0] == 1e-6
    assert DEFAULTS["interconnect.scale_out.hop_latency_s"][0] == 5e-6
    assert DEFAULTS["interconnect.scale_up_devices"][0] == 8


def test_user_file_defaults_are_recorded(tmp_path: Path) -> None:
    chip = load_chip(
        _write(
            tmp_path,
            MINIMAL + INTERCONNECT + "[interconnect.scale_out]\nbytes_per_s_per_device = 1e10\n",
        )
    )
    ic = chip.interconnect
    assert ic is not None and ic.scale_out is not None
    assert (ic.topology, ic.link, ic.hop_latency_s, ic.scale_up_devices) == (
        "switch",
        "link",
        1e-6,
        8,
    )
    assert (ic.in_network_reduction, chip.vendor) == (False, "unknown")
    assert (ic.scale_out.link, ic.scale_out.hop_latency_s) == ("scale-out", 5e-6)
    assert list(chip.assumptions) == [
        "vendor",
        "interconnect.scale_out.link",
        "interconnect.scale_out.hop_latency_s",
        "interconnect.topology",
        "interconnect.in_network_reduction",
        "interconnect.link",
        "interconnect.hop_latency_s",
        "interconnect.scale_up_devices",
    ]
    assert "interconnect.wraparound" not in chip.assumptions  # a switch never wraps
    shown = render_chip(chip).split("assumptions (defaults the loader filled):\n")[1]
    assert [line.split(" = ")[0].strip() for line in shown.splitlines()] == [
        p for p in DEFAULTS if p != "interconnect.wraparound"
    ]  # listed in the file's order
    # the numbers the file gave are sourced, not assumed
    assert chip.sources["interconnect.links_per_chip"] == "user file"
    assert chip.sources["interconnect.link_bytes_per_s"] == "my datasheet"


def test_torus_defaults_and_dims(tmp_path: Path) -> None:
    torus = INTERCONNECT + 'topology = "torus"\ntorus_dims = { value = [4, 4], source = "doc" }\n'
    chip = load_chip(_write(tmp_path, 'vendor = "me"\n' + MINIMAL + torus))
    ic = chip.interconnect
    assert ic is not None and ic.torus_dims == (4, 4) and ic.wraparound == "full-axis"
    assert chip.sources["interconnect.torus_dims"] == "doc"
    assert set(chip.assumptions) == {
        "interconnect.wraparound",
        "interconnect.in_network_reduction",
        "interconnect.link",
        "interconnect.hop_latency_s",
        "interconnect.scale_up_devices",
    }
    bare = torus.replace('{ value = [4, 4], source = "doc" }', "[4, 2]")
    assert load_chip(_write(tmp_path, MINIMAL + bare)).interconnect.torus_dims == (4, 2)  # type: ignore[union-attr]
    for bad in ("[4, 0]", '{ value = [4, "x"], source = "doc" }', "[true]", "4"):
        with pytest.raises(InputError, match="field 'interconnect.torus_dims'"):
            load_chip(
                _write(tmp_path, MINIMAL + torus.replace('{ value = [4, 4], source = "doc" }', bad))
            )


def test_hw_show_lists_the_assumptions() -> None:
    mi300x = load_chip("mi300x")
    text = render_chip(mi300x)
    lines = text.splitlines()
    assert lines[-2] == "assumptions (defaults the loader filled):"
    assert lines[-1] == (
        "  interconnect.hop_latency_s = 1 µs: " + DEFAULTS["interconnect.hop_latency_s"][1]
    )
    # beside its number the filled field shows no source, as before
    hop = next(line for line in lines if "per-hop latency" in line)
    assert hop.rstrip().endswith("1 µs") and "[" not in hop
    assert chip_detail(mi300x)["assumptions"] == mi300x.assumptions
    a100 = load_chip("a100-40gb")
    assert "assumptions" not in render_chip(a100) and chip_detail(a100)["assumptions"] == {}
    v5e = render_chip(load_chip("tpu-v5e")).splitlines()
    assert v5e[-1].startswith(
        "  interconnect.scale_out.hop_latency_s = 5 µs: the InfiniBand NDR inter-node figure"
    )


def test_hw_show_json_carries_assumptions(capsys: pytest.CaptureFixture[str]) -> None:
    from shardline.cli.main import main

    assert main(["hw", "show", "tpu-v6e", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["assumptions"] == {
        "interconnect.scale_out.hop_latency_s": ASSUMED
        + DEFAULTS["interconnect.scale_out.hop_latency_s"][1]
    }
    assert out["sources"]["interconnect.scale_out.hop_latency_s"].startswith("assumed default: ")


# The shared vocabularies (shardline.basics.kinds) match the words the code uses today.


def test_kinds_tuples_come_from_the_literals() -> None:
    assert BOUNDS == get_args(Bound) == ("compute", "memory", "network")
    assert PREDICTED_BOUNDS == ("compute", "memory", "network", "overhead")
    assert BOTTLENECKS == ("compute", "memory", "network", "bubble")
    assert CHIP_KINDS == get_args(ChipKind) == ("gpu", "tpu", "cpu")
    assert COLLECTIVE_KINDS == collectives.KINDS
    assert TOPOLOGIES == collectives.TOPOLOGIES
    assert PHASES == workload.PHASES and TEMPLATE_PHASES == templates.TEMPLATE_PHASES
    assert CHIP_TOPOLOGIES == ("switch", "torus")
    assert WRAPAROUNDS == ("full-axis", "multiple-of-4")
    assert {c.kind for c in list_chips()} <= set(CHIP_KINDS)
    # bound_of answers only with Bound words: each of the three wins once
    assert [bound_of(2.0, 1.0, 0.5), bound_of(1.0, 2.0, 0.5), bound_of(1.0, 1.0, 3.0)] == list(
        BOUNDS
    )
