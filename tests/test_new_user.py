"""What a new user trips on (issue 28, items 1-6): one check per item, each one that would have
caught what the issue found."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import shardline
from shardline.cli.main import main
from shardline.errors import InputError

ROOT = Path(__file__).resolve().parent.parent


def _run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as stop:
        code = int(stop.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    version = next(
        line.split('"')[1]
        for line in (ROOT / "pyproject.toml").read_text().splitlines()
        if line.startswith("version = ")
    )
    assert shardline.__version__ == version
    code, out, _ = _run(capsys, "--version")
    assert (code, out) == (0, f"shardline {version}\n")


def test_plan_from_a_zoo_model_name_is_the_cli_plan(capsys: pytest.CaptureFixture[str]) -> None:
    ps = shardline.plan("llama-3.1-8b", "h100-sxm", 8)
    code, out, err = _run(
        capsys, "plan", "--model", "llama-3.1-8b", "--hw", "h100-sxm", "--devices", "8", "--json"
    )
    assert code == 0, err
    cli = json.loads(out)
    assert ps.recommended == cli["recommended"]
    assert ps.plans[0].predicted_s == pytest.approx(cli["plans"][0]["predicted_s"], rel=1e-12)
    # the defaults: a training step of one sequence of 4096 tokens (= `search`'s --seq-len)
    assert ps.workload.training and ps.workload.batch == 1
    assert ps.workload.tokens_per_item == 4096
    with pytest.raises(InputError, match="unknown model 'no-such-model'"):
        shardline.plan("no-such-model")


def test_plan_and_search_default_to_one_sequence_length() -> None:
    from shardline.cli import cmd_search
    from shardline.models.template import DEFAULT_SEQ_LEN

    assert cmd_search.DEFAULT_SEQ_LEN == DEFAULT_SEQ_LEN == 4096


def test_trace_says_which_file_it_wrote(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out_path = tmp_path / "step.json"
    code, out, err = _run(
        capsys, "plan", str(ROOT / "examples" / "ffn_70b.toml"), "--devices", "8",
        "--trace", str(out_path), "--json",
    )  # fmt: skip
    assert code == 0, err
    json.loads(out)  # stdout stays the JSON answer
    assert out_path.exists()
    assert err == f"wrote {out_path}: Chrome trace-event JSON of fsdp8's step (open in Perfetto)\n"
