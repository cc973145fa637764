"""``gimletc pareto``: the interactivity frontier, written as CSV, JSON and a PNG plot.

The sweep itself is `compiler.sweep.pareto`; this module writes what it returns.
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
           "output_tokens_per_dollar", "devices", "status", "on_frontier", "prediction"]
OBJECTIVES = ("tokens-per-watt", "tokens-per-dollar", "throughput")


def register(sub) -> None:
    p = sub.add_parser(
        "pareto", help="sweep TPOT targets: tokens/s per user vs output tokens/s per MW (and per $), plan and "
                       "baselines",
        description="Solve the placement for a sweep of TPOT targets, from relaxed to the fastest any pool "
                    "reaches, and write the frontier of tokens/s per user against what each point maximises: "
                    "output tokens/s per MW provisioned (--objective tokens-per-watt, the default), output tokens/s "
                    "(throughput) or output tokens per dollar, and per dollar beside it when every device has a "
                    "price, for the heterogeneous plan and each baseline, named: every device type alone within "
                    "the budget (iso-power, iso-cost), vendor islands, no disaggregation and greedy, marking where "
                    "each drops out. The picture draws each curve's non-dominated points only; the CSV and JSON "
                    "keep every row, with on_frontier. Writes DIR/pareto.png, .csv and .json (and "
                    "DIR/status.json). Pool options are costed once for the whole sweep. Predictions of the cost "
                    "model. Exits 3 naming the failing TPOT targets when any point of the plan fails, writing no "
                    "frontier.")
    options.add_placement_inputs(p)
    p.add_argument("--points", type=options.positive_int, default=8, help="TPOT targets in the sweep (default 8)")
    p.add_argument("--objective", choices=OBJECTIVES, default="tokens-per-watt",
                   help="what each point maximises (default tokens-per-watt)")
    options.add_json(p, "the frontier (pareto.json's content)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from compiler.cli.status import clear, recorded
    from compiler.driver import Timings
    from compiler.sweep import pareto

    out = check_out_dir(args.out)
    clear(out, OUTPUTS)
    timings, wrote = Timings(), []
    with recorded(out, "pareto", timings, wrote, OUTPUTS):
        frontier = pareto(args.model, args.cluster, args.workload, power_budget_w=args.power_budget,
                          precision=options.precision_of(args), points=args.points, time_limit_s=args.time_limit,
                          progress=progress_for(args), timings=timings, objective=args.objective,
                          cost_budget_per_hour=args.cost_budget, calibration=args.calibration)
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
    return {"title": frontier.title, "objective": frontier.objective, "points": with_frontier_flags(frontier),
            "dropouts": frontier.dropouts, "tpot_targets_ms": frontier.targets_ms}


def write(frontier, out: Path) -> None:
    if not frontier.rows:  # the driver raises before this; an empty frontier is never written
        raise AssertionError("an empty frontier reached the writer")
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "pareto.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(with_frontier_flags(frontier))
    (out / "pareto.json").write_text(json.dumps(as_json(frontier), indent=1, sort_keys=True) + "\n")
    _plot(frontier, out / "pareto.png")


def with_frontier_flags(frontier) -> list[dict]:
    """The rows, each with ``on_frontier``: whether it is drawn, on its curve's frontier in what the sweep
    maximised ([Note: frontier points] in compiler/emit/report/plots.py)."""
    from compiler.emit.report.plots import FRONTIER_METRICS, on_frontier

    flags = on_frontier(frontier.rows, FRONTIER_METRICS[frontier.objective][0])
    return [{**r, "on_frontier": flag} for r, flag in zip(frontier.rows, flags)]


def _plot(frontier, path: Path) -> None:
    from compiler.emit.report.plots import plot_frontier

    plot_frontier(frontier.rows, path, frontier.title, frontier.objective, dropouts=frontier.dropouts)
