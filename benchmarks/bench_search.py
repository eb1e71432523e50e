"""Time the training search (`shardline search --phase training`) on the issue's three cases,
side by side in one run, in CPU seconds of this process on one core (`--workers 1`):

    python benchmarks/bench_search.py [--quick] [--repeat N]

- Llama 3.1 405B on 16,384 H100 (the dense reference, docs/search.md);
- DeepSeek-V3 on 2,048 H800, one device count (`--scales 1`);
- Mixtral 8x7B on 512 H100.

Each row: layouts enumerated, those timed in full, engine probes, CPU seconds and the ratio to
the dense 405B search. `--quick` runs the 405B case alone (a smoke test); `--repeat N` runs each
search N times and reports its least CPU time (a shared machine's noise only ever adds time),
each search in a fresh process so that no run finds another's caches warm.
"""

from __future__ import annotations

import sys
import time
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import get_context
from typing import Any

from shardline.io.workload_toml import workload_from_dict
from shardline.models import load_model
from shardline.models.template import transformer_table
from shardline.planning.train_search import RunOptions, training_search

CASES = (
    ("llama-3.1-405b", "h100-sxm", 16384, 2048, 8192, 1),
    ("deepseek-v3", "h800", 2048, 2048, 8192, 1),
    ("mixtral-8x7b", "h100-sxm", 512, 2048, 8192, 4),
)


def run(model: str, chip: str, devices: int, sequences: int, seq_len: int, scales: int) -> dict:
    spec = load_model(model)
    table = transformer_table(spec, batch=sequences, seq_len=seq_len)
    data = {"name": spec.name, "phase": "training", "transformer": table}
    workload = workload_from_dict(data, origin=f"model {spec.name}")
    cpu = time.process_time()
    out = training_search(workload, [chip], devices, run=RunOptions(scales=scales))
    return {**out["search_counts"], "cpu_s": time.process_time() - cpu}


def _fresh(case: tuple[Any, ...]) -> dict[str, Any]:
    """`run(*case)` in a new process (cold caches, as the CLI runs it)."""
    with ProcessPoolExecutor(1, mp_context=get_context("spawn")) as pool:
        return pool.submit(run, *case).result()


def _repeat() -> int:
    if "--repeat" not in sys.argv:
        return 1
    i = sys.argv.index("--repeat")
    return max(1, int(sys.argv[i + 1]))


def main() -> None:
    cases = CASES[:1] if "--quick" in sys.argv else CASES
    tries = _repeat()
    print(f"{'case':<40} {'layouts':>10} {'timed':>8} {'probes':>7} {'CPU s':>8} {'vs 405B':>8}")
    base = None
    for case in cases:
        model, chip, devices, sequences, seq_len, scales = case
        runs = [_fresh(case) for _ in range(tries)]
        r = min(runs, key=lambda x: x["cpu_s"])
        base = base or r["cpu_s"]
        label = f"{model} on {devices:,} {chip} (scales {scales})"
        print(
            f"{label:<40} {r['layouts']:>10,} {r['timed_in_full']:>8,} {r['engine_probes']:>7,} "
            f"{r['cpu_s']:>8.1f} {r['cpu_s'] / base:>7.2f}x"
        )


if __name__ == "__main__":
    main()
