"""What each pipeline stage of the training search holds, as sums of probed pieces.

The engine's stage is the sum of its layers' parts (`planning.evaluate`), so a stage's times are
the sums of its pieces' (`vector_tables.block_times`): whole blocks, dense blocks where the first
blocks are dense (DeepSeek-V3) and single layers for what a pipeline that cuts the blocks
leaves over. `stage_candidates` gives the stages of a pipeline whose times can differ (the
first of each content, ends and boundary layer), each with its row of `Tables.contents` (its
count of each piece); `floor_pieces` and `floor_counts` the same for the first bound's einsum
floors (`vector_bound`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from shardline.planning.evaluate import Context
from shardline.workload.workload import Workload

__all__ = ["Candidate", "stage_candidates", "finish_contents", "floor_pieces", "floor_counts"]

StageLayers = tuple[tuple[Any, int], ...]


class Tables(Protocol):
    """What the stages read and fill of the search's tables (`vector_tables.Tables`)."""

    pieces: list[StageLayers]
    contents: np.ndarray
    plans: dict[int, list[Candidate]]
    extra: dict[str, Any]


@dataclass(frozen=True)
class Candidate:
    """A stage whose time can differ from every earlier one's: its index, its ends (1 the
    embedding: the first stage, 2 the LM head and loss: the last, 3 both: pp = 1), its content
    (a row of `Tables.contents`) and the layer whose output it sends on."""

    index: int
    ends: int
    content: int
    boundary: Any
    coef: frozenset[tuple[int, int]]  # (piece, count) of the content

    def covers(self, other: Candidate) -> bool:
        """A middle stage that holds at least `other`'s pieces and sends the same: no faster
        (every phase sum grows with each piece), so a later `other` never paces the step."""
        mine = dict(self.coef)
        same = self.boundary is other.boundary or self.boundary == other.boundary
        return (
            self.ends == other.ends == 0
            and same
            and all(mine.get(k, 0) >= n for k, n in other.coef)
        )


def _unit(ctx: Context, layer: Any) -> tuple[Any, Any]:
    """A layer's place in a stage as the engine merges it (`Context._merged`)."""
    return (layer.content_key, ctx.following(layer).content_key)


def _counts(ctx: Context, layers: Any, units: dict[Any, Any]) -> dict[Any, int]:
    out: dict[Any, int] = {}
    for layer, n in layers:
        u = _unit(ctx, layer)
        units.setdefault(u, layer)
        out[u] = out.get(u, 0) + n
    return out


def _block_pieces(w: Workload) -> list[StageLayers]:
    """The whole blocks a stage is made of: the block; with dense first blocks (DeepSeek-V3)
    the dense block too, first (`workload.dense_first`)."""
    from shardline.workload.dense_first import DenseFirstWorkload

    block = tuple((layer, layer.count) for layer in w.layers)
    if isinstance(w, DenseFirstWorkload) and w.dense_blocks:
        return [tuple(w.one_block(dense=True)), block]
    return [block]


def _content(
    t: Tables, ctx: Context, counts: dict[Any, int], units: dict[Any, Any]
) -> tuple[int, frozenset[tuple[int, int]]]:
    """A stage's layer instances as whole blocks (`_block_pieces`, the dense ones first), then
    single layers for what a pipeline that cuts the blocks leaves over; its row of contents."""
    memo = t.extra.setdefault("piece_units", {})
    if not t.pieces:
        t.pieces.extend(_block_pieces(ctx.workload))
    rest, coef = dict(counts), {}
    for k, piece in enumerate(t.pieces[: len(_block_pieces(ctx.workload))]):
        if k not in memo:
            memo[k] = _counts(ctx, piece, units)
        vec = memo[k]
        c = min(rest.get(u, 0) // n for u, n in vec.items())
        if c > 0:
            coef[k] = c
            rest = {u: rest[u] - c * vec.get(u, 0) for u in rest}
    for u, n in rest.items():
        if n:
            one = ((units[u], 1),)
            if one not in t.pieces:
                t.pieces.append(one)
            coef[t.pieces.index(one)] = n
    rows = t.extra.setdefault("content_rows", {})
    key = frozenset(coef.items())
    return rows.setdefault(key, len(rows)), key


def stage_candidates(t: Tables, ctx: Context, pp: int) -> list[Candidate]:
    """The stages of `pp` whose times can differ, the first of each (the engine picks the
    earliest of the slowest, `combine.slowest_stage`): by content, ends and boundary layer;
    less those an earlier stage covers (`Candidate.covers`: an uneven split's middle stages
    of one block fewer)."""
    if pp not in t.plans:
        units = t.extra.setdefault("units", {})
        seen: dict[Any, Candidate] = {}
        for i, (layers, last) in enumerate(ctx.stages(pp)):
            ends = (i == 0) + 2 * (i == pp - 1)
            counts = _counts(ctx, layers, units)
            key = (frozenset(counts.items()), ends, last.name, last.content_key)
            if key not in seen:
                content, coef = _content(t, ctx, counts, units)
                seen[key] = Candidate(i, ends, content, last, coef)
        found = list(seen.values())
        t.plans[pp] = [c for i, c in enumerate(found) if not any(y.covers(c) for y in found[:i])]
    return t.plans[pp]


def finish_contents(t: Tables) -> None:
    """`Tables.contents` as an array [content, piece], from the rows `_content` numbered."""
    rows = t.extra.get("content_rows", {})
    t.contents = np.zeros((len(rows), len(t.pieces)))
    for coef, s in rows.items():
        for k, c in coef:
            t.contents[s, k] = c


def floor_pieces(w: Workload) -> list[StageLayers | None]:
    """The blocks the floors price (`vector_floors.pair_floor`): the block (None), and where
    the first blocks are dense (DeepSeek-V3) the dense block."""
    return [None, *_block_pieces(w)[:-1]]


def floor_counts(w: Workload, pp: int, plan: list[Candidate]) -> list[list[float]]:
    """Each candidate stage's count of each of `floor_pieces`: its blocks of the block (MoE
    blocks where the first are dense) and its dense blocks; each costs at least its piece's
    floor. A pipeline that cuts the blocks holds the same share of the layers on every stage,
    so its blocks (a fraction) are the mean, which the slowest stage holds at least."""
    from shardline.workload.dense_first import moe_blocks_in

    stages = w.pipeline_stages(pp)
    out = []
    for c in plan:
        layers = stages[c.index][0]
        moe = moe_blocks_in(w, layers)
        out.append([moe, w.blocks_in(layers) - moe][: len(floor_pieces(w))])
    return out
