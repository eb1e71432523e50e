"""Megatron-LM's command line (NVIDIA/Megatron-LM megatron/training/arguments.py): read an
argument list (the args text, one or many lines, or a train.sh that holds them, with its shell
variables `NAME=value` substituted) into the plan it describes (writing one:
shardline.io.megatron_emit). The flag tables (switches, flags without effect on the step time,
flags not modelled) are data: megatron_flags.toml.

Megatron's rules used here (arguments.py and megatron/training/tokenizer/tokenizer.py):
- data parallel = devices / (tensor x pipeline x context); experts split the data-parallel ranks
  (expert-model-parallel-size divides them), so the plan's dp is that over ep;
- microbatches per step = global-batch-size / (micro-batch-size x data parallel);
- --ffn-hidden-size defaults to 4 x hidden, or int(4 x hidden x 2/3 / 64) x 64 with --swiglu;
  --kv-channels to hidden / heads; --num-query-groups (with --group-query-attention) to heads;
- the embedding and output layer are one weight unless --untie-embeddings-and-output-weights;
- the vocabulary is padded to a multiple of --make-vocab-size-divisible-by (128) x tensor parallel
  (_vocab_size_with_padding).
"""

from __future__ import annotations

import math
import re
import shlex
import tomllib
from functools import cache
from importlib.resources import files
from typing import Any

from shardline.basics.options import FP8_RECIPES
from shardline.basics.recompute import FULL_BLOCK_PREFIX, MODULES_PREFIX, module_names
from shardline.errors import InputError
from shardline.io.framework_config import Imported, sourced
from shardline.workload.modelspec import ModelSpec

__all__ = [
    "read_megatron",
    "read_megatron_flags",
    "parse_args_text",
    "switches",
    "ignored",
    "not_modelled",
]


@cache
def _tables() -> dict[str, Any]:
    """megatron_flags.toml: the switches, the ignored flags and the not-modelled ones."""
    text = files("shardline.io").joinpath("megatron_flags.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def switches() -> frozenset[str]:
    return frozenset(_tables()["switches"])


def ignored() -> tuple[str, ...]:
    return tuple(_tables()["ignored"])


def not_modelled() -> dict[str, str]:
    return dict(_tables()["not_modelled"])


_ASSIGN = re.compile(r"^\s*(?:export\s+)?([A-Za-z_][A-Za-z0-9_]*)=(.*)$")
_VAR = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)(?::-([^}]*))?\}|\$([A-Za-z_][A-Za-z0-9_]*)")


