"""Chip summaries for `shardline hw list/show`: plain data for JSON and text for people."""

from __future__ import annotations

from shardline.basics.serialize import json_object
from shardline.basics.units import fmt_capacity, fmt_rate, fmt_time
from shardline.hardware import ASSUMED, DEFAULTS, Achievable, Chip
from shardline.hardware.totals import PodTotals
from shardline.report.columns import aligned

__all__ = ["chip_summary", "chip_detail", "render_chip_list", "render_chip", "ridges"]


def _rate(value: float, unit: str = "FLOP/s") -> str:
    """Datasheet rates keep four digits: 1.555 TB/s, 989.4 TFLOP/s."""
    return fmt_rate(value, unit, digits=4)


def ridges(chip: Chip) -> dict[str, float]:
    """Ridge point P / W_mem (FLOP/byte) for each dtype the chip computes in."""
    return {dtype: chip.ridge(dtype) for dtype in chip.peak_flops_per_s}


def chip_summary(chip: Chip) -> dict[str, object]:
    return {
        "name": chip.name,
        "display_name": chip.display_name,
        "aliases": list(chip.aliases),
        "kind": chip.kind,
        "peak_flops_per_s": dict(chip.peak_flops_per_s),
        "capacity_bytes": chip.capacity_bytes,
        "reported_capacity_bytes": chip.reported_capacity_bytes,
        "usable_capacity_bytes": chip.usable_capacity_bytes,
        "mem_bytes_per_s": chip.mem_bytes_per_s,
    }


def chip_detail(chip: Chip) -> dict[str, object]:
    detail = json_object(chip)
    detail["ridge_flop_per_byte"] = ridges(chip)
    detail["usable_capacity_bytes"] = chip.usable_capacity_bytes
    detail["aliases"] = list(chip.aliases)
    detail["assumptions"] = _assumed(chip)  # dotted path -> "assumed default: why"
    return detail


def _hbm(chip: Chip) -> str:
    """The marketing capacity, and what the device reports beside it where that differs (the
    figure every fit check uses)."""
    marketed = fmt_capacity(chip.capacity_bytes)
    if chip.usable_capacity_bytes == chip.capacity_bytes:
        return marketed
    return f"{marketed} ({fmt_capacity(chip.usable_capacity_bytes)} reported)"


def render_chip_list(chips: list[Chip]) -> str:
    rows = [("name", "kind", "bf16 peak", "HBM", "HBM bandwidth", "aliases")]
    for chip in chips:
        bf16 = chip.peak_flops_per_s.get("bf16")
        rows.append(
            (
                chip.name,
                chip.kind,
                _rate(bf16) if bf16 else "-",
                _hbm(chip),
                _rate(chip.mem_bytes_per_s, "B/s"),
                ", ".join(chip.aliases),
            )
        )
    return aligned(rows)


def _line(label: str, value: str, source: str | None) -> str:
    return f"  {label:<34} {value:<22} {('[' + source + ']') if source else ''}".rstrip()


def _header(chip: Chip) -> list[str]:
    out = [f"{chip.display_name} ({chip.name}, {chip.kind}, {chip.vendor})"]
    if chip.aliases:
        out.append(f"aliases: {', '.join(chip.aliases)}")
    if chip.path and not chip.path.endswith(f"catalog/{chip.name}.toml"):
        out.append(f"file: {chip.path}")
    return [*out, ""]


def _peaks(chip: Chip, s: dict[str, str]) -> list[str]:
    out = ["dense peak FLOP/s and ridge point (P / HBM bandwidth):"]
    for dtype, peak in chip.peak_flops_per_s.items():
        value = f"{_rate(peak):<15} ridge {chip.ridge(dtype):,.1f} FLOP/B"
        out.append(_line(dtype, value, s.get(f"peak_flops_per_s.{dtype}")))
    return out


def _memory(chip: Chip, s: dict[str, str]) -> list[str]:
    out = [
        "memory:",
        _line(
            "HBM capacity (marketed)",
            fmt_capacity(chip.capacity_bytes),
            s.get("memory.capacity_bytes"),
        ),
    ]
    reported = chip.reported_capacity_bytes
    if reported:
        shown = f"{fmt_capacity(reported)} ({reported / 2**20:,.0f} MiB)"
        out.append(_line("HBM capacity (device reports)", shown, s.get("memory.reported_bytes")))
    out.append(
        _line("HBM bandwidth", _rate(chip.mem_bytes_per_s, "B/s"), s.get("memory.bytes_per_s"))
    )
    return out


def _vector(chip: Chip, s: dict[str, str]) -> list[str]:
    if not chip.vector_flops_per_s:
        return []
    out = ["vector units (elementwise, softmax, int32; not the matrix units):"]
    for dtype, rate in chip.vector_flops_per_s.items():
        unit = "op/s" if dtype.startswith("int") else "FLOP/s"
        out.append(_line(dtype, _rate(rate, unit), s.get(f"vector_flops_per_s.{dtype}")))
    return out


