"""Dense first blocks of a mixture-of-experts model (DeepSeek-V3: blocks 1-3 of 61 run a dense
feed-forward of d_ff 18432, the other 58 a mixture of experts).

A `Workload` repeats one block. `DenseFirstWorkload` keeps the MoE block as its repeated block
and adds the dense feed-forward einsums (`dense_ffn`) that replace the MoE feed-forward einsums
(`replaced`, by name: router, experts, shared experts) in the first `dense_blocks` blocks. The
attention einsums are the same objects in both kinds of block. Everything that walks the stack
by stages ([(layer, instances)]) sees the right einsums: a pipeline's stages (the first stages
hold the dense blocks, so the first stage runs 3 dense FFNs where the others run MoE FFNs),
memory (weights, gradients and optimizer state of the dense FFNs on the stages that hold them),
parameter counts, the stack's per-layer table and the model FLOPs for MFU (`ModelShape`
`dense_layers_first` and `dense_d_ff`). Pipeline stages hold whole blocks (never a cut through
a block: the two kinds of block differ in their einsums). The transformer template builds one
(`shardline.workload.templates.dense_first_template`) from a `[moe]` table with
`dense_layers_first`.

Pure: no printing, no files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from shardline.errors import InputError
from shardline.ops.layer import Layer, backward_layers
from shardline.workload.workload import Workload

__all__ = [
    "DenseFirstWorkload",
    "stack_layers",
    "layer_repeats",
    "moe_blocks_in",
    "after",
]

StageLayers = list[tuple[Layer, int]]


@dataclass(frozen=True)
class DenseFirstWorkload(Workload):
    """A MoE block repeated `repeat` times whose first `dense_blocks` blocks run `dense_ffn` in
    place of the block's `replaced` einsums."""

    dense_ffn: tuple[Layer, ...] = ()
    replaced: tuple[str, ...] = ()
    dense_blocks: int = 0

    def _split(self, blocks: int, dense: int) -> StageLayers:
        """[(layer, instances)] of `blocks` consecutive blocks, `dense` of them dense."""
        out = [
            (layer, layer.count * (blocks - dense if layer.name in self.replaced else blocks))
            for layer in self.layers
        ]
        out += [(layer, layer.count * dense) for layer in self.dense_ffn]
        return [(layer, n) for layer, n in out if n > 0]

    def one_block(self, dense: bool) -> StageLayers:
        """One block as [(layer, instances)]: a dense one, or the MoE block."""
        return self._split(1, int(dense))

    def all_layers(self) -> StageLayers:
        """The whole stack as [(layer, instances)]."""
        return self._split(self.repeat, self.dense_blocks)

    def pipeline_splits(self, pp: int) -> str | None:
        """Whole blocks only ("blocks" or "uneven"; None with fewer blocks than stages)."""
        if self.repeat % pp == 0:
            return "blocks"
        return "uneven" if self.repeat >= pp else None

    def pipeline_stages(self, pp: int) -> list[tuple[list[tuple[Layer, int]], Layer]]:
        """Each stage's blocks in order; the first `dense_blocks` blocks are dense."""
        how = self.pipeline_splits(pp)
        if how is None:
            raise InputError(
                f"pp={pp} is more than the {self.repeat} blocks; pipeline stages need at least "
                "one block each (a model with dense first blocks is cut at block boundaries)"
            )
        sizes = [self.repeat // pp] * pp if how == "blocks" else self.stage_blocks(pp)
        out, start = [], 0
        for blocks in sizes:
            dense = min(max(self.dense_blocks - start, 0), blocks)
            last = self.dense_ffn[-1] if dense == blocks else self.layers[-1]
            out.append((self._split(blocks, dense), last))
            start += blocks
        return out

    def blocks_in(self, layers: Sequence[tuple[Layer, int]]) -> float:
        """Blocks in [(layer, instances)]: the instances of the block's first einsum (attention,
        in both kinds of block)."""
        first = self.layers[0]
        return sum(n for layer, n in layers if layer.name == first.name) / first.count

    @property
    def layer_count(self) -> int:
        return sum(n for _, n in self.all_layers())

    def params(self) -> int:
        return sum(layer.params() * n for layer, n in self.all_layers())

    def weight_bytes(self) -> int:
        return sum(layer.weight_bytes() * n for layer, n in self.all_layers())

    def step_layers(self) -> list[Layer]:
        """The block's einsums, then the dense FFN's; training adds their backward einsums."""
        forward = [*self.layers, *self.dense_ffn]
        out = list(forward)
        if self.training:
            for layer in reversed(forward):
                out.extend(backward_layers(layer))
        return out

    def with_batch(self, batch: int) -> Workload:
        out = super().with_batch(batch)
        assert self.batch_dim is not None and isinstance(out, DenseFirstWorkload)
        dense = tuple(layer.with_dims(**{self.batch_dim: out.batch}) for layer in self.dense_ffn)
        return replace(out, dense_ffn=dense)

    def instances(self, layer: Layer) -> int:
        """Instances of one of the stack's einsums (forward or backward) over the whole stack,
        per instance of the layer in its block."""
        name = layer.name.split(".grad_")[0]
        if name in {d.name for d in self.dense_ffn}:
            return self.dense_blocks
        if name in self.replaced:
            return self.repeat - self.dense_blocks
        return self.repeat


def stack_layers(workload: Workload) -> StageLayers:
    """The whole stack as [(layer, instances)], for any workload."""
    if isinstance(workload, DenseFirstWorkload):
        return workload.all_layers()
    return [(layer, layer.count * workload.repeat) for layer in workload.layers]


def layer_repeats(workload: Workload, layer: Layer) -> int:
    """How many blocks run `layer` (forward or backward): `repeat`, or fewer for the einsums
    that only the dense blocks, or only the MoE blocks, run."""
    if isinstance(workload, DenseFirstWorkload):
        return workload.instances(layer)
    return workload.repeat


def after(workload: Workload, layer: Layer) -> Layer:
    """The einsum after a dense FFN einsum: the next dense FFN einsum, then the next block's
    first einsum."""
    dense = workload.dense_ffn if isinstance(workload, DenseFirstWorkload) else ()
    names = [d.name for d in dense]
    if layer.name not in names:
        raise InputError(f"layer {layer.name!r} is not in workload {workload.name!r}")
    i = names.index(layer.name)
    if layer.count > 1:
        return layer
    return dense[i + 1] if i + 1 < len(dense) else workload.layers[0]


def moe_blocks_in(workload: Workload, layers: Sequence[tuple[Layer, int]]) -> float:
    """The MoE blocks of [(layer, instances)]: the instances of the block's last einsum (an MoE
    feed-forward einsum) over its count; every block when no block is dense."""
    if not isinstance(workload, DenseFirstWorkload):
        return workload.blocks_in(layers)
    last = workload.layers[-1]
    return sum(n for layer, n in layers if layer.name == last.name) / last.count
