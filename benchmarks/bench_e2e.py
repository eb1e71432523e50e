"""Predicted against published whole-model times: every run of benchmarks/data/e2e_runs.toml.

For each run: load its workload (phase, batch and sequence length from the run), plan it with
every parallel degree fixed as published, and compare the plan's `predicted_s` with the measured
time (training: one step; prefill: time to first token; decode: one output-token step of the
batch). error = predicted / measured - 1.

    python benchmarks/bench_e2e.py                 # table, summary, benchmarks/results/e2e.json
    python benchmarks/bench_e2e.py --write-doc     # and the section in docs/validation.md
    python benchmarks/bench_e2e.py --set megatron  # only the Korthikanti et al. 2022 runs

A run whose options plan() does not take yet (interleave, recompute, sequence_parallel) is
planned without them and marked "partial"; a plan without `predicted_s` falls back to
`latency_s`, marked "latency_s". Rows that cannot be planned at all show the reason.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tomllib
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

DATA = ROOT / "benchmarks" / "data" / "e2e_runs.toml"
RESULT = ROOT / "benchmarks" / "results" / "e2e.json"
DOC = ROOT / "docs" / "validation.md"
START, END = "<!-- e2e:start -->", "<!-- e2e:end -->"
NEW_WORKLOAD_FIELDS = ("vocab", "attention", "rotary")  # the loader takes them once merged
NEW_PLAN_KEYWORDS = ("interleave", "recompute", "sequence_parallel")
# the execution choices of a run's recipe, where the row states them (default: off)
OPTIONAL_PLAN_KEYWORDS = (
    "cuda_graphs",
    "ep_overlap",
    "ep_dispatch",
    "tp_overlap",
    "zero",
    "ep_comm_sms",
    "offload",  # kept tensors held in host memory (MaxText's remat_policy custom 'offload')
    "optimizer",  # the optimizer whose state the devices hold
    "fp8_recipe",  # Transformer Engine's fp8 scaling recipe (per-expert quantization kernels)
    "random_routing",  # the router's logits random (Megatron-Core's force_load_balancing)
)
DEGREES = ("tp", "pp", "dp", "fsdp", "ep")  # a run without ep has ep = 1


@dataclass
class Outcome:
    """One run's comparison; `predicted_s` is None when the run could not be planned."""

    name: str
    set: str
    metric: str
    measured_s: float
    predicted_s: float | None = None
    error: float | None = None
    mfu: float | None = None
    measured_mfu: float | None = None
    fits: bool | None = None
    notes: list[str] = field(default_factory=list)
    source_id: str = ""
    framework: str = ""
    hw: str = ""
    dtype: str = ""
    moe: bool = False
    # leave one source out: the error with the measured figures of the run's own source removed
    # (benchmarks/e2e_loso.py); None when a shared file holds such a figure (refused)
    loso_error: float | None = None
    removed: list[str] = field(default_factory=list)
    # the plan's memory per device over the chip's usable capacity, less 1 (> 0: said not to fit)
    memory_over: float | None = None


def load_runs(path: Path = DATA) -> list[dict[str, Any]]:
    runs = tomllib.loads(path.read_text(encoding="utf-8")).get("run", [])
    if not runs:
        raise SystemExit(f"{path}: no [[run]] tables")
    return runs


def load_run_workload(run: dict[str, Any], notes: list[str]) -> Any:
    """The run's workload; a loader that does not know the new template fields yet gets the file
    without them (noted)."""
    from shardline.errors import InputError
    from shardline.io.workload_toml import load_workload, workload_from_dict
    from shardline.workload.precision import with_tensor_dtypes

    path = ROOT / run["workload"]
    over = {"phase": run["phase"], "batch": run["batch"], "seq_len": run["seq_len"]}
    try:  # a recipe that runs fp8 attention says so (attention_dtype, with its source)
        workload = load_workload(path, **over)
        return with_tensor_dtypes(workload, attention_dtype=run.get("attention_dtype"))
    except InputError as exc:
        if "unknown field" not in str(exc):
            raise
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    section = data.get("transformer", {})
    dropped = [key for key in NEW_WORKLOAD_FIELDS if section.pop(key, None) is not None]
    notes.append(f"loader ignores {'/'.join(dropped)}")
    return workload_from_dict(data, origin=str(path), **over)


