"""A deterministic portfolio of CP-SAT searches: how `PlacementModel.search` (`compiler.place.ilp`) optimises
one objective on two cores and gives the same answer on any machine.

[Note: a deterministic portfolio] No single CP-SAT configuration suits every
instance here: the default search (LP at level 1) finds good placements of
the big 70B mixes but cannot prove a 405B mix (bound 45% above the best)
or find any placement of mixtral-8x7b on the mixed fleet within 5
deterministic seconds, while a full linearisation (level 2) with
pseudo-cost branching proves both in a tenth of a second and does worse on
the mixes. CP-SAT's own parallel portfolio is not repeatable, so `search`
runs each configuration of `PORTFOLIO` single-threaded (deterministic) on
its own thread, each with the same deterministic budget, and keeps the
best placement (the first configuration's on a tie) with the tightest
bound: the same inputs give the same plan on any machine, and two cores
search at once. A configuration that proves its answer (or reaches the gap
asked for) within `QUICK_PROOF_DETERMINISTIC_S` decides (the earliest such
in `PORTFOLIO`); failing that, the first configuration's proof decides; the
others are then stopped unread (what a stopped search reports depends on
when it stopped). Which configuration proves quickly is itself
deterministic: one still running when that matters is re-run within the
quick budget, which reaches what its full run would have by then. The 405B
mix is the case: the second configuration proves it in 0.03
deterministic seconds while the first spends its whole budget (1.7 s of
wall time) without a proof. Every search starts from the greedy placement
(or the plan's, in the sensitivity re-solves) as a hint.
"""

from __future__ import annotations

from typing import Callable

QUICK_PROOF_DETERMINISTIC_S = 0.1
#: CP-SAT configurations `search` runs side by side (names of `cp_model` constants as strings).
PORTFOLIO = ({}, {"linearization_level": 2, "search_branching": "PSEUDO_COST_SEARCH"})


def search(model, new_solver: Callable, sense: str, budget: float):
    """Optimise `model`'s objective (a `cp_model.CpModel`, objective set) with every `PORTFOLIO` configuration at
    once, one thread each, `budget` deterministic seconds each; `new_solver(**parameters)` makes a configured
    `CpSolver`. Returns (solver, status): a quick proof, else the first configuration's proof, else the best
    placement found carrying the tightest bound any search proved."""
    from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

    from ortools.sat.python import cp_model as cp

    configs = [{k: getattr(cp, v) if isinstance(v, str) else v for k, v in c.items()} for c in PORTFOLIO]
    solvers = [new_solver(max_deterministic_time=budget, **c) for c in configs]
    runs: dict[int, tuple] = {}

    def quick_rerun(i: int) -> tuple:  # what a still-running search reaches within the quick budget
        solver = new_solver(max_deterministic_time=QUICK_PROOF_DETERMINISTIC_S, **configs[i])
        return solver, solver.solve(model)

    with ThreadPoolExecutor(len(solvers)) as pool:  # CP-SAT releases the GIL while it searches
        pending = {pool.submit(s.solve, model): i for i, s in enumerate(solvers)}
        while pending:
            done, _running = wait(pending, return_when=FIRST_COMPLETED)
            for future in done:
                i = pending.pop(future)
                runs[i] = (solvers[i], future.result())
            found = decided(runs, len(solvers), quick_rerun)
            if found is not None:  # what a stopped search reports depends on when it stopped: not read
                for s in solvers:
                    s.stop_search()
                return found
    return best_of([runs[i] for i in range(len(solvers))], sense)


def decided(runs: dict, configs: int, quick_rerun: Callable):
    """The search's answer once it no longer depends on the searches still running, else None: the earliest
    configuration that proves within `QUICK_PROOF_DETERMINISTIC_S`, else the first configuration's proof.
    A configuration still running when that needs its quick answer is re-run within the quick budget, which
    reaches exactly what its full run would have by then."""
    from ortools.sat.python.cp_model import OPTIMAL

    proven = lambda run: run[1] == OPTIMAL  # noqa: E731 (or within the gap asked for)
    quick = lambda run: proven(run) and run[0].deterministic_time <= QUICK_PROOF_DETERMINISTIC_S  # noqa: E731
    known = [i for i in range(configs) if i in runs and quick(runs[i])]
    if not known and not (0 in runs and proven(runs[0])):
        return None
    for i in range(min(known, default=configs)):  # every earlier configuration's quick answer
        run = runs[i] if i in runs else quick_rerun(i)
        if quick(run):
            return run
    return runs[known[0]] if known else runs[0]


def best_of(runs: list, sense: str):
    """Of finished searches of one objective, in order: an infeasibility proof, else the best placement (a
    proven one first; the earlier on a tie) carrying the tightest bound of them all, else the first."""
    from ortools.sat.python.cp_model import FEASIBLE, INFEASIBLE, OPTIMAL

    if any(status == INFEASIBLE for _s, status in runs):
        return next(r for r in runs if r[1] == INFEASIBLE)
    found = [(s, status) for s, status in runs if status in (OPTIMAL, FEASIBLE)]
    if not found:
        return runs[0]
    sign = 1 if sense == "max" else -1
    best = max(found, key=lambda r: (r[1] == OPTIMAL and relative_gap(r[0]) == 0, sign * r[0].objective_value))
    bounds = [s.best_objective_bound for s, _status in runs]
    return Best(best[0], min(bounds) if sense == "max" else max(bounds)), best[1]


def relative_gap(solver) -> float:
    """The relative gap between `solver`'s incumbent and its bound."""
    value, bound = solver.objective_value, solver.best_objective_bound
    return abs(bound - value) / max(abs(bound), 1e-9)


class Best:
    """A finished `CpSolver` (its placement and incumbent) with the tightest bound of a portfolio's searches."""

    def __init__(self, solver, bound: float) -> None:
        self._solver = solver
        self.best_objective_bound = bound

    def __getattr__(self, name: str):
        return getattr(self._solver, name)
