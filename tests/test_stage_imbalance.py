"""Llama-3.1-405B (126 blocks) on 8 and 16 pipeline stages: uneven stages, and the plan names the
slowest one (issue 12: "405B planned with pp 8 and pp 16, the stage imbalance shown")."""

from __future__ import annotations

import json
import re

import pytest

from tests.cli_run import run_cli

ARGS = [
    "plan",
    "--model",
    "llama-3.1-405b",
    "--hw",
    "h100-sxm",
    "--devices",
    "1024",
    "--tp",
    "8",
    "--zero",
    "1",
    "--batch",
    "512",
    "--seq-len",
    "8192",
    "--recompute",
    "full",
]


@pytest.mark.parametrize(
    ("pp", "sizes"),
    [
        # 126 blocks on 8 stages: 126 = 6 x 16 + 2 x 15; on 16: 126 = 14 x 8 + 2 x 7
        (8, [16] * 6 + [15] * 2),
        (16, [8] * 14 + [7] * 2),
    ],
)
def test_405b_uneven_stages_and_the_slowest_named(
    pp: int, sizes: list[int], capsys: pytest.CaptureFixture[str]
) -> None:
    dp = str(1024 // 8 // pp)
    code, out, err = run_cli(capsys, *ARGS, "--pp", str(pp), "--dp", dp, "--json")
    assert code == 0, err
    plan = json.loads(out)["plans"][0]
    # every block has the same layers, so the stages' layer instances are in the ratio of blocks
    instances = [s["layer_instances"] for s in plan["stages"]]
    per_block = instances[0] / sizes[0]
    assert instances == [per_block * n for n in sizes]
    code, text, _ = run_cli(capsys, *ARGS, "--pp", str(pp), "--dp", dp)
    assert code == 0
    line = re.search(r"slowest stage: (\d+) of 0-(\d+).*\(([\d.]+)% imbalance\)", text)
    assert line, text
    times = [s["predicted_s"] for s in plan["stages"]]
    slow = int(line.group(1))
    assert times[slow] == max(times) and int(line.group(2)) == pp - 1
    assert float(line.group(3)) == pytest.approx(100 * (max(times) / min(times) - 1), abs=0.06)
    # the JSON names the same stage and imbalance
    assert plan["slowest_stage"] == slow
    assert plan["stage_imbalance"] == pytest.approx(max(times) / min(times) - 1, rel=1e-12)