def _assignments(text: str) -> dict[str, str]:
    """Shell variables a train.sh sets with `NAME=value` (a line of its own)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _ASSIGN.match(line)
        if m is None or m.group(2).startswith("("):
            continue
        try:
            words = shlex.split(_substitute(m.group(2), out), comments=True)
        except ValueError:
            continue
        out[m.group(1)] = words[0] if len(words) == 1 else " ".join(words)
    return out


def _substitute(text: str, env: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(3)
        if name in env:
            return env[name]
        if m.group(2) is not None:
            return m.group(2)
        return m.group(0)

    return _VAR.sub(one, text)


def parse_args_text(text: str, origin: str) -> dict[str, str | bool]:
    """Every `--flag [value]` of an argument text or train.sh: {flag: value, or True for a
    switch}. Shell variables set in the file are substituted; line continuations joined."""
    joined = text.replace("\\\r\n", " ").replace("\\\n", " ")
    env = _assignments(joined)
    body = "\n".join(line for line in joined.splitlines() if not _is_assignment(line))
    try:
        words = shlex.split(_substitute(body, env), comments=True)
    except ValueError as exc:
        raise InputError(f"{origin}: cannot split the arguments into words ({exc})") from None
    flags: dict[str, str | bool] = {}
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if not word.startswith("--") or len(word) < 3:
            continue
        name, eq, value = word[2:].partition("=")
        if eq:
            flags[name] = value
        elif name not in switches() and i < len(words) and _is_value(words[i]):
            flags[name] = words[i]
            i += 1
        else:
            flags[name] = True
    return flags


def _is_assignment(line: str) -> bool:
    m = _ASSIGN.match(line)
    return m is not None and not m.group(2).lstrip().startswith("(")


def _is_value(word: str) -> bool:
    return not word.startswith("-") or bool(re.match(r"^-\d", word))


class _Flags:
    """The flags of one file, each read at most once; what is left is unknown."""

    def __init__(self, flags: dict[str, str | bool], origin: str) -> None:
        self.flags = flags
        self.origin = origin
        self.used: list[str] = []

    def has(self, name: str) -> bool:
        if name in self.flags:
            self.used.append(name)
            return True
        return False

    def text(self, name: str, default: str | None = None) -> str | None:
        if name not in self.flags:
            return default
        self.used.append(name)
        value = self.flags[name]
        if value is True:
            raise InputError(f"{self.origin}: --{name} needs a value")
        if "$" in str(value):
            raise InputError(
                f"{self.origin}: --{name} {value}: a shell variable this file does not set"
            )
        return str(value)

    def whole(self, name: str, default: int | None = None) -> int | None:
        value = self.text(name)
        if value is None:
            return default
        try:
            return int(value)
        except ValueError:
            raise InputError(
                f"{self.origin}: --{name} must be a whole number, got {value!r}"
            ) from None

    def count(self, name: str, default: int) -> int:
        """A positive whole number (a size, a degree), `default` when the flag is absent."""
        value = self.whole(name, default)
        if value is None or value < 1:
            raise InputError(
                f"{self.origin}: --{name} must be a positive whole number, got {value}"
            )
        return value

    def need(self, name: str) -> int:
        value = self.whole(name)
        if value is None:
            raise InputError(f"{self.origin}: no --{name} (the model's shape is never guessed)")
        return value


def _vocab(f: _Flags, tp: int) -> tuple[int, str]:
    """The padded vocabulary and the key it came from (tokenizer.py _vocab_size_with_padding)."""
    vocab = f.whole("vocab-size")
    key = "--vocab-size"
    if vocab is None:
        if f.text("tokenizer-type") == "GPT2BPETokenizer":
            vocab, key = 50257, "--tokenizer-type GPT2BPETokenizer (GPT-2's 50,257 tokens)"
        else:
            raise InputError(
                f"{f.origin}: no --vocab-size, and the tokenizer's size is not in the file "
                "(give --vocab-size)"
            )
    multiple = f.count("make-vocab-size-divisible-by", 128) * tp
    padded = math.ceil(vocab / multiple) * multiple
    if padded != vocab:
        key += f", padded to a multiple of {multiple} (make-vocab-size-divisible-by x tp)"
    return padded, key


def _moe_layers(f: _Flags, layers: int) -> int:
    """Dense layers first from --moe-layer-freq: 1 (every layer MoE) or `([0]*k+[1]*n)`."""
    text = f.text("moe-layer-freq")
    if text is None or text.strip() == "1":
        return 0
    m = re.fullmatch(r"\(?\s*\[0\]\s*\*\s*(\d+)\s*\+\s*\[1\]\s*\*\s*(\d+)\s*\)?", text.strip())
    if m is None or int(m.group(1)) + int(m.group(2)) != layers:
        raise InputError(
            f"{f.origin}: --moe-layer-freq {text}: only 1 or ([0]*k+[1]*(layers-k)) (dense "
            "layers first) is described by the model"
        )
    return int(m.group(1))


def _model(f: _Flags, name: str, tp: int) -> dict[str, object]:
    o = f.origin
    if f.has("multi-latent-attention"):
        raise InputError(f"{o}: --multi-latent-attention: MLA is not read from Megatron args yet")
    d = f.need("hidden-size")
    heads = f.need("num-attention-heads")
    gated = f.has("swiglu")
    ff_default = int(4 * d * 2 / 3 / 64) * 64 if gated else 4 * d
    groups = f.whole("num-query-groups") if f.has("group-query-attention") else None
    vocab, vocab_key = _vocab(f, tp)
    position = f.text("position-embedding-type", "learned_absolute")
    if f.has("use-rotary-position-embeddings"):
        position = "rope"
    model: dict[str, Any] = {
        "schema": 1,
        "name": name,
        "d_model": sourced(d, o, "--hidden-size"),
        "layers": sourced(f.need("num-layers"), o, "--num-layers"),
        "heads": sourced(heads, o, "--num-attention-heads"),
        "kv_heads": sourced(groups or heads, o, "--num-query-groups" if groups else "heads"),
        "head_dim": sourced(f.whole("kv-channels", d // heads), o, "--kv-channels"),
        "d_ff": sourced(f.whole("ffn-hidden-size", ff_default), o, "--ffn-hidden-size"),
        "gated": sourced(gated, o, "--swiglu"),
        "vocab": sourced(vocab, o, vocab_key),
        "tied_embeddings": sourced(
            not f.has("untie-embeddings-and-output-weights"),
            o,
            "--untie-embeddings-and-output-weights",
        ),
        "rotary": sourced(position == "rope", o, "--position-embedding-type"),
        "qk_norm": sourced(f.has("qk-layernorm"), o, "--qk-layernorm"),
        "norm": "rmsnorm" if f.text("normalization", "LayerNorm") == "RMSNorm" else "layernorm",
    }
    experts = f.whole("num-experts")
    if experts:
        expert_ff = f.count("moe-ffn-hidden-size", model["d_ff"]["value"])
        shared = f.whole("moe-shared-expert-intermediate-size", 0) or 0
        if shared % expert_ff:
            raise InputError(
                f"{o}: --moe-shared-expert-intermediate-size {shared} is not a whole number of "
                f"experts of --moe-ffn-hidden-size {expert_ff}"
            )
        model["moe"] = {
            "experts": sourced(experts, o, "--num-experts"),
            "experts_per_token": sourced(f.count("moe-router-topk", 2), o, "--moe-router-topk"),
            "expert_d_ff": sourced(expert_ff, o, "--moe-ffn-hidden-size"),
            "shared_experts": sourced(
                shared // expert_ff, o, "--moe-shared-expert-intermediate-size"
            ),
            "dense_layers_first": sourced(
                _moe_layers(f, model["layers"]["value"]), o, "--moe-layer-freq"
            ),
            "router_bias": sourced(
                f.has("moe-router-enable-expert-bias"), o, "--moe-router-enable-expert-bias"
            ),
        }
    return model


def _dtype(f: _Flags) -> str | None:
    if f.text("fp8-format") is not None:
        f.has("bf16")
        return "fp8"
    if f.has("bf16"):
        return "bf16"
    if f.has("fp16"):
        return "fp16"
    return None


def _recompute(f: _Flags, notes: list[str]) -> str | None:
    granularity = f.text("recompute-granularity")
    given = f.text("recompute-modules")  # read; Megatron-Core uses it with selective only
    if f.has("recompute-activations"):
        granularity = granularity or "selective"
    if granularity is None:
        return None
    if granularity == "selective":
        modules = (given or "core_attn").split()
        if modules == ["core_attn"]:
            return "selective"
        if set(modules) <= set(module_names()):
            # Megatron-Core's selective recompute of these modules (shardline.basics.recompute)
            return MODULES_PREFIX + ",".join(modules)
        notes.append(
            f"--recompute-modules {' '.join(modules)}: priced as selective (the attention core "
            f"only; the modules priced are {', '.join(module_names())})"
        )
        return "selective"
    if granularity != "full":
        raise InputError(f"{f.origin}: --recompute-granularity takes full or selective")
    method = f.text("recompute-method", "uniform")
    n = f.count("recompute-num-layers", 1)
    if method == "uniform" and n == 1:
        return "full"
    if method == "block":
        # the first n blocks of each (virtual) pipeline stage (shardline.basics.recompute)
        return f"{FULL_BLOCK_PREFIX}{n}"
    if method == "uniform":
        notes.append(
            f"--recompute-method uniform --recompute-num-layers {n}: priced as full recompute "
            "with one layer per checkpoint (the extra memory of groups is not modelled)"
        )
        return "full"
    raise InputError(f"{f.origin}: --recompute-method takes uniform or block, got {method!r}")


def _execution(f: _Flags, notes: list[str], dp_m: int) -> dict[str, object]:
    ex: dict[str, object] = {"framework": "megatron"}
    recompute = _recompute(f, notes)
    if recompute is not None:
        ex["recompute"] = recompute
    for flag, key in (
        ("sequence-parallel", "sequence_parallel"),
        ("tp-comm-overlap", "tp_overlap"),
    ):
        if f.has(flag):
            ex[key] = True
    if f.has("use-distributed-optimizer"):
        ex["zero"] = 1
        # Megatron-LM all-gathers the updated parameters behind the next forward only when told
        ex["overlap_param_gather"] = f.has("overlap-param-gather")
    if f.has("enable-cuda-graph") or f.text("cuda-graph-impl", "none") != "none":
        ex["cuda_graphs"] = True
    if f.has("accumulate-allreduce-grads-in-fp32"):
        ex["grad_reduce_dtype"] = "fp32"
    if f.has("overlap-moe-expert-parallel-comm"):
        ex["ep_overlap"] = True
    if f.has("moe-router-force-load-balancing"):  # random router logits (RandomSTE)
        ex["random_routing"] = True
    recipe = f.text("fp8-recipe")
    if recipe is not None:
        # Megatron-LM's --fp8-recipe (arguments.py: tensorwise, delayed, mxfp8, blockwise,
        # custom); tensorwise is Transformer Engine's Float8CurrentScaling
        named = {"tensorwise": "current"}.get(recipe, recipe)
        if named in FP8_RECIPES:
            ex["fp8_recipe"] = named
        else:
            notes.append(f"--fp8-recipe {recipe}: priced as delayed scaling")
    dispatcher = f.text("moe-token-dispatcher-type")
    backend = f.text("moe-flex-dispatcher-backend")
    if f.has("moe-enable-deepep") or (dispatcher == "flex" and backend in (None, "deepep")):
        ex["ep_dispatch"] = "hierarchical"
    elif dispatcher == "flex" and backend == "hybridep":
        ex["ep_dispatch"] = "hybridep"
    elif dispatcher == "allgather":
        notes.append("--moe-token-dispatcher-type allgather: priced as the all-to-all dispatch")
    cp_comm = f.text("cp-comm-type")
    if cp_comm is not None:
        kinds = {"p2p": "ring", "all_gather": "all-gather"}
        if cp_comm in kinds:
            ex["cp_kind"] = kinds[cp_comm]
        else:
            notes.append(f"--cp-comm-type {cp_comm}: priced as the ring (p2p) exchange")
    optimizer = f.text("optimizer")
    if optimizer is not None:
        ex["optimizer"] = optimizer.lower()
    return ex


def _interleave(f: _Flags, layers: int, pp: int) -> int:
    if "num-virtual-stages-per-pipeline-rank" in f.flags:
        return f.count("num-virtual-stages-per-pipeline-rank", 1)
    if "num-layers-per-virtual-pipeline-stage" not in f.flags:
        return 1
    per_stage = f.count("num-layers-per-virtual-pipeline-stage", 1)
    if layers % (pp * per_stage):
        raise InputError(
            f"{f.origin}: --num-layers-per-virtual-pipeline-stage {per_stage} does not divide "
            f"the {layers} layers over {pp} pipeline stages"
        )
    return layers // (pp * per_stage)


def _degrees(f: _Flags, devices: int, notes: list[str]) -> tuple[dict[str, int], int, int | None]:
    """The plan's degrees, Megatron's data parallel size and the expert tensor parallel size
    where it folds (differs from tp: the plan's --etp; None otherwise, the same layout)."""
    tp = f.count("tensor-model-parallel-size", 1)
    pp = f.count("pipeline-model-parallel-size", 1)
    cp = f.count("context-parallel-size", 1)
    ep = f.count("expert-model-parallel-size", 1)
    etp = f.whole("expert-tensor-parallel-size")
    if devices % (tp * pp * cp):
        raise InputError(
            f"{f.origin}: tensor {tp} x pipeline {pp} x context {cp} does not divide the "
            f"{devices} devices"
        )
    dp_m = devices // (tp * pp * cp)
    if etp is not None and etp != tp and ep > 1:
        # Megatron-Core's parallel folding: the experts on etp x ep x edp x pp ranks, the
        # attention on tp x cp x dp x pp; the plan's --etp takes dp as Megatron counts it
        return {"tp": tp, "pp": pp, "dp": dp_m, "fsdp": 1, "ep": ep, "cp": cp}, dp_m, etp
    if dp_m % ep:
        raise InputError(
            f"{f.origin}: expert parallel {ep} does not divide the {dp_m} data-parallel ranks "
            "(with the experts on the tensor ranks; --expert-tensor-parallel-size folds them)"
        )
    fsdp = f.has("use-torch-fsdp2") or f.has("use-megatron-fsdp")
    strategy = f.text("data-parallel-sharding-strategy")
    if strategy is not None and strategy != "optim_grads_params":
        fsdp = False  # ZeRO-1/2-like sharding: the distributed optimizer
    ways = dp_m // ep
    degrees = {"tp": tp, "pp": pp, "dp": 1 if fsdp else ways, "fsdp": ways if fsdp else 1}
    return degrees | {"ep": ep, "cp": cp}, dp_m, None


def read_megatron(text: str, origin: str, devices: int) -> Imported:
    """The plan of one Megatron-LM argument list over `devices` GPUs."""
    return read_megatron_flags(parse_args_text(text, origin), origin, devices)


def read_megatron_flags(
    flags: dict[str, str | bool],
    origin: str,
    devices: int,
    spec: ModelSpec | None = None,
    notes: list[str] | None = None,
) -> Imported:
    """The plan of Megatron-LM's flags ({flag: value, or True for a switch}); `spec` the model
    where it comes from elsewhere (a recipe's name), else the flags' shape."""
    from shardline.models.catalog import model_from_dict

    f = _Flags(flags, origin)
    notes = list(notes or [])
    degrees, dp_m, etp = _degrees(f, devices, notes)
    if spec is None:
        spec = model_from_dict(_model(f, _name(origin), degrees["tp"]), origin)
    mbs = f.count("micro-batch-size", 1)
    batch = f.count("global-batch-size", mbs * dp_m)
    if batch % (mbs * dp_m):
        raise InputError(
            f"{origin}: --global-batch-size {batch} is not a multiple of --micro-batch-size "
            f"{mbs} x {dp_m} data-parallel ranks"
        )
    seq = f.whole("seq-length")
    if seq is None:
        raise InputError(f"{origin}: no --seq-length")
    execution = _execution(f, notes, dp_m)
    execution["interleave"] = _interleave(f, spec.layers, degrees["pp"])
    dtype = _dtype(f)
    for flag, why in not_modelled().items():
        if flag in f.flags:
            f.used.append(flag)
            notes.append(f"--{flag}: {why}")
    unknown = [f"--{k}" for k in f.flags if k not in f.used and not k.startswith(ignored())]
    return Imported(
        format="megatron",
        origin=origin,
        model=spec,
        degrees=degrees,
        batch=batch,
        microbatches=batch // (mbs * dp_m),
        seq_len=seq,
        dtype=dtype,
        execution=execution,
        etp=etp,
        read=tuple(f"--{k}" for k in dict.fromkeys(f.used)),
        unknown=tuple(unknown),
        not_modelled=tuple(notes),
    )


def _name(origin: str) -> str:
    from pathlib import Path

    return Path(origin).stem or "megatron-model"
