"""Lower bounds that show an instance infeasible before any solve: milliseconds, not the solver's proof.

The solver proves infeasibility by a solve, then a deletion filter over the
constraint families (`compiler.place.infeasible`), while many infeasible
requests are visible from the costed options alone. `infeasible_by_bounds`
checks, per request class, relaxations of the ILP (`compiler.place.ilp`): when
one of them has no solution, neither has the ILP, and the message names the
family with its numbers. When no bound fires it returns None and the solver
decides (the bounds are necessary conditions, never sufficient ones).

[Note: placement bounds] A class is served by a *route*: one colocated pool, or
a prefill pool handing its KV to a decode (or decode-af) pool. A pool serves a
class only at a utilisation where the class meets its SLO (`Instance.cap`); a
prefill -> decode pair only if prefill TTFT at its cap, the KV hand-off and
the wait for a decode slot fit the TTFT target (the ILP's ``slo`` family).
Every class must be served (the ILP's ``demand`` family: at least its share of
the rate, which is positive even when maximising), so:

- ``slo``: a class with no route, its fastest TTFT and TPOT (nearly idle) against its targets;
- ``inventory``: a class none of whose routes fits the inventory with one replica of each pool;
- ``power`` (and ``cost``, dollars per hour, likewise): the least provisioned power of any route of any class
  (one replica of each pool) above the budget; with an arrival rate also the LP bound: each class's requests/s
  at the fewest watts per request/s any route gives within the SLO (replicas fractional, pools shared);
- ``demand``: with an arrival rate, a class's requests/s above what every device of the inventory serves of
  it, each device on the pool kind that serves most of it per device (colocated or prefill; fractional).

Bounds are conservative: they allow a thousandth of a share and of a request/s, a watt and a milli-dollar
beyond what they compute (more than the solver's tolerance), so they never call a feasible instance infeasible.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable

from compiler.ir.placement import ClassTarget, Instance
from compiler.ir.pool_option import PoolOption
from compiler.ir.units import power_text

#: Tolerance of every comparison: a bound fires only past the ILP's roundings.
_REL = 1e-6


@dataclass(frozen=True, slots=True)
class Route:
    """One way to serve a class: a colocated pool, or a prefill pool and a decode pool (one replica each)."""

    options: tuple[PoolOption, ...]

    def devices(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for o in self.options:
            for d, k in o.devices:
                out[d] = out.get(d, 0) + k
        return out

    def fits(self, inventory: dict[str, int]) -> bool:
        return all(inventory.get(d, 0) >= k for d, k in self.devices().items())

    @property
    def name(self) -> str:
        return " + ".join(o.key for o in self.options)


def without_tpot(inst: Instance) -> Instance:
    """`inst` with every class's TPOT target dropped: the relaxation a TPOT sweep (pareto) may be bounded by."""
    return replace(inst, classes=tuple(replace(c, tpot_slo_s=None) for c in inst.classes))


def routes(inst: Instance, c: ClassTarget) -> list[Route]:
    """Every route that serves `c` within its SLO ([Note: placement bounds]); one option per devices signature
    and kind (the fewest watts), since the bounds read only devices and watts."""
    usable = [o for o in inst.options if o.service(c.name) is not None and inst.cap(o, c) > 0]
    cheapest: dict[tuple, PoolOption] = {}
    for o in usable:
        key = (o.kind, o.devices)
        if key not in cheapest or (o.provisioned_w, o.key) < (cheapest[key].provisioned_w, cheapest[key].key):
            cheapest[key] = o
    by_kind = {k: [o for o in cheapest.values() if o.kind == k] for k in ("colocated", "prefill")}
    decoders = [o for o in cheapest.values() if o.receives_kv]
    out = [Route((o,)) for o in by_kind["colocated"]]
    for p in by_kind["prefill"]:
        for d in decoders:
            if d.kv_device in inst.kv_targets(p, c):
                out.append(Route((p, d)))
    return out



def infeasible_by_bounds(model_name: str, inst: Instance) -> str | None:
    """``infeasible: ...`` naming each family a lower bound shows binding, with its numbers; None if none does."""
    inventory = dict(inst.inventory)
    by_class = {c.name: routes(inst, c) for c in inst.classes}
    reasons = [r for c in inst.classes if not by_class[c.name] for r in _slo(inst, c)]
    fitting = {name: [r for r in rs if r.fits(inventory)] for name, rs in by_class.items()}
    for c in inst.classes:
        if by_class[c.name] and not fitting[c.name]:
            smallest = min(by_class[c.name], key=lambda r: (sum(r.devices().values()), r.name))
            reasons.append(f"inventory: class {c.name} needs at least {_devices(smallest.devices())} for one "
                           f"replica of its smallest route ({smallest.name}); the cluster has {_devices(inventory)}")
    if reasons:
        return _message(reasons)
    for b in budgets(inst):
        reasons += _budget(model_name, inst, fitting, b)
    if inst.arrival_rate_per_s is not None:
        reasons += _demand(inst, inventory)
    return _message(reasons) if reasons else None


def _message(reasons: list[str]) -> str:
    return "infeasible: " + "; ".join(reasons) + " (a lower bound shows it, before any solve)"


