"""Benchmark the sensitivity analysis both ways in one process: every move re-solved whole (as before the bounds)
against the moves answered from bounds where they meet ([Note: what-if bounds] in compiler/place/what_if.py).

One compile is prepared and placed (the README's mixed fleet with the ``mix`` workload by default); then its
analysis runs in this process and thread, task by task as `Analysis` takes them (`compiler.sensitivity.tasks`):
each task the new way and its moves the old way, in turn, the order alternating (``--repeat`` rounds, medians of
each way's wall and CPU seconds reported): the ratio old / new is the result (this machine's speed varies and
others share it; interleaving keeps a drift in its load out of the ratio).
Per move it prints both objective changes, their difference, and how the new way answered: ``skip`` (a device
type the plan does not use, made worse), ``same`` (the factor reaches no option), ``bound`` (worse everywhere,
the plan's pools re-solved alone within the gap of the plan's bound), ``union`` (moves of unused device types
bounded together) or ``solve`` (re-solved whole). ``--exact`` also proves each move's optimum by an independent
solve (presolve on, no start, ``exact``) and prints how far below it each answer lies, against the analysis
gap, and checks that each skipped move made no option better. Nothing here is asserted on time (STYLE.md:
benchmarks print ratios); ``--exact`` exits 1 when an answer lies outside the gap or a skip was not sound.

    .venv/bin/python tools/bench_sensitivity.py [--repeat N] [--exact] [MODEL [CLUSTER WORKLOAD]]
"""

from __future__ import annotations

import argparse
import logging
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

DEFAULT = ("llama-3.1-70b", "examples/clusters/mixed.yaml", "examples/workloads/mix.yaml")


def _both_ways(prep, point, objective, every, repeat: int) -> tuple[list, list, dict, list, list]:
    """Both ways, task by task (`compiler.sensitivity.tasks`): each task answered the new way and its moves the
    old way, in turn, the order alternating, `repeat` times; the rows of each way, how the new way answered each
    move, and each way's (wall, CPU) seconds per round. Interleaving keeps a drift in this machine's load (others
    share it) out of the ratio."""
    import compiler.sensitivity as sensitivity

    every_task = sensitivity.tasks(point, objective, every)
    solved, old, new = set(), {}, {}
    rounds_old, rounds_new = [[0.0, 0.0] for _ in range(repeat)], [[0.0, 0.0] for _ in range(repeat)]
    resolved = sensitivity.resolved

    def counting(prep_, point_, objective_, move, options, also=None):
        solved.add(every.index(move))
        return resolved(prep_, point_, objective_, move, options, also)

    def old_way(task):
        return {i: sensitivity.evaluate(prep, point, objective, every[i], bounds=False) for i in task}

    def new_way(task):
        sensitivity.resolved = counting
        try:
            return sensitivity.evaluate_task(prep, point, objective, every, task)
        finally:
            sensitivity.resolved = resolved

    for r in range(repeat):
        for t, task in enumerate(every_task):
            for way in ((old_way, new_way) if (r + t) % 2 == 0 else (new_way, old_way)):
                took, rows = _timed(lambda: way(task))
                spent = rounds_old[r] if way is old_way else rounds_new[r]
                spent[0] += took[0]
                spent[1] += took[1]
                (old if way is old_way else new).update(rows)
    how = {}
    for i, m in enumerate(every):
        together = any(len(t) > 1 and i in t for t in every_task)
        how[i] = "skip" if sensitivity.skipped(point, objective, m) else "solve" if i in solved else \
            "same" if new[i].objective_change == 0.0 and not new[i].solve_gap else "union" if together else "bound"
    return [old[i] for i in range(len(every))], [new[i] for i in range(len(every))], how, rounds_old, rounds_new


def _timed(run) -> tuple[tuple[float, float], list]:
    """Wall and CPU seconds of `run` (this process: the solver's threads included), and what it returned."""
    start, cpu = time.perf_counter(), time.process_time()
    rows = run()
    return (time.perf_counter() - start, time.process_time() - cpu), rows


