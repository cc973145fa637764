"""Why no placement exists: a minimal set of binding constraint families, and a message with numbers.

`binding_families` (`compiler.place.ilp`, which `solve` calls) finds which families
(`compiler.ir.placement.FAMILIES`) make an instance infeasible; `explain` turns them into one line that names
each with the number that would make it feasible ("power budget 1.0 kW <
1.4 kW needed ..."), by re-solving with that family relaxed.
"""

from __future__ import annotations

from dataclasses import replace

from compiler.ir.placement import Instance, Solution
from compiler.ir.units import power_text
from compiler.place.ilp import binding_families, solve

__all__ = ["binding_families", "explain"]


def explain(model_name: str, inst: Instance, sol: Solution) -> str:
    """Name each binding constraint family of `sol` with the number that would make it feasible."""
    reasons: list[str] = []
    for family in sol.binding:
        if family == "power" and inst.power_budget_w is not None:
            reasons.append(_power(model_name, inst, sol))
        elif family == "cost" and inst.cost_budget_per_hour is not None:
            reasons.append(_cost(model_name, inst))
        elif family == "slo":
            reasons += _slo(inst)
        elif family == "demand" and inst.arrival_rate_per_s is not None:  # when maximising, demand is "serve any"
            free = solve(replace(inst, arrival_rate_per_s=None), "throughput",
                         families=["inventory", "power", "slo", "link"])
            most = free.requests_per_s if free.feasible else 0.0
            reasons.append(f"arrival rate {inst.arrival_rate_per_s:g} req/s > {most:.2f} req/s, the most this "
                           f"cluster serves within its budget and SLOs")
        elif family == "inventory":
            reasons.append("inventory: the pools that meet the other constraints need more devices than the cluster has")
        elif family == "link":
            reasons.append("link: the links between pools cannot carry the KV hand-off traffic")
    return "infeasible: " + "; ".join(reasons or ["no placement satisfies the constraints"])


def _power(model_name: str, inst: Instance, sol: Solution) -> str:
    free = solve(replace(inst, arrival_rate_per_s=inst.arrival_rate_per_s or 1e-3), "power",
                 families=["inventory", "slo", "link", "demand"])
    need = power_text(free.provisioned_w) if free.feasible else "more than the fleet has"
    within = " and meet the SLOs" if "slo" in sol.binding else ""
    return (f"power budget {power_text(inst.power_budget_w)} < {need} needed to hold {model_name} weights on the "
            f"cheapest pools that fit{within}")


def _cost(model_name: str, inst: Instance) -> str:
    free = solve(replace(inst, arrival_rate_per_s=inst.arrival_rate_per_s or 1e-3), "cost",
                 families=["inventory", "power", "slo", "link", "demand"])
    need = f"${free.cost_per_hour:,.2f}/h" if free.feasible and free.cost_per_hour is not None else \
        "more than the fleet can spend"
    return (f"cost budget ${inst.cost_budget_per_hour:,.2f}/h < {need} needed to serve {model_name} on the "
            "cheapest pools that fit")


def _slo(inst: Instance) -> list[str]:
    """Per class with no way to be served within its SLO: the fastest TTFT and TPOT any pool gives it (nearly
    idle), against its targets. A class is served by a colocated pool, or by a prefill pool and a decode pool."""
    reasons = []
    for c in inst.classes:
        served = [(o, o.service(c.name)) for o in inst.options if o.service(c.name) is not None]
        if not served:
            reasons.append(f"class {c.name}: no pool holds its longest request; add memory or shorten the requests")
            continue
        usable = {o.kind for o, _s in served if inst.cap(o, c) > 0}
        if "colocated" in usable or ("prefill" in usable and usable & {"decode", "decode-af"}):
            continue
        for label, index, target, kinds in (("TPOT", 4, c.tpot_slo_s, ("colocated", "decode", "decode-af")),
                                             ("TTFT", 2, c.ttft_slo_s, ("colocated", "prefill"))):
            curves = [(s.curve[0][index], o.key) for o, s in served if o.kind in kinds]
            if target is not None and curves:
                best, key = min(curves)
                if best > target:
                    reasons.append(f"class {c.name}: {label} SLO {target * 1e3:g} ms < {best * 1e3:.1f} ms, the "
                                   f"fastest any pool achieves ({key})")
    return reasons or ["SLO: no combination of pools meets TTFT and TPOT together (KV hand-off included)"]
