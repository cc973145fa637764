"""Benchmark: ``gimletc pareto`` with N points against one ``gimletc compile`` of the same inputs.

    python tools/bench_pareto.py [--model llama-3.1-70b] [--cluster examples/clusters/mixed.yaml]
                                 [--workload examples/workloads/chat.yaml] [--points 10] [--repeat 1]

The target: a 10-point frontier, the plan and every baseline at each point, in at most twice the
time of one compile. The sweep costs the pool options and the single-type fleets once and re-reads their latency
curves at each TPOT target (`Instance.with_slo`), so the marginal point is only solves.

Both run in this process through the driver, after a warm-up compile that fills the trace cache (so neither
pays for tracing). Baseline measured in the same run: the compile as ``gimletc compile`` runs it by default
(baselines and the sensitivity analysis included), and also without the sensitivity analysis
(``--no-sensitivity``), the stricter yardstick. Wall time and this process's CPU time (the solver's threads
included) are both printed: on a shared machine the CPU time is the steadier of the two.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def timed(fn) -> tuple[float, float, object]:
    wall, cpu = time.perf_counter(), time.process_time()
    out = fn()
    return time.perf_counter() - wall, time.process_time() - cpu, out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llama-3.1-70b")
    ap.add_argument("--cluster", default=str(REPO / "examples" / "clusters" / "mixed.yaml"))
    ap.add_argument("--workload", default=str(REPO / "examples" / "workloads" / "chat.yaml"))
    ap.add_argument("--points", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=1, help="runs of each, the median reported")
    args = ap.parse_args()

    import logging

    logging.disable(logging.WARNING)
    from compiler.driver import compile
    from compiler.sweep import pareto

    inputs = (args.model, args.cluster, args.workload)
    compile(*inputs, analyse=False, baselines=False)  # warm-up: trace cache, imports
    runs: dict[str, list[tuple[float, float]]] = {"compile": [], "compile --no-sensitivity": [], "pareto": []}
    frontier = None
    for _ in range(args.repeat):
        runs["compile"].append(timed(lambda: compile(*inputs))[:2])
        runs["compile --no-sensitivity"].append(timed(lambda: compile(*inputs, analyse=False))[:2])
        wall, cpu, frontier = timed(lambda: pareto(*inputs, points=args.points))
        runs["pareto"].append((wall, cpu))
    med = {k: (statistics.median(w for w, _ in v), statistics.median(c for _, c in v)) for k, v in runs.items()}
    het = sum(r["curve"] == "heterogeneous" for r in frontier.rows)
    print(f"{args.model} on {Path(args.cluster).name}, {Path(args.workload).name}: pareto {args.points} points "
          f"({het} of the plan, {len(frontier.rows) - het} of its baselines, {len(frontier.dropouts)} dropouts)")
    print(f"{'run':28s} {'wall s':>8s} {'cpu s':>8s}")
    for name, (wall, cpu) in med.items():
        print(f"{name:28s} {wall:8.2f} {cpu:8.2f}")
    for base in ("compile", "compile --no-sensitivity"):
        print(f"pareto / {base}: {med['pareto'][0] / med[base][0]:.2f}x wall, "
              f"{med['pareto'][1] / med[base][1]:.2f}x cpu (target <= 2x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
