# Excerpt of NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/qwen/qwen3_workload_base_configs.py
# at commit 63b08b397a3ee37edf439c7be0b24d7439d8cf23: the module docstring and
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


# line 37
BASE_QWEN3_30B_A3B_CONFIG = WorkloadBaseConfig(
    expert_model_parallel_size=8,
    expert_tensor_parallel_size=1,
    global_batch_size=512,
)

# line 470
QWEN3_30B_A3B_PRETRAIN_CONFIG_H100_FP8_CS_V1 = replace(
    BASE_QWEN3_30B_A3B_CONFIG,
    num_gpus=16,
    global_batch_size=1024,
    expert_model_parallel_size=16,
    moe_a2a_overlap=False,
    moe_flex_dispatcher_backend="hybridep",
)
