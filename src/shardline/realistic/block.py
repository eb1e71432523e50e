"""The memory-bound ops between a transformer's matmuls, as bytes read and written per
microbatch on one device, and the LM head as an einsum.

Training (Megatron-LM's fused kernels): layer norm, attention, bias-dropout-add, layer norm,
bias-activation, bias-dropout-add per block; with standard attention a fused scale-mask-softmax
and a dropout over the scores too. Inference: the residual add fused into each norm (vLLM's
fused_add_rms_norm), no dropout. Rotary embedding reads and writes q and k. Without sequence
parallelism the norms, dropouts and residual adds run on every tensor-parallel rank over the whole
hidden state; with it each rank does 1/t of them (Korthikanti et al. 2022, section 4.2.2).

Run eagerly (`eager`, PyTorch without torch.compile, as torchtitan and Composer train by default)
each tensor op of the model's reference code is its own kernel with its own HBM round trip
(`_eager_*` below, counted from torchtitan/models/norms.py and llama/model.py): the RMS norm
upcasts to fp32 and runs pow, mean, multiply, downcast and the weight multiply one by one; the
rotary embedding upcasts q and k, multiplies them as complex numbers and downcasts; SwiGLU runs
the SiLU and the product apart; grouped-query attention copies each key/value head to its query
heads (`repeat_kv`) before the attention kernel. PyTorch's layer norm and GELU are one native
kernel each, eager or not.

The backward of a memory-bound op reads what the forward read (the saved inputs) and the
gradient of what it wrote, and writes the gradient of what it read:
`bytes_bwd = 2 x read + write` (a stated rule for elementwise kernels).

Each op also counts its arithmetic on the vector units (CUDA cores, the TPU VPU): `VECTOR_FLOPS`
per element, counted by hand below, one FLOP per add, multiply, max, exp or divide. The backward
is counted at twice the forward (the derivative reuses the forward's terms and multiplies by the
incoming gradient; a stated rule). `shardline.realistic.kernels.vector_kernel_s` prices an op at
max(bytes / HBM bandwidth, FLOPs / vector rate).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from shardline.basics.dtypes import dtype_bits
from shardline.ops.layer import Layer
from shardline.realistic.modelshape import ModelShape

__all__ = [
    "MemOp",
    "MoeKernels",
    "activation_dtype",
    "block_ops",
    "embedding_ops",
    "head_ops",
    "head_layer",
    "moe_layer_kernels",
    "optimizer_bytes",
    "optimizer_loop_bytes",
]

# 8-bit (fp8, int8) models keep the activations between the matmuls in bf16; only a GEMM's inputs
# are 8-bit (NVIDIA Transformer Engine: each GEMM input is cast, and in training a transposed
# copy written for the backward GEMMs, by one fused cast-transpose kernel).
ACTIVATION_BITS_MIN = 16
MASK_BYTES = 1  # a dropout mask keeps one byte per element (Korthikanti et al. 2022, section 4)
LOSS_BYTES = 4  # the cross entropy runs in fp32 (Megatron-LM's vocab-parallel cross entropy)

# Vector FLOPs per element, counted by hand (one per add, multiply, max, exp, divide).
VECTOR_FLOPS: dict[str, float] = {
    "layer_norm": 7,  # mean sum, subtract, square, sum, scale, gamma, beta
    "final_norm": 7,
    "add_norm": 8,  # the residual add, then the norm
    "bias_dropout_add": 4,  # bias add, dropout compare and scale, residual add
    "swiglu": 6,  # silu(a) = a / (1 + exp(-a)): negate, exp, add, divide; times b; per output
    "gelu": 8,  # tanh form: cube (2), multiply-add (2), scale, tanh, add one, halve x
    "rotary": 3,  # x cos + rotate(x) sin: two multiplies and an add per element of q and k
    "qk_norm": 4,  # RMS norm of each head of q and k: square, sum, scale by the rsqrt, gamma
    "softmax": 5,  # max, subtract, exp, sum, divide
    "attention_dropout": 2,  # compare and scale
    "position_embedding": 1,  # the add
    "cross_entropy": 5,  # per logit: max, subtract, exp, sum, and the softmax written back
    "fp8_cast_transpose": 4,  # absolute max (2), scale (1), convert (1) per input element
    "repeat_kv": 0,  # a copy
}
FP32_BYTES = 4  # the eager RMS norm and rotary embedding run in fp32 (x.float())
EAGER_RMS_NORM = 8  # kernels of torchtitan's RMSNorm run op by op (`_eager_rms_norm`)
BACKWARD_VECTOR_FLOPS = 2  # the backward's FLOPs over the forward's


@dataclass(frozen=True)
class MemOp:
    """One memory-bound kernel: bytes it reads and writes in the forward pass."""

    name: str
    read_bytes: float
    write_bytes: float
    elements: float = 0.0  # the elements its arithmetic runs over (VECTOR_FLOPS counts per one)
    dtype: str = ""  # the dtype its arithmetic runs in; empty: the activations' dtype
    kernels: int = 1  # kernels it launches each pass (eager ops: one per tensor op)

    @property
    def forward_bytes(self) -> float:
        return self.read_bytes + self.write_bytes

    @property
    def backward_bytes(self) -> float:
        return 2 * self.read_bytes + self.write_bytes

    @property
    def forward_flops(self) -> float:
        return self.elements * VECTOR_FLOPS.get(self.name, 0.0)

    @property
    def backward_flops(self) -> float:
        return BACKWARD_VECTOR_FLOPS * self.forward_flops


@dataclass(frozen=True)
class _Sizes:
    """Per microbatch on one device: n tokens, hidden-state bytes r (split by SP), the element
    size w, and the tensor-parallel degree t."""

    n: float
    r: float
    w: float
    t: int


def activation_dtype(model: ModelShape) -> str:
    """The dtype of the activations between the matmuls: the model's, at least 16-bit (bf16)."""
    return model.dtype if dtype_bits(model.dtype) >= ACTIVATION_BITS_MIN else "bf16"


