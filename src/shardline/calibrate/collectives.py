"""`calibrate --collectives`: measure all-gather, reduce-scatter and all-reduce with
torch.distributed and fit the alpha-beta model with a size-dependent bus efficiency
(docs/sharding.md).

Model (switch topology, X processes, V = bytes of the whole array): the "switch" records of the
algorithm table (`shardline.collectives.algorithms.TABLE`), t = hops * alpha + coefficient * V /
W / eff(V), which the sharding model evaluates too:

    all-gather, reduce-scatter: t = alpha     + (X-1)/X * V / W / eff(V)
    all-reduce (RS + AG):       t = 2 * alpha + 2 * (X-1)/X * V / W / eff(V)
    eff(V) = eff_max * V / (V + V_half)

- alpha: half the round trip of a 4-byte send/recv between ranks 0 and 1 (ping-pong), at most 0.9 x
  the fastest measured collective per phase (a collective includes its hops' latency);
- W (the "line rate" of the link): one-way bandwidth of a large send/recv between two ranks;
- eff_max and V_half: least squares on relative error of `t - hops*alpha = coefficient/W *
  (V/eff_max + V_half/eff_max)` over every measured (collective, size): linear in 1/eff_max and
  V_half/eff_max. A fitted eff_max above 1 (the collective beat the point-to-point rate) raises W
  to W*eff_max and sets eff_max = 1.

Written into `interconnect.hop_latency_s`, `interconnect.link_bytes_per_s`,
`achievable.collective_bus_efficiency` and `achievable.collective_half_efficiency_bytes`.

Local runs start `--processes` worker processes (gloo on a CPU, NCCL on GPUs); under `torchrun`
(RANK/WORLD_SIZE set) the ranks that torchrun started measure and rank 0 fits.
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
from pathlib import Path
from typing import Any

import numpy as np

from shardline.calibrate.chipfile import Measured, write_partial_csv
from shardline.collectives.algorithms import TABLE, Algorithm
from shardline.errors import InputError

__all__ = ["calibrate_collectives", "fit_collectives", "model_time", "OPS", "sizes"]

OPS = ("all_gather", "reduce_scatter", "all_reduce")


def _switch(op: str) -> Algorithm:
    """The table's record of `op` directly through a switch (what the processes run on)."""
    return TABLE[(op, "switch")]


def sizes(quick: bool) -> list[int]:
    """Whole-array bytes V: 4 KiB .. 64 MiB in steps of 4x (quick: 4 KiB .. 4 MiB)."""
    top = 22 if quick else 26
    return [2**e for e in range(12, top + 1, 2)]


def model_time(
    op: str,
    v_bytes: Any,
    processes: int,
    alpha_s: float,
    link_bytes_per_s: float,
    eff_max: float,
    half_bytes: float,
) -> Any:
    """Predicted seconds of one collective (the model in the module docstring)."""
    record = _switch(op)
    v = np.asarray(v_bytes, dtype=np.float64)
    eff = eff_max * v / (v + half_bytes)
    coef = record.coefficient(processes)
    return record.hops(processes) * alpha_s + coef * v / link_bytes_per_s / eff


