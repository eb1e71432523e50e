"""`shardline stack` on issue 31's huge but legal workload: 200,000 [[layer]] tables of one
4096^3 matmul (a 16 MB file), text and --json, each in a fresh process.

Target (issue 31): seconds. Measured on a 2-core machine shared with other jobs (CPU seconds are
the steadier number): about 2.7 s of CPU and 250 MB for the text, the same for --json (its
125 MB of text written in pieces); before, 59 s and 0.7 GB (text) and 83 s and 1.5 GB (--json)
with the limit lifted.
Run: python benchmarks/bench_layers.py [--layers N]
"""

from __future__ import annotations

import argparse
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def write_workload(path: Path, layers: int) -> None:
    head = 'name = "many"\n[dims]\nM = 4096\nN = 4096\nK = 4096\n'
    layer = '[[layer]]\nname = "l{}"\neinsum = "x[M,N] * w[N,K] -> y[M,K]"\nweights = ["w"]\n'
    path.write_text(head + "".join(layer.format(i) for i in range(layers)))


def run(argv: list[str]) -> tuple[float, float, float]:
    """(wall s, CPU s, peak RSS MB) of one `python -m shardline ...` run."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "shardline", *argv],
        check=True,
        stdout=subprocess.DEVNULL,
        env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"},
    )
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return wall, cpu, after.ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=200_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "layers.toml"
        write_workload(path, args.layers)
        size_mb = path.stat().st_size / 1e6
        for extra in ([], ["--json"]):
            wall, cpu, rss = run(["stack", str(path), "--hw", "h100-sxm", *extra])
            label = " ".join(["stack", f"{args.layers:,} layers ({size_mb:.0f} MB)", *extra])
            print(f"{label:<44} {wall:6.2f} s wall  {cpu:6.2f} s CPU  {rss:6.0f} MB peak")


if __name__ == "__main__":
    main()
