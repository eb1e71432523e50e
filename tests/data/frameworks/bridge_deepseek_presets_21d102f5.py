# Excerpt of NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/deepseek/deepseek_workload_base_configs.py
# at commit 21d102f5ecbaa9307bb7eb0a9b0850cdf2f4bbd6: the module docstring and
# the layout presets below (with the presets they build on), verbatim, each under its line
# number in that file. Read by `shardline plan --from FILE --recipe PRESET` without running it.

"""Workload base presets for DeepSeek-V3 performance configs.

Config naming convention:
    {MODEL}_{SIZE}_{TASK}_CONFIG_{GPU}_{PRECISION}_{VERSION}

V1: GBS=2048 for Blackwell variants, GBS=8192 for H100
V2: GBS=4096 for Blackwell variants, GBS=16384 for H100

Use --config_variant to select a variant.
Use --list_config_variants to see available variants interactively.
"""

from dataclasses import replace

from utils.utils import WorkloadBaseConfig


# line 32
BASE_DEEPSEEK_V3_CONFIG = WorkloadBaseConfig(
    expert_tensor_parallel_size=1,
)

# line 131
DEEPSEEK_V3_PRETRAIN_CONFIG_B200_V1 = replace(
    BASE_DEEPSEEK_V3_CONFIG,
    num_gpus=256,
    pipeline_model_parallel_size=16,
    expert_model_parallel_size=8,
    global_batch_size=2048,
    recompute_modules=["mla_up_proj"],
    moe_flex_dispatcher_backend="hybridep",
    moe_a2a_overlap=False,
)

# line 218
DEEPSEEK_V3_PRETRAIN_CONFIG_B200_V2 = replace(
    DEEPSEEK_V3_PRETRAIN_CONFIG_B200_V1,
    global_batch_size=4096,
)

# line 223
DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_CS_V2 = DEEPSEEK_V3_PRETRAIN_CONFIG_B200_V2

# line 224
DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_MX_V2 = replace(
    DEEPSEEK_V3_PRETRAIN_CONFIG_B200_FP8_CS_V2,
    moe_flex_dispatcher_backend="deepep",
    pipeline_model_parallel_size=8,
    virtual_pipeline_model_parallel_size=2,
    expert_model_parallel_size=32,
    moe_a2a_overlap=True,
    pp_layout="Et*4|(t*4|)*14tmL",
    cuda_graph_impl="transformer_engine",
    cuda_graph_scope=["attn", "moe_router", "moe_preprocess"],
    recompute_modules=["mla_up_proj", "mlp"],
)
