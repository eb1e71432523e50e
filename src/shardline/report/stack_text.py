"""Terminal rendering of stacks, parallel plans and batch sweeps: the answer first, then the
derivation with the numbers put in."""

from __future__ import annotations

from collections.abc import Sequence

from shardline.basics.dtypes import dtype_bytes
from shardline.basics.units import fmt_bytes, fmt_flops, fmt_int, fmt_num, fmt_time
from shardline.workload.stack import (
    ADAM_MOMENTS_BYTES_PER_PARAM,
    OPTIMIZER_BYTES_PER_PARAM,
    LayerRow,
    MemoryCheck,
    StackResult,
    optimizer_bytes_per_param,
)
from shardline.workload.workload import Workload

__all__ = ["render_stack", "table", "rate", "describe", "memory_parts"]


def table(header: Sequence[str], rows: Sequence[Sequence[str]], right: Sequence[bool]) -> list[str]:
    """Columns padded to their widest cell (right-aligned where `right`), two spaces apart."""
    columns = zip(header, *rows, strict=True) if rows else ((h,) for h in header)
    widths = [max(map(len, column)) for column in columns]
    pattern = "  ".join(f"{{:{'>' if r else '<'}{w}}}" for w, r in zip(widths, right, strict=True))
    return ["  " + pattern.format(*cells).rstrip() for cells in (header, *rows)]


def rate(value: float) -> str:
    return f"{value:,.0f}" if value >= 1000 else f"{value:.4g}"


def describe(w: Workload) -> str:
    per_block = sum(layer.count for layer in w.layers)
    blocks = (
        f"{w.layer_count} layer instances ({w.repeat} x {per_block} per block)"
        if w.repeat > 1
        else f"{w.layer_count} layer instances"
    )
    from shardline.workload.dense_first import DenseFirstWorkload

    if isinstance(w, DenseFirstWorkload):
        blocks = (
            f"{w.layer_count} layer instances ({w.repeat} blocks, the first {w.dense_blocks} dense)"
        )
    batch = f"batch {fmt_int(w.batch)} ({w.batch_dim})" if w.batch_dim else "no batch dim"
    return f"{w.phase}, {blocks}, {batch}"


def _sum_terms(rows: Sequence[LayerRow], attr: str) -> str:
    if len(rows) > 6:
        return f"sum over the {len(rows)} layers of count × {attr}"
    return " + ".join(f"{r.count} × {fmt_int(getattr(r, attr))}" for r in rows)


def _bound_line(r: StackResult) -> str:
    t = r.totals
    if t.t_compute_s >= t.t_memory_s:
        head = (
            f"COMPUTE-BOUND overall: t_compute {fmt_time(t.t_compute_s)} >= t_memory "
            f"{fmt_time(t.t_memory_s)} (HBM data transfer)"
        )
    else:
        head = (
            f"MEMORY-BOUND overall: t_memory {fmt_time(t.t_memory_s)} (HBM data transfer) > "
            f"t_compute {fmt_time(t.t_compute_s)}"
        )
    bounds = {row.bound for row in {row.content_key: row for row in r.layers}.values()}
    mixed = "" if len(bounds) == 1 else f"; layers differ ({', '.join(sorted(bounds))}-bound)"
    return (
        f"{head}{mixed}; lower bound {fmt_time(t.t_lower_s)}, upper bound {fmt_time(t.t_upper_s)}"
    )


def memory_parts(mem: MemoryCheck) -> list[tuple[str, float]]:
    """The memory terms by name, in the order both the stack and the plan print them."""
    return [
        ("weights", mem.weights_bytes),
        ("gradients", mem.gradients_bytes),
        ("optimizer", mem.optimizer_bytes),
        ("activations", mem.activations_bytes),
        ("KV cache", mem.kv_cache_bytes),
        # FSDP's gathered weights (the layer in use and the next): part of the total
        ("gathered weights", mem.buffers_bytes),
    ]


def _fit_line(mem: MemoryCheck, chip_name: str) -> str:
    parts = memory_parts(mem)
    shown = ", ".join(f"{name} {fmt_bytes(v)}" for name, v in parts if v)
    verdict = "FITS" if mem.fits else "DOES NOT FIT"
    margin = (
        f"{fmt_bytes(mem.headroom_bytes)} to spare"
        if mem.fits
        else f"{fmt_bytes(-mem.headroom_bytes)} short"
    )
    return (
        f"{verdict} on one {chip_name}: needs {fmt_bytes(mem.total_bytes)} ({shown}) of "
        f"{fmt_bytes(mem.capacity_bytes)}, {margin}"
    )


