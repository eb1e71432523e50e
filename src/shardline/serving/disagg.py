"""Disaggregated serving: a prefill pool and a decode pool of tp-device replicas, the KV cache of
each prompt sent from one to the other.

- prefill replica: M/G/1 with service t_p (prefills run alone), rate lam_p = rate / R_p;
- KV transfer: kv_bytes(I) / (tp x the chip's scale-up egress bandwidth) (each device sends its
  shard; scale-up link assumed, one pool per node pair);
- decode replica: the colocated model with no prefill in its steps (rho_p = 0), rate / R_d.
TTFT = W_p + t_p + t_kv; capacity = min(R_p / E[t_p], R_d x decode capacity).
"""

from __future__ import annotations

from dataclasses import replace

from shardline.basics.values import Scalar
from shardline.serving.analytic import (
    INF,
    Analysis,
    Replica,
    Z,
    colocated,
    pk_wait_s,
    queue_wait_quantile_s,
)
from shardline.serving.config import ServeConfig
from shardline.serving.steptimes import StepTimes

__all__ = ["analyze_disagg", "kv_transfer_s"]


def kv_transfer_s(st: StepTimes, tokens: Scalar, egress_bytes_per_s: float) -> Scalar:
    """Seconds to move the KV cache of `tokens` tokens from a prefill to a decode replica:
    kv_bytes_per_token x tokens / (tp x egress_bytes_per_s), each device sending its shard."""
    return st.kv_bytes_per_token * tokens / (st.tp * egress_bytes_per_s)


def analyze_disagg(st: StepTimes, cfg: ServeConfig, kv_fraction: float) -> Analysis:
    """The steady state of R_p = P / tp prefill and R_d = D / tp decode replicas: each prefill
    replica an M/G/1 queue at rate / R_p with service t_p (mean wait W by Pollaczek-Khinchine,
    quantiles w_q by its exponential tail); TTFT_q = w_q + t_p(I_q) + t_kv(I_q); each decode
    replica the colocated model at rate / R_d with no prefill in its steps (rho_p = 0);
    capacity min(R_p / E[t_p], R_d x decode capacity); utilization the replicas' mean."""
    assert cfg.disagg is not None
    p_devices, d_devices = cfg.disagg
    rp, rd = p_devices // cfg.tp, d_devices // cfg.tp
    rep = Replica(st, cfg, kv_fraction)
    lam_p, lam_d = cfg.rate_per_s / rp, cfg.rate_per_s / rd
    cap_p = rp / rep.tp1 if rep.tp1 > 0 else INF
    decode_rep = Replica(st, cfg, kv_fraction)
    decode_rep.tp1 = decode_rep.tp2 = 0.0  # no prefill in a decode replica's steps
    cap_d = float(decode_rep.capacity(0.0)) * rd
    dec = colocated(decode_rep, lam_d, cap_d / rd, rd)
    t_kv = float(cfg.input_tokens.expect(lambda x: kv_transfer_s(st, x, st.egress_bytes_per_s)))
    wait, rho = pk_wait_s(lam_p, rep.tp1, rep.tp2)
    ttft, waits = {}, {}
    for q in Z:
        w = INF if wait == INF else queue_wait_quantile_s(wait, rho, q / 100)
        x = cfg.input_tokens.quantile(q / 100)
        waits[q] = w
        ttft[q] = (
            w
            + float(st.prefill_s(x)) * (1 - cfg.prefix_hit)
            + float(kv_transfer_s(st, x, st.egress_bytes_per_s))
        )
    cap = min(cap_p, cap_d)
    saturated = cfg.rate_per_s >= cap
    if saturated:
        ttft = dict.fromkeys(Z, INF)
    served = min(cfg.rate_per_s, cap)
    note = f"disaggregated: {rp} prefill and {rd} decode replicas of tp {cfg.tp}"
    return replace(
        dec,
        saturated=saturated,
        capacity_requests_per_s=cap,
        requests_per_s=served,
        throughput_tokens_per_s=served * rep.mean_out,
        input_tokens_per_s=served * rep.mean_in,
        utilization=min(1.0, (dec.utilization * rd + min(1.0, rho) * rp) / (rp + rd)),
        ttft_s=ttft,
        ttft_mean_s=wait + rep.tp1 + t_kv if not saturated else INF,
        queue_wait_s=waits,
        prefill_s=rep.tp1,
        kv_transfer_s=t_kv,
        notes=[*dec.notes, note],
    )
