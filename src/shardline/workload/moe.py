"""Mixture of experts (MoE): the `[transformer.moe]` part of the transformer template.

A MoE block replaces the dense feed-forward by a router and `experts` feed-forward networks of
width `expert_d_ff`; each token goes to `experts_per_token` (top-k) of them, plus
`shared_experts` that every token uses (DeepSeek, Qwen2-MoE). As einsums (dims: B sequences,
S tokens per sequence, D d_model, X experts, C token slots of one expert per sequence, F the
expert width, U = 2 for a gated expert's up+gate):

- router: x[B,S,D] * wr[D,X] -> r[B,S,X]                    (2 B S D X FLOPs)
- expert_in: x[B,X,C,D] * wein[X,D,F,U] -> h[B,X,C,F,U]     (weights of ALL X experts resident)
- expert_down: h[B,X,C,F] * weout[X,F,D] -> y[B,X,C,D]
- shared experts: a dense FFN of width shared_experts x expert_d_ff.

C = ceil(q_len * k * load / X): the routed tokens of one sequence spread over X experts (mean
S k / X) times `load`, the busiest expert's load over the mean, which sets the layer's time:
`imbalance` when dropless (capacity_factor None), min(imbalance, capacity_factor) when tokens
beyond the capacity are dropped. So the expert FLOPs are 2 B S k load D F (x U): those of the
active experts, while the weights are those of all experts. docs/moe.md.

Pure: no printing, no files.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from math import ceil, sqrt
from statistics import NormalDist
from typing import Any

from shardline.basics.dtypes import canonical_dtype, dtype_bits
from shardline.errors import InputError
from shardline.ops.einsum import check_size
from shardline.ops.layer import Layer
from shardline.realistic.kernels import ROUTED_EXPERT_LAYERS
from shardline.realistic.modelshape import ModelShape
from shardline.workload.modelspec import MAX_EXPERTS

__all__ = [
    "MoeShape",
    "ROUTED_EXPERT_LAYERS",
    "moe_shape",
    "MOE_FIELDS",
    "expected_experts",
    "expert_slots",
    "random_routing_load",
    "moe_layers",
    "moe_part",
    "decode_experts",
    "decode_rows",
    "idle_params_per_rank",
    "active_ffn_width",
    "between_kernels",
    "EXPERT_AXIS",
    "SLOT_AXIS",
    "boundary_layer",
]

EXPERT_AXIS = "experts"  # logical axis of the experts dim X (expert parallelism splits it)
SLOT_AXIS = "expert_tokens"  # logical axis of C, the token slots of one expert


@dataclass(frozen=True)
class MoeShape:
    """A MoE block's sizes. `expert_d_ff` None: the transformer's d_ff. `capacity_factor` None:
    dropless (every routed token is computed; Megatron-Core's default and MegaBlocks'); a number:
    an expert computes at most capacity_factor x its mean load. `imbalance`: the busiest expert's
    routed tokens over the mean (1.0: perfectly balanced). `dispatch_dtype`: the dtype of the
    tokens the expert-parallel all-to-all sends (None: the block's dtype, bf16 by default; "fp8"
    as DeepSeek-V3 dispatches). `dispatch_einsums`: the tokens reach the experts' slots and come
    back through einsums with one-hot masks (MaxText's dense_matmul with a capacity factor;
    `moe_layers`) rather than by a gather and a scatter."""

    experts: int
    experts_per_token: int
    expert_d_ff: int | None = None
    shared_experts: int = 0
    capacity_factor: float | None = None
    imbalance: float = 1.0
    dense_layers_first: int = 0
    router: bool = True
    dispatch_dtype: str | None = None
    dispatch_einsums: bool = False

    @property
    def load(self) -> float:
        """The busiest expert's tokens over the mean: the imbalance, capped by the capacity; with
        `dispatch_einsums` the capacity itself (the masks' buffers are computed whole, padded)."""
        if self.capacity_factor is None:
            return self.imbalance
        if self.dispatch_einsums:
            return self.capacity_factor
        return min(self.imbalance, self.capacity_factor)


MOE_FIELDS = tuple(f.name for f in fields(MoeShape))


def _int(value: object, what: str, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InputError(f"[moe] {what} must be an integer >= {low}, got {value!r}")
    return check_size(value, f"[moe] {what}") if value else 0


def _factor(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 1.0:
        raise InputError(f"[moe] {what} must be a number >= 1.0, got {value!r}")
    if value > 1e6:
        raise InputError(f"[moe] {what} must be at most 1e6, got {value!r}")
    return float(value)


def moe_shape(value: MoeShape | Mapping[str, object], d_ff: int) -> MoeShape:
    """A checked MoeShape from a MoeShape or a `[moe]` table; expert_d_ff defaults to d_ff."""
    if isinstance(value, MoeShape):
        raw = {f: getattr(value, f) for f in MOE_FIELDS}
    elif isinstance(value, Mapping):
        extra = [k for k in value if k not in MOE_FIELDS]
        if extra:
            raise InputError(f"[moe]: unknown field {extra[0]!r}; fields: {', '.join(MOE_FIELDS)}")
        for need in ("experts", "experts_per_token"):
            if need not in value:
                raise InputError(f"[moe] needs {need}")
        raw = {f.name: f.default for f in fields(MoeShape) if f.name not in value} | dict(value)
    else:
        raise InputError(f"moe must be a table of MoE fields, got {value!r}")
    x, k = (
        _int(raw["experts"], "experts", 1),
        _int(raw["experts_per_token"], "experts_per_token", 1),
    )
    if x > MAX_EXPERTS:
        raise InputError(f"[moe] experts must be at most {MAX_EXPERTS:,}, got {x:,}")
    if k > x:
        raise InputError(f"[moe] experts_per_token ({k}) is more than the {x} experts")
    width = raw["expert_d_ff"] if raw["expert_d_ff"] is not None else d_ff
    cap = raw["capacity_factor"]
    for flag in ("router", "dispatch_einsums"):
        if not isinstance(raw[flag], bool):
            raise InputError(f"[moe] {flag} must be true or false, got {raw[flag]!r}")
    if raw["dispatch_einsums"] and cap is None:
        raise InputError("[moe] dispatch_einsums needs a capacity_factor (the masks' slots)")
    dispatch = raw["dispatch_dtype"]
    return MoeShape(
        experts=x,
        experts_per_token=k,
        expert_d_ff=_int(width, "expert_d_ff", 1),
        shared_experts=_int(raw["shared_experts"], "shared_experts", 0),
        capacity_factor=None if cap is None else _factor(cap, "capacity_factor"),
        imbalance=_factor(raw["imbalance"], "imbalance"),
        dense_layers_first=_int(raw["dense_layers_first"], "dense_layers_first", 0),
        router=raw["router"],
        dispatch_dtype=None if dispatch is None else canonical_dtype(str(dispatch)),
        dispatch_einsums=raw["dispatch_einsums"],
    )


def expected_experts(experts: int, k: int, tokens: int) -> float:
    """Expected distinct experts that `tokens` tokens route to, each choosing k of `experts`
    uniformly: E (1 - (1 - k/E)^T). One expert is missed by one token with probability 1 - k/E
    (k of E chosen without replacement), by T independent tokens with (1 - k/E)^T; summed over
    the E experts by linearity of expectation."""
    if experts < 1 or k < 1 or k > experts or tokens < 0:
        raise InputError("expected_experts needs 1 <= k <= experts and tokens >= 0")
    return experts * (1.0 - (1.0 - k / experts) ** tokens)


def random_routing_load(pairs: float, experts: int, k: int, ranks: int) -> float:
    """The busiest of `ranks` expert-parallel ranks' routed tokens over the mean when every
    token's k experts are a uniform random k-subset of the `experts` (Megatron-Core's forced
    load balancing draws the router's logits as normal samples: RandomSTE in
    megatron/core/transformer/moe/moe_utils.py, NVIDIA/Megatron-LM commit d98e8a64); `pairs`:
    the (token, expert) pairs one rank receives on average, per microbatch and MoE layer.

    A token sends H of its k copies to a rank that holds X/n of the X experts: H is
    hypergeometric, and the ranks' loads over the group's N = n pairs / k independent tokens
    are multivariate hypergeometric sums, Var = s^2 (1 - 1/n) and Cov = -s^2 / n with
    s^2 = pairs (X - k) / (X - 1): the structure of Z_i - mean(Z) for independent Z_i of
    variance s^2, whose largest is on average s e_n above the mean. The loads are near normal
    (hundreds of pairs or more); e_n, the expected largest of n standard normals, by Blom's
    approximation PHI^-1((n - 0.375) / (n + 0.25)) (G. Blom, Statistical Estimates and
    Transformed Beta-Variables, 1958). So load = 1 + e_n sqrt((X - k) / ((X - 1) pairs))."""
    if ranks <= 1 or pairs <= 0 or experts <= k:
        return 1.0
    e_n = NormalDist().inv_cdf((ranks - 0.375) / (ranks + 0.25))
    return 1.0 + e_n * sqrt((experts - k) / ((experts - 1) * pairs))


def expert_slots(q_len: int, moe: MoeShape) -> int:
    """C: token slots of the busiest expert per sequence, ceil(q_len k load / X)."""
    return max(1, ceil(q_len * moe.experts_per_token * moe.load / moe.experts - 1e-9))


def between_kernels(dtype: str) -> str:
    """The dtype tokens travel in between kernels: the block's dtype, but bf16 when the block
    computes in 8 bits or fewer (fp8 training keeps activations in bf16 and casts inside each
    GEMM; Megatron-Core dispatches and combines in bf16 unless told to send fp8)."""
    return dtype if dtype_bits(dtype) >= 16 else "bf16"


def active_ffn_width(moe: MoeShape) -> int:
    """The feed-forward width one token runs through: (k + shared) x expert_d_ff."""
    assert moe.expert_d_ff is not None
    return (moe.experts_per_token + moe.shared_experts) * moe.expert_d_ff


def moe_part(
    moe: MoeShape | Mapping[str, object],
    d: int,
    d_ff: int,
    tokens: tuple[int, int],
    gated: bool,
    dtype: str,
    decode: bool = False,
) -> tuple[tuple[Layer, ...], int, tuple[int, int, int, float]]:
    """The transformer template's MoE feed-forward: its layers for `tokens` = (batch, q_len),
    the width one token runs through, and (the router's experts (0 without a router), the copies
    of each token the dispatch makes: top-k, the idle experts' parameters, the busiest expert's
    load over the mean), as ModelShape takes them. A decode step's expert einsums hold the
    experts its batch touches, ceil(E_touched(B)), and the rest are held but not read
    (`idle_expert_params`); their rows are `decode_rows`."""
    m = moe_shape(moe, d_ff)  # dense_layers_first: templates.dense_first_template
    read = m
    if decode:
        touched = expected_experts(m.experts, m.experts_per_token, tokens[0] * tokens[1])
        read = replace(m, experts=min(m.experts, max(m.experts_per_token, ceil(touched - 1e-9))))
    layers = moe_layers(read, d, tokens[0], tokens[1], gated, dtype, m.experts)
    if decode:
        rows = decode_rows(tokens[0] * tokens[1], m.experts_per_token, m.load, read.experts)
        layers = _with_rows(layers, rows)
    assert m.expert_d_ff is not None
    idle = (m.experts - read.experts) * (3 if gated else 2) * d * m.expert_d_ff
    router = m.experts if m.router else 0
    return layers, active_ffn_width(m), (router, m.experts_per_token, idle, m.load)


def decode_rows(tokens: int, k: int, load: float, held: int) -> int:
    """The rows of a decode step's expert einsums x[R,X,C,D] (C = 1): the batch's `tokens` make
    tokens x k routed copies, spread over the `held` experts it touches, the busiest getting
    `load` times the mean, so each expert runs R = ceil(tokens k load / X) rows. A row per
    sequence and expert (R = B) would count every touched expert against every sequence: X / k
    times the work and the dispatched bytes (32x for DeepSeek-V3 at a batch that touches all
    256 experts)."""
    return max(1, ceil(tokens * k * load / held - 1e-9))


def _with_rows(layers: tuple[Layer, ...], rows: int) -> tuple[Layer, ...]:
    """The expert einsums with their batch dims set to `rows` and their slot dims to 1."""
    out = []
    for layer in layers:
        if layer.axis_dims(EXPERT_AXIS):
            sizes = {dim: rows for dim in layer.axis_dims("batch")}
            sizes |= {dim: 1 for dim in layer.axis_dims(SLOT_AXIS)}
            layer = layer.with_dims(**sizes)
        out.append(layer)
    return tuple(out)


def decode_experts(
    layers: tuple[Layer, ...], model: ModelShape
) -> tuple[tuple[Layer, ...], ModelShape]:
    """A decode template's expert einsums and idle experts for its batch `model.batch`: the
    expert einsums hold max(k, ceil(E_touched)) of the E experts (the rest are idle weights)
    and run `decode_rows` rows each."""
    expert = [i for i, layer in enumerate(layers) if layer.axis_dims(EXPERT_AXIS)]
    if not expert:
        return layers, model
    _, per_expert, total = _expert_counts(layers, model)
    k = model.expert_copies
    tokens = model.batch * model.q_len
    touched = expected_experts(total, k, tokens)
    new = min(total, max(k, ceil(touched - 1e-9)))
    out = list(layers)
    for i in expert:
        out[i] = layers[i].with_dims(**{d: new for d in layers[i].axis_dims(EXPERT_AXIS)})
    rows = decode_rows(tokens, k, model.expert_load, new)
    return _with_rows(tuple(out), rows), replace(
        model, idle_expert_params=(total - new) * per_expert
    )


def idle_params_per_rank(workload: Any, degrees: Mapping[str, int]) -> float:
    """A decode block's held-but-untouched expert parameters on one of the `ep` ranks of
    `degrees` (`workload`: a Workload, its block and its model). The rank holds E/ep experts in
    all, ceil(X/ep) of them in the expert einsums (the X the batch touches), so
    max(0, E/ep - ceil(X/ep)) more sit idle; with ep = 1 that is E - X. (Dividing E - X by ep
    instead made the weights per rank follow the rounding of X.)"""
    model, ep = workload.model, degrees.get("ep", 1)
    if model is None or not model.idle_expert_params:
        return 0.0
    held, per_expert, total = _expert_counts(workload.layers, model)
    return max(0.0, total / ep - ceil(held / ep)) * per_expert


def _expert_counts(layers: tuple[Layer, ...], model: ModelShape) -> tuple[int, int, int]:
    """(experts the expert einsums hold, parameters of one expert, experts in all: the held and
    the idle) of a block whose expert einsums `layers` holds (at least one)."""
    expert = [layer for layer in layers if layer.axis_dims(EXPERT_AXIS)]
    held = expert[0].dims[expert[0].axis_dims(EXPERT_AXIS)[0]]
    per_expert = sum(layer.params() for layer in expert) // held
    return held, per_expert, held + model.idle_expert_params // per_expert


def _shared_expert_layers(
    moe: MoeShape, f: int, d: int, b: int, q_len: int, gated: bool, dtype: str
) -> list[Layer]:
    """The shared experts' feed-forward layers (none when the block has no shared experts): every
    token runs them, so their dims are the dense FFN's, `moe.shared_experts` experts wide."""
    if not moe.shared_experts:
        return []
    base = {"B": "batch", "D": "model", "F": "ffn"}
    out: list[Layer] = []
    fs = moe.shared_experts * f
    sdims = {"B": b, "S": q_len, "D": d, "F": fs}
    axes = base | {"S": "seq"}
    out.append(
        Layer(
            "shared_in" if gated else "shared_up",
            "x[B,S,D] * wsin[D,F,U] -> h[B,S,F,U]" if gated else "x[B,S,D] * wsin[D,F] -> h[B,S,F]",
            sdims | ({"U": 2} if gated else {}),
            dtype=dtype,
            weights=("wsin",),
            tp_dims=("F",),
            axes=axes,
        )
    )
    out.append(
        Layer(
            "shared_down",
            "h[B,S,F] * wsout[F,D] -> y[B,S,D]",
            sdims,
            dtype=dtype,
            weights=("wsout",),
            tp_dims=("F",),
            axes=axes,
        )
    )
    return out


def moe_layers(
    moe: MoeShape, d: int, b: int, q_len: int, gated: bool, dtype: str, routed_to: int = 0
) -> tuple[Layer, ...]:
    """The MoE block's feed-forward layers: router, routed experts, shared experts (dims named by
    logical axis, so that data, tensor and expert parallelism split them). `routed_to`: the
    router's experts when the expert einsums hold fewer (decode); 0: moe.experts."""
    f, x = moe.expert_d_ff, moe.experts
    assert f is not None
    c = expert_slots(q_len, moe)
    base = {"B": "batch", "D": "model", "F": "ffn"}
    routed = base | {"X": EXPERT_AXIS, "C": SLOT_AXIS}
    dims = {"B": b, "X": x, "C": c, "D": d, "F": f}
    sent = moe.dispatch_dtype or between_kernels(dtype)
    combined = between_kernels(dtype)
    up_spec = (
        "x[B,X,C,D] * wein[X,D,F,U] -> h[B,X,C,F,U]"
        if gated
        else "x[B,X,C,D] * wein[X,D,F] -> h[B,X,C,F]"
    )
    out: list[Layer] = []
    if moe.router:
        out.append(
            Layer(
                "router",
                "x[B,S,D] * wr[D,X] -> r[B,S,X]",
                {"B": b, "S": q_len, "D": d, "X": routed_to or x},
                dtype=dtype,
                weights=("wr",),
                axes={"B": "batch", "S": "seq", "D": "model"},
            )
        )
    out.append(
        Layer(
            "expert_in" if gated else "expert_up",
            up_spec,
            dims | ({"U": 2} if gated else {}),
            dtype=dtype,
            dtypes={"x": sent},
            compute_dtype=dtype,
            weights=("wein",),
            tp_dims=("F",),
            axes=routed,
        )
    )
    out.append(
        Layer(
            "expert_down",
            "h[B,X,C,F] * weout[X,F,D] -> y[B,X,C,D]",
            dims,
            dtype=dtype,
            dtypes={"y": combined},
            compute_dtype=dtype,
            weights=("weout",),
            tp_dims=("F",),
            axes=routed,
        )
    )
    out = _with_mask_einsums(out, moe, dims | {"S": q_len}, dtype)
    out += _shared_expert_layers(moe, f, d, b, q_len, gated, dtype)
    return tuple(out)


def _with_mask_einsums(
    layers: list[Layer], moe: MoeShape, dims: Mapping[str, int], dtype: str
) -> list[Layer]:
    """The expert einsums between the two einsums MaxText's dense_matmul runs with a capacity
    factor (AI-Hypercomputer/maxtext MaxText/layers/moe.py at commit 3662540e, `dense_matmul` and
    `generate_masks`): the dispatch "BSM,BSEC -> EBCM" of the tokens with a one-hot mask of each
    token's slot in each expert's capacity C, and the combine "EBCM,BSEC -> BSM" of the expert
    outputs with the mask times the routing weights: 2 B S X C D FLOPs each, on the matrix units
    (a dense mask; MaxText's sparse_matmul path gathers instead). The dispatch mask is a cast of
    the combine mask to bool (no gradient: `constant`); the combine's mask carries the routing
    weights' gradient. Each device runs them for its
    own sequences and all X experts (the batch split as every non-expert layer's), before the
    all-to-all that shards X. The layers unchanged without `moe.dispatch_einsums`."""
    if not moe.dispatch_einsums:
        return layers
    sizes = {k: dims[k] for k in ("B", "S", "X", "C", "D")}
    axes = {"B": "batch", "S": "seq", "D": "model"}
    dispatch = Layer(
        "moe_dispatch",
        "x[B,S,D] * m[B,S,X,C] -> y[B,X,C,D]",
        sizes,
        dtype=dtype,
        axes=axes,
        constant=("m",),
    )
    combine = Layer(
        "moe_combine", "y[B,X,C,D] * m[B,S,X,C] -> z[B,S,D]", sizes, dtype=dtype, axes=axes
    )
    first = next(i for i, layer in enumerate(layers) if layer.axis_dims(EXPERT_AXIS))
    return [*layers[:first], dispatch, *layers[first:], combine]


def boundary_layer(block: tuple[Layer, ...], last: Layer) -> Layer:
    """The layer whose output a pipeline stage that ends with `last` sends on: `last`, unless it
    is an expert einsum (its output is the k routed copies of each token, y[B,X,C,D]); a MoE
    block hands on its combined output, the hidden state [B,S,D], the same array as the attention
    output projection's (the block's first layer with no expert dim and a [B,S,D] output)."""
    if not last.axis_dims(EXPERT_AXIS):
        return last
    for layer in block:
        out = layer.output
        axes = [layer.axes.get(d) for d in out.dims]
        if not layer.axis_dims(EXPERT_AXIS) and axes == ["batch", "seq", "model"]:
            return layer
    return last
