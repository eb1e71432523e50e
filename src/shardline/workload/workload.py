"""Workloads as data: a stack of einsum layers run a number of times.

A `Layer` is one two-operand einsum with sizes, per-operand dtypes and the role of each operand:
a *weight* (a parameter, resident on the device), a *cache* (the KV cache), *on-chip* (never
written to HBM, e.g. attention scores inside a flash-attention kernel) or, by default, an
*activation*. A `Workload` is a block of layers run `repeat` times (a transformer block times
its number of layers), forward only or as a training step (forward plus backward). The built-in
templates that build one from a model's sizes (`ffn`, `transformer`) live in
shardline.workload.templates.

docs/stack-and-plans.md. Pure: no printing, no files (the TOML and spreadsheet loaders live in
`io/`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property

from shardline.basics import kinds
from shardline.basics.units import short
from shardline.errors import InputError
from shardline.ops.einsum import check_size
from shardline.ops.layer import (
    LOGICAL_AXES,
    Layer,
    backward_layers,
    backward_stack,
    distinct,
    layer_range,
    matmul_layer,
)
from shardline.realistic.modelshape import ModelShape
from shardline.workload.moe import EXPERT_AXIS, decode_experts

__all__ = [
    "Layer",
    "Workload",
    "PHASES",
    "LOGICAL_AXES",
    "backward_layers",
    "matmul_layer",
    "check_layer_count",
    "check_distinct_count",
    "MAX_LAYERS",
    "MAX_DISTINCT_LAYERS",
]

# Forward-only stacks and training steps; the templates add inference prefill and decode.
PHASES: tuple[str, ...] = kinds.PHASES  # closed vocabulary: shardline.basics.kinds.Phase

# The most layers a workload lists, and the most of them that differ in more than their name.
# Layers of the same content (`Layer.content_key`) are checked and priced once and share the
# answer; each distinct layer is priced on its own (about 0.3 ms: the GEMM model's tiles and
# waves). `stack` on one core: 200,000 [[layer]] tables of one shape (a 16 MB file) in about
# 3 s and 250 MB; 20,000 distinct layers in about 10 s. Time and memory grow linearly with each.
# Real models need a few hundred: a block of them runs `repeat` times and identical layers in a
# row are one layer with `count`.
MAX_LAYERS = 250_000
MAX_DISTINCT_LAYERS = 20_000
_FEWER = (
    "give identical layers in a row as one layer with count = N, or repeat a block with repeat = N"
)


def check_layer_count(count: int, what: str) -> None:
    """An InputError when a workload lists more than MAX_LAYERS layers (checked before a Layer
    is built for each; `count` and `repeat` cost nothing)."""
    if count > MAX_LAYERS:
        raise InputError(f"{what}: {count:,} layers; the limit is {MAX_LAYERS:,} ({_FEWER})")


def check_distinct_count(count: int, what: str) -> None:
    """An InputError when a workload has more than MAX_DISTINCT_LAYERS distinct layers."""
    if count > MAX_DISTINCT_LAYERS:
        raise InputError(
            f"{what}: {count:,} distinct layers; the limit is {MAX_DISTINCT_LAYERS:,} (layers "
            f"that differ in more than their name are priced one by one; {_FEWER})"
        )


@dataclass(frozen=True)
class Workload:
    """A block of forward layers run `repeat` times; `phase` "training" adds the backward pass,
    gradients and optimizer state. `batch_dim` is the dim that data parallelism and microbatches
    split (one batch item = one unit of it: a sequence, or a row of a plain matmul)."""

    name: str
    layers: tuple[Layer, ...]
    repeat: int = 1
    phase: str = "forward"
    batch_dim: str | None = None
    kind: str = "stack"  # "stack", "transformer" or "ffn"
    item: str = "row"  # what one unit of the batch dim is, for throughput
    tokens_per_item: int = 1
    description: str = ""
    kv_cache_formula: dict[str, int] | None = None  # templates: terms of 2*L*n_kv*d_head*S*B*s_kv
    model: ModelShape | None = None  # transformer templates: the whole model's sizes

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise InputError(f"a workload's name must be a string, got {short(self.name)}")
        if isinstance(self.layers, str | bytes) or not isinstance(self.layers, Sequence):
            raise InputError(f"workload {self.name!r}: layers must be a list of Layer")
        layers = tuple(self.layers)
        if not all(isinstance(layer, Layer) for layer in layers):
            raise InputError(f"workload {self.name!r}: every layer must be a Layer")
        if not layers:
            raise InputError(f"workload {self.name!r} has no layers")
        check_layer_count(len(layers), f"workload {self.name!r}")
        distinct = len({layer.content_key for layer in layers})
        check_distinct_count(distinct, f"workload {self.name!r}")
        if isinstance(self.repeat, bool) or not isinstance(self.repeat, int) or self.repeat < 1:
            raise InputError(f"workload {self.name!r}: repeat must be a positive integer")
        check_size(self.repeat, f"workload {self.name!r}: repeat")
        if self.phase not in PHASES + ("prefill", "decode"):
            raise InputError(
                f"workload {self.name!r}: phase must be one of "
                f"{', '.join(PHASES)}, got {self.phase!r}"
            )
        seen: set[str] = set()
        for layer in layers:
            if layer.phase != "forward":
                raise InputError(
                    f"workload layers are forward layers; {layer.name!r} is {layer.phase}"
                )
            if layer.name in seen:
                raise InputError(f"workload {self.name!r}: two layers are named {layer.name!r}")
            seen.add(layer.name)
        if self.batch_dim is not None:
            if not isinstance(self.batch_dim, str):
                raise InputError(f"batch_dim must be a dimension name, got {short(self.batch_dim)}")
            missing = [layer.name for layer in layers if self.batch_dim not in layer.dims]
            if missing:
                raise InputError(
                    f"workload {self.name!r}: batch_dim {self.batch_dim} is not a "
                    f"dimension of layer(s) {', '.join(missing)}"
                )
        object.__setattr__(self, "layers", layers)

    # -- structure -----------------------------------------------------------------------------
    @property
    def training(self) -> bool:
        return self.phase == "training"

    @property
    def decode(self) -> bool:
        """A template's decode step: one new token per sequence against a cached context."""
        return self.model is not None and self.model.decode

    @cached_property
    def batch(self) -> int:
        """Batch items: the smallest size of the batch dim over the layers (1 without one)."""
        if self.batch_dim is None:
            return 1
        # a decode step's expert einsums run rows of routed tokens, not sequences (moe.decode_rows)
        rows = [x for x in self.layers if not x.axis_dims(EXPERT_AXIS)] or self.layers
        return min(layer.dims[self.batch_dim] for layer in rows)

    @cached_property
    def distinct_layers(self) -> list[tuple[Layer, int]]:
        """`shardline.ops.layer.distinct` of the block: [(layer, instances per block)]."""
        return distinct(self.layers)

    @cached_property
    def block_instances(self) -> int:
        """Layer instances in one block: the sum of the layers' counts."""
        return sum(layer.count for layer in self.layers)

    @cached_property
    def layer_count(self) -> int:
        """Layer instances in the whole stack: repeat x the sum of counts."""
        return self.repeat * self.block_instances

    def pipeline_splits(self, pp: int) -> str | None:
        """How `pp` stages cut the stack: "blocks" (whole repeats of the layer list, so each stage
        sends the block's output), "layers" (layer instances, when pp divides the layer count but
        not the blocks), "uneven" (whole blocks, some stages one block more: 126 layers on 8
        stages are 6 stages of 16 and 2 of 15; the slowest stage sets the pipeline's pace), or
        None when there are fewer blocks than stages and the layers do not divide evenly."""
        if self.repeat > 1 and self.repeat % pp == 0:
            return "blocks"
        if self.layer_count % pp == 0:
            return "layers"
        if self.repeat >= pp:
            return "uneven"
        return None

    def chunks_fit(self, pp: int, interleave: int) -> bool:
        """Can each of `pp` stages hold `interleave` model chunks of at least one block (or, for
        a layer split, one layer) each (Narayanan et al. 2021: the layers of a stage split into
        V chunks)?"""
        if interleave <= 1 or pp <= 1:
            return True
        how = self.pipeline_splits(pp)
        if how == "layers":
            return self.layer_count // pp >= interleave
        return how is not None and min(self.stage_blocks(pp)) >= interleave

    def blocks_in(self, layers: Sequence[tuple[Layer, int]]) -> float:
        """Blocks that [(layer, instances)] make up: layer instances over the layers per block
        (fractional when a stage cuts a block)."""
        return sum(n for _, n in layers) / self.block_instances

    def stage_blocks(self, pp: int) -> list[int]:
        """Blocks per stage of an "uneven" split: the first `repeat % pp` stages one more (the
        last stages, which also run the LM head, get the fewer)."""
        q, r = divmod(self.repeat, pp)
        return [q + 1] * r + [q] * (pp - r)

    def pipeline_stages(self, pp: int) -> list[tuple[list[tuple[Layer, int]], Layer]]:
        """Each of `pp` stages as ([(layer, instances)], the stage's last layer), in order."""
        how = self.pipeline_splits(pp)
        if how is None:
            raise InputError(
                f"pp={pp} is more than the {self.repeat} blocks and does not divide the "
                f"{self.layer_count} layers; pipeline stages need at least one block each"
            )
        if how in ("blocks", "uneven"):
            sizes = [self.repeat // pp] * pp if how == "blocks" else self.stage_blocks(pp)
            return [
                ([(layer, layer.count * blocks) for layer in self.layers], self.layers[-1])
                for blocks in sizes
            ]
        per = self.layer_count // pp
        return [layer_range(self.layers, s * per, (s + 1) * per) for s in range(pp)]

    def step_layers(self) -> list[Layer]:
        """The einsums of one step of one block: the forward layers, then (training) the backward
        layers in reverse order."""
        out = list(self.layers)
        if self.training:
            out.extend(backward_stack(self.layers))
        return out

    def identity(self) -> dict[str, object]:
        """The keys every JSON result names its workload by."""
        return {
            "name": self.name,
            "kind": self.kind,
            "phase": self.phase,
            "batch_dim": self.batch_dim,
        }

    # -- parameters ----------------------------------------------------------------------------
    def params(self) -> int:
        return self.repeat * sum(layer.params() * layer.count for layer in self.layers)

    def weight_bytes(self) -> int:
        return self.repeat * sum(layer.weight_bytes() * layer.count for layer in self.layers)

    def with_batch(self, batch: int) -> Workload:
        """The same workload with the batch dim set to `batch` in every layer."""
        if self.batch_dim is None:
            raise InputError(f"workload {self.name!r} names no batch dimension (batch_dim)")
        batch = check_size(int(batch), "batch")
        layers = tuple(layer.with_dims(**{self.batch_dim: batch}) for layer in self.layers)
        formula = None
        if self.kv_cache_formula is not None:
            formula = {**self.kv_cache_formula, "B": batch}
        model = replace(self.model, batch=batch) if self.model is not None else None
        if model is not None and model.decode and model.expert_copies:  # experts it touches
            layers, model = decode_experts(layers, model)
        return replace(self, layers=layers, kv_cache_formula=formula, model=model)

    def with_phase(self, phase: str) -> Workload:
        if phase == self.phase:
            return self
        if self.kind == "stack" and phase not in PHASES:
            raise InputError(
                f"phase {phase!r} applies to transformer templates only; a layer stack "
                f"runs forward or training"
            )
        if phase not in PHASES:
            raise InputError(f"phase {phase!r}: rebuild the template with phase={phase!r}")
        return replace(self, phase=phase)


# ----------------------------------------------------------------------------------------------
# Templates
