"""Chips as data: the catalog and the user's own chip files."""

from shardline.hardware.catalog import (
    DEFAULTS,
    catalog_files,
    chip_from_dict,
    list_chips,
    load_chip,
    resolve_chip,
    unsourced_fields,
)
from shardline.hardware.chip import ASSUMED, Achievable, Chip, Interconnect, OnChip, ScaleOut

__all__ = [
    "ASSUMED",
    "DEFAULTS",
    "Achievable",
    "Chip",
    "Interconnect",
    "OnChip",
    "ScaleOut",
    "catalog_files",
    "chip_from_dict",
    "list_chips",
    "load_chip",
    "resolve_chip",
    "unsourced_fields",
]
