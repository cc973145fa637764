"""``gimletc pareto``: the speed-vs-throughput frontier of a fleet, heterogeneous and homogeneous.

For each TPOT target in a log-spaced sweep (from the fastest TPOT any pool
achieves to the slowest), solve the tokens-per-watt placement; each point is
(tokens/s per user = 1000 / worst TPOT of the plan, output tokens/s per MW
of provisioned power). The same sweep restricted to one device type at a
time gives the best homogeneous curve. Writes ``pareto.csv``, ``pareto.json``
and ``pareto.png``. All points are predictions of the cost model.
"""

from __future__ import annotations

import csv
import json
from dataclasses import replace
from pathlib import Path
from typing import Callable

from compiler.compile import build_instance
from compiler.place import solve
from compiler.pipeline import block_graph
from compiler.pool_options import enumerate_options, with_slo

#: Slowest TPOT target swept: 200 ms is 5 tokens/s per user, slower than anyone reads.
MAX_TPOT_S = 0.2


def pareto(model: str, cluster_path: str, workload_path: str, *, out_dir: str, power_budget_w: float | None = None,
           dtype: str = "bf16", points: int = 8, time_limit_s: float = 60.0,
           progress: Callable[[str], None] | None = None) -> list[dict]:
    from compiler.fleet import load_cluster, load_workload

    note = progress or (lambda _m: None)
    cluster, workload = load_cluster(cluster_path), load_workload(workload_path)
    graph = block_graph(model, progress=progress)
    options, _ = enumerate_options(graph, cluster, workload, dtype=dtype)
    budget = power_budget_w if power_budget_w is not None else cluster.power_budget_w
    base = build_instance(graph, cluster, workload, options, dtype, budget)
    tpots = sorted(o.tpot_s for o in options if o.tpot_s is not None)
    lo, hi = tpots[0], min(tpots[-1], MAX_TPOT_S)
    targets = [lo * (hi / lo) ** (i / max(points - 1, 1)) for i in range(points)]
    ttft = workload.slo.ttft_ms / 1e3 if workload.slo.ttft_ms else None
    types = [t for t, _ in base.inventory]
    rows = []
    for i, target in enumerate(targets):
        note(f"TPOT target {target * 1e3:.1f} ms ({i + 1}/{len(targets)})")
        marked = with_slo(options, ttft, target)
        for curve, subset in [("heterogeneous", marked)] + [(f"homogeneous:{t}", [o for o in marked
                                                                                 if set(o.device_types) == {t}])
                                                            for t in types]:
            if not subset:
                continue
            sol = solve(replace(base, options=tuple(subset)), "tokens-per-watt", time_limit_s=time_limit_s,
                        tie_break=False)
            if sol.status == "infeasible" or not sol.requests_per_s:
                continue
            worst = max(o.tpot_s for o, _ in sol.used(subset) if o.tpot_s is not None)
            out_tps = sol.requests_per_s * workload.mean_output_len
            rows.append({"curve": curve, "tpot_target_ms": target * 1e3, "worst_tpot_ms": worst * 1e3,
                         "tokens_per_s_per_user": 1.0 / worst, "output_tokens_per_s": out_tps,
                         "provisioned_power_w": sol.provisioned_w, "power_w": sol.power_w,
                         "output_tokens_per_s_per_mw": out_tps / (sol.provisioned_w / 1e6),
                         "status": sol.status, "prediction": True})
    _write(rows, Path(out_dir), f"{graph.model} on {cluster.name}, workload {workload.name}")
    return rows


def best_homogeneous(rows: list[dict]) -> list[dict]:
    """Per TPOT target, the homogeneous curve point with the most tokens/s per MW."""
    best: dict[float, dict] = {}
    for r in rows:
        if r["curve"].startswith("homogeneous:"):
            key = r["tpot_target_ms"]
            if key not in best or r["output_tokens_per_s_per_mw"] > best[key]["output_tokens_per_s_per_mw"]:
                best[key] = r
    return [best[k] for k in sorted(best)]


def _write(rows: list[dict], out: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out.mkdir(parents=True, exist_ok=True)
    columns = ["curve", "tpot_target_ms", "worst_tpot_ms", "tokens_per_s_per_user", "output_tokens_per_s",
               "provisioned_power_w", "power_w", "output_tokens_per_s_per_mw", "status", "prediction"]
    with open(out / "pareto.csv", "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=columns)
        w.writeheader()
        w.writerows(rows)
    (out / "pareto.json").write_text(json.dumps({"title": title, "points": rows}, indent=1, sort_keys=True) + "\n")
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
    fig.savefig(out / "pareto.png")
    plt.close(fig)
