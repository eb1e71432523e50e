"""Activation recompute policies as data (recompute.toml): each policy names the tensors of a
transformer block it keeps for the backward pass; the ops the backward must run again follow
from that set (`rerun_ops`), so that the kept bytes (shardline.realistic.activations) and the
recomputed FLOPs and time (shardline.realistic.flops, shardline.planning.stage_extras) come from
one definition.

The block, in forward order (`OPS`: an op, the tensors it writes, the tensors it reads):

    x -> norm1 -> q, k, v -> attention (scores, context) -> out_proj (attn_proj)
      -> residual1 (resid = x + attn_proj, mask1) -> norm2 -> gate, up -> activation (act)
      -> down_proj (ffn_out) -> residual2 (the block's output = resid + ffn_out, mask2)

`NEEDED` are the tensors the backward reads (Korthikanti et al. 2022, section 4.1: every input of
a matmul, norm, activation and the softmax, and the dropout masks); an op runs again when one of
its outputs is wanted and not kept, and it wants its own inputs that are not kept (`rerun_ops`).
Names: the policies of recompute.toml, `layer-N` (every Nth block fully recomputed, the others
keep everything: torchtitan's selective_ac_option = "N"), `full-block:N` (the first N blocks of
each pipeline stage, of each virtual stage with interleaving, fully recomputed, the others keep
everything: Megatron-LM's --recompute-granularity full --recompute-method block
--recompute-num-layers N) and `keep:T1,T2,...` (keep these
tensors, the rest recomputed) and `modules:M1,M2,...` (Megatron-Core's recompute_modules:
`none`'s tensors less those the modules discard). Pure: the TOML is package data.
"""

from __future__ import annotations

import tomllib
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import Any

from shardline.errors import InputError

__all__ = [
    "TENSORS",
    "NEEDED",
    "OPS",
    "OP_NAMES",
    "MATMULS",
    "Policy",
    "policy",
    "policy_names",
    "module_names",
    "rerun_ops",
    "kept_tensors",
    "stored_tensors",
    "read_tensors",
    "checkpointed_blocks",
]

# name -> (where it lives, the dtype it is kept in): "hidden" (d_model wide, on every
# tensor-parallel rank unless sequence parallel) or "split" (split by tensor parallelism);
# "w" the activations' dtype, "g" a GEMM input's dtype (8-bit under fp8), "mask" 1 byte
TENSORS: dict[str, tuple[str, str]] = {
    "x": ("hidden", "w"),
    "norm1": ("hidden", "g"),
    "q": ("split", "w"),
    "k": ("split", "w"),
    "v": ("split", "w"),
    "scores": ("split", "w"),  # sized by shardline.realistic.activations (standard attention)
    "context": ("split", "g"),
    "attn_proj": ("hidden", "w"),
    "mask1": ("hidden", "mask"),
    "resid": ("hidden", "w"),
    "norm2": ("hidden", "g"),
    "gate": ("split", "w"),
    "up": ("split", "w"),
    "act": ("split", "g"),
    "ffn_out": ("hidden", "w"),
    "mask2": ("hidden", "mask"),
}
# what the backward reads: every tensor but the two projections' outputs (a residual add's
# backward needs neither of its inputs)
NEEDED = tuple(t for t in TENSORS if t not in ("attn_proj", "ffn_out"))
OPS: tuple[tuple[str, tuple[str, ...], tuple[str, ...]], ...] = (
    ("norm1", ("norm1",), ("x",)),
    ("q_proj", ("q",), ("norm1",)),
    ("k_proj", ("k",), ("norm1",)),
    ("v_proj", ("v",), ("norm1",)),
    ("attention", ("scores", "context"), ("q", "k", "v")),
    ("out_proj", ("attn_proj",), ("context",)),
    ("residual1", ("resid", "mask1"), ("attn_proj", "x")),
    ("norm2", ("norm2",), ("resid",)),
    ("gate_proj", ("gate",), ("norm2",)),
    ("up_proj", ("up",), ("norm2",)),
    ("activation", ("act",), ("gate", "up")),
    ("down_proj", ("ffn_out",), ("act",)),
    ("residual2", ("mask2",), ("ffn_out", "resid")),
)
OP_NAMES = tuple(op for op, _, _ in OPS)
# the block's matmuls in forward order (torchtitan's llama3: wq, wk, wv, wo, w1, w3, w2) and the
# tensor each writes
MATMULS = (
    ("q_proj", "q"),
    ("k_proj", "k"),
    ("v_proj", "v"),
    ("out_proj", "attn_proj"),
    ("gate_proj", "gate"),
    ("up_proj", "up"),
    ("down_proj", "ffn_out"),
)
LAYER_PREFIX = "layer-"
FULL_BLOCK_PREFIX = "full-block:"
KEEP_PREFIX = "keep:"
MODULES_PREFIX = "modules:"


