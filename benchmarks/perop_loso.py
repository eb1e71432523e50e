"""Per-op truth out of source: every published GEMM and collective row scored twice, with the
shipped figures (in sample) and with figures from the other sources only (leave one source out).

Every row of benchmarks/data/gemm_published.csv, collectives_published.csv and
collectives_heldout.csv names its publication in `source_id`; benchmarks/data/perop_sources.toml
lists each source with the strings that name it in a figure's source text. Out of source S:

- a chip figure whose source text names S is taken out of the row's chip file: the value another
  publication states stands in where perop_sources.toml gives one (`[[fallback]]`), the loader's
  assumed default or the chip's peak otherwise (benchmarks/e2e_loso.py, `chip_without`);
- a collective library figure derived from several sources (perop_sources.toml, `[[derived]]`)
  is the mean of the other sources' values, or is left out where S was its only source (the
  library's own rule stands in);
- a library or system figure that names S without a `[[derived]]` entry stops the script: it
  could not be rebuilt without S, so the out-of-source error would be a lie.

    python benchmarks/perop_loso.py            # print and write docs/validation.md
    python benchmarks/perop_loso.py --no-write # print only

Error: predicted / measured - 1. Classes: GEMMs small / skinny / square (bench_gemm.py);
collectives in one node / across nodes.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import datetime
import statistics
import sys
import tomllib
from collections.abc import Iterator
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_collectives  # noqa: E402
import bench_gemm  # noqa: E402
from e2e_loso import Figure, chip_file, chip_without, figures  # noqa: E402
from validation_doc import replace_section  # noqa: E402

SOURCES = ROOT / "benchmarks" / "data" / "perop_sources.toml"
LIBRARIES = ROOT / "src" / "shardline" / "collectives" / "libraries"
DOC = ROOT / "docs" / "validation.md"
HEADING = "## Per-op truth out of source"
# the vLLM kernel-benchmark tables on B200 (triton do_bench_cudagraph: a warm L2)
VLLM_B200 = ("vllm-pr-18778", "vllm-pr-19566")
_US = 1e-6


@dataclass(frozen=True)
class Scored:
    """One published row, in sample and out of its own source."""

    op: str  # gemm, collective
    chip: str
    shape_class: str  # small / skinny / square; in one node / across nodes
    source_id: str
    in_sample: float  # error with the shipped figures
    out_of_source: float  # error with the other sources' figures only


@cache
def _data(path: Path = SOURCES) -> dict[str, Any]:
    return tomllib.loads(path.read_text(encoding="utf-8"))


def source_patterns() -> dict[str, tuple[str, ...]]:
    """source_id -> the lower-case strings that name that source in a figure's source text."""
    return {s["id"]: tuple(m.lower() for m in s["matches"]) for s in _data()["source"]}


def row_patterns() -> dict[str, tuple[str, ...]]:
    """source_id -> the lower-case strings that name that source in a benchmark row's source."""
    return {s["id"]: tuple(m.lower() for m in s["rows"]) for s in _data()["source"]}


def names(text: str) -> list[str]:
    """The per-op source ids a source text names."""
    low = text.lower()
    return [sid for sid, pats in source_patterns().items() if any(p in low for p in pats)]


def _table_sources() -> list[tuple[str, str, str]]:
    """(library file, table, source text) of every library table sourced as a whole."""
    out = []
    for path in sorted(LIBRARIES.glob("*.toml")):
        data = tomllib.loads(path.read_text(encoding="utf-8"))
        for key, node in data.items():
            if isinstance(node, dict) and isinstance(node.get("source"), str):
                out.append((path.name, key, node["source"]))
    return out


def derived_values(source_id: str) -> dict[tuple[str, str, str], float | None]:
    """(library file, table, key) -> the figure out of `source_id` (us; None: left out), for every
    derived figure `source_id` gave a value to."""
    out: dict[tuple[str, str, str], float | None] = {}
    for entry in _data().get("derived", []):
        values = entry["values"]
        if source_id not in values:
            continue
        others = [float(v) for s, v in values.items() if s != source_id]
        value = statistics.fmean(others) if others else None
        for file in entry["files"]:
            for key in entry["keys"]:
                out[(file, entry["table"], key)] = value
    return out


