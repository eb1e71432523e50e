"""One replica's engine steps, each the plan engine's own step at the point asked for, priced
when first asked and kept (one dict per point), so that a serving model or a simulation of
thousands of steps prices each distinct point once.

- decode: one step of n sequences whose cached context is c tokens, n and c whole: the plan's
  realistic `predicted_s` of `model_workload(phase="decode", batch=n, seq_len=c)` on tp devices
  (tensor parallel), times `1 + scheduling_overhead_fraction` of the engine.
- prefill: the whole prompt of one sequence of L tokens (batch 1), L whole, priced the same way.
- memory: the weights and activations per device, and the KV-cache bytes per token of the
  replica (all its devices together); the KV budget by the engine's own rule (engines.toml) on
  the devices that hold distinct KV: attention-DP ranks x the attention tensor-parallel ranks
  that split the KV heads (min(tp / attention-dp, KV heads)); an MLA latent cache has no heads to
  split, so every attention tensor-parallel rank holds all of it (split over attention-DP only).
- attention data parallelism (`attention_dp` A, as SGLang's and TensorRT-LLM's DP attention run
  DeepSeek): attention runs on tp / A devices per rank and each rank holds its own sequences,
  the experts are split over the replica (the plan's `ep` = A: expert-parallel ranks are
  data-parallel for everything but the experts); a step of n sequences runs ceil(n / A) on every
  rank (the engines pad the ranks to the fullest one), so it is the plan's step of
  A x ceil(n / A) sequences; one prompt's prefill is 1 / A of the plan's prefill of A prompts
  (each rank prefills one).
- pipeline parallelism (`pp` P, as vLLM's --pipeline-parallel-size, SGLang's --pp-size and
  TensorRT-LLM's --pp_size run it): a replica is tp x P devices, each stage holds 1/P of the
  blocks' weights and KV cache and sends its activations to the next stage point to point. The
  engine keeps P microbatches in flight (vLLM's virtual engines), so a decode step of n
  sequences, every sequence one token on, is the plan's decode step of n sequences in
  m = min(n, P) microbatches on P stages: max(m, P) = P times the slowest stage's time for one
  microbatch of ceil(n / m) sequences (the stage's layers plus the send of its activations;
  planning/combine.py `cycles`). A prompt passes the P stages in P stage times (the plan's
  prefill of one microbatch; `prefill_pass_s`, its latency); the pipeline takes the next prompt
  after one (`prefill_s`, what throughput pays: the plan's step less its bubble). The KV budget
  is the engine's rule on each of the P stages' devices.

The engine has no step at a fractional batch or context; the queueing model asks for one at the
mean running batch b and mean context c, which `decode_s` answers from whole points only: with
n = floor(b), w = b - n, a mean batch b is n sequences for a fraction 1 - w of the steps and
n + 1 for w of them, so t(b, c) = (1 - w) t(n, c) + w t(n + 1, c); likewise a mean context
c = k + v (k whole) is t(n, c) = (1 - v) t(n, k) + v t(n, k + 1), which is the engine's own
value because a decode step at a fixed batch is affine in the context (each attention layer
reads c tokens of KV per sequence; nothing else depends on c: tests check it against the engine
to 1e-9). A prompt of a fractional length (a quadrature point of a length distribution) is
priced as the whole prompt round(L).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np

from shardline.basics.values import Scalar
from shardline.errors import InputError
from shardline.serving.engines import Engine

if TYPE_CHECKING:
    from shardline.hardware import Chip
    from shardline.workload.modelspec import ModelSpec

__all__ = [
    "StepTimes",
    "Split",
    "step_times",
    "cached_step_times",
    "price_step",
    "serving_dtypes",
    "kv_split_devices",
    "SCALE_OUT_BYTES_PER_S",
    "graph_batch",
    "padded_decode_s",
    "with_graph_padding",
]

# A device without a scale-up fabric in its chip file sends KV over one 400 Gb/s NIC (50 GB/s,
# the ConnectX-7 rate of a DGX H100 node's compute NICs).
SCALE_OUT_BYTES_PER_S = 50e9
# A prompt long enough for its prefill to be compute-bound (weights read once over 4,096 tokens)
VERIFY_REF_TOKENS = 4096


@dataclass(frozen=True)
class Split:
    """How a replica's devices split beyond its tensor-parallel group of tp: `attention_dp`
    data-parallel attention ranks of the tp devices (dividing tp) and `pp` pipeline stages of
    tp devices each (the replica tp x pp devices)."""

    attention_dp: int = 1
    pp: int = 1


@dataclass
class StepTimes:
    """One replica's step times (seconds) and its memory. `decode_point(n, c)` and
    `prefill_point(L)` price one whole point (the plan engine, or a formula in tests); each is
    called once per distinct point. The KV budget: `kv_rule` (engines.toml) with the engine's
    fraction `kv_fraction` per device, on `kv_devices` devices holding distinct KV (default
    tp x pp); `kv_sequence_bytes(c)` the replica's KV bytes of one sequence of c tokens (default
    c x kv_bytes_per_token; sliding-window layers hold at most their window). With `pp` stages
    `prefill_point(L)` is the stage time a prompt holds the pipeline."""

    chip: str
    tp: int
    decode_point: Callable[[int, int], float]
    prefill_point: Callable[[int], float]
    weights_bytes_per_device: float
    activations_bytes_per_device: float
    capacity_bytes_per_device: float
    kv_bytes_per_token: float  # the replica's (all tp devices together)
    egress_bytes_per_s: float = SCALE_OUT_BYTES_PER_S  # one device's, for the KV transfer
    pp: int = 1  # pipeline stages of the replica (the replica is tp x pp devices)
    kv_rule: str = "fraction_of_capacity"
    kv_fraction: float = 0.9
    kv_devices: int = 0  # devices holding distinct KV (0: tp x pp)
    kv_sequence_bytes: Callable[[float], float] | None = None
    _decode: dict[tuple[int, int], float] = field(default_factory=dict, repr=False)
    _prefill: dict[int, float] = field(default_factory=dict, repr=False)

    @property
    def points_priced(self) -> int:
        """Distinct decode and prefill points priced so far."""
        return len(self._decode) + len(self._prefill)

    def decode_at(self, n: int, c: int) -> float:
        """One decode step of `n` sequences at whole context `c`: the engine's, kept."""
        key = (int(n), int(c))
        if key not in self._decode:
            self._decode[key] = float(self.decode_point(*key))
        return self._decode[key]

    def prefill_at(self, tokens: int) -> float:
        """The prefill of one whole prompt of `tokens` tokens: the engine's, kept."""
        key = int(tokens)
        if key not in self._prefill:
            self._prefill[key] = float(self.prefill_point(key))
        return self._prefill[key]

    def decode_s(self, batch: Scalar, context: Scalar) -> np.ndarray:
        """One decode step at mean batch max(`batch`, 1) and mean context max(`context`, 1)
        (arrays broadcast): with n = floor(b), w = b - n, k = floor(c), v = c - k,
        t = sum over the whole points (n + i, k + j), i, j in {0, 1}, of t(n + i, k + j) x
        (w if i else 1 - w) x (v if j else 1 - v), leaving out the points of weight 0."""
        if np.ndim(batch) == 0 and np.ndim(context) == 0:
            return np.asarray(self._decode_scalar(float(batch), float(context)))
        b, c = np.broadcast_arrays(
            np.maximum(np.asarray(batch, dtype=float), 1.0),
            np.maximum(np.asarray(context, dtype=float), 1.0),
        )
        n, k = np.floor(b), np.floor(c)
        w, v = b - n, c - k
        out = np.zeros(b.shape)
        for i, wb in ((0, 1 - w), (1, w)):
            for j, wc in ((0, 1 - v), (1, v)):
                weight = wb * wc
                used = weight > 0
                if not used.any():
                    continue
                keys = np.stack([n[used] + i, k[used] + j], axis=-1).astype(np.int64)
                uniq, inverse = np.unique(keys, axis=0, return_inverse=True)
                times = np.array([self.decode_at(int(p), int(q)) for p, q in uniq])
                out[used] += weight[used] * times[inverse.ravel()]
        return out

    def _decode_scalar(self, batch: float, context: float) -> float:
        """decode_s at one point, in plain floats (the queueing model's many scalar calls)."""
        b, c = max(batch, 1.0), max(context, 1.0)
        n, k = math.floor(b), math.floor(c)
        w, v = b - n, c - k
        t = 0.0
        for i, wb in ((0, 1 - w), (1, w)):
            for j, wc in ((0, 1 - v), (1, v)):
                if wb * wc > 0:
                    t += wb * wc * self.decode_at(n + i, k + j)
        return t

    def prefill_s(self, tokens: Scalar) -> np.ndarray:
        """The prefill of one prompt of round(`tokens`) tokens (at least one; arrays): the
        replica's time it holds (one stage time through a pipeline)."""
        whole = np.maximum(np.rint(np.asarray(tokens, dtype=float)), 1.0).astype(np.int64)
        uniq, inverse = np.unique(whole, return_inverse=True)
        times = np.array([self.prefill_at(int(x)) for x in uniq])
        return times[inverse.reshape(whole.shape)]

    def prefill_pass_s(self, tokens: Scalar) -> np.ndarray:
        """One prompt's pass through all pp stages (its latency): pp stage times, the plan's
        prefill of one microbatch (m + P - 1 = P stage times); prefill_s without a pipeline."""
        return self.pp * self.prefill_s(tokens)

    def verify_floor_s(self, sequences: Scalar, k: int) -> Scalar:
        """The least time of a speculative verification step over `sequences` sequences of k + 1
        tokens each: their compute, at the per-token time of a compute-bound prefill of
        VERIFY_REF_TOKENS tokens (the same forward pass over as many tokens). Without it a step
        checking 1,025 tokens per sequence would cost what one decode step costs, past the
        chip's FLOP/s."""
        per_token_s = self.prefill_at(VERIFY_REF_TOKENS) / VERIFY_REF_TOKENS
        return np.maximum(sequences, 1.0) * (k + 1) * per_token_s

    def kv_budget_bytes(self, memory_fraction: float | None = None) -> float:
        """KV-cache bytes the replica can hold: the devices holding distinct KV x the engine's
        rule per device (engines.kv_budget_per_device) at `memory_fraction` (default the
        engine's own, kv_fraction)."""
        from shardline.serving.engines import kv_budget_per_device

        f = self.kv_fraction if memory_fraction is None else memory_fraction
        per_device = kv_budget_per_device(
            self.kv_rule,
            f,
            self.capacity_bytes_per_device,
            self.weights_bytes_per_device,
            self.activations_bytes_per_device,
        )
        return (self.kv_devices or self.tp * self.pp) * per_device

    def sequence_kv_bytes(self, tokens: Scalar) -> Scalar:
        """The replica's KV bytes of one sequence of `tokens` cached tokens (arrays)."""
        if self.kv_sequence_bytes is None:
            return self.kv_bytes_per_token * np.asarray(tokens, dtype=float)
        return np.vectorize(self.kv_sequence_bytes, otypes=[float])(tokens)


