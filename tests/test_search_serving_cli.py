"""`shardline search --slo ... --rate ...`: the serving search through the CLI (issue 13's
contract: `evaluated`, `pareto`, `best`), its cost arithmetic and its refusals."""

from __future__ import annotations

import json

import pytest

from shardline.cli.main import main
from shardline.costing import usd_per_hour

ARGS = [
    "search", "--model", "llama-3.1-70b", "--slo", "ttft=500ms,tpot=30ms", "--rate", "20/s",
    "--in", "2000", "--out", "500", "--hw", "h100-sxm,b200", "--max-devices", "16",
]  # fmt: skip


@pytest.fixture(scope="module")
def result() -> dict:
    import contextlib
    import io

    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main([*ARGS, "--json"]) == 0
    return json.loads(out.getvalue())


def test_contract_keys_and_the_best_is_the_cheapest_meeting_the_slo(result: dict) -> None:
    assert result["evaluated"] > 0 and result["pareto"] and result["best"]["meets_slo"]
    best = result["best"]
    assert best["ttft_p99_s"] <= 0.5 and best["tpot_p99_s"] <= 0.030
    meeting = [r for r in result["pareto"] if r["meets_slo"]]
    assert best["usd_per_million_tokens"] == min(r["usd_per_million_tokens"] for r in meeting)
    # every cheaper row on the front fails, and says why
    for row in result["pareto"]:
        if row["usd_per_million_tokens"] < best["usd_per_million_tokens"]:
            assert not row["meets_slo"] and row["why_not"]


def test_cost_per_million_tokens_is_devices_times_price_over_throughput(result: dict) -> None:
    # 20 requests/s x 500 output tokens = 10,000 tokens/s when the system keeps up;
    # $/M tokens = devices x usd_per_hour / 3600 s/h / tokens_per_s x 1e6
    best = result["best"]
    assert best["throughput_tokens_per_s"] == pytest.approx(20 * 500)
    want = best["devices"] * usd_per_hour(best["chip"]) / 3600 / 10_000 * 1e6
    assert best["usd_per_million_tokens"] == pytest.approx(want, rel=1e-3)


def test_text_states_the_count_and_the_rate(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*ARGS, "--quiet"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("evaluated ") and " per second)" in out
    assert "cheapest meeting the SLO:" in out


@pytest.mark.parametrize(
    ("drop", "message"),
    [("--slo", "needs --slo"), ("--in", "needs --in")],
)
def test_missing_inputs_are_one_error_line(
    drop: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    i = ARGS.index(drop)
    argv = ARGS[:i] + ARGS[i + 2 :]  # without --slo, --rate alone still selects serving
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error:") and message in err
