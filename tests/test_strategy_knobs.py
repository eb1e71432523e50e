"""Strategies own their knobs: the degree flag and API keyword, the execution flags, the one
tensor-parallel rule, the search and serving ranges, read from the registry by the CLI, the plan
search, the training search's enumeration and the docs (docs/stack-and-plans.md, "Adding a
strategy"; docs/whole-model.md, "The flags")."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from shardline.cli.execution_args import knobs
from shardline.errors import InputError
from shardline.models import load_model
from shardline.models.template import model_workload
from shardline.planning.api import candidates, plan
from shardline.planning.search import assignments
from shardline.strategies import Strategy, names, registered, serving_layouts, strategies, strategy
from shardline.strategies.tp import tensor_room, tensor_rooms, uneven_layer, uneven_reason
from shardline.workload.templates import ffn, transformer
from shardline.workload.workload import Workload
from tests.cli_run import run_cli
from tests.doc_strategy import doc_section, doc_strategy

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"


def _llama_8b() -> Workload:
    # llama-3.1-8b (its model file): 32 heads in 8 KV groups (G = 8, R = 4 query heads each),
    # the fused QKV projection J = R + 2 = 6 columns per group, d_ff 14336
    return model_workload(
        load_model("llama-3.1-8b"), phase="training", batch=8, seq_len=1024, dtype="bf16"
    )


def test_one_tensor_parallel_rule_on_llama_8b() -> None:
    w = _llama_8b()
    tp = strategy("tp")
    # each layer's room: the product of its tp dims (G x J = 8 x 6, G x R = 8 x 4, F)
    assert tensor_rooms(w) == [
        (48, "attn_qkv"),
        (32, "attn_scores"),
        (32, "attn_values"),
        (32, "attn_out"),
        (14336, "ffn_in"),
        (14336, "ffn_down"),
    ]
    assert tensor_room(w) == (32, "attn_out")
    assert tp.bound(w) == 32
    # a fixed degree may be uneven up to the room; past it some devices would hold nothing
    assert tp.valid(w, 32) and tp.valid(w, 3) and not tp.valid(w, 33)
    with pytest.raises(InputError) as err:
        tp.check(w, 64)
    assert str(err.value) == (
        "tp=64 is more than layer 'attn_out' can split: its tensor-parallel dims give at most "
        "32 ways; some devices would hold nothing"
    )
    # the search tries even splits only: 16 fills G (8) and leaves 2 for J = 6 and R = 4;
    # 32 leaves 4 for J = 6; 3 does not divide G = 8
    assert tp.search_range(w, 64) == (1, 2, 4, 8, 16)
    assert tp.search_range(w, 96) == (1, 2, 4, 8, 16)
    assert uneven_layer(w, 16) is None
    assert uneven_reason(w, 32) == (
        "tp=32 does not split layer 'attn_qkv' of llama-3.1-8b evenly: its tensor-parallel dims "
        "(G=8 x J=6) are filled in order and J=6 is left 4 ways, which do not divide it"
    )
    assert uneven_reason(w, 12) == (
        "tp=12 does not split layer 'attn_qkv' of llama-3.1-8b evenly: its tensor-parallel dims "
        "(G=8 x J=6) are filled in order and G=8 is left 12 ways, which it does not divide"
    )


def test_plan_search_and_serving_use_the_tp_rule() -> None:
    # heads 12 in 4 KV groups (R = 3): the QKV room is 4 x 5 = 20, the others 12 and 3072
    w = transformer(d_model=768, d_ff=3072, heads=12, kv_heads=4, batch=8, seq_len=64, layers=2)
    tp = strategy("tp")
    assert [room for room, _ in tensor_rooms(w)] == [20, 12, 12, 12, 3072, 3072]
    # of the divisors of 96 only 1, 2 and 4 split every layer evenly (3 does not divide G = 4;
    # 8 leaves 2 ways for R = 3)
    assert tp.search_range(w, 96) == (1, 2, 4)
    free = {name: None for name in names()}
    assert sorted({d["tp"] for d in candidates(w, 8, free)}) == [1, 2, 4]  # not 8
    # the serving search's replicas: 1, 2, 4, 8 devices where the rule allows
    assert [d["tp"] for d in serving_layouts(w, 64) if d["pp"] == 1] == [1, 2, 4]
    assert [d["tp"] for d in serving_layouts(w, 2) if d["pp"] == 1] == [1, 2]
    # pipeline stages: 2 (the two blocks split evenly), not 4; tp x pp within the devices
    assert [(d["tp"], d["pp"]) for d in serving_layouts(w, 4)] == [
        (1, 1),
        (1, 2),
        (2, 1),
        (2, 2),
        (4, 1),
    ]
    # a fixed degree may still be uneven (6 <= the room 12): the plan rounds the split up
    assert {p.degrees["tp"] for p in plan(w, "h100-sxm", 6, tp=6).plans} == {6}


def test_serving_layouts_of_llama_8b_are_tp_1_2_4_8() -> None:
    w = model_workload(load_model("llama-3.1-8b"), phase="decode", batch=1, seq_len=1024)
    assert [d["tp"] for d in serving_layouts(w, 64) if d["pp"] == 1] == [1, 2, 4, 8]
    # 32 blocks: 1, 2 and 4 pipeline stages (strategies/pp.py SERVING_STAGES)
    assert sorted({d["pp"] for d in serving_layouts(w, 64)}) == [1, 2, 4]
    assert [s.name for s in strategies() if s.serving] == ["tp", "pp"]


def test_serving_uses_the_tp_rule(capsys: pytest.CaptureFixture[str]) -> None:
    # `serve --tp N` refuses what the rule refuses, with the rule's reason
    argv = ("serve", "--model", "llama-3.1-8b", "--devices", "3", "--tp", "3")
    code, _, err = run_cli(capsys, *argv, "--rate", "1", "--in", "100", "--out", "10")
    assert (code, err.strip()) == (
        2,
        "error: --tp 3 does not split layer 'attn_qkv' of llama-3.1-8b evenly: its "
        "tensor-parallel dims (G=8 x J=6) are filled in order and G=8 is left 3 ways, which do "
        "not divide it",
    )
    # the serving search's tensor-parallel degrees are tp's serving range
    from shardline.serving.search import TP_DEGREES
    from shardline.strategies.tp import SERVING_DEGREES

    assert TP_DEGREES == SERVING_DEGREES == (1, 2, 4, 8)


_doc_section = doc_section
_doc_strategy = doc_strategy


def test_a_toy_strategy_is_one_module_and_one_registry_call(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """The docs' toy (sequence parallelism for per-token layers) registered with one call shows
    up in plan's flags and API keyword, in the plan search, in the training search's layouts and
    in the docs' strategy table check, with no edit elsewhere; the serving search leaves it out
    (`serving` False)."""
    sp = _doc_strategy()
    w = ffn(d_model=1024, d_ff=4096, batch=2, seq_len=4096, gated=False, layers=4)
    toml = tmp_path / "ffn.toml"
    toml.write_text(
        'name = "toy"\n[ffn]\nd_model = 1024\nd_ff = 4096\nbatch = 2\nseq_len = 4096\n'
        "gated = false\nlayers = 4\n"
    )
    code, out, _ = run_cli(capsys, "plan", "--help")
    assert code == 0 and "--sp N" not in out
    with registered(sp):
        # the CLI flag, with the strategy's help text, and the plan table's column
        code, out, _ = run_cli(capsys, "plan", "--help")
        assert code == 0 and "--sp N" in out and "sequence shards (per-token layers only)" in out
        code, out, err = run_cli(capsys, "plan", str(toml), "--devices", "4", "--sp", "4")
        assert (code, err) == (0, "")
        assert "RECOMMENDED sp4" in out
        assert re.search(r"plan +tp +pp +dp +fsdp +sp +mb", out)
        # the API keyword fixes the degree; free, the plan search weighs it with the others
        assert {p.name for p in plan(w, "h100-sxm", 4, sp=4).plans} == {"sp4"}
        searched = {p.name for p in plan(w, "h100-sxm", 4).plans}
        assert {"sp4", "dp2-sp2", "tp2-sp2", "fsdp2-sp2"} <= searched
        # its range: the divisors of the devices it accepts (a sequence of 4,096 tokens)
        assert sp.search_range(w, 8) == (1, 2, 4, 8)
        # the training search's enumeration (every registered strategy, `every=True`)
        layouts = [d.as_dict() for d in assignments(w, 4, {}, every=True)]
        assert {"tp": 1, "pp": 1, "dp": 1, "fsdp": 1, "ep": 1, "cp": 1, "sp": 4} in layouts
        # serving: not a serving strategy, so one replica's layouts keep sp at 1
        assert {d["sp"] for d in serving_layouts(w, 8)} == {1}
        # the docs' table lists every registered strategy: the toy's row is what it would add
        assert _table_row(sp) == (
            "| `sp` | `--sp N` | seq | 4 | replicated, replicated, replicated, dims, dims | "
            "yes | no | no | - |"
        )
    assert "sp" not in names()
    code, out, _ = run_cli(capsys, "plan", "--help")
    assert "--sp N" not in out


def _table_row(s: Strategy) -> str:
    m = s.memory
    memory = ", ".join((m.weights, m.gradients, m.optimizer, m.activations, m.kv_cache))
    flags = ", ".join(f"`{k.flag}`" for k in s.knobs) or "-"
    yes = {True: "yes", False: "no"}
    rank = f"{s.mesh_rank:g}"
    cells = (
        f"`{s.name}`",
        f"`--{s.word} N`",
        ", ".join(s.splits),
        rank,
        memory,
        yes[s.searched],
        yes[s.optional],
        yes[s.serving],
        flags,
    )
    return "| " + " | ".join(cells) + " |"


def strategy_table() -> str:
    """The registry as the docs' table (docs/stack-and-plans.md, "The registered strategies")."""
    head = (
        "| strategy | flag (API keyword: the name) | splits | mesh rank | memory: weights, "
        "gradients, optimizer, activations, KV cache | searched | optional | serving | "
        "its execution flags |\n|---|---|---|---|---|---|---|---|---|"
    )
    return "\n".join([head, *(_table_row(s) for s in strategies())])