def fit_collectives(rows: list[dict[str, Any]], processes: int) -> dict[str, float]:
    """alpha, W, eff_max and V_half from measured rows (see the module docstring)."""
    by_kind: dict[str, list[dict[str, Any]]] = {}
    for r in rows:
        by_kind.setdefault(r["op"], []).append(r)
    if "ping" not in by_kind or "p2p" not in by_kind:
        raise InputError("the collective measurements lack the point-to-point runs")
    alpha = statistics.median(r["seconds"] for r in by_kind["ping"]) / 2
    # a collective includes at least its hops' latency: on a busy machine a slow ping-pong cannot
    # make alpha exceed (the fastest collective / its phases), kept 10% below it
    floor = min(
        (r["seconds"] / _switch(op).hops(processes) for op in OPS for r in by_kind.get(op, [])),
        default=alpha / 0.9,
    )
    alpha = min(alpha, 0.9 * floor)
    big = max(by_kind["p2p"], key=lambda r: r["bytes"])
    one_way = max(big["seconds"] / 2 - alpha, 1e-12)
    link = big["bytes"] / one_way
    design, target = [], []
    for op in OPS:
        for r in by_kind.get(op, []):
            record = _switch(op)
            scale = record.coefficient(processes) / link
            left = r["seconds"] - record.hops(processes) * alpha
            if left <= 0:
                continue
            design.append([scale * r["bytes"], scale])
            target.append(left)
    if len(design) < 2:
        raise InputError("too few collective measurements above the latency to fit")
    from shardline.calibrate.fit import _least_squares

    inv_eff, half_over_eff = (float(x) for x in _least_squares(design, target))
    if inv_eff > 0 and half_over_eff > 0:
        eff_max = 1.0 / inv_eff
        half = half_over_eff * eff_max
    else:
        # noise hides the size dependence: the efficiency of the largest messages, no V_half
        top = max(r["bytes"] for row_op in OPS for r in by_kind.get(row_op, []))
        ratios = [x[0] / t for x, t in zip(design, target, strict=True) if x[0] / x[1] == top]
        eff_max = float(np.median(ratios)) if ratios else 1.0
        half = 1.0
    if eff_max <= 0:
        raise InputError("the collective measurements do not determine a bus efficiency")
    if eff_max > 1.0:
        link, eff_max = link * eff_max, 1.0
    return {
        "alpha_s": alpha,
        "link_bytes_per_s": link,
        "eff_max": eff_max,
        "half_bytes": half,
        "processes": processes,
    }


# ----------------------------------------------------------------------------------------------
# measuring (runs in each rank)