def _on_chip(chip: Chip, s: dict[str, str]) -> list[str]:
    oc = chip.on_chip
    unit = oc.matrix_unit_elements
    rows: tuple[tuple[str, str, str | None], ...] = (
        (f"{oc.core_name}s", "cores", str(oc.cores) if oc.cores else None),
        (
            f"shared memory per {oc.core_name}",
            "shared_bytes_per_core",
            fmt_capacity(oc.shared_bytes_per_core) if oc.shared_bytes_per_core else None,
        ),
        ("L2", "l2_bytes", fmt_capacity(oc.l2_bytes) if oc.l2_bytes else None),
        ("L2 bandwidth", "l2_bytes_per_s", _opt_rate(oc.l2_bytes_per_s, "B/s")),
        ("shared memory bandwidth", "shared_bytes_per_s", _opt_rate(oc.shared_bytes_per_s, "B/s")),
        ("clock", "clock_hz", _opt_rate(oc.clock_hz, "Hz")),
        ("alignment", "align_bytes", f"{oc.align_bytes} B" if oc.align_bytes else None),
        ("matrix unit", "matrix_unit_elements", f"{unit}x{unit}" if unit else None),
        (
            f"vector lanes per {oc.core_name}",
            "vector_lanes_per_core",
            _opt_int(oc.vector_lanes_per_core),
        ),
        (
            f"matrix units per {oc.core_name}",
            "tensor_cores_per_core",
            _opt_int(oc.tensor_cores_per_core),
        ),
        (
            f"L1/shared array per {oc.core_name}",
            "l1_bytes_per_core",
            _opt_cap(oc.l1_bytes_per_core),
        ),
        (
            f"registers per {oc.core_name}",
            "registers_bytes_per_core",
            _opt_cap(oc.registers_bytes_per_core),
        ),
    )
    lines = [_line(label, shown, s.get(f"on_chip.{key}")) for label, key, shown in rows if shown]
    return ["on chip:", *lines] if lines else []


def _opt_int(value: int | None) -> str | None:
    return str(value) if value else None


def _opt_cap(value: float | None) -> str | None:
    return fmt_capacity(value) if value else None


def _opt_rate(value: float | None, unit: str) -> str | None:
    return _rate(value, unit) if value else None


def _interconnect(chip: Chip, s: dict[str, str]) -> list[str]:
    ic = chip.interconnect
    if ic is None:
        return []
    torus = f" {'x'.join(map(str, ic.torus_dims))}, wraparound {ic.wraparound}"
    out = [
        f"interconnect: {ic.link}, topology {ic.topology}"
        + (torus if ic.topology == "torus" else "")
        + (", in-network reduction" if ic.in_network_reduction else ""),
        _line(
            "per link, one-way",
            _rate(ic.link_bytes_per_s, "B/s"),
            s.get("interconnect.link_bytes_per_s"),
        ),
        _line("links per chip", str(ic.links_per_chip), s.get("interconnect.links_per_chip")),
        _line("egress, one-way", _rate(ic.egress_bytes_per_s, "B/s"), "links x per link"),
        _line("per-hop latency", fmt_time(ic.hop_latency_s), s.get("interconnect.hop_latency_s")),
        _line(
            "scale-up domain",
            f"{ic.scale_up_devices} devices",
            s.get("interconnect.scale_up_devices"),
        ),
    ]
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
    return out


def _achievable(chip: Chip, s: dict[str, str]) -> list[str]:
    ach = chip.achievable
    if not (ach.matmul_flops_per_s or ach.mem_bytes_per_s):
        return []
    out = ["achievable (measured, or estimated where the source says so):"]
    for dtype, rate in ach.matmul_flops_per_s.items():
        key = f"achievable.matmul_flops_per_s.{dtype}"
        out.append(_line(f"matmul {dtype}", _rate(rate), s.get(key)))
    if ach.mem_bytes_per_s:
        shown = _rate(ach.mem_bytes_per_s, "B/s")
        out.append(_line("memory bandwidth", shown, s.get("achievable.mem_bytes_per_s")))
    if ach.launch_overhead_s:
        took = fmt_time(ach.launch_overhead_s)
        out.append(_line("launch overhead", took, s.get("achievable.launch_overhead_s")))
    return out + _kernel_figures(ach, s)


