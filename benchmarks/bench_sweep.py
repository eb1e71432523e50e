"""Sweep benchmark: one million (M, K, N, dtype) configurations through the vectorized API,
against the scalar path called in a Python loop, measured side by side in one run.

Target (issue 2): >= 2 million configurations per second on one core, and >= 100x the loop.
Run: python benchmarks/bench_sweep.py [--configs N]
"""

from __future__ import annotations

import argparse
import os
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")  # one core, as the target says

import numpy as np  # noqa: E402

import shardline  # noqa: E402

DTYPES = np.array(["bf16", "fp8", "int8", "fp32"])


def configs(count: int, seed: int = 0) -> tuple[np.ndarray, ...]:
    rng = np.random.default_rng(seed)
    sizes = 2 ** rng.integers(0, 16, size=(3, count)) * rng.integers(1, 4, size=(3, count))
    return sizes[0], sizes[1], sizes[2], DTYPES[rng.integers(0, len(DTYPES), size=count)]


def best_of(repeats: int, fn) -> float:  # type: ignore[no-untyped-def]
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--configs", type=int, default=1_000_000)
    parser.add_argument("--loop-configs", type=int, default=5_000)
    args = parser.parse_args()
    m, k, n, dtype = configs(args.configs)
    shardline.matmul(m[:10], k[:10], n[:10], hw="h100-sxm", dtype=dtype[:10])  # warm the catalog

    t_vec = best_of(3, lambda: shardline.matmul(m, k, n, hw="h100-sxm", dtype=dtype))
    loop_n = args.loop_configs

    def loop() -> None:
        for i in range(loop_n):
            shardline.matmul(int(m[i]), int(k[i]), int(n[i]), hw="h100-sxm", dtype=str(dtype[i]))

    t_loop = best_of(1, loop)
    vec_rate = args.configs / t_vec
    loop_rate = loop_n / t_loop
    print(
        f"vectorized: {args.configs:,} configurations in {t_vec:.3f} s = {vec_rate:,.0f} configs/s"
    )
    print(f"scalar loop: {loop_n:,} configurations in {t_loop:.3f} s = {loop_rate:,.0f} configs/s")
    print(f"speed-up vectorized / loop: {vec_rate / loop_rate:,.0f}x")
    print(
        f"targets: >= 2,000,000 configs/s -> {'met' if vec_rate >= 2e6 else 'MISSED'}; "
        f">= 100x loop -> {'met' if vec_rate / loop_rate >= 100 else 'MISSED'}"
    )


if __name__ == "__main__":
    main()
