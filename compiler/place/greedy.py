"""A greedy placement: the heuristic the exact ILP is compared against (a baseline), and where its search starts.

Fill the fleet with the self-contained (colocated) pool that serves the most
requests of the workload's mix per provisioned watt (per dollar under a priced
objective), then the next, while inventory and the budgets last. When the
objective serves a fixed arrival rate (power, cost, latency), stop once the mix
reaches it. A replica serves the mix at the strictest cap of its classes (they share
one queue): strictest cap / sum over classes of share / rate.
"""

from __future__ import annotations

import math

from compiler.ir.placement import PRICED_OBJECTIVES, Instance
from compiler.ir.pool_option import PoolOption

#: Objectives that serve the workload's arrival rate rather than as much as the fleet can.
AT_ARRIVAL_RATE = ("power", "cost", "latency")


def mix_rate(inst: Instance, o: PoolOption, mix: dict[str, float] | None = None) -> float:
    """Requests/s of a class mix (shares by class name; default the workload's) one replica of `o` serves within
    every class's SLO: the replica runs at its strictest class's cap, since every class on it waits in the same
    queue ([Note: class caps]). 0 when a class of the mix gets nothing from `o` within its SLO."""
    shares = mix if mix is not None else {c.name: c.share for c in inst.classes}
    targets = {c.name: c for c in inst.classes}
    load, strictest = 0.0, 1.0
    for name, share in shares.items():
        if share <= 0:
            continue
        service = o.service(name)
        cap = inst.cap(o, targets[name]) if name in targets and service is not None else 0.0
        if cap <= 0:
            return 0.0
        strictest = min(strictest, cap)
        load += share / service.rate_per_s
    return strictest / load if load else 0.0


def greedy(inst: Instance, objective: str = "throughput") -> dict[str, int]:
    """Replicas per option key of the greedy placement for `objective`. With several services
    (`Instance.services`), each service's floor first, in their order, each from its own best pools by the same
    rule; then, unless the objective serves fixed rates, the rest of the fleet to the pools whose weighted
    requests/s per watt (or dollar) are highest."""
    fleet = _Left(inst, objective)
    if inst.services:
        return _greedy_services(inst, objective, fleet)
    target = inst.arrival_rate_per_s if objective in AT_ARRIVAL_RATE else None
    rates = {o.key: mix_rate(inst, o) for o in inst.options if o.kind == "colocated"}
    served = 0.0
    for o in fleet.ranked(rates):
        most = math.ceil((target - served) / rates[o.key] - 1e-9) if target is not None else math.inf
        served += fleet.take(o, most) * rates[o.key]
        if target is not None and served >= target * (1 - 1e-9):
            break
    return fleet.chosen


class _Left:
    """What the greedy placement has not used yet of the fleet (devices, watts, dollars), the replicas it chose,
    and how it ranks pools: requests/s per what one replica spends of the resource the objective rations."""

    def __init__(self, inst: Instance, objective: str):
        self.inst, self.objective = inst, objective
        self.inv = dict(inst.inventory)
        self.watts = inst.power_budget_w if inst.power_budget_w is not None else math.inf
        self.dollars = inst.cost_budget_per_hour if inst.cost_budget_per_hour is not None else math.inf
        self.priced = objective in PRICED_OBJECTIVES or math.isfinite(self.dollars)
        self.price = {o.key: inst.price_per_hour(o) for o in inst.options}
        self.chosen: dict[str, int] = {}

    def per(self, o: PoolOption) -> float:
        return self.price[o.key] if self.objective in PRICED_OBJECTIVES else o.provisioned_w

    def ranked(self, rates: dict[str, float]) -> list[PoolOption]:
        """The options with a rate in `rates`, best requests/s per `per` first (ties by key)."""
        return sorted((o for o in self.inst.options if rates.get(o.key) and o.provisioned_w > 0
                       and (not self.priced or self.price[o.key])), key=lambda o: (-rates[o.key] / self.per(o), o.key))

    def take(self, o: PoolOption, most: float) -> int:
        """Add up to `most` replicas of `o` within what is left; the number added."""
        k = min((self.inv[d] // n for d, n in o.devices), default=0)
        if math.isfinite(self.watts):
            k = min(k, int(self.watts // o.provisioned_w))
        if math.isfinite(self.dollars):
            k = min(k, int(self.dollars // self.price[o.key]))
        k = int(min(k, most))
        if k <= 0:
            return 0
        self.chosen[o.key] = self.chosen.get(o.key, 0) + k
        for d, n in o.devices:
            self.inv[d] -= k * n
        self.watts -= k * o.provisioned_w
        self.dollars -= k * (self.price[o.key] or 0.0)
        return k


def _greedy_services(inst: Instance, objective: str, fleet: _Left) -> dict[str, int]:
    """`greedy` of an instance of several services (the start of a joint solve)."""
    shares = {c.name: c.share for c in inst.classes}
    ranked = []
    for s in inst.services:
        mix = {c: shares[c] for c in s.classes}
        rates = {o.key: mix_rate(inst, o, mix) for o in inst.options if o.kind == "colocated"
                 and {c.name for c in o.classes} & set(s.classes)}
        pools = fleet.ranked(rates)
        served = 0.0
        for o in pools:  # the floor first
            if served >= s.floor_per_s * (1 - 1e-9):
                break
            served += rates[o.key] * fleet.take(o, math.ceil((s.floor_per_s - served) / rates[o.key] - 1e-9))
        ranked += [(-s.weight * rates[o.key] / fleet.per(o), o.key, o) for o in pools if s.weight > 0]
    if objective not in AT_ARRIVAL_RATE:
        for _value, _key, o in sorted(ranked, key=lambda r: (r[0], r[1])):
            fleet.take(o, math.inf)
    return fleet.chosen


def greedy_rate(inst: Instance, replicas: dict[str, int]) -> float:
    """Requests/s of the mix the `replicas` serve."""
    by_key = {o.key: o for o in inst.options}
    return sum(mix_rate(inst, by_key[k]) * n for k, n in replicas.items())
