"""What-if over precision: the same multiply evaluated once per dtype (or per mix of operand
dtypes), each row with its times, bound, critical M and memory, and its change against the first.

A row is written `DTYPE` (every operand in it), `OPERAND:DTYPE` (that operand in DTYPE, the
others in the first row's dtype) or both joined by `+`: `bf16+b:int8` is bf16 activations and
output with int8 weights. The compute dtype of a row is the wider input's (the rule of
`roofline.resolve_dtypes`: bf16 activations with int8 weights compute in bf16). A row whose
compute dtype the chip has no peak for is kept, marked unsupported, with its times left empty:
no rate is invented.

Pure: no printing, no files. The command line is `shardline what-if precision`.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from shardline.basics.dtypes import canonical_dtype
from shardline.basics.options import Precision
from shardline.basics.values import JSONDict, Scalar
from shardline.errors import InputError
from shardline.hardware import Chip
from shardline.ops.einsum import EinsumSpec
from shardline.ops.roofline import critical_m, resolve_dtypes
from shardline.workload.workload import Workload

__all__ = [
    "DtypeMix",
    "PrecisionRow",
    "PrecisionWhatIf",
    "DEFAULT_DTYPES",
    "CHANGE_KEYS",
    "parse_dtype_mixes",
    "what_if_precision",
    "matmul_row",
    "einsum_row",
    "shard_row",
]

DEFAULT_DTYPES = "fp32,bf16,fp8,int8,fp4"
# The columns whose ratio to the first row is reported as `change`.
CHANGE_KEYS = ("t_compute_s", "t_memory_s", "t_network_s", "predicted_s", "memory_bytes")
# Words a user may write for the output operand, whatever the spec calls it.
_OUTPUT_WORDS = ("out", "c")


@dataclass(frozen=True)
class DtypeMix:
    """One row's dtypes: `base` for every operand unless `operands` names it."""

    base: str
    operands: tuple[tuple[str, str], ...] = ()

    @property
    def label(self) -> str:
        return "+".join([self.base, *(f"{name}:{dt}" for name, dt in self.operands)])

    def precision(self) -> Precision:
        return Precision(dtype=self.base, operands=dict(self.operands))


def _operand(word: str, names: Sequence[str]) -> str:
    """An operand name as the spec spells it (any case; `out` or `c` for the output)."""
    by_lower = {n.lower(): n for n in names}
    key = word.strip().lower()
    if key in by_lower:
        return by_lower[key]
    if key in _OUTPUT_WORDS:
        return names[-1]
    raise InputError(
        f"--dtypes names operand {word.strip()!r}; the operands are {', '.join(names)}"
    )


def _parse_item(item: str, names: Sequence[str], base: str | None) -> DtypeMix:
    own_base: str | None = None
    operands: dict[str, str] = {}
    for part in (p.strip() for p in item.split("+")):
        if not part:
            raise InputError(f"malformed --dtypes entry {item!r}: an empty part")
        if ":" not in part:
            if own_base is not None:
                raise InputError(f"--dtypes entry {item!r} gives two base dtypes")
            own_base = canonical_dtype(part)
            continue
        word, dtype = part.split(":", 1)
        name = _operand(word, names)
        if name in operands:
            raise InputError(f"--dtypes entry {item!r} gives operand {name} twice")
        operands[name] = canonical_dtype(dtype.strip())
    chosen = own_base or base
    if chosen is None:
        raise InputError(f"--dtypes entry {item!r} needs a base dtype")
    ordered = tuple((n, operands[n]) for n in names if n in operands)
    return DtypeMix(chosen, ordered)


def parse_dtype_mixes(text: str, names: Sequence[str], default: str) -> list[DtypeMix]:
    """`bf16,fp8,b:int8` -> three rows. An entry without a base dtype takes the first row's
    (`default`, the chip's usual dtype, when the first row has none either)."""
    items = [s.strip() for s in text.split(",")]
    if not any(items):
        raise InputError("--dtypes is empty; e.g. --dtypes bf16,fp8,b:int8")
    mixes: list[DtypeMix] = []
    for item in items:
        if not item:
            raise InputError(f"malformed --dtypes {text!r}: an empty entry")
        base = mixes[0].base if mixes else canonical_dtype(default)
        mix = _parse_item(item, names, base)
        if mix in mixes:
            raise InputError(f"--dtypes gives {mix.label} twice")
        mixes.append(mix)
    return mixes


