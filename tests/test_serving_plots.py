"""Plots of serving and search results (shardline.report.serving_plots): the Pareto front by
hand, every plot written as PNG and SVG, and inlined in the HTML report without a URL."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from shardline.errors import InputError
from shardline.report.figures import inline_svg
from shardline.report.serving_plots import pareto_front


def test_pareto_front_by_hand() -> None:
    # (latency, cost): c (0.05, 5), a (0.1, 3), b (0.2, 2), e (0.3, 4), d (0.5, 1).
    # By latency: c is fastest; a and b each cheaper than every faster point; e costs more than
    # b, which is faster, so e is dominated; d is the cheapest.
    costs, latencies = [3, 2, 5, 1, 4], [0.1, 0.2, 0.05, 0.5, 0.3]
    assert pareto_front(costs, latencies) == [2, 0, 1, 3]
    assert pareto_front([1.0], [1.0]) == [0]
    with pytest.raises(InputError, match="same length"):
        pareto_front([1, 2], [1])
    with pytest.raises(InputError, match="finite"):
        pareto_front([1, float("nan")], [1, 2])


def test_inline_svg_strips_prolog_and_namespaces_and_refuses_urls() -> None:
    text = (
        '<?xml version="1.0"?>\n<!DOCTYPE svg PUBLIC "-//W3C//DTD SVG 1.1//EN" "http://x/y.dtd">'
        '<svg xmlns="http://www.w3.org/2000/svg" xmlns:xlink="http://www.w3.org/1999/xlink">'
        "<metadata><rdf:RDF>http://purl.org</rdf:RDF></metadata><rect/></svg>"
    )
    assert inline_svg(text) == "<svg><rect/></svg>"
    with pytest.raises(InputError, match="URL"):
        inline_svg('<svg><a href="https://x.example">x</a></svg>')
    with pytest.raises(InputError, match="not an SVG"):
        inline_svg("<html></html>")


@pytest.mark.parametrize("suffix", [".png", ".svg"])
def test_every_plot_writes_its_file(tmp_path: Path, suffix: str) -> None:
    pytest.importorskip("matplotlib")
    from shardline.report import serving_plots as sp

    rng = np.random.default_rng(0)
    curves = [("tp4", [(100.0, 0.02), (400.0, 0.03)]), ("tp8", [(200.0, 0.015), (900.0, 0.05)])]
    sp.render_latency_throughput(curves, tmp_path / f"lt{suffix}", title="Llama")
    sp.render_pareto([3, 2, 5], [0.1, 0.2, 0.05], tmp_path / f"pa{suffix}", labels=["a", "b", "c"])
    samples = {"TTFT": rng.exponential(0.2, 200), "TPOT": rng.normal(0.03, 0.004, 200)}
    sp.render_cdfs(samples, tmp_path / f"cdf{suffix}")
    sp.render_kv_occupancy([0, 1, 2, 3], [0.0, 0.4, 0.9, 0.7], tmp_path / f"kv{suffix}")
    for name in ("lt", "pa", "cdf", "kv"):
        assert (tmp_path / f"{name}{suffix}").stat().st_size > 1000


def test_figure_for_gives_an_inline_svg_for_the_report() -> None:
    pytest.importorskip("matplotlib")
    from shardline.report.figures import figures_html
    from shardline.report.serving_plots import figure_for, render_kv_occupancy

    fig = figure_for(render_kv_occupancy, [0, 1, 2], [0.1, 0.5, 0.2], title="KV <cache>")
    assert fig.svg.startswith("<svg") and re.findall(r"https?://", fig.svg) == []
    html = figures_html([fig])
    assert "<h2>KV &lt;cache&gt;</h2>" in html
    from shardline.report.figures import figures_page

    page = figures_page("serve <run>", [fig], [("rate", "20/s")])
    assert page.startswith("<!DOCTYPE html>") and "<title>serve &lt;run&gt;</title>" in page
    assert "<dt>rate</dt><dd>20/s</dd>" in page and re.findall(r"https?://", page) == []
    assert "<script" not in page


def test_bad_plot_inputs_are_input_errors(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from shardline.report import serving_plots as sp

    with pytest.raises(InputError, match="no values"):
        sp.render_cdfs({"TTFT": []}, tmp_path / "x.png")
    with pytest.raises(InputError, match="same length"):
        sp.render_kv_occupancy([0, 1], [0.5], tmp_path / "x.png")
    with pytest.raises(InputError, match=r"\.png or \.svg"):
        sp.render_kv_occupancy([0, 1], [0.5, 0.6], tmp_path / "x.pdf")
