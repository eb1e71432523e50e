"""The max batch size and max tokens that `trtllm-bench throughput` picks when its command line
gives neither (trtllm_bench.toml, each figure with its place in TensorRT-LLM's code): for a
checkpoint of a tuned quantization (NVFP4, FP8, FP8 block scales, none) its estimate of how many
requests of the dataset's average length fit the KV cache, rounded up; BuildConfig's 2,048 and
8,192 otherwise (gpt-oss's MXFP4).

tensorrt_llm/bench/tuning/heuristics.py calc_engine_setting, in GiB:
    per_token   = layers x (kv_lora_rank + qk_rope_head_dim) x kv bytes          (MLA: one latent)
                = 2 x layers x max(tp, kv_heads) x head_size x kv bytes          (otherwise)
    engine      = the checkpoint's bytes
    available   = GPUs x device memory - engine,  or with attention DP each rank's
                  pp x device memory - engine / tp
    requests    = f x available / (per_token x (ISL + OSL))   (f: kv_cache_free_gpu_mem_fraction)
finetune_setting: raw_bs = min(requests, 4096) / pp; raw_token = min(raw_bs (1 + ISL / OSL),
32768); each rounded up on its tiers; then, with chunked prefill off (trtllm-bench's default),
max_num_tokens = max(max_num_tokens, max ISL + max_batch_size) (general.py get_settings).

The engine takes max_batch_size per executor, so with attention data parallelism every rank runs
up to that many (TensorRT-LLM's DeepSeek-R1 blog: '--max_batch_size: Max batch size in each
rank'; heuristics.py: 'each TP rank independently manages its own KV cache and batch'); the
caller scales it."""

from __future__ import annotations

import math
import tomllib
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from typing import TYPE_CHECKING, Any

from shardline.errors import InputError

if TYPE_CHECKING:
    from shardline.workload.modelspec import ModelSpec

__all__ = ["BenchSettings", "bench_settings", "checkpoint_bytes", "finetune"]

GIB = 2**30


@cache
def _data() -> dict[str, Any]:
    text = files("shardline.serving").joinpath("trtllm_bench.toml").read_text(encoding="utf-8")
    return tomllib.loads(text)


@dataclass(frozen=True)
class BenchSettings:
    """What trtllm-bench runs with: `max_batch` (per executor), `max_num_tokens`, whether the
    quantization was tuned (else BuildConfig's defaults), and its estimate `kv_requests` of the
    requests the KV cache holds (0 where not tuned)."""

    max_batch: int
    max_num_tokens: int
    tuned: bool
    kv_requests: float = 0.0


def _round_up(x: float, tiers: list[list[float]]) -> int:
    """x rounded up to the step of the first tier whose bound x is below."""
    step = next(int(s) for below, s in tiers if x < below)
    return step * math.ceil(x / step)


def finetune(requests: float, isl: float, osl: float, pp: int = 1) -> tuple[int, int]:
    """tuning.py finetune_setting with optimistic tuning: (max_batch_size, max_num_tokens)."""
    f = _data()["finetune"]
    raw_bs = min(requests, f["max_requests_cap"]) / pp
    raw_token = min(raw_bs * (1 + isl / osl), f["max_tokens_cap"])
    max_bs = _round_up(raw_bs, f["batch_tiers"])
    if raw_bs < f["batch_tiers"][0][0]:
        max_bs = max(int(f["min_batch"]), max_bs)
    max_token = _round_up(raw_token, f["token_tiers"])
    if raw_token < f["token_tiers"][0][0]:
        max_token = max(int(f["min_tokens"]), max_token)
    return max_bs, max_token


def _per_token_bytes(spec: ModelSpec, tp: int, kv_bytes: float) -> float:
    """heuristics.py's KV bytes a token (all layers, the whole TP group): an MLA cache's latent
    and rotary key once a layer; else K and V of max(tp, KV heads) heads of head_size."""
    from shardline.workload.attention.mla import mla_cache_width

    if spec.mla is not None:
        return spec.layers * mla_cache_width(spec.mla) * kv_bytes
    return 2 * spec.layers * max(tp, spec.kv_heads) * spec.head_dim * kv_bytes


def checkpoint_bytes(spec: ModelSpec, quant: str) -> float:
    """The checkpoint's size (heuristics.py's engine size): the decoder blocks' weights at
    `quant`'s stored bytes per weight (trtllm_bench.toml) and the embedding and LM head in bf16."""
    from shardline.workload.modelspec import params_total

    embed = spec.vocab * spec.d_model * (1 if spec.tied_embeddings else 2)
    per_weight = _data()["checkpoint_bytes_per_weight"]
    return (params_total(spec) - embed) * float(per_weight.get(quant, 2.0)) + 2.0 * embed


def _kv_bytes(kv_quant: str | None) -> float:
    return float(_data()["bytes_per_elem"].get(kv_quant or "NO_QUANT", 2.0))


def bench_settings(
    spec: ModelSpec,
    quant: str,
    kv_quant: str | None,
    layout: tuple[int, int, bool],
    device_bytes: float,
    lengths: tuple[float, float],
    kv_fraction: float | None = None,
) -> BenchSettings:
    """trtllm-bench's max batch size (per executor) and max num tokens for `spec` stored as
    `quant` (a TensorRT-LLM QuantAlgo name: NVFP4, FP8, FP8_BLOCK_SCALES, NO_QUANT,
    W4A8_MXFP4_MXFP8, ...) with its KV cache as `kv_quant` (FP8, or None: 2 bytes), on `layout` =
    (tp, pp, attention DP on) of GPUs of `device_bytes` each, for a dataset of `lengths` = (ISL,
    OSL) tokens (module docstring)."""
    data = _data()
    tp, pp, attention_dp = layout
    isl, osl = lengths
    if min(tp, pp) < 1 or min(isl, osl) <= 0 or device_bytes <= 0:
        raise InputError("trtllm-bench settings need tp, pp >= 1, positive lengths and memory")
    f = data["kv_free_gpu_mem_fraction"] if kv_fraction is None else kv_fraction
    if quant not in data["tuned_quants"]:
        batch, tokens = int(data["default_max_batch_size"]), int(data["default_max_num_tokens"])
        return BenchSettings(batch, _unchunked(tokens, isl, batch), tuned=False)
    per_token = _per_token_bytes(spec, tp, _kv_bytes(kv_quant)) / GIB
    engine = checkpoint_bytes(spec, quant) / GIB
    if attention_dp:
        available = pp * device_bytes / GIB - engine / tp
    else:
        available = tp * pp * device_bytes / GIB - engine
    requests = f * available / (per_token * (isl + osl))
    if requests < 1:
        raise InputError(f"trtllm-bench: the KV cache of {spec.name} holds no request here")
    batch, tokens = finetune(requests, isl, osl, pp)
    return BenchSettings(batch, _unchunked(tokens, isl, batch), tuned=True, kv_requests=requests)


def _unchunked(tokens: int, isl: float, batch: int) -> int:
    """max_num_tokens without chunked prefill (trtllm-bench's default): at least the longest
    prompt plus one token of each of the batch (general.py get_settings)."""
    if _data()["chunked_prefill"]:
        return tokens
    return max(tokens, int(math.ceil(isl)) + batch)
