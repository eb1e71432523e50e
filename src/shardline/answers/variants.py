"""The same multiply with one thing changed: the alternatives `shardline explain` weighs, each
computed with the library (pure: no text; `shardline.report.markdown` words them).

For a memory-bound multiply: reuse the operand that dominates the bytes over more work (grow a dim
it lacks, up to the critical M where that is M) and store it in fewer bits (weight-only
quantization, the compute dtype unchanged). For a compute-bound one: a faster compute dtype the
chip has, and the work split over two devices.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Literal

from shardline.basics.dtypes import dtype_bits
from shardline.basics.options import Precision
from shardline.errors import InputError
from shardline.ops.einsum import EinsumSpec, Operand, parse_einsum
from shardline.ops.roofline import RooflineResult, einsum
from shardline.sharding.algebra import ShardedResult

__all__ = [
    "Variant",
    "VariantKind",
    "rerun",
    "dominant_operand",
    "roofline_variants",
    "unsharded_spec",
    "single_device",
]

VariantKind = Literal["grow", "store", "compute", "split"]
NARROW_STORAGE = ("int8", "int4")  # weight-only quantization, tried in this order
GROW_FACTOR = 8  # without a critical M to aim at, a reused operand's free dim grows this much


@dataclass(frozen=True)
class Variant:
    """One change and its result. `operand`: the operand that dominates the bytes (grow, store);
    `dim`: the dim grown or split; `size`: its new size (grow); `dtype`: the operand's new storage
    dtype (store) or the new compute dtype (compute)."""

    kind: VariantKind
    result: RooflineResult
    operand: str = ""
    dim: str = ""
    size: int = 0
    dtype: str = ""


def _dims(r: RooflineResult) -> dict[str, int]:
    return {k: int(v) for k, v in r.dims.items()}


def rerun(
    r: RooflineResult,
    *,
    dims: dict[str, int] | None = None,
    dtypes: dict[str, str] | None = None,
    compute: str | None = None,
) -> RooflineResult:
    """The same einsum on the same (possibly overridden) chip with some inputs changed."""
    spec = parse_einsum(r.spec)
    assert r.chip is not None
    new_dtypes = {op.name: str(r.dtypes[op.name]) for op in spec.operands}
    new_dtypes.update(dtypes or {})
    return einsum(
        spec,
        dims or _dims(r),
        hw=r.chip,
        dtype=new_dtypes[spec.lhs.name],
        dtypes=new_dtypes,
        precision=Precision(compute=compute or str(r.dtypes["compute"])),
        accumulate=r.accumulate,
    )


def _try(make: Callable[[], RooflineResult]) -> RooflineResult | None:
    try:
        return make()
    except InputError:
        return None


def dominant_operand(r: RooflineResult, spec: EinsumSpec) -> Operand:
    """The operand with the most bytes."""
    return max(spec.operands, key=lambda op: float(r.bytes[op.name]))


def _memory_variants(r: RooflineResult, spec: EinsumSpec) -> list[Variant]:
    dims = _dims(r)
    biggest = dominant_operand(r, spec)
    out: list[Variant] = []
    free = [d for d in spec.all_dims if d not in biggest.dims]
    if free:  # reuse the dominant operand over more work: grow the first dim it does not have
        d = free[0]
        target = None
        if r.critical_m is not None and d == "M" and "M" in dims:
            target = int(r.critical_m)
        if target is None or target <= dims[d]:
            target = dims[d] * GROW_FACTOR
        bigger = _try(lambda: rerun(r, dims={**dims, d: target}))
        if bigger is not None:
            out.append(Variant("grow", bigger, operand=biggest.name, dim=d, size=target))
    current = str(r.dtypes[biggest.name])
    for narrow in NARROW_STORAGE:
        if dtype_bits(narrow) < dtype_bits(current):
            compute = str(r.dtypes["compute"])
            smaller = _try(partial(rerun, r, dtypes={biggest.name: narrow}, compute=compute))
            if smaller is not None:
                out.append(Variant("store", smaller, operand=biggest.name, dtype=narrow))
            break
    return out


def _compute_variants(r: RooflineResult, spec: EinsumSpec) -> list[Variant]:
    assert r.chip is not None
    dims = _dims(r)
    out: list[Variant] = []
    compute = str(r.dtypes["compute"])
    peak = float(r.hardware.flops_per_s)
    faster = [
        d
        for d, p in r.chip.peak_flops_per_s.items()
        if p > peak and dtype_bits(d) < dtype_bits(compute) and not d.startswith("int")
    ]
    if faster:  # the widest of the faster float dtypes
        narrow = max(faster, key=lambda d: dtype_bits(d))
        inputs = {op.name: narrow for op in spec.inputs}
        lower = _try(lambda: rerun(r, dtypes=inputs, compute=narrow))
        if lower is not None:
            out.append(Variant("compute", lower, dtype=narrow))
    split = next((d for d in spec.out.dims if d in dims and dims[d] % 2 == 0), None)
    if split is not None:
        half = _try(lambda: rerun(r, dims={**dims, split: dims[split] // 2}))
        if half is not None:
            out.append(Variant("split", half, dim=split))
    return out


def roofline_variants(r: RooflineResult) -> list[Variant]:
    """The changes that attack the binding resource of `r`, each evaluated (those the chip cannot
    run are left out)."""
    spec = parse_einsum(r.spec)
    if r.bound == "memory":
        return _memory_variants(r, spec)
    return _compute_variants(r, spec)


def unsharded_spec(spec_text: str) -> EinsumSpec:
    """The einsum with its sharding annotations dropped."""
    spec = parse_einsum(spec_text)
    plain = " * ".join(f"{op.name}[{','.join(op.dims)}]" for op in (spec.lhs, spec.rhs))
    return parse_einsum(f"{plain} -> {spec.out.name}[{','.join(spec.out.dims)}]")


def single_device(r: ShardedResult) -> RooflineResult | None:
    """The whole sharded multiply on one of its devices (None without a chip or when it cannot
    run there)."""
    chip = r.chip
    if chip is None:
        return None
    plain = unsharded_spec(r.spec)
    dtypes = {op.name: str(r.dtypes.get(op.name, "bf16")) for op in plain.operands}
    return _try(
        lambda: einsum(
            plain,
            dict(r.dims),
            hw=chip,
            dtype=dtypes[plain.lhs.name],
            dtypes=dtypes,
            precision=Precision(compute=str(r.dtypes.get("compute"))),
        )
    )
