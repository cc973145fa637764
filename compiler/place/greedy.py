"""A greedy placement: the heuristic the exact ILP is compared against (a baseline, never a solver hint).

Fill the fleet with the self-contained (colocated) pool that serves the most
requests of the workload's mix per provisioned watt, then the next, while
inventory and power last. A replica serves the mix at the rate where the
classes' loads, each within its SLO's utilisation cap, fill it:
1 / sum over classes of share / (rate x cap).
"""

from __future__ import annotations

import math

from compiler.ir.placement import Instance
from compiler.ir.pool_option import PoolOption


def mix_rate(inst: Instance, o: PoolOption) -> float:
    """Requests/s of the workload's mix one replica of `o` serves within every class's SLO (0: some class can't)."""
    load = 0.0
    for c in inst.classes:
        cap = inst.cap(o, c)
        if cap <= 0:
            return 0.0
        load += c.share / (o.service(c.name).rate_per_s * cap)
    return 1.0 / load if load else 0.0


def greedy(inst: Instance) -> dict[str, int]:
    """Replicas per option key of the greedy placement."""
    inv = dict(inst.inventory)
    budget = inst.power_budget_w if inst.power_budget_w is not None else math.inf
    chosen: dict[str, int] = {}
    rates = {o.key: mix_rate(inst, o) for o in inst.options if o.kind == "colocated"}
    pools = sorted((o for o in inst.options if rates.get(o.key) and o.provisioned_w > 0),
                   key=lambda o: (-rates[o.key] / o.provisioned_w, o.key))
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
    """Requests/s of the mix the `replicas` serve."""
    by_key = {o.key: o for o in inst.options}
    return sum(mix_rate(inst, by_key[k]) * n for k, n in replicas.items())