def _sizes(model: ModelShape, sequences: float, tp: int, sp: bool) -> _Sizes:
    w = max(dtype_bits(model.dtype), ACTIVATION_BITS_MIN) / 8
    n = sequences * model.q_len
    hidden = n * model.d_model * w
    return _Sizes(n, hidden / tp if sp else hidden, w, tp)


def _attention_ops(
    model: ModelShape, z: _Sizes, sequences: float, training: bool, eager: bool = False
) -> list[MemOp]:
    out: list[MemOp] = []
    qk = z.n * (model.heads + model.kv_heads) * model.head_dim / z.t * z.w
    if model.qk_norm:  # Qwen3, Gemma 3: before the rotary embedding, over each head
        out.append(MemOp("qk_norm", qk, qk, qk / z.w))
    if model.rotary:
        out.append(_eager_rotary(qk, z.w) if eager else MemOp("rotary", qk, qk, qk / z.w))
    if eager and model.attention != "standard" and model.heads > model.kv_heads:
        out.append(_repeat_kv(model, z))
    if model.attention == "standard":
        p = sequences * model.heads / z.t * model.q_len * model.keys * z.w
        out.append(MemOp("softmax", p, p, p / z.w))
        if training:
            out.append(MemOp("attention_dropout", p, p + p / z.w * MASK_BYTES, p / z.w))
    return out


def block_ops(
    model: ModelShape,
    sequences: float,
    *,
    tp: int,
    sp: bool,
    training: bool,
    eager: bool = False,
) -> list[MemOp]:
    """One block's memory-bound ops for `sequences` sequences (a microbatch on one device);
    `eager`: training run op by op (the module docstring)."""
    z = _sizes(model, sequences, tp, sp)
    ffn = z.n * model.d_ff / z.t * z.w
    act = MemOp(
        "swiglu" if model.gated else "gelu", ffn * (2 if model.gated else 1), ffn, ffn / z.w
    )
    e = z.r / z.w  # hidden-state elements on this device
    mask = e * MASK_BYTES
    casts = _cast_ops(model, z, training)
    eager = eager and training  # inference engines fuse these ops (vLLM's fused kernels)
    if training:
        norm = _norm(model, z, eager)
        bda = MemOp("bias_dropout_add", 2 * z.r, z.r + mask, e)
        if eager and model.gated:
            act = _eager_swiglu(ffn, z.w)
        before = [norm]
        after = [bda, norm, act, bda]
    else:
        add_norm = MemOp("add_norm", 2 * z.r, 2 * z.r, e)
        before = [add_norm]
        after = [add_norm, act]
    attention = _attention_ops(model, z, sequences, training, eager)
    return before + attention + after + casts + _moe_ops(model, z)


def _norm(model: ModelShape, z: _Sizes, eager: bool) -> MemOp:
    """A norm over the hidden state: one fused kernel (read r, write r), or torchtitan's RMS
    norm op by op when run eagerly (a layer norm is one native kernel either way)."""
    if eager and model.norm == "rmsnorm":
        return _eager_rms_norm(z.r, z.w)
    return MemOp("layer_norm", z.r, z.r, z.r / z.w)


