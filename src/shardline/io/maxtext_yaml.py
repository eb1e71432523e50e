"""MaxText's config (AI-Hypercomputer/maxtext configs/base.yml and the keys pyconfig.py reads):
read a YAML, or the `key=value` overrides of a `train.py base.yml ...` command, into the plan it
describes, and write a plan back as a YAML of flat keys.

The model: `model_name` (a configs/models YAML; the ones read are in framework_models.toml) or
the base_* keys themselves, scaled by `global_parameter_scale` as pyconfig.py does
(get_individual_scales: log2 of the scale = 3 b + r; query heads and MLP x 2^(b + [r > 0]),
embedding x 2^(b + [r > 1]), layers x 2^b). A key of the shape that the file leaves out is an
error, never base.yml's default (base.yml changes between MaxText versions).

The mesh: each axis is ici_X x dcn_X (one -1 per level takes the rest of the devices): data is
the plan's dp; fsdp and fsdp_transpose fsdp; tensor, tensor_transpose and tensor_sequence tp;
sequence and context cp; expert ep; pipeline pp. The global batch is per_device_batch_size x
devices x gradient_accumulation_steps; the microbatches are gradient_accumulation_steps, or
num_pipeline_microbatches with a pipeline.

YAML is read with PyYAML (safe_load); a `key=value` override list with no YAML at all.
"""

from __future__ import annotations

import math
import re
import shlex
from typing import Any

from shardline.errors import InputError
from shardline.io.framework_config import (
    Imported,
    LaunchLayout,
    fill_rest,
    model_name_of,
    named_model,
    plain_model,
    sourced,
    unfolded,
)
from shardline.io.maxtext_remat import REMAT_TENSORS, remat_execution

__all__ = ["read_maxtext", "emit_maxtext", "AXES"]

# MaxText mesh axis -> the plan's degree
AXES = {
    "data": "dp",
    "fsdp": "fsdp",
    "fsdp_transpose": "fsdp",
    "sequence": "cp",
    "context": "cp",
    "tensor": "tp",
    "tensor_transpose": "tp",
    "tensor_sequence": "tp",
    "expert": "ep",
    "pipeline": "pp",
    "autoregressive": "dp",
}
FOLDED = {"fsdp_transpose", "tensor_transpose", "tensor_sequence", "sequence", "autoregressive"}
SHAPE_KEYS = (
    "model_name",
    "global_parameter_scale",
    "base_emb_dim",
    "base_num_query_heads",
    "base_num_kv_heads",
    "base_mlp_dim",
    "base_num_decoder_layers",
    "head_dim",
    "vocab_size",
    "mlp_activations",
    "logits_via_embedding",
    "num_experts",
    "num_experts_per_tok",
    "base_moe_mlp_dim",
    "shared_experts",
    "first_num_dense_layers",
    "use_qk_norm",
    "decoder_block",
)
RUN_KEYS = (
    "per_device_batch_size",
    "max_target_length",
    "gradient_accumulation_steps",
    "num_pipeline_microbatches",
    "num_layers_per_pipeline_stage",
    "num_pipeline_repeats",
    "dtype",
    "weight_dtype",
    "quantization",
    "remat_policy",
    "attention",
    "opt_type",
    "sa_block_q",
)
# keys that do not change the step time (names, paths, data, schedules, logging)
IGNORED = re.compile(
    r"^(run_name|base_output_directory|dataset_.*|tokenizer_.*|steps|learning_rate.*|"
    r"warmup_.*|cosine_.*|enable_checkpointing|async_checkpointing|checkpoint_.*|"
    r"log_period|metrics_.*|enable_profiler|profiler.*|skip_first_n_steps_for_profiler|"
    r"profiler_steps|hardware|eval_.*|train_data_.*|enable_data_shuffling|"
    r"adam_.*|gradient_clipping_threshold|max_prefill_predict_length|prompt|load_.*|"
    r"save_.*|use_iota_embed|reuse_example_batch|upload_all_profiler_results|"
    r"enable_goodput_recording|monitor_goodput|gcs_.*|base_config|data_sharding|"
    r"logical_axis_rules|mesh_axes|init_weights_seed|normalization_layer_epsilon|"
    r"rope_.*|max_position_embeddings|packing|jax_cache_dir|compile_topology.*|"
    r"attention_type|num_slices|per_device_batch_size_eval|enable_dropout|dropout_rate|"
    r"allow_split_physical_axes|context_parallel_load_balance|decode_.*|inference_.*)$"
)


