"""Published single-GEMM measurements against shardline's realistic prediction.

Reads benchmarks/data/gemm_published.csv (one published GEMM per row: chip, dtype, M, K, N, the
number of groups, the measured time, how it was launched, the harness that timed it (`timing`,
one of TIMINGS) and the source), predicts every row with
`shardline matmul`'s model (`shardline.ops.roofline.matmul` +
`shardline.ops.predict.with_prediction`, launch mode from the row; a grouped GEMM, `groups` > 1
products of M x K x N each in one kernel, as the batched einsum `a[G,M,K] * b[G,K,N] ->
out[G,M,N]`), prints the table and the median / worst |error| by chip, class and launch mode, and
rewrites the "## Single GEMMs" section of docs/validation.md (other sections are kept).

    python benchmarks/bench_gemm.py            # print and write docs/validation.md
    python benchmarks/bench_gemm.py --no-write # print only

Classes: "small" when every dimension is at most 1024; "skinny" when the smaller of M and N is at
most 1/8 of the largest dimension (decode-style products, tall outputs); "square" otherwise.
Error: predicted / measured - 1 (negative: the prediction is faster than the measurement).
Group "short K": rows with K <= 2048 outside the small class (the per-wave output stores of
docs/prediction.md, "Short K", weigh most there).
"""

from __future__ import annotations

import argparse
import csv
import datetime
import statistics
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from validation_doc import replace_section  # noqa: E402

DATA = ROOT / "benchmarks" / "data" / "gemm_published.csv"
DOC = ROOT / "docs" / "validation.md"
HEADING = "## Single GEMMs"
SMALL_MAX_DIM = 1024
SKINNY_RATIO = 8
SHORT_K = 2048
GROUPED_SPEC = "a[G,M,K] * b[G,K,N] -> out[G,M,N]"

# How each row's harness times a call (the `timing` column), read from the harness's own code or
# the row's publication: what the timed window holds and the state of the L2 when the call starts.
# Not priced yet (docs/validation.md, "Per-op truth out of source"): the warm-L2 price needs the
# chip's L2 read rate, and the B200 file has none measured.
TIMINGS = {
    "cupti": "CUPTI kernel durations, launch excluded (xla/tools/matmul_perf_table_gen.cc); "
    "L2 state not stated",
    "kineto-flush": "kernel durations from the torch profiler (DeepGEMM bench_kineto); L2 flushed: "
    "flush_l2=True memsets 8 GB before every call (deep_gemm/utils.py)",
    "back-to-back": "back-to-back launches of one GEMM (the Azure guide's superbench cublaslt_gemm "
    "and hipBLASLt tables); L2 state not stated",
    "do_bench": "triton.testing.do_bench (python/triton/testing.py): per call `cache.zero_()` on a "
    "256 MB buffer, then a CUDA event, the call, a CUDA event; the median of the event pairs. "
    "The call is queued behind the zeroing kernel, so its host launch is hidden; the L2 is cold",
    "do_bench_cudagraph": "triton.testing.do_bench_cudagraph: the call captured in a CUDA graph "
    "and replayed, no cache clear between replays (triton-lang/triton PR 8384): operands that "
    "fit the L2 stay in it",
    "torch-timer": "torch.utils.benchmark.Timer: back-to-back eager calls on the same buffers, no "
    "cache clear: operands that fit the L2 stay in it",
    "aiter-perftest": "aiter's perftest (tuner): kernel time alone; L2 state not stated in the row",
    "unstated": "the publication does not say how it timed",
}
# The harnesses that leave the operands in the L2 for the next call: their rows are priced with
# `--warm-l2` (operands that fit the L2 read at its resident-read rate).
WARM_L2_TIMINGS = frozenset({"do_bench_cudagraph", "torch-timer"})


@dataclass(frozen=True)
class Row:
    chip: str
    dtype: str
    out_dtype: str
    m: int
    k: int
    n: int
    measured_s: float
    launch: str
    source: str
    groups: int = 1
    source_id: str = ""
    predicted_s: float = 0.0
    timing: str = "unstated"  # the harness (TIMINGS)

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0

    @property
    def shape_class(self) -> str:
        return shape_class(self.m, self.k, self.n)