def _eager_rms_norm(r: float, w: float) -> MemOp:
    """torchtitan's RMSNorm run op by op over r bytes of w-byte elements (models/norms.py:
    `self._norm(x.float()).type_as(x) * self.weight`, `_norm` = x * rsqrt(x.pow(2).mean(-1) +
    eps)): upcast (read w, write 4), pow (read 4, write 4), mean (read 4), multiply by the
    per-row rsqrt (read 4, write 4), downcast (read 4, write w), weight multiply (read w, write w)
    per element: read 2w + 16, write 2w + 12 bytes; 8 kernels (with the eps add and the rsqrt
    over one number per row)."""
    e = r / w
    f = FP32_BYTES
    return MemOp("layer_norm", e * (2 * w + 4 * f), e * (2 * w + 3 * f), e, kernels=EAGER_RMS_NORM)


def _eager_rotary(qk: float, w: float) -> MemOp:
    """The reference rotary embedding over q and k (qk bytes of w-byte elements; llama/model.py
    apply_rotary_emb: `view_as_complex(x.float())`, a complex multiply by freqs_cis,
    `view_as_real(...).type_as(x)`): upcast (read w, write 4), complex multiply (read 4, write
    4), downcast (read 4, write w) per element; three kernels for q, three for k."""
    e = qk / w
    f = FP32_BYTES
    return MemOp("rotary", e * (w + 2 * f), e * (w + 2 * f), e, kernels=2 * 3)


def _eager_swiglu(ffn: float, w: float) -> MemOp:
    """`F.silu(w1(x)) * w3(x)` op by op over the ffn bytes of one branch: the SiLU (read 1,
    write 1) and the product (read 2, write 1): two kernels."""
    return MemOp("swiglu", 3 * ffn, 2 * ffn, ffn / w, kernels=2)


def _repeat_kv(model: ModelShape, z: _Sizes) -> MemOp:
    """Grouped-query attention's `repeat_kv` (llama/model.py: expand then reshape, a copy) of the
    keys and of the values to every query head, before the eager attention call."""
    kv = 2 * z.n * model.kv_heads * model.head_dim / z.t * z.w
    return MemOp("repeat_kv", kv, kv * model.heads / model.kv_heads, kernels=2)


def _moe_ops(model: ModelShape, z: _Sizes) -> list[MemOp]:
    """A MoE block's token permutation (Megatron-Core's fused permute and unpermute, docs/moe.md):
    before the dispatch each token is copied k times into expert order (read the hidden state,
    write k copies); after the combine the k expert outputs are read back and summed into one
    (read k, write 1). Training's backward follows the module's rule."""
    k = model.expert_copies
    if not k:
        return []
    return [MemOp("moe_permute", z.r, k * z.r), MemOp("moe_unpermute", k * z.r, z.r)]


# The kernels of Megatron-Core's MoE layer that neither the block's einsums nor its ops above
# price, per MoE block and microbatch and pass (NVIDIA/Megatron-LM megatron/core/transformer/moe
# at commit d98e8a64; the calls shardline.realistic.host.moe_mlp_fwd counts for the CPU side):
MOE_TOPK_KERNELS = 1  # router.py: the fused top-k
MOE_AUX_LOSS_KERNELS = 6  # moe_utils.py, training only: the load-balancing loss's fused aux
# scores, token counts, their all-reduce, fused loss, metrics record and autoscaler
MOE_DISPATCH_KERNELS = 3  # token_dispatcher.py (flex): the contiguous copies of the routing map
# and of the probabilities before the dispatch, the sum of the received token counts after it
MOE_FP8_PAD_KERNELS = 3  # experts.py, TEGroupedMLP in fp8: the quantization padding of the
# tokens and of the probabilities, and the unpadding
GROUPED_LINEARS = 2  # an expert FFN's two grouped linears: the fused gate and up (fc1), the down


@dataclass(frozen=True)
class MoeKernels:
    """A MoE block's kernels per microbatch beyond what its einsums and ops price: `small` launched
    in each pass (forward, and backward: one autograd node per forward call, the rule of
    shardline.realistic.host.backward), and the per-expert GEMM kernels beyond one per expert
    einsum (`gemms_fwd`, `gemms_bwd`)."""

    small: int
    gemms_fwd: int
    gemms_bwd: int


