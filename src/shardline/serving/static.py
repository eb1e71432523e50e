"""Static batching (the engines before in-flight batching, e.g. TensorRT-LLM's GptSession):
a batch of B requests is admitted together, every prompt is prefilled, then the batch decodes
one token per step until its longest output is done; no request joins a running batch.

With B prompts of I tokens and outputs whose longest is O_max:

    T = B t_p(I) + sum_{k=0}^{O_max - 1} t_dec(B, I + k)
    throughput = B E[O] / T   (output tokens per second of one replica)
    TTFT = B t_p(I) (every prompt waits for the whole batch's prefill)
    TPOT = (T - B t_p(I)) / O_max (the mean decode step)

t_p(I) is one prompt's prefill and t_dec(b, c) one decode step of b sequences at cached context
c, the engine's (StepTimes; the sum over contexts by simulate.DecodeLine, exact because the
step is affine in the context at a fixed batch). The longest of B outputs drawn from the length
distribution is its B / (B + 1) quantile (the expected maximum of B uniform draws is
B / (B + 1)); for a fixed length it is that length.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from shardline.errors import InputError
from shardline.serving.config import Lengths
from shardline.serving.simulate import DecodeLine
from shardline.serving.steptimes import StepTimes

__all__ = ["StaticBatch", "static_batch"]


@dataclass(frozen=True)
class StaticBatch:
    """One static batch on one replica; times in seconds."""

    batch: int
    longest_output_tokens: float
    prefill_s: float
    decode_s: float
    throughput_tokens_per_s: float  # one replica's

    @property
    def total_s(self) -> float:
        return self.prefill_s + self.decode_s

    @property
    def ttft_s(self) -> float:
        return self.prefill_s

    @property
    def tpot_s(self) -> float:
        return self.decode_s / self.longest_output_tokens


def static_batch(
    st: StepTimes, batch: int, input_tokens: Lengths, output_tokens: Lengths
) -> StaticBatch:
    """The static batch of `batch` requests on the replica whose step times are `st`."""
    if batch < 1:
        raise InputError(f"a static batch needs at least one request, got {batch}")
    longest = float(np.rint(output_tokens.quantile(batch / (batch + 1))))
    prefill = batch * input_tokens.expect(st.prefill_s)
    contexts = input_tokens.mean + np.arange(int(longest), dtype=float)
    line = DecodeLine(st, int(np.floor(contexts[0])), int(np.ceil(contexts[-1])))
    decode = float(sum(line.step_s(batch, float(c)) for c in contexts))
    useful = batch * output_tokens.mean
    return StaticBatch(batch, longest, prefill, decode, useful / (prefill + decode))