def run_chip(run: dict[str, Any], removed: list[Any] | None = None) -> Any:
    """The run's chip: its catalog file without the `removed` figures (leave one source out),
    in the run's published cluster (`system`, a catalog system such as 'a3-high-tcpx') and under
    its published power limit (`power_cap_w`) where it states them."""
    from e2e_loso import chip_without

    from shardline.hardware import with_power_limit
    from shardline.hardware.cluster import system_chip
    from shardline.hardware.systems import load_system

    chip = chip_without(run["hw"], removed or [])
    if "system" in run:
        chip = system_chip(chip, load_system(run["system"]))
    if "power_cap_w" in run:
        chip = with_power_limit(chip, float(run["power_cap_w"]))
    return chip


def plan_run(
    run: dict[str, Any], workload: Any, notes: list[str], removed: list[Any] | None = None
) -> Any:
    """The plan with the run's degrees; without the new keywords if plan() does not take them."""
    from shardline.basics.framework import framework_names
    from shardline.planning.api import plan

    base = {k: run.get(k, 1) for k in DEGREES} | {"microbatches": run["microbatches"]}
    base |= {"etp": run["etp"]} if "etp" in run else {}  # parallel folding, as published
    extra = {k: run[k] for k in NEW_PLAN_KEYWORDS}
    extra |= {k: run[k] for k in OPTIONAL_PLAN_KEYWORDS if k in run}
    if run.get("framework") in framework_names():
        extra["framework"] = run["framework"]
    if isinstance(run.get("compile"), bool):  # torch.compile fuses the ops between matmuls
        extra["op_fusion"] = "fused" if run["compile"] else "eager"
    chip = run_chip(run, removed)
    try:
        result = plan(workload, chip, run["devices"], require_fit=False, **base, **extra)
    except TypeError:
        notes.append(f"partial: plan() does not take {'/'.join(extra)} yet")
        result = plan(workload, chip, run["devices"], require_fit=False, **base)
    wanted = {k: run.get(k, 1) for k in DEGREES} | ({"etp": run["etp"]} if "etp" in run else {})
    for candidate in result.plans:
        if all(candidate.degrees.get(k, 1) == v for k, v in wanted.items()):
            return candidate
    raise LookupError(f"no plan with degrees {wanted} among {[p.name for p in result.plans]}")


def evaluate(run: dict[str, Any]) -> Outcome:
    out = Outcome(
        run["name"], run["set"], run["metric"], run["measured_s"],
        measured_mfu=run.get("measured_mfu"), source_id=run.get("source_id", ""),
        framework=run.get("framework", ""), hw=run["hw"],
    )  # fmt: skip
    try:
        workload = load_run_workload(run, out.notes)
        chosen = plan_run(run, workload, out.notes)
    except Exception as exc:  # one bad row must not stop the benchmark
        out.notes.append(f"not planned: {type(exc).__name__}: {exc}")
        return out
    model = getattr(workload, "model", None)
    out.dtype = getattr(model, "dtype", "") if model is not None else ""
    out.moe = bool(getattr(model, "router_experts", 0)) if model is not None else False
    predicted = getattr(chosen, "predicted_s", None)
    if predicted is None:
        predicted = chosen.latency_s
        out.notes.append("latency_s (no predicted_s yet)")
    out.predicted_s = float(predicted)
    out.error = out.predicted_s / out.measured_s - 1
    mfu = getattr(chosen, "mfu", None)
    out.mfu = None if mfu is None else float(mfu)
    out.fits = bool(chosen.fits)
    capacity = run_chip(run).usable_capacity_bytes
    out.memory_over = float(chosen.memory_per_device_bytes) / capacity - 1
    if not chosen.fits:
        out.notes.append(f"does not fit in memory as modeled ({out.memory_over:+.0%} over)")
    out.loso_error = _loso_error(run, workload, out)
    return out


def _loso_error(run: dict[str, Any], workload: Any, out: Outcome) -> float | None:
    """The error with the measured figures of the run's own source taken away (e2e_loso)."""
    from e2e_loso import chip_file, own_figures

    removable, shared = own_figures(out.source_id, chip_file(run["hw"]))
    out.removed = [f"{f.file}:{f.path}" for f in removable + shared]
    if shared:
        out.notes.append("out of source: refused (a shared file holds its own figures)")
        return None
    if not removable:
        return out.error
    chosen = plan_run(run, workload, [], removable)
    return float(chosen.predicted_s) / out.measured_s - 1


