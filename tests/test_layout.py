"""The layout pricer (`shardline.sharding.layout.price_layout`): per-device costs and collectives
derived by hand from the formulas of docs/model.md sections 4 and 5 ("How to Scale Your Model",
sharding chapter), the choice between legal layouts, tensor-parallel layers with lowercase dim
names, the reduce dtype, and the memo."""

from __future__ import annotations

import doctest
from typing import Any

import pytest

import shardline.sharding.compare
import shardline.sharding.layout
from shardline.basics.options import Precision
from shardline.collectives import NetworkOptions, mesh_networks
from shardline.hardware import Chip, load_chip
from shardline.ops.einsum import parse_einsum
from shardline.sharding.algebra import shard_einsum
from shardline.sharding.layout import LayoutPrice, ShardOptions, price_layout
from shardline.sharding.mesh import parse_mesh

H100 = load_chip("h100-sxm")  # P = 989.4e12 FLOP/s bf16, W_mem = 3.35e12 B/s
P, W_MEM = 989.4e12, 3.35e12
W, ALPHA = 45e9, 1e-6  # the link and hop latency every test below gives


def _price(
    spec: str,
    dims: dict[str, int],
    mesh_text: str,
    topology: dict[str, str],
    precision: Precision | None = None,
    options: ShardOptions | None = None,
    chip: Chip = H100,
) -> LayoutPrice:
    mesh = parse_mesh(mesh_text)
    nets = mesh_networks(chip, mesh.axes, NetworkOptions(topology, W, ALPHA))
    return price_layout(parse_einsum(spec), dims, mesh, nets, chip, precision, options)


def _times(price: LayoutPrice) -> tuple[Any, ...]:
    c = price.cost
    return c.t_compute_s, c.t_memory_s, c.t_network_s, c.t_lower_s, c.t_upper_s


