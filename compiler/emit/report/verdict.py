"""The verdict on a plan: what it gains over each baseline, in words. ``summary.md`` opens with these sentences
and ``gimletc compile`` prints the same ones, so the report and the terminal never disagree.

A baseline ([Note: baselines] in `compiler.ir.placement`) beats the plan when ``Baseline.beats_plan``. Two
kinds of beating mean different things:

- a single device type at equal power or cost (``iso-power:<device>``, ``iso-cost:<device>``) is another
  fleet: it can beat a fixed-fleet plan, and the verdict says by how much;
- vendor islands, no disaggregation and greedy run on the plan's own inventory with placements the solver
  could choose too, so they can beat it only by what the plan's solve left open: its gap (a solve stopped
  short of its proof, or the options it pruned as near-twins), or the solver's floating-point tolerance (`compiler.emit.emit_plan.BEATS_TOLERANCE`).
  The verdict names which, and never calls the plan optimal beside a heuristic that beats it by more.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler.emit.plan import Baseline, Plan
from compiler.emit.report.figures import gain_text

#: What each objective compares, in words (``Plan.solver.objective``).
OBJECTIVE_WORDS = {"throughput": "throughput", "tokens-per-watt": "tokens/s per provisioned watt",
                   "power": "provisioned power at the arrival rate", "latency": "worst TPOT",
                   "cost": "dollars per hour at the arrival rate", "tokens-per-dollar": "tokens per dollar"}
#: What an equal budget of each kind is called.
BUDGETS = {"iso-power": "power", "iso-cost": "cost"}


@dataclass(frozen=True, slots=True)
class Line:
    """One sentence of the verdict: ``warning`` (what the plan cannot claim), ``beaten`` (a baseline beats the
    plan), ``missing`` (a baseline has no number, and why) or ``fine``."""

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


def _single_type(b: Baseline, plan: Plan, words: str) -> str:
    device = b.name.split(":", 1)[1]
    count = sum(b.devices.values())
    budget = _budget_kind(b)
    better = _better_interval(b)
    if b.within_error:
        return (f"{count} x {device} alone at equal {budget} would serve {better} the plan's {words} "
                f"({_tokens(b, plan)}): within the model's error, so neither is known to be better.")
    return (f"A single device type beats this mix at equal {budget}: {count} x {device} alone would serve "
            f"{better} the plan's {words} ({_tokens(b, plan)}, {b.provisioned_power_w / 1e3:.1f} kW "
            f"provisioned against {plan.predicted.provisioned_power_w / 1e3:.1f} kW)."
            + ("" if plan.fleet_design else " This fleet is fixed: give its devices `count: any` to let the "
                                            "solver choose the mix."))


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
    """The verdict's sentences: single device types that beat the plan at equal power or cost (best first),
    other baselines that beat it and why, baselines with no number and why, then the gains over the rest."""
    words = objective_words(plan)
    out: list[Line] = [line for line in (uncalibrated_line(plan), slo_line(plan)) if line is not None]
    ranked = sorted((b for b in plan.baselines if b.plan_gain), key=lambda b: (b.plan_gain, b.name))
    out += [Line("fine" if b.within_error else "beaten", _single_type(b, plan, words)) for b in ranked
            if b.beats_plan and _budget_kind(b)]
    # a placement the solver could choose that scores above the plan, even within BEATS_TOLERANCE, is explained
    ahead = [b for b in ranked if not _budget_kind(b) and b.plan_gain < 1]
    out += [Line("beaten" if b.beats_plan else "fine", _same_inventory(b, plan, words)) for b in ahead]
    out += [Line("missing", f"{b.name}: {b.status}, no placement to compare ({b.note or b.question}).")
            for b in plan.baselines if b.status in ("infeasible", "skipped")]
    others = [b for b in ranked if not (b.beats_plan and _budget_kind(b)) and b not in ahead]
    if others:
        listed = ", ".join(f"{b.name} {gain_text(b.plan_gain, b.plan_gain_interval)}"
                           + (" (within error)" if b.within_error else "") for b in others)
        if len(others) < len(ranked):
            out.append(Line("fine", f"The plan's gain in {words} over each other baseline (80% interval): {listed}."))
        else:
            out.append(Line("fine", f"No baseline beats the plan on {words}; the closest is {others[0].name} "
                                    f"(plan gain {gain_text(others[0].plan_gain, others[0].plan_gain_interval)}). "
                                    f"Gain over each (80% interval): {listed}."))
    return out


__all__ = ["Line", "OBJECTIVE_WORDS", "objective_words", "verdict_lines"]