def shape_class(m: int, k: int, n: int) -> str:
    """small (all dims <= 1024), skinny (min(M, N) * 8 <= largest dim) or square."""
    if max(m, k, n) <= SMALL_MAX_DIM:
        return "small"
    if min(m, n) * SKINNY_RATIO <= max(m, k, n):
        return "skinny"
    return "square"


def load_rows(path: Path = DATA) -> list[Row]:
    with path.open(newline="", encoding="utf-8") as f:
        return [
            Row(
                chip=r["chip"],
                dtype=r["dtype"],
                out_dtype=r["out_dtype"],
                m=int(r["m"]),
                k=int(r["k"]),
                n=int(r["n"]),
                measured_s=float(r["measured_s"]),
                launch=r["launch"],
                source=r["source"],
                groups=int(r.get("groups") or 1),
                source_id=r.get("source_id", ""),
                timing=_timing(r.get("timing") or "unstated", path),
            )
            for r in csv.DictReader(f)
        ]


def _timing(name: str, path: Path) -> str:
    """A row's harness, one of TIMINGS (anything else stops the script)."""
    if name not in TIMINGS:
        raise SystemExit(f"unknown timing {name!r} in {path.name}: one of {', '.join(TIMINGS)}")
    return name


def predict_row(row: Row, chip: Any = None, warm_l2: bool | None = None) -> Row:
    """The row with shardline's realistic time (`shardline matmul M K N --hw CHIP ...`); `chip`, a
    Chip, stands in for the row's catalog chip (benchmarks/perop_loso.py: without the figures of
    the row's own source); `warm_l2`, when given, overrides the row's harness (WARM_L2_TIMINGS)."""
    from dataclasses import replace

    from shardline.basics.options import Precision
    from shardline.ops.predict import with_prediction
    from shardline.ops.roofline import einsum, matmul

    operand = "fp32" if row.dtype == "tf32" else row.dtype  # TF32 math on fp32 operands
    dtypes = {"a_dtype": operand, "b_dtype": operand, "out_dtype": row.out_dtype}
    if row.groups > 1:
        dims = {"G": row.groups, "M": row.m, "K": row.k, "N": row.n}
        result = einsum(
            GROUPED_SPEC,
            dims,
            hw=chip or row.chip,
            dtype=operand,
            dtypes={"out": row.out_dtype},
            precision=Precision(compute=row.dtype),
        )
    else:
        result = matmul(row.m, row.k, row.n, hw=chip or row.chip, compute_dtype=row.dtype, **dtypes)
    warm = row.timing in WARM_L2_TIMINGS if warm_l2 is None else warm_l2
    predicted = with_prediction(result, launch=row.launch, warm_l2=warm).predicted_s
    return replace(row, predicted_s=float(predicted))


def predict_all(path: Path = DATA) -> list[Row]:
    return [predict_row(r) for r in load_rows(path)]


def summary(rows: list[Row]) -> dict[str, dict[str, float]]:
    """Median and worst |error| (and the count) per group: all, each chip, class, launch mode."""
    groups: dict[str, list[float]] = {"all": []}
    for r in rows:
        keys = ["all", r.chip, r.shape_class, r.launch]
        if r.k <= SHORT_K and r.shape_class != "small":
            keys.append("short K")
        for key in keys:
            groups.setdefault(key, []).append(abs(r.error))
    return {
        key: {"n": len(v), "median": statistics.median(v), "worst": max(v)}
        for key, v in groups.items()
    }


def _table(rows: list[Row]) -> list[str]:
    lines = [
        "| chip | dtype | M | K | N | groups | class | launch | measured (us) | predicted (us) "
        "| error |",
        "|---|---|---:|---:|---:|---:|---|---|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r.chip} | {r.dtype} | {r.m} | {r.k} | {r.n} | {r.groups} | {r.shape_class} | "
            f"{r.launch} | "
            f"{r.measured_s * 1e6:.2f} | {r.predicted_s * 1e6:.2f} | {r.error:+.0%} |"
        )
    return lines


