# Excerpt of NVIDIA-NeMo/Megatron-Bridge scripts/performance/configs/qwen/qwen3_workload_base_configs.py
# at commit 5776a6d90b4dd8692902ab2eb581369484e19283 (the 25.11 performance summary's): the module
# docstring and the layout preset below (with the preset it builds on), verbatim, each under its
# line number in that file. Its presets are named {MODEL}_{SIZE}_{TASK}_CONFIG_{GPU}_{PRECISION}
# with the suffix _BASE_CONFIG (later commits: a version, _V1, _V2). Read by
# `shardline plan --from FILE --recipe PRESET` without running it.

"""Parallelism presets for Qwen3 performance configs."""

from dataclasses import replace

from utils.utils import WorkloadBaseConfig


# line 22
BASE_QWEN3_235B_A22B_CONFIG = WorkloadBaseConfig(
    expert_tensor_parallel_size=1,
)

# line 135
QWEN3_235B_A22B_PRETRAIN_CONFIG_H100_FP8_CS_BASE_CONFIG = replace(
    BASE_QWEN3_235B_A22B_CONFIG,
    num_gpus=256,
    tensor_model_parallel_size=2,
    pipeline_model_parallel_size=8,
    virtual_pipeline_model_parallel_size=4,
    expert_model_parallel_size=32,
    global_batch_size=2048,
    moe_a2a_overlap=True,
)