@dataclass(frozen=True)
class PrecisionRow:
    """One dtype (or mix): the times are None where the chip has no peak for the compute dtype."""

    dtype: str
    dtypes: dict[str, str]  # per operand, and "compute"
    supported: bool
    note: str | None = None
    t_compute_s: float | None = None
    t_memory_s: float | None = None
    t_network_s: float | None = None
    bound: str | None = None
    critical_m: int | None = None
    memory_bytes: int | float | None = None
    predicted_s: float | None = None
    change: dict[str, float | None] = field(default_factory=dict)

    def to_dict(self, network: bool) -> JSONDict:
        out = dataclasses.asdict(self)
        if not network:
            out.pop("t_network_s")
            out["change"].pop("t_network_s", None)
        return out


@dataclass(frozen=True)
class PrecisionWhatIf:
    """The table: what was asked (`subject`), on which chip, and one row per dtype or mix."""

    subject: str
    hardware: str
    network: bool  # whether the rows have a network time (shard)
    rows: tuple[PrecisionRow, ...]
    critical_m_note: str

    def to_dict(self) -> JSONDict:
        return {
            "what_if": "precision",
            "subject": self.subject,
            "hardware": self.hardware,
            "critical_m_note": self.critical_m_note,
            "rows": [r.to_dict(self.network) for r in self.rows],
        }


def _ratio(value: float | None, first: float | None) -> float | None:
    if value is None or first is None or first == 0:
        return None
    return float(value) / float(first)


def _with_changes(rows: list[PrecisionRow]) -> tuple[PrecisionRow, ...]:
    first = rows[0]
    return tuple(
        dataclasses.replace(
            r, change={k: _ratio(getattr(r, k), getattr(first, k)) for k in CHANGE_KEYS}
        )
        for r in rows
    )


def _resolved(mix: DtypeMix, names: tuple[str, str, str]) -> tuple[dict[str, str], str]:
    dtypes, compute = resolve_dtypes(names, mix.base, dict(mix.operands), None)
    return {n: str(dtypes[n]) for n in names}, str(compute)


def _unsupported(mix: DtypeMix, chip: Chip, names: tuple[str, str, str]) -> PrecisionRow | None:
    """The row for a mix whose compute dtype the chip cannot run, else None."""
    dtypes, compute = _resolved(mix, names)
    if compute in chip.peak_flops_per_s:
        return None
    have = ", ".join(sorted(chip.peak_flops_per_s))
    note = f"{chip.name} has no {compute} compute (no hardware support; it has {have})"
    return PrecisionRow(mix.label, {**dtypes, "compute": compute}, supported=False, note=note)


RowFn = Callable[[DtypeMix], PrecisionRow]


def what_if_precision(
    mixes: Sequence[DtypeMix],
    chip: Chip,
    names: tuple[str, str, str],
    row: RowFn,
    *,
    subject: str,
    network: bool = False,
) -> PrecisionWhatIf:
    """Evaluate `row` for every mix the chip supports; the others get an unsupported row."""
    rows = [_unsupported(m, chip, names) or row(m) for m in mixes]
    if names == PLAN_OPERANDS:
        note = "none for a whole plan (it belongs to one multiply: what-if precision matmul)"
    elif network:
        note = "per device: the M of the local multiply at which it turns compute-bound"
    else:
        note = "the M at which the multiply turns compute-bound (matmul only)"
    return PrecisionWhatIf(subject, chip.name, network, _with_changes(rows), note)


# --- one row per kind of question --------------------------------------------------------------


def _count(value: Scalar) -> int | float:
    """Bytes as an exact int where they are whole (always, unless padded shapes split them)."""
    number = float(value)
    return int(number) if number.is_integer() else number


def _roofline_row(mix: DtypeMix, result: Any) -> PrecisionRow:
    return PrecisionRow(
        dtype=mix.label,
        dtypes={k: str(v) for k, v in result.dtypes.items()},
        supported=True,
        t_compute_s=float(result.t_compute_s),
        t_memory_s=float(result.t_memory_s),
        bound=str(result.bound),
        critical_m=None if result.critical_m is None else int(result.critical_m),
        memory_bytes=_count(result.bytes["total"]),
        predicted_s=None if result.predicted_s is None else float(result.predicted_s),
    )


