"""``gimletc pareto``: the speed-vs-throughput frontier, written as CSV, JSON and a PNG plot.

The sweep itself is `compiler.driver.pareto`; this module writes what it returns.
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
COLUMNS = ["curve", "tpot_target_ms", "worst_tpot_ms", "tokens_per_s_per_user", "output_tokens_per_s",
           "provisioned_power_w", "power_w", "output_tokens_per_s_per_mw", "status", "prediction"]


def register(sub) -> None:
    p = sub.add_parser(
        "pareto", help="sweep TPOT targets: tokens/s per user vs tokens/s per MW, heterogeneous and homogeneous",
        description="Solve the placement for a sweep of TPOT targets and write the frontier of tokens/s per "
                    "user against tokens/s per MW (heterogeneous fleet and best single device type) as "
                    "DIR/pareto.png, .csv and .json (and DIR/status.json). Predictions of the cost model. "
                    "Exits 3, writing no frontier, when no point is feasible.")
    options.add_placement_inputs(p)
    p.add_argument("--points", type=options.positive_int, default=8, help="TPOT targets in the sweep (default 8)")
    options.add_json(p, "the frontier (pareto.json's content)")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from compiler.cli.status import clear, recorded
    from compiler.driver import Timings, pareto

    out = check_out_dir(args.out)
    clear(out, OUTPUTS)
    timings, wrote = Timings(), []
    with recorded(out, "pareto", timings, wrote, OUTPUTS):
        title, rows = pareto(args.model, args.cluster, args.workload, power_budget_w=args.power_budget,
                             precision=options.precision_of(args), points=args.points, time_limit_s=args.time_limit,
                             progress=progress_for(args), timings=timings)
        with timings.step("write"):
            write(rows, out, title)
        wrote += list(OUTPUTS)
    if args.json:
        print(json.dumps({"title": title, "points": rows}, indent=1, sort_keys=True))
    elif not args.quiet:
        het = sum(r["curve"] == "heterogeneous" for r in rows)
        print(f"{title}: {het} heterogeneous and {len(rows) - het} single-device-type points (predicted); "
              f"wrote {out / 'pareto.png'}, .csv and .json. {timings_line(timings.as_dict())}")
    return 0


def best_homogeneous(rows: list[dict]) -> list[dict]:
    """Per TPOT target, the homogeneous curve point with the most tokens/s per MW."""
    best: dict[float, dict] = {}
    for r in rows:
        if r["curve"].startswith("homogeneous:"):
            key = r["tpot_target_ms"]
            if key not in best or r["output_tokens_per_s_per_mw"] > best[key]["output_tokens_per_s_per_mw"]:
                best[key] = r
    return [best[k] for k in sorted(best)]


def write(rows: list[dict], out: Path, title: str) -> None:
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "pareto.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=COLUMNS)
        w.writeheader()
        w.writerows(rows)
    (out / "pareto.json").write_text(json.dumps({"title": title, "points": rows}, indent=1, sort_keys=True) + "\n")
    _plot(rows, out / "pareto.png", title)


def _plot(rows: list[dict], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    het = [r for r in rows if r["curve"] == "heterogeneous"]
    homo = best_homogeneous(rows)
    for pts, label, style in ((het, "heterogeneous (gimletc plan)", "o-"), (homo, "best single device type", "s--")):
        if pts:
            ax.plot([r["tokens_per_s_per_user"] for r in pts], [r["output_tokens_per_s_per_mw"] / 1e3 for r in pts],
                    style, label=label)
    ax.set_xlabel("tokens/s per user (1000 / worst TPOT ms)")
    ax.set_ylabel("output tokens/s per kW provisioned")
    ax.set_title(f"Predicted Pareto frontier\n{title}", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend()
    ax.set_yscale("log")  # throughput per kW spans orders of magnitude across the sweep
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)