def unrebuildable(source_id: str) -> list[str]:
    """Figures naming `source_id` that this script cannot rebuild without it (should be none)."""
    bad = [
        f"{f.kind} {f.file} {f.path}"
        for f in figures()
        if f.kind != "chip" and source_id in names(f.source)
    ]
    covered = {(file, table) for file, table, _ in derived_values(source_id)}
    bad += [
        f"collective library {file} {table}"
        for file, table, text in _table_sources()
        if source_id in names(text) and (file, table) not in covered
    ]
    return bad


def chip_figures(source_id: str, chip_name: str) -> list[Figure]:
    """The figures of `chip_name`'s file whose source text names `source_id`."""
    name = chip_file(chip_name)
    return [
        f for f in figures() if f.kind == "chip" and f.file == name and source_id in names(f.source)
    ]


def fallbacks(chip_file_name: str) -> dict[str, dict[str, Any]]:
    """Dotted path -> {value, source} another publication gives a figure of `chip_file_name`
    (perop_sources.toml, `[[fallback]]`)."""
    return {
        entry["path"]: {"value": entry["value"], "source": entry["source"]}
        for entry in _data().get("fallback", [])
        if chip_file_name in entry["files"]
    }


@cache
def chip_out_of(chip_name: str, source_id: str) -> Any:
    """The chip without the figures of `source_id`: another publication's value where
    perop_sources.toml gives one, the loader's default otherwise."""
    from shardline.hardware import chip_from_dict

    removed = chip_figures(source_id, chip_name)
    name = chip_file(chip_name) or ""
    other = fallbacks(name)
    if not any(f.path in other for f in removed):
        return chip_without(chip_name, removed)
    data = tomllib.loads((ROOT / "src/shardline/hardware/catalog" / name).read_text("utf-8"))
    for figure in removed:
        node = data
        *parents, leaf = figure.path.split(".")
        for part in parents:
            node = node[part]
        if figure.path in other:
            node[leaf] = dict(other[figure.path])
        else:
            node.pop(leaf, None)
    return chip_from_dict(data, origin=f"{name} without {source_id}'s figures")


@contextlib.contextmanager
def library_out_of(source_id: str) -> Iterator[None]:
    """The collective libraries with `source_id`'s derived figures replaced (the pricing reads
    its library through `shardline.collectives.priced.load_library`)."""
    from shardline.collectives import priced

    changes = derived_values(source_id)
    if not changes:
        yield
        return
    shipped = priced.load_library

    def load(name: str) -> Any:
        lib = shipped(name)
        steps = dict(lib.network_step_s)
        for (file, table, key), value in changes.items():
            if file != f"{name}.toml" or table != "network_step_us":
                continue
            if value is None:
                steps.pop(key, None)
            else:
                steps[key] = value * _US
        return dataclasses.replace(lib, network_step_s=steps)

    priced.load_library = load  # type: ignore[assignment]
    try:
        yield
    finally:
        priced.load_library = shipped  # type: ignore[assignment]


def _check(source_id: str) -> None:
    if source_id not in source_patterns():
        raise SystemExit(f"source_id {source_id!r} is not in {SOURCES.name}")
    bad = unrebuildable(source_id)
    if bad:
        raise SystemExit(f"cannot rebuild without {source_id}: " + "; ".join(bad))


def score_gemms() -> list[Scored]:
    out = []
    for row in bench_gemm.load_rows():
        _check(row.source_id)
        inside = bench_gemm.predict_row(row)
        outside = bench_gemm.predict_row(row, chip_out_of(row.chip, row.source_id))
        out.append(
            Scored("gemm", row.chip, row.shape_class, row.source_id, inside.error, outside.error)
        )
    return out


def _raw_rows() -> list[dict[str, str]]:
    out = []
    for path in (bench_collectives.DATA, bench_collectives.HELD_OUT):
        with path.open(newline="", encoding="utf-8") as handle:
            out += [
                r
                for r in csv.DictReader(handle)
                if bench_collectives.MIN_BYTES
                <= int(r["size_bytes"])
                <= bench_collectives.MAX_BYTES
            ]
    return out