def _calls(nbytes: int) -> int:
    """Calls per timed sample: enough that a sample of a small message is not one scheduler tick
    (the same count on every rank, so no rank waits for a call the others never make)."""
    return int(min(32, max(1, 2**18 // max(nbytes, 1))))


def _timed(fn: Any, sync: Any, repeats: int, dist: Any, calls: int = 1) -> float:
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


def measure_rank(quick: bool, repeats: int) -> list[dict[str, Any]]:
    """Run in every rank after init_process_group; returns rows on rank 0 ([] elsewhere)."""
    import torch
    import torch.distributed as dist

    warnings.filterwarnings("ignore", category=FutureWarning)
    rank, world = dist.get_rank(), dist.get_world_size()
    cuda = dist.get_backend() == "nccl"
    device = (
        torch.device(
            "cuda", int(os.environ.get("LOCAL_RANK", rank)) % max(1, torch.cuda.device_count())
        )
        if cuda
        else torch.device("cpu")
    )
    sync = torch.cuda.synchronize if cuda else (lambda: None)
    rows: list[dict[str, Any]] = []

    def p2p(nbytes: int) -> float:
        buf = torch.zeros(max(1, nbytes // 4), device=device)

        def exchange() -> None:
            if rank == 0:
                dist.send(buf, 1)
                dist.recv(buf, 1)
            elif rank == 1:
                dist.recv(buf, 0)
                dist.send(buf, 0)

        return _timed(exchange, sync, repeats, dist, _calls(nbytes))

    rows.append({"op": "ping", "bytes": 4, "seconds": p2p(4)})
    big = sizes(quick)[-1]
    rows.append({"op": "p2p", "bytes": big, "seconds": p2p(big)})
    for v in sizes(quick):
        elems = max(world, v // 4 // world * world)
        full = torch.ones(elems, device=device)
        part = torch.ones(elems // world, device=device)
        ops: dict[str, Any] = {
            "all_gather": lambda full=full, part=part: dist.all_gather_into_tensor(full, part),
            "reduce_scatter": lambda full=full, part=part: dist.reduce_scatter_tensor(part, full),
            "all_reduce": lambda full=full: dist.all_reduce(full),
        }
        for op, fn in ops.items():
            rows.append(
                {
                    "op": op,
                    "bytes": elems * 4,
                    "seconds": _timed(fn, sync, repeats, dist, _calls(elems * 4)),
                }
            )
            if rank == 0:
                print(json.dumps({"progress": f"{op} {elems * 4 / 1e6:.3g} MB"}), flush=True)
    return rows if rank == 0 else []


def _worker() -> int:
    """Entry of one local rank: `python -m shardline.calibrate.collectives`."""
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


def _run_local(
    processes: int, backend: str, quick: bool, repeats: int, progress: Any
) -> list[dict[str, Any]]:
    port = _free_port()
    procs = []
    for rank in range(processes):
        env = dict(
            os.environ,
            MASTER_ADDR="127.0.0.1",
            MASTER_PORT=str(port),
            RANK=str(rank),
            WORLD_SIZE=str(processes),
            LOCAL_RANK=str(rank),
            SHARDLINE_DIST_BACKEND=backend,
            SHARDLINE_QUICK="1" if quick else "0",
            SHARDLINE_REPEATS=str(repeats),
            OMP_NUM_THREADS="1",
        )
        procs.append(
            subprocess.Popen(
                [sys.executable, "-m", "shardline.calibrate.collectives"],
                env=env,
                stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
        )
    rows: list[dict[str, Any]] = []
    first = procs[0]
    assert first.stdout is not None
    for line in first.stdout:
        record = json.loads(line)
        if "progress" in record:
            progress(record["progress"])
        else:
            rows.append(record)
    codes = [p.wait(timeout=600) for p in procs]
    errors = [p.stderr.read() if p.stderr else "" for p in procs]
    if any(codes):
        lines = [e.strip().splitlines()[-1] for e in errors if e.strip()]
        raise RuntimeError(lines[0] if lines else f"exit status {max(codes)}")
    return rows


def calibrate_collectives(
    *,
    processes: int,
    device: str,
    quick: bool,
    progress: bool | None,
    partial: Path | None,
    done: list[dict[str, Any]],
    repeats: int | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Measure and fit; returns the chip-file tables and the measured rows."""
    from shardline.calibrate.gpu import require_torch
    from shardline.calibrate.runner import ProgressBar

    require_torch()
    backend = "nccl" if device == "cuda" else "gloo"
    reps = repeats or (5 if quick else 9)
    under_torchrun = "RANK" in os.environ and "WORLD_SIZE" in os.environ
    bar = ProgressBar(len(sizes(quick)) * len(OPS), f"collectives ({backend})", enabled=progress)
    try:
        if under_torchrun:
            import torch.distributed as dist

            if not dist.is_initialized():
                dist.init_process_group(backend)
            processes, rank = dist.get_world_size(), dist.get_rank()
            rows = measure_rank(quick, reps)
            dist.barrier()
            dist.destroy_process_group()
            if rank != 0:
                raise SystemExit(0)  # only rank 0 fits and writes the chip file
        else:
            rows = _run_local(processes, backend, quick, reps, bar.update)
    except (RuntimeError, OSError, subprocess.TimeoutExpired) as exc:
        if partial is not None:
            write_partial_csv(partial, done)
        raise InputError(
            f"collective measurement failed: {exc}; the {len(done)} earlier "
            f"measurements are in {partial}; no chip file was written"
        ) from None
    finally:
        bar.close()
    fitted = _chip_tables(fit_collectives(rows, processes), len(rows), backend, processes, quick)
    return fitted, [{"kind": "collective", **r} for r in rows]


def _chip_tables(
    fit: dict[str, float], runs: int, backend: str, processes: int, quick: bool
) -> dict[str, Any]:
    """The chip-file tables (interconnect, achievable) of a collective fit."""
    where = (
        f"fitted to {runs} torch.distributed {backend} runs over {processes} "
        "processes (shardline calibrate --collectives)"
    )
    return {
        "interconnect": {
            "link": f"torch.distributed {backend}, {processes} processes",
            "topology": "switch",
            "link_bytes_per_s": Measured(
                fit["link_bytes_per_s"],
                f"one-way bandwidth of a {sizes(quick)[-1]:,}-byte send/recv; {where}",
            ),
            "links_per_chip": Measured(1, "one logical link per process"),
            "hop_latency_s": Measured(fit["alpha_s"], f"half a 4-byte ping-pong; {where}"),
            "scale_up_devices": Measured(processes, "processes measured"),
        },
        "achievable": {
            "collective_bus_efficiency": Measured(fit["eff_max"], where),
            "collective_half_efficiency_bytes": Measured(fit["half_bytes"], where),
        },
    }


if __name__ == "__main__":
    raise SystemExit(_worker())
