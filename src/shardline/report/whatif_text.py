"""Terminal rendering of `shardline what-if precision`: one table, one row per dtype or mix, each
time with its ratio to the first row, then a line per row the chip cannot run."""

from __future__ import annotations

from shardline.answers.whatif import PrecisionRow, PrecisionWhatIf
from shardline.basics.units import fmt_bytes, fmt_int, fmt_time

__all__ = ["render_precision"]

_TIME_COLUMNS = (
    ("t_compute_s", "compute"),
    ("t_memory_s", "memory"),
    ("t_network_s", "network"),
    ("predicted_s", "predicted"),
)


def _with_change(text: str, ratio: float | None, first: bool) -> str:
    if first or ratio is None:
        return text
    return f"{text} ×{ratio:.3g}"


def _cells(row: PrecisionRow, columns: list[tuple[str, str]], first: bool) -> list[str]:
    cells = [row.dtype, row.dtypes["compute"]]
    if not row.supported:
        return cells + ["n/a"] * (len(columns) + 3)
    for key, _ in columns:
        value = getattr(row, key)
        text = "-" if value is None else fmt_time(value)
        cells.append(_with_change(text, row.change.get(key), first))
    cells.append(str(row.bound))
    cells.append("none" if row.critical_m is None else fmt_int(row.critical_m))
    memory = fmt_bytes(row.memory_bytes) if row.memory_bytes is not None else "-"
    cells.append(_with_change(memory, row.change.get("memory_bytes"), first))
    return cells


def _table(header: list[str], body: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(header))]

    def line(cells: list[str]) -> str:
        return "  " + "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

    return [line(header), line(["-" * w for w in widths]), *(line(r) for r in body)]


def render_precision(table: PrecisionWhatIf) -> str:
    """The table, the legend for the ratios and critical M, and the unsupported rows in words."""
    columns = [(k, label) for k, label in _TIME_COLUMNS if table.network or k != "t_network_s"]
    if all(r.predicted_s is None for r in table.rows):
        columns = [c for c in columns if c[0] != "predicted_s"]
    header = ["dtype", "computes in", *(label for _, label in columns)]
    header += ["bound", "critical M", "memory"]
    body = [_cells(r, columns, i == 0) for i, r in enumerate(table.rows)]
    lines = [f"What if the precision changes: {table.subject} on {table.hardware}", ""]
    lines += _table(header, body)
    lines.append("")
    lines.append(f"  ×r: the ratio to the first row ({table.rows[0].dtype}).")
    lines.append(f"  critical M: {table.critical_m_note}.")
    if table.subject.startswith("plan "):
        lines.append(
            "  memory: per device (weights, gradients, optimizer state, activations, KV cache);"
            " compute, memory and network: the recommended plan's step on one device."
        )
    else:
        lines.append("  memory: bytes of the operands (inputs and output) on one device.")
    for row in table.rows:
        if not row.supported:
            lines.append(f"  {row.dtype}: not supported: {row.note}; no times are given.")
    return "\n".join(lines) + "\n"
