"""Megatron-LM's command line written from a plan: one flag per line, continued with `\\`, in
the names shardline.io.megatron_args reads back (so that `--from` of what is written gives the
same plan). What Megatron-LM has no flag for (ZeRO 2, a recompute policy of another framework,
HSDP) is refused in one line."""

from __future__ import annotations

from shardline.basics.options import Execution
from shardline.basics.recompute import FULL_BLOCK_PREFIX
from shardline.errors import InputError
from shardline.io.framework_config import LaunchLayout, plain_model

__all__ = ["emit_megatron"]


def _model_flags(layout: LaunchLayout) -> list[str]:
    s = layout.model
    tp = layout.degrees.get("tp", 1)
    out = [
        f"--num-layers {s.layers}",
        f"--hidden-size {s.d_model}",
        f"--ffn-hidden-size {s.d_ff}",
        f"--num-attention-heads {s.heads}",
        f"--kv-channels {s.head_dim}",
    ]
    if s.kv_heads != s.heads:
        out += ["--group-query-attention", f"--num-query-groups {s.kv_heads}"]
    if s.gated:
        out.append("--swiglu")
    out.append(f"--normalization {'RMSNorm' if s.norm == 'rmsnorm' else 'LayerNorm'}")
    out.append(f"--position-embedding-type {'rope' if s.rotary else 'learned_absolute'}")
    if not s.tied_embeddings:
        out.append("--untie-embeddings-and-output-weights")
    if s.qk_norm:
        out.append("--qk-layernorm")
    divisible = 128 if s.vocab % (128 * tp) == 0 else 1
    out += [f"--vocab-size {s.vocab}", f"--make-vocab-size-divisible-by {divisible}"]
    if s.moe is not None:
        m = s.moe
        out += [
            f"--num-experts {m.experts}",
            f"--moe-router-topk {m.experts_per_token}",
            f"--moe-ffn-hidden-size {m.expert_d_ff}",
        ]
        if m.shared_experts:
            out.append(f"--moe-shared-expert-intermediate-size {m.shared_experts * m.expert_d_ff}")
        if m.dense_layers_first:
            k = m.dense_layers_first
            out.append(f"--moe-layer-freq '([0]*{k}+[1]*{s.layers - k})'")
        if m.router_bias:
            out.append("--moe-router-enable-expert-bias")
    return out


def _precision_flags(dtype: str) -> list[str]:
    flags = {"bf16": ["--bf16"], "fp16": ["--fp16"], "fp8": ["--bf16", "--fp8-format hybrid"]}
    if dtype == "fp32":
        return []
    if dtype not in flags:
        raise InputError(f"--emit megatron: dtype {dtype} has no Megatron-LM flag")
    return flags[dtype]


def _layout_flags(layout: LaunchLayout) -> list[str]:
    d, ex = layout.degrees, layout.execution
    if d.get("fsdp", 1) > 1 and d.get("dp", 1) > 1:
        raise InputError("--emit megatron: dp and fsdp both above 1 (HSDP) is not written")
    out = [
        f"--tensor-model-parallel-size {d.get('tp', 1)}",
        f"--pipeline-model-parallel-size {d.get('pp', 1)}",
        f"--context-parallel-size {d.get('cp', 1)}",
        f"--expert-model-parallel-size {d.get('ep', 1)}",
    ]
    if "etp" in d:
        out.append(f"--expert-tensor-parallel-size {d['etp']}")
    if ex.interleave > 1:
        out.append(f"--num-virtual-stages-per-pipeline-rank {ex.interleave}")
    out += [
        f"--micro-batch-size {layout.microbatch_size}",
        f"--global-batch-size {layout.batch}",
        f"--seq-length {layout.seq_len}",
        f"--max-position-embeddings {layout.seq_len}",
    ]
    if d.get("fsdp", 1) > 1:
        out += ["--use-megatron-fsdp", "--data-parallel-sharding-strategy optim_grads_params"]
    return out


def _execution_flags(layout: LaunchLayout) -> list[str]:
    ex = layout.execution
    out: list[str] = []
    if ex.sequence_parallel:
        out.append("--sequence-parallel")
    if ex.tp_overlap:
        out.append("--tp-comm-overlap")
    if ex.zero == 1:
        out.append("--use-distributed-optimizer")
        if ex.overlap_param_gather:  # Megatron-LM asserts --overlap-grad-reduce beside it
            out += ["--overlap-grad-reduce", "--overlap-param-gather"]
    elif ex.zero > 1:
        raise InputError(f"--emit megatron: ZeRO stage {ex.zero} has no Megatron-LM flag")
    recompute = {
        "none": [],
        "selective": ["--recompute-granularity selective"],
        "full": [
            "--recompute-granularity full",
            "--recompute-method uniform",
            "--recompute-num-layers 1",
        ],
    }
    if ex.recompute.startswith(FULL_BLOCK_PREFIX):  # Megatron-LM's block method
        n = ex.recompute.removeprefix(FULL_BLOCK_PREFIX)
        recompute[ex.recompute] = [
            "--recompute-granularity full",
            "--recompute-method block",
            f"--recompute-num-layers {n}",
        ]
    if ex.recompute not in recompute:
        raise InputError(f"--emit megatron: recompute policy {ex.recompute!r} has no Megatron flag")
    out += recompute[ex.recompute]
    if ex.cuda_graphs:
        out.append("--enable-cuda-graph")
    if ex.grad_reduce_dtype == "fp32":
        out.append("--accumulate-allreduce-grads-in-fp32")
    if layout.degrees.get("ep", 1) > 1 or layout.model.moe is not None:
        out += _moe_exec_flags(ex)
    if layout.degrees.get("cp", 1) > 1:
        out.append(f"--cp-comm-type {'p2p' if ex.cp_kind == 'ring' else 'all_gather'}")
    if ex.optimizer not in ("adam", "sgd"):
        raise InputError(f"--emit megatron: optimizer {ex.optimizer!r} has no Megatron-LM flag")
    out.append(f"--optimizer {ex.optimizer}")
    return out


def _moe_exec_flags(ex: Execution) -> list[str]:
    dispatch = {
        "all-to-all": ["--moe-token-dispatcher-type alltoall"],
        "hierarchical": [
            "--moe-token-dispatcher-type flex",
            "--moe-flex-dispatcher-backend deepep",
        ],
        "hybridep": ["--moe-token-dispatcher-type flex", "--moe-flex-dispatcher-backend hybridep"],
    }
    out = list(dispatch[ex.ep_dispatch])
    if ex.ep_overlap:
        out.append("--overlap-moe-expert-parallel-comm")
    return out


def emit_megatron(layout: LaunchLayout) -> str:
    """Megatron-LM arguments (one flag per line, continued with `\\`) of the layout."""
    plain_model(layout.model, "megatron")
    flags = (
        _model_flags(layout)
        + _layout_flags(layout)
        + _precision_flags(layout.dtype)
        + _execution_flags(layout)
    )
    head = [
        f"# Megatron-LM arguments for {layout.model.name} on {layout.devices} GPUs, written by "
        "`shardline plan|search --emit megatron`",
        "# (pretrain_gpt.py; add the data, tokenizer, checkpoint and learning-rate flags)",
    ]
    body = " \\\n".join(flags)
    return "\n".join(head) + "\n" + body + "\n"
