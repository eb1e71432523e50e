"""Numbers in the prose of the docs come from the same run as their console blocks (issue 28,
item 5): each phrase below is formatted from the command's JSON and must appear in the document
as written, so a narrative that drifts from its output (TTFT p99 490 ms beside a block showing
504 ms) fails here, not in a reader's hands."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from tests.docs_runner import ROOT, run

SERVE_70B = (
    "shardline serve --model llama-3.1-70b --hw h100-sxm --devices 16 --tp 4 --rate 20 --in 2000 "
    "--out 500 --slo ttft=500ms,tpot=30ms --dtype fp8"
)
LLAMA_8B = "shardline plan examples/llama-8b.toml --hw h100 --devices 8 --phase training --batch 8"
FFN_70B = "shardline plan examples/ffn_70b.toml --hw h100 --devices 8"
SEED003_16 = (
    "shardline plan examples/seed003_stack.toml --hw a100-40gb --devices 16 --phase training"
)
META_405B = (
    "shardline plan --model llama-3.1-405b --hw h100 --devices 16384 --batch 2048 --seq-len 8192 "
    "--tp 8 --pp 16 --dp 128 --fsdp 1 --cp 1 --interleave 4 --zero 2 --sequence-parallel "
    "--tp-overlap --microbatches 16 --recompute none --tokens 15T"
)


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3g}"


def _plans(r: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {p["name"]: p for p in r["plans"]}


def _serving(r: dict[str, Any]) -> list[str]:
    replica = r["config"]["rate_per_s"] / (r["config"]["devices"] // r["config"]["tp"])
    return [
        f"t_p = {r['prefill_s'] * 1e3:.1f} ms",
        f"rho_p = {replica:g} x {r['prefill_s']:.3g} = {replica * r['prefill_s']:.0%}",
        f"b = {r['batch']:.1f}:",
        f"TPOT = t_dec / (1 - rho_p) = {r['tpot_s']['p50'] * 1e3:.1f} ms",
        f"S = {r['decode_step_s'] * 1e3:.1f} + {r['prefill_s'] * 1e3:.1f} = "
        f"{(r['decode_step_s'] + r['prefill_s']) * 1e3:.1f} ms",
        f"{r['queue_wait_s']['p99'] * 1e3:.0f} ms at p99; "
        f"TTFT p99 = {r['ttft_s']['p99'] * 1e3:.0f} ms",
        f"{r['capacity_requests_per_s']:.1f} req/s for four",
    ]


def _optimizer(r: dict[str, Any]) -> list[str]:
    p = _plans(r)
    fsdp, dp = p["fsdp8"], p["dp2-fsdp4"]
    return [
        f"tie ({ms(fsdp['latency_s'])} ms)",
        f"{ms(fsdp['predicted_breakdown_s']['optimizer_s'])} ms on `fsdp8`",
        f"({ms(dp['predicted_breakdown_s']['optimizer_s'])} ms) on `dp2-fsdp4`",
        f"({ms(fsdp['predicted_breakdown_s']['exposed_comm_s'])} ms against "
        f"{ms(dp['predicted_breakdown_s']['exposed_comm_s'])} ms)",
    ]


def _ffn(r: dict[str, Any]) -> list[str]:
    p = _plans(r)
    fsdp, dp = p["fsdp8"], p["dp8"]
    return [
        f"the lower bound ties dp8 and fsdp8 at {ms(fsdp['latency_s'])} ms",
        f"over all the weights ({ms(dp['predicted_breakdown_s']['optimizer_s'])} ms",
        f"optimizer step ({fsdp['predicted_breakdown_s']['optimizer_s'] * 1e6:.3g} µs)",
        f"predicted {ms(fsdp['predicted_s'])} ms\nagainst {ms(dp['predicted_s'])} ms for dp8",
    ]


def _seed003(r: dict[str, Any]) -> list[str]:
    p = _plans(r)
    mix, best = p["tp4-pp2-dp2"], p[r["recommended"]]
    assert r["recommended"] == "tp8-pp2"
    return [
        f"`tp4-pp2-dp2`, {ms(mix['latency_s'])}\nms against {ms(best['latency_s'])} ms",
        f"{ms(mix['predicted_s'])} ms against {ms(best['predicted_s'])} ms",
    ]


def _meta(r: dict[str, Any]) -> list[str]:
    (p,) = r["plans"]
    gb = p["memory_per_device_bytes"] / 1e9
    return [
        f"| Meta's degrees without recompute (the `plan` below) | {p['predicted_s']:.2f} | "
        f"{p['mfu']:.1%} | {gb:.1f} (does not fit) | {p['days_to_train']:.1f} |",
        f"against the model's {p['mfu']:.1%}\n   (without recompute)",
        f"needs {gb:.1f} GB per GPU without\n   recompute",
    ]


CHECKS: list[tuple[str, str, Callable[[dict[str, Any]], list[str]]]] = [
    ("serving.md", SERVE_70B, _serving),
    ("whole-model.md", LLAMA_8B, _optimizer),
    ("ffn-sharding.md", FFN_70B, _ffn),
    ("stack-and-plans.md", SEED003_16, _seed003),
    ("search.md", META_405B, _meta),
]


@pytest.mark.parametrize(("doc", "command", "phrases"), CHECKS, ids=[c[0] for c in CHECKS])
def test_prose_numbers_come_from_the_run(
    doc: str, command: str, phrases: Callable[[dict[str, Any]], list[str]]
) -> None:
    code, out = run(command + " --json")
    assert code == 0, out
    text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
    missing = [p for p in phrases(json.loads(out)) if p not in text]
    assert missing == []
