"""The command line of the serving-sweep fitter (`compiler.fidelity.sweeps`, whose docstring is the usage): fit
the engines' step costs and each GPU's kernel efficiencies on the measured sweeps, held-out errors, docs/fidelity.md.

    .venv/bin/python tools/fidelity_sweeps.py [--fit] [--loo] [--loo-by model,device,engine] [--json] [--worst N]
                                              [--jobs N] [--markdown docs/fidelity.md] [--answered]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from compiler.fidelity import sweeps  # noqa: E402
from compiler.fidelity.measurements import all_rows, print_answered  # noqa: E402
from compiler.fidelity.sweeps import (  # noqa: E402
    DEFAULT_CSV, ENGINE_OF, HOLD_OUT, KERNEL_EFFS, chosen, errors, fit, held_out, load_rows, mixing_engines, params,
    physics, pinned_by, summary, wave_params,
)
from compiler.fidelity.sweeps_report import VIEWS, judge, kept_below, markdown  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=sweeps.__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    parser.add_argument("--fit", action="store_true", help="fit each engine on all its rows and print the values")
    parser.add_argument("--loo", action="store_true", help="leave-one-group-out error (fits per held-out group)")
    parser.add_argument("--loo-by", default="", metavar="KEYS",
                        help="comma-separated among model, device, engine: leave every group of one model (device, "
                             "engine) out at once; the fit is judged on the worst of them")
    parser.add_argument("--worst", type=int, default=5, help="worst groups to list (default 5)")
    parser.add_argument("--answered", action="store_true",
                        help="count the rows `gimletc estimate` answers and refuses, over this file, "
                             "../shared/reference/measurements.csv and cost_models/data/ (`tools/fidelity.py --answered`)")
    parser.add_argument("--markdown", type=Path, metavar="PATH",
                        help="also write the report as Markdown tables to PATH (docs/fidelity.md)")
    parser.add_argument("--jobs", type=int, default=1, help="held-out folds fitted at once (processes; default 1)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    from backends.engines import all_costs

    rows = load_rows(args.csv)
    if args.answered:
        print_answered(all_rows(sweeps=args.csv), {})
        return
    keys = [k for k in args.loo_by.split(",") if k]
    if bad := [k for k in keys if k not in HOLD_OUT]:
        parser.error(f"--loo-by: {', '.join(bad)} is not one of {', '.join(HOLD_OUT)}")
    phys = physics(rows)
    engines = dict(all_costs())
    report: dict = {"pinned_by": pinned_by(rows)}
    grid = {k: physics(rows, k) for k in KERNEL_EFFS} if args.fit or args.loo or keys else {}
    if args.fit:
        engines, kernels = fit(rows, grid, engines)
        phys = chosen(rows, grid, kernels)
        mixing = mixing_engines(rows)
        report["fitted"] = {name: {p.name: getattr(engines[name], p.name) for p in params()
                                   if p not in wave_params() or name in mixing}
                            for name in sorted({ENGINE_OF[r["backend"]] for r in rows})}
        report["kernels"] = {d: dict(zip(("compute_eff", "mem_eff", "fp8_compute_eff"), k)) for d, k in kernels.items()}
    report["in_sample"] = summary(errors(rows, phys, engines))
    for key in (["group"] if args.loo else []) + keys:
        report[f"leave_one_{key}_out"] = summary(held_out(rows, grid, HOLD_OUT[key], args.jobs))
    if args.markdown:
        args.markdown.write_text(markdown(report, sys.argv[1:]) + kept_below(args.markdown))
    if args.json:
        print(json.dumps(report, indent=1, sort_keys=True))
        return
    for name, values in report.get("fitted", {}).items():
        print(f"{name}: " + ", ".join(f"{k}={v:.4g}" for k, v in values.items()))
    for d, values in report.get("kernels", {}).items():
        print(f"{d}: " + ", ".join(f"{k}={v:.4g}" for k, v in values.items()))
    for name, pins in report["pinned_by"].items():
        print(f"{name}: pinned by {len(pins)} group(s)" + (" -- an assumption" if len(pins) < 2 else ""))
    for key in VIEWS:
        if key not in report:
            continue
        s = report[key]
        print(f"\n{key.replace('_', ' ')}: {s['rows']} rows, median APE TTFT {s['ttft_median_ape']:.1f}%, "
              f"TPOT {s['tpot_median_ape']:.1f}%")
        for g, v in s["groups"].items():
            print(f"  {g:50s} {v['rows']:4d} rows  TTFT {v['ttft_median_ape']:6.1f}% ({v['ttft_median_err']:+6.1f}%)"
                  f"  TPOT {v['tpot_median_ape']:6.1f}% ({v['tpot_median_err']:+6.1f}%)")
        worst = sorted(s["groups"].items(), key=lambda kv: -(kv[1]["ttft_median_ape"] + kv[1]["tpot_median_ape"]))
        print("  worst: " + "; ".join(f"{g} (TTFT {v['ttft_median_ape']:.0f}%, TPOT {v['tpot_median_ape']:.0f}%)"
                                       for g, v in worst[:args.worst]))
    if judged := judge(report, keys):
        k, s = judged
        print(f"\nthe fit is judged on the worst held-out view: leave one {k} out, TTFT {s['ttft_median_ape']:.1f}%, "
              f"TPOT {s['tpot_median_ape']:.1f}%")


if __name__ == "__main__":
    main()