def matmul_row(
    mnk: tuple[int, int, int], chip: Chip, *, accumulate: bool = False, launch: str = "eager"
) -> RowFn:
    """C[M,N] = A[M,K] B[K,N]: the roofline with its critical M and the realistic prediction."""
    from shardline.ops.predict import with_prediction
    from shardline.ops.roofline import matmul

    def row(mix: DtypeMix) -> PrecisionRow:
        result = matmul(*mnk, hw=chip, precision=mix.precision(), accumulate=accumulate)
        return _roofline_row(mix, with_prediction(result, launch=launch))

    return row


def einsum_row(
    spec: EinsumSpec,
    dims: dict[str, int],
    chip: Chip,
    *,
    accumulate: bool = False,
    launch: str = "eager",
) -> RowFn:
    """Any unsharded two-operand einsum (no critical M: it is defined for a matmul's M)."""
    from shardline.ops.predict import with_prediction
    from shardline.ops.roofline import einsum

    def row(mix: DtypeMix) -> PrecisionRow:
        result = einsum(
            spec, dims, chip, mix.base, dtypes=dict(mix.operands), accumulate=accumulate
        )
        return _roofline_row(mix, with_prediction(result, launch=launch))

    return row


def shard_row(run: Callable[[Precision], Any], chip: Chip) -> RowFn:
    """A sharded multiply: `run(precision)` gives its ShardedResult (the caller fixes the
    strategy, network and options). Memory is the per-device HBM bytes of the local operands;
    the critical M is the local multiply's."""

    def row(mix: DtypeMix) -> PrecisionRow:
        result = run(mix.precision())
        dtypes = {k: str(v) for k, v in result.dtypes.items()}
        (_, k_loc), (_, n_loc) = result.shapes["A"], result.shapes["B"]
        local = {"a": dtypes["A"], "b": dtypes["B"], "out": dtypes["C"]}
        peak = chip.peak(dtypes["compute"])
        crit = critical_m(k_loc, n_loc, local, peak, chip.mem_bytes_per_s)
        return PrecisionRow(
            dtype=mix.label,
            dtypes=dtypes,
            supported=True,
            t_compute_s=float(result.cost.t_compute_s),
            t_memory_s=float(result.cost.t_memory_s),
            t_network_s=float(result.t_network_s),
            bound=result.bound,
            critical_m=None if crit is None else int(crit),
            memory_bytes=_count(result.hbm_bytes["total"]),
        )

    return row


# A workload's operands for a precision mix: activations (every input that is not a weight, and
# the KV cache), weights, and outputs.
PLAN_OPERANDS = ("x", "w", "out")


def workload_in(workload: Workload, mix: DtypeMix) -> Workload:
    """The workload with its dtypes replaced: `x` for activations and the cache, `w` for the
    weights, `out` for each layer's output; each layer computes in the wider of its inputs."""
    chosen = {"x": mix.base, "w": mix.base, "out": mix.base, **dict(mix.operands)}
    layers = []
    for layer in workload.layers:
        out_name = layer.output.name
        dtypes = {
            op.name: chosen["w"]
            if layer.role(op.name) == "weight"
            else chosen["out"]
            if op.name == out_name
            else chosen["x"]
            for op in layer.parsed.operands
        }
        layers.append(dataclasses.replace(layer, dtype=mix.base, dtypes=dtypes, compute_dtype=None))
    model = workload.model
    if model is not None:
        model = dataclasses.replace(model, dtype=chosen["x"])
    return dataclasses.replace(workload, layers=tuple(layers), model=model)


def plan_row(run: Callable[[Workload], Any], workload: Workload) -> RowFn:
    """A parallel plan: `run(workload)` gives its PlanSet (the caller fixes the devices, degrees
    and execution); the row is the recommended plan (or, when none fits, the first): its step's
    compute, memory and network time on one device, its bottleneck, its realistic time and its
    memory per device. No critical M (it belongs to one multiply)."""

    def row(mix: DtypeMix) -> PrecisionRow:
        ps = run(workload_in(workload, mix))
        best = ps.best() or ps.plans[0]
        dtypes, compute = _resolved(mix, PLAN_OPERANDS)
        return PrecisionRow(
            dtype=mix.label,
            dtypes={**dtypes, "compute": compute},
            supported=True,
            note=None if best.fits else f"{best.name} does not fit in memory",
            t_compute_s=float(best.t_compute_s),
            t_memory_s=float(best.t_memory_s),
            t_network_s=float(best.t_network_s),
            bound=best.bottleneck,
            memory_bytes=float(best.memory_per_device_bytes),
            predicted_s=float(best.predicted_s),
        )

    return row
