"""The launch line: the engine's own command for a configuration `serve` priced (parallel sizes,
max batch, chunk size, KV memory fraction, dtypes), in each engine's flag names:

- vLLM (`vllm serve`, docs.vllm.ai "Engine Arguments"): --tensor-parallel-size,
  --pipeline-parallel-size, --data-parallel-size with --enable-expert-parallel (DP attention
  and EP experts, "Expert Parallel Deployment"), --max-num-seqs (per data-parallel rank),
  --max-num-batched-tokens, --enable-chunked-prefill / --no-enable-chunked-prefill,
  --gpu-memory-utilization,
  --kv-cache-dtype, --quantization.
- SGLang (`python -m sglang.launch_server`, docs.sglang.ai "Server Arguments"): --tp-size,
  --pp-size, --dp-size with --enable-dp-attention, --ep-size, --max-running-requests,
  --chunked-prefill-size (-1: off), --mem-fraction-static, --kv-cache-dtype, --quantization,
  --cuda-graph-max-bs.
- TensorRT-LLM (`trtllm-serve`, nvidia.github.io/TensorRT-LLM "trtllm-serve"): --backend pytorch,
  --tp_size, --pp_size, --ep_size, --max_batch_size (per attention-DP rank), --max_num_tokens,
  --kv_cache_free_gpu_memory_fraction;
  attention DP, the KV dtype and chunked prefill through --extra_llm_api_options (a YAML of the
  LLM API's fields: enable_attention_dp, kv_cache_config.dtype, enable_chunked_prefill).
"""

from __future__ import annotations

import re
from typing import Any

from shardline.errors import InputError

__all__ = ["launch_command", "EMIT_ENGINES", "model_repo"]

EMIT_ENGINES = ("vllm", "sglang", "trtllm")
_QUANT = {"fp8": "fp8", "int4": "awq", "int8": "w8a8_int8"}  # weights' dtype -> --quantization
_SGLANG_KV = {"fp8": "fp8_e4m3", "bf16": "auto", "fp16": "auto"}


def model_repo(spec: Any) -> str:
    """The Hugging Face repository the model file cites (ORG/NAME), else the zoo name."""
    for text in getattr(spec, "sources", {}).values():
        found = re.search(r"huggingface\.co/([\w.-]+/[\w.-]+)", str(text))
        if found:
            return found.group(1)
    return str(spec.name)


def _fmt(value: float) -> str:
    return f"{value:.3f}".rstrip("0").rstrip(".")


def launch_command(
    name: str, repo: str, cfg: object, dtypes: tuple[str, str, str], kv_fraction: float
) -> str:
    """The launch command of engine `name` for `cfg` (a ServeConfig) with (compute, weights,
    KV) `dtypes` and the engine's KV memory fraction; one command, lines joined with ` \\`."""
    _, weights, kv = dtypes
    if name == "vllm":
        return _join(_vllm(repo, cfg, weights, kv, kv_fraction))
    if name == "sglang":
        return _join(_sglang(repo, cfg, weights, kv, kv_fraction))
    if name == "trtllm":
        return _trtllm(repo, cfg, kv, kv_fraction)
    raise InputError(f"--emit takes one of {', '.join(EMIT_ENGINES)}, got {name!r}")


def per_rank_batch(cfg: Any) -> int:
    """The batch limit each attention-DP rank takes: TensorRT-LLM reads --max_batch_size per
    rank ("Max batch size in each rank", its DeepSeek-R1 throughput blog) and vLLM runs each
    data-parallel rank as its own engine core with its own scheduler (docs.vllm.ai "Data Parallel
    Deployment"), so the replica's limit B is ceil(B / A) on each of A ranks."""
    return -(-cfg.max_batch // cfg.attention_dp)


def _pp(cfg: Any, flag: str) -> list[str]:
    """The engine's pipeline-parallel flag with the replica's stages, when it has more than
    one (each engine's default is 1)."""
    return [f"{flag}{cfg.pp}"] if getattr(cfg, "pp", 1) > 1 else []


def _join(parts: list[str]) -> str:
    return " \\\n    ".join(parts) + "\n"


def _vllm(repo: str, cfg: Any, weights: str, kv: str, f: float) -> list[str]:
    adp = cfg.attention_dp
    parts = [f"vllm serve {repo}", f"--tensor-parallel-size {cfg.tp // adp}"]
    parts += _pp(cfg, "--pipeline-parallel-size ")
    if adp > 1:
        parts.append(f"--data-parallel-size {adp}")
    if cfg.ep > 1 or adp > 1:
        parts.append("--enable-expert-parallel")
    parts.append(f"--max-num-seqs {per_rank_batch(cfg)}")
    if cfg.chunk_tokens:
        parts += ["--enable-chunked-prefill", f"--max-num-batched-tokens {cfg.chunk_tokens}"]
    else:
        parts.append("--no-enable-chunked-prefill")
    parts.append(f"--gpu-memory-utilization {_fmt(f)}")
    if kv == "fp8":
        parts.append("--kv-cache-dtype fp8")
    if weights in _QUANT:
        parts.append(f"--quantization {_QUANT[weights]}")
    return parts


def _sglang(repo: str, cfg: Any, weights: str, kv: str, f: float) -> list[str]:
    parts = [f"python -m sglang.launch_server --model-path {repo}", f"--tp-size {cfg.tp}"]
    parts += _pp(cfg, "--pp-size ")
    if cfg.attention_dp > 1:
        parts += [f"--dp-size {cfg.attention_dp}", "--enable-dp-attention"]
    if cfg.ep > 1:
        parts.append(f"--ep-size {cfg.ep}")
    parts.append(f"--max-running-requests {cfg.max_batch}")
    parts.append(f"--chunked-prefill-size {cfg.chunk_tokens or -1}")
    parts.append(f"--mem-fraction-static {_fmt(f)}")
    if kv in _SGLANG_KV and kv != "bf16":
        parts.append(f"--kv-cache-dtype {_SGLANG_KV[kv]}")
    if weights in _QUANT:
        parts.append(f"--quantization {_QUANT[weights]}")
    return parts


def _trtllm(repo: str, cfg: Any, kv: str, f: float) -> str:
    extra = [f"enable_chunked_prefill: {'true' if cfg.chunk_tokens else 'false'}"]
    if cfg.attention_dp > 1:
        extra.append("enable_attention_dp: true")
    if kv == "fp8":
        extra.append("kv_cache_config:\n  dtype: fp8")
    parts = [
        f"trtllm-serve {repo}",
        "--backend pytorch",
        f"--tp_size {cfg.tp}",
        *_pp(cfg, "--pp_size "),
        f"--ep_size {cfg.ep}",
        f"--max_batch_size {per_rank_batch(cfg)}",
        f"--max_num_tokens {cfg.chunk_tokens or 8192}",
        f"--kv_cache_free_gpu_memory_fraction {_fmt(f)}",
        "--extra_llm_api_options extra_llm_api_options.yaml",
    ]
    yaml = "cat > extra_llm_api_options.yaml <<'EOF'\n" + "\n".join(extra) + "\nEOF\n"
    return yaml + _join(parts)
