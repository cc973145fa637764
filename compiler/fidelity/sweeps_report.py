"""tools/fidelity_sweeps.py's report: the tables of docs/fidelity.md (`markdown`), the worst held-out view
(`judge`), and the hand-written text below the tables that regenerating keeps (`kept_below`)."""

from __future__ import annotations

from pathlib import Path

from compiler.fidelity.sweeps import BREAKDOWN, HOLD_OUT

VIEWS = ("in_sample", *(f"leave_one_{k}_out" for k in HOLD_OUT))

#: The line below which a --markdown file is written by hand: regenerating the tables keeps everything after it.
HAND_WRITTEN = "<!-- Written by hand below this line: tools/fidelity_sweeps.py --markdown keeps it. -->"


def kept_below(path: Path) -> str:
    """What `path` holds from the `HAND_WRITTEN` line on (the line included), or just that line."""
    old = path.read_text() if path.is_file() else ""
    return old[old.index(HAND_WRITTEN):] if HAND_WRITTEN in old else "\n" + HAND_WRITTEN + "\n"


def judge(report: dict, keys: list[str]) -> tuple[str, dict] | None:
    """The worst of the leave-one-model/device/engine-out views (TTFT plus TPOT median APE)."""
    judged = [(k, report[f"leave_one_{k}_out"]) for k in keys if f"leave_one_{k}_out" in report]
    return max(judged, key=lambda kv: kv[1]["ttft_median_ape"] + kv[1]["tpot_median_ape"]) if judged else None


def markdown(report: dict, argv: list[str]) -> str:
    """The report as docs/fidelity.md: per view, the overall figures and one table per group, model, device and
    engine (median APE and median signed error), the fitted constants and what pins them down."""
    def table(head: list[str], body: list[list[str]]) -> list[str]:
        return ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)] + ["| " + " | ".join(r) + " |" for r in body]

    def cells(v: dict) -> list[str]:
        return [str(v["rows"]), f"{v['ttft_median_ape']:.1f}%", f"{v['ttft_median_err']:+.1f}%",
                f"{v['tpot_median_ape']:.1f}%", f"{v['tpot_median_err']:+.1f}%"]

    head = ["rows", "TTFT median APE", "TTFT median error", "TPOT median APE", "TPOT median error"]
    out = ["# Serving-model fidelity: predictions against measured serving sweeps", "",
           "Regenerate with one command (36 kernel sets costed per row, then 19 held-out fits: about 10 minutes on "
           "two cores with `--jobs 2`, with the models' traces cached):", "",
           "    .venv/bin/python tools/fidelity_sweeps.py " + " ".join(a for a in argv), "",
           "Every figure is the closed-loop serving model (`gimletc estimate --concurrency C`) against the 842 rows of "
           "../shared/reference/serving_sweeps.csv. *APE* is the absolute percentage error; the signed *error* is "
           "(predicted - measured) / measured: positive means the prediction is slower than the measurement. "
           "*In sample* is scored with the constants fitted on all rows; *leave one X out* predicts every row of one "
           "X (a model x device x engine group, a model, a device, an engine) with everything fitted on the other "
           "rows only: the figure to expect on a model, GPU or engine the fit never saw. A device left out runs at "
           "its family's fitted devices' kernel efficiencies ([Note: one efficiency per device] in "
           "cost_models/derates.py).", ""]
    views = [(k, report[k]) for k in VIEWS if k in report]
    out += ["## Overall", ""] + table(["view"] + head, [[k.replace("_", " ")] + cells(v) for k, v in views]) + [""]
    judged = judge(report, [k for k in HOLD_OUT if k != "group"])
    if judged:
        out += [f"The fit is judged on the worst held-out view: leave one {judged[0]} out.", ""]
    for by in BREAKDOWN:
        name = "groups" if by == "group" else f"by_{by}"
        out += [f"## Per {by}", ""]
        body = [[g, k.replace("_", " ")] + cells(v) for g in sorted(views[0][1][name])
                for k, view in views for gg, v in view[name].items() if gg == g]
        out += table([by, "view"] + head, body) + [""]
    if "kernels" in report:
        out += ["## Fitted constants", ""]
        out += table(["device", "compute_eff", "mem_eff", "fp8_compute_eff"],
                     [[d] + [f"{v:.3g}" for v in k.values()] for d, k in report["kernels"].items()]) + [""]
        names = sorted({p for e in report["fitted"].values() for p in e})
        out += table(["engine"] + names, [[n] + [f"{e[p]:.4g}" if p in e else "" for p in names]
                                          for n, e in report["fitted"].items()]) + [""]
    out += ["## What pins each constant down", "",
            "A constant pinned down by a single group is an assumption: the plan's sensitivity moves it.", ""]
    out += table(["constant", "groups", "status"], [[n, str(len(g)), "assumption" if len(g) < 2 else "fitted"]
                                                    for n, g in report["pinned_by"].items()]) + [""]
    return "\n".join(out)
