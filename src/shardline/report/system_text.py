"""The system catalog in words and as JSON (`shardline system list`, `shardline system show`):
each field with its source, and the figures derived from them."""

from __future__ import annotations

from shardline.basics.values import JSONDict
from shardline.hardware.switches import bisection_bytes_per_s, switch_share_bytes_per_s
from shardline.hardware.systems import System
from shardline.report.columns import aligned

__all__ = ["render_system", "render_system_list", "system_detail", "system_summary"]


def _rate(value: float) -> str:
    from shardline.basics.units import fmt_rate

    return fmt_rate(value, "B/s", digits=4)


def _bits(value: float) -> str:
    """A NIC's speed as its maker states it, in bits per second: 50e9 B/s -> '400 Gb/s'."""
    from shardline.basics.units import fmt_rate

    return fmt_rate(8 * value, "b/s", digits=4)


def _scale_up_rate(system: System) -> float | None:
    from shardline.hardware.systems import scale_up_bytes_per_s_per_device

    return scale_up_bytes_per_s_per_device(system)


def _library(system: System) -> str:
    if system.library:
        return str(system.library)
    from shardline.errors import InputError
    from shardline.hardware import load_chip

    try:
        chip = load_chip(system.chip)
    except InputError:
        return "-"
    return chip.interconnect.library if chip.interconnect else "-"


def _derived(system: System) -> dict[str, float | None]:
    return {
        "node_bytes_per_s": system.node_bytes_per_s,
        "scale_out_bytes_per_s_per_device": system.scale_out_bytes_per_s_per_device,
        "domain_bytes_per_s": system.domain_bytes_per_s,
        "scale_up_bytes_per_s_per_device": _scale_up_rate(system),
        "switch_share_bytes_per_s": switch_share_bytes_per_s(system),
        "bisection_bytes_per_s": bisection_bytes_per_s(system, system.nodes)
        if system.nodes
        else None,
    }


def system_summary(system: System) -> JSONDict:
    return {
        "name": system.name,
        "display_name": system.display_name,
        "aliases": list(system.aliases),
        "chip": system.chip,
        "gpus_per_node": system.gpus_per_node,
        "scale_up_domain_devices": system.scale_up_domain_devices,
        "nics_per_node": system.nics_per_node,
        "nic_bytes_per_s": system.nic_bytes_per_s,
        "fabric": system.fabric,
        "library": _library(system),
        **_derived(system),
    }


def system_detail(system: System) -> JSONDict:
    from shardline.basics.serialize import json_object

    detail = json_object(system)
    detail["aliases"] = list(system.aliases)
    if system.path and system.path.endswith(f"systems/{system.name}.toml"):
        detail["path"] = None  # a catalog system: where the package lies says nothing
    detail["library"] = _library(system)
    detail["derived"] = _derived(system)
    return detail


def render_system_list(systems: list[System]) -> str:
    rows = [("name", "chip", "GPUs/node", "scale-up", "NICs/node", "fabric", "library")]
    for s in systems:
        up = _scale_up_rate(s)
        rows.append(
            (
                s.name,
                s.chip,
                str(s.gpus_per_node),
                f"{s.scale_up_domain_devices} x {_rate(up) if up else '?'}",
                f"{s.nics_per_node} x {_bits(s.nic_bytes_per_s)}",
                s.fabric,
                _library(s),
            )
        )
    return aligned(rows)


def _line(label: str, value: str, source: str | None = None) -> str:
    return f"  {label:<32} {value:<20} {('[' + source + ']') if source else ''}".rstrip()


