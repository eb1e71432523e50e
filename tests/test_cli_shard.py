"""CLI smoke tests of `shard`, `collective`, `compare` and sharded `einsum`: the JSON contract,
the text output's first line, and bad input (exit 2, one `error:` line on stderr only)."""

from __future__ import annotations

import json

import pytest

from shardline.cli.main import main

SHARDED_KEYS = {
    "per_device",
    "collectives",
    "t_network_s",
    "bound",
    "t_lower_s",
    "t_upper_s",
    "thresholds",
}


def _json(capsys: pytest.CaptureFixture[str], argv: list[str]) -> dict:  # type: ignore[type-arg]
    assert main(argv) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def _check_sharded_contract(out: dict) -> None:  # type: ignore[type-arg]
    assert set(out) >= SHARDED_KEYS
    pd = out["per_device"]
    assert {"flops", "bytes", "t_compute_s", "t_memory_s"} <= set(pd) and "total" in pd["bytes"]
    for c in out["collectives"]:
        assert c["kind"] in ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
        assert {"operand", "axes", "bytes", "t_s"} <= set(c) and isinstance(c["axes"], list)
    assert out["bound"] in ("compute", "memory", "network")
    for t in out["thresholds"]:
        assert {"name", "formula", "value"} <= set(t)
    assert out["t_lower_s"] <= out["t_upper_s"]


