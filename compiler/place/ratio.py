"""Ratio objectives (tokens per watt, tokens per dollar) by Dinkelbach's method, with a bound that holds.

`dinkelbach` maximises lam / per (served requests/s over provisioned watts, or over dollars per hour) on a
`compiler.place.ilp.PlacementModel` as a sequence of linear objectives, keeps the best placement any of them
found, and bounds the ratio from the bounds the solves proved ([Note: a ratio's bound]): a solve stopped early
reports a gap above 0, not the ratio of its last placement as its own bound.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace


def dinkelbach(model, deadline: float, per, per_replica: dict[str, float], start: float = 0.0):
    """Max lam/`per` (provisioned power, or dollars per hour) by Dinkelbach's method (1967): max lam - q*per
    from q = `start` (any guess: a ratio above the optimum costs one step), then from q = the best ratio found,
    until a solve finds none better. Returns the stages (the first keeps the ratio at least the best's) and the
    first one solved: the best iterate's run (status ``optimal`` once proven) and (ratio, bound); see [Note: a
    ratio's bound]."""
    floor = least(model, per_replica)
    q = start
    best, bound = None, math.inf
    for _ in range(20):
        run = model.solve(model.lam - q * per, "max", deadline - time.perf_counter(), gap=model.gap,
                          node_limit=model.node_limit, hint=best[1].values if best else model.start)
        if run.values is None:
            best = best or (0.0, run)  # infeasible, or no placement in time
            break
        b = run.bound  # every placement: lam - q*per <= b
        slack = 0.0 if b <= _TOLERANCE else b / floor if floor > 0 else math.inf
        bound = min(bound, q + slack)
        lam, denominator = run(model.lam), run(per)
        ratio = lam / denominator if denominator > 0 else 0.0
        previous = best[0] if best else 0.0
        if best is None or ratio > previous:
            best = (ratio, run)
        if denominator <= 0 or lam <= 0 or ratio <= previous * (1 + max(1e-9, model.gap)):
            break
        q = ratio
    ratio, run = best
    if run.values is None:
        return [(model.lam, "max")], (run, (0.0, 0.0))
    proven = bound <= ratio * (1 + _TOLERANCE) + _TOLERANCE
    run = replace(run, status="optimal" if proven else "feasible")
    return [(model.lam - ratio * per, "max"), (model.lam, "max")], (run, (ratio, max(bound, ratio)))


def least(model, per_replica: dict[str, float]) -> float:
    """The least `per_replica` summed over a placement that serves every class (a colocated replica, or a
    prefill and a decode replica, for each); infinite when some class has no option."""
    def cheapest(c, kinds) -> float:
        return min((per_replica[o.key] for o in model.opts if o.kind in kinds and (c, o.key) in model.open),
                   default=math.inf)

    return max((min(cheapest(c.name, ("colocated",)), cheapest(c.name, ("prefill",))
                    + cheapest(c.name, ("decode", "decode-af"))) for c in model.inst.classes), default=0.0)


#: [Note: a ratio's bound] Each solve of max lam - q*per proves a bound b on it over every placement, so a
#: placement of ratio r has per*(r - q) <= b: r <= q when b <= 0 (up to the solver's tolerance), else
#: r <= q + b/per_min, where per_min is `least` (every placement that serves anything serves every class, at
#: its share). The plan reports the tightest of these over the solves and keeps the best placement any solve
#: found; a ratio is proven (``optimal``) once a solve at q = its best ratio proves b <= 0.
_TOLERANCE = 1e-6