def _kernel_figures(ach: Achievable, s: dict[str, str]) -> list[str]:
    """The kernel floors and the fused attention kernel's efficiencies, where the file has them."""
    out = []
    for key, label in (("kernel_floor_s", "kernel floor"), ("gemm_kernel_floor_s", "GEMM floor")):
        value = getattr(ach, key, None)
        if value:
            out.append(_line(label, fmt_time(value), s.get(f"achievable.{key}")))
    for key, label in (
        ("attention_fwd_efficiency", "attention forward"),
        ("attention_bwd_efficiency", "attention backward"),
    ):
        value = getattr(ach, key, None)
        if value:
            out.append(_line(label, f"{100 * value:.1f}% of peak", s.get(f"achievable.{key}")))
    for name, (fwd, bwd) in getattr(ach, "attention_kernels", {}).items():
        shown = f"{100 * fwd:.1f}% / {100 * bwd:.1f}%"
        where = f"achievable.attention_kernels.{name}"
        out.append(_line(f"attention {name} fwd / bwd", shown, s.get(f"{where}.fwd_efficiency")))
    fraction = getattr(ach, "sustained_matmul_fraction", None)
    if fraction:
        shown = f"{100 * fraction:.1f}% in training"
        key = "achievable.sustained_matmul_fraction"
        out.append(_line("sustained matmul", shown, s.get(key)))
    return out


def _assumed_value(chip: Chip, path: str) -> str:
    """The filled value of a dotted chip-file path (the Chip's attributes carry the same names)."""
    node: object = chip
    for part in path.split("."):
        node = getattr(node, part, None)
    if isinstance(node, bool):
        return "true" if node else "false"
    if isinstance(node, float) and path.endswith("_s"):
        return fmt_time(node)
    return str(node)


def _assumed(chip: Chip) -> dict[str, str]:
    """The chip's assumptions in the order of the loader's DEFAULTS (the chip file's order)."""
    order = {path: i for i, path in enumerate(DEFAULTS)}
    return dict(sorted(chip.assumptions.items(), key=lambda kv: order.get(kv[0], len(order))))


def _assumptions(chip: Chip) -> list[str]:
    """The fields the chip file left out, with the default the loader filled and why."""
    assumed = _assumed(chip)
    if not assumed:
        return []
    out = ["assumptions (defaults the loader filled):"]
    for path, text in assumed.items():
        why = text.removeprefix(ASSUMED)
        out.append(f"  {path} = {_assumed_value(chip, path)}: {why}")
    return out


def _power(chip: Chip, s: dict[str, str]) -> list[str]:
    from shardline.hardware.power import clock_fraction

    p = chip.power
    if p is None:
        return []
    out = ["power (the compute rates follow the clock a limit allows):"]
    out.append(_line("design power", f"{p.tdp_w:g} W", s.get("power.tdp_w")))
    out.append(_line("static (idle at P0)", f"{p.static_w:g} W", s.get("power.static_w")))
    fraction = clock_fraction(p, p.limit_w)
    note = s.get("power.limit_w") if p.limit_w < p.tdp_w else None
    limit = f"{p.limit_w:g} W, clock x {fraction:.3f}"
    out.append(_line("limit", limit, note))
    return out


def render_chip(chip: Chip) -> str:
    """`shardline hw show`: every number with its source, section by section; the fields the
    loader filled are listed last, as assumptions, instead of beside their numbers."""
    s = {k: v for k, v in chip.sources.items() if k not in chip.assumptions}
    out = [
        *_header(chip),
        *_peaks(chip, s),
        *_vector(chip, s),
        *_memory(chip, s),
        *_on_chip(chip, s),
        *_interconnect(chip, s),
        *_power(chip, s),
        *_achievable(chip, s),
        *_assumptions(chip),
    ]
    return "\n".join(out) + "\n"


def render_totals(t: PodTotals) -> str:
    """`hw totals`: what N chips add up to (shardline.hardware.totals)."""
    from shardline.basics.units import fmt_bytes, fmt_int

    rows = [
        ("peak", f"{_rate(t.peak_flops_per_s)} {t.dtype}", f"{fmt_int(t.devices)} x chip peak"),
        ("HBM", fmt_bytes(t.hbm_bytes), f"{fmt_int(t.devices)} x capacity"),
        ("HBM bandwidth", f"{fmt_bytes(t.hbm_bytes_per_s)}/s", f"{fmt_int(t.devices)} x per chip"),
        (
            "links",
            fmt_int(t.links),
            f"{fmt_int(t.devices)} x {t.links_per_chip} ports"
            + ("" if t.links == t.devices * t.links_per_chip else " / 2 (a link has two ends)"),
        ),
        (
            "scale-up egress",
            f"{fmt_bytes(t.egress_bytes_per_s)}/s",
            f"every port one way at {fmt_bytes(t.link_bytes_per_s)}/s",
        ),
    ]
    if t.bisection_bytes_per_s is not None:
        rows.append(("bisection", f"{fmt_bytes(t.bisection_bytes_per_s)}/s", t.bisection_note))
    width = max(len(r[0]) for r in rows)
    value = max(len(r[1]) for r in rows)
    out = [f"{fmt_int(t.devices)} x {t.chip}:"]
    out += [f"  {a:<{width}}  {b:<{value}}  [{c}]" for a, b, c in rows]
    return "\n".join(out) + "\n"