def score_collectives() -> list[Scored]:
    from shardline.errors import InputError
    from shardline.hardware import load_chip

    out = []
    for raw in _raw_rows():
        try:
            load_chip(raw["chip"])
        except InputError:
            continue  # a chip outside the catalog: not priced (bench_collectives.py)
        sid = raw["source_id"]
        _check(sid)
        inside = bench_collectives.predict(raw)
        with library_out_of(sid):
            outside = bench_collectives.predict(raw, chip_out_of(raw["chip"], sid))
        assert inside is not None and outside is not None
        where = "in one node" if raw["placement"] == "in_node" else "across nodes"
        out.append(Scored("collective", raw["chip"], where, sid, inside.error, outside.error))
    return out


def _median(values: list[float]) -> float:
    return statistics.median(abs(v) for v in values)


def groups(rows: list[Scored]) -> dict[tuple[str, str, str], list[Scored]]:
    """(op, chip or 'all', class or 'all') -> its rows."""
    out: dict[tuple[str, str, str], list[Scored]] = {}
    for r in rows:
        for chip in ("all", r.chip):
            for cls in ("all", r.shape_class):
                out.setdefault((r.op, chip, cls), []).append(r)
    return out


def _group_lines(rows: list[Scored]) -> list[str]:
    lines = [
        "| op | chip | class | rows | moved | in sample | out of source | worst out of source |",
        "|---|---|---|---:|---:|---:|---:|---:|",
    ]
    for (op, chip, cls), members in sorted(
        groups(rows).items(), key=lambda kv: (kv[0][0], kv[0][1] != "all", kv[0][1], kv[0][2])
    ):
        moved = sum(1 for r in members if abs(r.out_of_source - r.in_sample) > 1e-9)
        inside = _median([r.in_sample for r in members])
        outside = _median([r.out_of_source for r in members])
        worst = max(abs(r.out_of_source) for r in members)
        lines.append(
            f"| {op} | {chip} | {cls} | {len(members)} | {moved} | {inside:.1%} | {outside:.1%} "
            f"| {worst:.1%} |"
        )
    return lines


def _source_lines(rows: list[Scored]) -> list[str]:
    lines = [
        "| source_id | op | rows | figures it gave | in sample | out of source |",
        "|---|---|---:|---|---:|---:|",
    ]
    by: dict[tuple[str, str], list[Scored]] = {}
    for r in rows:
        by.setdefault((r.source_id, r.op), []).append(r)
    for (sid, op), members in sorted(by.items()):
        gave = sorted(
            {f"{f.file} {f.path}" for f in figures() if f.kind == "chip" and sid in names(f.source)}
        )
        gave += sorted({f"{file} {table}.{key}" for file, table, key in derived_values(sid)})
        lines.append(
            f"| {sid} | {op} | {len(members)} | {', '.join(gave) or '-'} "
            f"| {_median([r.in_sample for r in members]):.1%} "
            f"| {_median([r.out_of_source for r in members]):.1%} |"
        )
    return lines


def _pair(
    rows: list[Scored],
    op: str,
    source_ids: tuple[str, ...],
    cls: str | None = None,
    chip: str | None = None,
) -> str:
    """'in sample a% -> out of source b%' over the rows of `source_ids` (and class `cls`, chip
    `chip`)."""
    members = [
        r
        for r in rows
        if r.op == op
        and r.source_id in source_ids
        and (cls is None or r.shape_class == cls)
        and (chip is None or r.chip == chip)
    ]
    if not members:
        return "-"
    inside = _median([r.in_sample for r in members])
    outside = _median([r.out_of_source for r in members])
    return f"{inside:.1%} -> {outside:.1%} ({len(members)} rows)"


def _cold_median(source_ids: tuple[str, ...], chip: str) -> float:
    """Median |error| of those sources' GEMM rows on `chip` in sample, priced without a warm L2."""
    return _median(
        [
            bench_gemm.predict_row(r, warm_l2=False).error
            for r in bench_gemm.load_rows()
            if r.source_id in source_ids and r.chip == chip
        ]
    )


