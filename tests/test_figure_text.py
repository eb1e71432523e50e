"""Every figure the tool writes reads at a glance (issue 28, item 3): no two pieces of text
overlap, none is cut off at the figure's edge, no axis shows an offset ("+1.0216e5"), and dollar
axes read in dollars. Each command's figures are drawn with matplotlib's Agg renderer and every
drawn text's bounding box is checked."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from shardline.cli.main import main

matplotlib = pytest.importorskip("matplotlib")

ROOT = Path(__file__).resolve().parent.parent
TOLERANCE_PX = 0.5  # boxes that share less than half a pixel do not overlap


def drawn_texts(fig: Any) -> list[tuple[str, Any]]:
    """(text, window bbox) of every text the figure draws: titles, axis labels, the tick labels
    inside the view, annotations, legend entries and figure texts."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    if not hasattr(fig.canvas, "get_renderer"):  # pyplot's close() leaves a bare canvas
        FigureCanvasAgg(fig)
    renderer = fig.canvas.get_renderer()
    fig.draw(renderer)
    hidden = set()  # tick labels matplotlib keeps but does not draw (outside the view limits)
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            shown = {id(x) for t in axis._update_ticks() for x in (t.label1, t.label2)}
            ticks = axis.get_major_ticks() + axis.get_minor_ticks()
            hidden |= {id(x) for t in ticks for x in (t.label1, t.label2)} - shown
    out = []
    for artist in fig.findobj(Text):
        if id(artist) in hidden or not artist.get_visible() or not artist.get_text().strip():
            continue
        box = artist.get_window_extent(renderer)
        clip = artist.get_clip_box() if artist.get_clip_on() else None
        if artist.axes is not None and clip is not None and not clip.overlaps(box):
            continue  # clipped away: not drawn
        out.append((artist.get_text(), box))
    return out


def problems(fig: Any) -> list[str]:
    """Overlapping pairs, texts past the figure's edge, offset axes."""
    texts = drawn_texts(fig)
    found = []
    edge = fig.bbox
    for i, (a, box_a) in enumerate(texts):
        if (
            box_a.x0 < edge.x0 - TOLERANCE_PX
            or box_a.y0 < edge.y0 - TOLERANCE_PX
            or box_a.x1 > edge.x1 + TOLERANCE_PX
            or box_a.y1 > edge.y1 + TOLERANCE_PX
        ):
            found.append(f"{a!r} is cut off at the figure's edge")
        for b, box_b in texts[i + 1 :]:
            w = min(box_a.x1, box_b.x1) - max(box_a.x0, box_b.x0)
            h = min(box_a.y1, box_b.y1) - max(box_a.y0, box_b.y0)
            if w > TOLERANCE_PX and h > TOLERANCE_PX:
                found.append(f"{a!r} overlaps {b!r}")
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            offset = axis.get_offset_text().get_text()
            if offset:
                found.append(f"an axis shows an offset {offset!r}")
    return found


