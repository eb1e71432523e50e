"""The realistic prediction (MODEL.md section 3). Placeholder until the prediction issue lands:
returns the roofline result unchanged (no `predicted_s` key)."""

from __future__ import annotations

from shardline.roofline import RooflineResult

__all__ = ["with_prediction"]


def with_prediction(result: RooflineResult) -> RooflineResult:
    return result
