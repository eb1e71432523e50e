# Excerpt of NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/llama/llama3_workload_base_configs.py
# at commit 00919dcf1fe13c0acf65e131f244378f0a6cd2b5: the module docstring and
# the layout presets below (with the presets they build on), verbatim, each under its line
# number in that file. Read by `shardline plan --from FILE --recipe PRESET` without running it.

"""Parallelism presets for Llama3 performance configs.

Config naming convention:
    {MODEL}_{SIZE}_{TASK}_CONFIG_{GPU}_{PRECISION}_{VERSION}

V1: GBS=128 for 70B pretrain
V2: GBS=256 for 70B pretrain

Use --config_variant to select a variant.
Use --list_config_variants to see available variants interactively.
"""

from dataclasses import replace

from utils.utils import WorkloadBaseConfig


# line 32
BASE_LLAMA3_8B_CONFIG = WorkloadBaseConfig(
    num_gpus=8,
    global_batch_size=128,
)

# line 38
BASE_LLAMA3_70B_CONFIG = WorkloadBaseConfig(
    num_gpus=64,
    global_batch_size=128,
)

# line 190
LLAMA3_70B_PRETRAIN_CONFIG_H100_FP8_CS_V1 = replace(
    BASE_LLAMA3_70B_CONFIG,
    tensor_model_parallel_size=4,
    pipeline_model_parallel_size=8,
    virtual_pipeline_model_parallel_size=5,
)

# line 446
LLAMA3_8B_PRETRAIN_CONFIG_B200_FP8_CS_V1 = replace(
    BASE_LLAMA3_8B_CONFIG,
    micro_batch_size=2,
    cuda_graph_impl="local",
    cuda_graph_scope="full_iteration",
)

# line 468
LLAMA3_8B_PRETRAIN_CONFIG_H100_FP8_CS_V1 = replace(
    BASE_LLAMA3_8B_CONFIG,
    context_parallel_size=1,
    recompute_num_layers=5,
)