def _overrides(text: str) -> dict[str, object]:
    """`key=value` words of a `python3 -m MaxText.train base.yml key=value ...` command."""
    import yaml

    out: dict[str, object] = {}
    joined = text.replace("\\\n", " ")
    for word in shlex.split(joined, comments=True):
        key, eq, value = word.partition("=")
        if eq and re.fullmatch(r"[a-z_][a-z0-9_]*", key):
            out[key] = yaml.safe_load(value) if value else ""
    return out


def _load(text: str, origin: str) -> dict[str, object]:
    import yaml

    if re.search(r"train(\.py)?\b", text) and re.search(r"^\s*(python|bash|\$)", text, re.M):
        return _overrides(text)
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(f"{origin}: not valid YAML ({str(exc).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise InputError(f"{origin}: a MaxText config is a mapping of keys to values")
    return data


class _Keys:
    def __init__(self, data: dict[str, object], origin: str) -> None:
        self.data = data
        self.origin = origin
        self.read: list[str] = []

    def get(self, key: str, default: object = None) -> Any:
        if key not in self.data:
            return default
        self.read.append(key)
        return self.data[key]

    def number(self, key: str, default: object = None) -> Any:
        value = self.get(key, default)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InputError(f"{self.origin}: {key} must be a number, got {value!r}")
        return value

    def count(self, key: str, default: int, *, rest: bool = False) -> int:
        """A positive whole number (or -1, "the rest", where `rest`)."""
        value = self.number(key, default)
        if value != int(value) or not (value >= 1 or (rest and value == -1)):
            raise InputError(f"{self.origin}: {key} must be a positive whole number, got {value}")
        return int(value)

    def need(self, key: str) -> int:
        value = self.number(key)
        if value is None:
            raise InputError(f"{self.origin}: no {key} (the model's shape is never guessed)")
        return int(value)


def _scales(scale: float) -> tuple[int, int, int]:
    """pyconfig.get_individual_scales: (embedding, heads and MLP, layers) multipliers."""
    log = math.log2(scale)
    if log != int(log) or log < 0:
        raise InputError(f"global_parameter_scale must be a power of two, got {scale}")
    b, r = divmod(int(log), 3)
    return 2 ** (b + (r > 1)), 2 ** (b + (r > 0)), 2**b


def _gated(k: _Keys) -> bool:
    acts = k.get("mlp_activations")
    if acts is None:
        raise InputError(f"{k.origin}: no mlp_activations (the model's shape is never guessed)")
    if isinstance(acts, str):
        acts = [a.strip(" '\"") for a in acts.strip("[]").split(",")]
    return len(acts) == 2


def _model_from_keys(k: _Keys) -> dict[str, object]:
    o = k.origin
    emb_x, heads_x, layers_x = _scales(k.count("global_parameter_scale", 1))
    note = "x global_parameter_scale" if (emb_x, heads_x, layers_x) != (1, 1, 1) else ""
    heads = k.need("base_num_query_heads") * heads_x
    model: dict[str, object] = {
        "schema": 1,
        "name": _name(o),
        "d_model": sourced(k.need("base_emb_dim") * emb_x, o, "base_emb_dim", note),
        "layers": sourced(
            k.need("base_num_decoder_layers") * layers_x, o, "base_num_decoder_layers", note
        ),
        "heads": sourced(heads, o, "base_num_query_heads", note),
        "kv_heads": sourced(
            int(k.number("base_num_kv_heads", heads / heads_x) or 0) * heads_x,
            o,
            "base_num_kv_heads",
            note,
        ),
        "head_dim": sourced(k.need("head_dim"), o, "head_dim"),
        "d_ff": sourced(k.need("base_mlp_dim") * heads_x, o, "base_mlp_dim", note),
        "gated": sourced(_gated(k), o, "mlp_activations"),
        "vocab": sourced(k.need("vocab_size"), o, "vocab_size"),
        "tied_embeddings": sourced(
            bool(k.get("logits_via_embedding", False)), o, "logits_via_embedding"
        ),
        "qk_norm": sourced(bool(k.get("use_qk_norm", False)), o, "use_qk_norm"),
    }
    experts = k.count("num_experts", 1)
    if experts > 1:
        model["moe"] = {
            "experts": sourced(experts, o, "num_experts"),
            "experts_per_token": sourced(k.need("num_experts_per_tok"), o, "num_experts_per_tok"),
            "expert_d_ff": sourced(k.need("base_moe_mlp_dim"), o, "base_moe_mlp_dim"),
            "shared_experts": sourced(int(k.number("shared_experts", 0) or 0), o, "shared_experts"),
            "dense_layers_first": sourced(
                int(k.number("first_num_dense_layers", 0) or 0), o, "first_num_dense_layers"
            ),
        }
    return model


def _model(k: _Keys) -> Any:
    from shardline.models.catalog import model_from_dict

    name = k.get("model_name")
    if name is not None and name != "default":
        given = [key for key in SHAPE_KEYS[2:] if key in k.data]
        if given:
            raise InputError(
                f"{k.origin}: model_name {name} with its shape keys overridden "
                f"({', '.join(given)}) is not read; give one or the other"
            )
        spec, _source = named_model(("maxtext",), str(name), k.origin, "model_name")
        return spec
    return model_from_dict(_model_from_keys(k), k.origin)


def _degrees(k: _Keys, devices: int, notes: list[str]) -> dict[str, int]:
    """ici_X x dcn_X per axis; -1 at one level takes the rest."""
    dcn = {axis: k.count(f"dcn_{axis}_parallelism", 1, rest=True) for axis in AXES}
    slices = fill_rest(dict(dcn), math.prod(v for v in dcn.values() if v != -1), k.origin)
    per_slice = devices // math.prod(slices.values())
    if devices % math.prod(slices.values()):
        raise InputError(f"{k.origin}: the dcn_* degrees do not divide the {devices} devices")
    ici = {axis: k.count(f"ici_{axis}_parallelism", 1, rest=True) for axis in AXES}
    if "ici_fsdp_parallelism" not in k.data and -1 not in ici.values():
        ici["fsdp"] = -1  # base.yml: ici_fsdp_parallelism -1 (every axis but fsdp defaults to 1)
    ici = fill_rest(ici, per_slice, k.origin)
    degrees = dict.fromkeys(("tp", "pp", "dp", "fsdp", "ep", "cp"), 1)
    for axis, name in AXES.items():
        ways = ici[axis] * slices[axis]
        degrees[name] *= ways
        if axis in FOLDED and ways > 1:
            notes.append(f"{axis} parallelism {ways}: priced as {name}")
    return degrees


def _execution(k: _Keys, notes: list[str]) -> dict[str, object]:
    ex: dict[str, object] = {"framework": "maxtext"}
    remat = k.get("remat_policy")
    if remat is not None:
        from shardline.basics.recompute import policy

        ex.update(remat_execution(k.get, str(remat), k.origin))
        policy(ex["recompute"])  # an unknown policy is one error listing the known ones
    weight = k.get("weight_dtype")
    activations = k.get("dtype")  # the gradients are reduced at the matmuls' output, in `dtype`
    if activations in ("float32", "bfloat16"):  # (frameworks/maxtext.toml grad_reduce_dtype)
        ex["grad_reduce_dtype"] = {"float32": "fp32", "bfloat16": "bf16"}[activations]
    opt = k.get("opt_type")
    if opt is not None:
        if opt in ("adamw", "adam_pax"):
            ex["optimizer"] = "adam"
        elif opt == "sgd":  # optax.sgd(learning_rate_schedule): no momentum, no state
            ex["optimizer"] = "sgd-plain" if weight == "bfloat16" else 4.0
            if weight != "bfloat16":  # base.yml: weight_dtype float32
                notes.append(
                    "opt_type sgd keeps no state; the fp32 weights' and gradients' 4 B per "
                    "parameter beyond the model's bf16 ones are counted as optimizer state"
                )
        else:
            notes.append(f"opt_type {opt}: priced as AdamW's state")
    attention = k.get("attention")
    if attention is not None and attention not in ("autoselected", "flash", "cudnn_flash_te"):
        notes.append(f"attention {attention}: priced as the fused (flash) attention kernel")
    return ex


def _dtype(k: _Keys, notes: list[str]) -> str | None:
    quant = k.get("quantization")
    if quant:
        if "fp8" in str(quant):
            return "fp8"
        if "int8" in str(quant):
            return "int8"
        notes.append(f"quantization {quant}: priced in dtype")
    dtype = k.get("dtype")
    if dtype is None:
        return None
    names = {"bfloat16": "bf16", "float32": "fp32", "float16": "fp16"}
    if dtype not in names:
        raise InputError(f"{k.origin}: dtype {dtype!r} is not read")
    return names[dtype]


def _batch(k: _Keys, devices: int, degrees: dict[str, int]) -> tuple[int, int]:
    """(global batch, microbatches per step)."""
    pdbs = k.number("per_device_batch_size")
    if pdbs is None or not pdbs > 0:
        raise InputError(f"{k.origin}: per_device_batch_size must be given, above 0")
    accumulation = k.count("gradient_accumulation_steps", 1)
    per_step = pdbs * devices
    if per_step != int(per_step):
        raise InputError(
            f"{k.origin}: per_device_batch_size {pdbs} x {devices} devices is not whole sequences"
        )
    batch = int(per_step) * accumulation
    microbatches = accumulation
    if degrees["pp"] > 1:
        microbatches = k.count("num_pipeline_microbatches", degrees["pp"])
        microbatches *= accumulation
    return batch, microbatches


def read_maxtext(text: str, origin: str, devices: int) -> Imported:
    """The plan of one MaxText config over `devices` chips."""
    data = _load(text, origin)
    k = _Keys(data, origin)
    notes: list[str] = []
    spec = _model(k)
    degrees = _degrees(k, devices, notes)
    batch, microbatches = _batch(k, devices, degrees)
    execution = _execution(k, notes)
    repeats = k.count("num_pipeline_repeats", 1) if "num_pipeline_repeats" in data else None
    if degrees["pp"] > 1:
        per_stage = k.count("num_layers_per_pipeline_stage", 1)
        execution["interleave"] = int(repeats or spec.layers // (degrees["pp"] * per_stage))
    seq = k.number("max_target_length")
    if seq is None:
        raise InputError(f"{origin}: no max_target_length")
    dtype = _dtype(k, notes)
    known = set(SHAPE_KEYS) | set(RUN_KEYS) | set(REMAT_TENSORS)
    known |= {f"{lvl}_{a}_parallelism" for lvl in ("ici", "dcn") for a in AXES}
    unknown = [key for key in data if key not in known and not IGNORED.match(str(key))]
    return Imported(
        format="maxtext",
        origin=origin,
        model=spec,
        degrees=degrees,
        batch=batch,
        microbatches=microbatches,
        seq_len=int(seq),
        dtype=dtype,
        execution=execution,
        read=tuple(dict.fromkeys(k.read)),
        unknown=tuple(unknown),
        not_modelled=tuple(notes),
    )


def _name(origin: str) -> str:
    from pathlib import Path

    return Path(origin).stem or "maxtext-model"


# --- writing ---------------------------------------------------------------------------------


def _shape_keys(layout: LaunchLayout) -> dict[str, object]:
    s = layout.model
    named = model_name_of(s, ("maxtext",))
    if named is not None:
        return {"model_name": named[0]}
    out: dict[str, object] = {
        "base_emb_dim": s.d_model,
        "base_num_query_heads": s.heads,
        "base_num_kv_heads": s.kv_heads,
        "base_mlp_dim": s.d_ff,
        "base_num_decoder_layers": s.layers,
        "head_dim": s.head_dim,
        "vocab_size": s.vocab,
        "mlp_activations": ["silu", "linear"] if s.gated else ["relu"],
        "logits_via_embedding": s.tied_embeddings,
        "use_qk_norm": s.qk_norm,
    }
    if s.moe is not None:
        out |= {
            "num_experts": s.moe.experts,
            "num_experts_per_tok": s.moe.experts_per_token,
            "base_moe_mlp_dim": s.moe.expert_d_ff,
            "shared_experts": s.moe.shared_experts,
            "first_num_dense_layers": s.moe.dense_layers_first,
        }
    return out


def _run_keys(layout: LaunchLayout) -> dict[str, object]:
    d, ex = layout.degrees, layout.execution
    pp = d.get("pp", 1)
    accumulation = 1 if pp > 1 else layout.microbatches
    pdbs = layout.batch / (layout.devices * accumulation)
    out: dict[str, object] = {
        "per_device_batch_size": int(pdbs) if pdbs == int(pdbs) else pdbs,
        "gradient_accumulation_steps": accumulation,
        "max_target_length": layout.seq_len,
        "ici_data_parallelism": d.get("dp", 1),
        "ici_fsdp_parallelism": d.get("fsdp", 1),
        "ici_tensor_parallelism": d.get("tp", 1),
        "ici_context_parallelism": d.get("cp", 1),
        "ici_expert_parallelism": d.get("ep", 1),
        "ici_pipeline_parallelism": pp,
    }
    if pp > 1:
        out["num_pipeline_microbatches"] = layout.microbatches
        out["num_pipeline_repeats"] = ex.interleave
    dtypes = {"bf16": ("bfloat16", None), "fp32": ("float32", None), "fp8": ("bfloat16", "fp8")}
    if layout.dtype not in dtypes:
        raise InputError(f"--emit maxtext: dtype {layout.dtype} has no MaxText setting")
    out["dtype"], quant = dtypes[layout.dtype]
    if quant:
        out["quantization"] = quant
    out["weight_dtype"] = "bfloat16" if ex.optimizer == "sgd-plain" else "float32"
    not_remat = ex.recompute.startswith(("layer-", "keep:", "full-block:"))
    if not_remat or ex.recompute in ("selective", "op"):
        raise InputError(f"--emit maxtext: recompute policy {ex.recompute!r} is no remat_policy")
    out["remat_policy"] = ex.recompute
    if ex.optimizer not in ("adam", "sgd"):
        raise InputError(f"--emit maxtext: optimizer {ex.optimizer!r} is not written")
    out["opt_type"] = "adamw" if ex.optimizer == "adam" else "sgd"
    return out


def _check_expressible(layout: LaunchLayout) -> None:
    ex = layout.execution
    if layout.degrees.get("tp", 1) > 1 and not ex.sequence_parallel:
        raise InputError(
            "--emit maxtext: MaxText shards the activations over tensor (sequence "
            "parallel) whenever tp > 1"
        )
    if ex.zero or ex.tp_overlap or not ex.cuda_graphs:
        raise InputError(
            "--emit maxtext: --zero, --tp-overlap and --no-cuda-graphs have no MaxText setting"
        )


def emit_maxtext(layout: LaunchLayout) -> str:
    """A MaxText config YAML (flat keys, over base.yml) of the layout."""
    import yaml

    plain_model(layout.model, "maxtext")
    unfolded(layout, "maxtext")
    _check_expressible(layout)
    keys = _shape_keys(layout) | _run_keys(layout)
    head = (
        f"# MaxText config for {layout.model.name} on {layout.devices} chips, written by "
        "`shardline plan|search --emit maxtext`\n"
        "# (over configs/base.yml; add run_name, the dataset and base_output_directory)\n"
    )
    body = yaml.safe_dump(keys, sort_keys=False, default_flow_style=False)
    return head + body
