"""trtllm-bench's own max batch size and max num tokens (serving/trtllm_bench.py), each case
worked by hand from tensorrt_llm/bench/tuning/heuristics.py (calc_engine_setting,
finetune_setting) and bench/benchmark/utils/general.py (get_settings)."""

from __future__ import annotations

import pytest

from shardline.errors import InputError
from shardline.hardware import resolve_chip
from shardline.models import load_model
from shardline.serving.trtllm_bench import bench_settings, checkpoint_bytes, finetune

B200_BYTES = 180e9  # the B200 chip file's capacity


@pytest.mark.parametrize(
    ("requests", "expected"),
    [
        # raw_bs 50 < 256: max(64, 32 x ceil(50 / 32) = 64); raw_token 100: max(2048, 256) = 2048
        (50.0, (64, 2048)),
        # 300 in [256, 1024): 128 x ceil(300 / 128) = 384; raw_token 600 -> 2048
        (300.0, (384, 2048)),
        # 1500 >= 1024: 256 x ceil(1500 / 256) = 1536; raw_token 3000 < 4096: 256 x 12 = 3072
        (1500.0, (1536, 3072)),
        # min(5000, 4096) = 4096 -> 4096; raw_token 8192 >= 8192: 1024 x 8 = 8192
        (5000.0, (4096, 8192)),
    ],
)
def test_finetune_rounds_up_on_its_tiers(requests: float, expected: tuple[int, int]) -> None:
    assert finetune(requests, 1000, 1000) == expected


def test_finetune_token_tier_between_4096_and_8192() -> None:
    # ISL 3000 / OSL 1000: raw_token = 1500 x 4 = 6000, in [4096, 8192): 512 x ceil(6000 / 512)
    assert finetune(1500.0, 3000, 1000) == (1536, 512 * 12)


def test_an_untuned_quantization_gets_the_build_defaults_and_room_for_its_prompt() -> None:
    """gpt-oss's W4A8_MXFP4_MXFP8 is not in TUNED_QUANTS: BuildConfig's 2,048 and 8,192; with
    chunked prefill off max_num_tokens is at least the prompt plus the batch (8,192 + 2,048)."""
    spec = load_model("gpt-oss-20b")
    short = bench_settings(spec, "W4A8_MXFP4_MXFP8", "FP8", (1, 1, False), B200_BYTES, (1000, 1000))
    assert (short.max_batch, short.max_num_tokens, short.tuned) == (2048, 8192, False)
    long = bench_settings(spec, "W4A8_MXFP4_MXFP8", "FP8", (1, 1, False), B200_BYTES, (8192, 1024))
    assert long.max_num_tokens == 8192 + 2048


def test_nvfp4_checkpoint_on_one_gpu() -> None:
    """Qwen3-30B-A3B NVFP4 on one B200, 1000/1000, fp8 KV. Embedding and LM head 2 x 151,936 x
    2,048 = 622,329,856 weights in bf16; the other 30,532,122,624 - 622,329,856 =
    29,909,792,768 at 0.5625 bytes: checkpoint 16,824,258,432 + 1,244,659,712 = 18,068,918,144
    bytes. KV a token 2 x 48 layers x max(1, 4) heads x 128 x 1 byte = 49,152 bytes. Requests
    0.9 x (180e9 - 18,068,918,144) / (49,152 x 2,000) = 1,482.52 -> 256 x ceil(5.79) = 1,536;
    tokens 2,965 -> 256 x 12 = 3,072 (>= 1,000 + 1,536)."""
    spec = load_model("qwen3-30b-a3b")
    assert checkpoint_bytes(spec, "NVFP4") == pytest.approx(18_068_918_144, rel=1e-12)
    s = bench_settings(spec, "NVFP4", "FP8", (1, 1, False), B200_BYTES, (1000, 1000))
    assert s.kv_requests == pytest.approx(0.9 * (180e9 - 18_068_918_144) / (49_152 * 2000))
    assert (s.max_batch, s.max_num_tokens, s.tuned) == (1536, 3072, True)


def test_mla_with_attention_dp_sizes_each_rank_by_its_latent() -> None:
    """DeepSeek-V3 NVFP4 as DEP4 on B200s, 1000/1000: a token holds 61 layers x (512 + 64) x 1
    byte = 35,136 bytes; the checkpoint (669,173,061,120 block weights x 0.5625 + 2 x
    1,853,358,080) = 380,116,563,040 bytes, a quarter a rank. Requests 0.9 x (180e9 -
    95,029,140,760) / (35,136 x 2,000) = 1,088.25 -> 256 x 5 = 1,280; tokens 2,176.5 -> 256 x 9
    = 2,304 (>= 1,000 + 1,280)."""
    spec = load_model("deepseek-v3")
    assert checkpoint_bytes(spec, "NVFP4") == pytest.approx(380_116_563_040, rel=1e-12)
    s = bench_settings(spec, "NVFP4", "FP8", (4, 1, True), B200_BYTES, (1000, 1000))
    assert s.kv_requests == pytest.approx(0.9 * (180e9 - 380_116_563_040 / 4) / (35_136 * 2000))
    assert (s.max_batch, s.max_num_tokens) == (1280, 2304)


def test_kv_heads_below_tp_count_as_tp() -> None:
    """Each GPU of the TP group holds at least one KV head: Qwen3-235B (4 KV heads) on eight
    GPUs counts 2 x 94 x 8 x 128 bytes a token, twice what four GPUs count."""
    spec = load_model("qwen3-235b-a22b")
    h100 = float(resolve_chip("h100-sxm").capacity_bytes)
    eight = bench_settings(spec, "FP8", "FP8", (8, 1, True), h100, (1000, 1000))
    ckpt = checkpoint_bytes(spec, "FP8")
    assert eight.kv_requests == pytest.approx(0.9 * (h100 - ckpt / 8) / (2 * 94 * 8 * 128 * 2000))


def test_no_room_is_an_input_error() -> None:
    spec = load_model("deepseek-v3")
    with pytest.raises(InputError):
        bench_settings(spec, "FP8_BLOCK_SCALES", "FP8", (1, 1, False), 80e9, (1000, 1000))
