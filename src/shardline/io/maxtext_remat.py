"""MaxText's remat policies as a recompute policy and the tensors offloaded to host memory
(shardline.basics.recompute, Execution.offload): `remat_policy: custom` names each tensor
'remat', 'device' or 'offload' (AI-Hypercomputer/maxtext configs/base.yml; decoders.py
get_remat_policy builds jax.checkpoint_policies.save_and_offload_only_these_names(...,
offload_dst="pinned_host") from maxtext_utils.get_save_and_offload_names)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from shardline.errors import InputError

__all__ = ["REMAT_TENSORS", "OFFLOADED_PRESETS", "remat_execution"]

# remat_policy 'custom': each named tensor 'remat', 'device' or 'offload' (base.yml; MaxText's
# get_save_and_offload_names), as the block's tensors (shardline.basics.recompute.TENSORS)
REMAT_TENSORS: dict[str, tuple[str, ...]] = {
    "decoder_layer_input": ("x",),
    "query_proj": ("q",),
    "key_proj": ("k",),
    "value_proj": ("v",),
    "kv_proj": ("k", "v"),
    "qkv_proj": ("q", "k", "v"),
    "context": ("context",),
    "out_proj": ("attn_proj",),
    "mlpwi": ("up",),
    "mlpwi_0": ("gate",),
    "mlpwi_1": ("up",),
    "mlpwo": ("ffn_out",),
}
# the presets that offload a fixed list and save nothing else on the device (maxtext_utils.py
# get_save_and_offload_names, AI-Hypercomputer/maxtext commit e591f30c)
OFFLOADED_PRESETS: dict[str, tuple[str, ...]] = {
    "qkv_proj_offloaded": ("q", "k", "v"),
    "minimal_offloaded": ("q", "k", "v", "attn_proj", "gate", "up", "ffn_out"),
}


def remat_execution(get: Callable[..., Any], remat: str, origin: str) -> dict[str, Any]:
    """The recompute policy of `remat_policy` (`get(key, default)` reads the config's other
    keys), and the tensors it offloads to host memory:
    'custom' keeps the tensors set to 'device' or 'offload' and offloads the latter (base.yml
    defaults: 'remat', the layer input 'device'); the offloaded presets keep and offload their
    fixed lists (OFFLOADED_PRESETS); any other name is the policy of that name."""
    if remat in OFFLOADED_PRESETS:
        names = OFFLOADED_PRESETS[remat]
        return {"recompute": "keep:" + ",".join(names), "offload": names}
    if remat != "custom":
        return {"recompute": remat}
    kept: list[str] = []
    offload: list[str] = []
    for key, tensors in REMAT_TENSORS.items():
        where = get(key, "device" if key == "decoder_layer_input" else "remat")
        if where not in ("remat", "device", "offload"):
            raise InputError(f"{origin}: {key} must be remat, device or offload, got {where!r}")
        if where != "remat":
            kept += [t for t in tensors if t != "x"]
        if where == "offload":
            offload += list(tensors)
    recompute = "keep:" + ",".join(kept) if kept else "full"
    return {"recompute": recompute, "offload": tuple(offload)}
