"""`--plot FILE.svg|png` and `--html FILE.html` of `serve` and `search`: the paths are checked
before any work (never an input, not an existing file without --force), the files are written
atomically, and without matplotlib one warning line replaces the figures (the HTML page is still
written, with its numbers)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "FigureOutputs",
    "check_figure_outputs",
    "PLOT_SKIPPED",
    "have_matplotlib",
    "say_wrote",
]

PLOT_SKIPPED = "figures skipped: matplotlib is not installed (pip install 'shardline[plot]')"


@dataclass(frozen=True)
class FigureOutputs:
    plot: Path | None
    html: Path | None

    @property
    def wanted(self) -> bool:
        return self.plot is not None or self.html is not None

    def write(
        self,
        render: Callable[[Path], None],
        figures: Callable[[], list[Any]],
        title: str,
        summary: list[tuple[str, str]],
    ) -> None:
        """Draw `render(path)` to --plot and `figures()` into the --html page (with `summary`)."""
        from shardline.cli.common import write_text
        from shardline.report.figures import figures_page

        drawable = have_matplotlib()
        if not drawable:
            sys.stderr.write(PLOT_SKIPPED + "\n")
        if self.plot is not None and drawable:
            _write_plot(self.plot, render)
            say_wrote(self.plot, "figure")
        if self.html is not None:
            page = figures_page(title, figures() if drawable else [], summary)
            write_text(self.html, page)
            say_wrote(self.html, "self-contained HTML page")


def say_wrote(out: Path, what: str) -> None:
    """One line on stderr naming the file a flag wrote (stdout stays the answer, JSON included)."""
    sys.stderr.write(f"wrote {out}: {what}\n")


def have_matplotlib() -> bool:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        return False
    return True


def _write_plot(out: Path, render: Callable[[Path], None]) -> None:
    from shardline.io.sheets import atomic_write

    def write(tmp: Path) -> None:
        # the temporary file keeps the suffix so that matplotlib picks the format from it
        named = tmp.with_name(tmp.name + out.suffix)
        try:
            render(named)
            named.replace(tmp)
        finally:
            named.unlink(missing_ok=True)

    atomic_write(out, write)


def check_figure_outputs(args: argparse.Namespace, inputs: Iterable[str | None]) -> FigureOutputs:
    """Validate --plot and --html before any work; `inputs` are the files the command reads."""
    from shardline.io.sheets import check_output_path
    from shardline.report.plots import PLOT_SUFFIXES

    sources = [s for s in inputs if isinstance(s, str | Path) and s and Path(s).exists()]
    plot = html = None
    if getattr(args, "plot", None) is not None:
        plot = check_output_path(args.plot, sources, force=args.force, suffixes=PLOT_SUFFIXES)
    if getattr(args, "html", None) is not None:
        html = check_output_path(args.html, sources, force=args.force, suffixes=(".html",))
    return FigureOutputs(plot, html)
