"""tools/fidelity.py's report: per device its rows and errors (`device_table`), and docs/fidelity-published.md
(`markdown`)."""

from __future__ import annotations

import statistics

from compiler.fidelity.measurements import family_of

def device_table(results: list[dict], key: str) -> list[dict]:
    """Per device id: its family, rows, median APE of `key` and median signed error, worst rows."""
    out = []
    for dev in sorted({r["device"] for r in results}):
        rows = [r for r in results if r["device"] == dev and r[key] == r[key]]
        signed = "loo_err_pct" if key == "loo_ape_pct" else "err_pct"
        worst = sorted(rows, key=lambda r: -r[key])[:3]
        out.append({"device": dev, "family": family_of(dev), "rows": len(rows),
                    "median_ape_pct": statistics.median(r[key] for r in rows) if rows else float("nan"),
                    "median_err_pct": statistics.median(r[signed] for r in rows) if rows else float("nan"),
                    "worst": [(r["id"], round(r[key], 1)) for r in worst]})
    return out


#: Leave-one-out is reported per device where a device has at least this many rows; fewer, and its factors are
#: moved by the plan's sensitivity instead (`cost_models.derates.Derate.assumed`).
MIN_DEVICE_ROWS = 3


def markdown(argv: list[str], loo_table: list[dict] | None, heldout: list[dict] | None) -> str:
    """docs/fidelity-published.md: leave-one-out per non-NVIDIA device and the held-out set's predictions."""
    def table(head: list[str], body: list[list[str]]) -> list[str]:
        return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in body]

    out = ["# Fidelity against published measurements, per device", "",
           "Regenerate with one command:", "", "    .venv/bin/python tools/fidelity.py " + " ".join(argv), "",
           "Every figure is `gimletc estimate` against a published number of ../shared/reference/measurements.csv and "
           "cost_models/data/ (sources, conditions and assumptions in each row's `notes`; cost_models/data/README.md). "
           "*APE* is the absolute percentage error, the signed *error* (predicted - measured) / measured. Each family's "
           "derate (cost_models/derates.py) is fitted on its rows; rows measured under another engine release run at "
           "that release's published speed ([Note: engine releases]); rows that decode speculatively through the "
           "speculative model (their `drafter` columns; `fused` where drafter and target ran as one program).", ""]
    if loo_table is not None:
        out += ["## Leave one row out, per device", "",
                "Each row predicted with its family's derate fitted on the family's other rows only (the fitter "
                f"refuses the row it predicts). Devices with fewer than {MIN_DEVICE_ROWS} rows are listed but not "
                "judged: their factors are assumed, and the plan's sensitivity moves them.", ""]
        out += table(["device", "family", "rows", "median APE", "median error", "worst rows (APE %)", "judged"],
                     [[t["device"], t["family"], str(t["rows"]), f"{t['median_ape_pct']:.1f}%",
                       f"{t['median_err_pct']:+.1f}%", ", ".join(f"{i} {e}" for i, e in t["worst"]),
                       "yes" if t["rows"] >= MIN_DEVICE_ROWS else "no (fewer rows)"] for t in loo_table]) + [""]
    if heldout is not None:
        out += ["## Held-out published rows", "",
                "cost_models/data/heldout/: published rows no fit ever sees (`tools/fidelity.py` refuses them as "
                "fitting rows). Each is predicted with its family's derate fitted on all the family's fitting rows.", ""]
        out += table(["device", "rows", "median APE", "median error"],
                     [[t["device"], str(t["rows"]), f"{t['median_ape_pct']:.1f}%", f"{t['median_err_pct']:+.1f}%"]
                      for t in device_table(heldout, "ape_pct")]) + [""]
        out += table(["id", "model", "device", "metric", "measured", "predicted", "error"],
                     [[r["id"], r["model"], r["device"], r["metric"], f"{r['measured']:.4g}", f"{r['predicted']:.4g}",
                       f"{r['err_pct']:+.1f}%"] for r in heldout]) + [""]
    return "\n".join(out)
