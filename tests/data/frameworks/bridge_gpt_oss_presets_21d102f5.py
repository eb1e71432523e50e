# Excerpt of NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/gpt_oss/gpt_oss_workload_base_configs.py
# at commit 21d102f5ecbaa9307bb7eb0a9b0850cdf2f4bbd6: the module docstring and
# the layout presets below (with the presets they build on), verbatim, each under its line
# number in that file. Read by `shardline plan --from FILE --recipe PRESET` without running it.

"""Parallelism presets for GPT performance configs.

Config naming convention:
    {MODEL}_{SIZE}_{TASK}_CONFIG_{GPU}_{PRECISION}_{VERSION}

V1: GBS=512
V2: GBS=1280

Use --config_variant to select a variant.
Use --list_config_variants to see available variants interactively.
"""

from dataclasses import replace

from utils.utils import WorkloadBaseConfig


# line 32
BASE_GPT_OSS_120B_CONFIG = WorkloadBaseConfig(
    num_gpus=64,
    expert_model_parallel_size=8,
    expert_tensor_parallel_size=1,
    global_batch_size=512,
    micro_batch_size=1,
)

# line 79
GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V1 = replace(
    BASE_GPT_OSS_120B_CONFIG,
    pipeline_model_parallel_size=4,
    recompute_modules=["layernorm", "moe_act"],
)

# line 124
GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V2 = replace(
    GPT_OSS_120B_PRETRAIN_CONFIG_H100_BF16_V1,
    global_batch_size=1280,
)