def test_docs_strategy_table_is_the_registry() -> None:
    text = (DOCS / "stack-and-plans.md").read_text()
    assert strategy_table() in text


def test_whole_model_flags_table_lists_every_strategy_knob() -> None:
    text = (DOCS / "whole-model.md").read_text()
    table = text[text.index("## The flags") :]
    table = table[: table.index("\n\n", table.index("| flag |"))]
    for knob in knobs():
        assert f"| `{knob.flag}" in table, knob.flag


def test_knob_flags_reach_the_plan(capsys: pytest.CaptureFixture[str]) -> None:
    # every strategy's knob parses on `plan` and reaches the plan's Execution
    from shardline.cli.execution_args import execution_from_args
    from shardline.cli.main import build_parser

    args = build_parser().parse_args(
        [
            "plan",
            "--model",
            "llama-3.1-8b",
            "--devices",
            "8",
            "--interleave",
            "2",
            "--zero",
            "1",
            "--no-overlap-param-gather",
            "--sequence-parallel",
            "--tp-overlap",
            "--ep-overlap",
            "--ep-dispatch",
            "hierarchical",
            "--ep-comm-sms",
            "16",
            "--cp-kind",
            "all-gather",
        ]
    )
    assert execution_from_args(args) == {
        "interleave": 2,
        "zero": 1,
        "overlap_param_gather": False,
        "sequence_parallel": True,
        "tp_overlap": True,
        "ep_overlap": True,
        "ep_dispatch": "hierarchical",
        "ep_comm_sms": 16,
        "cp_kind": "all-gather",
    }
    assert [k.flag for k in knobs()] == [
        "--sequence-parallel",
        "--tp-overlap",
        "--interleave",
        "--zero",
        "--overlap-param-gather",
        "--ep-overlap",
        "--ep-dispatch",
        "--ep-comm-sms",
        "--cp-kind",
    ]
    argv = ("plan", "--model", "llama-3.1-8b", "--devices", "8", "--interleave", "0")
    code, _, err = run_cli(capsys, *argv)
    assert (code, err.strip()) == (2, "error: --interleave must be a positive integer, got '0'")


def test_readme_plan_row_lists_every_strategy_flag() -> None:
    readme = (ROOT / "README.md").read_text()
    flags = " ".join(f"--{s.word}" for s in strategies())
    assert f"`stack`, `plan [{flags} N]" in readme
