"""Start-up time of `shardline matmul ...` against a bare `python -c pass`, side by side.

Target (issue 2): the CLI answers in well under half a second.
Run: python benchmarks/bench_startup.py
"""

from __future__ import annotations

import statistics
import subprocess
import sys
import time

COMMANDS = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "python -c 'import numpy'": [sys.executable, "-c", "import numpy"],
    "shardline matmul 8192 8192 8192": [
        sys.executable,
        "-m",
        "shardline.cli.main",
        "matmul",
        "8192",
        "8192",
        "8192",
        "--hw",
        "h100-sxm",
    ],
    "shardline matmul ... --json": [
        sys.executable,
        "-m",
        "shardline.cli.main",
        "matmul",
        "8192",
        "8192",
        "8192",
        "--json",
    ],
}


def median_wall_s(argv: list[str], repeats: int = 7) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    base = None
    for label, argv in COMMANDS.items():
        t = median_wall_s(argv)
        base = base or t
        print(f"{label:<36} {t * 1e3:7.1f} ms   {t / base:5.2f}x python -c pass")


if __name__ == "__main__":
    main()