def moe_layer_kernels(
    local_experts: int, *, fp8: bool, per_expert_gemms: bool, training: bool = True
) -> MoeKernels:
    """The MoE block's router (and, training, load-balancing loss), dispatch-bookkeeping (and fp8
    padding) kernels, and, where
    `per_expert_gemms`, the GEMMs Transformer Engine's GroupedLinear launches one per local expert
    in place of the one grouped kernel its einsum is priced as: NVIDIA/TransformerEngine
    docs/features/mixture_of_experts/mixture_of_experts.rst, "Grouped GEMM": the per-expert path
    reads the token counts on the host and launches "one cuBLAS GEMM per expert ... on a pool of
    CUDA streams", which "cannot be captured in a CUDA graph"; the single grouped GEMM (all
    experts in one cuBLASLt call, counts on the device) is the CUDA-graph-capturable path. Each
    grouped linear runs local_experts - 1 GEMMs more forward, and twice that backward (data and
    weight gradients)."""
    small = MOE_TOPK_KERNELS + (MOE_AUX_LOSS_KERNELS if training else 0) + MOE_DISPATCH_KERNELS
    small += MOE_FP8_PAD_KERNELS if fp8 else 0
    extra = GROUPED_LINEARS * max(local_experts - 1, 0) if per_expert_gemms else 0
    return MoeKernels(small, extra, 2 * extra)


def _cast_ops(model: ModelShape, z: _Sizes, training: bool) -> list[MemOp]:
    """8-bit training: each GEMM's bf16 activation input read and written as 8-bit twice (the
    cast and its transpose); the backward rule then covers the output gradients' casts.
    Inference fuses the quantization into the op before (none here)."""
    if not training or dtype_bits(model.dtype) >= ACTIVATION_BITS_MIN:
        return []
    hidden = z.n * model.d_model
    ffn_inputs = max(model.expert_copies, 1) * hidden  # a MoE block's experts: k token copies
    inputs = hidden + ffn_inputs + z.n * model.heads * model.head_dim / z.t + z.n * model.d_ff / z.t
    eight = dtype_bits(model.dtype) / 8
    return [MemOp("fp8_cast_transpose", inputs * z.w, 2 * inputs * eight, inputs)]


def embedding_ops(
    model: ModelShape,
    sequences: float,
    *,
    tp: int,
    sp: bool,
    training: bool = True,
    eager: bool = False,
) -> list[MemOp]:
    """The first stage's embedding lookup (rows gathered from the table, written as the hidden
    state; learned positions add a second lookup and an add); the same in every phase and
    launch mode."""
    z = _sizes(model, sequences, tp, sp)
    ops = [MemOp("embedding", z.r, z.r)]
    if not model.rotary:
        ops.append(MemOp("position_embedding", 2 * z.r, z.r, z.r / z.w))
    return ops


def head_ops(
    model: ModelShape,
    sequences: float,
    *,
    tp: int,
    sp: bool,
    training: bool,
    eager: bool = False,
) -> list[MemOp]:
    """The last stage's final norm (op by op when `eager`, training) and, training, the
    vocab-parallel cross entropy (fp32 logits read three times, written twice: max, exp-sum,
    softmax)."""
    z = _sizes(model, sequences, tp, sp)
    ops = [replace(_norm(model, z, eager and training), name="final_norm")]
    if training and model.vocab:
        logits = z.n * model.vocab / tp * LOSS_BYTES
        ops.append(MemOp("cross_entropy", 3 * logits, 2 * logits, logits / LOSS_BYTES, "fp32"))
    return ops


def head_layer(model: ModelShape, training: bool) -> Layer | None:
    """The LM head x[B,S,D] * w[D,V] -> logits[B,S,V], vocab split by tensor parallelism; for
    inference only the last token's logits are computed (S = 1)."""
    if not model.vocab:
        return None
    s = model.q_len if training else 1
    return Layer(
        "lm_head",
        "x[B,S,D] * w[D,V] -> logits[B,S,V]",
        {"B": model.batch, "S": s, "D": model.d_model, "V": model.vocab},
        dtype=model.dtype,
        dtypes={"w": model.weights_dtype},
        weights=("w",),
        tp_dims=("V",),
        axes={"B": "batch", "S": "seq", "D": "model", "V": "vocab"},
    )


def optimizer_bytes(params: float, weight_bits: int, state_bytes: float) -> float:
    """One optimizer step over `params` local parameters: read the weights, the gradients (and
    again for the norm clipping) and the state, write the weights and the state."""
    w = weight_bits / 8
    return params * (2 * w + 2 * w + 2 * state_bytes)


def optimizer_loop_bytes(params: float, reads: float, writes: float) -> float:
    """One optimizer step run op by op (frameworks/*.toml [optimizer_step]) over `params` local
    parameters: each kernel reads and writes whole fp32 tensors of the parameter's size (the
    sharded fp32 parameter, its gradient, its moments and the temporaries between them),
    `reads + writes` of them in all."""
    return params * (reads + writes) * FP32_BYTES
