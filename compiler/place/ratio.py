"""Ratio objectives (tokens per watt, tokens per dollar) by Dinkelbach's method, with a bound that holds.

`dinkelbach` maximises lam / per (served milli-requests/s over provisioned
watts, or over milli-dollars per hour) on a `compiler.place.ilp.PlacementModel`
as a sequence of linear objectives, keeps the best placement any of them
found, and bounds the ratio from the bounds the solves proved ([Note: a
ratio's bound]): a search stopped early reports a gap above 0, not the ratio
of its last placement as its own bound.
"""

from __future__ import annotations

import math
import time

from compiler.place.candidates import scaled


def dinkelbach(model, deadline: float, per, per_replica: dict[str, int], start: float = 0.0):
    """Max lam/`per` (provisioned power, or dollars per hour) by Dinkelbach's method (1967): max lam - q*per
    from q = `start` (any guess: a ratio above the optimum costs one step), then from q = the best ratio found
    (exactly, as lam_best/per_best), until a solve finds none better. Returns the stages (the first keeps the
    ratio at least the best's) and the first one solved: the best iterate, its status (OPTIMAL once proven)
    and (ratio, bound), in the model's units; see [Note: a ratio's bound]."""
    cp = model.cp
    floor = least(model, per_replica)
    q_num, q_den = scaled(start, RATIO_SCALE), RATIO_SCALE  # q = q_num / q_den
    best, bound = None, math.inf
    for _ in range(20):
        expr = model.lam * q_den - q_num * per
        solver, status = model.search(expr, "max", deadline - time.perf_counter(), model.budget)
        if status not in (cp.OPTIMAL, cp.FEASIBLE):
            best = best or (0.0, expr, solver, status)  # infeasible, or no placement in time
            break
        b = solver.best_objective_bound  # every placement: lam*q_den - q_num*per <= b, integers
        slack = 0.0 if b < 1 else b / (q_den * floor) if floor > 0 else math.inf
        bound = min(bound, q_num / q_den + slack)
        lam, denominator = solver.value(model.lam), solver.value(per)
        ratio = lam / denominator if denominator > 0 else 0.0
        previous = best[0] if best else 0.0
        if best is None or ratio > previous:
            best = (ratio, model.lam * denominator - lam * per, solver, status)
        if denominator <= 0 or lam <= 0 or ratio <= previous * (1 + max(1e-9, model.gap)):
            break
        q_num, q_den = lam, denominator
    ratio, expr, solver, status = best
    proven = status in (cp.OPTIMAL, cp.FEASIBLE) and bound <= ratio * (1 + 1e-9)
    status = cp.OPTIMAL if proven else cp.FEASIBLE if status in (cp.OPTIMAL, cp.FEASIBLE) else status
    return [(expr, "max"), (model.lam, "max")], (solver, status, (ratio, bound))


def least(model, per_replica: dict[str, int]) -> float:
    """The least `per_replica` summed over a placement that serves every class (a colocated replica, or a
    prefill and a decode replica, for each); infinite when some class has no option."""
    def cheapest(c, kinds) -> float:
        return min((per_replica[o.key] for o in model.opts if o.kind in kinds and (c, o.key) in model.caps
                    and (model.caps[(c, o.key)] > 0 or not model.slo_binds)), default=math.inf)

    return max((min(cheapest(c.name, ("colocated",)), cheapest(c.name, ("prefill",))
                    + cheapest(c.name, ("decode", "decode-af"))) for c in model.inst.classes), default=0.0)


#: [Note: a ratio's bound] Each solve of max lam*q_den - q_num*per proves a bound b on it over every placement,
#: so a placement of ratio r has per*(r - q) <= b/q_den: r <= q when b < 1 (the objective is an integer), else
#: r <= q + b/(q_den*per_min), where per_min is `least` (every placement that serves anything serves every
#: class, at its share). The plan reports the tightest of these over the solves and keeps the best placement
#: any solve found; a ratio is proven (``optimal``) once a solve at q = its best ratio proves b < 1.
RATIO_SCALE = 10**6  # the first guess of a ratio, in millionths
