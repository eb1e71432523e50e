"""`kernels.einsum_times_s`: one einsum priced at many sizes at once over arrays (the training
search's floors price their matmuls so) gives, element by element, the very numbers that
`einsum_time_s` gives one size at a time: every count the per-op model forms is an integer below
2**53, exact as a float, so the scalar call's integer products and the arrays' float ones agree;
a size past that is priced one by one."""

from __future__ import annotations

import pytest

from shardline.hardware import load_chip
from shardline.models import load_model
from shardline.models.template import model_workload
from shardline.realistic import kernels
from shardline.realistic.kernels import EXACT_BELOW, einsum_time_s, einsum_times_s
from shardline.workload.workload import backward_layers


def _one_by_one(layer, chip, sizes, model, graphs):  # type: ignore[no-untyped-def]
    out = []
    for dims in sizes:
        kernels._MEMO.clear()  # each priced afresh, not read back from the batch's answers
        out.append(einsum_time_s(layer, chip, dims, model, graphs))
    return out


def _batched(layer, chip, sizes, model, graphs):  # type: ignore[no-untyped-def]
    kernels._MEMO.clear()
    return einsum_times_s(layer, chip, sizes, model, graphs)


@pytest.mark.parametrize("graphs", [False, True])
def test_every_einsum_of_a_moe_block_at_many_sizes_equals_one_by_one(graphs: bool) -> None:
    """DeepSeek-V3's block on the H800 (its einsums and their gradients, the routed experts'
    among them), the batch dim at 1 to 4,096 sequences and each other dim halved: the lists are
    equal to the last bit, the attention einsums (the fused kernel, one by one) included."""
    w = model_workload(load_model("deepseek-v3"), phase="training", batch=4096, seq_len=4096)
    chip = load_chip("h800")
    einsums = [g for x in w.layers for g in (x, *backward_layers(x))]
    assert any(x.kernel == "attention" for x in einsums) and len(einsums) > 20
    for x in einsums:
        sizes = [{**x.dims, "B": b} for b in (1, 2, 3, 7, 64, 4096) if "B" in x.dims]
        sizes += [{d: max(1, n // 2) if d == k else n for d, n in x.dims.items()} for k in x.dims]
        assert _batched(x, chip, sizes, w.model, graphs) == _one_by_one(
            x, chip, sizes, w.model, graphs
        )


def test_on_chip_operands_and_counts_past_two_to_the_53() -> None:
    """Without a model the attention einsums run as GEMMs whose scores stay on chip (their
    bytes out of the memory time, `gemm_time_s`); a batch that makes the FLOPs 2**53 or more
    (2 x B x S x T x H x E) is priced one by one, and still equal."""
    w = model_workload(load_model("llama-3.2-1b"), phase="training", batch=8, seq_len=1024)
    chip = load_chip("h100-sxm")
    scores = next(x for x in w.layers if x.name == "attn_scores")
    assert scores.onchip == ("p",)
    d = scores.dims
    flops_per_b = 2 * d["S"] * d["T"] * d["G"] * d["R"] * d["E"]
    big = EXACT_BELOW // flops_per_b + 1  # 2 x big x ... >= 2**53
    assert 2 * big * d["S"] * d["T"] * d["G"] * d["R"] * d["E"] >= EXACT_BELOW
    sizes = [{**d, "B": b} for b in (1, 5, 8, big)]
    assert kernels._exact(scores, sizes[0]) and not kernels._exact(scores, sizes[-1])
    got = _batched(scores, chip, sizes, None, False)
    assert got == _one_by_one(scores, chip, sizes, None, False)
    assert got[0] < got[1] < got[2] < got[3]  # more sequences, more time
