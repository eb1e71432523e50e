"""Tensor-parallel overlap as the kernels run it (shardline.planning.phases.decomposed_exposed_s):
an overlapped tensor-parallel collective is split into steps over the tp shards beside the one
GEMM it feeds or follows (PyTorch async TP's fused_all_gather_matmul / fused_matmul_reduce_scatter,
Transformer Engine's userbuffers ring exchange), so it hides behind that GEMM alone, less the one
GEMM chunk that has nothing beside it."""

from __future__ import annotations

import pytest

from shardline.basics.options import Execution
from shardline.hardware import resolve_chip
from shardline.planning.api import plan
from shardline.planning.evaluate import Context
from shardline.planning.phases import Phase, decomposed_exposed_s
from shardline.strategies import CommTerm, Degrees
from shardline.workload.templates import transformer


def test_exposed_is_what_outlasts_all_gemm_chunks_but_one() -> None:
    # t shards: t - 1 transfers of C/(t-1) beside t - 1 GEMM chunks of G/t (the local chunk runs
    # first, with nothing to overlap): (t-1) max(G/t, C/(t-1)) + G/t - G = max(C - G (t-1)/t, 0)
    def schedule(c: float, g: float, t: int) -> float:
        return (t - 1) * max(g / t, c / (t - 1)) + g / t - g

    for c, g, t in ((3.0, 2.0, 4), (1.0, 4.0, 8), (2.0, 2.0, 2), (5.0, 1.0, 8)):
        assert decomposed_exposed_s(c, g, t) == pytest.approx(schedule(c, g, t))
    assert decomposed_exposed_s(3.0, 2.0, 4) == pytest.approx(3.0 - 2.0 * 3 / 4)
    assert decomposed_exposed_s(1.0, 4.0, 8) == 0.0  # the GEMM's 7 remote chunks hide it
    assert decomposed_exposed_s(2.0, 2.0, 2) == pytest.approx(1.0)  # half the GEMM hides half


def test_phase_waits_for_the_pinned_part_and_hides_the_rest() -> None:
    """W = 10 s of compute; 2 calls of an overlapped all-gather over 4 ranks, 3 s each, beside a
    GEMM of 2 s: each leaves 3 - 2 x 3/4 = 1.5 s exposed, 2 x 1.5 = 3 s pinned; the other
    2 x 1.5 = 3 s join the phase's overlapped traffic, which the 10 s of compute hide."""
    ph = Phase()
    ph.add_predicted("gemm", 10.0)
    term = CommTerm(
        "tp", "all_gather", 4, 2, 1e9, 1.0, critical=False, predicted_s=3.0, paired_s=2.0
    )
    ph.add_comm(term)
    assert ph.pinned_s == pytest.approx(3.0)
    assert float(ph.overlapped.predicted_s) == pytest.approx(3.0)
    assert ph.exposed_comm_pred_s == pytest.approx(3.0)
    assert ph.predicted_s == pytest.approx(13.0)
    # the lower bound still sees the whole collective as overlapped traffic (line rate 2 x 1 s)
    assert ph.async_s == pytest.approx(2.0)


def _llama(batch: int):
    return transformer(
        d_model=4096, d_ff=14336, heads=32, kv_heads=8, head_dim=128, batch=batch,
        seq_len=4096, layers=2, gated=True, attention="flash", dtype="bf16", phase="training",
    )  # fmt: skip


def test_each_term_hides_behind_its_own_layers_gemm() -> None:
    """A tp 8 stage with --tp-overlap and sequence parallelism: every tensor-parallel term of
    the stage carries its layer's GEMM time per call, and each phase waits for
    sum(calls x decomposed_exposed_s(term, its GEMM, 8)) over its terms."""
    ex = Execution(sequence_parallel=True, tp_overlap=True)
    ctx = Context(_llama(8), resolve_chip("h100-sxm"), ex)
    deg = Degrees({"tp": 8, "pp": 1, "dp": 1, "fsdp": 1, "ep": 1, "cp": 1})
    ((layers, last),) = ctx.stages(1)
    stage = ctx.stage(deg, 1, 0, layers, last)
    tp = [t for t in stage.terms if t.purpose == "tp" and not t.once_per_step]
    paired = [t for t in tp if t.paired_s is not None]
    assert paired and all(t.paired_s > 0 and not t.critical for t in paired)
    for phase, ph in (("forward", stage.fwd), ("backward", stage.bwd)):
        want = sum(
            t.calls * decomposed_exposed_s(t.t_pred_s, t.paired_s, 8)
            for t in paired
            if t.phase == phase
        )
        assert want > 0
        assert ph.pinned_s == pytest.approx(want, rel=1e-12)


def test_overlap_lands_between_serial_and_fully_hidden() -> None:
    """With overlap the step is faster than with the collectives on the critical path, and
    slower than with every tensor-parallel collective hidden (its pinned part is waited for)."""
    w = _llama(8)
    chip = resolve_chip("h100-sxm")
    deg = {"tp": 8, "pp": 1, "dp": 1, "fsdp": 1, "microbatches": 1}

    def step(overlap: bool) -> tuple[float, float]:
        res = plan(w, chip, 8, sequence_parallel=True, tp_overlap=overlap, **deg)
        (p,) = [c for c in res.plans if c.degrees.get("tp") == 8]
        return float(p.predicted_s), float(p.predicted_breakdown_s["exposed_comm_s"])

    serial, serial_comm = step(False)
    overlapped, overlapped_comm = step(True)
    assert overlapped < serial
    assert 0 < overlapped_comm < serial_comm
