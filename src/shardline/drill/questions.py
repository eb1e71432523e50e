"""Drill questions: one generator per topic, each drawing realistic shapes from a seeded
`random.Random` and computing the expected answer with the library's own functions.

Topics (the formulas the worked answers show):
- intensity: I = 2MKN / (s·(MK + KN + MN)) FLOP/B for a bf16 matmul (s = 2 B);
- bound: compute when I >= R = P / W (the ridge), else memory;
- critical-m: the smallest M at which A[M,K]·B[K,N] is compute-bound (`roofline.critical_m`);
- sharding: per-device FLOPs 2MKN/D, or the collective a 1D split needs (`sharding.shard_matmul`);
- collective: the line-rate time of an all-reduce / all-gather / reduce-scatter of V bytes over n
  devices on the chip's own interconnect (`collectives.collective_cost`, alpha-beta);
- pipeline: the bubble of a pipeline flush, (P - 1)/(m + P - 1) of the step, or (P - 1)/(V·m) of
  the ideal step with V interleaved chunks (`planning.step.cycles`).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

from shardline.basics.units import fmt_bytes
from shardline.collectives import collective_cost
from shardline.errors import InputError
from shardline.hardware import Chip
from shardline.ops.roofline import matmul
from shardline.planning.combine import cycles
from shardline.planning.results import bubble_fraction
from shardline.sharding.algebra import shard_matmul

__all__ = [
    "TOPICS",
    "REL_TOLERANCE",
    "Question",
    "PipelineDrill",
    "GENERATORS",
    "make_question",
]

TOPICS = ("intensity", "bound", "critical-m", "sharding", "collective", "pipeline")

# A number is right within 5% of the expected value (critical-m: the answer rounded to an integer).
REL_TOLERANCE = 0.05

# Realistic sizes: tokens in a batch (M), model and FFN widths (K, N), devices, bytes.
TOKENS = (1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192)
WIDTHS = (1024, 2048, 4096, 5120, 8192, 12288, 14336, 16384)
POW2_WIDTHS = (1024, 2048, 4096, 8192, 16384)
SHARD_DEVICES = (2, 4, 8)
COLLECTIVE_KINDS = ("all-reduce", "all-gather", "reduce-scatter")
COLLECTIVE_BYTES = (16 * 2**20, 25 * 2**20, 64 * 2**20, 256 * 2**20, 1e9, 2e9, 4 * 2**30)
STAGES = (2, 4, 8, 16)
MICROBATCHES = (4, 8, 16, 32, 64)
INTERLEAVE = (1, 1, 2, 4)


@dataclass(frozen=True)
class PipelineDrill:
    """A pipeline flush: P stages, m microbatches, V chunks per stage; the schedule's length in
    microbatch times (`cycles`) and the bubble asked for."""

    stages: int
    microbatches: int
    interleave: int
    cycles: float
    bubble: float
    over_ideal: bool  # the bubble over the ideal step (V > 1), else over the whole step


@dataclass(frozen=True)
class Question:
    """One drill question. `expected` is a number in SI units (`unit`) or a word (unit "word",
    one of `choices`); `tolerance` is relative (0 for words); `worked` is the record the worked
    answer is rendered from (RooflineResult, ShardedResult, CollectiveCost, PipelineDrill)."""

    topic: str
    text: str
    given: dict[str, object]
    expected: float | str
    unit: str
    tolerance: float
    choices: tuple[str, ...] = ()
    round_to_int: bool = False
    worked: object = field(default=None, repr=False, compare=False)


def _chip_words(chip: Chip) -> str:
    return f"{chip.display_name} ({chip.name})"


def _intensity(rng: random.Random, chip: Chip) -> Question:
    m, k, n = rng.choice(TOKENS), rng.choice(WIDTHS), rng.choice(WIDTHS)
    r = matmul(m, k, n, chip, dtype="bf16")
    return Question(
        "intensity",
        f"C[M,N] = A[M,K]·B[K,N] with M = {m}, K = {k}, N = {n}, every operand bf16 (2 B). "
        "Arithmetic intensity in FLOP/byte (ideal reuse: each input read once, C written once)?",
        {"M": m, "K": k, "N": n, "dtype": "bf16", "hw": chip.name},
        float(r.intensity_flop_per_byte),
        "FLOP/B",
        REL_TOLERANCE,
        worked=r,
    )


def _bound(rng: random.Random, chip: Chip) -> Question:
    m, k, n = rng.choice(TOKENS), rng.choice(WIDTHS), rng.choice(WIDTHS)
    r = matmul(m, k, n, chip, dtype="bf16")
    return Question(
        "bound",
        f"C[M,N] = A[M,K]·B[K,N] with M = {m}, K = {k}, N = {n} in bf16 on {_chip_words(chip)}: "
        "compute-bound or memory-bound? (answer compute or memory)",
        {"M": m, "K": k, "N": n, "dtype": "bf16", "hw": chip.name},
        str(r.bound),
        "word",
        0.0,
        choices=("compute", "memory"),
        worked=r,
    )


def _critical_m(rng: random.Random, chip: Chip) -> Question:
    k, n = rng.choice(WIDTHS), rng.choice(WIDTHS)
    crit = matmul(1, k, n, chip, dtype="bf16").critical_m
    if crit is None:  # a ridge above the widths' reach (no M is compute-bound): the widest
        k = n = WIDTHS[-1]
        crit = matmul(1, k, n, chip, dtype="bf16").critical_m
    if crit is None:
        raise InputError(f"no M makes a bf16 matmul compute-bound on {chip.name}")
    r = matmul(int(crit), k, n, chip, dtype="bf16")
    return Question(
        "critical-m",
        f"A[M,K]·B[K,N] with K = {k}, N = {n} in bf16 on {_chip_words(chip)}: the smallest M "
        "(tokens) at which the multiply is compute-bound?",
        {"K": k, "N": n, "dtype": "bf16", "hw": chip.name},
        float(crit),
        "",
        REL_TOLERANCE,
        round_to_int=True,
        worked=r,
    )


def _sharding(rng: random.Random, chip: Chip) -> Question:
    m, k, n = rng.choice(TOKENS[5:]), rng.choice(POW2_WIDTHS), rng.choice(POW2_WIDTHS)
    devices, along = rng.choice(SHARD_DEVICES), rng.choice(("m", "n", "k"))
    output = rng.choice(("split", "replicated"))
    r = shard_matmul(m, k, n, devices, along, chip, output=output)
    given = {"M": m, "K": k, "N": n, "devices": devices, "along": along, "output": output}
    given["hw"] = chip.name
    where = "split over the devices" if output == "split" else "whole on every device"
    setup = (
        f"C[M,N] = A[M,K]·B[K,N] with M = {m}, K = {k}, N = {n} in bf16 is split along "
        f"{along.upper()} over {devices} devices; C must end {where}."
    )
    if rng.random() < 0.5:
        kinds = [c.kind.replace("_", "-") for c in r.collectives]
        return Question(
            "sharding",
            f"{setup} Which collective does it need? (none, all-gather, reduce-scatter, "
            "all-reduce)",
            {**given, "ask": "collective"},
            " + ".join(kinds) if kinds else "none",
            "word",
            0.0,
            choices=("none", "all-gather", "reduce-scatter", "all-reduce"),
            worked=r,
        )
    return Question(
        "sharding",
        f"{setup} FLOPs computed by each device?",
        {**given, "ask": "flops per device"},
        float(r.per_device.flops),
        "FLOP",
        REL_TOLERANCE,
        worked=r,
    )


def _collective(rng: random.Random, chip: Chip) -> Question:
    kind, nbytes = rng.choice(COLLECTIVE_KINDS), float(rng.choice(COLLECTIVE_BYTES))
    inter = chip.interconnect
    domain = inter.scale_up_devices if inter is not None and inter.scale_up_devices else 8
    devices = rng.choice([d for d in (2, 4, 8, 16) if d <= max(2, domain)])
    cost = collective_cost(kind, nbytes, devices, chip)
    return Question(
        "collective",
        f"{kind} of V = {fmt_bytes(nbytes)} ({int(nbytes):,} B: the whole array) over "
        f"{devices} devices of {_chip_words(chip)} on its own interconnect: the time at line "
        "rate (alpha-beta, no efficiency loss)?",
        {"kind": kind, "bytes": nbytes, "devices": devices, "hw": chip.name},
        float(cost.t_s),
        "s",
        REL_TOLERANCE,
        worked=cost,
    )


def _pipeline(rng: random.Random, chip: Chip) -> Question:
    del chip  # the bubble depends on the schedule only
    stages, micro, chunks = rng.choice(STAGES), rng.choice(MICROBATCHES), rng.choice(INTERLEAVE)
    length = cycles(True, False, micro, stages, chunks)
    if chunks == 1:
        bubble = bubble_fraction(stages, micro)
        ask = "What fraction of the step is the bubble (idle time)?"
    else:
        bubble = (length - micro) / micro
        ask = (
            f"Interleaved 1F1B with V = {chunks} chunks per stage: the bubble as a fraction of "
            "the ideal (bubble-free) step?"
        )
    drill = PipelineDrill(stages, micro, chunks, length, bubble, chunks > 1)
    return Question(
        "pipeline",
        f"A pipeline of P = {stages} stages runs m = {micro} microbatches per step. {ask}",
        {"stages": stages, "microbatches": micro, "interleave": chunks},
        float(bubble),
        "",
        REL_TOLERANCE,
        worked=drill,
    )


GENERATORS: dict[str, Callable[[random.Random, Chip], Question]] = {
    "intensity": _intensity,
    "bound": _bound,
    "critical-m": _critical_m,
    "sharding": _sharding,
    "collective": _collective,
    "pipeline": _pipeline,
}


def make_question(topic: str, rng: random.Random, chip: Chip) -> Question:
    """One question of `topic` drawn from `rng` for `chip`."""
    return GENERATORS[topic](rng, chip)
