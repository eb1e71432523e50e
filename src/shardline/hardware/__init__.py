"""Chips and systems as data: the catalogs and the user's own chip and system files."""

from shardline.hardware.catalog import (
    DEFAULTS,
    catalog_files,
    chip_from_dict,
    list_chips,
    load_chip,
    resolve_chip,
    unsourced_fields,
)
from shardline.hardware.chip import (
    ASSUMED,
    Achievable,
    Chip,
    Interconnect,
    OnChip,
    Power,
    ScaleOut,
)
from shardline.hardware.power import with_power_limit
from shardline.hardware.systems import (
    Fabric,
    System,
    apply_system,
    default_system_for,
    fabric_table,
    list_systems,
    load_system,
    override_system,
    system_from_dict,
)

__all__ = [
    "ASSUMED",
    "DEFAULTS",
    "Achievable",
    "Chip",
    "Fabric",
    "Interconnect",
    "OnChip",
    "Power",
    "ScaleOut",
    "System",
    "apply_system",
    "catalog_files",
    "chip_from_dict",
    "default_system_for",
    "fabric_table",
    "list_chips",
    "list_systems",
    "load_chip",
    "load_system",
    "override_system",
    "resolve_chip",
    "system_from_dict",
    "unsourced_fields",
    "with_power_limit",
]
