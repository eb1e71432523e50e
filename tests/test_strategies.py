"""The strategy registry: each strategy's communication for one layer by hand, the candidate
degrees against the nested loops they replaced, and a strategy added from the docs' example."""

from __future__ import annotations

import re
from math import prod
from pathlib import Path

import pytest

from shardline.io.workload_toml import load_workload
from shardline.planning.api import candidates, plan
from shardline.planning.network import MeshNetwork
from shardline.report.plan_text import render_plan
from shardline.strategies import (
    Degrees,
    LayerView,
    StageView,
    by_mesh,
    local_dims,
    names,
    registered,
    strategies,
    strategy,
)
from shardline.workload.templates import ffn, transformer
from shardline.workload.workload import Layer, Workload, backward_layers
from tests.doc_strategy import doc_section, doc_strategy

ROOT = Path(__file__).resolve().parent.parent
A100_NVLINK_EGRESS = 12 * 25e9  # 12 NVLink 3 links x 25 GB/s one-way (catalog a100-40gb)
A100_HOP_S = 1e-6
M, K, N = 1024, 2048, 4096  # x[M,K] * w[K,N] -> y[M,N], bf16 (2 bytes)


def _layer(tp_dim: str) -> Layer:
    return Layer(
        "mm", "x[M,K] * w[K,N] -> y[M,N]", {"M": M, "K": K, "N": N}, weights=("w",),
        tp_dims=(tp_dim,), axes={"M": "batch"},
    )  # fmt: skip


def _view(layer: Layer, deg: Degrees, training: bool = True) -> LayerView:
    def local(other: Layer, d: object) -> dict[str, int]:
        return local_dims(other, Degrees(d), batch_dim="M")  # type: ignore[arg-type]

    grads = backward_layers(layer) if training else []
    return LayerView(
        layer=layer,
        count=3,
        dims=local(layer, deg),
        grads=tuple((g, local(g, deg)) for g in grads),
        following=layer,
        degrees=deg,
        local=local,
        training=training,
        gradient_ways=deg["fsdp"],
    )


def _comm(name: str, deg: Degrees, layer: Layer) -> list[tuple[str, str, float, float, bool]]:
    net = MeshNetwork(_chip(), deg)
    terms = strategy(name).layer_comm(_view(layer, deg), deg[name], net)
    return [(t.kind, t.phase, t.bytes, t.t_s, t.critical) for t in terms]


def _chip():  # type: ignore[no-untyped-def]
    from shardline.hardware import resolve_chip

    return resolve_chip("a100-40gb")


# On the A100's NVSwitch with X = 2 devices (collectives chapter of "How to Scale Your Model"):
# all-reduce 2 (X-1)/X V/W + 2 alpha; all-gather and reduce-scatter (X-1)/X V/W + alpha.
def _ar(v: float) -> float:
    return 2 * (2 - 1) / 2 * v / A100_NVLINK_EGRESS + 2 * A100_HOP_S


def _ag(v: float) -> float:
    return (2 - 1) / 2 * v / A100_NVLINK_EGRESS + A100_HOP_S


def test_tp_row_parallel_all_reduces_the_output_forward_only() -> None:
    # K split and contracted: y[M,N] partial sums, all-reduced, V = 2 M N. Backward: dX[M,K]
    # (contracts N, not split) and dW[K,N] (contracts M) need nothing.
    (term,) = _comm("tp", Degrees(tp=2), _layer("K"))
    v = 2 * M * N
    assert term[:3] == ("all_reduce", "forward", v) and term[4] is True
    assert term[3] == pytest.approx(_ar(v))


def test_tp_column_parallel_gathers_and_all_reduces_dx() -> None:
    # N split, not contracted, and the next layer (itself) does not take N split: all-gather
    # y[M,N] (V = 2 M N at full size), reduce-scatter its gradient backward; dX = dY . W^T
    # contracts the split N: all-reduce dX[M,K] (V = 2 M K).
    terms = _comm("tp", Degrees(tp=2), _layer("N"))
    v_y, v_dx = 2 * M * N, 2 * M * K
    assert [t[:3] for t in terms] == [
        ("all_gather", "forward", v_y),
        ("reduce_scatter", "backward", v_y),
        ("all_reduce", "backward", v_dx),
    ]
    assert [t[3] for t in terms] == pytest.approx([_ag(v_y), _ag(v_y), _ar(v_dx)])
    assert all(t[4] for t in terms)  # all on the critical path


