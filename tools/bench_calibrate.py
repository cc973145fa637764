"""How well does `gimletc calibrate` predict this host? Errors before and after, from one run.

Measures the host (or loads the measurements of a saved calibration report
with ``--from``), fits the cpu derate with the current code, and prints the
calibration tables followed by the median |error| of block times under the
uncalibrated assumptions (the baseline, computed in the same run) and under
the fitted derate. Nothing is saved to the user's calibration: everything
runs against a temporary cache folder (traces are copied into it).

``--from`` lets a cost-model change be judged on saved measurements without
measuring again:

    .venv/bin/python tools/bench_calibrate.py [--quick] [--from REPORT.json] [--out REPORT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="measure fewer sizes, points and repeats")
    parser.add_argument("--from", dest="source", metavar="REPORT.json",
                        help="fit the measurements of this saved report instead of measuring")
    parser.add_argument("--out", metavar="REPORT.json", help="write the new report here")
    args = parser.parse_args()

    from compiler.ir.files import cache_dir

    user_cache = cache_dir()
    with tempfile.TemporaryDirectory(prefix="gimletc-bench-calibrate-") as tmp:
        if (user_cache / "traces").is_dir():
            shutil.copytree(user_cache / "traces", Path(tmp) / "traces")
        os.environ["GIMLETC_CACHE_DIR"] = tmp  # no calibration here: "before" is the uncalibrated baseline

        from compiler.calibrate.host import fit_report
        from compiler.calibrate.measure import FULL, QUICK, Measurements, measure
        from compiler.cli.calibrate import print_calibration

        def note(msg: str) -> None:
            print(f"… {msg}", file=sys.stderr)

        started = time.perf_counter()
        if args.source:
            measured = Measurements.from_report(json.loads(Path(args.source).read_text()))
        else:
            measured = measure(QUICK if args.quick else FULL, note)
        report = fit_report(measured, note, quick=args.quick)
        elapsed = time.perf_counter() - started
    print_calibration(report)
    before, after = report["before"]["median_error"], report["summary"]["median_error"]
    print(f"\nmedian |error| of {report['summary']['points']} block times: uncalibrated {before:.1%}, "
          f"calibrated {after:.1%} (held-out {report['summary']['median_error_held_out']:.1%}); "
          f"{before / after:.1f}x smaller; {elapsed:.1f} s")
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=1, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
