"""Baselines: what a plan is compared against ([Note: baselines] in `compiler.ir.placement`), each solved
with the plan's objective under the same cost model and constraints.

Before: the plan's `Instance`, its objective, and the single-type fleets the cost
stage costed for the iso-power and iso-cost questions
(`compiler.cost.instance.single_type_fleets`: an `Instance` each, or the reason
the question cannot be posed). After: one `Baseline` per question, with its own
status: ``iso-power:<device>`` / ``iso-cost:<device>`` per fleet,
``vendor-islands`` (`islands`), ``no-disaggregation`` (`colocated_only`) and
``greedy`` (`compiler.place.greedy`). Once the plan is known: `unspent_budget` says whether
the iso-power questions are posed again at the power the plan provisions
(`fleet_baselines`, [Note: baselines]).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Sequence

from compiler.ir.errors import BadInput, Infeasible
from compiler.ir.placement import Baseline, Instance, Objective
from compiler.place.greedy import AT_ARRIVAL_RATE, greedy, mix_rate
from compiler.place.concurrently import SOLVES_AT_ONCE, concurrently
from compiler.place.ilp import ANALYSIS_GAP, OPTIMAL_GAP, solve


def baselines(inst: Instance, objective: str, *, time_limit_s: float,
              fleets: Sequence[tuple[str, Instance | str]] = (), explain: bool = True,
              gap: float = OPTIMAL_GAP, exact: bool = False, at_once: int = SOLVES_AT_ONCE) -> list[Baseline]:
    """Every baseline of `inst` for `objective`, in a fixed order: `fleets` (as given), vendor islands,
    no disaggregation, greedy. `explain` False leaves infeasible baselines without their binding families
    (cheaper: the pareto sweep solves many). Each solve stops within `gap` of its bound: the gap the plan
    itself reached, and pruned as the plan's (`exact` as in `compiler.place.ilp.solve`), so that plan and
    baselines are compared at the same standard ([Note: baselines]). `at_once` solves run at a time."""
    posed = [*fleets, ("vendor-islands", islands(inst)), ("no-disaggregation", colocated_only(inst))]

    def one(entry: tuple[str, Instance | str]) -> Baseline:
        name, fleet = entry
        if isinstance(fleet, str):
            return Baseline(name, "skipped", note=fleet)
        if name in TODAY:
            return solved_today(name, fleet, objective, time_limit_s, explain, gap, exact)
        return solved(name, fleet, objective, time_limit_s, explain, gap, exact=exact)

    # the largest instances first (vendor islands holds every one-type option): the small single-type fleets
    # then fill the other core while it solves, instead of leaving it to finish alone
    order = sorted(range(len(posed)), key=lambda i: -len(posed[i][1].options) if isinstance(posed[i][1], Instance)
                   else 0)
    found = dict(zip(order, concurrently(one, [posed[i] for i in order], at_once)))
    return [*(found[i] for i in range(len(posed))), greedy_baseline(inst, objective)]


def fleet_baselines(fleets: Sequence[tuple[str, Instance | str]], objective: str, *, time_limit_s: float,
                    gap: float = OPTIMAL_GAP, exact: bool = False, posed_power_w: float | None = None,
                    at_once: int = SOLVES_AT_ONCE) -> list[Baseline]:
    """One `Baseline` per single-type fleet of `fleets` (`compiler.cost.instance.single_type_fleets`), in their
    order, solved as `baselines` solves them; each records `posed_power_w`, the power its question was posed at
    when that is not the budget."""
    def one(entry: tuple[str, Instance | str]) -> Baseline:
        name, fleet = entry
        b = solved(name, fleet, objective, time_limit_s, gap=gap, exact=exact) if isinstance(fleet, Instance) \
            else Baseline(name, "skipped", note=fleet)
        return replace(b, posed_power_w=posed_power_w)

    return concurrently(one, list(fleets), at_once)


def unspent_budget(budget_w: float | None, provisioned_w: float, least_device_w: float) -> float | None:
    """The plan's `provisioned_w`, when what it leaves of its power budget would buy at least one more device
    (`least_device_w`: the fleet's device that counts least against the budget): the budget does not bind, and
    equal power means the power the plan uses ([Note: baselines]). None where the budget binds, or there is none.

    >>> unspent_budget(1_000_000.0, 81_600.0, 1_275.0), unspent_budget(200_000.0, 199_900.0, 1_275.0)
    (81600.0, None)
    """
    if budget_w is None or budget_w - provisioned_w < least_device_w:
        return None
    return provisioned_w


#: [Note: today's baselines within the analysis gap] The baselines of the plan's own fleet as it runs today, vendor
#: islands (no traffic across types) and ``deployable`` (public engines alone), stop within `ANALYSIS_GAP` of their
#: bound (``compile --exact``: to the plan's gap). Their placements are ones the plan could choose, so neither
#: beats the plan, and their proofs are a compile's slowest solves. On the 70B mix: vendor islands, where each
#: island rounds its own prefill and decode replica counts and the LP bound stays about 1.7% above the optimum,
#: 30 s and ~15,000 nodes to the proof plus 6 s of tie-break, on one core here (the plan itself 2 s); within 2%,
#: 3 s, a placement 0.5% below the proven one (106.25 req/s against 106.82). Deployable: 12 s to the proof, 1.2 s
#: within 2%. The plan's gain over them may then read up to that gap high; the baseline's status (``feasible``),
#: bound and note say by how much, and the model's own interval on the gain is ten times wider. Every other
#: baseline is solved to the plan's gap: an iso-power fleet can beat the plan, and no disaggregation is often
#: within a few percent of it (and proven in a second), where a 2% gap would be the whole answer. Where the search
#: closes the gap on its way (a small fleet), the baseline is solved again to the plan's gap, cheaply, so that its
#: ties are broken as the plan's are.
TODAY = ("vendor-islands", "deployable")
TODAY_GAP = ANALYSIS_GAP
TODAY_NOTE = ("solved to a {within:.0%} gap, not to the plan's (its bound, near-twins pruned included, {gap:.2%} "
              "above): its placements are ones the plan could choose, so it never beats the plan, and its proof is "
              "often a compile's slowest solve (compile --exact proves it)")


def solved_today(name: str, inst: Instance, objective: str, time_limit_s: float, explain: bool = True,
                 gap: float = OPTIMAL_GAP, exact: bool = False) -> Baseline:
    """One of the `TODAY` baselines, solved within `TODAY_GAP` ([Note: today's baselines within the analysis gap]),
    or to `gap` where `exact`, where `gap` is wider, or where the search closes its gap anyway."""
    if exact or gap >= TODAY_GAP:
        return solved(name, inst, objective, time_limit_s, explain, gap, exact=exact)
    b = solved(name, inst, objective, time_limit_s, explain, TODAY_GAP)
    if b.status != "feasible" or b.objective is None:
        return b
    if b.objective.solver_gap <= OPTIMAL_GAP:  # an easy one (proven over the options kept): its proof is cheap,
        # and it breaks ties as the plan's do
        return solved(name, inst, objective, time_limit_s, explain, gap)
    return replace(b, note=TODAY_NOTE.format(within=TODAY_GAP, gap=b.objective.gap))


def islands(inst: Instance) -> Instance:
    """Vendor islands: pools of one device type each, and no KV handed to another type."""
    return replace(inst.with_options([o for o in inst.options if len(o.device_types) == 1]), cross_type_kv=False)


def colocated_only(inst: Instance) -> Instance:
    """No disaggregation: colocated pools only (no prefill/decode or attention/FFN split)."""
    return inst.with_options([o for o in inst.options if o.kind == "colocated"])


def solved(name: str, inst: Instance, objective: str, time_limit_s: float, explain: bool = True,
           gap: float = OPTIMAL_GAP, ratio_hint: float = 0.0, node_limit: int | None = None,
           exact: bool = False) -> Baseline:
    """`inst` solved for `objective` (to `gap`; `node_limit` and `exact` as in `compiler.place.ilp.solve`), as a
    `Baseline` named `name`."""
    if not inst.options:
        return Baseline(name, "skipped", note="no pool option of this kind holds the model")
    try:
        s = solve(inst, objective, time_limit_s=time_limit_s, explain=explain, gap=gap,
                  ratio_hint=ratio_hint, node_limit=node_limit, exact=exact)
    except BadInput as e:  # e.g. a priced objective on a type without a price
        return Baseline(name, "skipped", note=str(e))
    except Infeasible as e:  # out of time before any placement
        return Baseline(name, "infeasible", note=str(e))
    if not s.feasible:
        return Baseline(name, "infeasible", note="binding: " + (", ".join(s.binding) or "not analysed"))
    return Baseline(name, s.status, s.requests_per_s, s.output_tokens_per_s(inst.classes), s.power_w,
                    s.provisioned_w, s.cost_per_hour, s.objective, tuple(s.devices().items()),
                    paths=s.paths(inst.classes))


def greedy_baseline(inst: Instance, objective: str) -> Baseline:
    """The greedy placement for `objective`, with its objective value computed as the solver would."""
    chosen = greedy(inst, objective)
    by_key = {o.key: o for o in inst.options}
    used = [(by_key[k], n) for k, n in sorted(chosen.items())]
    if not used:
        return Baseline("greedy", "infeasible", note="no colocated pool serves every class within its SLO "
                                                     "and the budgets")
    rate = sum(mix_rate(inst, o) * n for o, n in used)
    if objective in AT_ARRIVAL_RATE and inst.arrival_rate_per_s and rate < inst.arrival_rate_per_s * (1 - 1e-6):
        return Baseline("greedy", "infeasible", rate, note=f"greedy reaches {rate:.3g} req/s, below the arrival "
                                                           f"rate {inst.arrival_rate_per_s:g} req/s")
    prices = [inst.price_per_hour(o) for o, _n in used]
    cost = None if any(p is None for p in prices) else sum(p * n for p, (_o, n) in zip(prices, used))
    provisioned = sum(o.provisioned_w * n for o, n in used)
    devices: dict[str, int] = {}
    for o, n in used:
        for d, k in o.devices:
            devices[d] = devices.get(d, 0) + n * k
    value = _value(inst, objective, used, rate, provisioned, cost)
    return Baseline("greedy", "feasible", rate, rate * sum(c.share * c.output_len for c in inst.classes),
                    sum(o.power_w * n for o, n in used), provisioned, cost,
                    None if value is None else Objective(objective, value, value), tuple(sorted(devices.items())),
                    note="heuristic: colocated pools by requests per " +
                         ("dollar" if objective in ("cost", "tokens-per-dollar") else "provisioned watt"),
                    paths=_greedy_paths(inst, used))


def _greedy_paths(inst: Instance, used: list) -> tuple[tuple[float, tuple[str, ...]], ...]:
    """The greedy placement's output tokens/s by device types: each colocated option's rate at the mix."""
    tokens = sum(c.share * c.output_len for c in inst.classes)
    out: dict[tuple[str, ...], float] = {}
    for o, n in used:
        out[o.device_types] = out.get(o.device_types, 0.0) + mix_rate(inst, o) * n * tokens
    return tuple(sorted((v, k) for k, v in out.items()))


def _value(inst: Instance, objective: str, used: list, rate: float, provisioned: float,
           cost: float | None) -> float | None:
    """The objective's value of a placement the solver did not make, in the objective's units."""
    if objective == "throughput":
        return rate
    if objective == "tokens-per-watt":
        return rate / provisioned if provisioned else None
    if objective == "power":
        return provisioned
    if objective == "cost":
        return cost
    if objective == "tokens-per-dollar":
        return rate / cost if cost else None
    tpots = [o.service(c.name).at(inst.cap(o, c))[4] for o, _n in used for c in inst.classes]  # latency
    return max(tpots) * 1e3 if tpots else None
