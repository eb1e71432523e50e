"""The realistic part of a plan's text: predicted time first, what it is made of, where the gap
to the lower bound goes, MFU and HFU, tokens/s, days to train."""

from __future__ import annotations

from shardline.basics.units import fmt_bytes, fmt_flops, fmt_num, fmt_time
from shardline.planning.api import PlanResult, PlanSet
from shardline.workload.workload import Workload

__all__ = ["realistic_lines"]

_PARTS = (
    ("gemm_s", "GEMMs"),
    ("attention_s", "attention kernel"),
    ("other_ops_s", "ops between matmuls"),
    ("recompute_s", "recompute"),
    ("exposed_comm_s", "exposed communication"),
    ("bubble_s", "pipeline bubble"),
    ("optimizer_s", "optimizer step"),
)
_GAP = (
    ("gemm_inefficiency_s", "GEMMs below peak (tiles, waves, achievable rate, launches)"),
    ("attention_s", "attention kernel below peak"),
    ("other_ops_s", "norms, activations, residuals, softmax, embedding, loss"),
    ("recompute_s", "recompute below peak, and its memory-bound ops"),
    ("exposed_comm_s", "communication at realistic bandwidth and latency"),
    ("bubble_s", "bubble at the realistic stage time"),
    ("optimizer_s", "optimizer step"),
    ("overlap_s", "overlap the lower bound assumed"),
)


def _what(w: Workload) -> str:
    if w.training:
        return "one training step"
    if w.decode:
        return "one output token for the whole batch (time per output token)"
    if w.phase == "prefill":
        return "the whole prompt (time to first token)"
    return "one forward pass"


def _recompute_lines(p: PlanResult) -> list[str]:
    """The recompute policy: the FLOPs it runs again and the bytes a block keeps."""
    rc = p.recompute
    if not rc or rc["policy"] == "none":
        return []
    on, rest, mean = "", "", ""
    if rc["blocks_share"] != 1:  # layer-N
        on = f" on {100 * rc['blocks_share']:.3g}% of the blocks"
        rest, mean = " there, everything on the others", " (the mean over the blocks)"
    reruns = "the whole block" if rc.get("whole_block") else ", ".join(rc["reruns"]) or "nothing"
    host = f" ({', '.join(rc['offloaded'])} in host memory)" if rc.get("offloaded") else ""
    return [
        f"  recompute {rc['policy']}: reruns {reruns}{on}: "
        f"{fmt_flops(rc['recomputed_flops'])} = {100 * rc['recomputed_share']:.1f}% of the model "
        f"FLOPs again; keeps {', '.join(rc['keeps'])}{host}{rest}: "
        f"{fmt_bytes(rc['kept_bytes_per_block'])} per block and microbatch{mean}, "
        f"{100 * rc['kept_share']:.1f}% of the bytes without recompute"
    ]


def realistic_lines(p: PlanResult, w: Workload, ps: PlanSet) -> list[str]:
    """The recommended plan's realistic answer, its parts and the gap to the lower bound."""
    b = p.predicted_breakdown_s
    parts = " + ".join(f"{label} {fmt_time(b[k])}" for k, label in _PARTS if b.get(k))
    out = [
        f"PREDICTED {fmt_time(p.predicted_s)} for {_what(w)} with {p.name} "
        f"(lower bound {fmt_time(p.latency_s)})",
        f"  = {parts}",
    ]
    gap = p.predicted_s - p.latency_s
    if p.gap_s:
        tiny = 1e-6 * p.predicted_s
        shown = [(label, p.gap_s[k]) for k, label in _GAP if abs(p.gap_s.get(k, 0.0)) > tiny]
        out.append(f"  the gap of {fmt_time(gap)} to the lower bound:")
        out += [f"    {'+' if v >= 0 else '-'}{fmt_time(abs(v))}  {label}" for label, v in shown]
    peak = ps.chip.peak(w.layers[0].compute_dtype or w.layers[0].dtype)
    hfu = f"; HFU {100 * p.hfu:.1f}% (with the recomputed work)" if w.training else ""
    out.append(
        f"  MFU {100 * p.mfu:.1f}% = model FLOPs {fmt_flops(p.model_flops)} / ({ps.devices} × "
        f"{fmt_flops(peak)}/s × {fmt_time(p.predicted_s)}){hfu}"
    )
    out += _recompute_lines(p)
    if p.mfu > 1:
        out.append(
            "  (over 100%: model FLOPs count attention without the causal saving, the PaLM "
            "convention, while the time counts the half a causal kernel computes; at long "
            "context attention dominates)"
        )
    if p.tokens_per_s is not None:
        per_device = p.tokens_per_s_per_device or 0.0
        out.append(
            f"  {fmt_num(p.tokens_per_s)} tokens/s ({fmt_num(per_device)} per device)"
            + (
                f"; {p.days_to_train:.3g} days to train on the --tokens given"
                if p.days_to_train is not None
                else ""
            )
        )
    return out