def _scale_up(system: System) -> list[str]:
    from shardline.basics.units import fmt_time

    s = system.sources
    up = _scale_up_rate(system)
    where = s.get("scale_up.bytes_per_s_per_device") or f"chip {system.chip}: links x link rate"
    out = [
        f"scale-up: {system.scale_up_link or 'the chip' + chr(39) + 's link'}",
        _line("domain", f"{system.scale_up_domain_devices} devices", s["scale_up.domain_devices"]),
        _line("per device, one-way", _rate(up) if up else "?", where if up else "chip unknown"),
    ]
    if system.scale_up_hop_latency_s is not None:
        took = fmt_time(system.scale_up_hop_latency_s)
        out.append(_line("per-hop latency", took, s.get("scale_up.hop_latency_s")))
    reduction = system.in_network_reduction
    shown = "the chip's" if reduction is None else ("yes" if reduction else "no")
    out.append(_line("in-switch reduction (NVLS)", shown))
    return out


def _scale_out(system: System) -> list[str]:
    from shardline.basics.units import fmt_time

    s = system.sources
    eff = system.scale_out_efficiency
    return [
        f"scale-out: {system.scale_out_link} (fabric {system.fabric})",
        _line("NICs per node", str(system.nics_per_node), s.get("scale_out.nics_per_node")),
        _line(
            "per NIC, one-way",
            f"{_rate(system.nic_bytes_per_s)} = {_bits(system.nic_bytes_per_s)}",
            s.get("scale_out.nic_bytes_per_s"),
        ),
        _line(
            "latency floor",
            fmt_time(system.scale_out_hop_latency_s),
            s.get("scale_out.hop_latency_s"),
        ),
        _line(
            "efficiency",
            f"{eff:.2f} of line rate" if eff is not None else "none published",
            s.get("scale_out.efficiency"),
        ),
        _line("in-switch reduction (SHARP)", "yes" if system.sharp else "no"),
        _line(
            "host CPU (NCCL's LL cap)",
            system.host_cpu or "not known (the non-AMD row)",
            s.get("scale_out.host_cpu"),
        ),
    ]


def _derived_lines(system: System) -> list[str]:
    g, n = system.gpus_per_node, system.nics_per_node
    out = [
        "derived:",
        _line("node egress", _rate(system.node_bytes_per_s), "NICs x per NIC"),
        _line(
            "scale-out per device",
            _rate(system.scale_out_bytes_per_s_per_device),
            f"{n} x per NIC / {g} devices per node",
        ),
    ]
    if system.scale_up_domain_devices > g:
        out.append(
            _line(
                "scale-up domain egress",
                _rate(system.domain_bytes_per_s),
                f"{system.scale_up_domain_devices // g} nodes x node egress",
            )
        )
    up = _scale_up_rate(system)
    if up:
        ratio = up / system.scale_out_bytes_per_s_per_device
        out.append(_line("scale-up / scale-out", f"{ratio:.3g}x", "per device, one-way"))
    share = switch_share_bytes_per_s(system)
    if share is not None:
        out.append(
            _line(
                "switch share per device",
                _rate(share),
                f"switch capacity / {system.scale_up_domain_devices} devices",
            )
        )
    if system.nodes:
        over = (
            f" / {system.oversubscription:g} oversubscription"
            if system.oversubscription > 1
            else ""
        )
        out.append(
            _line(
                "bisection",
                _rate(bisection_bytes_per_s(system, system.nodes)),
                f"{system.nodes} nodes / 2 x node egress{over}",
            )
        )
    return out


def render_system(system: System) -> str:
    s = system.sources
    head = [f"{system.display_name} ({system.name})"]
    if system.aliases:
        head.append(f"aliases: {', '.join(system.aliases)}")
    if system.path and not system.path.endswith(f"systems/{system.name}.toml"):
        head.append(f"file: {system.path}")
    head.append(f"chip: {system.chip}, collective library: {_library(system)}")
    node = ["node:", _line("devices per node", str(system.gpus_per_node), s.get("gpus_per_node"))]
    if system.nodes:
        node.append(_line("nodes", str(system.nodes), s.get("nodes")))
    body = [*head, "", *node, *_scale_up(system), *_scale_out(system), *_derived_lines(system)]
    return "\n".join(body) + "\n"
