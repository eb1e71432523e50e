"""A stack on one device: totals against hand sums, memory terms by hand (docs/model.md,
section 6)."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from shardline.io.workload_toml import load_workload
from shardline.workload.stack import OPTIMIZER_BYTES_PER_PARAM, stack
from shardline.workload.templates import ffn, transformer
from shardline.workload.workload import Layer, Workload, matmul_layer

ROOT = Path(__file__).resolve().parent.parent
A100_BF16 = 312e12  # NVIDIA A100 datasheet, dense bf16 (catalog a100-40gb)
A100_HBM = 1.555e12  # NVIDIA A100 40 GB datasheet
A100_CAPACITY = 40960 * 2**20  # the 40,960 MiB nvidia-smi reports (memory.reported_bytes)


def test_seed003_stack_totals_and_memory_by_hand() -> None:
    w = load_workload(ROOT / "examples" / "seed003_stack.toml")
    m, n, k = 8192, 8192, 32768
    r = stack(w, "a100-40gb")
    # Each layer: F = 2*m*n*k; Q = s*(input + weight + output) = 2*(m*n + n*k + m*k).
    f_layer = 2 * m * n * k
    q_layer = 2 * (m * n + n * k + m * k)
    assert [(row.name, row.count, row.flops, row.bytes) for row in r.layers] == [
        ("type1", 36, f_layer, q_layer),
        ("type2", 36, f_layer, q_layer),
    ]
    assert r.totals.flops == 72 * f_layer == 316_659_348_799_488
    assert r.totals.bytes == 72 * q_layer
    assert r.totals.t_compute_s == pytest.approx(72 * f_layer / A100_BF16)  # 1.015 s
    assert r.totals.t_memory_s == pytest.approx(72 * q_layer / A100_HBM)  # 55.9 ms
    # intensity 2mnk / (2(mn + nk + mk)) = 3641 FLOP/B > ridge 312e12/1.555e12 = 200.6: compute
    assert all(row.bound == "compute" for row in r.layers)
    assert r.totals.t_lower_s == pytest.approx(r.totals.t_compute_s)
    assert r.totals.t_upper_s == pytest.approx(r.totals.t_compute_s + r.totals.t_memory_s)
    mem = r.memory
    assert mem.params == 72 * n * k
    assert mem.weights_bytes == 72 * n * k * 2 == 38_654_705_664  # params * s_w
    # forward only: the largest live set is one layer's input and output
    assert mem.activations_bytes == 2 * (m * n + m * k)
    assert mem.gradients_bytes == mem.optimizer_bytes == mem.kv_cache_bytes == 0
    assert mem.total_bytes == 72 * n * k * 2 + 2 * (m * n + m * k)
    assert mem.fits and mem.capacity_bytes == A100_CAPACITY
    assert mem.headroom_bytes == pytest.approx(A100_CAPACITY - mem.total_bytes)
    # The seed's question: one input + one output + the layer's weight at the same time.
    assert mem.working_set_bytes == 2 * (m * n + n * k + m * k) and mem.working_set_fits


def test_fp32_training_has_no_separate_master_copy() -> None:
    # fp32 weights are Adam's master copy: 4 B weights + 4 B gradients + 8 B (two fp32 moments)
    # = 16 B per parameter (ZeRO, Rajbhandari et al. 2020, section 3.1), not 4 + 4 + 12.
    d, f, b, layers = 512, 2048, 8, 3
    w = ffn(d_model=d, d_ff=f, batch=b, gated=False, layers=layers, phase="training", dtype="fp32")
    mem = stack(w, "h100-sxm").memory
    params = layers * 2 * d * f
    assert mem.weights_bytes == mem.gradients_bytes == 4 * params
    assert mem.optimizer_bytes == 8 * params
    assert mem.weights_bytes + mem.gradients_bytes + mem.optimizer_bytes == 16 * params
    # int8 weights still need the fp32 master copy: 1 + 1 + 12 = 14 B per parameter
    w8 = ffn(d_model=d, d_ff=f, batch=b, gated=False, layers=layers, phase="training", dtype="int8")
    mem8 = stack(w8, "h100-sxm").memory
    assert mem8.optimizer_bytes == 12 * params and mem8.gradients_bytes == params


def test_training_memory_is_16_bytes_per_param_plus_activations() -> None:
    # bf16 weights 2 B + bf16 gradients 2 B + Adam (fp32 master, m, v) 12 B = 16 B per parameter
    # (docs/model.md section 6; ZeRO, Rajbhandari et al. 2020, section 3.1).
    d, f, b, layers = 1024, 4096, 16, 4
    w = ffn(d_model=d, d_ff=f, batch=b, gated=False, layers=layers, phase="training")
    mem = stack(w, "h100-sxm").memory
    params = layers * 2 * d * f
    assert mem.params == params
    assert mem.weights_bytes + mem.gradients_bytes + mem.optimizer_bytes == 16 * params
    assert mem.optimizer_bytes == OPTIMIZER_BYTES_PER_PARAM * params
    r = stack(w, "h100-sxm")
    sub = r.subtotals
    assert sub["forward"]["flops"] + sub["backward"]["flops"] == r.totals.flops
    assert sub["backward"]["flops"] == 2 * sub["forward"]["flops"]
    assert sub["one_block"]["t_lower_s"] * layers == pytest.approx(r.totals.t_lower_s)
    # saved for backward: each matmul's activation input (x[B,D] and h[B,F]) per layer, plus the
    # largest output (h[B,F]) in flight
    assert mem.activations_bytes == layers * 2 * (b * d + b * f) + 2 * b * f


def test_int8_weights_count_one_byte_and_compute_in_bf16() -> None:
    layer = Layer(
        "q",
        "x[M,K] * w[K,N] -> y[M,N]",
        {"M": 16, "K": 4096, "N": 4096},
        dtypes={"w": "int8"},
        weights=("w",),
    )
    r = stack(Workload("int8", (layer,)), "h100-sxm")
    assert r.memory.weights_bytes == 4096 * 4096
    assert r.layers[0].bytes == 2 * 16 * 4096 + 4096 * 4096 + 2 * 16 * 4096
    assert r.layers[0].t_compute_s == pytest.approx(2 * 16 * 4096 * 4096 / 989.4e12)


def test_mixed_bounds_lower_bound_sums_each_layers_max() -> None:
    decode = matmul_layer("decode", 8, 8192, 8192)  # I ~ 8: memory-bound
    prefill = matmul_layer("prefill", 8192, 8192, 8192)  # compute-bound
    r = stack(Workload("mix", (decode, prefill), repeat=3), "a100-40gb")
    by = {row.name: row for row in r.layers}
    assert by["decode"].bound == "memory" and by["prefill"].bound == "compute"
    expected = 3 * (by["decode"].t_memory_s + by["prefill"].t_compute_s)
    assert r.totals.t_lower_s == pytest.approx(expected)
    assert r.totals.t_lower_s > max(r.totals.t_compute_s, r.totals.t_memory_s)


def test_flash_attention_scores_stay_on_chip() -> None:
    b, s, h, e = 2, 1024, 8, 64
    w = transformer(
        d_model=h * e, d_ff=4 * h * e, heads=h, batch=b, seq_len=s, layers=1, phase="prefill"
    )
    row = next(row for row in stack(w, "h100-sxm").layers if row.name == "attn_scores")
    # q[B,S,G,R,E] and k[B,T,G,E] are read; p[B,G,R,S,T] never reaches HBM
    assert row.bytes == 2 * (b * s * h * e) + 2 * (b * s * h * e)
    assert row.flops == 2 * b * h * s * s * e


def test_a_stack_that_does_not_fit() -> None:
    w = Workload("big", (matmul_layer("a", 1024, 65536, 65536),), repeat=8)
    mem = stack(w, "a100-40gb").memory
    assert mem.weights_bytes == 8 * 65536 * 65536 * 2  # 68.7 GB
    assert not mem.fits and mem.headroom_bytes < 0
    assert mem.working_set_fits  # a single layer's input, output and weight still fit


@settings(max_examples=25, deadline=None)
@given(
    m=st.integers(1, 8192),
    k=st.integers(1, 8192),
    n=st.integers(1, 8192),
    repeat=st.integers(1, 8),
    count=st.integers(1, 4),
)
def test_totals_add_up_and_bounds_bracket(m: int, k: int, n: int, repeat: int, count: int) -> None:
    one = stack(Workload("one", (matmul_layer("a", m, k, n),)), "a100-40gb").totals
    many = stack(
        Workload("many", (matmul_layer("a", m, k, n, count=count),), repeat=repeat), "a100-40gb"
    ).totals
    times = repeat * count
    assert many.flops == times * one.flops and many.bytes == times * one.bytes
    assert many.t_lower_s == pytest.approx(times * one.t_lower_s)
    assert max(many.t_compute_s, many.t_memory_s) <= many.t_lower_s * (1 + 1e-12)
    assert many.t_lower_s <= many.t_upper_s * (1 + 1e-12)


def test_content_key_hashes_as_its_tuple_and_pickles_without_its_hash() -> None:
    """A layer's content key caches its hash (`HashedKey`): equal to the plain tuple and hashed
    as it, so a cache finds it by either; pickled, it carries no hash (a string's hash is
    per process), and the copy hashes as the copy's tuple."""
    import pickle

    layer = matmul_layer("up", 8, 4096, 16384)
    key = layer.content_key
    plain = tuple(key)
    assert key == plain and hash(key) == hash(plain) and {plain: 1}[key] == 1
    copy = pickle.loads(pickle.dumps(key))
    assert copy == key and "_hash" not in vars(copy)
    assert hash(copy) == hash(tuple(copy))
