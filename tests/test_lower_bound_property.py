"""No realistic time below its lower bound, anywhere (issue 27): random inputs of every command
family (matmul, einsum, shard, stack, plan with dense and MoE dp x fsdp x ep layouts, collective,
serve), on chips with and without measured rates; every JSON object that reports a realistic
time beside its bound is checked:

- `predicted_s >= t_lower_s` (matmul, einsum, stack rows and totals) and `>= lower_bound_s`;
- a plan's `predicted_s >= latency_s` (its lower bound);
- a collective's `predicted_s >= t_s` (the alpha-beta line-rate bound);
- a serving run's decode step at least its weights' HBM time, `params x bytes / (tp x W)`, and
  its prefill at least its FLOPs at peak, `2 x active params x input tokens / (tp x P)`.
"""

from __future__ import annotations

import io
import json
import tempfile
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from shardline.cli.main import main
from shardline.hardware import resolve_chip

REL = 1e-9
_PAIRS = (("predicted_s", "t_lower_s"), ("predicted_s", "lower_bound_s"))


def _bare_chip() -> str:
    """An H100 chip file without its [achievable] block (no measured rates): the realistic
    models fall back to the peaks."""
    from shardline.hardware import catalog

    text = (Path(catalog.__file__).parent / "catalog" / "h100-sxm.toml").read_text()
    keep, skip = [], False
    for line in text.splitlines():
        if line.startswith("["):
            skip = line.startswith("[achievable")
        if line.startswith("name ="):
            line = 'name = "bare-h100"'
        if line.startswith("aliases"):
            line = "aliases = []"
        if not skip:
            keep.append(line)
    path = Path(tempfile.mkdtemp()) / "bare-h100.toml"
    path.write_text("\n".join(keep) + "\n")
    return str(path)


BARE = _bare_chip()
CHIPS = ["h100-sxm", "a100-80gb", "tpu-v5e", "tpu-v5p", "mi300x", "trainium2", "b200", BARE]
SETTINGS = settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _json(*argv: str) -> Any:
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(argv))
    assert code in (0, 2), err.getvalue()
    if code == 2:  # an input the command refuses (one error line): nothing to check
        assert err.getvalue().startswith("error:"), err.getvalue()
        return None
    return json.loads(out.getvalue())


def _objects(o: Any):
    if isinstance(o, dict):
        yield o
        for v in o.values():
            yield from _objects(v)
    elif isinstance(o, list):
        for v in o:
            yield from _objects(v)


def _check(doc: Any) -> int:
    """Every (realistic, bound) pair in the document; how many were checked."""
    seen = 0
    for obj in _objects(doc):
        for pred, low in _PAIRS:
            if isinstance(obj.get(pred), (int, float)) and isinstance(obj.get(low), (int, float)):
                assert obj[pred] >= obj[low] * (1 - REL), (pred, obj[pred], low, obj[low])
                seen += 1
    return seen


dims = st.sampled_from([1, 3, 64, 127, 128, 1000, 4096])
chips = st.sampled_from(CHIPS)


@SETTINGS
@given(m=dims, k=dims, n=dims, chip=chips, dtype=st.sampled_from(["bf16", "fp32", "int8"]))
def test_matmul(m: int, k: int, n: int, chip: str, dtype: str) -> None:
    doc = _json("matmul", str(m), str(k), str(n), "--hw", chip, "--dtype", dtype, "--json")
    assert doc is None or _check(doc) >= 1


SPECS = [
    "x[B,D] * w[D,F] -> y[B,F]",
    "q[B,H,E] * k[B,H,E] -> s[B,H]",  # a batched dot product
    "q[B,S,H,E] * k[B,T,H,E] -> s[B,H,S,T]",
    "x[B,D] -> y[B]",
]


@SETTINGS
@given(spec=st.sampled_from(SPECS), a=dims, b=dims, c=dims, chip=chips)
def test_einsum(spec: str, a: int, b: int, c: int, chip: str) -> None:
    sizes = {"B": a, "D": b, "F": c, "H": 8, "E": b, "S": c, "T": c}
    names = sorted({ch for ch in spec if ch.isupper()})
    given_dims = ",".join(f"{d}={sizes[d]}" for d in names)
    doc = _json("einsum", spec, "--dims", given_dims, "--hw", chip, "--json")
    assert doc is None or _check(doc) >= 1


