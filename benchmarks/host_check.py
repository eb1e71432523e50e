"""Is an eager MoE row of benchmarks/data/e2e_runs.toml host-bound? (shardline.realistic.host)

For every MoE training run whose recipe runs eagerly (`cuda_graphs` false), plan it as
bench_e2e.py does, take the slowest stage's realistic GPU time per block (forward: compute and
exposed communication; backward likewise) and set it beside the CPU's dispatch time of one block
(Megatron-Core's op counts, the host CPU's sourced per-op cost; no partial CUDA graph scope taken
off, so the host time is an upper bound for rows whose recipes capture attention or the router).
`ratio` = GPU / CPU time of one block: above 1 the GPU sets the pace and the host adds nothing;
`after` applies the host-bound stage time (shardline.realistic.host.stage_host_s, one
synchronisation per MoE block forward) to the step, in proportion to the stage time.

    PYTHONPATH=src python benchmarks/host_check.py
"""

from __future__ import annotations

import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))


def check(run: dict) -> dict[str, float | str]:
    """One row's GPU and CPU time per block and its step with the host-bound stage time."""
    from bench_e2e import load_run_workload, plan_run

    from shardline.hardware import resolve_chip
    from shardline.realistic import host

    workload = load_run_workload(run, [])
    chosen = plan_run(run, workload, [])
    data = tomllib.loads((ROOT / run["workload"]).read_text(encoding="utf-8"))
    experts = data["transformer"]["moe"]["experts"]
    blocks_total = data["transformer"]["layers"]
    local = experts // run.get("ep", 1)
    stage = max(chosen.stages, key=lambda s: s["predicted_s"])
    blocks = blocks_total / run.get("pp", 1)
    gpu_f = (stage["fwd_compute_s"] + stage["fwd_comm_s"]) / blocks
    gpu_b = (stage["bwd_compute_s"] + stage["bwd_comm_s"]) / blocks
    chip = resolve_chip(run["hw"])
    cpu = host.host_cpu(chip.name)
    launch_s = chip.achievable.launch_overhead_s or 0.0
    qk_norm = bool(data["transformer"].get("qk_norm", False))  # the workload says so
    fp8 = data["transformer"].get("dtype") == "fp8"
    fwd = host.attention_fwd(qk_norm) + host.moe_mlp_fwd(local, fp8=fp8)
    cpu_f = host.host_s(fwd, cpu, launch_s)
    cpu_b = host.host_s(host.backward(fwd), cpu, launch_s)
    gpu_stage = blocks * (gpu_f + gpu_b)
    with_host = host.stage_host_s((gpu_f, gpu_b), (cpu_f, cpu_b), blocks, cpu, synced=True)
    after = chosen.predicted_s * (1 + (with_host - gpu_stage) / stage["predicted_s"])
    return {
        "name": run["name"],
        "host": cpu.name,
        "gpu_fwd_ms": gpu_f * 1e3,
        "gpu_bwd_ms": gpu_b * 1e3,
        "cpu_fwd_ms": cpu_f * 1e3,
        "cpu_bwd_ms": cpu_b * 1e3,
        "ratio_fwd": gpu_f / cpu_f,
        "measured_s": run["measured_s"],
        "before_s": chosen.predicted_s,
        "after_s": after,
    }


def main() -> int:
    runs = tomllib.loads((ROOT / "benchmarks/data/e2e_runs.toml").read_text(encoding="utf-8"))
    eager = [r for r in runs["run"] if r["set"] == "moe" and not r.get("cuda_graphs", False)]
    print(
        f"{'run':44} {'host':8} {'GPU f/b ms':>13} {'CPU f/b ms':>13} {'GPU/CPU':>7} "
        f"{'before':>7} {'after':>7}"
    )
    for run in eager:
        r = check(run)
        m = float(r["measured_s"])
        print(
            f"{r['name']:44} {str(r['host']).split()[0]:8} "
            f"{r['gpu_fwd_ms']:6.2f}/{r['gpu_bwd_ms']:6.2f} "
            f"{r['cpu_fwd_ms']:6.2f}/{r['cpu_bwd_ms']:6.2f} {r['ratio_fwd']:7.2f} "
            f"{float(r['before_s']) / m - 1:+7.1%} {float(r['after_s']) / m - 1:+7.1%}"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