@pytest.fixture
def figures(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Every figure saved while the test runs (matplotlib's savefig, however it is called)."""
    from matplotlib.figure import Figure

    saved: list[Any] = []
    original = Figure.savefig

    def record(self: Any, *args: Any, **kwargs: Any) -> Any:
        saved.append(self)
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Figure, "savefig", record)
    yield saved


SEED003 = str(ROOT / "examples" / "seed003_shapes.csv")
COMMANDS = {
    "plot roofline (the seed 003 sheet)": [
        "plot", "roofline", "--hw", "a100-40gb", "--from", SEED003,
    ],
    "plot roofline --cheatsheet": ["plot", "roofline", "--hw", "h100-sxm", "--cheatsheet"],
    "plot batch": [
        "plot", "batch", "--shapes", "4096x4096,1024x1024", "--hw", "tpu-v5e", "--b-dtype", "int8",
    ],
    "plot strategies": [
        "plot", "strategies", "8192", "1024", "8192", "--devices", "8", "--hw", "h100-sxm",
    ],
    "serve --plot": [
        "serve", "--model", "llama-3.2-1b", "--hw", "h100-sxm", "--devices", "1", "--rate",
        "20", "--in", "500", "--out", "100", "--requests", "200",
    ],
    "search --plot (serving)": [
        "search", "--model", "llama-3.2-1b", "--slo", "ttft=500ms,tpot=30ms", "--rate", "5/s",
        "--in", "500", "--out", "100", "--hw", "h100-sxm,h200", "--max-devices", "8", "--quiet",
    ],
    "search --plot (training)": [
        "search", "--model", "llama-3.2-1b", "--phase", "training", "--tokens", "1T",
        "--devices", "64", "--seq-len", "1024", "--global-batch", "64Ki", "--rerank", "4",
        "--quiet", "--hw", "h100-sxm,h200",
    ],
}  # fmt: skip


@pytest.mark.parametrize("name", list(COMMANDS))
def test_no_text_overlaps_in_any_figure(
    name: str, figures: list[Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = COMMANDS[name]
    out = tmp_path / "figure.png"
    flag = "-o" if argv[0] == "plot" else "--plot"
    code = main([*argv, flag, str(out)])
    assert code == 0, capsys.readouterr().err
    assert figures, "no figure was saved"
    found = [f"figure {i}: {p}" for i, fig in enumerate(figures) for p in problems(fig)]
    assert found == []


def test_pareto_dollars_without_offset(figures: list[Any], tmp_path: Path) -> None:
    # issue 28: a front whose costs differ in the sixth digit drew "+1.0216e5" above ticks 3-7
    from shardline.basics.units import fmt_usd
    from shardline.report.serving_plots import render_pareto

    costs = [102_160.0, 102_163.0, 102_167.0]
    render_pareto(
        costs, [3.0, 2.0, 1.0], tmp_path / "p.png", labels=["a", "b", "c"], cost_label="USD"
    )
    (fig,) = figures
    assert problems(fig) == []
    ax = fig.axes[0]
    ticks = [t for t in ax.get_yticks() if ax.get_ylim()[0] <= t <= ax.get_ylim()[1]]
    shown = ax.yaxis.get_major_formatter().format_ticks(ticks)
    assert all(s.startswith("$") for s in shown) and len(set(shown)) == len(shown)
    # three significant figures where they tell the ticks apart, more only where they do not
    assert fmt_usd(102_163.0) == "$102k" and fmt_usd(1_021_600.0) == "$1.02M"
    assert fmt_usd(999.6) == "$1k" and fmt_usd(0.153) == "$0.153"


def test_validate_figure_text(figures: list[Any], tmp_path: Path) -> None:
    # `validate`'s figure needs a measurement to run the command; its renderer is drawn here on a
    # result of three cases spanning three decades (the checks are the same)
    from types import SimpleNamespace

    from shardline.report.predict_text import render_plot

    cases = [
        {"measured_s": m, "roofline_s": 0.8 * m, "predicted_s": 1.1 * m} for m in (1e-5, 1e-4, 1e-3)
    ]
    summary = {"median_abs_err_roofline": 0.2, "median_abs_err_predicted": 0.1}
    result = SimpleNamespace(
        cases=cases, summary=summary, hardware="host", measured_on="2026-12-04"
    )
    render_plot(str(tmp_path / "v.png"), result)
    (fig,) = figures
    assert problems(fig) == []


def test_the_check_finds_what_the_issue_found() -> None:
    # two names on one point, a dollar axis with an offset, a label past the edge: the three
    # faults issue 28 found, each reported
    from shardline.report.plots import new_figure

    fig, ax = new_figure(4, 3)
    ax.plot([1, 2], [102_160.0, 102_167.0])
    ax.annotate("decode, batch 8", (1.5, 102_163.0))
    ax.annotate("tall-skinny output N = 8", (1.5, 102_163.0))
    ax.annotate("past the edge", (2.0, 102_167.0), xytext=(200, 0), textcoords="offset points")
    found = problems(fig)
    assert "'decode, batch 8' overlaps 'tall-skinny output N = 8'" in found
    assert any(p.startswith("an axis shows an offset") for p in found)
    assert "'past the edge' is cut off at the figure's edge" in found
