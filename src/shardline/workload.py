"""Workloads as data: a stack of einsum layers, and the built-in transformer templates.

A `Layer` is one two-operand einsum with sizes, per-operand dtypes and the role of each operand:
a *weight* (a parameter, resident on the device), a *cache* (the KV cache), *on-chip* (never
written to HBM, e.g. attention scores inside a flash-attention kernel) or, by default, an
*activation*. A `Workload` is a block of layers run `repeat` times (a transformer block times
its number of layers), forward only or as a training step (forward plus backward).

docs/stack-and-plans.md. Pure: no printing, no files (the TOML and spreadsheet loaders live in
`io/`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import Any

from shardline import kinds
from shardline.dtypes import canonical_dtype, dtype_bits
from shardline.einsum import check_size
from shardline.errors import InputError
from shardline.layer import (
    LOGICAL_AXES,
    Layer,
    backward_layers,
    distinct,
    layer_range,
    matmul_layer,
)
from shardline.modelshape import ModelShape
from shardline.moe import EXPERT_AXIS, decode_experts, moe_part
from shardline.units import short

__all__ = [
    "Layer", "Workload", "PHASES", "LOGICAL_AXES", "TEMPLATE_AXES", "TEMPLATE_PHASES",
    "backward_layers", "transformer", "ffn", "matmul_layer", "FfnShape", "TransformerShape",
]  # fmt: skip

# Forward-only stacks and training steps; the templates add inference prefill and decode.
PHASES: tuple[str, ...] = kinds.PHASES  # closed vocabulary: shardline.kinds.Phase
# The templates' dims: B batch, S and T tokens, D d_model, G kv heads, R query heads per kv head,
# E head dim, F d_ff (J, the fused q/k/v index, and U, up+gate, have no logical axis).
TEMPLATE_AXES = {
    "B": "batch",
    "S": "seq",
    "T": "seq",
    "D": "model",
    "G": "kv_heads",
    "R": "heads",
    "E": "head_dim",
    "F": "ffn",
}
TEMPLATE_PHASES: tuple[str, ...] = kinds.TEMPLATE_PHASES  # shardline.kinds.TemplatePhase
# (workload, moe table, d_ff, MoE FFN einsums) -> workload: shardline.dense_first registers the
# dense first blocks here, so that this module need not import its Workload subclass
MOE_TEMPLATE_HOOKS: list[Callable[[Workload, Any, int, int], Workload]] = []


@dataclass(frozen=True)
class Workload:
    """A block of forward layers run `repeat` times; `phase` "training" adds the backward pass,
    gradients and optimizer state. `batch_dim` is the dim that data parallelism and microbatches
    split (one batch item = one unit of it: a sequence, or a row of a plain matmul)."""

    name: str
    layers: tuple[Layer, ...]
    repeat: int = 1
    phase: str = "forward"
    batch_dim: str | None = None
    kind: str = "stack"  # "stack", "transformer" or "ffn"
    item: str = "row"  # what one unit of the batch dim is, for throughput
    tokens_per_item: int = 1
    description: str = ""
    kv_cache_formula: dict[str, int] | None = None  # templates: terms of 2*L*n_kv*d_head*S*B*s_kv
    model: ModelShape | None = None  # transformer templates: the whole model's sizes

    def __post_init__(self) -> None:
        if not isinstance(self.name, str):
            raise InputError(f"a workload's name must be a string, got {short(self.name)}")
        if isinstance(self.layers, str | bytes) or not isinstance(self.layers, Sequence):
            raise InputError(f"workload {self.name!r}: layers must be a list of Layer")
        layers = tuple(self.layers)
        if not all(isinstance(layer, Layer) for layer in layers):
            raise InputError(f"workload {self.name!r}: every layer must be a Layer")
        if not layers:
            raise InputError(f"workload {self.name!r} has no layers")
        if isinstance(self.repeat, bool) or not isinstance(self.repeat, int) or self.repeat < 1:
            raise InputError(f"workload {self.name!r}: repeat must be a positive integer")
        check_size(self.repeat, f"workload {self.name!r}: repeat")
        if self.phase not in PHASES + ("prefill", "decode"):
            raise InputError(
                f"workload {self.name!r}: phase must be one of "
                f"{', '.join(PHASES)}, got {self.phase!r}"
            )
        seen: set[str] = set()
        for layer in layers:
            if layer.phase != "forward":
                raise InputError(
                    f"workload layers are forward layers; {layer.name!r} is {layer.phase}"
                )
            if layer.name in seen:
                raise InputError(f"workload {self.name!r}: two layers are named {layer.name!r}")
            seen.add(layer.name)
        if self.batch_dim is not None:
            if not isinstance(self.batch_dim, str):
                raise InputError(f"batch_dim must be a dimension name, got {short(self.batch_dim)}")
            missing = [layer.name for layer in layers if self.batch_dim not in layer.dims]
            if missing:
                raise InputError(
                    f"workload {self.name!r}: batch_dim {self.batch_dim} is not a "
                    f"dimension of layer(s) {', '.join(missing)}"
                )
        object.__setattr__(self, "layers", layers)

    # -- structure -----------------------------------------------------------------------------
    @property
    def training(self) -> bool:
        return self.phase == "training"

    @property
    def decode(self) -> bool:
        """A template's decode step: one new token per sequence against a cached context."""
        return self.model is not None and self.model.decode

    @cached_property
    def batch(self) -> int:
        """Batch items: the smallest size of the batch dim over the layers (1 without one)."""
        if self.batch_dim is None:
            return 1
        # a decode step's expert einsums run rows of routed tokens, not sequences (moe.decode_rows)
        rows = [x for x in self.layers if not x.axis_dims(EXPERT_AXIS)] or self.layers
        return min(layer.dims[self.batch_dim] for layer in rows)

    @cached_property
    def distinct_layers(self) -> list[tuple[Layer, int]]:
        """`shardline.layer.distinct` of the block: [(layer, instances per block)]."""
        return distinct(self.layers)

    @cached_property
    def block_instances(self) -> int:
        """Layer instances in one block: the sum of the layers' counts."""
        return sum(layer.count for layer in self.layers)

    @cached_property
    def layer_count(self) -> int:
        """Layer instances in the whole stack: repeat x the sum of counts."""
        return self.repeat * self.block_instances

    def pipeline_splits(self, pp: int) -> str | None:
        """How `pp` stages cut the stack: "blocks" (whole repeats of the layer list, so each stage
        sends the block's output), "layers" (layer instances, when pp divides the layer count but
        not the blocks), "uneven" (whole blocks, some stages one block more: 126 layers on 8
        stages are 6 stages of 16 and 2 of 15; the slowest stage sets the pipeline's pace), or
        None when there are fewer blocks than stages and the layers do not divide evenly."""
        if self.repeat > 1 and self.repeat % pp == 0:
            return "blocks"
        if self.layer_count % pp == 0:
            return "layers"
        if self.repeat >= pp:
            return "uneven"
        return None

    def chunks_fit(self, pp: int, interleave: int) -> bool:
        """Can each of `pp` stages hold `interleave` model chunks of at least one block (or, for
        a layer split, one layer) each (Narayanan et al. 2021: the layers of a stage split into
        V chunks)?"""
        if interleave <= 1 or pp <= 1:
            return True
        how = self.pipeline_splits(pp)
        if how == "layers":
            return self.layer_count // pp >= interleave
        return how is not None and min(self.stage_blocks(pp)) >= interleave

    def blocks_in(self, layers: Sequence[tuple[Layer, int]]) -> float:
        """Blocks that [(layer, instances)] make up: layer instances over the layers per block
        (fractional when a stage cuts a block)."""
        return sum(n for _, n in layers) / self.block_instances

    def stage_blocks(self, pp: int) -> list[int]:
        """Blocks per stage of an "uneven" split: the first `repeat % pp` stages one more (the
        last stages, which also run the LM head, get the fewer)."""
        q, r = divmod(self.repeat, pp)
        return [q + 1] * r + [q] * (pp - r)

    def pipeline_stages(self, pp: int) -> list[tuple[list[tuple[Layer, int]], Layer]]:
        """Each of `pp` stages as ([(layer, instances)], the stage's last layer), in order."""
        how = self.pipeline_splits(pp)
        if how is None:
            raise InputError(
                f"pp={pp} is more than the {self.repeat} blocks and does not divide the "
                f"{self.layer_count} layers; pipeline stages need at least one block each"
            )
        if how in ("blocks", "uneven"):
            sizes = [self.repeat // pp] * pp if how == "blocks" else self.stage_blocks(pp)
            return [
                ([(layer, layer.count * blocks) for layer in self.layers], self.layers[-1])
                for blocks in sizes
            ]
        per = self.layer_count // pp
        return [layer_range(self.layers, s * per, (s + 1) * per) for s in range(pp)]

    def step_layers(self) -> list[Layer]:
        """The einsums of one step of one block: the forward layers, then (training) the backward
        layers in reverse order."""
        out = list(self.layers)
        if self.training:
            for layer in reversed(self.layers):
                out.extend(backward_layers(layer))
        return out

    def identity(self) -> dict[str, Any]:
        """The keys every JSON result names its workload by."""
        return {
            "name": self.name,
            "kind": self.kind,
            "phase": self.phase,
            "batch_dim": self.batch_dim,
        }

    # -- parameters ----------------------------------------------------------------------------
    def params(self) -> int:
        return self.repeat * sum(layer.params() * layer.count for layer in self.layers)

    def weight_bytes(self) -> int:
        return self.repeat * sum(layer.weight_bytes() * layer.count for layer in self.layers)

    def with_batch(self, batch: int) -> Workload:
        """The same workload with the batch dim set to `batch` in every layer."""
        if self.batch_dim is None:
            raise InputError(f"workload {self.name!r} names no batch dimension (batch_dim)")
        batch = check_size(int(batch), "batch")
        layers = tuple(layer.with_dims(**{self.batch_dim: batch}) for layer in self.layers)
        formula = None
        if self.kv_cache_formula is not None:
            formula = {**self.kv_cache_formula, "B": batch}
        model = replace(self.model, batch=batch) if self.model is not None else None
        if model is not None and model.decode and model.expert_copies:  # experts it touches
            layers, model = decode_experts(layers, model)
        return replace(self, layers=layers, kv_cache_formula=formula, model=model)

    def with_phase(self, phase: str) -> Workload:
        if phase == self.phase:
            return self
        if self.kind == "stack" and phase not in PHASES:
            raise InputError(
                f"phase {phase!r} applies to transformer templates only; a layer stack "
                f"runs forward or training"
            )
        if phase not in PHASES:
            raise InputError(f"phase {phase!r}: rebuild the template with phase={phase!r}")
        return replace(self, phase=phase)


# ----------------------------------------------------------------------------------------------
# Templates


def _with_axes(layers: Sequence[Layer]) -> tuple[Layer, ...]:
    """The template layers with their dims named by logical axis (TEMPLATE_AXES)."""
    return tuple(
        replace(
            layer,
            axes={**layer.axes, **{d: TEMPLATE_AXES[d] for d in layer.dims if d in TEMPLATE_AXES}},
        )
        for layer in layers
    )


def _flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise InputError(f"{what} must be True or False, got {value!r}")
    return value


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{what} must be a positive integer, got {value!r}")
    return check_size(value, what)


@dataclass(frozen=True)
class FfnShape:
    """The feed-forward block's sizes: `ffn(FfnShape(...))` or `ffn(d_model=..., ...)`."""

    d_model: int
    d_ff: int
    batch: int
    seq_len: int = 1
    gated: bool = True
    layers: int = 1


@dataclass(frozen=True)
class TransformerShape:
    """A decoder block's sizes: `transformer(TransformerShape(...))` or `transformer(d_model=...)`.
    kv_heads defaults to heads (multi-head attention), head_dim to d_model / heads."""

    d_model: int
    d_ff: int
    heads: int
    batch: int
    seq_len: int
    kv_heads: int | None = None
    head_dim: int | None = None
    gated: bool = True
    layers: int = 1
    vocab: int | None = None  # None: the embedding and the LM head are left out
    attention: str = "flash"  # "flash" (scores stay on chip) or "standard" (scores via HBM)
    rotary: bool = True  # rotary position embedding on q and k (False: learned positions)
    qk_norm: bool = False  # an RMS norm over each head of q and of k (Qwen3, Gemma 3)
    mla: Any = None  # multi-head latent attention: an MLA or its table (attention_variants)
    sliding_window: Any = None  # sliding-window layers: a SlidingWindow or its table


def _ffn_layers(d: int, f: int, b: int, s: int, gated: bool, dtype: str) -> tuple[Layer, ...]:
    up_spec = "x[B,S,D] * win[D,F,U] -> h[B,S,F,U]" if gated else "x[B,S,D] * win[D,F] -> h[B,S,F]"
    up_dims = {"B": b, "S": s, "D": d, "F": f} | ({"U": 2} if gated else {})
    up = Layer(
        "ffn_in" if gated else "ffn_up", up_spec, up_dims, dtype=dtype, weights=("win",),
        tp_dims=("F",),
    )  # fmt: skip
    down = Layer(
        "ffn_down", "h[B,S,F] * wout[F,D] -> y[B,S,D]", {"B": b, "S": s, "D": d, "F": f},
        dtype=dtype, weights=("wout",), tp_dims=("F",),
    )  # fmt: skip
    return _with_axes((up, down))


def ffn(
    shape: FfnShape | None = None,
    *,
    phase: str = "training",
    dtype: str = "bf16",
    name: str | None = None,
    **sizes: Any,
) -> Workload:
    """The transformer feed-forward block alone (the seed 000 follow-up): In[B,S,D] x W_in[D,F]
    (x W_gate) -> H[B,S,F] x W_out[F,D] -> Out[B,S,D]; Megatron tensor parallelism splits F.
    `sizes`: the fields of FfnShape (d_model, d_ff, batch, seq_len, gated, layers)."""
    shape = shape or FfnShape(**sizes)
    d, f = _positive(shape.d_model, "d_model"), _positive(shape.d_ff, "d_ff")
    b, s, n_layers = (
        _positive(shape.batch, "batch"),
        _positive(shape.seq_len, "seq_len"),
        _positive(shape.layers, "layers"),
    )
    if phase not in ("training", "forward", "prefill", "decode"):
        raise InputError(f"ffn phase must be training, forward, prefill or decode, got {phase!r}")
    if phase == "decode":
        s = 1
    gated = _flag(shape.gated, "gated")
    label = name or f"ffn d_model={d} d_ff={f}{' gated' if gated else ''} x{n_layers}"
    return Workload(
        label,
        _ffn_layers(d, f, b, s, gated, dtype),
        repeat=n_layers,
        phase="training" if phase == "training" else "forward",
        batch_dim="B",
        kind="ffn",
        item="token" if s == 1 else "sequence",
        tokens_per_item=s,
        description=f"{phase}: batch {b} x seq {s} tokens",
    )


@dataclass(frozen=True)
class _Block:
    """A transformer block's checked sizes (the template's dims) and dtypes."""

    d: int
    f: int
    h: int
    g: int
    e: int
    b: int
    s: int
    n_layers: int
    gated: bool
    q_len: int
    k_len: int
    cache: tuple[str, ...]
    dtype: str
    kv_dtype: str
    onchip_scores: bool


def _block(shape: TransformerShape, phase: str, dtype: str, kv_dtype: str | None) -> _Block:
    d, f = _positive(shape.d_model, "d_model"), _positive(shape.d_ff, "d_ff")
    h = _positive(shape.heads, "heads")
    g = _positive(shape.kv_heads if shape.kv_heads is not None else shape.heads, "kv_heads")
    b, s = _positive(shape.batch, "batch"), _positive(shape.seq_len, "seq_len")
    n_layers = _positive(shape.layers, "layers")
    head_dim = shape.head_dim
    if head_dim is None:
        if d % h:
            raise InputError(f"d_model {d} is not a multiple of heads {h}; give head_dim")
        head_dim = d // h
    e = _positive(head_dim, "head_dim")
    if h % g:
        raise InputError(f"heads ({h}) must be a multiple of kv_heads ({g})")
    if phase not in TEMPLATE_PHASES:
        raise InputError(
            f"transformer phase must be one of {', '.join(TEMPLATE_PHASES)}, got {phase!r}"
        )
    q_len, k_len = (1, s) if phase == "decode" else (s, s)
    cache = ("k", "v") if phase in ("prefill", "decode") else ()
    kv = canonical_dtype(kv_dtype if kv_dtype is not None else dtype)
    flash, gated = shape.attention == "flash", _flag(shape.gated, "gated")
    return _Block(
        d, f, h, g, e, b, s, n_layers, gated, q_len, k_len, cache, dtype, kv, flash
    )  # fmt: skip


def _attention_layers(k: _Block) -> list[Layer]:
    r = k.h // k.g
    onchip = ("p",) if k.onchip_scores else ()
    common = {"B": k.b, "D": k.d, "G": k.g, "E": k.e, "S": k.q_len}
    scores = {"B": k.b, "S": k.q_len, "T": k.k_len, "G": k.g, "R": r, "E": k.e}
    cached = bool(k.cache)
    return [
        Layer(
            "attn_qkv", "x[B,S,D] * wqkv[D,G,J,E] -> qkv[B,S,G,J,E]", {**common, "J": r + 2},
            dtype=k.dtype, weights=("wqkv",), tp_dims=("G", "J"),
        ),
        Layer(
            "attn_scores", "q[B,S,G,R,E] * k[B,T,G,E] -> p[B,G,R,S,T]", scores, dtype=k.dtype,
            dtypes={"k": k.kv_dtype} if cached else {}, cache=k.cache[:1], onchip=onchip,
            tp_dims=("G", "R"), kernel="attention",
        ),
        Layer(
            "attn_values", "p[B,G,R,S,T] * v[B,T,G,E] -> o[B,S,G,R,E]", scores, dtype=k.dtype,
            dtypes={"v": k.kv_dtype} if cached else {}, cache=k.cache[1:], onchip=onchip,
            tp_dims=("G", "R"), kernel="attention",
        ),
        Layer(
            "attn_out", "o[B,S,G,R,E] * wo[G,R,E,D] -> y[B,S,D]", {**common, "R": r},
            dtype=k.dtype, weights=("wo",), tp_dims=("G", "R"),
        ),
    ]  # fmt: skip


def transformer(
    shape: TransformerShape | None = None,
    *,
    phase: str = "training",
    dtype: str = "bf16",
    kv_dtype: str | None = None,
    name: str | None = None,
    moe: Any = None,
    **sizes: Any,
) -> Workload:
    """A decoder block (attention + feed-forward) repeated `layers` times; `sizes`: the fields of
    TransformerShape. Dims: B batch, S query and T key tokens (decode: S = 1, T the context), D
    d_model, G kv heads, R query heads per kv head, E head dim, F d_ff, U = 2 for a gated FFN's
    fused up+gate, J = R + 2 for the fused W_qkv (one dX all-reduce under tp, as Megatron). Flash
    attention keeps the scores on chip; `vocab` adds the embedding and LM head; `moe` (a MoeShape
    or a `[moe]` table) makes each block a mixture of experts (docs/moe.md), the `mla` and
    `sliding_window` tables change the attention (shardline.attention_variants). Phases:
    training (forward + backward), forward, prefill and decode (with a KV cache)."""
    shape = shape or TransformerShape(**sizes)
    k = _block(shape, phase, dtype, kv_dtype)
    from shardline.attention_variants import template_attention

    attention, variant, plain_cache = template_attention(
        shape, k, phase, lambda keys: _attention_layers(replace(k, k_len=keys))
    )
    ffn_layers, ffn_width, moe_sizes = (  # dense, or a mixture of experts (shardline.moe)
        (_ffn_layers(k.d, k.f, k.b, k.q_len, k.gated, dtype), k.f, (0, 0, 0, 1.0)) if moe is None
        else moe_part(moe, k.d, k.f, (k.b, k.q_len), k.gated, dtype, phase == "decode")
    )  # fmt: skip
    model = ModelShape(
        k.d, ffn_width, k.h, k.g, variant.pop("head_dim", k.e), k.n_layers, k.s, k.q_len, k.b,
        k.gated, shape.vocab, shape.attention, _flag(shape.rotary, "rotary"), True,
        canonical_dtype(dtype), *moe_sizes[:3], **variant, qk_norm=_flag(shape.qk_norm, "qk_norm"),
        expert_load=moe_sizes[3],
    )  # fmt: skip
    block = _with_axes(attention) + ffn_layers  # the FFN part names its own axes
    label = name or f"transformer d_model={k.d} d_ff={k.f} heads={k.h}/{k.g} x{k.n_layers} {phase}"
    formula = {
        "L": k.n_layers, "n_kv": k.g, "d_head": k.e, "S": k.s, "B": k.b,
        "s_kv_bits": dtype_bits(k.kv_dtype),
    }  # fmt: skip
    workload = Workload(
        label,
        block,
        repeat=k.n_layers,
        phase="training" if phase == "training" else ("forward" if phase == "forward" else phase),
        batch_dim="B",
        kind="transformer",
        item="sequence",
        tokens_per_item=k.q_len,
        description=f"{phase}: batch {k.b}, {k.q_len} query x {k.k_len} key tokens",
        kv_cache_formula=formula if k.cache and plain_cache else None,
        model=model,
    )
    for hook in MOE_TEMPLATE_HOOKS if moe is not None else ():
        workload = hook(workload, moe, k.f, len(ffn_layers))
    return workload
