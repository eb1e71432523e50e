"""Calibrate this machine, run the validate suite, and print the prediction's error next to the
roofline's, in one run. Keeps the evidence: the chip file, the CSV, the PNG plot and the JSON
under benchmarks/results/ (named with the date and the device).

    python benchmarks/bench_validate.py            # the full suite (about a minute on a CPU)
    python benchmarks/bench_validate.py --quick    # the tiny suite
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "src"))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    parser.add_argument("--out-dir", default=str(ROOT / "benchmarks" / "results"))
    args = parser.parse_args()

    from shardline.calibrate import calibrate, detect_device
    from shardline.calibrate.chipfile import atomic_write
    from shardline.calibrate.validate import validate, write_csv
    from shardline.report.predict_text import render_plot, render_validation

    device = detect_device(args.device)
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d")
    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"{stamp}-{'gpu' if device == 'cuda' else 'cpu'}{'-quick' if args.quick else ''}"
    chip_path = Path(f"{stem}-host.toml")
    calibrate(chip_path, device=device, quick=args.quick, force=True)
    result = validate(str(chip_path), device=device, quick=args.quick)
    write_csv(Path(f"{stem}-validate.csv"), result)
    atomic_write(Path(f"{stem}-validate.png"), lambda tmp: render_plot(str(tmp), result))
    Path(f"{stem}-validate.json").write_text(
        json.dumps(result.to_dict(), indent=2) + "\n", encoding="utf-8"
    )
    s = result.summary
    print(
        render_validation(
            result,
            [
                str(chip_path),
                f"{stem}-validate.csv",
                f"{stem}-validate.png",
                f"{stem}-validate.json",
            ],
        )
    )
    print(
        f"median abs error: predicted_s {s['median_abs_err_predicted']:.3f}, roofline "
        f"{s['median_abs_err_roofline']:.3f}, ratio "
        f"{s['median_abs_err_predicted'] / s['median_abs_err_roofline']:.2f} (target <= 0.10 "
        f"and ratio <= 0.5: {'met' if s['target_met'] else 'missed'})"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
