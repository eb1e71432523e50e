"""Chips as data: the catalog and the user's own chip files."""

from shardline.hardware.catalog import chip_from_dict, list_chips, load_chip, resolve_chip
from shardline.hardware.chip import Achievable, Chip, Interconnect, OnChip, ScaleOut

__all__ = [
    "Achievable",
    "Chip",
    "Interconnect",
    "OnChip",
    "ScaleOut",
    "chip_from_dict",
    "list_chips",
    "load_chip",
    "resolve_chip",
]
