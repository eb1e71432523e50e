"""CLI smoke tests of `stack` and `plan`: the JSON contract, the text answer first, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardline.cli.main import main

ROOT = Path(__file__).resolve().parent.parent
SEED003 = str(ROOT / "examples" / "seed003_stack.toml")
BLOCK = str(ROOT / "examples" / "transformer_block.toml")

STACK_LAYER_KEYS = {"name", "count", "flops", "bytes", "bound", "t_lower_s"}
STACK_TOTAL_KEYS = {"flops", "bytes", "t_compute_s", "t_memory_s", "t_lower_s"}
STACK_MEMORY_KEYS = {
    "weights_bytes",
    "activations_bytes",
    "kv_cache_bytes",
    "optimizer_bytes",
    "total_bytes",
    "capacity_bytes",
    "fits",
}
PLAN_KEYS = {
    "name",
    "degrees",
    "latency_s",
    "throughput_per_s",
    "throughput_bound_per_s",
    "memory_per_device_bytes",
    "fits",
    "comm_bytes",
    "bottleneck",
}


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:  # type: ignore[type-arg]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def _error(capsys: pytest.CaptureFixture[str], argv: list[str]) -> str:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    assert code == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    return lines[0]


def test_stack_json_contract_and_totals(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, ["stack", SEED003, "--hw", "a100-40gb", "--json"])
    assert {"layers", "totals", "memory"} <= set(out)
    for layer in out["layers"]:
        assert set(layer) >= STACK_LAYER_KEYS
    assert set(out["totals"]) >= STACK_TOTAL_KEYS
    assert set(out["memory"]) >= STACK_MEMORY_KEYS
    # totals = sum of count x per-instance values
    assert out["totals"]["flops"] == sum(x["count"] * x["flops"] for x in out["layers"])
    assert out["totals"]["bytes"] == sum(x["count"] * x["bytes"] for x in out["layers"])
    assert out["totals"]["t_lower_s"] == pytest.approx(
        sum(x["count"] * x["t_lower_s"] for x in out["layers"])
    )
    assert out["subtotals"]["forward"]["flops"] == out["totals"]["flops"]  # forward only
    assert out["subtotals"]["one_block"]["flops"] * 36 == out["totals"]["flops"]
    mem = out["memory"]
    assert mem["total_bytes"] == pytest.approx(
        mem["weights_bytes"]
        + mem["activations_bytes"]
        + mem["kv_cache_bytes"]
        + mem["optimizer_bytes"]
        + mem["gradients_bytes"]
    )
    assert mem["capacity_bytes"] == 40960 * 2**20 and mem["fits"] is True


def test_stack_text_gives_the_bound_and_the_fit_first(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stack", SEED003, "--hw", "a100-40gb"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[3].startswith("COMPUTE-BOUND overall")
    assert lines[4].startswith("FITS on one a100-40gb")
    assert any("one input + one output + the layer's weight" in line for line in lines)


def test_stack_of_a_decode_step_has_a_kv_cache(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(
        capsys, ["stack", BLOCK, "--hw", "h100", "--phase", "decode", "--batch", "4", "--json"]
    )
    assert out["memory"]["kv_cache_bytes"] == 2 * 32 * 8 * 128 * 4096 * 4 * 2
    assert out["memory"]["optimizer_bytes"] == 0


def test_stack_of_a_sheet(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    sheet = tmp_path / "rows.csv"
    sheet.write_text("m,k,n,count\n1024,1024,1024,3\n", encoding="utf-8")
    out = _json(capsys, ["stack", str(sheet), "--hw", "a100-40gb", "--json"])
    assert out["totals"]["flops"] == 3 * 2 * 1024**3


def test_plan_json_contract(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(capsys, ["plan", SEED003, "--hw", "a100-40gb", "--devices", "2", "--json"])
    assert {"plans", "recommended", "reason"} <= set(out)
    for p in out["plans"]:
        assert set(p) >= PLAN_KEYS
        assert {"tp", "pp", "dp"} <= set(p["degrees"])
    assert out["recommended"] == out["plans"][0]["name"]
    latencies = [p["latency_s"] for p in out["plans"] if p["fits"]]
    assert latencies == sorted(latencies)


def test_plan_with_fixed_degrees(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(
        capsys,
        [
            "plan",
            SEED003,
            "--hw",
            "a100-40gb",
            "--devices",
            "2",
            "--pp",
            "2",
            "--microbatches",
            "8",
            "--json",
        ],
    )
    (p,) = out["plans"]
    assert p["degrees"] == {"tp": 1, "pp": 2, "dp": 1, "fsdp": 1, "ep": 1, "cp": 1}
    assert p["microbatches"] == 8 and p["bubble_fraction"] == pytest.approx(1 / 9)


def test_plan_text_recommends_first(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", SEED003, "--hw", "a100-40gb", "--devices", "2", "--tp", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[4].startswith("RECOMMENDED tp2: ")  # after the title, workload, framework
    assert any(line.strip().startswith("tp   all_reduce") for line in lines)


def test_plan_batch_sweep(capsys: pytest.CaptureFixture[str]) -> None:
    path = str(ROOT / "examples" / "ffn_70b.toml")
    out = _json(
        capsys,
        [
            "plan",
            path,
            "--hw",
            "h100",
            "--devices",
            "8",
            "--phase",
            "decode",
            "--batches",
            "1,65536",
            "--json",
        ],
    )
    assert [p["recommended"] for p in out["sweep"]] == ["tp8", "dp8"]
    assert out["crossovers"] and out["crossovers"][0]["from_plan"] == "tp8"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["stack", "missing.toml", "--hw", "a100-40gb"], "no such workload file"),
        (["stack", SEED003, "--hw", "a100-40gb", "--phase", "decode"], "phase of a layer stack"),
        (["stack", SEED003, "--hw", "nope"], "nope"),
        (
            ["plan", SEED003, "--hw", "a100-40gb", "--devices", "8", "--tp", "3"],
            "tp=3 does not divide the 8 devices",
        ),
        (
            ["plan", SEED003, "--hw", "a100-40gb", "--devices", "48", "--pp", "48"],
            "pp=48 is more than the 36 blocks",
        ),
        (
            ["plan", SEED003, "--hw", "a100-40gb", "--devices", "2", "--microbatches", "9000"],
            "more than the batch",
        ),
        (
            ["plan", SEED003, "--hw", "a100-40gb", "--devices", "2", "--phase", "training"],
            "fits on no plan",
        ),
        (["plan", SEED003, "--hw", "a100-40gb", "--devices", "0"], "--devices must be a positive"),
        (["plan", SEED003, "--hw", "a100-40gb"], "--devices"),
    ],
)
def test_bad_input_is_one_error_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    assert message in _error(capsys, argv)


def test_bad_workload_files(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    unknown = tmp_path / "unknown.toml"
    unknown.write_text(
        '[[layer]]\nname = "a"\nm = 4\nk = 8\nn = 16\nwieghts = ["w"]\n', encoding="utf-8"
    )
    assert "unknown field 'wieghts'" in _error(capsys, ["stack", str(unknown)])
    shape = tmp_path / "shape.toml"
    shape.write_text(
        '[[layer]]\nname = "a"\neinsum = "x[M,K] * w[K,N] -> y[M,N]"\n'
        'weights = ["w"]\nshapes = { x = [4, 8], w = [9, 16] }\n',
        encoding="utf-8",
    )
    assert "does not match its einsum" in _error(capsys, ["stack", str(shape)])
    huge = tmp_path / "huge.toml"
    huge.write_text(
        'repeat = 64\n[[layer]]\nname = "a"\nm = 1024\nk = 65536\nn = 65536\n', encoding="utf-8"
    )
    line = _error(capsys, ["plan", str(huge), "--hw", "a100-40gb", "--devices", "2"])
    assert "fits on no plan over 2 x a100-40gb: the smallest needs" in line
    assert "275 GB per device" in line  # 64 x 65536^2 x 2 B / 2 devices, plus activations


def test_unknown_weight_name_is_an_error_not_a_traceback(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    # No tp_dim given: the default (the weight's largest dim) must not look up a missing operand.
    for body in (
        'm = 4\nk = 8\nn = 16\nweights = ["q"]\n',
        'einsum = "x[M,K] * w[K,N] -> y[M,N]"\ndims = { M = 4, K = 8, N = 16 }\nweights = ["W"]\n',
    ):
        path = tmp_path / "weights.toml"
        path.write_text(f'[[layer]]\nname = "a"\n{body}', encoding="utf-8")
        assert "weights names unknown operand" in _error(capsys, ["stack", str(path)])