def _memory_lines(r: StackResult) -> list[str]:
    w, mem = r.workload, r.memory
    cap = mem.capacity_bytes
    out = [f"Memory on one {r.chip.name} (capacity {fmt_bytes(cap)} = {fmt_int(cap)} B):"]
    weight_dtypes = {layer.dtypes[name] for layer in w.layers for name in layer.weights}
    if len(weight_dtypes) == 1:
        (dtype,) = weight_dtypes
        s_w = dtype_bytes(dtype)
        out.append(
            f"  weights      params × s_w = {fmt_int(mem.params)} × {s_w:g} B ({dtype}) = "
            f"{fmt_int(mem.weights_bytes)} B ({fmt_bytes(mem.weights_bytes)})"
        )
    else:
        out.append(
            f"  weights      sum of params × s_w over the layers = "
            f"{fmt_int(mem.weights_bytes)} B ({fmt_bytes(mem.weights_bytes)})"
        )
    if w.training:
        out.append(
            f"  activations  every activation input saved for the backward pass, plus the "
            f"largest output = {fmt_int(mem.activations_bytes)} B "
            f"({fmt_bytes(mem.activations_bytes)})"
        )
    else:
        out.append(
            f"  activations  largest live set (one layer's inputs + output) = "
            f"{fmt_int(mem.activations_bytes)} B ({fmt_bytes(mem.activations_bytes)})"
        )
    out += _kv_lines(w, mem)
    out += _state_lines(w, mem, weight_dtypes)
    out += _total_lines(mem, cap)
    return out


def _kv_lines(w: Workload, mem: MemoryCheck) -> list[str]:
    if w.kv_cache_formula:
        f = w.kv_cache_formula
        s_kv = f["s_kv_bits"] / 8
        return [
            f"  KV cache     2·L·n_kv·d_head·S·B·s_kv = 2 × {f['L']} × {f['n_kv']} × "
            f"{f['d_head']} × {fmt_int(f['S'])} × {fmt_int(f['B'])} × {s_kv:g} B = "
            f"{fmt_int(mem.kv_cache_bytes)} B ({fmt_bytes(mem.kv_cache_bytes)})"
        ]
    if mem.kv_cache_bytes:
        return [
            f"  KV cache     the cache operands = {fmt_int(mem.kv_cache_bytes)} B "
            f"({fmt_bytes(mem.kv_cache_bytes)})"
        ]
    return ["  KV cache     none"]


def _state_lines(w: Workload, mem: MemoryCheck, weight_dtypes: set[str]) -> list[str]:
    """Gradients and optimizer state (training)."""
    if not w.training:
        return ["  gradients, optimizer: none (no training)"]
    out = [
        f"  gradients    one per weight, in its dtype = {fmt_int(mem.gradients_bytes)} B "
        f"({fmt_bytes(mem.gradients_bytes)})"
    ]
    per_param = {optimizer_bytes_per_param(dtype) for dtype in weight_dtypes}
    if per_param == {OPTIMIZER_BYTES_PER_PARAM}:
        adam = f"Adam, fp32 master + 2 moments: {OPTIMIZER_BYTES_PER_PARAM} B × "
    elif per_param == {ADAM_MOMENTS_BYTES_PER_PARAM}:
        adam = (
            f"Adam, 2 fp32 moments (fp32 weights are the master copy): "
            f"{ADAM_MOMENTS_BYTES_PER_PARAM} B × "
        )
    else:
        adam = "Adam, 2 fp32 moments + an fp32 master copy of the narrower weights, over "
    out.append(
        f"  optimizer    {adam}{fmt_int(mem.params)} params = {fmt_int(mem.optimizer_bytes)} B "
        f"({fmt_bytes(mem.optimizer_bytes)})"
    )
    return out


def _total_lines(mem: MemoryCheck, cap: float) -> list[str]:
    out: list[str] = []
    relation = "<=" if mem.fits else ">"
    verdict = (
        f"fits, {fmt_bytes(mem.headroom_bytes)} to spare"
        if mem.fits
        else f"does not fit, {fmt_bytes(-mem.headroom_bytes)} short"
    )
    out.append(
        f"  total        {fmt_int(mem.total_bytes)} B ({fmt_bytes(mem.total_bytes)}) "
        f"{relation} {fmt_bytes(cap)}: {verdict}"
    )
    ws_rel = "<=" if mem.working_set_fits else ">"
    out.append(
        f"  at once      one input + one output + the layer's weight, largest layer "
        f"({mem.working_set_layer}): {fmt_int(mem.working_set_bytes)} B "
        f"({fmt_bytes(mem.working_set_bytes)}) {ws_rel} {fmt_bytes(cap)}: "
        f"{'fits' if mem.working_set_fits else 'does not fit'}"
    )
    return out


