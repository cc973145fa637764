"""How wrong are the predictions? `estimate` against published measurements.

Runs `gimletc estimate` (in-process, one BlockGraph per model) on every row of
../shared/reference/measurements.csv and prints per-row predicted vs measured,
absolute percentage error, and the median APE overall and per vendor family.

    .venv/bin/python tools/fidelity.py [--csv PATH] [--fit] [--json]

``--fit`` searches each family's derate (compute_eff, mem_eff,
block_overhead_s, step_overhead_s) within physically plausible bounds
(`PARAMS`) with the shared derate fitter (`compiler.calibrate.fit`, see
[Note: derate fit]) to minimise that family's median APE plus 5% of its worst
row, and prints the fitted values to paste into cost_models/derates.py.
Derates are fitted on this file only.
Rows with ``batch=max`` use the static-batch mode at the largest batch that
fits memory (`--batch max`).
"""

from __future__ import annotations

import argparse
import csv
import json
import statistics
import sys
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DEFAULT_CSV = REPO.parent / "shared" / "reference" / "measurements.csv"

def _params():
    """What --fit searches: plausible values only (an overhead's lower bound stands for "none")."""
    from compiler.calibrate.fit import Param

    return (Param("compute_eff", 0.3, 0.8), Param("mem_eff", 0.4, 0.9), Param("block_overhead_s", 1e-7, 80e-6),
            Param("step_overhead_s", 1e-6, 4e-3))


def load_rows(path: Path) -> list[dict]:
    with open(path, newline="") as f:
        return list(csv.DictReader(f))


def predict(row: dict, graphs: dict, derates: dict | None = None) -> float:
    from compiler.cost.deployment import deployment
    from compiler.cost.estimate import estimate
    from compiler.driver import block_graph
    from compiler.inputs.scenarios import batch
    from compiler.ir.precision import Precision

    model = row["model"]
    if model not in graphs:
        graphs[model] = block_graph(model)
    dep = deployment(row["device"], int(row["count"]), int(row["tp"]), int(row["pp"]), Precision.of(row["dtype"]))
    if derates and dep.device.family in derates:
        dep = replace(dep, derate=derates[dep.device.family])
    r = estimate(graphs[model], dep, input_len=int(row["input_len"]), output_len=int(row["output_len"]),
                 batch=batch(row["batch"]))
    return float(getattr(r, row["metric"]))


def evaluate_rows(rows: list[dict], graphs: dict, derates: dict | None = None) -> list[dict]:
    from backends.registry import device

    out = []
    for row in rows:
        measured = float(row["value"])
        try:
            predicted = predict(row, graphs, derates)
            ape = abs(predicted - measured) / measured * 100
            error = ""
        except Exception as e:  # report the row, keep going
            predicted, ape, error = float("nan"), float("nan"), f"{type(e).__name__}: {e}"
        out.append({"id": row["id"], "model": row["model"], "device": row["device"],
                    "family": device(row["device"]).family, "count": row["count"], "dtype": row["dtype"],
                    "batch": row["batch"], "in": row["input_len"], "out": row["output_len"], "metric": row["metric"],
                    "measured": measured, "predicted": predicted, "ape_pct": ape, "error": error})
    return out


def medians(results: list[dict]) -> dict[str, float]:
    ok = [r for r in results if r["ape_pct"] == r["ape_pct"]]
    out = {"overall": statistics.median(r["ape_pct"] for r in ok)}
    for fam in sorted({r["family"] for r in ok}):
        out[fam] = statistics.median(r["ape_pct"] for r in ok if r["family"] == fam)
    return out


def fit(rows: list[dict], graphs: dict) -> dict:
    from compiler.calibrate.fit import fit_fields
    from cost_models.derates import DERATES, GENERIC

    fitted = {}
    for fam in sorted({_family(r["device"]) for r in rows}):
        fam_rows = [r for r in rows if _family(r["device"]) == fam]

        def evaluate(candidate, fam=fam, fam_rows=fam_rows):
            res = evaluate_rows(fam_rows, graphs, {fam: candidate})
            errs = [r["ape_pct"] for r in res if r["ape_pct"] == r["ape_pct"]]
            return (statistics.median(errs) + 0.05 * max(errs) if errs else float("inf")), candidate

        fitted[fam] = fit_fields(evaluate, DERATES.get(fam, GENERIC), _params(), grid_points=3, restarts=2)
    return fitted


def _family(device_id: str) -> str:
    from backends.registry import device

    return device(device_id).family


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--csv", type=Path, default=DEFAULT_CSV)
    parser.add_argument("--fit", action="store_true", help="fit per-family derates on the file")
    parser.add_argument("--loo", action="store_true",
                        help="leave-one-out: predict each row with derates fitted on the other rows of its family")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    rows = load_rows(args.csv)
    graphs: dict = {}
    derates = None
    if args.fit:
        derates = fit(rows, graphs)
        for fam, d in derates.items():
            print(f"{fam}: compute_eff={d.compute_eff} mem_eff={d.mem_eff} block_overhead_s={d.block_overhead_s} "
                  f"step_overhead_s={d.step_overhead_s}")
    results = evaluate_rows(rows, graphs, derates)
    if args.loo:
        from cost_models.derates import GENERIC

        for i, row in enumerate(rows):
            fam = _family(row["device"])
            others = [r for j, r in enumerate(rows) if j != i and _family(r["device"]) == fam]
            # A family with no other row has nothing to fit on: it falls back to the generic prior.
            held = evaluate_rows([row], graphs, fit(others, graphs) if others else {fam: GENERIC})[0]
            results[i]["loo_ape_pct"] = held["ape_pct"]
    summary = medians(results)
    if args.json:
        print(json.dumps({"rows": results, "median_ape_pct": summary}, indent=1))
        return
    print(f"{'id':5} {'model':15} {'device':21} {'n':>2} {'dtype':5} {'batch':>5} {'in':>6} {'out':>5} "
          f"{'metric':22} {'measured':>10} {'predicted':>10} {'APE%':>6}")
    for r in results:
        print(f"{r['id']:5} {r['model']:15} {r['device']:21} {r['count']:>2} {r['dtype']:5} {r['batch']:>5} "
              f"{r['in']:>6} {r['out']:>5} {r['metric']:22} {r['measured']:10.4g} {r['predicted']:10.4g} "
              f"{r['ape_pct']:6.1f} {r['error']}")
    print("median APE %: " + ", ".join(f"{k} {v:.1f}" for k, v in summary.items()))
    if args.loo:
        loo = [dict(r, ape_pct=r["loo_ape_pct"]) for r in results]
        print("leave-one-out median APE %: " + ", ".join(f"{k} {v:.1f}" for k, v in medians(loo).items()))


if __name__ == "__main__":
    main()
