"""Workloads as data: a stack of einsum layers, and the built-in transformer templates.

A `Layer` is one two-operand einsum with sizes, per-operand dtypes and the role of each operand:
a *weight* (a parameter, resident on the device), a *cache* (the KV cache), *on-chip* (never
written to HBM, e.g. attention scores inside a flash-attention kernel) or, by default, an
*activation*. A `Workload` is a block of layers run `repeat` times (a transformer block times
its number of layers), forward only or as a training step (forward plus backward).

MODEL.md section 6. Pure: no printing, no files (the TOML and spreadsheet loaders live in `io/`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from math import prod
from typing import Any

from shardline.dtypes import canonical_dtype, dtype_bits
from shardline.einsum import EinsumSpec, Operand, check_dims, check_size, parse_einsum
from shardline.errors import InputError

__all__ = [
    "Layer",
    "Workload",
    "PHASES",
    "LOGICAL_AXES",
    "TEMPLATE_AXES",
    "TEMPLATE_PHASES",
    "backward_layers",
    "transformer",
    "ffn",
    "matmul_layer",
]

# Forward-only stacks and training steps; the templates add inference prefill and decode.
PHASES = ("forward", "training")
# Logical axes a layer can name its dims by (`Layer.axes`); strategies split logical axes.
LOGICAL_AXES = ("batch", "seq", "heads", "kv_heads", "head_dim", "model", "ffn", "vocab")
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
TEMPLATE_PHASES = ("training", "prefill", "decode", "forward")


def _names(value: Sequence[str] | str | None, what: str) -> tuple[str, ...]:
    if value is None:
        return ()
    if isinstance(value, str):
        return (value,)
    out = tuple(str(v) for v in value)
    if len(set(out)) != len(out):
        raise InputError(f"{what} lists an operand twice: {', '.join(out)}")
    return out


@dataclass(frozen=True)
class Layer:
    """One einsum of a stack: `Layer("up", "x[B,S,D] * w[D,F] -> h[B,S,F]", dims, weights=("w",))`.

    `count` repeats the layer in place (count distinct layers of the same shape, each with its own
    weights). `tp_dims` are the dims tensor parallelism splits, in order (the degree fills the
    first, then the next). `grad_of` names the weight whose gradient a backward layer produces.
    `axes` names dims by logical axis ({"B": "batch", "F": "ffn"}), so that strategies split
    logical axes: data parallelism splits the dims named "batch".
    """

    name: str
    spec: str
    dims: Mapping[str, int]
    dtype: str = "bf16"
    dtypes: Mapping[str, str] = field(default_factory=dict)
    compute_dtype: str | None = None
    weights: tuple[str, ...] = ()
    cache: tuple[str, ...] = ()
    onchip: tuple[str, ...] = ()
    count: int = 1
    tp_dims: tuple[str, ...] = ()
    phase: str = "forward"  # "forward" or "backward"
    grad_of: str | None = None
    axes: Mapping[str, str] = field(default_factory=dict)  # dim -> logical axis (LOGICAL_AXES)

    def __post_init__(self) -> None:
        where = f"layer {self.name!r}"
        if not str(self.name).strip():
            raise InputError("a layer needs a non-empty name")
        parsed = parse_einsum(self.spec)
        dims: dict[str, int] = {}
        raw_dims: dict[str, Any] = dict(self.dims)
        for dim, size in raw_dims.items():
            if isinstance(size, bool) or not isinstance(size, int):
                if isinstance(size, float) and size.is_integer():
                    size = int(size)
                else:
                    raise InputError(
                        f"{where}: dimension {dim} must be a positive integer, got {size!r}"
                    )
            dims[str(dim)] = check_size(int(size), f"{where}: dimension {dim}")
        try:
            check_dims(parsed, dims)
        except InputError as exc:
            raise InputError(
                f"{where} ({parsed.text()}): {exc}".replace(" in --dims", "")
            ) from None
        operand_names = [op.name for op in parsed.operands]
        per_op: dict[str, str] = {}
        unknown = set(self.dtypes) - set(operand_names)
        if unknown:
            raise InputError(
                f"{where}: dtypes name unknown operand(s) {', '.join(sorted(unknown))}; "
                f"operands are {', '.join(operand_names)}"
            )
        base = canonical_dtype(self.dtype)
        for name in operand_names:
            per_op[name] = canonical_dtype(self.dtypes.get(name, base))
        weights = _names(self.weights, f"{where}: weights")
        cache = _names(self.cache, f"{where}: cache")
        onchip = _names(self.onchip, f"{where}: onchip")
        for role, names in (("weights", weights), ("cache", cache), ("onchip", onchip)):
            bad = [n for n in names if n not in operand_names]
            if bad:
                raise InputError(
                    f"{where}: {role} names unknown operand(s) {', '.join(bad)}; "
                    f"operands are {', '.join(operand_names)}"
                )
        for a_role, a, b_role, b in (
            ("weights", weights, "cache", cache),
            ("weights", weights, "onchip", onchip),
            ("cache", cache, "onchip", onchip),
        ):
            both = set(a) & set(b)
            if both:
                raise InputError(
                    f"{where}: operand {', '.join(sorted(both))} is both {a_role} and {b_role}"
                )
        if self.phase == "forward" and parsed.out.name in weights:
            raise InputError(f"{where}: the output {parsed.out.name} cannot be a weight")
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise InputError(f"{where}: count must be a positive integer, got {self.count!r}")
        tp_dims = _names(self.tp_dims, f"{where}: tp_dims")
        bad_tp = [d for d in tp_dims if d not in dims]
        if bad_tp:
            raise InputError(
                f"{where}: tp_dim {', '.join(bad_tp)} is not a dimension of {parsed.text()}"
            )
        axes = {str(k): str(v) for k, v in dict(self.axes).items()}
        bad_axes = [f"{d}={a}" for d, a in axes.items() if d not in dims or a not in LOGICAL_AXES]
        if bad_axes:
            raise InputError(
                f"{where}: axes {', '.join(bad_axes)}: each key must be a dimension and each "
                f"value one of {', '.join(LOGICAL_AXES)}"
            )
        if self.phase not in ("forward", "backward"):
            raise InputError(f"{where}: phase must be forward or backward, got {self.phase!r}")
        if self.compute_dtype is not None:
            compute = canonical_dtype(self.compute_dtype)
        else:  # the widest input's dtype (bf16 activations with int8 weights compute in bf16)
            lhs, rhs = per_op[parsed.lhs.name], per_op[parsed.rhs.name]
            compute = rhs if dtype_bits(rhs) > dtype_bits(lhs) else lhs
        object.__setattr__(self, "name", str(self.name).strip())
        object.__setattr__(self, "spec", parsed.text())
        object.__setattr__(self, "dims", dims)
        object.__setattr__(self, "dtype", base)
        object.__setattr__(self, "dtypes", per_op)
        object.__setattr__(self, "compute_dtype", compute)
        object.__setattr__(self, "weights", weights)
        object.__setattr__(self, "cache", cache)
        object.__setattr__(self, "onchip", onchip)
        object.__setattr__(self, "tp_dims", tp_dims)
        object.__setattr__(self, "axes", axes)

    @cached_property
    def parsed(self) -> EinsumSpec:
        return parse_einsum(self.spec)

    def axis_dims(self, axis: str) -> tuple[str, ...]:
        """The dims this layer names as logical axis `axis`, in dim order."""
        return tuple(d for d in self.dims if self.axes.get(d) == axis)

    def operand(self, name: str) -> Operand:
        for op in self.parsed.operands:
            if op.name == name:
                return op
        raise KeyError(name)

    def role(self, name: str) -> str:
        """ "weight", "cache", "onchip" or "activation"."""
        if name in self.weights:
            return "weight"
        if name in self.cache:
            return "cache"
        if name in self.onchip:
            return "onchip"
        return "activation"

    def operand_bytes(self, name: str, dims: Mapping[str, int] | None = None) -> int:
        """Bytes of one operand at these sizes (default: the layer's own), in whole bytes."""
        sizes = self.dims if dims is None else dims
        elements = prod(sizes[d] for d in self.operand(name).dims)
        return (elements * dtype_bits(self.dtypes[name]) + 7) // 8

    def operand_elements(self, name: str) -> int:
        return prod(self.dims[d] for d in self.operand(name).dims)

    @property
    def inputs(self) -> tuple[Operand, Operand]:
        return (self.parsed.lhs, self.parsed.rhs)

    @property
    def output(self) -> Operand:
        return self.parsed.out

    def params(self) -> int:
        """Parameters of one instance: elements of its weight operands (forward layers)."""
        if self.phase != "forward":
            return 0
        return sum(self.operand_elements(w) for w in self.weights)

    def weight_bytes(self) -> int:
        return sum(self.operand_bytes(w) for w in self.weights) if self.phase == "forward" else 0

    def with_dims(self, **sizes: int) -> Layer:
        dims = dict(self.dims)
        for name, size in sizes.items():
            if name in dims:
                dims[name] = size
        return replace(self, dims=dims)


def backward_layers(layer: Layer) -> list[Layer]:
    """The backward einsums of `C = A (x) B`: dA = dC (x) B -> A and dB = A (x) dC -> B, one per
    input that needs a gradient (activations and weights; a cache needs none). Each has the same
    set of dims, so the same FLOPs: backward = 2 x forward ("How to Scale Your Model", Part 4:
    training FLOPs ~ 6 x params x tokens, forward 2)."""
    a, b, c = layer.parsed.lhs, layer.parsed.rhs, layer.parsed.out
    dc = f"d{c.name}"
    grad_onchip = c.name in layer.onchip
    out: list[Layer] = []
    for target, other in ((a, b), (b, a)):
        if layer.role(target.name) == "cache":
            continue
        d_target = f"d{target.name}"
        grad_in = f"{dc}[{','.join(c.dims)}]"
        kept = f"{other.name}[{','.join(other.dims)}]"
        result = f"{d_target}[{','.join(target.dims)}]"
        spec = (
            f"{grad_in} * {kept} -> {result}" if other is b else f"{kept} * {grad_in} -> {result}"
        )
        weights = tuple(w for w in (other.name,) if w in layer.weights)
        cache = tuple(x for x in (other.name,) if x in layer.cache)
        onchip = tuple(
            x
            for x, on in (
                (dc, grad_onchip),
                (other.name, other.name in layer.onchip),
                (d_target, target.name in layer.onchip),
            )
            if on
        )
        is_weight = target.name in layer.weights
        out.append(
            Layer(
                name=f"{layer.name}.grad_{target.name}",
                spec=spec,
                dims=layer.dims,
                dtype=layer.dtype,
                dtypes={
                    dc: layer.dtypes[c.name],
                    other.name: layer.dtypes[other.name],
                    d_target: layer.dtypes[target.name],
                },
                compute_dtype=layer.compute_dtype,
                weights=weights,
                cache=cache,
                onchip=onchip,
                count=layer.count,
                tp_dims=layer.tp_dims,
                axes=layer.axes,
                phase="backward",
                grad_of=target.name if is_weight else None,
            )
        )
    return out


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
    kv_cache_formula: dict[str, int] | None = (
        None  # templates: the terms of 2*L*n_kv*d_head*S*B*s_kv
    )

    def __post_init__(self) -> None:
        layers = tuple(self.layers)
        if not layers:
            raise InputError(f"workload {self.name!r} has no layers")
        if isinstance(self.repeat, bool) or not isinstance(self.repeat, int) or self.repeat < 1:
            raise InputError(
                f"workload {self.name!r}: repeat must be a positive integer, got {self.repeat!r}"
            )
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
    def batch(self) -> int:
        """Batch items: the smallest size of the batch dim over the layers (1 without one)."""
        if self.batch_dim is None:
            return 1
        return min(layer.dims[self.batch_dim] for layer in self.layers)

    @property
    def layer_count(self) -> int:
        """Layer instances in the whole stack: repeat x the sum of counts."""
        return self.repeat * sum(layer.count for layer in self.layers)

    def pipeline_splits(self, pp: int) -> str | None:
        """How `pp` stages cut the stack: "blocks" (whole repeats of the layer list, so each stage
        sends the block's output), "layers" (layer instances, when pp divides the layer count but
        not the blocks), or None when neither divides evenly."""
        if self.repeat > 1 and self.repeat % pp == 0:
            return "blocks"
        if self.layer_count % pp == 0:
            return "layers"
        return None

    def pipeline_stages(self, pp: int) -> list[tuple[list[tuple[Layer, int]], Layer]]:
        """Each of `pp` stages as ([(layer, instances)], the stage's last layer), in order."""
        how = self.pipeline_splits(pp)
        if how is None:
            blocks = f" ({self.repeat} blocks of {self.layer_count // self.repeat})"
            raise InputError(
                f"pp={pp} does not divide the {self.layer_count} layers"
                + (blocks if self.repeat > 1 else "")
                + "; pipeline stages need an equal share"
            )
        if how == "blocks":
            per_block = [(layer, layer.count) for layer in self.layers]
            stage = [(layer, n * (self.repeat // pp)) for layer, n in per_block]
            return [(stage, self.layers[-1]) for _ in range(pp)]
        flat = [
            layer for _ in range(self.repeat) for layer in self.layers for _ in range(layer.count)
        ]
        per = len(flat) // pp
        out: list[tuple[list[tuple[Layer, int]], Layer]] = []
        for s in range(pp):
            part = flat[s * per : (s + 1) * per]
            merged: dict[int, list[Any]] = {}
            for layer in part:
                merged.setdefault(id(layer), [layer, 0])[1] += 1
            out.append(([(entry[0], entry[1]) for entry in merged.values()], part[-1]))
        return out

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
        return replace(self, layers=layers, kv_cache_formula=formula)

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


def matmul_layer(
    name: str,
    m: int,
    k: int,
    n: int,
    *,
    dtype: str = "bf16",
    count: int = 1,
    tp_dim: str | None = None,
    **kwargs: Any,
) -> Layer:
    """x[M,K] * w[K,N] -> y[M,N] with w a weight; tensor parallelism splits the larger of K, N."""
    if tp_dim is None:
        tp_dim = "N" if n >= k else "K"
    return Layer(
        name,
        "x[M,K] * w[K,N] -> y[M,N]",
        {"M": m, "K": k, "N": n},
        dtype=dtype,
        weights=("w",),
        count=count,
        tp_dims=(tp_dim,),
        **kwargs,
    )


def _with_axes(layers: Sequence[Layer]) -> tuple[Layer, ...]:
    """The template layers with their dims named by logical axis (TEMPLATE_AXES)."""
    return tuple(
        replace(layer, axes={d: TEMPLATE_AXES[d] for d in layer.dims if d in TEMPLATE_AXES})
        for layer in layers
    )


def _positive(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{what} must be a positive integer, got {value!r}")
    return check_size(value, what)


def ffn(
    *,
    d_model: int,
    d_ff: int,
    batch: int,
    seq_len: int = 1,
    gated: bool = True,
    layers: int = 1,
    phase: str = "training",
    dtype: str = "bf16",
    name: str | None = None,
) -> Workload:
    """The transformer feed-forward block alone (the seed 000 follow-up): In[B,S,D] x W_in[D,F]
    (x W_gate) -> H[B,S,F] x W_out[F,D] -> Out[B,S,D]; Megatron tensor parallelism splits F."""
    d, f = _positive(d_model, "d_model"), _positive(d_ff, "d_ff")
    b, s, n_layers = (
        _positive(batch, "batch"),
        _positive(seq_len, "seq_len"),
        _positive(layers, "layers"),
    )
    if phase not in ("training", "forward", "prefill", "decode"):
        raise InputError(f"ffn phase must be training, forward, prefill or decode, got {phase!r}")
    if phase == "decode":
        s = 1
    up_spec = "x[B,S,D] * win[D,F,U] -> h[B,S,F,U]" if gated else "x[B,S,D] * win[D,F] -> h[B,S,F]"
    up_dims = {"B": b, "S": s, "D": d, "F": f} | ({"U": 2} if gated else {})
    block = (
        Layer(
            "ffn_in" if gated else "ffn_up",
            up_spec,
            up_dims,
            dtype=dtype,
            weights=("win",),
            tp_dims=("F",),
        ),
        Layer(
            "ffn_down",
            "h[B,S,F] * wout[F,D] -> y[B,S,D]",
            {"B": b, "S": s, "D": d, "F": f},
            dtype=dtype,
            weights=("wout",),
            tp_dims=("F",),
        ),
    )
    label = name or f"ffn d_model={d} d_ff={f}{' gated' if gated else ''} x{n_layers}"
    return Workload(
        label,
        _with_axes(block),
        repeat=n_layers,
        phase="training" if phase == "training" else "forward",
        batch_dim="B",
        kind="ffn",
        item="token" if s == 1 else "sequence",
        tokens_per_item=s,
        description=f"{phase}: batch {b} x seq {s} tokens",
    )


def transformer(
    *,
    d_model: int,
    d_ff: int,
    heads: int,
    batch: int,
    seq_len: int,
    kv_heads: int | None = None,
    head_dim: int | None = None,
    gated: bool = True,
    layers: int = 1,
    phase: str = "training",
    dtype: str = "bf16",
    kv_dtype: str | None = None,
    name: str | None = None,
) -> Workload:
    """A decoder transformer block (attention + feed-forward) repeated `layers` times.

    Dims: B batch, S query tokens, T key tokens (T = S for training and prefill; the cached context
    for decode, where S = 1), D d_model, G kv heads, R query heads per kv head, E head dim, F d_ff,
    U = 2 for the fused up+gate projection of a gated (SwiGLU) FFN. Q, K and V come from one fused
    projection W_qkv[D,G,J,E] with J = R + 2, so that tensor parallelism does one all-reduce of dX
    per projection in the backward pass, as Megatron does. Attention scores P stay on chip
    (flash attention); the scores count the full S x T product (causal masking skips about half).
    Phases: "training" (forward + backward), "prefill" and "decode" (forward, with a KV cache).
    """
    d, f, h = _positive(d_model, "d_model"), _positive(d_ff, "d_ff"), _positive(heads, "heads")
    g = _positive(kv_heads if kv_heads is not None else heads, "kv_heads")
    b, s = _positive(batch, "batch"), _positive(seq_len, "seq_len")
    n_layers = _positive(layers, "layers")
    if head_dim is None:
        if d % h:
            raise InputError(f"d_model {d} is not a multiple of heads {h}; give head_dim")
        head_dim = d // h
    e = _positive(head_dim, "head_dim")
    if h % g:
        raise InputError(f"heads ({h}) must be a multiple of kv_heads ({g})")
    r = h // g
    if phase not in TEMPLATE_PHASES:
        raise InputError(
            f"transformer phase must be one of {', '.join(TEMPLATE_PHASES)}, got {phase!r}"
        )
    kv_dtype = canonical_dtype(kv_dtype or dtype)
    q_len, k_len = (1, s) if phase == "decode" else (s, s)
    common = {"B": b, "D": d, "G": g, "E": e}
    cache = ("k", "v") if phase in ("prefill", "decode") else ()
    block: list[Layer] = [
        Layer(
            "attn_qkv",
            "x[B,S,D] * wqkv[D,G,J,E] -> qkv[B,S,G,J,E]",
            {**common, "S": q_len, "J": r + 2},
            dtype=dtype,
            weights=("wqkv",),
            tp_dims=("G", "J"),
        ),
        Layer(
            "attn_scores",
            "q[B,S,G,R,E] * k[B,T,G,E] -> p[B,G,R,S,T]",
            {"B": b, "S": q_len, "T": k_len, "G": g, "R": r, "E": e},
            dtype=dtype,
            dtypes={"k": kv_dtype} if cache else {},
            cache=cache[:1],
            onchip=("p",),
            tp_dims=("G", "R"),
        ),
        Layer(
            "attn_values",
            "p[B,G,R,S,T] * v[B,T,G,E] -> o[B,S,G,R,E]",
            {"B": b, "S": q_len, "T": k_len, "G": g, "R": r, "E": e},
            dtype=dtype,
            dtypes={"v": kv_dtype} if cache else {},
            cache=cache[1:],
            onchip=("p",),
            tp_dims=("G", "R"),
        ),
        Layer(
            "attn_out",
            "o[B,S,G,R,E] * wo[G,R,E,D] -> y[B,S,D]",
            {**common, "S": q_len, "R": r},
            dtype=dtype,
            weights=("wo",),
            tp_dims=("G", "R"),
        ),
    ]
    ffn_block = ffn(
        d_model=d,
        d_ff=f,
        batch=b,
        seq_len=q_len,
        gated=gated,
        layers=1,
        phase="forward",
        dtype=dtype,
    )
    block.extend(ffn_block.layers)
    label = name or (f"transformer d_model={d} d_ff={f} heads={h}/{g} x{n_layers} {phase}")
    formula = (
        {"L": n_layers, "n_kv": g, "d_head": e, "S": s, "B": b, "s_kv_bits": dtype_bits(kv_dtype)}
        if cache
        else None
    )
    return Workload(
        label,
        _with_axes(block),
        repeat=n_layers,
        phase="training" if phase == "training" else ("forward" if phase == "forward" else phase),
        batch_dim="B",
        kind="transformer",
        item="sequence",
        tokens_per_item=q_len,
        description=f"{phase}: batch {b}, {q_len} query x {k_len} key tokens",
        kv_cache_formula=formula,
    )
