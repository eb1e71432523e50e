"""Published nccl-tests / rccl-tests sweeps against shardline's library-level collective model.

Reads benchmarks/data/collectives_published.csv (one printed nccl-tests row per line, with its
system and source; benchmarks/data/collectives_published.md describes each sweep), prices every
row with `shardline collective` (`collectives.collective_cost` on the chip the row's system makes:
`--gpus-per-node`, `--nics-per-node`, `--nic-bw`, `--scale-out`, `--host-cpu`), prints the
median and worst |error| per sweep and per placement (in one node, across nodes) over
32 KiB - 16 GiB, and rewrites the "## Collectives" section of docs/validation.md (other
sections are kept).

    python benchmarks/bench_collectives.py            # print and write docs/validation.md
    python benchmarks/bench_collectives.py --no-write # print only

Conventions. nccl-tests' `size` is the whole array V for all-reduce, all-gather (the gathered
result) and reduce-scatter (the input), and one rank's buffer for all-to-all, so V = size x n
there. The row's environment is honoured where it constrains the library: NCCL_ALGO=RING forces
the ring; NCCL_PROTO forces the protocol; NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS pins the
collective channels (the network ramp's depth, `library.collective_channels`); NVLS disabled (or
shown not engaged by the source) removes the in-switch reduction; a
process driving several GPUs (nccl-tests `-g 8`) is `--gpus-per-process 8`; the library release
the row names (`library_version`) is the one priced where the model's rules changed between
releases (the two-node tree, NCCL 2.14.3).
Error: predicted / measured - 1 (negative: the prediction is faster than the measurement).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import re
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from validation_doc import replace_section  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "collectives_published.csv"
# sweeps added after the model's figures were set, priced but never used to set any figure
HELD_OUT = ROOT / "benchmarks" / "data" / "collectives_heldout.csv"
DOC = ROOT / "docs" / "validation.md"
HEADING = "## Collectives"
MIN_BYTES = 32 * 1024
MAX_BYTES = 16 * 2**30


@dataclass(frozen=True)
class Row:
    case_id: str
    chip: str
    kind: str
    size_bytes: int
    ranks: int
    placement: str
    measured_s: float
    predicted_s: float
    algorithm: str
    protocol: str
    tuned: bool = True
    source_id: str = ""

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0


def _forced(env: str) -> tuple[str | None, bool]:
    """(algorithm forced by NCCL_ALGO, whether NVLS is off) from the row's environment text."""
    text = env.upper()
    algorithm = "ring" if "NCCL_ALGO=RING" in text else None
    nvls_off = "NCCL_NVLS_ENABLE=0" in text or "NOT ENGAGED" in text
    return algorithm, nvls_off


def _env_number(text: str, name: str) -> int | None:
    found = re.search(rf"\b{name}=(\d+)", text)
    return int(found.group(1)) if found else None


def _pinned(env: str) -> tuple[str | None, int | None]:
    """(protocol forced by NCCL_PROTO, channels pinned by NCCL_MIN_NCHANNELS = NCCL_MAX_NCHANNELS)
    from the row's environment text (NCCL environment variables documentation)."""
    text = env.upper()
    proto = re.search(r"\bNCCL_PROTO=(LL128|LL|SIMPLE)\b", text)
    protocol = {"LL": "LL", "LL128": "LL128", "SIMPLE": "Simple"}[proto.group(1)] if proto else None
    low, high = _env_number(text, "NCCL_MIN_NCHANNELS"), _env_number(text, "NCCL_MAX_NCHANNELS")
    return protocol, (low if low is not None and low == high else None)


def _flags(raw: dict[str, str]) -> dict[str, object]:
    """The system flags of a row (what a user would type on the command line)."""
    flags: dict[str, object] = {"gpus_per_node": int(raw["gpus_per_node"])}
    if raw["nics_per_node"]:
        flags["nics_per_node"] = int(raw["nics_per_node"])
    if raw["nic_gbps"]:
        flags["nic_bytes_per_s"] = float(raw["nic_gbps"]) * 1e9 / 8
    if raw["scale_out"] not in ("", "none", "unknown"):
        flags["scale_out"] = raw["scale_out"]
    if raw.get("host_cpu"):
        flags["host_cpu"] = raw["host_cpu"]
    return flags


def predict(raw: dict[str, str], chip: Any = None) -> Row | None:
    """One published row priced, or None when its chip is not in the catalog; `chip`, a Chip,
    stands in for the catalog chip (benchmarks/perop_loso.py: without the row's own source's
    figures)."""
    from shardline.collectives import NetworkOptions, collective_cost
    from shardline.errors import InputError
    from shardline.hardware import load_chip
    from shardline.hardware.cluster import chip_with_cluster

    try:
        chip = chip or load_chip(raw["chip"])
    except InputError:
        return None
    algorithm, nvls_off = _forced(raw["env"])
    protocol, channels = _pinned(raw["env"])
    chip = chip_with_cluster(chip, nvls=not nvls_off, **_flags(raw))  # type: ignore[arg-type]
    ranks = int(raw["gpus_per_node"]) * int(raw["nodes"])
    size = int(raw["size_bytes"])
    v = size * ranks if raw["collective"] == "all_to_all" else size
    options = NetworkOptions(
        protocol=protocol,
        gpus_per_process=int(raw["gpus_per_process"]),
        library_version=raw["library_version"],
        channels=channels,
    )
    cost = collective_cost(raw["collective"], v, ranks, chip, algorithm=algorithm, options=options)
    return Row(
        raw["case_id"],
        raw["chip"],
        raw["collective"],
        size,
        ranks,
        raw["placement"],
        float(raw["time_us"]) * 1e-6,
        float(cost.predicted_s),
        cost.algorithm,
        cost.protocol,
        raw["tuned"] == "yes",
        raw.get("source_id", ""),
    )