def test_sharded_einsum_json(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(
        capsys,
        [
            "einsum",
            "A[M_X,K] * B[K,N_Y] -> C[M_X,N_Y]",
            "--dims",
            "M=8192,K=8192,N=8192",
            "--mesh",
            "X=4,Y=2",
            "--json",
        ],
    )
    _check_sharded_contract(out)
    assert out["per_device"]["flops"] == 2 * 8192**3 // 8
    assert out["collectives"] == [] and out["mesh"] == {"X": 4, "Y": 2}


def test_sharded_einsum_collectives_and_options(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(
        capsys,
        [
            "einsum",
            "A[M,K_X] * B[K_X,N] -> C[M,N]",
            "--dims",
            "M=64,K=4096,N=4096",
            "--mesh",
            "X=4",
            "--devices",
            "4",
            "--hw",
            "tpu-v5e",
            "--topology",
            "X=ring",
            "--link-bw",
            "45 GB/s",
            "--latency",
            "1us",
            "--no-overlap",
            "--reduce-dtype",
            "bf16",
            "--json",
        ],
    )
    _check_sharded_contract(out)
    (c,) = out["collectives"]
    assert c["kind"] == "all_reduce" and c["axes"] == ["X"] and c["bytes"] == 2 * 64 * 4096
    # ring all-reduce: 2 (X-1)/X V/(2W) + 2 alpha floor(X/2)
    assert c["t_s"] == pytest.approx(2 * 3 / 4 * c["bytes"] / 9e10 + 2 * 2e-6)
    assert out["overlap"] is False
    pd = out["per_device"]
    assert out["t_s"] == pytest.approx(max(pd["t_compute_s"], pd["t_memory_s"]) + c["t_s"])


def test_sharded_einsum_text_first_line_is_the_call(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            [
                "einsum",
                "A[M,K_X] * B[K_X,N] -> C[M,N_X]",
                "--dims",
                "M=8192,K=8192,N=8192",
                "--mesh",
                "X=8",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[4].startswith("NETWORK-BOUND: t_network")
    assert "reduce-scatter C over X" in text and "(n-1)/n·V/W + α" in text


def test_shard_json_and_text(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(
        capsys, ["shard", "8192", "8192", "8192", "--devices", "8", "--along", "k", "--json"]
    )
    _check_sharded_contract(out)
    assert out["strategy"] == "along k, output split" and out["bound"] == "network"
    bandwidth_only, t = out["thresholds"]
    assert bandwidth_only["name"] == "K_network_bound_below"
    assert bandwidth_only["value"] == pytest.approx(4 * 989.4e12 * 7 / (2 * 450e9))
    assert t["name"] == "K_network_bound_below_with_latency"
    assert t["value"] == pytest.approx(
        4 * 989.4e12 * 7 / (2 * 450e9) + 1e-6 * 8 * 989.4e12 / (2 * 8192 * 8192)
    )
    out = _json(
        capsys,
        [
            "shard",
            "8192",
            "8192",
            "8192",
            "--devices",
            "8",
            "--along",
            "m",
            "--output",
            "replicated",
            "--resident",
            "a",
            "--hw",
            "tpu-v5e",
            "--json",
        ],
    )
    assert [(c["kind"], c["operand"]) for c in out["collectives"]] == [
        ("all_gather", "B"),
        ("all_gather", "C"),
    ]
    assert main(["shard", "4096", "4096", "4096", "--devices", "4", "--along", "n"]) == 0
    assert capsys.readouterr().out.splitlines()[4].startswith("COMPUTE-BOUND")


def test_collective_json_and_text(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(
        capsys,
        [
            "collective",
            "all-gather",
            "--bytes",
            "33554432",
            "--devices",
            "4",
            "--hw",
            "tpu-v5e",
            "--json",
        ],
    )
    keys = {"kind", "bytes", "devices", "topology", "t_s", "t_bandwidth_s", "t_latency_s"}
    assert set(out) >= keys
    assert out["kind"] == "all_gather" and out["devices"] == 4
    assert out["t_bandwidth_s"] == pytest.approx(3 / 4 * 33554432 / 4.5e10)  # line of 4
    assert out["t_s"] == pytest.approx(out["t_bandwidth_s"] + out["t_latency_s"])
    out = _json(
        capsys,
        [
            "collective",
            "reduce_scatter",
            "--bytes",
            "64 MiB",
            "--devices",
            "16",
            "--topology",
            "ring",
            "--link-bw",
            "1e11",
            "--latency",
            "0",
            "--json",
        ],
    )
    assert out["t_s"] == pytest.approx(15 / 16 * 2**26 / 2e11) and out["t_latency_s"] == 0
    assert main(["collective", "all-to-all", "--bytes", "1e3", "--devices", "8"]) == 0
    assert capsys.readouterr().out.splitlines()[3].startswith("LATENCY-BOUND")


@pytest.mark.parametrize(
    ("hw", "n", "word"),
    [
        ("tpu-v5e", 16, "ring"),
        ("tpu-v6e", 8, "line"),
        ("tpu-v4", 12, "ring"),
        ("tpu-v4", 6, "line"),
        ("h100-sxm", 8, "switch"),
        ("h100-sxm", 32, "hierarchical"),
        ("tpu-v5e", 64, "torus"),
    ],
)
def test_collective_topology_is_the_topology_word(
    capsys: pytest.CaptureFixture[str], hw: str, n: int, word: str
) -> None:
    out = _json(
        capsys,
        [
            "collective",
            "reduce-scatter",
            "--bytes",
            "1e8",
            "--devices",
            str(n),
            "--hw",
            hw,
            "--json",
        ],
    )
    assert out["topology"] == word and out["topology_detail"]
    for override in ("ring", "line", "unidirectional-ring", "switch"):
        out = _json(
            capsys,
            [
                "collective",
                "all-gather",
                "--bytes",
                "1e8",
                "--devices",
                str(n),
                "--hw",
                hw,
                "--topology",
                override,
                "--json",
            ],
        )
        assert out["topology"] == override


def test_compare_json_and_text(capsys: pytest.CaptureFixture[str]) -> None:
    out = _json(
        capsys, ["compare", "8192", "8192", "8192", "--devices", "64", "--hw", "tpu-v5e", "--json"]
    )
    s = out["strategies"]
    assert len(s) == 3 + 5 * 9
    assert [x["t_lower_s"] for x in s] == sorted(x["t_lower_s"] for x in s)
    for x in s:
        assert {
            "spec",
            "mesh",
            "bound",
            "t_lower_s",
            "t_compute_s",
            "t_memory_s",
            "t_network_s",
        } <= set(x)
    assert out["two_d_wins"] is True
    assert (
        main(
            [
                "compare",
                "8192",
                "8192",
                "8192",
                "--devices",
                "16",
                "--top",
                "3",
                "--output",
                "replicated",
            ]
        )
        == 0
    )
    text = capsys.readouterr().out.splitlines()
    assert text[2].startswith("BEST: ") and text[-1].startswith("(")
    # a bare --topology word applies to every axis, 1D meshes included
    out = _json(
        capsys,
        [
            "compare",
            "4096",
            "4096",
            "4096",
            "--devices",
            "8",
            "--topology",
            "ring",
            "--link-bw",
            "1e11",
            "--output",
            "replicated",
            "--json",
        ],
    )
    one_d = next(x for x in out["strategies"] if x["spec"] == "A[M_X,K] * B[K,N] -> C[M,N]")
    # all-gather of C (2 MN bytes) on a ring of 8: 7/8 V / (2W) + 4 hops x 1 us
    assert one_d["t_network_s"] == pytest.approx(7 / 8 * 2 * 4096**2 / 2e11 + 4e-6)


BAD = [
    (["einsum", "A[M_X,K] * B[K,N] -> C[M_X,N]", "--dims", "M=8,K=8,N=8"], "no --mesh"),
    (
        ["einsum", "A[M_Z,K] * B[K,N] -> C[M_Z,N]", "--dims", "M=8,K=8,N=8", "--mesh", "X=2"],
        "not declared",
    ),
    (
        [
            "einsum",
            "A[M_X,K] * B[K,N] -> C[M_X,N]",
            "--dims",
            "M=8,K=8,N=8",
            "--mesh",
            "X=2",
            "--devices",
            "4",
        ],
        "has 2 devices but --devices is 4",
    ),
    (
        ["einsum", "A[M_X,K] * B[K,N] -> C[M_X,N]", "--dims", "M=9,K=8,N=8", "--mesh", "X=2"],
        "--pad",
    ),
    (
        ["einsum", "A[M_X,K_X] * B[K,N] -> C[M_X,N]", "--dims", "M=8,K=8,N=8", "--mesh", "X=2"],
        "shards two dimensions",
    ),
    (
        [
            "einsum",
            "A[M_X,K] * B[K,N] -> C[M_X,N]",
            "--dims",
            "M=8,K=8,N=8",
            "--mesh",
            "X=2",
            "--topology",
            "X=star",
        ],
        "unknown topology",
    ),
    (
        ["einsum", "A[M_X,K] * B[K,N] -> C[M_X,N]", "--dims", "M=8,K=8,N=8", "--mesh", "X=-2"],
        "positive",
    ),
    (["shard", "0", "8", "8", "--devices", "2", "--along", "m"], "positive"),
    (["shard", "8", "8", "8", "--devices", "0", "--along", "m"], "positive"),
    (["shard", "8", "8", "8", "--devices", "3", "--along", "k"], "not divisible"),
    (["shard", "8", "8", "8", "--devices", "2", "--along", "q"], "invalid choice"),
    (
        ["shard", "8", "8", "8", "--devices", "2", "--along", "k", "--topology", "mesh"],
        "unknown topology",
    ),
    (["collective", "all-gather", "--bytes", "0", "--devices", "4"], "positive"),
    (["collective", "all-gather", "--bytes", "-5", "--devices", "4"], "positive"),
    (["collective", "all-gather", "--bytes", "1e6", "--devices", "0"], "positive"),
    (["collective", "all-smash", "--bytes", "1e6", "--devices", "4"], "unknown collective"),
    (
        ["collective", "all-gather", "--bytes", "1e6", "--devices", "4", "--topology", "torus"],
        "torus",
    ),
    (["compare", "8", "8", "8", "--devices", "-1"], "positive"),
    (["compare", "8", "8", "8", "--devices", "4", "--top", "0"], "--top"),
]


@pytest.mark.parametrize(("argv", "message"), BAD, ids=[" ".join(a[:3]) + " " + m for a, m in BAD])
def test_bad_input_is_one_error_line(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    try:
        code = main(argv)
    except SystemExit as exc:  # argparse usage errors
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    assert code == 2
    assert captured.out == ""
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], captured.err