def serving_dtypes(
    chip: Chip, dtype: str | None, weight_dtype: str | None = None, kv_dtype: str | None = None
) -> tuple[str, str, str]:
    """(compute, weights, KV cache) dtypes of a serving run. Weights: `weight_dtype`, else
    `dtype`, else bf16. Compute: `dtype` where the chip computes in it, else the weights' dtype
    where it does, else the chip's default (bf16): fp4/mxfp4 weights on a chip without fp4
    compute (H100, H200, MI300X) are read as 4 bits and dequantized to compute in bf16, as
    vLLM's and SGLang's mxfp4 kernels do on Hopper. KV: `kv_dtype`, else the weights' dtype at
    8 bits or more, else fp8 (the engines keep no 4-bit KV cache by default: TensorRT-LLM's
    NVFP4 checkpoints pair fp4 weights with an fp8 KV cache), else bf16."""
    from shardline.basics.dtypes import canonical_dtype, dtype_bits

    weights = canonical_dtype(weight_dtype or dtype or "bf16")
    compute = None
    for option in (dtype, weights):
        if option is not None and canonical_dtype(option) in chip.dtypes:
            compute = canonical_dtype(option)
            break
    compute = compute or chip.default_dtype
    if kv_dtype is not None:
        kv = canonical_dtype(kv_dtype)
    elif dtype is None and weight_dtype is None:
        kv = "bf16"
    else:
        given = canonical_dtype(dtype or weights)
        kv = given if dtype_bits(given) >= 8 else "fp8"
    return compute, weights, kv


