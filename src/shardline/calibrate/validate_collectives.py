"""`shardline validate --collectives --hw FILE`: run the collective sweep of `calibrate
--collectives` on this machine and compare each measured time with shardline's prediction.

The prediction is `collective_cost(kind, bytes, devices, chip).predicted_s`, devices = the
processes measured (their nodes from LOCAL_WORLD_SIZE, or `--processes-per-node`, priced by the
chip's scale-up and scale-out levels). The error of a row is `(predicted - measured) / measured`;
the summary gives the median |error| per kind and over every row.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from shardline.calibrate.collectives_run import OPS, measured_or_refused, under_torchrun
from shardline.errors import InputError
from shardline.hardware import Chip, resolve_chip

__all__ = [
    "CollectiveValidation",
    "validate_collectives",
    "compare",
    "write_csv",
    "render",
    "run_from_args",
    "CSV_COLUMNS",
]

CSV_COLUMNS = ("kind", "bytes", "devices", "measured_s", "predicted_s", "error", "abs_error")


@dataclass(frozen=True)
class CollectiveValidation:
    hardware: str
    backend: str
    devices: int
    devices_per_node: int
    rows: list[dict[str, Any]]
    summary: dict[str, Any]

    def to_dict(self) -> dict[str, object]:
        from shardline.basics.serialize import jsonable

        return jsonable(
            {
                "hardware": self.hardware,
                "backend": self.backend,
                "devices": self.devices,
                "devices_per_node": self.devices_per_node,
                "rows": self.rows,
                "summary": self.summary,
            }
        )


def compare(chip: Chip, measured: list[dict[str, Any]], devices: int) -> list[dict[str, object]]:
    """Each measured collective row with shardline's prediction and the error."""
    from shardline.collectives import collective_cost

    out = []
    for r in measured:
        if r["op"] not in OPS:
            continue
        predicted = float(collective_cost(r["op"], float(r["bytes"]), devices, chip).predicted_s)
        seconds = float(r["seconds"])
        error = (predicted - seconds) / seconds
        out.append(
            {
                "kind": r["op"],
                "bytes": int(r["bytes"]),
                "devices": devices,
                "measured_s": seconds,
                "predicted_s": predicted,
                "error": error,
                "abs_error": abs(error),
            }
        )
    return out


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Median |error| per kind and over every row (fractions), and the row count."""
    if not rows:
        raise InputError("no collective was measured")
    per_kind = {
        kind: statistics.median(r["abs_error"] for r in rows if r["kind"] == kind)
        for kind in OPS
        if any(r["kind"] == kind for r in rows)
    }
    return {
        "rows": len(rows),
        "median_abs_error_by_kind": per_kind,
        "median_abs_error": statistics.median(r["abs_error"] for r in rows),
    }


def _device_of(chip: Chip) -> str:
    from shardline.calibrate import detect_device

    if chip.interconnect is None:
        raise InputError(
            f"{chip.path or chip.name} has no [interconnect]; calibrate it with "
            "`shardline calibrate --collectives --out FILE` first"
        )
    return "cpu" if chip.kind == "cpu" else detect_device("cuda")


def validate_collectives(
    hw: str | Chip,
    *,
    processes: int | None = None,
    processes_per_node: int | None = None,
    quick: bool = False,
    repeats: int | None = None,
    progress: bool | None = None,
) -> CollectiveValidation:
    """Measure the collective sweep here and compare with the chip's predictions. Under torchrun
    the ranks other than 0 leave once measured (SystemExit 0)."""
    chip = resolve_chip(hw)
    device = _device_of(chip)
    assert chip.interconnect is not None
    n = processes or chip.interconnect.scale_up_devices
    if not under_torchrun() and n < 2:
        raise InputError(f"--processes must be at least 2, got {n}")
    if processes_per_node is not None and (processes_per_node < 1 or n % processes_per_node):
        raise InputError(
            f"--processes-per-node must be at least 1 and divide --processes ({n}), "
            f"got {processes_per_node}"
        )
    measured, backend = measured_or_refused(
        "no CSV was written",
        processes=n,
        device=device,
        quick=quick,
        repeats=repeats,
        progress=progress,
        processes_per_node=processes_per_node,
    )
    devices, per_node = int(measured[0]["processes"]), int(measured[0]["processes_per_node"])
    rows = compare(chip, measured, devices)
    return CollectiveValidation(chip.name, backend, devices, per_node, rows, summarize(rows))


def write_csv(path: Path, result: CollectiveValidation) -> None:
    """The rows as a CSV (raw SI numbers), written atomically by shardline.io's table writer."""
    from shardline.io.tables import Column, OutputTable, write_table

    kinds = {"bytes": "int", "devices": "int", "kind": "text"}
    columns = [
        Column(name, [r[name] for r in result.rows], kinds.get(name, "time"))
        for name in CSV_COLUMNS
    ]
    write_table(path, OutputTable(columns, summary=result.summary))


def render(result: CollectiveValidation, files: list[str]) -> str:
    """The table and the medians, as text."""
    from shardline.basics.units import fmt_time

    lines = [
        f"collectives on {result.hardware}: {result.devices} processes "
        f"({result.devices_per_node} per node, {result.backend}), predicted vs measured",
        f"  {'kind':<15} {'bytes':>12} {'measured':>11} {'predicted':>11} {'error':>8}",
    ]
    for r in result.rows:
        lines.append(
            f"  {r['kind'].replace('_', '-'):<15} {r['bytes']:>12,} {fmt_time(r['measured_s']):>11}"
            f" {fmt_time(r['predicted_s']):>11} {r['error'] * 100:>+7.0f}%"
        )
    medians = result.summary["median_abs_error_by_kind"]
    lines.append(
        "median |error|: "
        + ", ".join(f"{k.replace('_', '-')} {v * 100:.0f}%" for k, v in medians.items())
        + f"; all {result.summary['median_abs_error'] * 100:.0f}%"
    )
    lines.extend(f"wrote {f}" for f in files)
    return "\n".join(lines) + "\n"


def run_from_args(args: Any) -> tuple[dict[str, object], str]:
    """`validate --collectives`: check the output, measure, write the CSV; (JSON payload, text)."""
    from shardline.calibrate.chipfile import check_output

    if args.hw is None:
        raise InputError(
            "validate --collectives needs --hw: a chip file from `calibrate --collectives`"
        )
    if args.repeats is not None and args.repeats < 1:
        raise InputError("--repeats must be at least 1")
    out = str(args.out)
    out = "validate-collectives.csv" if out == "validate" else out
    out = out if out.endswith(".csv") else f"{out}.csv"
    csv_path = check_output(out, [args.hw], force=args.force)
    result = validate_collectives(
        args.hw,
        processes=args.processes,
        processes_per_node=args.processes_per_node,
        quick=args.quick,
        repeats=args.repeats,
        progress=False if args.no_progress else None,
    )
    write_csv(csv_path, result)
    files = [str(csv_path)]
    return {**result.to_dict(), "files": files}, render(result, files)