def test_fsdp_gathers_weights_twice_and_reduce_scatters_the_gradient() -> None:
    # W = 2 K N bytes: all-gather before the forward and before dX; reduce-scatter dW (2 K N).
    terms = _comm("fsdp", Degrees(fsdp=2), _layer("K"))
    w = 2 * K * N
    assert [t[:3] for t in terms] == [
        ("all_gather", "forward", w),
        ("all_gather", "backward", w),
        ("reduce_scatter", "backward", w),
    ]
    assert [t[3] for t in terms] == pytest.approx([_ag(w), _ag(w), _ag(w)])
    assert not any(t[4] for t in terms)  # overlapped with compute


def test_dp_all_reduces_the_gradient_shard_once_per_step() -> None:
    # dW = 2 K N bytes; with fsdp = 2 as well, dp all-reduces the FSDP shard: V = 2 K N / 2.
    deg = Degrees(dp=2)
    net = MeshNetwork(_chip(), deg)
    (term,) = strategy("dp").layer_comm(_view(_layer("K"), deg), 2, net)
    assert (term.kind, term.bytes, term.once_per_step, term.calls) == (
        "all_reduce",
        2 * K * N,
        True,
        3,
    )
    assert term.t_s == pytest.approx(_ar(2 * K * N))
    both = Degrees(dp=2, fsdp=2)
    view = _view(_layer("K"), both)
    (shard,) = strategy("dp").layer_comm(view, 2, MeshNetwork(_chip(), both))
    assert shard.bytes == 2 * K * N / 2


