"""Parallel plans: data parallel, FSDP, tensor parallel, pipeline parallel and their combinations.

docs/stack-and-plans.md; the communication of each strategy follows "How to Scale Your Model",
Part 5 ("How to Parallelize a Transformer for Training") and Megatron-LM (Shoeybi et al. 2019). Each
strategy is one module of `shardline.strategies` (its communication, memory split and mesh
position); the search and the evaluation live in `shardline.planning`:

- `planning.search`: candidates (one product over divisors), microbatch counts, ranking, `plan`;
- `planning.evaluate` and `planning.phases`: one plan's stages and phases as sums of Cost;
- `planning.results`, `planning.reasons`, `planning.sweep`: the records, the reason, the sweep;
- `planning.capacity`: the largest batch or sequence length that fits.

Time of one stage for one microbatch, per phase (forward; backward when training):
`max(sum of per-layer max(t_compute, t_memory), overlapped communication) + critical
communication`. The training step: `(m + (P - 1)/V) * max over stages (t_fwd + t_bwd)` (1F1B with V
interleaved chunks per stage, Narayanan et al. 2021; V = 1: `m + P - 1`; a forward pass: `(m + P -
1) * t_fwd`), plus whatever of the data-parallel gradient all-reduce the last backward pass cannot
hide.
"""

from __future__ import annotations

from shardline.planning.capacity import Capacity, max_batch, max_seq_len
from shardline.planning.evaluate import Context, evaluate_plan
from shardline.planning.results import OBJECTIVES, PlanResult, PlanSet, bubble_fraction
from shardline.planning.search import PlanOptions, candidates, plan
from shardline.planning.sweep import BatchSweep, Crossover, SweepPoint, sweep_batch
from shardline.strategies import CommTerm, Degrees, names

__all__ = [
    "Degrees",
    "PlanResult",
    "PlanSet",
    "PlanOptions",
    "plan",
    "evaluate_plan",
    "candidates",
    "Context",
    "bubble_fraction",
    "OBJECTIVES",
    "STRATEGIES",
    "sweep_batch",
    "BatchSweep",
    "SweepPoint",
    "Crossover",
    "CommTerm",
    "Capacity",
    "max_batch",
    "max_seq_len",
]

STRATEGIES = names()  # the registered strategies' names, in registry order (when imported)
