"""Chip summaries for `shardline hw list/show`: plain data for JSON and text for people."""

from __future__ import annotations

from typing import Any

from shardline.hardware import Chip
from shardline.serialize import jsonable
from shardline.units import fmt_capacity, fmt_rate, fmt_time

__all__ = ["chip_summary", "chip_detail", "render_chip_list", "render_chip", "ridges"]


def _rate(value: float, unit: str = "FLOP/s") -> str:
    """Datasheet rates keep four digits: 1.555 TB/s, 989.4 TFLOP/s."""
    return fmt_rate(value, unit, digits=4)


def ridges(chip: Chip) -> dict[str, float]:
    """Ridge point P / W_mem (FLOP/byte) for each dtype the chip computes in."""
    return {dtype: chip.ridge(dtype) for dtype in chip.peak_flops_per_s}


def chip_summary(chip: Chip) -> dict[str, Any]:
    return {
        "name": chip.name,
        "display_name": chip.display_name,
        "aliases": list(chip.aliases),
        "kind": chip.kind,
        "peak_flops_per_s": dict(chip.peak_flops_per_s),
        "capacity_bytes": chip.capacity_bytes,
        "mem_bytes_per_s": chip.mem_bytes_per_s,
    }


def chip_detail(chip: Chip) -> dict[str, Any]:
    detail = jsonable(chip)
    detail["ridge_flop_per_byte"] = ridges(chip)
    detail["aliases"] = list(chip.aliases)
    return detail


def render_chip_list(chips: list[Chip]) -> str:
    rows = [("name", "kind", "bf16 peak", "HBM", "HBM bandwidth", "aliases")]
    for chip in chips:
        bf16 = chip.peak_flops_per_s.get("bf16")
        rows.append(
            (
                chip.name,
                chip.kind,
                _rate(bf16) if bf16 else "-",
                fmt_capacity(chip.capacity_bytes),
                _rate(chip.mem_bytes_per_s, "B/s"),
                ", ".join(chip.aliases),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join(
        "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() + "\n" for r in rows
    )


def _line(label: str, value: str, source: str | None) -> str:
    return f"  {label:<34} {value:<22} {('[' + source + ']') if source else ''}".rstrip()


def render_chip(chip: Chip) -> str:
    s = chip.sources
    out = [f"{chip.display_name} ({chip.name}, {chip.kind}, {chip.vendor})"]
    if chip.aliases:
        out.append(f"aliases: {', '.join(chip.aliases)}")
    if chip.path and not chip.path.endswith(f"catalog/{chip.name}.toml"):
        out.append(f"file: {chip.path}")
    out.append("")
    out.append("dense peak FLOP/s and ridge point (P / HBM bandwidth):")
    for dtype, peak in chip.peak_flops_per_s.items():
        value = f"{_rate(peak):<15} ridge {chip.ridge(dtype):,.1f} FLOP/B"
        out.append(_line(dtype, value, s.get(f"peak_flops_per_s.{dtype}")))
    out.append("memory:")
    out.append(
        _line("HBM capacity", fmt_capacity(chip.capacity_bytes), s.get("memory.capacity_bytes"))
    )
    out.append(
        _line(
            "HBM bandwidth",
            _rate(chip.mem_bytes_per_s, "B/s"),
            s.get("memory.bytes_per_s"),
        )
    )
    oc = chip.on_chip
    on_chip_lines: list[str] = []
    for label, key, shown in (
        (f"{oc.core_name}s", "cores", str(oc.cores) if oc.cores else None),
        (
            f"shared memory per {oc.core_name}",
            "shared_bytes_per_core",
            fmt_capacity(oc.shared_bytes_per_core) if oc.shared_bytes_per_core else None,
        ),
        ("L2", "l2_bytes", fmt_capacity(oc.l2_bytes) if oc.l2_bytes else None),
        (
            "L2 bandwidth",
            "l2_bytes_per_s",
            _rate(oc.l2_bytes_per_s, "B/s") if oc.l2_bytes_per_s else None,
        ),
        (
            "shared memory bandwidth",
            "shared_bytes_per_s",
            _rate(oc.shared_bytes_per_s, "B/s") if oc.shared_bytes_per_s else None,
        ),
        ("clock", "clock_hz", _rate(oc.clock_hz, "Hz") if oc.clock_hz else None),
        ("alignment", "align_bytes", f"{oc.align_bytes} B" if oc.align_bytes else None),
        (
            "matrix unit",
            "matrix_unit_elements",
            f"{oc.matrix_unit_elements}x{oc.matrix_unit_elements}"
            if oc.matrix_unit_elements
            else None,
        ),
    ):
        if shown:
            on_chip_lines.append(_line(label, shown, s.get(f"on_chip.{key}")))
    if on_chip_lines:
        out += ["on chip:", *on_chip_lines]
    ic = chip.interconnect
    if ic:
        out.append(
            f"interconnect: {ic.link}, topology {ic.topology}"
            + (
                f" {'x'.join(map(str, ic.torus_dims))}, wraparound {ic.wraparound}"
                if ic.topology == "torus"
                else ""
            )
            + (", in-network reduction" if ic.in_network_reduction else "")
        )
        out.append(
            _line(
                "per link, one-way",
                _rate(ic.link_bytes_per_s, "B/s"),
                s.get("interconnect.link_bytes_per_s"),
            )
        )
        out.append(
            _line("links per chip", str(ic.links_per_chip), s.get("interconnect.links_per_chip"))
        )
        out.append(
            _line("egress, one-way", _rate(ic.egress_bytes_per_s, "B/s"), "links x per link")
        )
        out.append(
            _line(
                "per-hop latency", fmt_time(ic.hop_latency_s), s.get("interconnect.hop_latency_s")
            )
        )
        out.append(
            _line(
                "scale-up domain",
                f"{ic.scale_up_devices} devices",
                s.get("interconnect.scale_up_devices"),
            )
        )
        if ic.scale_out:
            so = ic.scale_out
            out.append(_line("scale-out link", so.link, None))
            out.append(
                _line(
                    "scale-out per device, one-way",
                    _rate(so.bytes_per_s_per_device, "B/s"),
                    s.get("interconnect.scale_out.bytes_per_s_per_device"),
                )
            )
    ach = chip.achievable
    if ach.matmul_flops_per_s or ach.mem_bytes_per_s:
        out.append("achievable (measured, or estimated where the source says so):")
        for dtype, rate in ach.matmul_flops_per_s.items():
            out.append(
                _line(
                    f"matmul {dtype}",
                    _rate(rate),
                    s.get(f"achievable.matmul_flops_per_s.{dtype}"),
                )
            )
        if ach.mem_bytes_per_s:
            out.append(
                _line(
                    "memory bandwidth",
                    _rate(ach.mem_bytes_per_s, "B/s"),
                    s.get("achievable.mem_bytes_per_s"),
                )
            )
        if ach.launch_overhead_s:
            out.append(
                _line(
                    "launch overhead",
                    fmt_time(ach.launch_overhead_s),
                    s.get("achievable.launch_overhead_s"),
                )
            )
    return "\n".join(out) + "\n"
