"""`shardline serve` as text: the verdict (bound, SLO) first, then the arithmetic."""

from __future__ import annotations

from typing import Any

__all__ = ["render_serve"]


def _ms(x: float | None) -> str:
    return "unbounded" if x is None else f"{x * 1e3:.1f} ms"


def _q(d: dict[str, float | None]) -> str:
    return ", ".join(f"{k} {_ms(v)}" for k, v in d.items())


def _verdict(r: dict[str, Any]) -> list[str]:
    c = r["config"]
    layout = f"tp {c['tp']}" + (f", pp {c['pp']}" if c.get("pp", 1) > 1 else "")
    if c.get("ep", 1) > 1 or c.get("attention_dp", 1) > 1:
        layout += f", ep {c['ep']}, attention-dp {c['attention_dp']}"
    dtypes = r["dtype"]
    if (r.get("weight_dtype"), r.get("kv_dtype")) not in ((None, None), (dtypes, dtypes)):
        dtypes = f"{r['dtype']} compute, {r['weight_dtype']} weights, {r['kv_dtype']} KV"
    load = f"at {c['rate_per_s']:g} req/s"
    if c.get("concurrency") is not None:
        load = f"with {c['concurrency']:,} requests in flight ({c['rate_per_s']:.3g} req/s)"
    head = (
        f"{r['model']} on {c['devices']} x {r['hw']} ({layout}, {r['engine']}, {dtypes}) "
        f"{load}, {c['input_tokens']} in / {c['output_tokens']} out"
    )
    lines = [head]
    if r["saturated"]:
        lines.append(
            f"SATURATED: capacity {r['capacity_requests_per_s']:.3g} req/s < offered "
            f"{c['rate_per_s']:g}; the queue grows without bound (TTFT unbounded)"
        )
    else:
        lines.append(
            f"keeps up: load {c['rate_per_s'] / r['capacity_requests_per_s']:.0%} of capacity "
            f"{r['capacity_requests_per_s']:.3g} req/s"
        )
    if "slo" in r:
        slo = r["slo"]
        word = "MEETS" if r["meets_slo"] else "MISSES"
        lines.append(
            f"{word} the SLO (ttft {_ms(slo['ttft_s'])}, tpot {_ms(slo['tpot_s'])} at "
            f"p{slo['percentile']}); largest rate meeting it: {r['max_rate_meeting_slo']:.3g} req/s"
        )
    return lines


def _busy(r: dict[str, Any]) -> str:
    """The engine's busy time beside the load: with continuous batching a step runs whenever a
    sequence does, so the engine is busy all the time well below capacity; the load (the offered
    rate over the capacity at the batch limit) shows in the running batch instead."""
    load = r["config"]["rate_per_s"] / r["capacity_requests_per_s"]
    return (
        f"engine busy {r['utilization']:.0%} of the time (continuous batching; the load, "
        f"{load:.0%} of capacity, sets the batch)"
    )


def render_serve(r: dict[str, Any]) -> str:
    c = r["config"]
    lines = _verdict(r)
    usd = r["usd_per_million_tokens"]
    joules = r["joules_per_token"]
    lines += [
        "",
        f"throughput     {r['throughput_tokens_per_s']:,.0f} output tokens/s, "
        f"{r['requests_per_s']:.3g} req/s",
        f"TTFT           {_q(r['ttft_s'])}",
        f"TPOT           {_q(r['tpot_s'])}",
        f"queueing       {_q(r['queue_wait_s'])} (M/G/1 prefill queue)",
        f"batch          {r['batch']:.1f} running of limit {r['batch_limit']} "
        f"(KV room for {r['kv_limit_sequences']:.0f}; max batch {c['max_batch']})",
        f"KV occupancy   {r['kv_occupancy']:.0%}   {_busy(r)}",
        f"decode step    {_ms(r['decode_step_s'])} at the running batch; prefill "
        f"{_ms(r['prefill_s'])} of compute per request (t_p); {c['tokens_per_step']:.3g} tokens "
        "per step",
        "cost           "
        + (f"${usd:.3g} per million output tokens" if usd is not None else "$ unknown")
        + ", "
        + (f"{joules:.3g} J per token" if joules is not None else "J unknown"),
    ]
    sim = r.get("simulation")
    if sim:
        lines += [
            "",
            f"simulation ({sim['requests']} requests): {sim['throughput_tokens_per_s']:,.0f} "
            f"tokens/s; TTFT {_q(sim['ttft_s'])}; TPOT {_q(sim['tpot_s'])}",
        ]
        occupancy = sim["timeline"].get("kv_occupancy") or []
        if occupancy:
            lines.append(
                f"KV occupancy over time (one replica): mean "
                f"{sum(occupancy) / len(occupancy):.0%}, peak {max(occupancy):.0%}"
            )
    lines += [f"note: {n}" for n in r["notes"]]
    return "\n".join(lines) + "\n"