def test_pp_sends_the_boundary_activation() -> None:
    # send y[M/2, N] (2 microbatches) to the next stage forward, its gradient back: V/W + alpha.
    deg = Degrees(pp=2)
    layer = _layer("K")
    dims = local_dims(layer, deg, batch_dim="M", microbatches=2)
    v = 2 * (M // 2) * N
    net = MeshNetwork(_chip(), deg)
    first = strategy("pp").stage_comm(StageView(layer, dims, 0, 2, True), 2, net)
    last = strategy("pp").stage_comm(StageView(layer, dims, 1, 2, True), 2, net)
    assert [(t.kind, t.phase, t.bytes) for t in first] == [("send", "forward", v)]
    assert [(t.kind, t.phase, t.bytes) for t in last] == [("send", "backward", v)]
    assert first[0].t_s == pytest.approx(v / A100_NVLINK_EGRESS + A100_HOP_S)


def test_registry_order_mesh_order_and_memory_splits() -> None:
    assert names() == ("tp", "pp", "dp", "fsdp", "ep", "cp")
    # Megatron: tp innermost, then cp; ep (mesh rank 1, after fsdp in the registry) inside dp
    assert [s.name for s in by_mesh()] == ["tp", "cp", "fsdp", "ep", "dp", "pp"]
    assert {s.name: s.splits for s in strategies()} == {
        "tp": ("tensor",),
        "pp": ("layers",),
        "dp": ("batch",),
        "fsdp": ("batch",),
        "ep": ("batch",),
        "cp": ("seq",),
    }
    assert [s.name for s in strategies() if s.memory.optimizer == "sharded"] == ["fsdp"]
    deg = Degrees(tp=2, fsdp=4)
    assert deg == {"tp": 2, "pp": 1, "dp": 1, "fsdp": 4, "ep": 1, "cp": 1} and deg.tp == 2
    assert (deg.devices, deg.replicas, deg.stages, deg.name) == (8, 4, 1, "tp2-fsdp4")


def _nested_loops(workload: Workload, devices: int) -> list[dict[str, int]]:
    """The candidate search before the registry: tp, pp, dp loops over divisors, fsdp the rest
    (cp is never searched free: it stays 1);
    the free search's tp divides every layer's tensor-parallel room (the product of the sizes of
    its tp_dims), so that no device is left without a share."""

    def divisors(n: int) -> list[int]:
        return [d for d in range(1, n + 1) if n % d == 0]

    rooms = [prod(layer.dims[d] for d in layer.tp_dims) for layer in workload.layers]
    out = []
    for tp in divisors(devices):
        if any(room % tp for room in rooms):
            continue
        for pp in divisors(devices // tp):
            if workload.pipeline_splits(pp) is None:
                continue
            for dp in divisors(devices // (tp * pp)):
                fsdp = devices // (tp * pp * dp)
                if dp * fsdp > workload.batch or (dp * fsdp > 1 and workload.batch_dim is None):
                    continue
                out.append({"tp": tp, "pp": pp, "dp": dp, "fsdp": fsdp, "ep": 1, "cp": 1})
    return out


@pytest.mark.parametrize("devices", [1, 2, 6, 8, 12, 16, 64])
def test_candidates_equal_the_nested_loops(devices: int) -> None:
    workloads = [
        load_workload(ROOT / "examples" / "seed003_stack.toml"),
        transformer(d_model=512, d_ff=2048, heads=8, batch=4, seq_len=64, layers=6),
        ffn(d_model=256, d_ff=1024, batch=3, layers=5),
    ]
    free = {name: None for name in names()}
    for w in workloads:
        got = [d.as_dict() for d in candidates(w, devices, free)]
        assert got == _nested_loops(w, devices)


_doc_section = doc_section
_doc_strategy = doc_strategy


def test_docs_example_strategy_shows_up_in_plan_candidates_and_output() -> None:
    sp = _doc_strategy()
    w = ffn(d_model=1024, d_ff=4096, batch=2, seq_len=4096, gated=False, layers=4)
    with registered(sp):
        ps = plan(w, "h100-sxm", 4)
        assert "sp" in names() and Degrees(sp=4).devices == 4
        assert any(p.degrees["sp"] == 4 for p in ps.plans)
        sp4 = next(p for p in ps.plans if p.name == "sp4")
        # tokens split 4 ways: each device multiplies a quarter of the tokens with all weights;
        # training all-reduces each dW (2 D F bytes, 2 per layer) once per step over the 4 devices
        (ar,) = sp4.comm
        assert (ar.purpose, ar.kind, ar.calls) == ("sp", "all_reduce", 2 * 4)
        assert ar.bytes == 2 * 4 * 2 * 1024 * 4096
        shown = render_plan(ps, top=5)
    assert "sp" not in names()
    blocks = re.findall(r"```text\n(.*?)```", _doc_section(), re.S)
    assert blocks[-1].rstrip("\n") == shown.rstrip("\n")  # the last text block: plan's output


def test_tp_collectives_come_from_the_layout_pricer_where_one_axis_expresses_the_split() -> None:
    # One split dim divided evenly: shardline.sharding.layout.price_layout prices the einsum
    # x[M,K_T] * w[K_T,N] -> y[M,N] on a 2-device axis: all-reduce of y (2 M N bytes, bf16).
    from shardline.strategies.tp import priced_collectives

    net = MeshNetwork(_chip(), Degrees(tp=2))
    full = {"M": M, "K": K, "N": N}
    priced = priced_collectives(_layer("K"), full, 2, True, net)
    assert priced is not None
    ((kind, v, t, t_pred),) = priced
    assert t_pred >= t  # the realistic time (bus efficiency) is never below line rate
    assert (kind, v) == ("all_reduce", 2 * M * N) and t == pytest.approx(_ar(2 * M * N))
    # column-parallel, output wanted whole: all-gather of y (V = 2 M N)
    assert [c[:2] for c in priced_collectives(_layer("N"), full, 2, False, net) or []] == [
        ("all_gather", 2 * M * N)
    ]
    # K = 3 does not split evenly over 2 devices: the rule prices it (None here)
    odd = Layer("odd", "x[M,K] * w[K,N] -> y[M,N]", {"M": 8, "K": 3, "N": 8}, tp_dims=("K",))
    assert priced_collectives(odd, {"M": 8, "K": 3, "N": 8}, 2, True, net) is None


def test_plan_options_equal_the_keywords_and_unknown_keywords_fail() -> None:
    from shardline.planning.api import PlanOptions

    w = load_workload(ROOT / "examples" / "seed003_stack.toml")
    by_keyword = plan(w, "a100-40gb", 2, tp=2).plans[0]
    by_options = plan(w, "a100-40gb", 2, options=PlanOptions(degrees={"tp": 2})).plans[0]
    assert by_keyword.name == by_options.name == "tp2"
    assert by_keyword.latency_s == by_options.latency_s
    with pytest.raises(TypeError, match="xp"):
        plan(w, "a100-40gb", 2, xp=2)
