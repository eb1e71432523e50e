"""A profile of a real run, read into its GPU (or TPU) kernels and grouped into the plan's
categories, for `shardline validate --trace FILE` (docs/framework-configs.md, "Profiles").

Formats read:
- a PyTorch profiler / Kineto trace (Chrome trace JSON, `prof.export_chrome_trace`): the events of
  category `kernel`, `gpu_memcpy` and `gpu_memset` (`ts` and `dur` in microseconds, `pid` the
  device); a GEMM's shape comes from the CPU op that launched it (the same `External id`, its
  `Input Dims`, recorded with record_shapes=True); `ProfilerStep#N` annotations count the steps;
- an Nsight Systems export: `nsys stats --report cuda_gpu_trace --format csv` (one row per kernel:
  Start (ns), Duration (ns), Name, Device), `nsys stats --report cuda_gpu_kern_sum --format csv`
  (one row per kernel name: Total Time (ns), Instances, Name; no timestamps, so no idle time), or
  the SQLite file `nsys export --type sqlite` writes (CUPTI_ACTIVITY_KIND_KERNEL, _MEMCPY,
  _MEMSET, names in StringIds);
- an XLA/JAX profile summary: the TensorBoard profile plugin's framework op stats as CSV
  (Host/device, Type, Operation, #Occurrences, Total self-time (us)): the device rows.

Categories (`category_of`, by the kernel's name, first match wins): collective (NCCL kernels, XLA
all-reduce / all-gather / reduce-scatter / all-to-all / collective-permute), attention (flash,
fmha, sdpa, splash, attention), gemm (gemm, gemv, cutlass, cublas, xmma, nvjet, wgmma, matmul,
XLA dot and convolution), optimizer (multi_tensor_apply, adam), memcpy (copies and fills), and
other_ops (everything else: the norms, activations, residuals, softmax and casts between the
matmuls). Idle is the time in the traced window when a device runs no kernel.

Pure apart from reading the file; nothing printed.
"""

from __future__ import annotations

import csv
import io
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from shardline.basics.values import Scalar
from shardline.errors import InputError

__all__ = [
    "CATEGORIES",
    "Kernel",
    "Trace",
    "category_of",
    "read_trace",
    "group",
    "Group",
    "idle_s",
]

CATEGORIES = ("gemm", "attention", "other_ops", "collective", "optimizer", "memcpy", "idle")

_RULES: tuple[tuple[str, re.Pattern[str]], ...] = (
    (
        "collective",
        re.compile(
            r"nccl|all[-_]?reduce|all[-_]?gather|reduce[-_]?scatter|all[-_]?to[-_]?all|"
            r"collective[-_]permute",
            re.I,
        ),
    ),
    ("attention", re.compile(r"flash|fmha|sdpa|splash|attention|_attn", re.I)),
    (
        "gemm",
        re.compile(
            r"gemm|gemv|cutlass|cublas|xmma|nvjet|wgmma|matmul|^dot|[._]dot\b|convolution", re.I
        ),
    ),
    ("optimizer", re.compile(r"multi_tensor_apply|adam|optimizer", re.I)),
    ("memcpy", re.compile(r"^memcpy|^memset|memcpy|memset", re.I)),
)


def category_of(name: str, kind: str = "kernel") -> str:
    """The category of one kernel by its name (`kind` "memcpy" for copies and fills)."""
    if kind == "memcpy":
        return "memcpy"
    for category, pattern in _RULES:
        if pattern.search(name):
            return category
    return "other_ops"


@dataclass(frozen=True)
class Kernel:
    """One kernel launch (or, from a summary, `count` launches of one name)."""

    name: str
    dur_s: float
    start_s: float | None = None  # None: the format has no timestamps
    device: str = "0"
    kind: str = "kernel"  # "kernel" or "memcpy"
    shape: str = ""  # a GEMM's operand shapes where the trace links them
    count: int = 1

    @property
    def category(self) -> str:
        return category_of(self.name, self.kind)