def _summary_lines(stats: dict[str, dict[str, float]]) -> list[str]:
    lines = ["| group | rows | median abs error | worst abs error |", "|---|---:|---:|---:|"]
    order = ["all"] + sorted(k for k in stats if k != "all")
    for key in order:
        s = stats[key]
        lines.append(f"| {key} | {s['n']:.0f} | {s['median']:.1%} | {s['worst']:.1%} |")
    return lines


def _sources(rows: list[Row]) -> list[str]:
    seen: dict[str, None] = {}
    for r in rows:
        text = r.source.split(" ")[0] if r.source.startswith("http") else r.source.split(":")[0]
        seen.setdefault(text.split(" (")[0], None)
    return [f"- {s}" for s in seen]


def _error_range(rows: list[Row], source_ids: tuple[str, ...], small: bool) -> str:
    """'a% to b%' over the rows of `source_ids` in (or out of) the small class."""
    errors = sorted(
        r.error for r in rows if r.source_id in source_ids and (r.shape_class == "small") == small
    )
    return f"{errors[0]:+.0%} to {errors[-1]:+.0%}" if errors else "-"


def _span(rows: list[Row]) -> str:
    """'a% to b%': the smallest and largest error of `rows` ('-' without rows)."""
    if not rows:
        return "-"
    return f"{min(r.error for r in rows):+.0%} to {max(r.error for r in rows):+.0%}"


def _window_excess(rows: list[Row]) -> str:
    """'N^3: a us against b us' for each H100 square timed by both do_bench and CUPTI."""
    cupti = {
        (r.m, r.k, r.n): r.measured_s
        for r in rows
        if r.chip == "h100-sxm" and r.timing == "cupti" and r.dtype == "bf16" and r.groups == 1
    }
    pairs = [
        f"{r.m}^3: {r.measured_s * 1e6:.2f} us against {cupti[(r.m, r.k, r.n)] * 1e6:.2f} us"
        for r in rows
        if r.chip == "h100-sxm" and r.timing == "do_bench" and (r.m, r.k, r.n) in cupti
    ]
    return "; ".join(pairs) or "-"


def _timing_lines(rows: list[Row]) -> list[str]:
    """The harnesses of the rows (`timing`), their rows and median |error|, and how each times."""
    lines = [
        "| timing | rows | median abs error | how it times a call |",
        "|---|---:|---:|---|",
    ]
    for name, text in TIMINGS.items():
        errors = [abs(r.error) for r in rows if r.timing == name]
        if errors:
            lines.append(f"| {name} | {len(errors)} | {statistics.median(errors):.1%} | {text} |")
    return lines


def _span_median(rows: list[Row]) -> str:
    """'a% to b%, median |error| c%' over `rows`."""
    if not rows:
        return "-"
    median = statistics.median(abs(r.error) for r in rows)
    return f"{_span(rows)}, median |error| {median:.1%}"


