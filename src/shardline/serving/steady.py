"""The analytic steady state of any serving setup: colocated replicas (analytic.py) or
disaggregated prefill and decode pools (disagg.py)."""

from __future__ import annotations

from shardline.serving.analytic import Analysis, analyze_colocated
from shardline.serving.config import ServeConfig
from shardline.serving.disagg import analyze_disagg
from shardline.serving.steptimes import StepTimes

__all__ = ["analyze"]


def analyze(st: StepTimes, cfg: ServeConfig, kv_fraction: float) -> Analysis:
    """The steady state of `cfg` with one replica's step times `st` and the engine's memory
    fraction `kv_fraction`."""
    if cfg.disagg is not None:
        return analyze_disagg(st, cfg, kv_fraction)
    return analyze_colocated(st, cfg, kv_fraction)