@dataclass(frozen=True)
class Trace:
    format: str
    kernels: tuple[Kernel, ...]
    steps: int | None = None  # ProfilerStep annotations seen (None: the format has none)
    notes: tuple[str, ...] = ()

    @property
    def devices(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(k.device for k in self.kernels))

    @property
    def span_s(self) -> float | None:
        """First kernel start to last kernel end, the longest over the devices (None without
        timestamps)."""
        spans = []
        for device in self.devices:
            starts = [k.start_s for k in self.kernels if k.device == device]
            ends = [
                k.start_s + k.dur_s
                for k in self.kernels
                if k.device == device and k.start_s is not None
            ]
            known = [t for t in starts if t is not None]
            if len(known) != len(starts):
                return None
            spans.append(max(ends) - min(known))
        return max(spans) if spans else None


@dataclass
class Group:
    category: str
    measured_s: float = 0.0
    kernels: int = 0
    by_name: dict[tuple[str, str], list[float]] = field(default_factory=dict)


def idle_s(trace: Trace) -> float | None:
    """Per device, its span less the union of its kernels' intervals; summed over devices."""
    total = 0.0
    for device in trace.devices:
        ks = sorted(
            (k.start_s, k.start_s + k.dur_s)
            for k in trace.kernels
            if k.device == device and k.start_s is not None
        )
        if len(ks) != sum(1 for k in trace.kernels if k.device == device):
            return None
        busy, end = 0.0, None
        first = ks[0][0]
        for a, b in ks:
            if end is None or a > end:
                busy += b - a
                end = b
            elif b > end:
                busy += b - end
                end = b
        total += (end or first) - first - busy
    return total


def group(trace: Trace) -> dict[str, Group]:
    """Every category with the kernels' summed durations and launch counts."""
    out = {c: Group(c) for c in CATEGORIES}
    for k in trace.kernels:
        g = out[k.category]
        g.measured_s += k.dur_s
        g.kernels += k.count
        entry = g.by_name.setdefault((k.name, k.shape), [0.0, 0])
        entry[0] += k.dur_s
        entry[1] += k.count
    idle = idle_s(trace)
    out["idle"].measured_s = idle if idle is not None else float("nan")
    return out


# --- reading ---------------------------------------------------------------------------------


def read_trace(path: str) -> Trace:
    """Read a profile in any of the formats above (by content, not by name)."""
    p = Path(path)
    try:
        head = p.open("rb").read(16)
    except OSError as exc:
        raise InputError(f"{path}: {exc.strerror or exc}") from None
    if head.startswith(b"SQLite format 3"):
        return _read_sqlite(path)
    text = p.read_text(encoding="utf-8", errors="replace")
    stripped = text.lstrip()
    if stripped.startswith(("{", "[")):
        return _read_kineto(text, path)
    return _read_csv(text, path)


def _read_kineto(text: str, path: str) -> Trace:
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    events = data.get("traceEvents", []) if isinstance(data, dict) else data
    if not isinstance(events, list):
        raise InputError(f"{path}: a Chrome trace has a traceEvents list")
    shapes: dict[object, str] = {}
    steps = 0
    for e in events:
        if not isinstance(e, dict):
            continue
        args = _args(e)
        if str(e.get("name", "")).startswith("ProfilerStep#"):
            steps += 1
        dims_given = args.get("Input Dims")
        if e.get("cat") == "cpu_op" and isinstance(dims_given, list) and "External id" in args:
            dims = [d for d in dims_given if isinstance(d, list) and d]
            shapes[args["External id"]] = " x ".join(
                "[" + ",".join(str(x) for x in d) + "]" for d in dims
            )
    kernels = []
    for e in events:
        if not isinstance(e, dict) or e.get("ph") != "X":
            continue
        cat = str(e.get("cat", "")).lower()
        if cat not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        args = _args(e)
        kind = "kernel" if cat == "kernel" else "memcpy"
        name = str(e.get("name", ""))
        shape = shapes.get(args.get("External id"), "") if category_of(name) == "gemm" else ""
        kernels.append(
            Kernel(
                name=name,
                dur_s=_us(e.get("dur", 0), path, f"dur of {name[:40]!r}") * 1e-6,
                start_s=_us(e.get("ts", 0), path, f"ts of {name[:40]!r}") * 1e-6,
                device=str(args.get("device", e.get("pid", "0"))),
                kind=kind,
                shape=shape,
            )
        )
    if not kernels:
        raise InputError(f"{path}: no GPU kernels (events of category 'kernel') in the trace")
    return Trace("kineto", tuple(kernels), steps or None)


def _args(event: dict[str, object]) -> dict[str, object]:
    args = event.get("args")
    return args if isinstance(args, dict) else {}


