"""The verdict on a plan: what it gains over each baseline, in words. ``summary.md`` opens with these sentences
and ``gimletc compile`` prints the same ones, so the report and the terminal never disagree.

[Note: verdict order] The questions come in the order a user who owns the fleet asks them:

1. what the plan gains over the fleet as it is run today: vendor islands (each type alone), and no
   disaggregation (colocated pools only), each with its 80% interval (`today_line`);
2. for a plan that needs the reference runtime (``Plan.needs_runtime``), what runs on public engines today (the
   ``deployable`` baseline, the same question as ``compile --deployable``) and what the rest adds
   (`engines_line`);
3. what the plan cannot claim (an uncalibrated device, an SLO met only at the central estimate);
4. the buying advice: a single device type at equal power or cost, and whether the solver chose the mix
   (`buying_advice`); equal power is the plan's provisioned power where its budget does not bind
   (``Baseline.posed_power_w``, [Note: baselines] in `compiler.ir.placement`);
5. the rest: baselines the solver could have chosen that score above the plan, baselines with no number, and
   the gain over each other one.

A baseline ([Note: baselines]) beats the plan when ``Baseline.beats_plan``. Two kinds of beating mean
different things:

- a single device type at equal power or cost (``iso-power:<device>``, ``iso-cost:<device>``) is another
  fleet: it can beat a fixed-fleet plan, and the verdict says by how much;
- vendor islands, no disaggregation, deployable and greedy run on the plan's own inventory with placements the
  solver could choose too, so they can beat it only by what the plan's solve left open: its gap (a solve stopped
  short of its proof, or the options it pruned as near-twins), or the solver's floating-point tolerance
  (`compiler.emit.emit_plan.BEATS_TOLERANCE`). The verdict names which, and never calls the plan optimal beside
  a heuristic that beats it by more.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.plan.schema import Baseline, Plan
from compiler.emit.report.figures import gain_text

#: What each objective compares, in words (``Plan.solver.objective``).
OBJECTIVE_WORDS = {"throughput": "throughput", "tokens-per-watt": "tokens/s per provisioned watt",
                   "power": "provisioned power at the arrival rate", "latency": "worst TPOT",
                   "cost": "dollars per hour at the arrival rate", "tokens-per-dollar": "tokens per dollar"}
#: What an equal budget of each kind is called.
BUDGETS = {"iso-power": "power", "iso-cost": "cost"}


@dataclass(frozen=True, slots=True)
class Line:
    """One sentence of the verdict: ``lead`` (the headline: the fleet as run today, public engines), ``warning``
    (what the plan cannot claim), ``beaten`` (a baseline beats the plan), ``missing`` (a baseline has no number,
    and why) or ``fine``."""

    kind: str
    text: str


def objective_words(plan: Plan) -> str:
    return OBJECTIVE_WORDS.get(plan.solver.objective, plan.solver.objective)


def _budget_kind(b: Baseline) -> str | None:
    """``power`` or ``cost`` for a single device type at an equal budget, else None."""
    return BUDGETS.get(b.name.split(":", 1)[0])


def _better(b: Baseline) -> float:
    """How many times better `b` is than the plan, in the objective's terms."""
    return 1.0 / b.plan_gain


def _tokens(b: Baseline, plan: Plan) -> str:
    return f"{b.output_tokens_per_s:,.0f} against the plan's {plan.predicted.output_tokens_per_s:,.0f} output tokens/s"


def _kw(watts: float) -> str:
    """``81.6 kW``, ``1,000 kW``."""
    return f"{f'{watts / 1e3:,.1f}'.removesuffix('.0')} kW"


def _equal(b: Baseline, plan: Plan) -> str:
    """``equal power``, and at which power where it is not the budget (``Baseline.posed_power_w``)."""
    budget = _budget_kind(b)
    if b.posed_power_w is None or plan.power_budget_w is None:
        return f"equal {budget}"
    return (f"equal power (the plan's provisioned {_kw(b.posed_power_w)}: its {_kw(plan.power_budget_w)} budget "
            "does not bind)")


def _what(plan: Plan) -> str:
    """The plan's fleet, as a single type is compared with it: ``this mix``, or its one type."""
    used = [(d, n) for d, n in plan.devices_used.items() if n]
    if len(used) != 1:
        return "this mix"
    return f"the plan's {used[0][1]} x {used[0][0]}"