def _devices(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {d}" for d, k in sorted(counts.items()))


def _slo(inst: Instance, c: ClassTarget) -> list[str]:
    """Why class `c` has no route: no pool holds its requests, or its fastest latencies (nearly idle) miss."""
    served = [o for o in inst.options if o.service(c.name) is not None]
    if not served:
        return [f"memory: class {c.name}: no pool holds its longest request; add memory or shorten the requests"]
    out = []
    for label, index, target, kinds in (("TPOT", 4, c.tpot_slo_s, ("colocated", "decode", "decode-af")),
                                         ("TTFT", 2, c.ttft_slo_s, ("colocated", "prefill"))):
        curves = [(o.service(c.name).curve[0][index], o.key) for o in served if o.kind in kinds]
        if target is not None and curves:
            best, key = min(curves)
            if best > target:
                out.append(f"class {c.name}: {label} SLO {target * 1e3:g} ms < {best * 1e3:.1f} ms, the fastest "
                           f"any pool achieves ({key})")
    return out or [f"class {c.name}: SLO: no pool, nor prefill pool with KV hand-off and decode pool, meets TTFT "
                   f"{_ms(c.ttft_slo_s)} and TPOT {_ms(c.tpot_slo_s)} together even lightly loaded"]


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:g} ms"


@dataclass(frozen=True)
class Budget:
    """A resource the placement holds under a limit: its name, the limit, one replica's use, how to print it."""

    name: str  # "power budget", "cost budget"
    limit: float
    per_replica: Callable[[PoolOption], float]
    show: Callable[[float], str]
    slack: float  # below the ILP's rounding of the resource (whole watts, milli-dollars)


def budgets(inst: Instance) -> list[Budget]:
    """The instance's budgets: power (provisioned watts), and dollars per hour where a cost budget and every
    option's price are known (the solver refuses a cost budget otherwise)."""
    out = []
    if inst.power_budget_w is not None:
        out.append(Budget("power budget", inst.power_budget_w, lambda o: o.provisioned_w,
                          power_text, 1.0))
    cost_budget = inst.cost_budget_per_hour
    if cost_budget is not None and all(inst.price_per_hour(o) is not None for o in inst.options):
        out.append(Budget("cost budget", cost_budget, inst.price_per_hour, lambda d: f"${d:,.2f}/h", 1e-3))
    return out


def _budget(model_name: str, inst: Instance, fitting: dict[str, list[Route]], b: Budget) -> list[str]:
    """What a placement spends of `b` at least: one replica of each class's cheapest route, or (with an arrival
    rate) each class's requests/s at its least spend per request/s."""
    if not fitting:
        return []
    def spend(r: Route) -> float:  # noqa: E306
        return sum(b.per_replica(o) for o in r.options)

    route, name = max(((min(rs, key=lambda r: (spend(r), r.name)), name) for name, rs in fitting.items()),
                      key=lambda rn: spend(rn[0]))
    if spend(route) > b.limit * (1 + _REL) + b.slack:
        return [f"{b.name} {b.show(b.limit)} < {b.show(spend(route))} needed to serve {model_name} at all: the "
                f"cheapest pools that serve class {name} within its SLO ({route.name}) take {b.show(spend(route))}"]
    if inst.arrival_rate_per_s is None:
        return []
    need = sum(_rate(inst, c) * _spend_per_rate(inst, c, fitting[c.name], b.per_replica) for c in inst.classes)
    if need > b.limit * (1 + _REL) + b.slack:
        return [f"{b.name} {b.show(b.limit)} < {b.show(need)} needed to serve {inst.arrival_rate_per_s:g} req/s of "
                f"{model_name}, each class on the pools that serve it within its SLO for the least per request/s"]
    return []


def _rate(inst: Instance, c: ClassTarget) -> float:
    """Requests/s the ILP must serve of `c` at least (its share in thousandths, the rate in milli-requests/s)."""
    return max(0.0, c.share - 1e-3) * max(0.0, inst.arrival_rate_per_s - 1e-3)


def _spend_per_rate(inst: Instance, c: ClassTarget, rs: list[Route], per_replica: Callable[[PoolOption], float]
                    ) -> float:
    """Least spend per request/s of `c`: a colocated pool, or the best prefill plus the best decode."""
    def per(o: PoolOption) -> float:
        return per_replica(o) / (o.service(c.name).rate_per_s * inst.cap(o, c))

    pools = {o.key: o for r in rs for o in r.options}.values()
    colocated = [per(o) for o in pools if o.kind == "colocated"]
    prefill = [per(o) for o in pools if o.kind == "prefill"]
    decode = [per(o) for o in pools if o.receives_kv]
    best = min(colocated, default=math.inf)
    if prefill and decode:
        best = min(best, min(prefill) + min(decode))
    return 0.0 if math.isinf(best) else best


def _demand(inst: Instance, inventory: dict[str, int]) -> list[str]:
    """A class whose requests/s exceed what every device serves of it, each on its best pool per device."""
    out = []
    for c in inst.classes:
        best: dict[str, float] = {}
        for o in inst.options:
            s = o.service(c.name)
            if s is None or o.kind not in ("colocated", "prefill") or inst.cap(o, c) <= 0:
                continue
            per_device = s.rate_per_s * inst.cap(o, c) / o.devices_per_replica
            for d, _k in o.devices:
                best[d] = max(best.get(d, 0.0), per_device)
        most = sum(inventory.get(d, 0) * r for d, r in best.items())
        need = _rate(inst, c)
        if need > most * (1 + _REL) + 1e-3:
            out.append(f"arrival rate {inst.arrival_rate_per_s:g} req/s > what the cluster serves: class {c.name} "
                       f"needs {need:.2f} req/s, and all its devices serve at most {most:.2f} req/s of it within "
                       "its SLO")
    return out
