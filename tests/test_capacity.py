"""The largest batch or sequence length that fits (`max_batch`, `max_seq_len`, `plan --max-batch`):
numbers derived by hand from the memory terms of `stack.memory_check`.

For a forward pass on one device with one microbatch, memory_check holds
    weights (params x 2 B in bf16) + activations (the largest layer's inputs + output),
so for one matmul x[M,K] * w[K,N] -> y[M,N] in bf16 it is 2 K N + 2 M (K + N) bytes: linear in the
batch M, and the largest M that fits in C bytes is floor((C - 2 K N) / (2 (K + N))).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardline.cli.main import main
from shardline.errors import InputError
from shardline.planning.api import PlanOptions, max_batch, max_seq_len, plan
from shardline.workload.templates import ffn
from shardline.workload.workload import Workload, matmul_layer

# (the chip file's memory.reported_bytes; the datasheet's marketed figure is 40 GB)
A100_40GB_BYTES = 40960 * 2**20  # 42,949,672,960 B
K = N = 4096
WEIGHT_BYTES = 2 * K * N  # bf16: 33,554,432 B
ROW_BYTES = 2 * (K + N)  # one row of x[M,K] plus one row of y[M,N] in bf16: 16,384 B
# (42,949,672,960 - 33,554,432) / 16,384 = 2,619,392 rows exactly
ROWS_ON_ONE_A100 = 2_619_392


def _one_matmul(k: int = K, n: int = N) -> Workload:
    return Workload("one matmul", (matmul_layer("mm", 1, k, n),), batch_dim="M")


def test_the_hand_count_of_rows() -> None:
    assert (A100_40GB_BYTES - WEIGHT_BYTES) // ROW_BYTES == ROWS_ON_ONE_A100


def test_largest_batch_on_one_device_by_hand() -> None:
    cap = max_batch(_one_matmul(), "a100-40gb", 1)
    assert cap.what == "batch" and cap.value == ROWS_ON_ONE_A100
    assert cap.plan is not None and cap.plan.name == "single" and cap.plan.fits
    used = WEIGHT_BYTES + ROWS_ON_ONE_A100 * ROW_BYTES  # 42,949,672,960 B, all of it
    assert cap.plan.memory_per_device_bytes == used
    assert cap.capacity_bytes == A100_40GB_BYTES
    # one more row: 42,949,689,344 B > capacity
    assert cap.next_value == ROWS_ON_ONE_A100 + 1
    assert cap.next_needs_bytes == used + ROW_BYTES > A100_40GB_BYTES
    over = plan(_one_matmul().with_batch(ROWS_ON_ONE_A100 + 1), "a100-40gb", 1, require_fit=False)
    assert over.best() is None
    # doubling from 1 to 2**21 = 2,097,152 (22 probes) and 2**22 (fails), then bisection over
    # the 2**21 values between: 21 more
    assert cap.probes == 23 + 21
    assert not cap.at_limit
    out = cap.to_dict()
    assert out["max_batch"] == ROWS_ON_ONE_A100 and "max_seq_len" not in out
    assert out["plan"]["name"] == "single"
    assert out["next_needs_bytes"] == used + ROW_BYTES


def test_fixed_data_parallelism_doubles_the_batch() -> None:
    """dp = 2 replicates the weights and gives each device ceil(B / 2) rows, so the largest batch
    is 2 x 2,439,358 = 4,878,716; 4,878,717 puts 2,439,359 rows on one device."""
    cap = max_batch(_one_matmul(), "a100-40gb", 2, options=PlanOptions(degrees={"dp": 2}))
    assert cap.value == 2 * ROWS_ON_ONE_A100
    assert cap.plan is not None and cap.plan.name == "dp2"
    assert cap.plan.memory_per_device_bytes == WEIGHT_BYTES + ROWS_ON_ONE_A100 * ROW_BYTES
    assert cap.next_needs_bytes == WEIGHT_BYTES + (ROWS_ON_ONE_A100 + 1) * ROW_BYTES


def test_smallest_batch_covers_fixed_replicas_and_microbatches() -> None:
    """dp = 2 and M = 3 microbatches need ceil(B / 2) >= 3: B >= 2 x (3 - 1) + 1 = 5."""
    options = PlanOptions(degrees={"dp": 2}, microbatches=3)
    cap = max_batch(_one_matmul(), "a100-40gb", 2, options=options, limit=5)
    assert cap.value == 5 and cap.at_limit and cap.probes == 1
    assert cap.plan is not None and cap.plan.microbatches == 3
    assert cap.next_value is None and cap.next_needs_bytes is None
    with pytest.raises(InputError, match="below the smallest batch"):
        max_batch(_one_matmul(), "a100-40gb", 2, options=options, limit=4)


def test_nothing_fits_gives_zero() -> None:
    """K = N = 150,000 in bf16: weights 2 x 150,000^2 = 45 GB > 40 GB before any row."""
    cap = max_batch(_one_matmul(150_000, 150_000), "a100-40gb", 1)
    assert cap.value == 0 and cap.plan is None and cap.probes == 1
    assert cap.next_value == 1
    assert cap.next_needs_bytes == 2 * 150_000**2 + 2 * (150_000 + 150_000)
    assert cap.to_dict()["max_batch"] == 0 and cap.to_dict()["plan"] is None


def test_largest_sequence_of_a_forward_ffn_by_hand() -> None:
    """A forward, ungated FFN (d_model D = 4096, d_ff F = 16384, batch B = 8) on one A100 40 GB:
    weights W_up[D,F] + W_down[F,D] = 2 x 2 D F = 268,435,456 B; the largest live set is
    x[B,S,D] + h[B,S,F] (either layer) = 2 B S (D + F) = 327,680 S bytes. The longest S:
    floor((42,949,672,960 - 268,435,456) / 327,680) = 130,252 (130,252.8), the capacity being
    the 40,960 MiB the device reports."""
    d, f, b = 4096, 16384, 8
    weights = 2 * 2 * d * f
    per_token = 2 * b * (d + f)
    assert (A100_40GB_BYTES - weights) // per_token == 130_252

    def rebuild(seq_len: int) -> Workload:
        return ffn(d_model=d, d_ff=f, batch=b, seq_len=seq_len, gated=False, phase="forward")

    cap = max_seq_len(rebuild, "a100-40gb", 1)
    assert cap.what == "seq_len" and cap.value == 130_252
    assert (
        cap.plan is not None and cap.plan.memory_per_device_bytes == weights + 130_252 * per_token
    )
    assert cap.next_value == 130_253
    assert cap.next_needs_bytes == weights + 130_253 * per_token
    assert cap.to_dict()["max_seq_len"] == 130_252


def test_bad_arguments() -> None:
    unbatched = Workload("no batch", (matmul_layer("mm", 8, 8, 8),))
    with pytest.raises(InputError, match="names no batch dimension"):
        max_batch(unbatched, "a100-40gb", 1)
    with pytest.raises(InputError, match="limit must be a positive integer"):
        max_batch(_one_matmul(), "a100-40gb", 1, limit=0)
    with pytest.raises(InputError, match="does not divide the 2 devices"):
        max_batch(_one_matmul(), "a100-40gb", 2, options=PlanOptions(degrees={"dp": 3}))
    with pytest.raises(InputError, match="not a Workload"):
        max_seq_len(lambda s: None, "a100-40gb", 1)  # type: ignore[arg-type,return-value]


# -- the command line ----------------------------------------------------------------------------

STACK_TOML = f"""
name = "one matmul"
batch_dim = "M"
[dims]
M = 8
K = {K}
N = {N}
[[layer]]
name = "mm"
einsum = "x[M,K] * w[K,N] -> y[M,N]"
weights = ["w"]
"""

FFN_TOML = """
name = "ffn"
[ffn]
d_model = 4096
d_ff = 16384
batch = 8
seq_len = 512
gated = false
phase = "forward"
"""


def _write(tmp_path: Path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return str(path)


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


def test_cli_max_batch_json_and_text(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = _write(tmp_path, "mm.toml", STACK_TOML)
    argv = ["plan", path, "--hw", "a100-40gb", "--devices", "1", "--max-batch"]
    assert main([*argv, "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["max_batch"] == ROWS_ON_ONE_A100 and "plans" not in out
    assert out["plan"]["name"] == "single"
    assert out["next_needs_bytes"] == WEIGHT_BYTES + (ROWS_ON_ONE_A100 + 1) * ROW_BYTES
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[2] == (
        "LARGEST BATCH that fits: 2,619,392 rows (single, 42.94967 GB of 42.94967 GB per device); "
        "2,619,393 needs at least 42.94969 GB"
    )


def test_cli_max_seq_len_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = _write(tmp_path, "ffn.toml", FFN_TOML)
    argv = ["plan", path, "--hw", "a100-40gb", "--devices", "1", "--max-seq-len", "--json"]
    assert main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["max_seq_len"] == 130_252 and out["workload"]["batch"] == 8


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--max-seq-len"], "--max-seq-len applies to [transformer] and [ffn] templates"),
        (["--max-batch", "--batch", "8"], "give --batch or --max-batch, not both"),
        (["--max-batch", "--batches", "1,8"], "not allowed with argument"),
        (["--max-batch", "--max-seq-len"], "not allowed with argument"),
        (["--max-batch", "--dp", "3"], "dp=3 does not divide the 2 devices"),
    ],
)
def test_cli_bad_input_is_one_error_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, extra: list[str], message: str
) -> None:
    path = _write(tmp_path, "mm.toml", STACK_TOML)
    line = _error(capsys, ["plan", path, "--hw", "a100-40gb", "--devices", "2", *extra])
    assert message in line
