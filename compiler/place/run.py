"""What one placement solve leaves: each stage's `Run`, and the `Solution` read from the last one.

Before: a built `compiler.place.ilp.PlacementModel` and the stage that finished. After: the replicas, flows,
objective (value, bound widened for pruning) and draw the plan reports, with the solver's tolerance read as 0.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from compiler.ir.placement import Objective, Solution

#: Flows below this many requests/s are the solver's tolerance, not traffic: read as 0.
ZERO_REQUESTS_PER_S = 1e-9


@dataclass(frozen=True)
class Run:
    """One finished stage: the solver's termination, the variable values of its best placement (None: none
    found), the objective's value and the bound it proved."""

    status: str  # ``optimal``, ``feasible`` (a limit or the gap stopped it), ``infeasible`` or ``none`` (out of time)
    values: dict | None
    value: float
    bound: float
    detail: str = ""  # the solver's own words on why it stopped, where it found no placement

    def __call__(self, expr) -> float:
        """The value of a variable or linear expression in this run's placement."""
        from ortools.math_opt.python import mathopt

        return float(mathopt.evaluate_expression(expr, self.values)) if not isinstance(expr, (int, float)) \
            else float(expr)


def clean(value: float) -> float:
    """A flow as the plan reports it: the solver's tolerance read as 0, and nine decimals (a nano-request/s)."""
    return round(value, 9) if abs(value) >= ZERO_REQUESTS_PER_S else 0.0


def solution_of(model, run: Run, proven: bool, first: tuple[float, float], objective: str, start: float,
                pruning: float) -> Solution:
    """The placement `run` found in `model` (a `compiler.place.ilp.PlacementModel`); its bound widened by
    `pruning` to the unpruned model's ([Note: pruning tolerance])."""
    replicas = {o.key: round(run(model.n[o.key])) for o in model.opts}
    lam, power = clean(run(model.lam)), run(model.power)
    cost = run(model.cost) if model.cost is not None else None
    served = {}
    for o in model.opts:
        if not replicas[o.key]:
            continue  # the solver's tolerance may leave a trickle on an option with no replica: not traffic
        for c in model.inst.classes:
            if (c.name, o.key) in model.open:
                rate = clean(run(model.flow(c.name, o.key)))
                if rate:
                    served[(c.name, o.key)] = rate
    flows = ((k, clean(run(v))) for k, v in model.f.items() if replicas[k[1]])
    return Solution(
        status="optimal" if proven else "feasible",
        objective=Objective(objective, first[0], first[1] * (1.0 + pruning), pruning),
        replicas=tuple(sorted((k, n) for k, n in replicas.items() if n)),
        flows=tuple(sorted((k, r) for k, r in flows if r)),
        served=tuple(sorted(served.items())),
        class_requests_per_s=tuple((c.name, clean(run(model.class_rate[c.name]))) for c in model.inst.classes),
        requests_per_s=lam, power_w=run(model.draw), provisioned_w=round(power, 6),
        cost_per_hour=None if cost is None else round(cost, 6), wall_s=time.perf_counter() - start,
        variables=len(list(model.m.variables())), constraints=len(list(model.m.linear_constraints())),
        options=tuple(model.opts))
