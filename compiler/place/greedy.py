"""A greedy placement: the heuristic the exact ILP is compared against (a baseline, never a solver hint).

Fill the fleet with the self-contained (colocated) pool that serves the most
requests per provisioned watt, then the next, while inventory and power last.
"""

from __future__ import annotations

import math

from compiler.ir.placement import Instance


def greedy(inst: Instance) -> dict[str, int]:
    """Replicas per option key of the greedy placement."""
    inv = dict(inst.inventory)
    budget = inst.power_budget_w if inst.power_budget_w is not None else math.inf
    chosen: dict[str, int] = {}
    pools = sorted((o for o in inst.options if o.kind == "colocated" and o.slo_ok and o.provisioned_w > 0),
                   key=lambda o: (-o.rate_per_s / o.provisioned_w, o.key))
    for o in pools:
        k = min((inv[d] // n for d, n in o.devices), default=0)
        if math.isfinite(budget):
            k = min(k, int(budget // o.provisioned_w))
        if k <= 0:
            continue
        chosen[o.key] = k
        for d, n in o.devices:
            inv[d] -= k * n
        budget -= k * o.provisioned_w
    return chosen


def greedy_rate(inst: Instance, replicas: dict[str, int]) -> float:
    """Requests per second the `replicas` serve."""
    rate = {o.key: o.rate_per_s for o in inst.options}
    return sum(rate[k] * n for k, n in replicas.items())