def price_step(
    spec: ModelSpec,
    chip: Chip,
    tp: int,
    dtype: str,
    point: tuple[str, int, int],
    *,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    split: Split = Split(),
) -> Any:
    """The plan engine's plan of one step, `point` = (phase, batch, seq_len), on tp x pp devices
    (`split`: `attention_dp` of a stage's tp data parallel for attention, the plan's
    tp / attention_dp x ep = attention_dp; `pp` pipeline stages), weights and KV stored in their
    dtypes (None: `dtype`)."""
    from shardline.models.template import model_workload
    from shardline.planning.api import plan
    from shardline.workload.precision import with_tensor_dtypes

    phase, batch, seq_len = point
    attention_dp, pp = split.attention_dp, split.pp
    work = model_workload(spec, phase=phase, batch=batch, seq_len=seq_len, dtype=dtype)
    work = with_tensor_dtypes(work, weight_dtype=weight_dtype, kv_dtype=kv_dtype)
    degrees: dict[str, Any] = {"tp": tp // attention_dp, "pp": pp, "dp": 1, "fsdp": 1}
    if attention_dp > 1:
        degrees["ep"] = attention_dp
    # a decode step's sequences (batch / attention_dp a rank) over min(that, pp) microbatches
    # (vLLM keeps pp virtual engines, one scheduled batch each: every stage busy once pp
    # sequences run); a prompt is one
    m = min(batch // attention_dp, pp) if phase == "decode" else 1
    result = plan(work, chip, tp * pp, microbatches=m, require_fit=False, **degrees)
    return result.plans[0]


def kv_split_devices(spec: ModelSpec, tp: int, attention_dp: int = 1) -> int:
    """Devices of a replica holding distinct KV: attention_dp x the attention tensor-parallel
    ranks that split the KV heads, min(tp / attention_dp, KV heads) (past the heads a head is
    copied); an MLA latent cache (one latent per token, no heads) is held whole by every
    attention tensor-parallel rank, so only attention_dp split it."""
    attention_tp = tp // attention_dp
    if not spec.variant()[0].kv_split_over_heads:
        return attention_dp
    return attention_dp * min(attention_tp, spec.kv_heads)


def _check_layout(spec: ModelSpec, tp: int, dtype: str, attention_dp: int, pp: int = 1) -> None:
    """tp / attention_dp must split the model (the one tensor-parallel rule, strategies/tp.py);
    DP attention needs experts to split over the replica; pp stages hold whole blocks, as many
    each (strategies/pp.py `serving_stages_reason`)."""
    from shardline.basics.units import check_whole
    from shardline.models.template import model_workload
    from shardline.strategies.pp import serving_stages_reason
    from shardline.strategies.tp import uneven_reason

    check_whole(attention_dp, "--attention-dp")
    if tp % attention_dp:
        raise InputError(f"--attention-dp {attention_dp} does not divide --tp {tp}")
    shape = model_workload(spec, phase="decode", batch=1, seq_len=1024, dtype=dtype)
    why = uneven_reason(shape, tp // attention_dp, f"--tp {tp}")
    if why is not None:
        raise InputError(why)
    why = serving_stages_reason(shape, check_whole(pp, "--pp"), "--pp")
    if why is not None:
        raise InputError(why)
    if attention_dp > 1 and spec.moe is None:
        raise InputError(
            f"--attention-dp {attention_dp} needs a mixture-of-experts model (DP attention runs "
            f"with expert-parallel experts); {spec.name} is dense: serve replicas of --tp instead"
        )


def _kv_fields(
    spec: ModelSpec, chip: Chip, eng: Engine, layout: tuple[int, int, int], kv_dtype: str
) -> dict[str, Any]:
    """StepTimes' KV fields for a replica of `layout` = (tp, attention_dp, pp): bytes per token
    in `kv_dtype`, the engine's budget rule and fraction, the devices holding distinct KV (each
    stage's holders, times pp: a stage caches its 1 / pp of the layers), and a sliding-window
    model's bytes of one sequence (its local layers hold at most the window), unless the
    engine's cache holds every token of those layers (`Engine.sliding_window_kv` "full":
    TensorRT-LLM, whose memory allocation follows the largest attention window), where a
    sequence of c tokens holds c x kv_bytes_per_token like a model without windows."""
    from shardline.basics.dtypes import dtype_bits
    from shardline.workload.modelspec import kv_bytes_at, kv_bytes_per_token

    tp, attention_dp, pp = layout
    kv_bytes = dtype_bits(kv_dtype) / 8
    windowed = (  # sliding windows the engine's cache honours: kv_bytes_at
        not spec.variant()[0].kv_linear_in_context and eng.sliding_window_kv == "window"
    )
    return {
        "kv_bytes_per_token": kv_bytes_per_token(spec, kv_bytes),
        "kv_rule": eng.kv_budget_rule,
        "kv_fraction": eng.memory_fraction(float(chip.capacity_bytes), tp, attention_dp),
        "kv_devices": kv_split_devices(spec, tp, attention_dp) * pp,
        "kv_sequence_bytes": (
            (lambda c: kv_bytes_at(spec, max(int(round(c)), 0), kv_bytes)) if windowed else None
        ),
    }


def _points(
    price: Callable[[tuple[str, int, int]], Any], a: int, scale: float
) -> tuple[Callable[[int, int], float], Callable[[int], float]]:
    """The engine's decode step of n sequences at context c (each of `a` attention-DP ranks
    runs the fullest rank's ceil(n / a)) and a prompt's prefill (1 / a of a prefill of a
    prompts; the stage time it holds a pipeline: the plan's step less its bubble), x `scale`."""

    def decode(n: int, c: int) -> float:
        padded = a * math.ceil(n / a)
        return float(price(("decode", padded, c)).predicted_s) * scale

    def prefill(tokens: int) -> float:
        step = price(("prefill", a, tokens))
        return float(step.predicted_s - step.predicted_breakdown_s["bubble_s"]) * scale / a

    return decode, prefill


def step_times(
    spec: ModelSpec,
    chip: Chip,
    tp: int,
    dtype: str,
    eng: Engine,
    *,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    split: Split = Split(),
) -> StepTimes:
    """The step times of `spec` on `tp` x `split.pp` devices of `chip` (a Chip) computing in
    `dtype`, weights and KV cache in their dtypes (None: `dtype`), with the engine's scheduling
    overhead and KV budget rule; the memory from the decode step of 256 sequences at 1,024
    tokens (its fullest stage with pipeline stages)."""
    from functools import partial

    attention_dp, pp = split.attention_dp, split.pp
    _check_layout(spec, tp, dtype, attention_dp, pp)
    scale = 1.0 + eng.scheduling_overhead_fraction
    price = partial(
        price_step,
        spec,
        chip,
        tp,
        dtype,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        split=split,
    )
    decode, prefill = _points(price, attention_dp, scale)
    sized = price(("decode", 256, 1024))
    memory = sized.memory
    st = StepTimes(
        chip=chip.name,
        tp=tp,
        decode_point=decode,
        prefill_point=prefill,
        weights_bytes_per_device=float(memory.weights_bytes),
        activations_bytes_per_device=float(memory.activations_bytes),
        capacity_bytes_per_device=float(chip.capacity_bytes),
        egress_bytes_per_s=(
            chip.interconnect.egress_bytes_per_s if chip.interconnect else SCALE_OUT_BYTES_PER_S
        ),
        pp=pp,
        **_kv_fields(spec, chip, eng, (tp, attention_dp, pp), kv_dtype or dtype),
    )
    if attention_dp == 1:
        st._decode[(256, 1024)] = float(sized.predicted_s) * scale  # priced for the memory: kept
    return st


def graph_batch(m: int, graph_batches: tuple[int, ...]) -> int:
    """The batch a decode step of m sequences runs as with CUDA-graph padding: the smallest
    captured size >= m; m itself past the largest (no graph: the step runs as it is)."""
    return min((g for g in graph_batches if g >= m), default=m)


def padded_decode_s(
    step: Callable[[int, int], float],
    ranks: int,
    per_rank: int,
    context: int,
    graph_batches: tuple[int, ...] = (),
) -> float:
    """A decode step of `per_rank` sequences on each of `ranks` attention ranks at context
    `context`, `step(n, c)` the engine's step of n sequences in all. With CUDA-graph padding to
    g = graph_batch(per_rank) the step carries g - per_rank dummy generation requests a rank
    (TensorRT-LLM's model_engine `_get_padded_batch`: one dummy generation request added by
    `add_dummy_requests(is_gen=True)`, repeated to the captured size): every kernel that scales
    with the tokens runs on g, the attention reads only the real sequences' KV (the dummies hold
    one token each). The step is affine in the context (the KV read), so the dummies' share is
    what g - m sequences add at a context of one token:
    t = step(R m, c) + step(R g, 1) - step(R m, 1)."""
    m = per_rank
    g = graph_batch(m, graph_batches)
    t = step(ranks * m, context)
    if g == m:
        return t
    return t + step(ranks * g, 1) - step(ranks * m, 1)


def with_graph_padding(
    st: StepTimes, attention_dp: int, graph_batches: tuple[int, ...]
) -> StepTimes:
    """`st` whose decode steps run as CUDA graphs captured at `graph_batches` with padding on
    (TensorRT-LLM's `cuda_graph_config: enable_padding: true, batch_sizes: [...]`, SGLang's
    `--cuda-graph-bs`): a step of n sequences over `attention_dp` ranks is `padded_decode_s` of
    the fullest rank's ceil(n / A); the points priced so far are dropped (prefill kept)."""
    from dataclasses import replace

    if not graph_batches:
        return st
    plain, a = st.decode_point, attention_dp

    def decode(n: int, c: int) -> float:
        return padded_decode_s(plain, a, math.ceil(n / a), c, graph_batches)

    return replace(st, decode_point=decode, _decode={}, _prefill=st._prefill)


@lru_cache(maxsize=64)
def cached_step_times(
    model: str,
    hw: str,
    tp: int,
    dtype: str,
    engine_name: str,
    weight_dtype: str | None = None,
    kv_dtype: str | None = None,
    split: Split = Split(),
) -> StepTimes:
    """`step_times` of a zoo model (or model file) on a chip by name, one per process and
    arguments, so that `serve`, its figures and the serving search share the points priced."""
    from shardline.hardware import resolve_chip
    from shardline.models import load_model
    from shardline.serving.engines import engine

    return step_times(
        load_model(model),
        resolve_chip(hw),
        tp,
        dtype,
        engine(engine_name),
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        split=split,
    )
