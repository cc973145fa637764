"""The command line of the measurement fitter (`compiler.fidelity.measurements`, whose docstring is the usage):
fit per-family derates on published measurements, leave-one-out and held-out errors, docs/fidelity-published.md.

    .venv/bin/python tools/fidelity.py [--fit] [--loo] [--held-out] [--before-after] [--answered] [--json]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compiler.fidelity import measurements  # noqa: E402
from compiler.fidelity.measurements import (  # noqa: E402
    DEFAULT_CSV, FITTED, all_rows, derate_line, before_after, data_files, evaluate_rows, family_of, fit, held_out, heldout_files,
    load_rows, loo_rows, medians, print_answered,
)
from compiler.fidelity.measurements_report import device_table, markdown  # noqa: E402


def print_rows(results: list[dict]) -> None:
    print(f"{'id':7} {'model':16} {'device':21} {'n':>2} {'dtype':5} {'batch':>5} {'in':>6} {'out':>5} "
          f"{'metric':22} {'measured':>10} {'predicted':>10} {'APE%':>6}")
    for r in results:
        print(f"{r['id']:7} {r['model']:16} {r['device']:21} {r['count']:>2} {r['dtype']:5} {r['batch']:>5} "
              f"{r['in']:>6} {r['out']:>5} {r['metric']:22} {r['measured']:10.4g} {r['predicted']:10.4g} "
              f"{r['ape_pct']:6.1f} {r['error']}")


def print_before_after(report: dict) -> None:
    print(f"{'family':9} {'rows':>9} {'committed':>10} {'LOO before':>11} {'LOO after':>10} {'fit':>6}  worst LOO rows")
    for fam, f in report["families"].items():
        prior = "*" if f["rows_before"] < 2 else "%"  # one row or none: held out, it is predicted by the generic prior
        print(f"{fam:9} {f['rows_before']:>3} -> {f['rows_after']:<3} {f['committed_median_ape_pct']:9.1f}% "
              f"{f['loo_before_median_ape_pct']:10.1f}{prior} {f['loo_after_median_ape_pct']:9.1f}% "
              f"{f['fit_median_ape_pct']:5.1f}%  " + ", ".join(f"{i} {e}%" for i, e in f["worst_loo_rows"]))
    print("median APE: committed = cost_models/derates.py as it stands, on every row; LOO before = leave-one-out on "
          "the shared file's rows only (* one row: predicted by the generic prior); LOO after = leave-one-out on all "
          "rows; fit = the new fit, in sample")
    for fam, f in report["families"].items():
        print("fitted " + derate_line(fam, f["derate"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=measurements.__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv", type=Path, action="append",
                        help="measurement file(s) to read instead of the shared file and cost_models/data/")
    parser.add_argument("--family", action="append", help="only rows of this device family (repeatable)")
    parser.add_argument("--fit", action="store_true", help="fit per-family derates on the rows")
    parser.add_argument("--loo", action="store_true",
                        help="leave-one-out: predict each row with derates fitted on the other rows of its family")
    parser.add_argument("--held-out", action="store_true",
                        help="predict cost_models/data/heldout/ with derates fitted on the fitting rows alone")
    parser.add_argument("--before-after", action="store_true",
                        help="committed derates, LOO on the shared file alone and on all rows, and the new fit")
    parser.add_argument("--answered", action="store_true",
                        help="count the rows `gimletc estimate` answers and refuses (with the sweeps file)")
    parser.add_argument("--jobs", type=int, default=1, help="leave-one-out folds fitted at once (processes)")
    parser.add_argument("--markdown", type=Path, metavar="PATH",
                        help="with --loo and/or --held-out: write the per-device tables (docs/fidelity-published.md)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.answered:
        print_answered(load_rows(args.csv) if args.csv else all_rows(), {})
        return
    keep = (lambda rows: [r for r in rows if family_of(r["device"]) in args.family]) if args.family else (lambda r: r)
    shared = keep(load_rows(args.csv or [DEFAULT_CSV]))
    new = [] if args.csv else keep(load_rows(data_files()))
    graphs: dict = {}
    if args.before_after:
        report = before_after(shared, new, graphs)
        if args.json:
            print(json.dumps(report, indent=1))
        else:
            print_rows(report["rows"])
            print_before_after(report)
        return
    rows = shared + new
    derates = fit(rows, graphs) if args.fit else None
    results = evaluate_rows(rows, graphs, derates)
    report: dict = {}
    if args.loo:
        for r, held in zip(results, loo_rows(rows, graphs, args.jobs)):
            r["loo_ape_pct"], r["loo_err_pct"], r["loo_predicted"] = held["ape_pct"], held["err_pct"], held["predicted"]
        report["loo_by_device"] = device_table(results, "loo_ape_pct")
    if args.held_out:
        held = keep(load_rows(heldout_files()))
        report["held_out"] = held_out(rows, held, graphs)
        report["held_out_by_device"] = device_table(report["held_out"], "ape_pct")
    summary = {"median_ape_pct": medians(results)}
    if args.loo:
        summary["loo_median_ape_pct"] = medians(results, "loo_ape_pct")
    if args.markdown:
        args.markdown.write_text(markdown(sys.argv[1:], report.get("loo_by_device"), report.get("held_out")))
    if args.json:
        fitted = {fam: {k: getattr(d, k) for k in FITTED} for fam, d in (derates or {}).items()}
        print(json.dumps({"rows": results, **summary, "fitted": fitted, **report}, indent=1))
        return
    for fam, d in (derates or {}).items():
        print(derate_line(fam, {k: getattr(d, k) for k in FITTED}))
    print_rows(results)
    for key, values in summary.items():
        print(f"{key}: " + ", ".join(f"{k} {v:.1f}" for k, v in values.items()))
    for t in report.get("loo_by_device", []):
        print(f"loo {t['device']:22s} {t['rows']:3d} rows  median APE {t['median_ape_pct']:6.1f}%  "
              f"error {t['median_err_pct']:+6.1f}%  worst " + ", ".join(f"{i} {e}%" for i, e in t["worst"]))
    if "held_out" in report:
        print("held-out rows (fitted on the fitting rows only):")
        print_rows(report["held_out"])
        for t in report["held_out_by_device"]:
            print(f"held-out {t['device']:22s} {t['rows']:3d} rows  median APE {t['median_ape_pct']:6.1f}%  "
                  f"error {t['median_err_pct']:+6.1f}%")


if __name__ == "__main__":
    main()