def _miss_lines(rows: list[Scored]) -> list[str]:
    """Where leaving a source out moves the medians, and the figure behind each move."""
    return [
        "Where leaving a source out moves the medians (median |error| in sample -> out of source):",
        "",
        "- Small GEMMs of the OpenXLA tables: "
        f"{_pair(rows, 'gemm', ('openxla-matmul-tables',), 'small')}. The GEMM kernel floor of "
        "H100, H200, H800, B200 and GB200 has that one source (its shortest kernel, 256^3: 5.2 "
        "us on sm_90, 4.85 us on sm_100). Out of it the shortest tiled GEMM another publication "
        "times on the same silicon stands in (perop_sources.toml, `[[fallback]]`): on Hopper "
        "DeepGEMM's fp8 64 x 7168 x 2048 on H800, 6.37 us of kernel time; on Blackwell vLLM PR "
        "19566's CUTLASS fp8 1 x 4096 x 4096 on B200, 5.73 us replayed from a CUDA graph. Both "
        "are upper bounds of the floor (each holds its own reads of 15-17 MB of operands), so "
        "out of source the small shapes come out slow rather than fast.",
        "- MI300X GEMMs of the Azure benchmarking guide: "
        f"{_pair(rows, 'gemm', ('azure-ai-benchmarking-guide',), chip='mi300x')}. Its "
        "hipBLASLt fp8 table gave the file's achievable fp8 rate (1159.2 TFLOPS at 8192^3) and its "
        "BabelStream table the achievable HBM rate (4.11 TB/s); out of it AMD's own MAF "
        "measurement (1273 TFLOPS at a 1230 MHz median clock, ROCm blogs 'Measuring "
        "Max-Achievable FLOPs, Part 2') and rocprofiler-compute's MI300X HBM figure (3.91 TB/s, "
        "ROCm/rocm-systems PR 2934) stand in. The MI300X and MI355X GEMM kernel floors (7.74 and "
        "5.25 us) are aiter's shortest tuned kernels, and that the library runs M = 1 through "
        "its tiled kernels is read from the same tables: out of them another aiter publication "
        "on gfx950 stands in for both (perop_sources.toml, `[[fallback]]`), aiter PR 5497's own "
        "tuning run, whose shortest kernel (FlyDSL MXFP8, M = 1, N = 7168, K = 3072, split-K "
        "4: 7.93 us, an upper bound of the floor as it holds its 22 MB weight read) runs M = 1 "
        "as a tiled split-K GEMM (without it the MI355X rows fell to the streaming floor, 2.05 "
        "us): "
        f"{_pair(rows, 'gemm', ('aiter-tuned-gemm',))}.",
        "- MI300X and MI325X collectives of hisohara/ai-scripts: "
        f"{_pair(rows, 'collective', ('hisohara-ai-scripts',), 'in one node')} in one node. Their "
        "bus efficiency (0.705, 0.71) was read from those rccl-tests sweeps; out of source AMD's "
        "stated xGMI ceiling stands in (48 of 64 GB/s per link after protocol and error "
        "correction, ROCm/rccl issue 1210: 0.75).",
        "- The A3 Mega TCPXO sweep: "
        f"{_pair(rows, 'collective', ('a3mega-tcpxo-sweep',))}. Its network step (54 us) has no "
        "other source; out of source the fabric's 20 us assumption stands in.",
        "- The two RoCE sweeps behind the RoCE/InfiniBand network step (oci-hpc-oke, "
        "hisohara/ai-scripts MI355X): "
        f"{_pair(rows, 'collective', ('oci-hpc-oke',), 'across nodes')} and "
        f"{_pair(rows, 'collective', ('hisohara-ai-scripts',), 'across nodes')} across nodes: "
        "each is priced with the other's step (12.1 and 10.7 us), which moves them little.",
        "- Two nodes: from NCCL 2.14.3 (NVIDIA/nccl commit c4e2aa6) the tuner reads a tree's "
        "intra-node bandwidth on up to two nodes (src/graph/tuning.cc) and its topology search "
        "raises that to at most twice the network's (src/graph/search.cc, pass 2), so a two-node "
        "tree all-reduce sends V a direction where a ring sends 2(n-1)/n V: its bus bandwidth "
        "reaches up to 2 x 0.92 of the NICs' (the p4de sweep: 78 GB/s over four 100 Gb/s EFA "
        "NICs; A100 80GB across nodes: "
        f"{_pair(rows, 'collective', ('awsome-distributed-training',), chip='a100-80gb')}). The "
        "row's NCCL release is priced (`library_version`): the p4d sweep's NCCL 2.9.9 keeps the "
        "ring. RCCL is left out: it loads hand-built topology models of its platforms instead "
        "of searching (rccl.toml), and the MI355X two-node sweep runs at the ring's rate.",
        "- Matrix-vector products on AMD: aiter and hipBLASLt have no gemv path; the tuned "
        "kernel for every M = 1 shape in aiter's tables is a tiled split-K GEMM "
        "(`on_chip.matrix_vector_tiled`), so it pays the GEMM kernel floor, not the streaming "
        "one (MI300X, aiter PR 1092's fp8 rows: "
        f"{_pair(rows, 'gemm', ('aiter-pr-1092',), chip='mi300x')}).",
        "- How each harness treats the L2 (each GEMM row's harness is its `timing` column, "
        'docs/validation.md "Single GEMMs"): `triton.testing.do_bench_cudagraph` (the vLLM '
        "tables) clears no cache between replays (triton-lang/triton PR 8384) and "
        "`torch.utils.benchmark.Timer` none between calls, so operands that fit the L2 are read "
        'from it: those rows are priced with `--warm-l2` (docs/prediction.md, "Warm L2"), at '
        "the rate and up to the size a replayed-read benchmark holds (te42kyfo/gpu-benches "
        "`gpu-l2-cache`: on H200, H100's die, 9.8 TB/s up to 41.4 MB; on GB200, B200's die pair, "
        "18.8 TB/s up to 93.8 MB, xxrjun/gpu-benches `gb200.txt`; neither publishes GEMM rows "
        "here). B200 decode GEMMs of the vLLM tables: "
        f"{_pair(rows, 'gemm', VLLM_B200, chip='b200')}; priced from HBM, "
        f"{_cold_median(VLLM_B200, 'b200'):.1%} in sample. "
        "DeepGEMM's `bench_kineto` memsets 8 GB before every call by default (deep_gemm/utils.py, "
        "`flush_l2=True`) and `triton.testing.do_bench` zeroes 256 MB: their rows stay cold. "
        "do_bench queues the call behind that kernel, which hides its launch "
        "(python/triton/testing.py: `cache.zero_()`, then the event pair around the call), yet "
        "its windows on H100 hold 3-9 us more than the OpenXLA table's CUPTI kernel at the same "
        "squares; the A100 file has no GEMM kernel floor (no published A100 GEMM kernel time at "
        "tiny sizes was found), so the do_bench squares keep the eager price: "
        f"{_pair(rows, 'gemm', ('triton-issue-3551',), 'small')} on A100's small squares.",
        "",
    ]