@SETTINGS
@given(
    m=dims, k=dims, n=dims, devices=st.sampled_from([2, 4, 8]),
    along=st.sampled_from(["m", "n", "k"]), chip=chips,
)  # fmt: skip
def test_shard(m: int, k: int, n: int, devices: int, along: str, chip: str) -> None:
    doc = _json(
        "shard", str(m * devices), str(k * devices), str(n * devices), "--devices", str(devices),
        "--along", along, "--hw", chip, "--json",
    )  # fmt: skip
    if doc is not None:
        _check(doc)
        for c in doc["collectives"]:
            assert c["predicted_s"] >= c["t_s"] * (1 - REL)


@SETTINGS
@given(
    model=st.sampled_from(["llama-3.2-1b", "qwen3-30b-a3b"]),
    phase=st.sampled_from(["training", "prefill", "decode"]),
    batch=st.sampled_from([1, 4, 32]), seq=st.sampled_from([128, 2048]), chip=chips,
)  # fmt: skip
def test_stack(model: str, phase: str, batch: int, seq: int, chip: str) -> None:
    doc = _json(
        "stack", "--model", model, "--phase", phase, "--batch", str(batch), "--seq-len",
        str(seq), "--hw", chip, "--json",
    )  # fmt: skip
    assert doc is None or _check(doc) >= 1


def _plans(doc: Any) -> None:
    for p in doc["plans"]:
        assert p["predicted_s"] >= p["latency_s"] * (1 - REL), (p["name"], p)


@SETTINGS
@given(
    phase=st.sampled_from(["training", "prefill", "decode"]),
    batch=st.sampled_from([1, 8, 64]), seq=st.sampled_from([256, 4096]),
    devices=st.sampled_from([4, 16]), chip=chips,
)  # fmt: skip
def test_plan_dense(phase: str, batch: int, seq: int, devices: int, chip: str) -> None:
    doc = _json(
        "plan", "--model", "llama-3.2-1b", "--phase", phase, "--batch", str(batch),
        "--seq-len", str(seq), "--devices", str(devices), "--hw", chip, "--json",
    )  # fmt: skip
    if doc is not None:
        _plans(doc)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    layout=st.sampled_from([(2, 8, 4), (1, 8, 8), (4, 4, 4), (8, 1, 8)]),
    phase=st.sampled_from(["training", "decode"]),
    chip=st.sampled_from(["h100-sxm", "tpu-v5p", BARE]),
)  # fmt: skip
def test_plan_moe(layout: tuple[int, int, int], phase: str, chip: str) -> None:
    """gpt-oss-120b over 64 devices at batch 64, dp x fsdp x ep pinned."""
    dp, fsdp, ep = layout
    doc = _json(
        "plan", "--model", "gpt-oss-120b", "--devices", "64", "--batch", "64", "--phase", phase,
        "--seq-len", "2048", "--dp", str(dp), "--fsdp", str(fsdp), "--ep", str(ep),
        "--hw", chip, "--json",
    )  # fmt: skip
    if doc is not None:
        _plans(doc)


@SETTINGS
@given(
    kind=st.sampled_from(["all-gather", "reduce-scatter", "all-reduce", "all-to-all", "send"]),
    nbytes=st.floats(min_value=1.0, max_value=1e10), devices=st.sampled_from([2, 3, 8, 16, 64]),
    chip=chips, sharp=st.booleans(),
)  # fmt: skip
def test_collective(kind: str, nbytes: float, devices: int, chip: str, sharp: bool) -> None:
    extra = ["--sharp"] if sharp else []
    doc = _json(
        "collective", kind, "--bytes", repr(nbytes), "--devices", str(devices), "--hw", chip,
        *extra, "--json",
    )  # fmt: skip
    if doc is not None:
        assert doc["predicted_s"] >= doc["t_s"] * (1 - REL)


@settings(max_examples=4, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    tp=st.sampled_from([1, 2, 8]), tokens_in=st.sampled_from([128, 2048]),
    chip=st.sampled_from(["h100-sxm", "a100-80gb", "mi300x"]),
)  # fmt: skip
def test_serve(tp: int, tokens_in: int, chip: str) -> None:
    """A decode step reads every weight once (params x 2 B bf16 over tp devices at peak HBM
    bandwidth); a prefill does 2 x params x input tokens of FLOPs over tp devices at peak."""
    doc = _json(
        "serve", "--model", "llama-3.1-8b", "--hw", chip, "--rate", "2", "--in",
        str(tokens_in), "--out", "64", "--devices", str(tp), "--tp", str(tp), "--json",
    )  # fmt: skip
    if doc is None:
        return
    c = resolve_chip(chip)
    params = 8030261248
    assert doc["decode_step_s"] >= params * 2 / (tp * c.mem_bytes_per_s) * (1 - REL)
    assert doc["prefill_s"] >= 2 * 7504924672 * tokens_in / (tp * c.peak("bf16")) * (1 - REL)