def test_k_split_on_a_ring_all_reduces_fp32_partial_sums() -> None:
    # A[M,K_X] * B[K_X,N] -> C[M,N] on a bidirectional ring of n = 4: every device multiplies
    # A[M, K/4] by B[K/4, N] into a partial C[M, N]; the all-reduce of V = M·N·4 B (fp32) takes
    # 2·(n-1)/n·V/(2W) + 2·⌊n/2⌋·α and each device sends 2·(n-1)/n·V.
    m = k = n_ = 4096
    p = _price("A[M,K_X] * B[K_X,N] -> C[M,N]", {"M": m, "K": k, "N": n_}, "X=4", {"X": "ring"})
    v = m * n_ * 4
    assert [(c.kind, c.operand, c.axes, c.bytes, c.dtype) for c in p.collectives] == [
        ("all_reduce", "C", ("X",), v, "fp32")
    ]
    t_net = 2 * 3 / 4 * v / (2 * W) + 2 * 2 * ALPHA  # = 0.75·V/W + 4α = 1.1225 ms
    t_comp = 2 * m * (k // 4) * n_ / P
    hbm = 2 * (m * k // 4 + k // 4 * n_) + 4 * m * n_  # bf16 A, B; the whole C in fp32
    assert p.cost.flops == 2 * m * (k // 4) * n_ and p.cost.hbm_bytes == hbm
    assert p.cost.net_bytes == pytest.approx(2 * 3 / 4 * v, rel=1e-12)
    # t_upper_s is the serial bound of every Cost: compute + memory + the collectives
    expected = (t_comp, hbm / W_MEM, t_net, t_net, t_comp + hbm / W_MEM + t_net)
    assert _times(p) == pytest.approx(expected, rel=1e-12)
    assert t_net == pytest.approx(1.1225e-3, rel=1e-4)
    assert p.choice == {"X": "K"} and p.shapes["A"] == [m, k // 4] and p.shapes["C"] == [m, n_]
    assert p.cost.bound == "network" and p.t_s == p.cost.t_lower_s


def test_tensor_parallel_layers_with_lowercase_dims() -> None:
    b, s, d, f = 8, 2048, 4096, 16384
    dims = {"b": b, "s": s, "d": d, "f": f}
    # column-parallel: the weight's f is split over T = 4, the activations are whole: no
    # communication; 2·b·s·d·f/4 FLOPs and bf16 bytes of x, w/4 and y/4
    col = _price("x[b,s,d] * w[d,f_T] -> y[b,s,f_T]", dims, "T=4", {"T": "line"})
    assert col.collectives == () and col.cost.t_network_s == 0
    assert col.cost.flops == 2 * b * s * d * f // 4
    assert col.cost.hbm_bytes == 2 * (b * s * d + d * f // 4 + b * s * f // 4)
    assert col.shapes == {"x": [b, s, d], "w": [d, f // 4], "y": [b, s, f // 4]}
    # row-parallel: f contracted over T leaves partial z; a plan reduces in the output's dtype
    # (bf16): all-reduce of V = b·s·d·2 B on a line of 4: 2·(n-1)/n·V/W + 2·(n-1)·α
    row = _price(
        "h[b,s,f_T] * w2[f_T,d] -> z[b,s,d]",
        dims,
        "T=4",
        {"T": "line"},
        precision=Precision(dtype="bf16", reduce="bf16"),
    )
    v = b * s * d * 2
    assert [(c.kind, c.operand, c.axes, c.bytes, c.dtype) for c in row.collectives] == [
        ("all_reduce", "z", ("T",), v, "bf16")
    ]
    assert row.cost.t_network_s == pytest.approx(2 * 3 / 4 * v / W + 2 * 3 * ALPHA, rel=1e-12)
    assert row.dtypes["reduce"] == "bf16"
    # the run option, when given, wins over the precision's reduce dtype
    fp32 = _price(
        "h[b,s,f_T] * w2[f_T,d] -> z[b,s,d]",
        dims,
        "T=4",
        {"T": "line"},
        precision=Precision(dtype="bf16", reduce="bf16"),
        options=ShardOptions(reduce_dtype="fp32"),
    )
    assert fp32.collectives[0].bytes == 2 * v and fp32.dtypes["reduce"] == "fp32"


@pytest.mark.parametrize("k, chosen", [(1024, "X->replicated"), (65536, "X->K")])
def test_case_2_prices_both_choices_and_keeps_the_cheaper(k: int, chosen: str) -> None:
    # A[M,K_X] * B[K,N] -> C[M,N] on a ring of n = 8 (case 2): either all-gather A (V = M·K·2 B,
    # (n-1)/n·V/(2W) + ⌊n/2⌋·α) and multiply the whole problem on every device, or slice B along
    # K for free and all-reduce the partial C (V = M·N·4 B, 2·(n-1)/n·V/(2W) + 2·⌊n/2⌋·α).
    m = n_ = 8192
    p = _price("A[M,K_X] * B[K,N] -> C[M,N]", {"M": m, "K": k, "N": n_}, "X=8", {"X": "ring"})
    t_gather = 7 / 8 * (m * k * 2) / (2 * W) + 4 * ALPHA
    t_reduce = 2 * 7 / 8 * (m * n_ * 4) / (2 * W) + 8 * ALPHA
    whole = max(2 * m * k * n_ / P, 2 * (m * k + k * n_ + m * n_) / W_MEM)
    split = max(2 * m * k * n_ / 8 / P, 2 * (m * k // 8 + k * n_ // 8 + m * n_) / W_MEM)
    by_choice = {a.choice: a for a in p.alternatives}
    assert set(by_choice) == {"X->replicated", "X->K"}
    assert by_choice["X->replicated"].t_s == pytest.approx(max(whole, t_gather), rel=1e-12)
    assert by_choice["X->K"].t_s == pytest.approx(max(split, t_reduce), rel=1e-12)
    assert by_choice["X->replicated"].collectives == ("all_gather A over X",)
    assert by_choice["X->K"].collectives == ("all_reduce C over X",)
    assert [a.choice for a in p.alternatives if a.chosen] == [chosen]
    assert p.t_s == min(a.t_s for a in p.alternatives)


def test_a_tie_keeps_the_book_default() -> None:
    # on a one-device axis both choices cost the same (no network time, no split work), so the
    # book's default, all-gather (X->replicated), is kept
    p = _price("A[M,K_X] * B[K,N] -> C[M,N]", {"M": 64, "K": 64, "N": 64}, "X=1", {})
    assert p.alternatives[0].t_s == p.alternatives[1].t_s and p.alternatives[0].chosen
    assert p.choice == {"X": None} and [c.kind for c in p.collectives] == ["all_gather"]


def test_not_resident_inputs_are_gathered_first() -> None:
    # B stored 1/4 per device: all-gather over X of its spec layout B[K,N] (V = K·N·2 B) on a
    # line of 4: (n-1)/n·V/W + (n-1)·α; each device sends (n-1)/n·V
    k, n_ = 2048, 1024
    p = _price(
        "A[M_X,K] * B[K,N] -> C[M_X,N]",
        {"M": 4096, "K": k, "N": n_},
        "X=4",
        {"X": "line"},
        options=ShardOptions(resident=frozenset({"A"})),
    )
    v = k * n_ * 2
    assert [(c.kind, c.operand, c.bytes) for c in p.collectives] == [("all_gather", "B", v)]
    assert p.cost.t_network_s == pytest.approx(3 / 4 * v / W + 3 * ALPHA, rel=1e-12)
    assert p.cost.net_bytes == pytest.approx(3 / 4 * v, rel=1e-12)
    assert p.resident == ("A",)


def test_serial_and_overlapped_times() -> None:
    dims = {"M": 4096, "K": 4096, "N": 4096}
    on = _price("A[M,K_X] * B[K_X,N] -> C[M,N]", dims, "X=4", {"X": "ring"})
    off = _price(
        "A[M,K_X] * B[K_X,N] -> C[M,N]",
        dims,
        "X=4",
        {"X": "ring"},
        options=ShardOptions(overlap=False),
    )
    tc, tm, tn = on.cost.t_compute_s, on.cost.t_memory_s, on.cost.t_network_s
    assert on.t_s == max(tc, tm, tn) and off.t_s == max(tc, tm) + tn
    assert on.cost.t_upper_s == pytest.approx(tc + tm + tn, rel=1e-12)  # nothing overlapped
    assert off.cost == on.cost  # the same work; only the step rule differs


def test_repeated_calls_are_remembered() -> None:
    args: dict[str, Any] = {"dims": {"M": 512, "K": 512, "N": 512}, "topology": {"X": "ring"}}
    first = _price("A[M,K_X] * B[K_X,N] -> C[M,N]", mesh_text="X=2", **args)
    assert _price("A[M,K_X] * B[K_X,N] -> C[M,N]", mesh_text="X=2", **args) is first
    fast = H100.with_overrides(compute_dtype="bf16", flops_per_s=2 * P)
    other = _price("A[M,K_X] * B[K_X,N] -> C[M,N]", mesh_text="X=2", chip=fast, **args)
    assert other.cost.t_compute_s == pytest.approx(first.cost.t_compute_s / 2, rel=1e-12)


def test_shard_einsum_holds_the_layout_cost() -> None:
    spec, dims = "A[M_X,K] * B[K,N_Y] -> C[M_X,N_Y]", {"M": 8192, "K": 8192, "N": 8192}
    r = shard_einsum(spec, dims, "X=4,Y=2", H100)
    mesh = parse_mesh("X=4,Y=2")
    p = price_layout(parse_einsum(spec), dims, mesh, mesh_networks(H100, mesh.axes), H100)
    assert r.cost == p.cost and r.per_device.flops == 2 * 8192**3 // 8
    assert r.to_dict()["per_device"]["network_bytes"] == 0


def test_docstring_examples_run() -> None:
    for module in (shardline.sharding.layout, shardline.sharding.compare):
        assert doctest.testmod(module).failed == 0