def section(rows: list[Scored], date: str) -> str:
    body = [
        HEADING,
        "",
        f"`python benchmarks/perop_loso.py` ({date}): every published GEMM "
        "(`benchmarks/data/gemm_published.csv`) and collective row (`collectives_published.csv` "
        "and `collectives_heldout.csv`, 32 KiB to 16 GiB) scored twice: in sample, with the "
        "shipped chip and library figures, and out of source, with every figure the row's own "
        "publication gave taken away. Each row names its publication (`source_id`); "
        "`benchmarks/data/perop_sources.toml` lists the strings that name each publication in a "
        "figure's source text and, for a library figure derived from several publications, the "
        "value each gave. Out of source a chip figure of the row's publication is left out (the "
        "value another publication states stands in where `perop_sources.toml` names one, the "
        "loader's default or the chip's peak otherwise) and a derived library figure is the mean "
        "of the other publications' values (left out where there is none: the library's own rule "
        "stands in). 'moved' counts the rows whose prediction changes. Error = predicted / "
        "measured - 1; medians of |error|.",
        "",
        *_group_lines(rows),
        "",
        *_miss_lines(rows),
        "By publication (the figures each one gave to the data files):",
        "",
        *_source_lines(rows),
        "",
    ]
    return "\n".join(body)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args(argv)
    rows = score_gemms() + score_collectives()
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    text = section(rows, date)
    sys.stdout.write(text)
    if not args.no_write:
        replace_section(text, HEADING, DOC)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
