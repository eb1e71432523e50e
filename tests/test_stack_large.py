"""Large stacks (issue 31): layers of one content are built, priced and printed once, and the
answers are those of layers built one by one; `stack --json` writes the text json.dumps gives."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from shardline.errors import InputError
from shardline.io.workload_toml import load_workload, workload_from_toml
from shardline.ops.layer import Layer, backward_layers, backward_stack
from shardline.report.stack_json import stack_json_pieces
from shardline.workload.stack import stack
from shardline.workload.templates import transformer

ROOT = Path(__file__).resolve().parent.parent
SHAPES = ((512, 1024, 2048), (256, 256, 4096), (512, 1024, 2048))  # the first and last alike


def _stack_file(path: Path, n: int, repeat: int = 2) -> Path:
    """n tables cycling through SHAPES (m, k, n), counts 1, 2, 3, ..."""
    lines = [f"repeat = {repeat}"]
    for i in range(n):
        m, k, nn = SHAPES[i % 3]
        lines += ["[[layer]]", f'name = "l{i}"', f"m = {m}", f"k = {k}", f"n = {nn}"]
        lines.append(f"count = {i % 4 + 1}")
    path.write_text("\n".join(lines) + "\n")
    return path


def test_repeated_layers_give_the_totals_of_their_formulas(tmp_path: Path) -> None:
    """FLOPs 2·m·k·n and bf16 bytes 2·(m·k + k·n + m·n) per instance, times count and repeat."""
    w = workload_from_toml(_stack_file(tmp_path / "s.toml", 600))
    r = stack(w, "h100-sxm")
    counts = [i % 4 + 1 for i in range(600)]
    flops = sum(2 * 2 * m * k * n * c for c, (m, k, n) in zip(counts, SHAPES * 200, strict=True))
    hbm = sum(
        2 * 2 * (m * k + k * n + m * n) * c
        for c, (m, k, n) in zip(counts, SHAPES * 200, strict=True)
    )
    assert r.totals.flops == flops and r.totals.bytes == hbm
    assert [row.name for row in r.layers[:3]] == ["l0", "l1", "l2"]
    assert [row.count for row in r.layers[:5]] == [2, 4, 6, 8, 2]  # count x repeat
    assert r.layers[0].cost == r.layers[2].cost == r.layers[599].cost  # the same content
    assert r.memory.params == 2 * sum(
        k * n * c for c, (_, k, n) in zip(counts, SHAPES * 200, strict=True)
    )


def test_shared_layers_answer_as_layers_built_one_by_one(tmp_path: Path) -> None:
    """The same stack built table by table (no sharing) gives the same JSON, number for number."""
    w = workload_from_toml(_stack_file(tmp_path / "s.toml", 30), phase="training")
    alone = [
        Layer(x.name, x.spec, dict(x.dims), weights=x.weights, count=x.count, tp_dims=x.tp_dims)
        for x in w.layers
    ]
    from dataclasses import replace

    assert (
        stack(w, "a100-40gb").to_dict()
        == stack(replace(w, layers=tuple(alone)), "a100-40gb").to_dict()
    )


def test_backward_layers_of_shared_layers_are_those_derived_one_by_one() -> None:
    first = Layer("a", "x[M,K] * w[K,N] -> y[M,N]", {"M": 8, "K": 16, "N": 32}, weights=("w",))
    layers = [first, first.renamed("b"), first.renamed(" c ")]
    assert layers[2].name == "c" and layers[2].content_key == first.content_key
    derived = [g for layer in reversed(layers) for g in backward_layers(layer)]
    shared = backward_stack(layers)
    assert [g.name for g in shared] == [
        "c.grad_x",
        "c.grad_w",
        "b.grad_x",
        "b.grad_w",
        "a.grad_x",
        "a.grad_w",
    ]
    assert [(g.name, g.content_key) for g in shared] == [(g.name, g.content_key) for g in derived]
    with pytest.raises(InputError, match="^a layer needs a non-empty name"):
        first.renamed("  ")


def test_a_bad_name_on_a_shared_table_is_named_as_on_its_own(tmp_path: Path) -> None:
    body = '[[layer]]\nname = "{}"\nm = 8\nk = 8\nn = 8\n'
    path = tmp_path / "names.toml"
    path.write_text(body.format("a") + body.format(" "))
    with pytest.raises(InputError) as shared:
        workload_from_toml(path)
    path.write_text(body.format(" "))
    with pytest.raises(InputError) as alone:
        workload_from_toml(path)
    assert str(shared.value) == str(alone.value).replace("layer 1 ", "layer 2 ")


def test_a_sheet_of_repeated_rows_shares_its_layers(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    path.write_text("M,K,N,count\n" + "64,128,256,2\n" * 50 + "64,128,512,1\n")
    w = load_workload(path)
    assert len(w.layers) == 51 and len(w.distinct_layers) == 2
    assert w.layers[49].name == "row 51" and w.layers[49].count == 2
    assert stack(w, "h100-sxm").totals.flops == 50 * 2 * 2 * 64 * 128 * 256 + 2 * 64 * 128 * 512


@pytest.mark.parametrize(
    "workload",
    [
        lambda tmp: load_workload(ROOT / "examples" / "seed003_stack.toml"),
        lambda tmp: load_workload(ROOT / "examples" / "seed003_stack.toml", phase="training"),
        lambda tmp: transformer(d_model=1024, d_ff=4096, heads=8, seq_len=512, batch=2, layers=4),
        lambda tmp: workload_from_toml(_stack_file(tmp / "s.toml", 40), phase="training"),
    ],
)
def test_the_json_pieces_are_the_text_of_json_dumps(workload, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = stack(workload(tmp_path), "h100-sxm")
    text = "".join(stack_json_pieces(r))
    assert text == json.dumps(r.to_dict(), indent=2, allow_nan=False) + "\n"