def _us(value: Scalar, path: str, what: str) -> float:
    """A Chrome-trace time (microseconds): a finite number, not negative."""
    import math

    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise InputError(f"{path}: {what} must be a number of microseconds, got {value!r}")
    try:
        number = float(value)
    except ValueError:
        raise InputError(
            f"{path}: {what} must be a number of microseconds, got {value!r}"
        ) from None
    if not math.isfinite(number) or number < 0:
        raise InputError(f"{path}: {what} must be a finite time, not negative, got {value!r}")
    return number


def _find_header(text: str, path: str) -> tuple[list[str], list[list[str]]]:
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if "Name" in line and "," in line or "Operation" in line and "," in line:
            rows = list(csv.reader(io.StringIO("\n".join(lines[i:]))))
            header = [h.strip() for h in rows[0]]
            body = [
                r + [""] * (len(header) - len(r)) for r in rows[1:] if any(c.strip() for c in r)
            ]
            if not body:
                raise InputError(f"{path}: the profile has a header and no kernel rows")
            return header, body
    raise InputError(
        f"{path}: not a profile shardline reads: a Kineto trace (.json), an nsys stats CSV "
        "(cuda_gpu_trace or cuda_gpu_kern_sum), its SQLite export, or an XLA op-stats CSV"
    )


def _column(header: list[str], *names: str) -> int | None:
    for name in names:
        for i, h in enumerate(header):
            if h.lower().replace(" ", "") == name.lower().replace(" ", ""):
                return i
    return None


