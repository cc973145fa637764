"""``gimletc pareto``: the interactivity frontier, written as CSV, JSON and a PNG plot.

The sweep itself is `compiler.driver.pareto`; this module writes what it returns.
Any failing point of the heterogeneous plan fails the command (exit 3, naming the
point), and then no frontier file is left behind: never an empty file with exit 0.
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

from compiler.cli import options
from compiler.cli.console import check_out_dir, progress_for, timings_line

#: What pareto writes into DIR (removed before a run, so none of them outlives a failed one).
OUTPUTS = ("pareto.csv", "pareto.json", "pareto.png")
COLUMNS = ["curve", "tpot_target_ms", "tokens_per_s_per_user", "worst_tpot_ms", "output_tokens_per_s",
           "provisioned_power_w", "power_w", "output_tokens_per_s_per_mw", "cost_per_hour",
           "output_tokens_per_dollar", "devices", "status", "prediction"]
OBJECTIVES = ("tokens-per-watt", "tokens-per-dollar", "throughput")


def register(sub) -> None:
    p = sub.add_parser(
        "pareto", help="sweep TPOT targets: tokens/s per user vs tokens/s per MW and per $, plan and baselines",
        description="Solve the placement for a sweep of TPOT targets, from relaxed to the fastest any pool "
                    "reaches, and write the frontier of tokens/s per user against output tokens/s per MW "
                    "provisioned (and per dollar, when every device has a price) for the heterogeneous plan and "
                    "each baseline: every device type alone within the budget (iso-power, iso-cost), vendor "
                    "islands, no disaggregation and greedy, marking where each drops out. Writes DIR/pareto.png, "
                    ".csv and .json (and DIR/status.json). Pool options are costed once for the whole sweep. "
                    "Predictions of the cost model. Exits 3 naming the failing TPOT targets when any point of "
                    "the plan fails, writing no frontier.")
    options.add_placement_inputs(p)
    p.add_argument("--points", type=options.positive_int, default=8, help="TPOT targets in the sweep (default 8)")
    p.add_argument("--objective", choices=OBJECTIVES, default="tokens-per-watt",
                   help="what each point maximises (default tokens-per-watt)")
    options.add_json(p, "the frontier (pareto.json's content)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from compiler.cli.status import clear, recorded
    from compiler.driver import Timings, pareto

    out = check_out_dir(args.out)
    clear(out, OUTPUTS)
    timings, wrote = Timings(), []
    with recorded(out, "pareto", timings, wrote, OUTPUTS):
        frontier = pareto(args.model, args.cluster, args.workload, power_budget_w=args.power_budget,
                          precision=options.precision_of(args), points=args.points, time_limit_s=args.time_limit,
                          progress=progress_for(args), timings=timings, objective=args.objective,
                          cost_budget_per_hour=args.cost_budget)
        with timings.step("write"):
            write(frontier, out)
        wrote += list(OUTPUTS)
    if args.json:
        print(json.dumps(as_json(frontier), indent=1, sort_keys=True))
    elif not args.quiet:
        het = sum(r["curve"] == "heterogeneous" for r in frontier.rows)
        print(f"{frontier.title}: {het} points of the plan and {len(frontier.rows) - het} of its baselines "
              f"(predicted, {frontier.objective}); wrote {out / 'pareto.png'}, .csv and .json. "
              f"{timings_line(timings.as_dict())}")
        for d in frontier.dropouts:
            print(f"  {d['where']} drops out at TPOT {d['tpot_target_ms']:.1f} ms: {d['why']}" if d["posed"] else
                  f"  {d['where']} is not posed: {d['why']}")
    return 0


def as_json(frontier) -> dict:
    return {"title": frontier.title, "objective": frontier.objective, "points": frontier.rows,
            "dropouts": frontier.dropouts, "tpot_targets_ms": frontier.targets_ms}


def write(frontier, out: Path) -> None:
    if not frontier.rows:  # the driver raises before this; an empty frontier is never written
        raise AssertionError("an empty frontier reached the writer")
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "pareto.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(frontier.rows)
    (out / "pareto.json").write_text(json.dumps(as_json(frontier), indent=1, sort_keys=True) + "\n")
    _plot(frontier, out / "pareto.png")


def curves(rows: list[dict]) -> dict[str, list[dict]]:
    """Rows grouped by curve, each in order of tokens/s per user; the plan first."""
    out: dict[str, list[dict]] = {}
    for r in sorted(rows, key=lambda r: (r["curve"] != "heterogeneous", r["curve"], r["tokens_per_s_per_user"])):
        out.setdefault(r["curve"], []).append(r)
    return out


def _plot(frontier, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    by_curve = curves(frontier.rows)
    priced = all(r["output_tokens_per_dollar"] for r in frontier.rows)
    panels = [("output_tokens_per_s_per_mw", 1e3, "output tokens/s per kW provisioned")]
    if priced:
        panels.append(("output_tokens_per_dollar", 1.0, "output tokens per dollar"))
    fig, axes = plt.subplots(1, len(panels), figsize=(6.5 * len(panels) + 2.5, 5), dpi=110, squeeze=False)
    for ax, (key, scale, label) in zip(axes[0], panels):
        for name, pts in by_curve.items():
            style = dict(marker="o", linewidth=2.4, color="black") if name == "heterogeneous" else \
                dict(marker="s" if name.startswith("iso-") else "^", linewidth=1, linestyle="--", alpha=0.8)
            ax.plot([r["tokens_per_s_per_user"] for r in pts], [r[key] / scale for r in pts],
                    label="heterogeneous (gimletc plan)" if name == "heterogeneous" else name, **style)
        marks: dict[float, list[str]] = {}
        for d in frontier.dropouts:
            if d["posed"]:
                marks.setdefault(1e3 / d["tpot_target_ms"], []).append(d["where"])
        for x, names in sorted(marks.items()):
            ax.axvline(x, color="grey", linewidth=0.6, linestyle=":")
            out = "out: " + ", ".join(n.replace("iso-power:", "").replace("iso-cost:", "$") for n in names)
            ax.annotate(out if len(out) <= 70 else out[:69] + "…", (x, 0.02), xycoords=("data", "axes fraction"),
                        rotation=90, fontsize=5.5, color="grey", ha="right", va="bottom", annotation_clip=True)
        ax.set_xlabel("tokens/s per user (1000 / TPOT target ms)")
        ax.set_ylabel(label)
        ax.set_xscale("log")
        if all(r[key] and r[key] > 0 for r in frontier.rows):
            ax.set_yscale("log")  # throughput per kW spans orders of magnitude across the sweep
        ax.grid(True, alpha=0.3)
    axes[0][-1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0)
    fig.suptitle(f"Predicted interactivity frontier ({frontier.objective})\n{frontier.title}", fontsize=9)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)