def summarize(outcomes: list[Outcome]) -> dict[str, dict[str, Any]]:
    """Median and worst |error| per set (and over all runs), over the runs with a prediction."""
    groups: dict[str, list[Outcome]] = {}
    for o in outcomes:
        groups.setdefault(o.set, []).append(o)
    groups["all"] = list(outcomes)
    summary: dict[str, dict[str, Any]] = {}
    for name, members in groups.items():
        predicted = [o for o in members if o.error is not None]
        errs = [abs(o.error or 0.0) for o in predicted]
        worst = max(predicted, key=lambda o: abs(o.error or 0.0), default=None)
        summary[name] = {
            "runs": len(members),
            "predicted": len(errs),
            "partial": sum(any(n.startswith("partial") for n in o.notes) for o in members),
            "median_abs_error": statistics.median(errs) if errs else None,
            "worst_abs_error": max(errs) if errs else None,
            "worst_run": worst.name if worst else None,
        }
    return summary


def _group_keys(o: Outcome) -> list[str]:
    """The groups a training run belongs to in the leave-one-source-out table."""
    return [
        "all training runs",
        f"framework {o.framework or '-'}",
        f"chip {o.hw}",
        "MoE" if o.moe else "dense",
        f"dtype {o.dtype or '-'}",
        f"source {o.source_id or '-'}",
    ]


def summarize_groups(outcomes: list[Outcome]) -> dict[str, dict[str, Any]]:
    """Per group of training runs: rows, sources, and the median |error| and median signed error
    out of source (leave one source out) beside the in-sample ones."""
    groups: dict[str, list[Outcome]] = {}
    for o in outcomes:
        if o.metric == "step_time" and o.error is not None:
            for key in _group_keys(o):
                groups.setdefault(key, []).append(o)
    out: dict[str, dict[str, Any]] = {}
    order = ("all", "framework", "chip", "dense", "MoE", "dtype", "source")
    for key, members in sorted(
        groups.items(), key=lambda kv: (order.index(kv[0].split()[0]), kv[0])
    ):
        loso = [o.loso_error for o in members if o.loso_error is not None]
        inside = [o.error for o in members if o.error is not None]
        out[key] = {
            "runs": len(members),
            "sources": len({o.source_id for o in members}),
            "loso_scored": len(loso),
            "loso_median_abs_error": statistics.median(map(abs, loso)) if loso else None,
            "loso_median_signed_error": statistics.median(loso) if loso else None,
            "median_abs_error": statistics.median(map(abs, inside)),
            "median_signed_error": statistics.median(inside),
        }
    return out


