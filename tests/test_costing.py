"""Cost and energy (shardline.costing): the formulas by hand, the sourced tables, the overrides,
and the training cost that `plan --tokens` prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardline.cli.main import main
from shardline.costing import (
    board_power_w,
    idle_fraction,
    joules_per_token,
    power_table,
    price_table,
    tdp_w,
    training_cost,
    usd_per_hour,
    usd_per_million_tokens,
)
from shardline.errors import InputError

IDLE = 80.3 / 700  # power.toml: H200 measured idle over its TDP


def test_every_price_and_power_row_has_a_source_and_a_date() -> None:
    for name, row in price_table().items():
        assert row.usd_per_hour > 0 and len(row.source) > 20 and row.date, name
    for name, (watts, source) in power_table().items():
        assert watts > 0 and len(source) > 20, name
    fraction, source = idle_fraction()
    assert fraction == pytest.approx(IDLE, rel=1e-3) and "ASSUMED" in source


def test_usd_per_hour_default_alias_and_override() -> None:
    # prices.toml: Lambda 1x H100 SXM $3.78/hr; "h100" is an alias of h100-sxm
    assert usd_per_hour("h100") == 3.78
    assert usd_per_hour("h100-sxm", override=2.5) == 2.5
    with pytest.raises(InputError, match="no price for chip"):
        usd_per_hour("tpu-v4")
    with pytest.raises(InputError, match="non-negative"):
        usd_per_hour("h100", override=-1.0)


def test_user_price_file_overlays_the_defaults(tmp_path: Path) -> None:
    path = tmp_path / "prices.toml"
    path.write_text("[tpu-v4]\nusd_per_hour = 3.22\n[h100-sxm]\nusd_per_hour = 2.0\n")
    assert usd_per_hour("tpu-v4", prices_file=str(path)) == 3.22
    assert usd_per_hour("h100", prices_file=str(path)) == 2.0
    assert usd_per_hour("h200", prices_file=str(path)) == 5.408  # default row kept
    path.write_text("[h100-sxm]\nusd_per_hour = 'cheap'\n")
    with pytest.raises(InputError, match="non-negative number"):
        usd_per_hour("h100", prices_file=str(path))


def test_board_power_linear_between_idle_and_tdp() -> None:
    # H100 SXM: TDP 700 W; P(u) = 0.1147 * 700 + (700 - 0.1147 * 700) * u
    assert tdp_w("h100") == 700.0
    assert board_power_w("h100", 1.0) == pytest.approx(700.0)
    assert board_power_w("h100", 0.0) == pytest.approx(80.3, rel=1e-3)
    assert board_power_w("h100", 0.5) == pytest.approx(80.3 + (700 - 80.3) * 0.5, rel=1e-4)
    assert board_power_w("mi300x", 1.0) == 750.0
    with pytest.raises(InputError, match=r"\[0, 1\]"):
        board_power_w("h100", 1.5)
    with pytest.raises(InputError, match="no board power"):
        board_power_w("tpu-v5e", 0.5)


def test_usd_per_million_tokens_and_joules_per_token_by_hand() -> None:
    # 8 GPUs at $4/h = $32/h; 10,000 tokens/s = 3.6e7 tokens/h -> 32 / 36 = $0.888.. per M
    assert usd_per_million_tokens(10_000, 8, 4.0) == pytest.approx(32 / 36)
    # 8 x 700 W = 5,600 J/s over 10,000 tokens/s = 0.56 J per token
    assert joules_per_token(10_000, 8, 700.0) == pytest.approx(0.56)
    with pytest.raises(InputError, match="positive"):
        usd_per_million_tokens(0.0, 8, 4.0)


def test_training_cost_by_hand() -> None:
    # 15e12 tokens at 16e6 tokens per 10 s step on 1,024 H100s at $2/h, full utilization:
    # steps = 15e12 / 16e6 = 937,500; seconds = 9.375e6 (108.5 days);
    # GPU-hours = 1024 * 9.375e6 / 3600 = 2.6667e6; USD = 5.3333e6;
    # energy = 1024 * 700 W * 9.375e6 s / 3.6e9 J/MWh = 1,866.67 MWh
    c = training_cost(10.0, 16e6, 15e12, 1024, "h100", 1.0, usd_per_hour=2.0)
    assert c.steps == pytest.approx(937_500)
    assert c.days == pytest.approx(9.375e6 / 86400)
    assert c.gpu_hours == pytest.approx(1024 * 9.375e6 / 3600)
    assert c.usd == pytest.approx(2.0 * 1024 * 9.375e6 / 3600)
    assert c.energy_mwh == pytest.approx(1024 * 700 * 9.375e6 / 3.6e9)
    unpriced = training_cost(10.0, 16e6, 15e12, 1024, "tpu-v5p", 1.0, usd_per_hour=None)
    assert unpriced.usd == pytest.approx(4.20 * 1024 * 9.375e6 / 3600)  # Google's list price
    assert unpriced.energy_mwh is None and unpriced.power_w is None  # no published power
    tpu_v4 = training_cost(10.0, 16e6, 15e12, 1024, "tpu-v4", 1.0)
    assert tpu_v4.usd is None and tpu_v4.energy_mwh == pytest.approx(1024 * 192 * 9.375e6 / 3.6e9)


def _plan_json(capsys: pytest.CaptureFixture[str], *extra: str) -> dict:
    argv = ["plan", "--model", "llama-3.2-1b", "--phase", "training", "--hw", "h100"]
    argv += ["--devices", "8", "--batch", "16", "--tokens", "1e9", "--json", *extra]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)


def test_plan_tokens_adds_gpu_hours_usd_and_energy(capsys: pytest.CaptureFixture[str]) -> None:
    out = _plan_json(capsys, "--usd-per-hour", "2")
    p = out["plans"][0]
    gpu_hours = 8 * p["days_to_train"] * 24
    assert p["gpu_hours"] == pytest.approx(gpu_hours)
    assert p["usd"] == pytest.approx(2.0 * gpu_hours) and p["usd_per_hour"] == 2.0
    # energy = devices x P(u) x seconds, u = 1 - bubble share of the step
    u = 1 - p["predicted_breakdown_s"]["bubble_s"] / p["predicted_s"]
    power = 80.3 + (700 - 80.3) * u
    assert p["board_power_w"] == pytest.approx(power, rel=1e-3)
    assert p["energy_mwh"] == pytest.approx(8 * power * gpu_hours / 8 * 3600 / 3.6e9, rel=1e-3)
    assert _plan_json(capsys)["plans"][0]["usd_per_hour"] == 3.78  # the default table


def test_plan_text_shows_the_training_cost(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--model", "llama-3.2-1b", "--phase", "training", "--hw", "h100"]
    assert main([*argv, "--devices", "8", "--batch", "16", "--tokens", "1e9"]) == 0
    text = capsys.readouterr().out
    # the recommended plan by the prediction (fsdp8 shards the optimizer step dp8 repeats)
    assert "RECOMMENDED fsdp8" in text
    assert "TRAINING on 1e9 tokens with fsdp8" in text and "GPU-hours" in text
    assert "per chip-hour" in text and "MWh of board energy" in text


def test_plan_bad_usd_per_hour_is_one_error_line(capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["plan", "--model", "llama-3.2-1b", "--phase", "training", "--hw", "h100"]
    argv += ["--devices", "8", "--batch", "16", "--tokens", "1e9", "--usd-per-hour", "x"]
    assert main(argv) == 2
    captured = capsys.readouterr()
    assert captured.err.startswith("error: --usd-per-hour must be a number")


def test_plan_prices_file_overrides_the_default_price(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prices = tmp_path / "p.toml"
    prices.write_text("[h100-sxm]\nusd_per_hour = 1.5\n")
    p = _plan_json(capsys, "--prices", str(prices))["plans"][0]
    assert p["usd_per_hour"] == 1.5 and p["usd"] == pytest.approx(1.5 * p["gpu_hours"])