def load_rows(path: Path = DATA) -> list[Row]:
    with path.open(newline="", encoding="utf-8") as handle:
        raws = list(csv.DictReader(handle))
    rows = []
    for raw in raws:
        if not MIN_BYTES <= int(raw["size_bytes"]) <= MAX_BYTES:
            continue
        row = predict(raw)
        if row is not None:
            rows.append(row)
    return rows


def _stats(errors: list[float]) -> tuple[float, float]:
    absolute = [abs(e) for e in errors]
    return statistics.median(absolute), max(absolute)


def summary_lines(rows: list[Row]) -> list[str]:
    lines = ["| sweep | chip | ranks | rows | median abs error | worst | choice at the largest |"]
    lines.append("|---|---|---|---|---|---|---|")
    cases: dict[str, list[Row]] = {}
    for row in rows:
        cases.setdefault(row.case_id, []).append(row)
    for case, group in cases.items():
        med, worst = _stats([r.error for r in group])
        last = max(group, key=lambda r: r.size_bytes)
        lines.append(
            f"| {case} | {last.chip} | {last.ranks} | {len(group)} | {med:.1%} | {worst:.1%} "
            f"| {last.algorithm} / {last.protocol or '-'} |"
        )
    lines.append("")
    for placement in ("in_node", "multi_node"):
        picked = [r for r in rows if r.placement == placement]
        if picked:
            med, worst = _stats([r.error for r in picked])
            tuned = [r.error for r in picked if r.tuned]
            where = "in one node" if placement == "in_node" else "across nodes"
            line = f"- **{where}**: {len(picked)} rows, median |error| {med:.1%}, worst {worst:.1%}"
            if len(tuned) < len(picked):
                line += f"; without the untuned sweeps ({len(tuned)} rows): {_stats(tuned)[0]:.1%}"
            lines.append(line)
    return lines


def held_out_lines(rows: list[Row]) -> list[str]:
    """The held-out sweeps (benchmarks/data/collectives_heldout.csv), reported apart."""
    if not rows:
        return []
    return [
        "### Held-out sweeps",
        "",
        "`benchmarks/data/collectives_heldout.csv`: sweeps added on 2026-12-01 after the model's",
        "figures were set: 10 nodes of 1, 2 and 4 H100 and one node of 4 (the same public cluster",
        "logs as the 8-GPU xxrjun sweeps above), three two-node A100 examples of OCI with",
        "NCCL 2.14.3, 2.25.1 and 2.29.3, and three mid-size all-to-all rows on one node of 8 H20",
        "(nccl-tests issue 314, added with the p2p all-to-all model). No figure of the model",
        "comes from them.",
        "",
        *summary_lines(rows),
        "",
    ]


def section(rows: list[Row], held_out: list[Row] | None = None) -> str:
    today = datetime.date.today().isoformat()
    body = [
        HEADING,
        "",
        f"`python benchmarks/bench_collectives.py` ({today}): every published nccl-tests /",
        "rccl-tests row of `benchmarks/data/collectives_published.csv` from 32 KiB to 16 GiB",
        "whose chip is in the catalog, priced by `shardline collective` on the row's system (GPUs",
        "per node, NICs, NIC speed, fabric and host CPU as flags). The sweeps, their sources and",
        "their quirks are described in `benchmarks/data/collectives_published.md`.",
        "",
        "In-sample figures: four inputs of the model come from sweeps in this set, because no",
        "other publication gives them. They are MI300X's and MI325X's bus efficiency (their",
        "rccl-tests busbw at the largest sizes), the RoCE/InfiniBand network step (the two-node",
        "RoCE floors of the A100 OKE and MI355X sweeps) and the TCPXO network step (the A3 Mega",
        "floor). Every other figure comes from a publication outside the set; the chip, system and",
        "library files cite each one.",
        "",
        *summary_lines(rows),
        "",
        *held_out_lines(held_out or []),
    ]
    return "\n".join(body)


def write_doc(text: str, doc: Path = DOC) -> None:
    """Replace (or add) this benchmark's section of the validation document."""
    replace_section(text, HEADING, doc)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    rows = load_rows()
    held_out = load_rows(HELD_OUT) if HELD_OUT.is_file() else []
    text = section(rows, held_out)
    sys.stdout.write(text)
    if not args.no_write:
        write_doc(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