def _proven(prep, every, objective) -> tuple[list[float | None], list[bool]]:
    """Each move's optimum, proven by an independent solve (None: the factor reaches no option), and whether the
    move made no option better (`compiler.place.what_if.no_better_options`: what skipping a move trusts)."""
    from compiler.place.ilp import solve
    from compiler.place.what_if import no_better_options
    from compiler.sensitivity import options_at, unchanged

    values, worse = [], []
    for m in every:
        options = options_at(prep, m)
        worse.append(no_better_options(options, prep.options))
        if unchanged(prep, options):
            values.append(None)
            continue
        s = solve(prep.instance.with_options(options), objective, exact=True)
        values.append(s.objective.value if s.feasible else 0.0)
    return values, worse


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("inputs", nargs="*", help="MODEL [CLUSTER WORKLOAD] (default: 70B, mixed fleet, mix)")
    parser.add_argument("--objective", default="throughput")
    parser.add_argument("--repeat", type=int, default=1, help="rounds of both ways (medians reported)")
    parser.add_argument("--exact", action="store_true", help="prove every move's optimum and report the deviation")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    model, cluster, workload = (list(args.inputs) + list(DEFAULT[len(args.inputs):]))[:3]

    from compiler.driver import prepare
    from compiler.ir.placement import OBJECTIVE_SENSE
    from compiler.place.ilp import ANALYSIS_GAP, solve
    from compiler.sensitivity import PlanPoint, moves

    prep = prepare(model, str(REPO / cluster), str(REPO / workload))
    sol = solve(prep.instance, args.objective)
    point = PlanPoint.of(sol)
    every = moves(prep)
    print(f"{model} on {cluster} with {workload}, {args.objective}: {len(prep.options)} options, "
          f"{len(every)} moves, plan {point.value:.4g} (bound {point.bound:.4g})")
    old, new, how, old_s, new_s = _both_ways(prep, point, args.objective, every, args.repeat)
    proven, worse = _proven(prep, every, args.objective) if args.exact else ([None] * len(every), [True] * len(every))
    sense = OBJECTIVE_SENSE[args.objective]
    print(f"\n{'move':42s} {'old':>8s} {'new':>8s} {'new-old':>8s}  how  " + ("below exact" if args.exact else ""))
    worst, outside = 0.0, []
    for i, m in enumerate(every):
        a, b = old[i].objective_change, new[i].objective_change
        line = f"{m.label + f' {m.change:+.0%}':42s} {a:+8.2%} {b:+8.2%} {b - a:+8.2%}  {how[i]:5s}"
        if how[i] == "skip" and not worse[i]:
            line += " (SKIPPED, yet some option got better)"
            outside.append(m.label)
        if proven[i] is not None:
            value = (1 + b) * point.value
            short = (proven[i] - value if sense == "max" else value - proven[i]) / abs(proven[i])
            worst = max(worst, short)
            line += f" {short:+.3%}"
            if short > ANALYSIS_GAP + 1e-9:
                outside.append(m.label)
        print(line)
    counts = {k: sum(1 for v in how.values() if v == k) for k in ("skip", "same", "bound", "union", "solve")}
    diff = max(abs(n.objective_change - o.objective_change) for n, o in zip(new, old))
    for k, what in ((0, "wall"), (1, "CPU")):
        a, b = (statistics.median(t[k] for t in s) for s in (old_s, new_s))
        print(f"{'' if k else chr(10)}{what}: old {a:.2f} s, new {b:.2f} s, ratio old/new {a / b:.2f}x (runs: old "
              f"{', '.join(f'{t[k]:.1f}' for t in old_s)}; new {', '.join(f'{t[k]:.1f}' for t in new_s)})")
    print("answered: " + ", ".join(f"{k} {n}" for k, n in counts.items())
          + f"; without a whole re-solve: {len(every) - counts['solve']} of {len(every)}")
    print(f"largest difference in objective change, new against old: {diff:.3%} (analysis gap {ANALYSIS_GAP:.0%})")
    if args.exact:
        print(f"largest shortfall against the proven optimum: {worst:.3%}"
              + (f"; OUTSIDE the gap: {', '.join(outside)}" if outside else " (all within the gap)"))
        if outside:
            raise SystemExit(1)


if __name__ == "__main__":
    main()