def _out_of_source_notes(rows: list[Row]) -> list[str]:
    """Residuals of the rows added as out-of-source checks (benchmarks/perop_loso.py)."""
    triton = ("triton-issue-3672", "triton-issue-3551")
    aiter = ("aiter-tuned-gemm",)
    mi300x_fp8 = [r for r in rows if r.source_id == "aiter-pr-1092"]
    split = [r for r in mi300x_fp8 if 32 <= r.m <= 192]
    unsplit = [r for r in mi300x_fp8 if r.m >= 256]
    return [
        "- Triton's matmul tutorial on A100 and H100 (cuBLAS through torch.matmul, fp16 squares), "
        "timed by `triton.testing.do_bench` (`timing` do_bench, below). The squares up to 1024 "
        f"come out {_error_range(rows, triton, True)} (larger ones "
        f"{_error_range(rows, triton, False)}). On H100 the same squares have a CUPTI kernel "
        "time in the OpenXLA table (bf16, the same tensor-core rate as fp16): "
        + _window_excess(rows)
        + ". So a do_bench window holds a few microseconds more than the kernel, though the "
        "harness's code hides the launch (the call is queued behind the cache-clearing kernel); "
        "what fills them (the event pair, the dispatch after the zeroing kernel, cold operands) "
        "has no published measurement, and the A100 file has no GEMM kernel floor (no published "
        "A100 GEMM kernel time at tiny sizes was found; its streaming floor, 1.34 us, stands in). "
        "Priced as the harness runs (launch hidden, floor + work) the A100 squares would come out "
        "faster still, so the rows keep the eager price. No figure is fitted to them.",
        "- AITER's tuned bf16 table on MI355X (the fastest of its asm, opus, flydsl and hipBLASLt "
        f"kernels per shape) is predicted {_error_range(rows, aiter, False)}. Its shortest kernel "
        "(M = 8, N = 128, K = 6144, 5.25 us; left out here) is the MI355X GEMM floor; the "
        "launch and streaming floors are MI300X's (no MI355X figure published). The tiles are fed "
        'from the Infinity Cache (docs/prediction.md, "Tile feed"), at MI300X\'s 17.2 TB/s peak '
        "(no MI355X figure published); the table's own kernels get 36-41 GB/s of operand panels "
        "per CU whatever their tile (64x64, 128x128, 256x256: 1.3, 2.6, 4.6e12 FLOP/s per CU), "
        "9-10.5 TB/s over 256 CUs, so the peak feed still leaves these mid-size shapes fast. The "
        "M = 1 rows run a GEMM kernel (5.25 us floor and more) where the model streams.",
        "- AITER PR 1092's fp8 (e4m3fnuz) table on MI300X, N = 1280, K = 8192, the faster of its "
        "two CK kernels per M: M = 32..192 come out "
        + _span(split)
        + " (GEMM floor 7.74 us, aiter's shortest int8 kernel on MI300X, plus split-K tiles "
        "fed from the Infinity Cache); M = 256..1024 take 46-53 us, "
        + _span(unsplit)
        + ": there the tuner had no kernel that splits K (20-80 output tiles of 128x128 on 304 "
        "CUs, each walking all 8192 of K), while the model takes the best of split-K 1-16; M = 1 "
        "is predicted as a streaming kernel (-57%).",
    ]