def _fixed_hint(plan: Plan) -> str:
    """What a fixed fleet's owner does to let the solver choose the mix."""
    if plan.fleet_design:
        return ""
    if len(plan.inventory) > 1:
        return " This fleet is fixed: give its devices `count: any` to let the solver choose the mix."
    return (" This fleet is fixed and of one type: add the types you could buy to the cluster file with "
            "`count: any` to let the solver choose.")


def _single_type(b: Baseline, plan: Plan, words: str) -> str:
    device = b.name.split(":", 1)[1]
    count = sum(b.devices.values())
    better = _better_interval(b)
    if b.within_error:
        return (f"{count} x {device} alone at {_equal(b, plan)} would serve {better} the plan's {words} "
                f"({_tokens(b, plan)}): within the model's error, so neither is known to be better.")
    return (f"A single device type beats {_what(plan)} at {_equal(b, plan)}: {count} x {device} alone would serve "
            f"{better} the plan's {words} ({_tokens(b, plan)}, {b.provisioned_power_w / 1e3:.1f} kW "
            f"provisioned against {plan.predicted.provisioned_power_w / 1e3:.1f} kW)." + _fixed_hint(plan))


def _gain_words(b: Baseline) -> str:
    """The plan's gain over `b` with its interval, and whether the model can tell them apart."""
    return gain_text(b.plan_gain, b.plan_gain_interval) + (" (within the model's error)" if b.within_error else "")


def today_line(plan: Plan, words: str) -> Line | None:
    """The plan's gain over its own fleet as it is run today: vendor islands, and no disaggregation."""
    named = {b.name: b for b in plan.baselines}
    islands, colocated = named.get("vendor-islands"), named.get("no-disaggregation")
    if islands is None:
        return None
    if islands.plan_gain:
        text = (f"Over this fleet as it is run today (vendor-islands: each device type serving alone, no KV or "
                f"activations across types), the plan's gain in {words} is {_gain_words(islands)}")
    else:
        text = (f"This fleet run as it is today (vendor-islands: each device type serving alone) has no placement "
                f"({islands.status}: {islands.note or islands.question})")
    if colocated is not None and colocated.plan_gain:
        text += f"; over the same fleet with colocated pools only (no-disaggregation), {_gain_words(colocated)}"
    return Line("lead", text + ".")


def engines_line(plan: Plan, words: str) -> Line | None:
    """For a plan that needs the reference runtime: what the same question gives on public engines today (the
    ``deployable`` baseline), and what the rest adds."""
    if not plan.needs_runtime:
        return None
    features = sorted({n.feature for n in plan.needs_runtime})
    pools = sorted({p for n in plan.needs_runtime for p in n.pools}, key=lambda p: (len(p), p))
    needs = (f"the plan needs the reference runtime for {', '.join(features)} ({', '.join(pools)}), which no "
             "public engine runs")
    dep = next((b for b in plan.baselines if b.name == "deployable"), None)
    if dep is None:
        return Line("lead", f"On public engines today: {needs}; `compile --deployable` gives a plan they run.")
    if not dep.plan_gain:
        return Line("lead", f"On public engines today: {needs}, and held to what they run (deployable) the fleet has "
                            f"no placement ({dep.status}: {dep.note or dep.question}).")
    within = " (within the model's error)" if dep.within_error else ""
    return Line("lead", f"On public engines today: {needs}; held to what they run (deployable, as `compile "
                        f"--deployable`) the fleet serves {dep.output_tokens_per_s:,.0f} output tokens/s, and what "
                        f"needs the reference runtime adds {gain_text(dep.plan_gain, dep.plan_gain_interval)} in "
                        f"{words}{within}.")


def advised(ranked: list[Baseline]) -> list[Baseline]:
    """The single device types the buying advice names: each one that beats the plan (best first), else the
    closest; `ranked` are the baselines with a gain, the best against the plan first."""
    single = [b for b in ranked if _budget_kind(b)]
    return [b for b in single if b.beats_plan] or single[:1]


def buying_advice(plan: Plan, ranked: list[Baseline], words: str) -> list[Line]:
    """A single device type at equal power or cost (`advised`), in words."""
    named = advised(ranked)
    if len(named) == 1 and not named[0].beats_plan:
        closest = named[0]
        device = closest.name.split(":", 1)[1]
        return [Line("fine", f"No single device type beats the plan at {_equal(closest, plan)}: its gain over the "
                             f"closest, {sum(closest.devices.values())} x {device} alone, is "
                             f"{_gain_words(closest)}.")]
    return [Line("fine" if b.within_error else "beaten", _single_type(b, plan, words)) for b in named]