def render_groups(groups: dict[str, dict[str, Any]]) -> list[str]:
    lines = [
        "| group | runs | sources | out of source: median abs error | out of source: median "
        "signed | in sample: median abs error | in sample: median signed |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for key, g in groups.items():
        lines.append(
            f"| {key} | {g['runs']} | {g['sources']} | "
            f"{_fmt_pct(g['loso_median_abs_error'], False)} | "
            f"{_fmt_pct(g['loso_median_signed_error'])} | "
            f"{_fmt_pct(g['median_abs_error'], False)} | {_fmt_pct(g['median_signed_error'])} |"
        )
    return lines


def _fmt_s(value: float | None) -> str:
    if value is None:
        return "-"
    return f"{value * 1e3:.2f} ms" if value < 1 else f"{value:.3f} s"


def _fmt_pct(value: float | None, signed: bool = True) -> str:
    if value is None:
        return "-"
    return f"{value * 100:+.1f}%" if signed else f"{value * 100:.1f}%"


def render_table(outcomes: list[Outcome]) -> list[str]:
    head = ("run", "set", "metric", "measured", "predicted", "error", "mfu", "notes")
    rows = [head] + [
        (
            o.name, o.set, o.metric, _fmt_s(o.measured_s), _fmt_s(o.predicted_s),
            _fmt_pct(o.error), _fmt_pct(o.mfu, signed=False), "; ".join(o.notes),
        )
        for o in outcomes
    ]  # fmt: skip
    widths = [max(len(r[i]) for r in rows) for i in range(len(head) - 1)]
    return [
        "  ".join(cell.ljust(w) for cell, w in zip(r[:-1], widths, strict=True)) + "  " + r[-1]
        for r in rows
    ]


def render_summary(summary: dict[str, dict[str, Any]]) -> list[str]:
    lines = []
    for name, s in summary.items():
        lines.append(
            f"{name}: {s['predicted']}/{s['runs']} predicted ({s['partial']} partial); median "
            f"|error| {_fmt_pct(s['median_abs_error'], False)}, worst "
            f"{_fmt_pct(s['worst_abs_error'], False)} ({s['worst_run'] or '-'})"
        )
    return lines


def render_doc_section(outcomes: list[Outcome], summary: dict[str, dict[str, Any]]) -> str:
    groups = summarize_groups(outcomes)
    lines = [
        START,
        "## End-to-end runs",
        "",
        "Whole-model times published for real runs, each planned with the published parallel",
        "degrees, microbatches, recompute setting, framework and power limit, and compared with",
        "`predicted_s` (error = predicted / measured - 1: negative means the prediction is",
        "faster than the run). The runs, with the source of every number and how each time",
        "follows from it, are in `benchmarks/data/e2e_runs.toml`;",
        "`python benchmarks/bench_e2e.py --write-doc` rewrites this section.",
        "",
        "### Training runs, leave one source out",
        "",
        "Each run is scored out of source: every measured figure of the data files (a chip's",
        "achievable rates and efficiencies, the collective libraries' figures) whose source is",
        "the run's own publication is taken away before the run is planned",
        "(`python benchmarks/e2e_loso.py` lists every figure and the publications it names).",
        f"Today {_removed_count(outcomes)} of the {len(outcomes)} runs lose a figure that way: "
        "no measured figure in the files comes from these publications, so the out-of-source",
        "and in-sample errors are the same numbers; the columns stay apart so that a figure",
        "taken from one of them later cannot flatter its own runs.",
        "",
        *render_groups(groups),
        "",
        "### Every run",
        "",
        "| run | set | source | framework | metric | measured | predicted | error | "
        "MFU (predicted) | notes |",
        "| --- | --- | --- | --- | --- | ---: | ---: | ---: | ---: | --- |",
    ]
    for o in outcomes:
        lines.append(
            f"| {o.name} | {o.set} | {o.source_id or '-'} | {o.framework or '-'} | {o.metric} | "
            f"{_fmt_s(o.measured_s)} | {_fmt_s(o.predicted_s)} | {_fmt_pct(o.error)} | "
            f"{_fmt_pct(o.mfu, False)} | {'; '.join(o.notes).replace('|', '/')} |"
        )
    lines += ["", *[f"- {line}" for line in render_summary(summary)]]
    lines += ["", "Memory: " + " ".join(memory_lines(outcomes)), END]
    return "\n".join(lines) + "\n"


def memory_lines(outcomes: list[Outcome]) -> list[str]:
    """How many runs that ran are said not to fit, and by how much at most."""
    ran = [o for o in outcomes if o.memory_over is not None and o.metric == "step_time"]
    over = [o for o in ran if (o.memory_over or 0) > 0]
    far = [o for o in over if (o.memory_over or 0) > 0.05]
    worst = max(over, key=lambda o: o.memory_over or 0, default=None)
    text = f"{len(over)} of the {len(ran)} training runs, each of which ran, are said not to fit"
    if worst is None:
        return [text + "."]
    return [
        f"{text}; {len(far)} of them by more than 5% of the memory (worst "
        f"{_fmt_pct(worst.memory_over)}, {worst.name}): the memory model is still too high "
        "for those layouts (host offload, allocator and framework buffers not modeled)."
    ]


def _removed_count(outcomes: list[Outcome]) -> int:
    return sum(bool(o.removed) for o in outcomes)


def write_doc(path: Path, section: str) -> None:
    """Replace the text between the markers (inclusive); append the section when they are absent,
    create the file with just the section when it is missing."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(section, encoding="utf-8")
        return
    text = path.read_text(encoding="utf-8")
    start, end = text.find(START), text.find(END)
    if start == -1 or end == -1 or end < start:
        sep = "" if text.endswith("\n\n") else ("\n" if text.endswith("\n") else "\n\n")
        path.write_text(text + sep + section, encoding="utf-8")
        return
    after = text[end + len(END) :].removeprefix("\n")
    path.write_text(text[:start] + section + after, encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default=str(DATA))
    parser.add_argument("--set", dest="only", help="only the runs of this set (megatron, other)")
    parser.add_argument("--out", default=str(RESULT), help="the JSON result file")
    parser.add_argument("--write-doc", action="store_true", help="rewrite the docs section")
    parser.add_argument("--doc", default=str(DOC), help="the markdown file for --write-doc")
    args = parser.parse_args(argv)

    runs = [r for r in load_runs(Path(args.data)) if args.only in (None, r["set"])]
    outcomes = [evaluate(run) for run in runs]
    summary = summarize(outcomes)
    print("\n".join(render_table(outcomes)))
    print()
    print("\n".join(render_summary(summary)))
    print()
    print("\n".join(render_groups(summarize_groups(outcomes))))
    print("\n".join(memory_lines(outcomes)))
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "runs": [asdict(o) for o in outcomes],
        "summary": summary,
        "groups": summarize_groups(outcomes),
    }
    out.write_text(json.dumps(payload, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {out}")
    if args.write_doc:
        write_doc(Path(args.doc), render_doc_section(outcomes, summary))
        print(f"wrote the end-to-end section of {args.doc}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
