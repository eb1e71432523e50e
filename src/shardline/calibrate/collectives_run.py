"""Measuring collectives with torch.distributed: the sweep every rank runs, and the local runner.

The sweep (`measure_rank`, in every rank after init_process_group):

- `ping` / `p2p`: a 4-byte ping-pong and a large send/recv between ranks 0 and 1 (one node);
- for each whole-array size V of `sizes(quick)` (8 B .. 1 GiB, quick 8 B .. 4 MiB, steps of 4x)
  and each kind of `OPS`: all-gather (`all_gather_into_tensor`), reduce-scatter
  (`reduce_scatter_tensor`), all-reduce and all-to-all (`all_to_all_single`) over every rank.
  fp32 elements; V is rounded up so that each rank's part is whole (the row keeps the bytes run);
- several nodes (LOCAL_WORLD_SIZE < WORLD_SIZE; ranks numbered node by node, as torchrun does):
  `ping_node` / `p2p_node` between rank 0 and rank LOCAL_WORLD_SIZE (the first rank of the next
  node), and `all_reduce_node`, the smallest all-reduce inside each node at once.

Each row's `seconds` is the median of `repeats` timed samples (each sample the mean of enough
back-to-back calls to outlast a scheduler tick), after one warm-up call. The sweep stops growing
V when the next size would end past the time budget (`budget_s`: quick 8 s, full 600 s; the
projection is the last size's time times its growth over the size before, at most the size
ratio) or would not fit in memory (the buffers of every local rank within half of the available
memory); every rank agrees through a tiny all-reduce, so none waits for a call the others skip.
A quick sweep out of time still measures its top size (4 MiB), skipping the sizes in between.

Local runs (`run_local`) start `processes` workers (`python -m shardline.calibrate.collectives_run`)
with RANK, WORLD_SIZE, and LOCAL_RANK / LOCAL_WORLD_SIZE of `processes_per_node` per fake node, so
the multi-node path runs on one machine (gloo over loopback).
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import subprocess
import sys
import time
import warnings
from collections.abc import Callable
from typing import Any

__all__ = [
    "OPS",
    "sizes",
    "measure",
    "measure_rank",
    "run_local",
    "budget_s",
    "topology_env",
    "under_torchrun",
    "next_size_s",
]

OPS = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
_BUDGET_S = {True: 8.0, False: 600.0}


def sizes(quick: bool) -> list[int]:
    """Whole-array bytes V: 8 B .. 1 GiB in steps of 4x, and 1 GiB (quick: 8 B .. 4 MiB)."""
    top = 22 if quick else 30
    steps = [2**e for e in range(3, top, 2)]
    return [*steps, 2**top]


def budget_s(quick: bool) -> float:
    """Seconds the size sweep may take (SHARDLINE_COLLECTIVE_BUDGET_S overrides)."""
    return float(os.environ.get("SHARDLINE_COLLECTIVE_BUDGET_S", _BUDGET_S[quick]))


def topology_env() -> tuple[int, int]:
    """(ranks per node, this rank's node) from LOCAL_WORLD_SIZE (torchrun's; default: one node)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    local = int(os.environ.get("LOCAL_WORLD_SIZE", world))
    rank = int(os.environ.get("RANK", "0"))
    return local, rank // max(local, 1)


