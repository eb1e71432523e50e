"""Running a search's chunks: in this process, over local worker processes, or on a Dask cluster.

`map_chunks(fn, chunks)` returns `[fn(c) for c in chunks]` in the order of `chunks`, whichever
executor runs them, so a search gives the same answer on one core, on N processes and on a
cluster. `fn` must be a module-level function and the chunks picklable for the process and Dask
executors. `progress(done, total)` is called as chunks finish (the CLI prints it on stderr).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Sequence
from typing import Any

from shardline.errors import InputError

__all__ = ["EXECUTORS", "map_chunks", "check_executor", "check_cluster", "connect"]

EXECUTORS = ("local", "dask")
MAX_WORKERS = 1024
CONNECT_TIMEOUT_S = 5  # how long to wait for the Dask scheduler before giving up
# A scheduler that accepts the connection but never answers Dask's handshake: distributed waits
# for its reply without a deadline, so the whole connect (TCP and handshake) gets this one.
ANSWER_TIMEOUT_S = 2 * CONNECT_TIMEOUT_S
WORKERS_TIMEOUT_S = 30  # how long to wait for the cluster to have a worker at all
# How long a Dask search waits with no chunk finishing (a worker that died or cannot run the
# chunks, e.g. one without shardline installed): a chunk of the searches takes seconds.
CHUNK_TIMEOUT_S = 600
POLL_S = 2.0  # how often a Dask search looks at its cluster while no chunk finishes

Progress = Callable[[int, int], None]


def check_executor(workers: int, executor: str, scheduler: str | None) -> None:
    if isinstance(workers, bool) or not isinstance(workers, int) or not 1 <= workers <= MAX_WORKERS:
        raise InputError(f"workers must be an integer from 1 to {MAX_WORKERS}, got {workers!r}")
    if executor not in EXECUTORS:
        raise InputError(f"executor must be one of {', '.join(EXECUTORS)}, got {executor!r}")
    if executor == "dask" and not scheduler:
        raise InputError("--executor dask needs --scheduler ADDRESS (e.g. tcp://10.0.0.1:8786)")
    if executor == "dask":
        _distributed()  # before any work: a missing dependency fails at once
    if executor == "local" and scheduler:
        raise InputError("--scheduler applies to --executor dask")


def map_chunks(
    fn: Callable[[Any], object],
    chunks: Sequence[object],
    *,
    workers: int = 1,
    executor: str = "local",
    scheduler: object = None,
    progress: Progress | None = None,
) -> list[Any]:
    """`[fn(c) for c in chunks]`, run here (workers 1), on `workers` local processes, or on the
    Dask cluster at `scheduler` (an address, or a distributed.Client)."""
    check_executor(workers, executor, scheduler if isinstance(scheduler, str | None) else "x")
    total = len(chunks)
    if executor == "dask":
        return _dask(fn, chunks, scheduler, progress)
    if workers == 1 or total <= 1:
        out = []
        for i, chunk in enumerate(chunks):
            out.append(fn(chunk))
            if progress is not None:
                progress(i + 1, total)
        return out
    from concurrent.futures import ProcessPoolExecutor, as_completed

    results: list[object] = [None] * total
    with ProcessPoolExecutor(max_workers=min(workers, total)) as pool:
        futures = {pool.submit(fn, chunk): i for i, chunk in enumerate(chunks)}
        for done, future in enumerate(as_completed(futures), start=1):
            results[futures[future]] = future.result()
            if progress is not None:
                progress(done, total)
    return results


def ready(_: object) -> bool:
    """A chunk that does nothing: a worker runs it only if it can import shardline."""
    return True


def check_cluster(scheduler: object) -> None:
    """Before any work: the Dask cluster at `scheduler` has a worker that can run shardline's
    chunks (one no-op chunk through `map_chunks`, with its deadlines and messages), so that a
    search whose bounds leave nothing to send still says the cluster cannot work."""
    map_chunks(ready, [None], executor="dask", scheduler=scheduler)


def _distributed() -> Any:
    """The `distributed` package (Dask's cluster client), or an InputError saying how to get it."""
    try:
        import distributed
    except ImportError:
        raise InputError(
            "--executor dask needs the optional dependency: pip install 'shardline[dask]'"
        ) from None
    return distributed


def connect(scheduler: str) -> Any:
    """A `distributed.Client` of the scheduler at `scheduler`, or one InputError within
    ANSWER_TIMEOUT_S (a search checks its scheduler this way before it starts)."""
    distributed = _distributed()
    _check_address(scheduler)
    box: dict[str, Any] = {}

    def start() -> None:
        try:
            box["client"] = distributed.Client(scheduler, timeout=CONNECT_TIMEOUT_S)
        except BaseException as exc:  # handed to the caller's thread below
            box["error"] = exc

    # distributed reads the scheduler's handshake without a deadline: the connect runs in a
    # thread of its own, and a silent peer leaves it there (a daemon: it ends with the process)
    import threading

    thread = threading.Thread(target=start, name="shardline-dask-connect", daemon=True)
    thread.start()
    thread.join(ANSWER_TIMEOUT_S)
    if thread.is_alive():
        raise InputError(
            f"cannot reach the Dask scheduler at {scheduler}: it accepted the connection but did "
            f"not answer Dask's handshake within {ANSWER_TIMEOUT_S:g} s"
        )
    if "client" in box:
        return box["client"]
    try:
        raise box["error"]
    except (OSError, ValueError, TypeError) as exc:  # ValueError: an address without a port
        raise InputError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from None
    except MemoryError:  # something else listens there: its first bytes read as a huge length
        raise InputError(
            f"cannot reach the Dask scheduler at {scheduler}: what answers there does not speak "
            "Dask's protocol"
        ) from None


def _check_address(scheduler: object) -> None:
    """A TCP or TLS address without a port is refused before any connect, on the caller's
    thread (distributed's own parse, which the connect thread would raise later: under load that
    thread can outlive the handshake deadline first and the error would name the wrong cause)."""
    if not isinstance(scheduler, str):
        return
    from distributed.comm.addressing import parse_address, parse_host_port

    try:
        scheme, location = parse_address(scheduler)
        if scheme in ("tcp", "tls"):
            parse_host_port(location)
    except (ValueError, TypeError) as exc:
        raise InputError(f"cannot reach the Dask scheduler at {scheduler}: {exc}") from None


def _dask(
    fn: Callable[[object], object],
    chunks: Sequence[object],
    scheduler: Any,
    progress: Progress | None,
) -> list[object]:
    """The chunks as Dask futures on an existing cluster; results in the chunks' order."""
    distributed = _distributed()
    own = not isinstance(scheduler, distributed.Client)
    client = connect(scheduler) if own else scheduler
    where = f"the Dask cluster at {client.scheduler.address}"
    try:
        try:
            client.wait_for_workers(1, timeout=WORKERS_TIMEOUT_S)
        except (TimeoutError, OSError):
            raise InputError(
                f"{where} has no worker: none joined within {WORKERS_TIMEOUT_S:g} s"
            ) from None
        futures = client.map(fn, list(chunks), pure=False)
        index = {f.key: i for i, f in enumerate(futures)}
        results: list[object] = [None] * len(futures)
        pending, done, last = set(futures), 0, time.monotonic()
        while pending:
            try:
                finished, pending = distributed.wait(
                    pending, timeout=POLL_S, return_when="FIRST_COMPLETED"
                )
            except TimeoutError:
                finished = set()
            for future in finished:
                results[index[future.key]] = _result(future, where)
                done += 1
                if progress is not None:
                    progress(done, len(futures))
            if finished:
                last = time.monotonic()
                continue
            if not client.scheduler_info().get("workers"):
                raise InputError(
                    f"{where} lost its workers ({done} of {len(futures)} chunks done): did they "
                    "die? (a worker needs shardline installed)"
                )
            if time.monotonic() - last > CHUNK_TIMEOUT_S:
                raise InputError(
                    f"{where}: no chunk of the search finished within {CHUNK_TIMEOUT_S:g} s "
                    f"({done} of {len(futures)} done); are its workers alive, with shardline "
                    "installed?"
                )
        return results
    finally:
        if own:
            _close(client)


def _result(future: Any, where: str) -> Any:
    """One chunk's result; a worker that cannot run it (no shardline there, or killed) becomes
    one InputError naming the cluster."""
    try:
        return future.result()
    except (ImportError, AttributeError) as exc:  # the chunk's function is not there
        raise InputError(
            f"{where}: a worker cannot run the search ({type(exc).__name__}: {exc}); install "
            "shardline on every worker"
        ) from None
    except Exception as exc:
        if type(exc).__name__ in ("KilledWorker", "CancelledError", "FutureCancelledError"):
            raise InputError(f"{where}: a worker died running the search ({exc})") from None
        raise


def _close(client: Any) -> None:
    """Close the client within CONNECT_TIMEOUT_S (a scheduler gone silent does not hold us)."""
    with contextlib.suppress(TimeoutError, OSError):
        client.close(timeout=CONNECT_TIMEOUT_S)