@dataclass(frozen=True)
class Policy:
    """One policy: the tensors it keeps (besides x), ops it reruns beyond what they require,
    whether it keeps every second matmul's output (`odd_matmuls`), for `layer-N` the period N
    of fully recomputed blocks (1: the policy applies to every block), and for `full-block:N`
    the N blocks at the start of each (virtual) pipeline stage it applies to (`first`; 0: not
    so limited)."""

    name: str
    keep: frozenset[str]
    recompute: frozenset[str] = frozenset()
    odd_matmuls: bool = False
    every: int = 1
    source: str = ""
    note: str = ""
    residuals_only: bool = False  # recompute.toml `saves = "residuals"`: only what is read
    first: int = 0

    def kept(self, gated: bool) -> frozenset[str]:
        """The tensors kept in a block (x always): with every second matmul's output where the
        policy says so, counted over the block's matmuls (a non-gated FFN has no gate)."""
        out = set(self.keep) | {"x"}
        if self.odd_matmuls:
            mms = [t for op, t in MATMULS if gated or op != "gate_proj"]
            out |= set(mms[0::2])
        return frozenset(out)


@cache
def _toml() -> dict[str, Any]:
    text = files("shardline.basics").joinpath("recompute.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


@cache
def _table() -> dict[str, Policy]:
    out: dict[str, Policy] = {}
    for name, row in _toml()["policy"].items():
        out[name] = Policy(
            name,
            _checked(row.get("keep", []), name),
            frozenset(row.get("recompute", [])),
            row.get("keep_matmuls") == "odd",
            1,
            row["source"],
            row.get("note", ""),
            _saves(row.get("saves", "kept"), name),
        )
    return out


def _saves(value: object, where: str) -> bool:
    """`saves`: "kept" (every kept tensor is stored) or "residuals" (only those the backward
    reads: recompute.toml)."""
    if value not in ("kept", "residuals"):
        raise InputError(f"recompute {where}: saves must be kept or residuals, got {value!r}")
    return value == "residuals"


def _checked(names: list[str], where: str) -> frozenset[str]:
    unknown = [n for n in names if n not in TENSORS]
    if unknown:
        raise InputError(
            f"recompute {where}: unknown tensor {unknown[0]!r}; the block's tensors: "
            f"{', '.join(TENSORS)}"
        )
    return frozenset(names)


def module_names() -> tuple[str, ...]:
    """Megatron-Core's recompute modules (recompute.toml's `module` tables), in the file's
    order."""
    return tuple(_toml()["module"])


def _modules(name: str) -> Policy:
    """`modules:M1,M2,...`: Megatron-Core's selective recompute of those modules: `none`'s
    tensors less those each module discards, its reruns added."""
    items = [m.strip() for m in name[len(MODULES_PREFIX) :].split(",") if m.strip()]
    table = _toml()["module"]
    unknown = [m for m in items if m not in table]
    if unknown or not items:
        raise InputError(
            f"recompute {name!r}: modules are {', '.join(module_names())} (Megatron-Core's "
            f"recompute_modules), e.g. modules:mla_up_proj,moe_act"
        )
    drop = {t for m in items for t in table[m].get("drop", [])}
    rerun = frozenset(op for m in items for op in table[m].get("recompute", []))
    keep = _table()["none"].keep - drop
    sources = "; ".join(table[m]["source"] for m in items)
    return Policy(name, keep, rerun, source=sources, note=f"recomputes {', '.join(items)}")


def policy_names() -> tuple[str, ...]:
    """The named policies (recompute.toml), in the file's order."""
    return tuple(_table())


def _unknown(name: object) -> InputError:
    return InputError(
        f"recompute must be one of {', '.join(policy_names())}, layer-N (every Nth block fully "
        f"recomputed), full-block:N (the first N blocks of each pipeline stage fully "
        f"recomputed), keep:T1,T2,... (tensors {', '.join(TENSORS)}) or modules:M1,M2,... "
        f"({', '.join(module_names())}); got {name!r}"
    )


def policy(name: object) -> Policy:
    """The policy called `name` (recompute.toml, `layer-N` or `keep:...`); InputError if none."""
    if not isinstance(name, str):
        raise _unknown(name)
    return _policy(name)


@cache
def _policy(name: str) -> Policy:
    table = _table()
    if name in table:
        return table[name]
    if name.startswith(LAYER_PREFIX):
        every = _count_after(name, LAYER_PREFIX)
        source = (
            'torchtitan selective_ac_option = "N" (torchtitan/distributed/activation_checkpoint.py '
            "at commit 21799393c3e6: a block is wrapped in a full checkpoint when "
            "ptd_checkpoint_wrapper._count % ac_freq == 0)"
        )
        return Policy(name, frozenset(), every=every, source=source, note="")
    if name.startswith(FULL_BLOCK_PREFIX):
        return _full_block(name)
    if name.startswith(KEEP_PREFIX):
        items = [t.strip() for t in name[len(KEEP_PREFIX) :].split(",") if t.strip()]
        return Policy(name, _checked(items, name), source="the user's keep list")
    if name.startswith(MODULES_PREFIX):
        return _modules(name)
    raise _unknown(name)


def _full_block(name: str) -> Policy:
    """`full-block:N`: Megatron-LM's block method, the first N blocks of each (virtual) pipeline
    stage fully recomputed, the rest keeping everything."""
    first = _count_after(name, FULL_BLOCK_PREFIX)
    source = (
        "Megatron-LM --recompute-granularity full --recompute-method block --recompute-num-layers "
        "N (megatron/core/transformer/transformer_block.py _checkpointed_forward, method 'block': "
        "the first recompute_num_layers layers of the block, the layers of one pipeline stage or "
        "of one virtual stage, are checkpointed whole, the rest not)"
    )
    return Policy(name, frozenset(), source=source, first=first)


def _count_after(name: str, prefix: str) -> int:
    """The whole count N >= 1 of `PREFIX` + N (ASCII digits only: '²' is a digit to
    str.isdigit but not to int); InputError naming the policies otherwise."""
    n = name[len(prefix) :]
    if not (n.isascii() and n.isdigit()) or int(n) < 1:
        raise _unknown(name)
    return int(n)


def checkpointed_blocks(p: Policy, blocks: float, chunks: int) -> float:
    """How many of `blocks` blocks, cut into `chunks` (virtual) pipeline stages as evenly as
    they go (the first `blocks % chunks` one more), a policy checkpoints whole under Megatron's
    block method: min(N, chunk's blocks) in each chunk. Every block for any other policy (a
    `layer-N` share is counted over the model: shardline.realistic.activations)."""
    if not p.first:
        return blocks
    q, r = divmod(int(round(blocks)), max(1, chunks))
    sizes = [q + 1] * r + [q] * (max(1, chunks) - r)
    return float(sum(min(p.first, size) for size in sizes))


def kept_tensors(p: Policy, *, gated: bool, flash: bool) -> frozenset[str]:
    """The tensors p keeps in a block that it applies to; with FlashAttention the scores never
    exist, and a non-gated FFN has no gate: both count as kept (nothing to store or recompute)."""
    kept = p.kept(gated) | ({"scores"} if flash else set()) | (set() if gated else {"gate"})
    return frozenset(kept)


def stored_tensors(p: Policy, *, gated: bool, flash: bool) -> tuple[str, ...]:
    """The tensors p stores in a block it applies to, in forward order (those that exist:
    no gate without a gated FFN, no scores with FlashAttention; `read_tensors` only where p
    saves residuals)."""
    kept = p.kept(gated)
    if p.residuals_only:
        kept = kept & read_tensors(p, gated=gated, flash=flash)
    gone = ({"scores"} if flash else set()) | (set() if gated else {"gate"})
    return tuple(t for t in TENSORS if t in kept and t not in gone)


def read_tensors(p: Policy, *, gated: bool, flash: bool) -> frozenset[str]:
    """The tensors the backward of a block p applies to reads: `NEEDED` but the dropout masks,
    and the kept inputs of the ops rerun to rebuild the rest (recompute.toml `saves`); x always.
    Walking the block backwards as `rerun_ops` does, with no mask wanted (no dropout)."""
    kept = kept_tensors(p, gated=gated, flash=flash)
    want = {t for t in NEEDED if t not in kept and TENSORS[t][1] != "mask"}
    read = {t for t in NEEDED if TENSORS[t][1] != "mask"} | {"x"}
    for op, writes, reads in reversed(OPS):
        if op in p.recompute or want.intersection(writes):
            want |= {t for t in reads if t not in kept}
            read |= {t for t in reads if t in kept}
    return frozenset(read)


def rerun_ops(p: Policy, *, gated: bool, flash: bool) -> tuple[str, ...]:
    """The ops the backward runs again in a block p applies to, in forward order: walking the
    block backwards, an op reruns if it writes a wanted tensor or p names it; a rerun op wants
    its inputs that are not kept. Wanted at first: `NEEDED` less what is kept."""
    kept = kept_tensors(p, gated=gated, flash=flash)
    want = {t for t in NEEDED if t not in kept}
    out: list[str] = []
    for op, writes, reads in reversed(OPS):
        if op in p.recompute or want.intersection(writes):
            out.append(op)
            want |= {t for t in reads if t not in kept}
    return tuple(reversed(out))