def _calls(nbytes: int, quick: bool = False) -> int:
    """Calls per timed sample: enough that a sample of a small message is not one scheduler tick
    (the same count on every rank, so no rank waits for a call the others never make); at most
    8 in a quick run, 32 otherwise."""
    return int(min(8 if quick else 32, max(1, 2**18 // max(nbytes, 1))))


def _timed(fn: Any, sync: Any, repeats: int, dist: Any, calls: int = 1) -> float:
    """The median of `repeats` samples, each the mean of `calls` back-to-back calls."""
    fn()
    sync()
    samples = []
    for _ in range(repeats):
        dist.barrier()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        samples.append((time.perf_counter() - start) / calls)
    return float(statistics.median(samples))


class _Rank:
    """What one rank needs to measure: torch, its device, the sync and the repeats."""

    def __init__(self, repeats: int, quick: bool) -> None:
        import torch
        import torch.distributed as dist

        self.torch, self.dist, self.repeats, self.quick = torch, dist, repeats, quick
        self.rank, self.world = dist.get_rank(), dist.get_world_size()
        self.cuda = dist.get_backend() == "nccl"
        local = int(os.environ.get("LOCAL_RANK", self.rank))
        gpus = max(1, torch.cuda.device_count()) if self.cuda else 1
        self.device = torch.device("cuda", local % gpus) if self.cuda else torch.device("cpu")
        self.sync = torch.cuda.synchronize if self.cuda else (lambda: None)

    def time(self, fn: Callable[[], object], nbytes: int) -> float:
        return _timed(fn, self.sync, self.repeats, self.dist, _calls(nbytes, self.quick))

    def p2p(self, nbytes: int, peer: int) -> float:
        """A send/recv ping-pong of `nbytes` between rank 0 and `peer` (round trip seconds)."""
        buf = self.torch.zeros(max(1, nbytes // 4), device=self.device)
        dist = self.dist

        def exchange() -> None:
            if self.rank == 0:
                dist.send(buf, peer)
                dist.recv(buf, peer)
            elif self.rank == peer:
                dist.recv(buf, 0)
                dist.send(buf, 0)

        return self.time(exchange, nbytes)

    def agree(self, values: list[float], op: str) -> list[float]:
        """Every rank's values combined (max or min), so all ranks take the same decision."""
        t = self.torch.tensor(values, dtype=self.torch.float64, device=self.device)
        reduce_op = self.dist.ReduceOp.MAX if op == "max" else self.dist.ReduceOp.MIN
        self.dist.all_reduce(t, op=reduce_op)
        return [float(x) for x in t.tolist()]

    def memory_cap_bytes(self, local_ranks: int) -> float:
        """The largest V whose buffers (2V + 3V/X per rank: the whole array and its part, the
        all-reduce's array, the all-to-all's input and output) fit in half the free memory."""
        if self.cuda:
            free = float(self.torch.cuda.mem_get_info(self.device)[0])
            ranks_sharing = 1
        else:
            free, ranks_sharing = _available_bytes(), local_ranks
        per_v = (2 + 3 / self.world) * ranks_sharing
        return self.agree([0.5 * free / per_v], "min")[0]


def _available_bytes() -> float:
    try:
        with open("/proc/meminfo", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024
    except OSError:
        pass
    return 8e9  # no /proc: assume a small machine


def _ops(r: _Rank, v: int) -> dict[str, tuple[int, Callable[[], object]]]:
    """Each kind's (bytes run, call) for a V-byte array: fp32, parts whole on every rank."""
    torch, dist, x = r.torch, r.dist, r.world
    n = max(x, -(-v // 4 // x) * x)  # elements of the whole array, a multiple of X
    full = torch.ones(n, device=r.device)
    part = torch.ones(n // x, device=r.device)
    red = torch.ones(max(1, v // 4), device=r.device)
    m = max(x * x, -(-v // 4 // (x * x)) * x * x)  # all-to-all: each rank sends X chunks
    a2a_in = torch.ones(m // x, device=r.device)
    a2a_out = torch.empty(m // x, device=r.device)
    return {
        "all_gather": (n * 4, lambda: dist.all_gather_into_tensor(full, part)),
        "reduce_scatter": (n * 4, lambda: dist.reduce_scatter_tensor(part, full)),
        "all_reduce": (red.numel() * 4, lambda: dist.all_reduce(red)),
        "all_to_all": (m * 4, lambda: dist.all_to_all_single(a2a_out, a2a_in)),
    }


def _sweep(r: _Rank, quick: bool, local_ranks: int) -> list[dict[str, object]]:
    """Every kind at every size, within the time budget and the memory; a quick sweep that runs
    out of time skips to its top size (4 MiB), so the bandwidth end is always measured."""
    rows: list[dict[str, object]] = []
    cap = r.memory_cap_bytes(local_ranks)
    budget, start = budget_s(quick), time.perf_counter()
    todo = [v for v in sizes(quick) if v <= cap]
    before = 0.0
    for i, v in enumerate(todo):
        began = time.perf_counter()
        _measure_size(r, v, rows)
        now = time.perf_counter()
        elapsed, spent = r.agree([now - start, now - began], "max")
        if i + 1 < len(todo) and elapsed + next_size_s(spent, before, todo[i + 1] / v) > budget:
            if quick and i + 2 < len(todo):
                _measure_size(r, todo[-1], rows)
            break
        before = spent
    return rows


def _measure_size(r: _Rank, v: int, rows: list[dict[str, object]]) -> None:
    for op, (nbytes, fn) in _ops(r, v).items():
        rows.append({"op": op, "bytes": nbytes, "seconds": r.time(fn, nbytes)})
        if r.rank == 0:
            print(json.dumps({"progress": f"{op} {nbytes:,} B"}), flush=True)


def next_size_s(spent: float, before: float, ratio: float) -> float:
    """The next size's projected seconds: this size's times the growth seen from the size before
    (latency-bound sizes take about as long as each other), at most the size ratio."""
    growth = spent / before if before > 0 else 1.0
    return spent * min(max(growth, 1.0), ratio)


def _between_nodes(r: _Rank, local: int) -> list[dict[str, object]]:
    """Rank 0 to the first rank of the next node, and the smallest all-reduce inside each node."""
    rows = [
        {"op": "ping_node", "bytes": 4, "seconds": r.p2p(4, local)},
        {"op": "p2p_node", "bytes": 2**22, "seconds": r.p2p(2**22, local)},
    ]
    groups = [
        r.dist.new_group(list(range(start, start + local))) for start in range(0, r.world, local)
    ]
    mine = groups[r.rank // local]
    if local > 1:
        small = r.torch.ones(max(1, sizes(True)[0] // 4), device=r.device)
        seconds = r.time(lambda: r.dist.all_reduce(small, group=mine), small.numel() * 4)
        rows.append({"op": "all_reduce_node", "bytes": small.numel() * 4, "seconds": seconds})
    return rows


def measure_rank(quick: bool, repeats: int) -> list[dict[str, object]]:
    """Run in every rank after init_process_group; returns rows on rank 0 ([] elsewhere)."""
    warnings.filterwarnings("ignore", category=FutureWarning)
    r = _Rank(repeats, quick)
    local, _ = topology_env()
    local = min(max(1, local), r.world)
    rows: list[dict[str, object]] = []
    if local > 1:
        big = 2**22 if quick else 2**26
        rows.append({"op": "ping", "bytes": 4, "seconds": r.p2p(4, 1)})
        rows.append({"op": "p2p", "bytes": big, "seconds": r.p2p(big, 1)})
    if local < r.world:
        rows.extend(_between_nodes(r, local))
    rows.extend(_sweep(r, quick, local))
    for row in rows:
        row["processes"], row["processes_per_node"] = r.world, local
    return rows if r.rank == 0 else []


def _worker() -> int:
    """Entry of one local rank: `python -m shardline.calibrate.collectives_run`."""
    import torch.distributed as dist

    backend = os.environ.get("SHARDLINE_DIST_BACKEND", "gloo")
    dist.init_process_group(backend)
    quick = os.environ.get("SHARDLINE_QUICK") == "1"
    repeats = int(os.environ.get("SHARDLINE_REPEATS", "5"))
    try:
        rows = measure_rank(quick, repeats)
    finally:
        dist.destroy_process_group()
    for row in rows:
        print(json.dumps(row), flush=True)
    return 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _spawn(rank: int, processes: int, per_node: int, port: int, settings: dict[str, str]) -> Any:
    env = dict(
        os.environ,
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        RANK=str(rank),
        WORLD_SIZE=str(processes),
        LOCAL_RANK=str(rank % per_node),
        LOCAL_WORLD_SIZE=str(per_node),
        OMP_NUM_THREADS="1",
        **settings,
    )
    return subprocess.Popen(
        [sys.executable, "-m", "shardline.calibrate.collectives_run"],
        env=env,
        stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_local(
    processes: int,
    backend: str,
    quick: bool,
    repeats: int,
    progress: Callable[[str], None],
    per_node: int | None = None,
) -> list[dict[str, object]]:
    """Start `processes` local ranks (`per_node` of them per fake node) and collect rank 0's rows.
    Raises RuntimeError with the first failing rank's last line."""
    settings = {
        "SHARDLINE_DIST_BACKEND": backend,
        "SHARDLINE_QUICK": "1" if quick else "0",
        "SHARDLINE_REPEATS": str(repeats),
    }
    port = _free_port()
    per = per_node or processes
    procs = [_spawn(rank, processes, per, port, settings) for rank in range(processes)]
    rows: list[dict[str, object]] = []
    first = procs[0]
    assert first.stdout is not None
    for line in first.stdout:
        record = json.loads(line)
        if "progress" in record:
            progress(record["progress"])
        else:
            rows.append(record)
    codes = [p.wait(timeout=900) for p in procs]
    errors = [p.stderr.read() if p.stderr else "" for p in procs]
    if any(codes):
        lines = [e.strip().splitlines()[-1] for e in errors if e.strip()]
        raise RuntimeError(lines[0] if lines else f"exit status {max(codes)}")
    return rows


def under_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ


def measure(
    *,
    processes: int,
    device: str,
    quick: bool,
    repeats: int | None,
    progress: bool | None,
    processes_per_node: int | None = None,
) -> tuple[list[dict[str, object]], str]:
    """The sweep's rows (rank 0) and the backend, run by torchrun's ranks or by local processes;
    `repeats` per size (None: 5 quick, 9 full).

    Under torchrun every rank measures and the ranks other than 0 leave (SystemExit 0) once the
    measurement is over; only rank 0 goes on to fit or compare. Raises RuntimeError, OSError or
    TimeoutExpired when a rank fails."""
    from shardline.calibrate.runner import ProgressBar

    backend = "nccl" if device == "cuda" else "gloo"
    repeats = repeats or (5 if quick else 9)
    bar = ProgressBar(len(sizes(quick)) * len(OPS), f"collectives ({backend})", enabled=progress)
    try:
        if under_torchrun():
            import torch.distributed as dist

            if not dist.is_initialized():
                dist.init_process_group(backend)
            rank = dist.get_rank()
            rows = measure_rank(quick, repeats)
            dist.barrier()
            dist.destroy_process_group()
            if rank != 0:
                raise SystemExit(0)  # only rank 0 fits and writes
        else:
            rows = run_local(processes, backend, quick, repeats, bar.update, processes_per_node)
    finally:
        bar.close()
    return rows, backend


def measured_or_refused(
    unwritten: str, saved: Callable[[], str] | None = None, **how: Any
) -> tuple[list[dict[str, Any]], str]:
    """`measure(**how)` (after checking torch is there), with a failed or an empty measurement
    turned into one InputError that ends with what was not written (`unwritten`, e.g. "no CSV
    was written"); `saved()` runs on a failure first and says where earlier rows were kept."""
    from shardline.calibrate.gpu import require_torch
    from shardline.errors import InputError

    require_torch()
    try:
        rows, backend = measure(**how)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        kept = saved() if saved is not None else ""
        raise InputError(f"collective measurement failed: {exc}; {kept}{unwritten}") from None
    if not rows:
        raise InputError(f"the collective measurement returned no rows; {unwritten}")
    return rows, backend


if __name__ == "__main__":
    raise SystemExit(_worker())