def _better_interval(b: Baseline) -> str:
    """How many times better `b` is than the plan, with its 80% interval: ``1.29x (1.05-1.61)``."""
    bounds = b.plan_gain_interval
    inverse = None if not bounds else [1.0 / bounds[1] if bounds[1] else 0.0,
                                       1.0 / bounds[0] if bounds[0] else None]
    return gain_text(_better(b), inverse)


def uncalibrated_line(plan: Plan) -> Line | None:
    """The plan's devices whose predictions nothing measured bounds, and how to bound them; no SLO is met there."""
    if not plan.unbounded_devices:
        return None
    why = "; ".join(f"{d}: {basis}" for d, basis in sorted(plan.unbounded_devices.items()))
    return Line("warning", f"Uncalibrated: no measurement bounds the predictions on {', '.join(plan.unbounded_devices)}, "
                          f"so no SLO is claimed met there ({why}).")


def slo_line(plan: Plan) -> Line | None:
    """Classes whose SLO is met only at the central prediction: their 80% interval reaches past a target (a class
    on an unbounded device is named by `uncalibrated_line` already)."""
    on_unbounded = {p.name for p in plan.pools if p.device in plan.unbounded_devices}
    central = [c.name for c in plan.classes if c.meets_slo_at_estimate and not c.meets_slo
               and not on_unbounded & set(c.pools)]
    if not central:
        return None
    return Line("warning", f"SLO met only at the central estimate for {', '.join(central)}: the 80% interval of "
                          "its latency reaches past the target (see the request classes).")


def _same_inventory(b: Baseline, plan: Plan, words: str) -> str:
    """A baseline the solver could have chosen beats the plan: say what the plan's solve left open."""
    from compiler.emit.emit_plan import BEATS_TOLERANCE

    edge = _better(b) - 1.0
    s = plan.solver
    gap = s.gap if s.status == "feasible" or s.pruning else 0.0
    head = (f"{b.name} ({b.question}) scores {_better(b):.6f}x the plan's {words} ({_tokens(b, plan)}), a "
            f"placement the solver could have chosen: ")
    if edge <= gap and s.status == "feasible":
        return head + (f"within the {100 * gap:.2f}% gap at which the plan's solve stopped (feasible, not proven "
                       "optimal); a longer --time-limit closes it.")
    if edge <= gap:
        return head + (f"within the {100 * gap:.2f}% bound of the options the plan's solve pruned as near-twins; "
                       "`compile --exact` prunes none.")
    if edge <= BEATS_TOLERANCE:
        return head + f"a tie, within the solver's floating-point tolerance ({BEATS_TOLERANCE:g})."
    return head + (f"{100 * edge:.3f}% more than the plan's gap ({100 * gap:.3f}%) and the solver's tolerance "
                   "allow. That is a bug in gimletc's placement; please report it with this plan.json.")


def verdict_lines(plan: Plan) -> list[Line]:
    """The verdict's sentences, in the order of [Note: verdict order]."""
    words = objective_words(plan)
    out = [line for line in (today_line(plan, words), engines_line(plan, words)) if line is not None]
    out += [line for line in (uncalibrated_line(plan), slo_line(plan)) if line is not None]
    ranked = sorted((b for b in plan.baselines if b.plan_gain), key=lambda b: (b.plan_gain, b.name))
    out += buying_advice(plan, ranked, words)
    # a placement the solver could choose that scores above the plan, even within BEATS_TOLERANCE, is explained
    ahead = [b for b in ranked if not _budget_kind(b) and b.plan_gain < 1]
    out += [Line("beaten" if b.beats_plan else "fine", _same_inventory(b, plan, words)) for b in ahead]
    out += [Line("missing", f"{b.name}: {b.status}, no placement to compare ({b.note or b.question}).")
            for b in plan.baselines if b.status in ("infeasible", "skipped")]
    stated = {"vendor-islands", "no-disaggregation", "deployable"} | {b.name for b in advised(ranked)}
    others = [b for b in ranked if b.name not in stated and b not in ahead]
    if others:
        listed = ", ".join(f"{b.name} {gain_text(b.plan_gain, b.plan_gain_interval)}"
                           + (" (within error)" if b.within_error else "") for b in others)
        out.append(Line("fine", f"The plan's gain in {words} over each other baseline (80% interval): {listed}."))
    return out


__all__ = ["Line", "OBJECTIVE_WORDS", "advised", "buying_advice", "engines_line", "objective_words", "today_line",
           "verdict_lines"]