def render_stack(r: StackResult) -> str:
    w = r.workload
    out = [
        f"{w.name} on {r.chip.display_name} ({r.chip.name})",
        f"{describe(w)}",
        "",
        _bound_line(r),
        _fit_line(r.memory, r.chip.name),
        "",
    ]
    out += _layer_table(r)
    out += ["", "Totals (sum over the layers of count × the per-instance value):"]
    out += _totals_lines(r)
    out.append("")
    out += _memory_lines(r)
    return "\n".join(out) + "\n"


def _layer_table(r: StackResult) -> list[str]:
    t = r.totals
    header = (
        "layer",
        "count",
        "FLOPs each",
        "bytes each",
        "FLOP/B",
        "bound",
        "t_lower each",
        "× count",
        "predicted × count",
    )
    cells: dict[
        tuple[object, ...], tuple[str, ...]
    ] = {}  # rows that read the same but for the name
    rows = []
    for row in r.layers:
        key = (row.content_key, row.count)
        if key not in cells:
            cells[key] = (
                fmt_int(row.count),
                fmt_flops(row.flops),
                fmt_bytes(row.bytes),
                f"{row.intensity_flop_per_byte:,.4g}",
                row.bound,
                fmt_time(row.t_lower_s),
                fmt_time(row.count * row.t_lower_s),
                fmt_time(row.count * row.predicted_s),
            )
        rows.append((row.name, *cells[key]))
    rows.append(
        (
            "total",
            fmt_int(sum(row.count for row in r.layers)),
            fmt_flops(t.flops),
            fmt_bytes(t.bytes),
            "",
            "",
            "",
            fmt_time(t.t_lower_s),
            fmt_time(t.predicted_s),
        )
    )
    return table(header, rows, (False, True, True, True, True, False, True, True, True))


def _totals_lines(r: StackResult) -> list[str]:
    w, t = r.workload, r.totals
    out: list[str] = []
    out.append(
        f"  FLOPs      {_sum_terms(r.layers, 'flops')} = {fmt_int(t.flops)} FLOP "
        f"({fmt_flops(t.flops)})"
    )
    if w.training:
        out.append(
            f"             forward {fmt_flops(t.forward_flops)} + backward "
            f"{fmt_flops(t.backward_flops)} (backward = "
            f"{t.backward_flops / t.forward_flops:.3g} × forward)"
        )
    out.append(
        f"  bytes      {_sum_terms(r.layers, 'bytes')} = {fmt_int(t.bytes)} B "
        f"({fmt_bytes(t.bytes)})"
    )
    peaks = {layer.compute_dtype for layer in w.layers}
    if len(peaks) == 1:
        (dtype,) = peaks
        peak = r.chip.peak(dtype or "bf16")
        out.append(
            f"  t_compute  FLOPs / P = {fmt_num(t.flops)} / {fmt_num(peak)} FLOP/s "
            f"({dtype}) = {fmt_time(t.t_compute_s)}"
        )
    else:
        out.append(f"  t_compute  sum of count × F / P(dtype) = {fmt_time(t.t_compute_s)}")
    out.append(
        f"  t_memory   bytes / W = {fmt_num(t.bytes)} / {fmt_num(r.chip.mem_bytes_per_s)} B/s"
        f" = {fmt_time(t.t_memory_s)}  (HBM data transfer)"
    )
    out.append(
        f"  lower      sum of count × max(t_compute, t_memory) = {fmt_time(t.t_lower_s)}"
        "  (each layer overlaps its own transfers)"
    )
    out.append(
        f"  upper      sum of count × (t_compute + t_memory) = {fmt_time(t.t_upper_s)}"
        "  (no overlap)"
    )
    out.append(
        f"  predicted  sum of count × each einsum's realistic time = {fmt_time(t.predicted_s)}"
        "  (achievable rates, tiles, launches; `shardline plan --devices 1` adds the ops"
        " between the matmuls)"
    )
    return out
