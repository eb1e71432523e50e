"""Figures inlined in the offline HTML report: SVG markup (ours, or matplotlib's from
shardline.report.serving_plots) cleaned so that the page stays self-contained and holds no URL:
no XML prolog, DOCTYPE, comments, metadata, scripts or namespace attributes (an <svg> inside
HTML needs none)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from html import escape

from shardline.errors import InputError

__all__ = ["Figure", "inline_svg", "figures_html"]

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
