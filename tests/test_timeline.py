"""The step timeline of a plan (shardline.planning.timeline): the passes of each schedule, the
durations per stage against the plan's realistic step, the Chrome trace JSON and the SVG."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from shardline.cli.main import main
from shardline.planning.api import plan
from shardline.planning.results import PlanResult
from shardline.planning.timeline import Timeline, plan_timeline, trace_events
from shardline.report.timeline_svg import timeline_svg
from shardline.workload.templates import transformer

ROOT = Path(__file__).resolve().parent.parent


def _plan(phase: str, pp: int, m: int, interleave: int = 1, dp: int = 1) -> PlanResult:
    w = transformer(d_model=512, d_ff=2048, heads=8, batch=32, seq_len=256, layers=8, phase=phase)
    devices = pp * 2 * dp
    ps = plan(w, "h100", devices, pp=pp, tp=2, dp=dp, fsdp=1, microbatches=m, interleave=interleave)
    return ps.plans[0]


def _passes(tl: Timeline) -> list[str]:
    return [e.name for e in tl.events if e.kind in ("forward", "backward")]


def test_1f1b_has_two_passes_per_stage_and_microbatch_and_adds_up() -> None:
    p = _plan("training", pp=4, m=8, dp=2)
    tl = plan_timeline(p, training=True)
    assert tl.schedule == "1F1B"
    assert len(_passes(tl)) == 4 * 8 * 2  # stages x microbatches x (forward, backward)
    b = p.predicted_breakdown_s
    compute = b["gemm_s"] + b["attention_s"] + b["other_ops_s"] + b["recompute_s"]
    for s in range(4):
        d = tl.per_stage_s(s)
        # every stage runs at the slowest stage's time, as the realistic step does
        assert d["forward"] + d["backward"] == pytest.approx(compute)
        assert d.get("exposed_comm", 0) + d.get("dp_comm", 0) == pytest.approx(b["exposed_comm_s"])
        assert d["bubble"] == pytest.approx(b["bubble_s"])
        assert d.get("optimizer", 0.0) == pytest.approx(b["optimizer_s"])
        assert sum(d.values()) == pytest.approx(p.predicted_s)
    assert max(e.end_s for e in tl.events) == pytest.approx(p.predicted_s)
    assert tl.step_s == pytest.approx(p.predicted_s)


def test_1f1b_order_on_the_first_and_last_stage() -> None:
    # P = 4, m = 8: stage 0 runs P - 1 = 3 forwards first, then alternates; the last stage
    # alternates from the start (Narayanan et al. 2021, figure 4 top)
    tl = plan_timeline(_plan("training", pp=4, m=8), training=True)
    first = [e.name for e in tl.events if e.stage == 0 and e.kind in ("forward", "backward")]
    last = [e.name for e in tl.events if e.stage == 3 and e.kind in ("forward", "backward")]
    assert first[:6] == ["F0", "F1", "F2", "F3", "B0", "F4"]
    assert last[:4] == ["F0", "B0", "F1", "B1"]
    # the bubble of 1F1B is (P - 1) (f + b) on every stage, f + b the slowest stage's time
    p = _plan("training", pp=4, m=8)
    slowest = max(p.stages, key=lambda st: st["predicted_s"])
    f = slowest["fwd_compute_s"] + slowest["fwd_comm_s"]
    b = slowest["bwd_compute_s"] + slowest["bwd_comm_s"]
    assert tl.per_stage_s(2)["bubble"] == pytest.approx(3 * (f + b))


def test_interleaved_matches_the_model_when_stages_divide_microbatches() -> None:
    p = _plan("training", pp=4, m=8, interleave=2)
    tl = plan_timeline(p, training=True, interleave=2)
    assert tl.schedule == "interleaved 1F1B (V=2)"
    assert len(_passes(tl)) == 4 * 8 * 2 * 2  # stages x microbatches x chunks x 2
    # (m + (P - 1)/V) stage times plus the tail: the plan's realistic step
    assert tl.step_s == pytest.approx(p.predicted_s)


def test_forward_only_and_decode() -> None:
    p = _plan("prefill", pp=4, m=8)
    tl = plan_timeline(p, training=False)
    assert len(_passes(tl)) == 4 * 8 and tl.step_s == pytest.approx(p.predicted_s)
    d = _plan("decode", pp=4, m=2)
    tl = plan_timeline(d, training=False, decode=True)
    assert len(_passes(tl)) == 4 * 2 and tl.step_s == pytest.approx(d.predicted_s)


def test_trace_events_are_chrome_complete_events_in_microseconds() -> None:
    p = _plan("training", pp=2, m=4)
    tl = plan_timeline(p, training=True)
    trace = json.loads(json.dumps(trace_events(tl)))
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(xs) == len(tl.events)
    assert {e["pid"] for e in xs} == {0, 1} and {e["tid"] for e in xs} <= {0, 1, 2}
    end_us = max(e["ts"] + e["dur"] for e in xs)
    assert end_us == pytest.approx(p.predicted_s * 1e6)
    names = {(e["pid"], e["args"]["name"]) for e in trace["traceEvents"] if e["ph"] == "M"}
    assert (0, "pipeline stage 0") in names and (1, "communication") in names


def test_svg_is_well_formed_xml() -> None:
    tl = plan_timeline(_plan("training", pp=2, m=4), training=True)
    root = ET.fromstring(timeline_svg(tl))
    rects = root.findall("{http://www.w3.org/2000/svg}rect")
    assert len(rects) >= len(tl.events)
    assert "http" not in timeline_svg(tl, standalone=False)


def test_cli_trace_writes_loadable_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "step.json"
    argv = ["plan", "--model", "llama-3.2-1b", "--phase", "training", "--hw", "h100"]
    argv += ["--devices", "8", "--pp", "2", "--tp", "4", "--microbatches", "4", "--batch", "16"]
    assert main([*argv, "--trace", str(out), "--json"]) == 0
    plan_out = json.loads(capsys.readouterr().out)
    trace = json.loads(out.read_text())
    xs = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len([e for e in xs if e["cat"] in ("forward", "backward")]) == 2 * 4 * 2
    best = plan_out["plans"][0]
    assert max(e["ts"] + e["dur"] for e in xs) == pytest.approx(best["predicted_s"] * 1e6)
    # an existing file needs --force; the trace is a .json
    assert main([*argv, "--trace", str(out)]) == 2
    assert "already exists" in capsys.readouterr().err
    assert main([*argv, "--trace", str(out), "--force"]) == 0
    capsys.readouterr()
    assert main([*argv, "--trace", str(tmp_path / "step.txt")]) == 2
    assert "expected one of .json" in capsys.readouterr().err


def test_report_html_holds_the_timeline(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "r.html"
    argv = ["report", str(ROOT / "examples" / "llama-8b.toml"), "--hw", "h100", "--html"]
    argv += [str(out), "--devices", "8", "--pp", "2", "--tp", "4", "--microbatches", "2"]
    assert main(argv) == 0
    page = out.read_text()
    assert "Step timeline: tp4-pp2" in page and 'aria-label="step timeline"' in page
    assert re.findall(r"https?://", page) == []


def test_report_devices_needs_a_workload(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sheet = ROOT / "examples" / "seed003_shapes.csv"
    argv = ["report", str(sheet), "--hw", "h100", "--html", str(tmp_path / "r.html")]
    assert main([*argv, "--devices", "8"]) == 2
    assert "--devices applies to a workload .toml" in capsys.readouterr().err