def _number(text: str, path: str, what: str) -> float:
    import math

    try:
        value = float(text.replace(",", "").strip())
    except ValueError:
        raise InputError(f"{path}: {what} {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise InputError(f"{path}: {what} {text!r} must be a finite number, not negative")
    return value


def _read_csv(text: str, path: str) -> Trace:
    header, rows = _find_header(text, path)
    name = _column(header, "Name", "Operation")
    start = _column(header, "Start (ns)", "Start(ns)")
    dur = _column(header, "Duration (ns)", "Duration(ns)")
    total = _column(header, "Total Time (ns)", "TotalTime(ns)")
    xla_total = _column(header, "Total self-time (us)", "Total time (us)")
    if name is None:
        raise InputError(f"{path}: no Name column")
    if start is not None and dur is not None:
        device = _column(header, "Device", "Dev")
        return Trace(
            "nsys-gpu-trace",
            tuple(
                Kernel(
                    name=r[name],
                    dur_s=_number(r[dur], path, "Duration") * 1e-9,
                    start_s=_number(r[start], path, "Start") * 1e-9,
                    device=r[device] if device is not None else "0",
                    kind="memcpy" if r[name].startswith("[CUDA mem") else "kernel",
                )
                for r in rows
            ),
        )
    count = _column(header, "Instances", "Calls", "#Occurrences")
    if total is not None:
        return Trace(
            "nsys-kern-sum",
            tuple(
                Kernel(
                    name=r[name],
                    dur_s=_number(r[total], path, "Total Time") * 1e-9,
                    count=int(_number(r[count], path, "Instances")) if count is not None else 1,
                )
                for r in rows
            ),
        )
    if xla_total is not None:
        return _xla_rows(header, rows, path, name, xla_total, count)
    raise InputError(f"{path}: the CSV has no kernel durations (Duration (ns) or Total Time (ns))")


def _xla_rows(
    header: list[str], rows: list[list[str]], path: str, name: int, total: int, count: int | None
) -> Trace:
    where = _column(header, "Host/device")
    kind = _column(header, "Type")
    kernels = []
    for r in rows:
        if where is not None and r[where].strip().lower() != "device":
            continue
        label = f"{r[kind]}:{r[name]}" if kind is not None else r[name]
        kernels.append(
            Kernel(
                name=label,
                dur_s=_number(r[total], path, "Total self-time") * 1e-6,
                count=int(_number(r[count], path, "#Occurrences")) if count is not None else 1,
            )
        )
    return Trace("xla-op-stats", tuple(kernels))


def _read_sqlite(path: str) -> Trace:
    import sqlite3

    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        tables = {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        if "CUPTI_ACTIVITY_KIND_KERNEL" not in tables:
            raise InputError(f"{path}: an SQLite file without nsys's CUPTI_ACTIVITY_KIND_KERNEL")
        names = (
            dict(con.execute("SELECT id, value FROM StringIds")) if "StringIds" in tables else {}
        )
        kernels = [
            Kernel(
                name=str(names.get(n, n)),
                dur_s=(end - start) * 1e-9,
                start_s=start * 1e-9,
                device=str(dev),
            )
            for start, end, dev, n in con.execute(
                "SELECT start, end, deviceId, demangledName FROM CUPTI_ACTIVITY_KIND_KERNEL"
            )
        ]
        for table, label in (
            ("CUPTI_ACTIVITY_KIND_MEMCPY", "memcpy"),
            ("CUPTI_ACTIVITY_KIND_MEMSET", "memset"),
        ):
            if table in tables:
                kernels += [
                    Kernel(label, (end - start) * 1e-9, start * 1e-9, str(dev), kind="memcpy")
                    for start, end, dev in con.execute(f"SELECT start, end, deviceId FROM {table}")
                ]
    except sqlite3.DatabaseError as exc:
        raise InputError(f"{path}: {exc}") from None
    finally:
        con.close()
    if not kernels:
        raise InputError(f"{path}: no kernels in the nsys export")
    return Trace("nsys-sqlite", tuple(kernels))


# --- measured against predicted --------------------------------------------------------------

TOP_KERNELS = 10


def _predicted(plan: Any) -> dict[str, float | None]:
    """Per category, the plan's time for one step on one device: the realistic breakdown's
    GEMMs, attention, ops between matmuls and optimizer step; every collective's time,
    overlapped or not (a trace's communication kernels run whether hidden or not); the
    pipeline bubble as idle time. Copies are not predicted."""
    b = plan.predicted_breakdown_s
    return {
        "gemm": b.get("gemm_s", 0.0),
        "attention": b.get("attention_s", 0.0),
        "other_ops": b.get("other_ops_s", 0.0),
        "collective": plan.t_network_s,
        "optimizer": b.get("optimizer_s", 0.0),
        "memcpy": None,
        "idle": b.get("bubble_s", 0.0),
    }


def compare(trace: Trace, plan: Any | None, steps: int) -> dict[str, Any]:
    """Measured (the trace's kernel durations summed per category) against predicted (the
    plan's one-step times x `steps` x the devices the trace holds); `plan` None: measured only."""
    groups = group(trace)
    scale = steps * max(1, len(trace.devices))
    predicted = _predicted(plan) if plan is not None else {}
    rows: list[dict[str, Any]] = []
    for c in CATEGORIES:
        g = groups[c]
        p = predicted.get(c)
        measured = None if g.measured_s != g.measured_s else g.measured_s  # NaN: no timestamps
        rows.append(
            {
                "category": c,
                "measured_s": measured,
                "predicted_s": p * scale if p is not None else None,
                "kernels": g.kernels,
            }
        )
    recompute = (plan.predicted_breakdown_s.get("recompute_s", 0.0) if plan else 0.0) or 0.0
    if recompute > 0:
        rows.append(
            {
                "category": "recompute",
                "measured_s": None,
                "predicted_s": recompute * scale,
                "kernels": 0,
            }
        )
    ranked = sorted(
        ((v[0], v[1], n, s, c) for c, g in groups.items() for (n, s), v in g.by_name.items()),
        key=lambda item: -item[0],
    )[:TOP_KERNELS]
    largest = [
        {"name": n, "shape": s, "category": c, "measured_s": t, "kernels": int(count)}
        for t, count, n, s, c in ranked
    ]
    gaps = [
        (r["measured_s"] - r["predicted_s"], r["category"])
        for r in rows
        if r["measured_s"] is not None and r["predicted_s"] is not None
    ]
    gap = max(gaps, key=lambda x: abs(x[0])) if gaps else None
    return {
        "format": trace.format,
        "steps": steps,
        "devices_in_trace": len(trace.devices),
        "categories": rows,
        "measured_step_s": trace.span_s,
        "predicted_step_s": plan.predicted_s * steps if plan is not None else None,
        "measured_kernel_s": sum(k.dur_s for k in trace.kernels),
        "largest_kernels": largest,
        "largest_gap": {"category": gap[1], "measured_minus_predicted_s": gap[0]} if gap else None,
        "plan": plan.name if plan is not None else None,
    }
