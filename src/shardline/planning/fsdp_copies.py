"""FSDP2's copies on the compute stream, where the framework runs them (frameworks/*.toml
[fsdp_copies]: torchtitan's PyTorch FSDP2), one microbatch:

- before each use of a gathered weight (the forward, and the backward's re-gather) the copy-out
  reads the all-gather buffer and writes the parameter: 2 W bytes for W gathered
  (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py foreach_all_gather_copy_out);
- before each reduce-scatter the copy-in reads the weight gradient in the weights' own dtype and
  writes it into the reduce-scatter buffer in the reduce dtype: R (own / reduce bits + 1) bytes
  for R reduce-scattered (foreach_reduce: foreach_reduce_scatter_copy_in).

A phase's copies run at the achievable HBM bandwidth, one kernel per block for each kind the
phase runs (FSDP2 copies a block's parameters as one group). The engine adds them after the
recompute (a rerun forward gathers nothing again: the backward's re-gather serves it); the
vectorized search sums the same over a stage's pieces (`block_copy_parts`, `copies_s`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np

from shardline.basics.dtypes import dtype_bits
from shardline.basics.framework import fsdp_copies
from shardline.basics.options import Execution
from shardline.basics.values import Scalar
from shardline.hardware import Chip
from shardline.ops.predict import kernel_overhead_s
from shardline.planning.phases import Stage
from shardline.realistic.kernels import mem_rate
from shardline.realistic.modelshape import ModelShape

__all__ = ["add_fsdp_copies", "block_copy_parts", "copies_s", "copy_in_bytes"]


def copy_in_bytes(reduced: float, model: ModelShape, ex: Execution) -> float:
    """The copy-in of a reduce-scatter of `reduced` bytes (in the reduce dtype): the gradient
    read in the weights' own dtype and written in the reduce dtype."""
    own = dtype_bits(model.weights_dtype)
    reduce = dtype_bits(ex.grad_reduce_dtype) if ex.grad_reduce_dtype else own
    return reduced * (own / reduce + 1)


def _phase_s(chip: Chip, ex: Execution, nbytes: Scalar, kernels: Scalar) -> Scalar:
    """One phase's copies: the bytes at the HBM rate and a launch per kernel (floats or arrays)."""
    launch = kernel_overhead_s(chip, cuda_graphs=ex.cuda_graphs)
    return nbytes / mem_rate(chip) + kernels * launch


def add_fsdp_copies(
    chip: Chip, ex: Execution, model: ModelShape | None, stage: Stage, blocks: float
) -> None:
    """The copies of the stage's FSDP terms (its `blocks` blocks), added to each phase's ops
    between the matmuls; nothing where the framework does not copy or the step does not train."""
    copy_out, copy_in = fsdp_copies(ex.framework)
    if not (copy_out or copy_in) or model is None or not stage.training:
        return
    for phase, where in (("forward", stage.fwd), ("backward", stage.bwd)):
        nbytes = 0.0
        kinds = set()
        for term in stage.terms:
            if term.purpose != "fsdp" or term.phase != phase:
                continue
            if term.kind == "all_gather" and copy_out:
                nbytes += term.calls * 2 * term.bytes
            elif term.kind == "reduce_scatter" and copy_in:
                nbytes += term.calls * copy_in_bytes(term.bytes, model, ex)
            else:
                continue
            kinds.add(term.kind)
        if nbytes:
            where.add_predicted("other_ops", float(_phase_s(chip, ex, nbytes, blocks * len(kinds))))


def block_copy_parts(
    ex: Execution,
    model: ModelShape | None,
    layers: Iterable[tuple[int, float, Iterable[tuple[bool, float]]]],
) -> tuple[float, float, bool, bool]:
    """A piece of a stage's copies as the vectorized search holds its weight layers
    (`vector_weights.BlockWeights.layers`: count, gathered bytes W, and per backward einsum
    whether it gathers the weights and its gradient's bytes G as the reduce-scatter carries
    them, in the reduce dtype): (forward bytes, backward bytes, whether the backward
    gathers, whether it reduce-scatters). Bytes add over a stage's pieces; the kinds are the
    stage's (`copies_s`)."""
    copy_out, copy_in = fsdp_copies(ex.framework)
    if not (copy_out or copy_in) or model is None:
        return 0.0, 0.0, False, False
    fwd = bwd = 0.0
    gathers = reduces = False
    for count, wbytes, grads in layers:
        fwd += count * 2 * wbytes if copy_out else 0.0
        for has_weights, gbytes in grads:
            if has_weights and copy_out:
                bwd += count * 2 * wbytes
                gathers = True
            if gbytes and copy_in:
                bwd += count * copy_in_bytes(gbytes, model, ex)
                reduces = True
    return fwd, bwd, gathers, reduces


def copies_s(
    chip: Chip, ex: Execution, parts: tuple[Any, Any, Any, Any], blocks: Any
) -> tuple[Any, Any]:
    """A stage's copies, (forward, backward) seconds, from its pieces' summed
    `block_copy_parts` (the flags summed: more than zero where a piece has the kind) and its
    blocks (fractional where a pipeline cuts a block), as `add_fsdp_copies` prices the stage:
    bytes at the HBM rate and one kernel per block for each kind the phase runs. Floats or
    arrays over stages alike."""
    fwd, bwd, gathers, reduces = (np.asarray(x, dtype=float) for x in parts)
    kinds_bwd = (gathers > 0).astype(float) + (reduces > 0)
    fwd_s = np.where(fwd > 0, _phase_s(chip, ex, fwd, blocks), 0.0)
    bwd_s = np.where(bwd > 0, _phase_s(chip, ex, bwd, blocks * kinds_bwd), 0.0)
    return fwd_s, bwd_s
