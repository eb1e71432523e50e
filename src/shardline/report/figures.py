"""Figures inlined in the offline HTML report: SVG markup (ours, or matplotlib's from
shardline.report.serving_plots) cleaned so that the page stays self-contained and holds no URL:
no XML prolog, DOCTYPE, comments, metadata, scripts or namespace attributes (an <svg> inside
HTML needs none)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from html import escape

from shardline.errors import InputError

__all__ = ["Figure", "inline_svg", "figures_html", "figures_page"]

_DROP = (
    re.compile(r"<\?xml.*?\?>", re.S),
    re.compile(r"<!DOCTYPE.*?>", re.S | re.I),
    re.compile(r"<!--.*?-->", re.S),
    re.compile(r"<metadata\b.*?</metadata>", re.S | re.I),
    re.compile(r"<script\b.*?</script>", re.S | re.I),
    re.compile(r"""\s+xmlns(:\w+)?\s*=\s*(".*?"|'.*?')""", re.S),
)


@dataclass(frozen=True)
class Figure:
    title: str
    svg: str  # markup from inline_svg
    caption: str = ""


def inline_svg(svg_text: str) -> str:
    """`svg_text` (a whole SVG file's text) as an element to place inside an HTML page."""
    text = svg_text
    for pattern in _DROP:
        text = pattern.sub("", text)
    start = text.find("<svg")
    if start < 0:
        raise InputError("not an SVG: no <svg> element")
    text = text[start:].strip()
    if re.search(r"(?i)\bon\w+\s*=|https?:|javascript:", text):
        raise InputError("the SVG holds an event handler or a URL; it cannot be inlined")
    return text


def figures_html(figures: list[Figure]) -> str:
    """One <section> per figure (empty string for none)."""
    return "".join(
        f"<section><h2>{escape(f.title)}</h2>"
        + (f'<p class="hint">{escape(f.caption)}</p>' if f.caption else "")
        + f"{f.svg}</section>\n"
        for f in figures
    )


def figures_page(
    title: str, figures: list[Figure], summary: list[tuple[str, str]] | None = None
) -> str:
    """A self-contained HTML page of figures (no script, no network), for results that have no
    table of rows: a serving run's CDFs and KV occupancy, a search's Pareto front."""
    from shardline.report.html_page import STYLE

    rows = "".join(f"<dt>{escape(k)}</dt><dd>{escape(v)}</dd>" for k, v in summary or [])
    return (
        '<!DOCTYPE html>\n<html lang="en">\n<head>\n<meta charset="utf-8">\n'
        '<meta http-equiv="Content-Security-Policy" content="default-src \'none\'; '
        "style-src 'unsafe-inline'; img-src data:\">\n"
        f"<title>{escape(title)}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n"
        f"<header><h1>{escape(title)}</h1></header>\n"
        + (f'<section><h2>Summary</h2><dl id="summary">{rows}</dl></section>\n' if rows else "")
        + figures_html(figures)
        + "</body>\n</html>\n"
    )
