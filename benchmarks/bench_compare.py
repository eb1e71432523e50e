"""Time `shardline compare` for D = 8, 64, 512 and 4096 devices.

Side by side, in one run: the vectorized `compare` (every 1D and 2D strategy), `compare_strategies`
(the same plus the 2D-versus-1D sweep over powers of two up to 4096), and the same strategies
priced one by one with the general named-axis planner (`shard_einsum`), which `compare` must
agree with. Run: `python benchmarks/bench_compare.py [--hw tpu-v5e] [--repeat 5]`.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

from shardline.hardware import load_chip
from shardline.sharding.algebra import shard_einsum
from shardline.sharding.compare import compare, compare_strategies

DEVICES = (8, 64, 512, 4096)


def best_of(repeat: int, fn: Callable[[], Any]) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - start)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hw", default="tpu-v5e")
    parser.add_argument("--shape", default="16384,16384,16384", help="M,K,N")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    m, k, n = (int(x) for x in args.shape.split(","))
    chip = load_chip(args.hw)
    compare(m, k, n, 8, chip)  # warm the catalog and numpy
    dims = {"M": m, "K": k, "N": n}
    print(f"compare {m}x{k}x{n} on {chip.name}, best of {args.repeat}")
    print(
        f"{'D':>5} {'strategies':>10} {'compare':>10} {'+ sweep':>10} {'planner':>10} "
        f"{'planner/compare':>16}  best"
    )
    for d in DEVICES:
        t_vec, strategies = best_of(args.repeat, lambda d=d: compare(m, k, n, d, chip))
        t_sweep, _ = best_of(args.repeat, lambda d=d: compare_strategies(m, k, n, d, chip))
        t_plan, _ = best_of(
            1, lambda s=strategies: [shard_einsum(x.spec, dims, x.mesh, chip) for x in s]
        )
        best = strategies[0]
        print(
            f"{d:>5} {len(strategies):>10} {t_vec * 1e3:>8.2f}ms {t_sweep * 1e3:>8.2f}ms "
            f"{t_plan * 1e3:>8.1f}ms {t_plan / t_vec:>15.0f}x  {best.spec} "
            f"{','.join(f'{a}={s}' for a, s in best.mesh.items())} ({best.bound})"
        )


if __name__ == "__main__":
    main()
