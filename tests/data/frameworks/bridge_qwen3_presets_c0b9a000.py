# Excerpt of NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/qwen/qwen3_workload_base_configs.py
# at commit c0b9a00031b79b731ccefb56d0aba9629b4dd01b: the module docstring and
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
    moe_flex_dispatcher_backend="deepep",
)

# line 38
BASE_QWEN3_30B_A3B_CONFIG = WorkloadBaseConfig(
    expert_model_parallel_size=8,
    expert_tensor_parallel_size=1,
    global_batch_size=512,
    moe_flex_dispatcher_backend="deepep",
)

# line 97
QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_CS_V1 = replace(
    BASE_QWEN3_235B_A22B_CONFIG,
    num_gpus=64,
    pipeline_model_parallel_size=8,
    expert_model_parallel_size=8,
    global_batch_size=1024,
    moe_flex_dispatcher_backend="hybridep",
    cuda_graph_impl="transformer_engine",
    cuda_graph_scope=["attn", "moe_router", "moe_preprocess"],
)

# line 219
QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_CS_V2 = replace(
    QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_CS_V1,
    num_gpus=256,
    expert_model_parallel_size=32,
    global_batch_size=8192,
)

# line 227
QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_MX_V2 = QWEN3_235B_A22B_PRETRAIN_CONFIG_GB200_FP8_CS_V2

# line 358
QWEN3_30B_A3B_PRETRAIN_CONFIG_GB200_FP8_MX_V1 = replace(
    BASE_QWEN3_30B_A3B_CONFIG,
    num_gpus=8,
    micro_batch_size=4,
    moe_flex_dispatcher_backend="hybridep",
    cuda_graph_impl="transformer_engine",
    cuda_graph_scope=["moe_router", "moe_preprocess"],
)
