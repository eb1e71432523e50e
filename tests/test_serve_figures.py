"""`serve --plot/--html` and `search --plot/--html`: the numbers the figures draw (by hand), the
outputs' rules (checked before any work, never over an input, --force to replace), and the
fallback without matplotlib (one warning line, the HTML page still written)."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

from shardline.cli import figure_outputs as fo
from shardline.cli.main import main
from shardline.errors import InputError
from shardline.report.serve_figures import search_points
from shardline.serving.config import Lengths, ServeConfig
from shardline.serving.plotdata import rate_sweep, samples
from shardline.serving.simulate import Requests, SimResult
from tests.conftest import require
from tests.test_serving_static import _steps

SERVE = [
    "serve", "--model", "llama-3.2-1b", "--hw", "h100-sxm", "--devices", "1", "--rate", "20",
    "--in", "500", "--out", "100", "--requests", "200",
]  # fmt: skip
SEARCH = [
    "search", "--model", "llama-3.2-1b", "--slo", "ttft=500ms,tpot=30ms", "--rate", "5/s",
    "--in", "500", "--out", "100", "--hw", "h100-sxm", "--max-devices", "2", "--quiet",
]  # fmt: skip


def test_rate_sweep_serves_each_rate_below_capacity() -> None:
    # below saturation every request is served: output tokens/s = rate x O (O = 10), and the
    # rates are the given fractions of the capacity
    cfg = ServeConfig(1.0, Lengths("fixed", 200.0), Lengths("fixed", 10.0), 1, 1, 4, None)
    sweep = rate_sweep(_steps(), cfg, 1.0, (0.2, 0.5))
    rates = sweep["rate_per_s"]
    assert rates[1] / rates[0] == pytest.approx(0.5 / 0.2)
    assert sweep["throughput_tokens_per_s"] == pytest.approx(rates * 10)
    assert np.all(sweep["ttft_p99_s"] >= sweep["ttft_p50_s"])
    assert sweep["ttft_p50_s"][1] >= sweep["ttft_p50_s"][0]


def test_samples_by_hand() -> None:
    # five requests; the first 20% of admissions (index int(0.2 x 4) = 0) starts the window, so
    # all five count except the unfinished one: TTFT = first - arrival, TPOT = (finish - first)
    # / (O - 1)
    reqs = Requests(np.arange(5.0), np.full(5, 100.0), np.array([11.0, 11, 21, 1, 11]))
    first = np.array([0.5, 1.2, 2.1, 3.3, 4.4])
    finish = np.array([1.5, 2.2, 4.1, 3.3, np.nan])
    sim = SimResult(reqs, first, finish, np.zeros(1), np.zeros(1), np.zeros(1), np.zeros(1),
                    np.arange(5.0))  # fmt: skip
    ttft, tpot = samples([(reqs, sim)])
    assert ttft == pytest.approx([0.5, 0.2, 0.1, 0.3])
    assert tpot == pytest.approx([0.1, 0.1, 0.1, 0.0])  # O = 1 counts one step: 0 / 1


def test_search_points_serving_and_training() -> None:
    serving = {"evaluated": 2, "pareto": [
        {"chip": "h100-sxm", "devices": 2, "tp": 2, "max_batch": 8,
         "usd_per_million_tokens": 2.0, "tpot_p99_s": 0.01}]}  # fmt: skip
    p = search_points(serving)
    assert (p["costs"], p["latencies"]) == ([2.0], [0.01])
    assert p["labels"] == ["2xh100-sxm tp2 b8"]
    training = {"workload": "w", "pareto": [
        {"hardware": "h100-sxm", "devices": 8, "degrees": {"tp": 8, "dp": 1}, "usd": 5.0,
         "days_to_train": 3.0}], "alternatives": [
        {"hardware": "h100-sxm", "devices": 8, "degrees": {"tp": 4},
         "days_to_train": None}]}  # fmt: skip
    p = search_points(training)
    assert (p["costs"], p["latencies"], p["labels"]) == ([5.0], [3.0], ["8xh100-sxm tp8"])
    assert (p["cost_label"], p["latency_label"]) == ("USD", "days to train")


def test_outputs_are_checked_before_any_work(tmp_path: Path) -> None:
    page = tmp_path / "in.html"
    page.write_text("x", encoding="utf-8")
    args = argparse.Namespace(plot=None, html=str(page), force=True)
    with pytest.raises(InputError, match="input"):
        fo.check_figure_outputs(args, [str(page)])  # never over an input, even with --force
    args = argparse.Namespace(plot=str(page), html=None, force=False)
    with pytest.raises(InputError, match="expected one of"):
        fo.check_figure_outputs(args, [])
    args = argparse.Namespace(plot=None, html=str(page), force=False)
    with pytest.raises(InputError, match="already exists"):
        fo.check_figure_outputs(args, [])
    assert fo.check_figure_outputs(argparse.Namespace(plot=None, html=None), []).wanted is False


def test_serve_without_matplotlib_warns_once_and_writes_the_page(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(fo, "have_matplotlib", lambda: False)
    plot, page = tmp_path / "s.svg", tmp_path / "s.html"
    assert main([*SERVE, "--plot", str(plot), "--html", str(page)]) == 0
    err = capsys.readouterr().err
    assert err.count("matplotlib is not installed") == 1
    assert not plot.exists()
    html = page.read_text(encoding="utf-8")
    assert "<svg" not in html and "throughput" in html and "TTFT p99" in html
    assert main([*SERVE, "--html", str(page)]) == 2  # exists: refused without --force
    assert "--force" in capsys.readouterr().err
    assert main([*SERVE, "--html", str(page), "--force"]) == 0


def test_serve_plot_and_html(tmp_path: Path) -> None:
    require("matplotlib", "pip install 'shardline[plot]'")
    plot, page = tmp_path / "s.svg", tmp_path / "s.html"
    assert main([*SERVE, "--plot", str(plot), "--html", str(page)]) == 0
    assert plot.read_text(encoding="utf-8").count("<svg") == 1
    html = page.read_text(encoding="utf-8")
    assert html.count("<svg") == 4  # CDFs, KV occupancy, TTFT and TPOT against throughput
    assert "http" not in html.split("</style>", 1)[1]


def test_search_plot_and_html(tmp_path: Path) -> None:
    require("matplotlib", "pip install 'shardline[plot]'")
    plot, page = tmp_path / "p.png", tmp_path / "p.html"
    assert main([*SEARCH, "--plot", str(plot), "--html", str(page)]) == 0
    assert plot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert page.read_text(encoding="utf-8").count("<svg") == 1
