"""Time `shardline.plan` over growing device counts, side by side in one run.

    python benchmarks/bench_plan.py

For each D: the number of plans considered, the wall time of the whole search (best of 3), the time
per plan, and the ratio to D = 8. The search must stay interactive (well under a second at
D = 2048) for the CLI and for notebook sweeps.
"""

from __future__ import annotations

import time
from pathlib import Path

from shardline.io.workload_toml import load_workload
from shardline.planning.api import plan

ROOT = Path(__file__).resolve().parent.parent


def best_of(runs: int, fn: object) -> tuple[float, object]:
    best, result = float("inf"), None
    for _ in range(runs):
        start = time.perf_counter()
        result = fn()  # type: ignore[operator]
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    workloads = {
        "transformer training (32 blocks, batch 256 x 4096)": (
            load_workload(ROOT / "examples" / "transformer_block.toml", batch=256),
            "h100-sxm",
        ),
        "seed 003 stack, forward (72 layers)": (
            load_workload(ROOT / "examples" / "seed003_stack.toml"),
            "a100-40gb",
        ),
    }
    for label, (workload, chip) in workloads.items():
        print(label)
        print(f"  {'devices':>7}  {'plans':>5}  {'search':>9}  {'per plan':>9}  {'vs D=8':>7}")
        base = None
        for devices in (8, 64, 512, 2048):
            seconds, result = best_of(
                3, lambda d=devices, w=workload, c=chip: plan(w, c, d, require_fit=False)
            )
            count = len(result.plans)  # type: ignore[attr-defined]
            base = base or seconds
            print(
                f"  {devices:>7}  {count:>5}  {seconds * 1e3:>7.1f}ms  "
                f"{seconds / count * 1e3:>7.2f}ms  {seconds / base:>6.2f}x"
            )


if __name__ == "__main__":
    main()