def section(rows: list[Row], stats: dict[str, dict[str, float]], date: str) -> str:
    """The "## Single GEMMs" section of docs/validation.md, as Markdown."""
    s = stats["all"]
    head = [
        HEADING,
        "",
        f"Measured on {date} with `python benchmarks/bench_gemm.py` against "
        f"`benchmarks/data/gemm_published.csv`: {s['n']:.0f} published GEMMs on "
        "A100, H100, B200, MI300X and MI355X (bf16, fp16, fp8, int8, tf32), each with its source. "
        "Every row is predicted exactly as `shardline matmul M K N --hw CHIP --dtype D --json` "
        "reports `predicted_s` (a grouped row, G products of M x K x N in one kernel, as "
        "`shardline einsum 'a[G,M,K] * b[G,K,N] -> out[G,M,N]'`), "
        "with `--cuda-graphs` for rows timed as kernel time alone (profiler "
        "kernel durations, graph replay) and without it for rows timed over back-to-back "
        "launches, and `--warm-l2` for rows whose harness leaves the operands in the L2 "
        "(`timing` do_bench_cudagraph and torch-timer, below). "
        "Nothing in the chip files is fitted to these rows: the achievable rates, "
        "bandwidths and launch figures come from their own sources (the chip files name them); "
        "the shapes that are themselves the source of a chip figure are left out (MI300X fp8 "
        "8192^3, its achievable fp8 rate; the OpenXLA tables' shortest kernels, H100 bf16 256^3 "
        "and B200 fp8 256^3, the GEMM kernel floors).",
        "",
        f"Median |error| {s['median']:.1%}, worst {s['worst']:.1%}. Error is predicted / "
        "measured - 1: negative means the prediction is faster than the measurement. Classes: "
        "small (every dimension at most 1024), skinny (the smaller of M and N at most 1/8 of "
        "the largest dimension), square (the rest).",
        "",
    ]
    decode = [
        r
        for r in rows
        if r.chip == "b200" and r.timing == "do_bench_cudagraph" and 16 <= r.m <= 512
    ]
    gemv = [r for r in rows if r.chip == "b200" and r.timing == "do_bench_cudagraph" and r.m == 1]
    h100_warm = [r for r in rows if r.timing == "torch-timer" and r.n == r.k == 4096]
    notes = [
        "",
        "What the residuals say:",
        "",
        "- Decode-shaped GEMMs on B200 timed by CUDA-graph replay (the vLLM tables, M = 16..512, "
        "17-61 MB in all): the benchmark replays the same GEMM, and the operands stay in the L2 "
        '(93.8 MB of it at speed, 18.8 TB/s: docs/prediction.md, "Warm L2"). Priced so they '
        "come out "
        + _span_median(decode)
        + "; streamed from HBM, as in a model whose other layers evict them, they came out "
        + _span_median([predict_row(r, warm_l2=False) for r in decode])
        + ". What is left at M = 128..512 in bf16 is the tiles' time, not the operands'. On "
        "H100 the 66-132 MB gemma weights exceed the 41.4 MB its L2 holds at speed and those "
        "rows stay within 15%.",
        "- M = 1 is predicted as a streaming kernel (matrix-vector product: the streaming floor, "
        "1.26 us), on B200 from a warm L2 ("
        + _span(gemv)
        + "); cuBLAS and CUTLASS run a GEMM kernel there and take 5-12 us on B200.",
        "- DeepGEMM's fp8 kernels with K = 2048 finish in 6.4-7.4 us on H800, below the 5.2 us "
        "GEMM floor plus their weight traffic: that library's floor is lower than the OpenXLA "
        "table's.",
        "- Short K (K <= 2048 outside the small class): every wave but the last waits for its "
        'output tiles to reach memory (docs/prediction.md, "Short K"); without that term '
        "DeepGEMM's 4096 x 32768 x 512 was predicted 54% fast and the group's median was 18.3% "
        f"(now {stats['short K']['median']:.1%}). What is left there: DeepGEMM's skinny M = 64 "
        "and 128 rows (predicted slow: the floor), the MI300X Azure rows (unexplained, below), "
        "H100 bf16 4096 x 4096 x 256 through XLA (+19%, was -18%) and B200 fp8 4096 x 4096 x "
        "1024 (+10%, was -15%): there the library hides part of the store.",
        "- MI300X fp8 hipBLASLt at 1024^3, 2048^3 and 1024x1024x2145 takes about 40 us in the "
        "Azure table, far above any roofline term and above the 7.74 us MI300X GEMM kernel floor; "
        "the model does not explain it (a per-call cost of that harness is likely, but none is "
        "published).",
        "- TF32 on H100 through XLA runs 30-36% slower than the bf16 efficiency applied to the "
        "TF32 peak (no TF32 achievable rate is measured for H100; the catalog falls back to it).",
        *_out_of_source_notes(rows),
        "",
        "How each row was timed (`timing` in the CSV, from the harness's code or the row's "
        "publication). The rows of harnesses that clear no cache between calls "
        f"({', '.join(sorted(WARM_L2_TIMINGS))}) are priced with `--warm-l2`. On H100 the "
        "torch-timer rows of vLLM PR 5144 at N = K = 4096 (17 MB, which fit) come out "
        + _span(h100_warm)
        + " (from HBM: "
        + _span([predict_row(r, warm_l2=False) for r in h100_warm])
        + "); its 45.4 MB rows (K = 11008) exceed the 41.4 MB the L2 holds at speed.",
        "",
        *_timing_lines(rows),
        "",
        "Sources of the rows:",
        "",
        *_sources(rows),
        "",
    ]
    return "\n".join(head + _summary_lines(stats) + ["", "Per row:", ""] + _table(rows) + notes)


def write_section(text: str, path: Path = DOC) -> None:
    """Replace (or add) this benchmark's section of the validation document."""
    replace_section(text, HEADING, path)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--no-write", action="store_true", help="print only")
    args = parser.parse_args()
    rows = predict_all()
    stats = summary(rows)
    date = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    text = section(rows, stats, date)
    print("\n".join(_table(rows)))
    print()
    print("\n".join(_summary_lines(stats)))
    if not args.no_write:
        write_section(text)
        print(f"\nwrote {DOC.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
