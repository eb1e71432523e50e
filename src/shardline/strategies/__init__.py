"""Parallel strategies as data: each strategy is one module (dp, fsdp, tp, pp, cp) registered in
`registry.py`; `Degrees` maps strategy names to degrees."""

from shardline.strategies.base import CommTerm, Knob, LayerView, MemorySplit, StageView, Strategy
from shardline.strategies.degrees import (
    Degrees,
    device_share,
    folded_from,
    local_dims,
    sizes_key,
)
from shardline.strategies.dp import plain_batch_split
from shardline.strategies.registry import (
    by_mesh,
    names,
    registered,
    serving_layouts,
    strategies,
    strategy,
)
from shardline.strategies.tp import tp_layer_collectives, tp_split_dims

__all__ = [
    "CommTerm",
    "Knob",
    "LayerView",
    "MemorySplit",
    "StageView",
    "Strategy",
    "Degrees",
    "device_share",
    "folded_from",
    "local_dims",
    "by_mesh",
    "names",
    "plain_batch_split",
    "registered",
    "serving_layouts",
    "sizes_key",
    "strategies",
    "strategy",
    "tp_layer_collectives",
    "tp_split_dims",
]
