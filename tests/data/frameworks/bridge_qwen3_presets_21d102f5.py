# Excerpt of NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/qwen/qwen3_workload_base_configs.py
# at commit 21d102f5ecbaa9307bb7eb0a9b0850cdf2f4bbd6: the module docstring and
# the layout presets below (with the presets they build on), verbatim, each under its line
# number in that file. Read by `shardline plan --from FILE --recipe PRESET` without running it.

"""Parallelism presets for Qwen3 performance configs.

Config naming convention:
    {MODEL}_{SIZE}_{TASK}_CONFIG_{GPU}_{PRECISION}_{VERSION}

V1: 235B_a22b; 30B_a3b; Next_80b_a3b
V2: 235B_a22b: num_gpus=256 for Blackwell, GBS=8192 for all GPUs

Use --config_variant to select a variant.
Use --list_config_variants to see available variants interactively.
"""

from dataclasses import replace

from utils.utils import WorkloadBaseConfig


# line 32
BASE_QWEN3_235B_A22B_CONFIG = WorkloadBaseConfig(
    expert_tensor_parallel_size=1,
)

# line 37
BASE_QWEN3_30B_A3B_CONFIG = WorkloadBaseConfig(
    expert_model_parallel_size=8,
    expert_tensor_parallel_size=1,
    global_batch_size=512,
)

# line 175
QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V1 = replace(
    BASE_QWEN3_235B_A22B_CONFIG,
    num_gpus=256,
    tensor_model_parallel_size=2,
    pipeline_model_parallel_size=8,
    virtual_pipeline_model_parallel_size=4,
    expert_model_parallel_size=32,
    global_batch_size=2048,
    moe_a2a_overlap=True,
)

# line 280
QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V2 = replace(
    QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_V1,
    global_batch_size=8192,
)

# line 405
QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_BF16_V1 = replace(
    BASE_QWEN3_30B_A3B_CONFIG,
    num_gpus=8,
    micro_batch_size=4,
    moe_flex_dispatcher_backend="hybridep",
    cuda_graph_impl="transformer_engine",
    cuda_graph_scope=["attn", "moe_router", "moe_preprocess"],
)

# line 418
QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_FP8_MX_V1 = QWEN3_30B_A3B_PRETRAIN_CONFIG_B200_BF16_V1
