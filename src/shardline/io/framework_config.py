"""A training framework's own launch configuration, read into the plan it describes, and the plan
written back in the framework's own names (docs/framework-configs.md).

Formats: a Megatron-LM argument list (`--num-layers 32 --tensor-model-parallel-size 2 ...`, the
args text or a train.sh; shardline.io.megatron_args), a torchtitan job TOML
(shardline.io.torchtitan_toml) and a MaxText config YAML or `key=value` overrides
(shardline.io.maxtext_yaml). Each reader returns an `Imported`: the model's shape (a ModelSpec,
each number sourced to the key it came from), the layout resolved over the devices (tp, pp, dp,
fsdp, ep, cp and the microbatches), the batch, sequence, precision and the execution knobs of
`shardline.basics.options.Execution`; the keys it does not know (`unknown`, listed, never
guessed) and the fields it read but the plan does not model (`not_modelled`, one line each).

Pure: text in, values out; nothing printed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from shardline.errors import InputError
from shardline.workload.modelspec import ModelSpec

__all__ = [
    "FORMATS",
    "Imported",
    "LaunchLayout",
    "fill_rest",
    "sourced",
    "DEGREE_NAMES",
    "plain_model",
    "unfolded",
    "named_model",
    "model_name_of",
    "runnable_knobs",
]

FORMATS = ("megatron", "torchtitan", "maxtext")
DEGREE_NAMES = ("tp", "pp", "dp", "fsdp", "ep", "cp")


@dataclass(frozen=True)
class Imported:
    """One configuration file as the plan's inputs. `degrees` multiply to the devices;
    `microbatches` per step per pipeline = batch / (dp x fsdp x ep x microbatch_size)."""

    format: str
    origin: str
    model: ModelSpec
    degrees: dict[str, int]
    batch: int
    microbatches: int
    seq_len: int
    dtype: str | None = None  # None: the file states none (the plan's default)
    execution: dict[str, Any] = field(default_factory=dict)  # Execution keywords
    etp: int | None = None  # expert tensor parallelism, where the file gives it
    read: tuple[str, ...] = ()  # the keys read
    unknown: tuple[str, ...] = ()  # keys this reader does not know
    not_modelled: tuple[str, ...] = ()  # one line per field read that the plan does not model
    attention_dtype: str | None = None  # the fused attention's dtype where the file sets one
    not_read: tuple[str, ...] = ()  # one line per statement of a recipe the reader did not evaluate

    def to_dict(self) -> dict[str, object]:
        return {
            "format": self.format,
            "file": self.origin,
            "model": self.model.name,
            "degrees": dict(self.degrees),
            "etp": self.etp,
            "batch": self.batch,
            "microbatches": self.microbatches,
            "seq_len": self.seq_len,
            "dtype": self.dtype,
            "attention_dtype": self.attention_dtype,
            "execution": dict(self.execution),
            "read": list(self.read),
            "unknown": list(self.unknown),
            "not_modelled": list(self.not_modelled),
            "not_read": list(self.not_read),
        }


@dataclass(frozen=True)
class LaunchLayout:
    """What a launch configuration is written from: the model, the priced plan's degrees and
    microbatches, the global batch, sequence, dtype and the Execution the plan ran with."""

    model: ModelSpec
    degrees: dict[str, int]
    microbatches: int
    batch: int
    seq_len: int
    dtype: str
    execution: Any  # shardline.basics.options.Execution
    devices: int

    @property
    def data_ways(self) -> int:
        """Ranks that split the batch: dp x fsdp x ep (the plan's microbatch rule); with
        expert tensor parallelism (folding: `etp` among the degrees) dp counts them all."""
        d = self.degrees
        experts = 1 if "etp" in d else d.get("ep", 1)
        return d.get("dp", 1) * d.get("fsdp", 1) * experts

    @property
    def microbatch_size(self) -> int:
        """Sequences per microbatch on one data rank: batch / (data ranks x microbatches)."""
        ways = self.data_ways * self.microbatches
        if self.batch % ways:
            raise InputError(
                f"the batch {self.batch} does not split into {self.microbatches} microbatches on "
                f"{self.data_ways} data-parallel ranks: a launch configuration needs whole "
                "sequences per microbatch"
            )
        return self.batch // ways


def sourced(value: object, origin: str, key: str, note: str = "") -> dict[str, object]:
    """A model-file field: the value and the key of the configuration it came from."""
    return {"value": value, "source": f"{origin}: {key}" + (f" ({note})" if note else "")}


def fill_rest(degrees: dict[str, int], devices: int, what: str) -> dict[str, int]:
    """Resolve the one degree given as -1 (the frameworks' "the rest of the devices") and check
    that the degrees multiply to the devices."""
    rest = [k for k, v in degrees.items() if v == -1]
    if len(rest) > 1:
        raise InputError(f"{what}: more than one degree is -1 ({', '.join(rest)})")
    known = 1
    for k, v in degrees.items():
        if v != -1:
            if v < 1:
                raise InputError(f"{what}: degree {k} must be a positive whole number, got {v}")
            known *= v
    out = dict(degrees)
    if rest:
        if devices % known:
            raise InputError(
                f"{what}: the other degrees multiply to {known}, which does not divide the "
                f"{devices} devices, so -1 for {rest[0]} has no whole value"
            )
        out[rest[0]] = devices // known
    elif known != devices:
        shown = " x ".join(f"{k} {v}" for k, v in out.items() if v != 1) or "1"
        raise InputError(
            f"{what}: the degrees ({shown}) multiply to {known}, not the {devices} devices "
            "(--devices)"
        )
    return out


def plain_model(spec: ModelSpec, fmt: str) -> None:
    """Refuse, in one line, a model part no writer of `fmt` spells (written files must read
    back to the same plan)."""
    from shardline.workload.attention import variant_of

    for record in spec.attention_variants:
        raise InputError(
            f"--emit {fmt}: a model with {variant_of(record).label} is not written yet"
        )


def unfolded(layout: LaunchLayout, fmt: str) -> None:
    """Refuse expert tensor parallelism (parallel folding) where `fmt` has no setting read."""
    if "etp" in layout.degrees:
        raise InputError(f"--emit {fmt}: expert tensor parallelism (--etp) is not written")


def _names_table() -> dict[str, object]:
    import tomllib
    from importlib.resources import files

    text = files("shardline.io").joinpath("framework_models.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


def named_model(path: tuple[str, ...], key: str, origin: str, what: str) -> tuple[ModelSpec, str]:
    """The zoo model a framework's model name stands for (framework_models.toml), and its
    source; an unknown name is one error listing the known ones."""
    from shardline.models import load_model

    table: Any = _names_table()
    for part in path:
        table = table.get(part, {})
    if key not in table:
        known = ", ".join(sorted(table)) or "none"
        raise InputError(f"{origin}: {what} {key!r} is not one shardline knows (known: {known})")
    entry = table[key]
    return load_model(entry["model"]), entry["source"]


def _shape(spec: ModelSpec) -> tuple[Any, ...]:
    return (
        spec.d_model,
        spec.layers,
        spec.heads,
        spec.kv_heads,
        spec.head_dim,
        spec.d_ff,
        spec.gated,
        spec.vocab,
        spec.tied_embeddings,
        spec.moe,
        spec.attention_variants,
    )


def model_name_of(spec: ModelSpec, path: tuple[str, ...]) -> tuple[str, ...] | None:
    """The framework's name for a model of `spec`'s shape (the reverse of `named_model`):
    the table path and key, or None when the framework names no model of that shape."""
    from shardline.models import load_model

    def walk(table: dict[str, object], prefix: tuple[str, ...]) -> tuple[str, ...] | None:
        for key, value in table.items():
            if isinstance(value, dict) and "model" in value:
                if _shape(load_model(value["model"])) == _shape(spec):
                    return (*prefix, key)
            elif isinstance(value, dict):
                found = walk(value, (*prefix, key))
                if found:
                    return found
        return None

    table: Any = _names_table()
    for part in path:
        table = table.get(part, {})
    return walk(table, ())


# what each format can run of the knobs the training search tries (the rest is refused on
# writing): the highest ZeRO stage (Megatron's distributed optimizer is stage 1; torchtitan and
# MaxText shard with FSDP instead), and the recompute policies they name
_ZERO_MAX = {"megatron": 1, "torchtitan": 0, "maxtext": 0}
_RECOMPUTE_AS = {
    "torchtitan": {"selective": "op"},  # torchtitan's selective is per op or per layer
    "maxtext": {"selective": "minimal"},  # MaxText's policy that recomputes the attention core
}


def runnable_knobs(fmt: str, knobs: dict[str, Any], tp: int) -> tuple[dict[str, Any], list[str]]:
    """The searched knobs (zero, recompute, sequence_parallel, tp_overlap, interleave) as `fmt`
    can run them, and one line per change: the plan is priced again with these."""
    out = dict(knobs)
    notes = []
    if out.get("zero", 0) > _ZERO_MAX[fmt]:
        out["zero"] = _ZERO_MAX[fmt]
        notes.append(f"ZeRO {knobs['zero']} -> {out['zero']} ({fmt} has no ZeRO {knobs['zero']})")
    policy = _RECOMPUTE_AS.get(fmt, {}).get(str(out.get("recompute")))
    if policy is not None:
        out["recompute"] = policy
        notes.append(f"recompute {knobs['recompute']} -> {policy} ({fmt}'s nearest policy)")
    if fmt in ("torchtitan", "maxtext") and tp > 1 and not out.get("sequence_parallel"):
        out["sequence_parallel"] = True
        notes.append(f"sequence parallel on ({fmt} always runs it with tp)")
    if fmt == "maxtext" and out.get("tp_overlap"):
        out["tp_overlap"] = False
        notes.append("tp overlap off (MaxText has no such setting; XLA schedules the collectives)")
    return out, notes
