"""Context parallel (cp): the sequence of every sequence is split over `cp` devices; each holds
S / cp query tokens, and their activations, through every layer. Attention needs every key:

- "ring" (Ring Attention, Liu et al. 2023; Megatron-LM's context parallelism): the K and V blocks
  travel around the ring of cp devices, one block per step, while the device computes attention
  of its queries against the block it holds; cp - 1 sends of the local K (and of V) per attention
  layer in the forward pass; the backward pass sends the K and V blocks round again with their
  gradients (dK, dV), 2 (cp - 1) sends of each. A send hides behind the attention math of one
  block; per ring step the slower of the two sets the pace, so what shows is
  `(cp - 1) * max(0, t_send - t_block)` with `t_block` the layer's local attention time / cp
  (causal: load-balanced, zig-zag chunks, so every step does the same work).
- "all-gather" (Llama 3, Dubey et al. 2024, section 3.3.2): all-gather K and V before the
  attention (V = the full K or V of the device's sequences), reduce-scatter dK and dV after the
  backward; on the critical path.

The weights are replicated over cp, as over dp: the weight gradients are reduced over the cp
ranks too (Megatron reduces over the combined data-and-context-parallel group). Priced as the
two-level reduction: a reduce-scatter and an all-gather of each gradient over the cp axis (one
all-reduce's volume), and the data-parallel all-reduce then carries 1/cp of it (strategies/dp.py).
Once per step, overlapped with the backward pass like dp's.

Decode (context-parallel decode, as long-context serving runs it: the KV cache sharded by sequence
position over the cp ranks; Yang et al. 2024, "Context Parallelism for Scalable Million-Token
Inference", arXiv 2411.01783; vLLM's decode context parallelism): each rank holds T / cp of every
sequence's cached keys and values (split_dims splits the key tokens T of the attention einsums, so
the cache, its read and the scores follow) and attends the one new query token to them, which
gives a partial output and its log-sum-exp (LSE) per head. One all-gather per attention layer
(on the critical path: the output projection waits for it) brings every rank the cp partial
outputs and LSEs, which it merges locally (o = sum_i exp(lse_i - lse) o_i, lse = log sum_i
exp(lse_i)). An all-gather, not an all-reduce: the merge weights need the global LSE first, so a
reduction would take two collectives (the max or sum of the LSEs, then the weighted outputs),
each latency-bound at these few kB; and every rank needs the merged output, because the rest of
the layer runs on every rank. V of the all-gather = cp x (the device's sequences x heads x the
values' head dim x the activation bytes, at least 2, + sequences x heads x 4 B of fp32 LSE).
Everything else (QKV and output projections, FFN, norms) is replicated over cp: every rank reads
all the weights, so cp does not cut the weight reads of decode and pays off only when the KV
cache reads dominate. The new token's K and V are appended on one rank (round-robin), which
computed them already: no traffic.

docs/context-parallel-and-attention.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import ceil, prod
from typing import Protocol

from shardline.basics.dtypes import dtype_bits
from shardline.basics.options import CP_KINDS
from shardline.basics.values import as_number
from shardline.errors import InputError
from shardline.realistic.kernels import causal_lower_bound, einsum_time_s
from shardline.realistic.sustained import sustained_chip, with_attention_kernel
from shardline.strategies.base import CommTerm, Knob, LayerView, MemorySplit, Network, Strategy
from shardline.workload.moe import SLOT_AXIS
from shardline.workload.stack import layer_cost
from shardline.workload.workload import Layer, Workload

__all__ = ["ContextParallel", "STRATEGY", "CP_KINDS", "key_operand", "query_ways"]

QUERY_DIM, KEY_DIM = "S", "T"  # the transformer template's query and key token dims
LSE_BYTES = 4  # the log-sum-exp of a head's partial attention: fp32, as FlashAttention keeps it
PARTIAL_BITS_MIN = 16  # partial outputs travel in the activations' dtype, at least 16-bit


class _SeqDegrees(Protocol):
    def of(self, axis: str) -> int: ...


def query_ways(workload: Workload, degrees: _SeqDegrees) -> int:
    """Ways each sequence's query tokens (and their activations, and the ops between matmuls)
    are split over devices: the degrees that split "seq" (cp); 1 in decode, where every cp rank
    runs the one new token and cp splits the cached keys T in the local sizes instead (so the
    KV cache of the local sizes is already the rank's share)."""
    return 1 if workload.decode else degrees.of("seq")


def _decode_attention(layer: Layer) -> bool:
    """An attention einsum of a decode step: one query token against T > 1 cached keys."""
    dims = layer.dims
    return layer.kernel == "attention" and dims.get(QUERY_DIM) == 1 and dims.get(KEY_DIM, 1) > 1


def key_operand(layer: Layer) -> str | None:
    """The operand of an attention einsum that holds key tokens and no query tokens (K of the
    scores, V of the values, the cached latent of MLA); None for other layers."""
    if layer.kernel != "attention":
        return None
    for op in layer.inputs:  # an on-chip operand reuses a tile another einsum received
        if KEY_DIM in op.dims and QUERY_DIM not in op.dims and op.name not in layer.onchip:
            return op.name
    return None


def _why_not(workload: Workload, degree: int) -> str | None:
    model = workload.model
    if model is None:
        return "context parallelism splits the sequence of a [transformer] template"
    if workload.decode or workload.phase == "decode":  # the cached context is split
        if degree > model.seq_len:
            return f"cp={degree} exceeds the cached context of {model.seq_len} tokens"
        if model.seq_len % degree:
            return f"cp={degree} does not divide the cached context of {model.seq_len} tokens"
        return None
    if model.q_len % degree:
        return f"cp={degree} does not divide the sequence length {model.q_len}"
    return None


class ContextParallel(Strategy):
    name = "cp"
    word = "cp"
    help = "context-parallel ranks: the sequence split (--cp-kind ring|all-gather)"
    splits = ("seq",)
    mesh_rank = 0.5  # Megatron-LM's order: tp, cp, dp, pp
    tier = "just outside tp: inside a node when tp x cp fits in one (Megatron's order)"
    comm_where = "K/V: what outlasts one block's attention (all-gather: all); dW: overlapped"
    memory = MemorySplit("replicated", "replicated", "replicated", "dims", "dims")
    searched = False  # plans without --cp stay as they were; --cp N asks for it
    optional = True  # its column shows only when a plan uses it; a layout is whole without it
    knobs = (
        Knob(
            "cp_kind",
            "--cp-kind",
            "context parallelism's K/V exchange: ring (default) or all-gather (Llama 3)",
            choices=CP_KINDS,
        ),
    )

    def valid(self, workload: Workload, degree: int) -> bool:
        return degree == 1 or _why_not(workload, degree) is None

    def check(self, workload: Workload, degree: int) -> None:
        why = _why_not(workload, degree) if degree > 1 else None
        if why is not None:
            raise InputError(why)

    def split_dims(
        self, layer: Layer, dims: dict[str, int], degree: int, batch_dim: str | None
    ) -> dict[str, int]:
        """Divide the query tokens S by the degree (rounding up); the key tokens T stay whole in
        the attention einsums: the device's queries meet every key, block by block. Decode: the
        attention einsums' key tokens T instead (the rank's share of the cache). An expert
        einsum's token slots C (S k load / X per sequence) follow the rank's S / cp tokens."""
        out = dict(dims)
        if _decode_attention(layer):
            out[KEY_DIM] = ceil(out[KEY_DIM] / degree)
        elif QUERY_DIM in out:
            out[QUERY_DIM] = ceil(out[QUERY_DIM] / degree)
        else:  # expert einsums: the slots of the rank's S / cp tokens (a decode row's one stays)
            for dim in layer.axis_dims(SLOT_AXIS):
                out[dim] = ceil(out[dim] / degree)
        return out

    def layer_comm(self, view: LayerView, degree: int, net: Network) -> list[CommTerm]:
        out = self._kv_terms(view, degree, net)
        if view.training:
            out += self._gradient_terms(view, degree, net)
        return out

    def _kv_terms(self, view: LayerView, degree: int, net: Network) -> list[CommTerm]:
        """The K or V traffic of one attention einsum (module docstring)."""
        if _decode_attention(view.layer):
            return self._decode_combine(view, degree, net)
        key = key_operand(view.layer)
        if key is None:
            return []
        full = view.layer.operand_bytes(key, view.dims)  # T whole: every block of the ring
        local = full / degree
        if view.cp_kind == "all-gather":
            return self._all_gather(view, degree, net, full)
        fwd_block = self._block_s(view, [(view.layer, view.dims)], degree, net)
        out = [self._ring(view, degree, net, local, fwd_block, "forward")]
        if view.training:
            bwd = [(g, d) for g, d in view.grads if g.kernel == "attention"]
            bwd_block = self._block_s(view, bwd, degree, net)
            out.append(self._ring(view, degree, net, 2 * local, bwd_block, "backward"))
        return out

    def _block_s(
        self,
        view: LayerView,
        einsums: list[tuple[Layer, Mapping[str, int]]],
        degree: int,
        net: Network,
    ) -> tuple[float, float]:
        """(lower bound, realistic) seconds of the attention math of one ring step: the einsums'
        local time (all T keys) over the degree. The sums depend on the einsums, their sizes,
        the model and the chip alone: kept in the network's memo (one chip's)."""
        key = (
            "cp attention",
            tuple((e.content_key, tuple(d.items())) for e, d in einsums),
            view.model,
            view.training,
            view.attention_kernel,
        )
        found = net.memo.get(key)
        if found is None:
            lower = sum(
                as_number(
                    causal_lower_bound(layer_cost(e, net.chip, d).cost, e, view.model).t_lower_s
                )
                for e, d in einsums
            )
            fused = with_attention_kernel(net.chip, view.attention_kernel)  # as the stage's
            chip = sustained_chip(fused) if view.training else fused
            real = sum(einsum_time_s(e, chip, d, view.model, False) for e, d in einsums)
            found = net.memo[key] = (lower, real)
        return found[0] / degree, found[1] / degree

    def _ring(
        self,
        view: LayerView,
        degree: int,
        net: Network,
        nbytes: float,
        block: tuple[float, float],
        phase: str,
    ) -> CommTerm:
        """cp - 1 sends of `nbytes`; `t_s` and `predicted_s` are what one send adds beyond the
        block's attention math (the per-step max)."""
        t = max(0.0, net.time("send", nbytes, self.name) - block[0])
        p = max(0.0, net.predicted("send", nbytes, self.name) - block[1])
        return CommTerm(
            self.name,
            "send",
            degree,
            view.count * (degree - 1),
            nbytes,
            t,
            critical=True,
            phase=phase,
            step=0 if phase == "forward" else 2,
            predicted_s=p,
        )

    def _all_gather(
        self, view: LayerView, degree: int, net: Network, full: float
    ) -> list[CommTerm]:
        out = [self.term(net, "all_gather", degree, view.count, full, 0, critical=True)]
        if view.training:
            out.append(self.term(net, "reduce_scatter", degree, view.count, full, 2, critical=True))
        return out

    def _decode_combine(self, view: LayerView, degree: int, net: Network) -> list[CommTerm]:
        """Decode: the all-gather of the partial outputs and LSEs after the attention einsum that
        makes the output (no key dim in it; module docstring). The output's last dim is the
        values' head dim: the LSEs are one per the other elements."""
        out = view.layer.output
        if KEY_DIM in out.dims:
            return []
        elements = prod(view.dims[d] for d in out.dims)
        bits = max(dtype_bits(view.layer.dtypes[out.name]), PARTIAL_BITS_MIN)
        per_rank = elements * bits / 8 + elements / view.dims[out.dims[-1]] * LSE_BYTES
        return [
            self.term(net, "all_gather", degree, view.count, degree * per_rank, 0, critical=True)
        ]

    def _gradient_terms(self, view: LayerView, degree: int, net: Network) -> list[CommTerm]:
        """Each weight gradient dW (V bytes, over the ways it is sharded): reduce-scatter and
        all-gather over cp, once per step, overlapped."""
        out = []
        for i, (grad, gdims) in enumerate(view.grads):
            if grad.grad_of is None:
                continue
            shard = view.gradient_bytes(grad, gdims) / view.gradient_ways
            for kind in ("reduce_scatter", "all_gather"):
                out.append(self.term(net, kind, degree, view.count, shard, 2 + i, once=True))
        return out


STRATEGY = ContextParallel()
