"""`shardline plot roofline --cheatsheet`: a printable one-page roofline sheet for one chip (PNG,
SVG or PDF; matplotlib imported inside the functions) and the same facts as text. The facts come
from `shardline.answers.cheatsheet`; the page reuses the roofs of `shardline.report.plots`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from shardline.answers.cheatsheet import CheatSheet
from shardline.basics.units import fmt_bytes, fmt_capacity, fmt_int, fmt_rate, fmt_time
from shardline.errors import InputError
from shardline.hardware import Chip

__all__ = ["SHEET_SUFFIXES", "sheet_text", "render_cheatsheet"]

SHEET_SUFFIXES = (".png", ".svg", ".pdf")
PAGE_INCHES = (8.27, 11.69)  # A4 portrait
FORMULAS = (
    "time t = max(F / P, Q / W): F = 2·M·K·N FLOP, Q = bytes moved (each operand once)",
    "ridge R = P / W (FLOP/B): an intensity I = F / Q below R is memory-bound, above it "
    "compute-bound",
    "critical M: the smallest M with 2·M·K·N / P >= s·(M·K + K·N + M·N) / W (s bytes per element)",
    "below the critical M, time ~ s·K·N / W (reading the weight), whatever M",
)


def _dtype_rows(sheet: CheatSheet) -> list[list[str]]:
    return [
        [d.dtype, fmt_rate(d.peak_flops_per_s), f"{d.ridge_flop_per_byte:,.1f} FLOP/B"]
        for d in sheet.dtypes
    ]


def _shape_rows(sheet: CheatSheet) -> list[list[str]]:
    return [
        [
            f"(M, {fmt_int(s.k)}, {fmt_int(s.n)})",
            fmt_bytes(s.weight_bytes),
            fmt_time(s.t_weight_read_s),
            fmt_int(s.critical_m) if s.critical_m is not None else "none (always memory-bound)",
        ]
        for s in sheet.shapes
    ]


DTYPE_HEAD = ["dtype", "peak (dense)", "ridge P / W"]
SHAPE_HEAD = ["(M, K, N)", "weight K·N", "weight read", "critical M"]


def _table_text(head: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    return [
        "  " + "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip()
        for row in [head, *rows]
    ]


def sheet_text(sheet: CheatSheet, out: Path | None = None) -> str:
    """The sheet's facts as text."""
    lines = [
        f"roofline cheat sheet: {sheet.display_name} ({sheet.chip_name})",
        f"HBM bandwidth W = {fmt_rate(sheet.mem_bytes_per_s, 'B/s', 4)}; "
        f"memory capacity {fmt_capacity(sheet.capacity_bytes)}",
        "",
        *_table_text(DTYPE_HEAD, _dtype_rows(sheet)),
        "",
        f"critical M of C[M,N] = A[M,K] B[K,N], every operand {sheet.shape_dtype}:",
        *_table_text(SHAPE_HEAD, _shape_rows(sheet)),
        "",
        *FORMULAS,
    ]
    if out is not None:
        lines.append(f"wrote {out}: one page")
    return "\n".join(lines) + "\n"


def _draw_tables(ax: Any, sheet: CheatSheet) -> None:
    ax.axis("off")
    facts = (
        f"HBM bandwidth W = {fmt_rate(sheet.mem_bytes_per_s, 'B/s', 4)}    "
        f"memory capacity {fmt_capacity(sheet.capacity_bytes)}"
    )
    ax.text(0.0, 1.0, facts, fontsize=10, va="top", parse_math=False)
    top = ax.table(
        cellText=_dtype_rows(sheet),
        colLabels=DTYPE_HEAD,
        loc="upper center",
        bbox=(0.0, 0.55, 1.0, 0.38),
    )
    top.set_gid("dtypes")
    ax.text(
        0.0,
        0.5,
        f"critical M of C[M,N] = A[M,K]·B[K,N], every operand {sheet.shape_dtype}",
        fontsize=9,
        va="top",
        parse_math=False,
    )
    low = ax.table(
        cellText=_shape_rows(sheet),
        colLabels=SHAPE_HEAD,
        loc="lower center",
        bbox=(0.0, 0.2, 1.0, 0.26),
    )
    low.set_gid("shapes")
    for i, line in enumerate(FORMULAS):
        ax.text(0.0, 0.15 - 0.04 * i, line, fontsize=8, va="top", parse_math=False)


def _draw_page(sheet: CheatSheet, chip: Chip) -> object:
    from shardline.report.plots import draw_roofs, new_figure, roofline_data

    fig, ax = new_figure(*PAGE_INCHES)
    ax.set_position((0.1, 0.56, 0.85, 0.38))
    draw_roofs(ax, roofline_data(chip, levels=False))
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte)")
    ax.set_ylabel("attainable FLOP/s")
    ax.grid(True, which="both", linewidth=0.3)
    ax.legend(fontsize=7, loc="lower right")
    ax.set_title(
        f"Roofline cheat sheet: {sheet.display_name} ({sheet.chip_name})",
        fontsize=12,
        parse_math=False,
    )
    _draw_tables(fig.add_axes((0.08, 0.04, 0.86, 0.46)), sheet)
    return fig


def _save(fig: Any, path: Path) -> None:
    """Deterministic: no dates or versions in the metadata."""
    suffix = path.suffix.lower()
    if suffix == ".svg":
        fig.savefig(path, format="svg", metadata={"Date": None, "Creator": "shardline"})
    elif suffix == ".png":
        fig.savefig(path, format="png", dpi=150, metadata={"Software": None})
    elif suffix == ".pdf":
        meta = {"CreationDate": None, "ModDate": None, "Creator": "shardline", "Producer": None}
        fig.savefig(path, format="pdf", metadata=meta)
    else:
        raise InputError(f"cheat sheet {path}: expected .png, .svg or .pdf, got {suffix!r}")


def render_cheatsheet(sheet: CheatSheet, chip: Chip, path: str | Path) -> None:
    """The page: the chip's roofs on top, the tables and formulas below."""
    import matplotlib

    from shardline.report.plots import SVG_HASH_SALT

    with matplotlib.rc_context():
        matplotlib.rcdefaults()
        matplotlib.rcParams.update(
            {"svg.hashsalt": SVG_HASH_SALT, "svg.fonttype": "path", "path.simplify": False}
        )
        _save(_draw_page(sheet, chip), Path(path))
