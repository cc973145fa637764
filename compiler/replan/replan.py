"""Re-plan a running deployment from its engines' metrics, with the fewest moves: ``gimletc replan``.

Before: the running plan (``DIR/plan.json``), what it was compiled from (`CompileInputs`) and metrics snapshots
(`compiler.replan.metrics`). After: a `Replan`: the measured window (`Observation`), the forecast workload,
the correction factors, the re-solved placement and the `Decision` whether to move, with its diff.

Steps:
1. **Measure** the last ``window_s`` of the snapshots (`compiler.replan.observe`): classes recognised by prompt
   length, their arrivals and mean lengths; each pool's load and mean TTFT and TPOT.
2. **Forecast** each class's rate over the next window from the consecutive windows the snapshots hold
   (`compiler.replan.forecast`: Holt's or the last window's rate, per class whichever replayed better on those
   windows, `compiler.replan.forecast.chosen_forecast`). The workload to plan for is the compiled one with these
   shares and mean lengths (a class's longest prompt or output raised to its mean when the mean passed it), and, where the
   compiled workload names an arrival rate, the forecast total.
3. **Re-cost** that workload with the compile's own inputs (`compiler.driver.prepare`: the same model, cluster,
   budgets and precision), cost again each device type whose decode steps measured slow or fast at the memory
   efficiency that explains them, and **correct** the options with what is left of the measured factors
   (`compiler.replan.correct`, [Note: a TPOT factor carried as memory efficiency]).
4. **Re-solve** from the running placement (`compiler.place.moves`): at most ``max_moves`` replicas started or
   stopped, then the fewest moves within ``slack`` of that optimum. Two more solves price the choice: the running
   placement kept (re-routed only: routing is free) and a fresh compile (no move limit), both on the same corrected
   costs and forecast workload.
5. **Decide** ([Note: hysteresis], [Note: cool-down]).

[Note: hysteresis] A move is proposed only when it pays beyond the noise: the gain (the proposed placement's
objective over the running one's, both predicted on the corrected costs, as a relative change: larger
requests/s, or fewer watts or dollars) must reach ``min_gain`` and exceed twice its standard error. The error
comes from the measurements: each measured device type's factors and each class's share moved by one standard
error, one at a time, both placements re-valued, and the gain's changes added in quadrature. When the running
placement cannot meet the forecast workload at all (its re-solve is infeasible), moving is not optional and
the threshold does not apply. A held replan still reports what it would have moved.

[Note: forecast error] The gain is predicted for the forecast mix, and the forecast is the least certain input:
replayed on the trace of `tools/replay.py`, its one-step error is 19-43% of a class's rate, against a share's
sampling error under 1%. A move tuned to one mix may lose its gain, or overload, when the next window brings
another (on the simulated day: a move made for 1.6 documents/s, undone two windows later at 2.9/s). So the
gain's standard error also takes each class's forecast rate moved up and down by ``forecast_weight`` times the
one-step error its forecast replayed on the windows read (mean absolute percentage error, taken as one
standard error), one class at a time, the others kept. A class whose forecast has not been replayed (fewer
than three windows read) adds nothing: it is stated with the forecast. ``forecast_weight`` 0 leaves it out.

[Note: cool-down] The hysteresis judges one window; a load that drifts back and forth around the point where two
placements tie gets a move each way, each over the threshold (on the simulated day of `tools/replay.py`, a
colocated H200 c8 replica added and removed three windows apart, c128 added and removed twice: three reversals
in a day). So a replan that moves a shape back (fewer replicas of a shape a recent replan scaled up or added,
or more of one it scaled down or removed) within ``cooldown_windows`` windows of that change must clear
``min_gain + cooldown_gain``, not ``min_gain`` (and two standard errors, as always). It still moves back at once
when it must: when the running placement cannot serve the forecast workload, or when the running plan, routing
as it does now (a held replan changes no route), would run a pool at or past `MAX_UTILISATION` at the forecast
rates on the corrected costs, or at any one class's forecast moved up by ``forecast_weight`` times the
forecasts' replayed error ([Note: forecast error]; `checked_rates`): a reversal is held only while the running
plan would carry the next window's load as the forecasts' own record of misses says it may come. (On the
simulated day, a reversal held at the point forecast, 7.6 documents/s with the last-value forecast 2% off over
three windows, left a decode pool to overload in the next window at 10.3/s: 71% of that window's requests within
their SLO. Holt's replayed error there was 36%.) The same shortfall lifts the two-standard-error rule: staying is
not the safe choice the noise rule assumes when it overloads a pool (after the refit of 2026-12-05, a move of
+27.2% held for being within two standard errors, 22.0%, left a pool overloaded for two windows, 87% and 83% of
their requests within the SLO, and the day at 96.2% against 98.6% with the anti-flap rules off; with the rule
lifted, 98.8%). The changes come from the running plan's own
``report/replan.json`` (`compiler.replan.history.read_history`): each replan records the changes of the last
``cooldown_windows`` windows before its window's end, with this one's when it acts, so the next replan of the directory it writes
knows them. A plan compiled from scratch has none. ``cooldown_windows`` 0 turns the rule off.

Every objective value, latency and gain here is a prediction of the (corrected) cost model; the `Observation`
and the factors' measured sides are measurements, from the snapshots named.
"""

from __future__ import annotations

import logging
import math
from dataclasses import dataclass, field, replace
from pathlib import Path

from compiler.compile_inputs import CompileInputs, repeat_warnings_muted
from compiler.ir.errors import BadInput, Infeasible
from compiler.ir.placement import OBJECTIVE_SENSE, Instance, Solution
from compiler.place.moves import Moves, base_key
from compiler.replan.correct import (
    Factors, PoolFactors, Recost, at_measured_efficiency, corrected, fit, with_corrected_predictions,
)
from compiler.replan.forecast import (MIN_SHARE, checked_rates, chosen_forecast, errors, forecast_mixes,
                                      forecast_statement, holt)
from compiler.replan.history import PastChange, moved_back, read_history, recent_changes
from compiler.replan.metrics import Snapshot, window, windows
from compiler.replan.observe import ClassShape, Observation, observe
from compiler.replan.routes import RouteChange, route_changes, routed_utilisation
from compiler.replan.settings import GAIN_SIGMAS, ClassPlan, Settings
from cost_models.queueing import MAX_UTILISATION

log = logging.getLogger(__name__)

@dataclass(frozen=True, slots=True)
class PoolChange:
    """One replica shape (an option's key without class or KV-target suffix): replicas before and after."""

    shape: str
    role: str
    device: str
    before: int
    after: int

    @property
    def kind(self) -> str:
        return "added" if not self.before else "removed" if not self.after else "scaled"


@dataclass(frozen=True, slots=True)
class Decision:
    """Whether to move ([Note: hysteresis]); values in the objective's unit (`Objective.quantity`), predicted."""

    objective: str
    quantity: str
    current_value: float | None  # the running placement, re-routed (None: it cannot meet the workload)
    proposed_value: float
    fresh_value: float
    moves: int  # replicas started or stopped by the proposal (a change of shape counts once)
    fresh_moves: int
    max_moves: int | None
    gain: float | None
    gain_se: float
    min_gain: float
    act: bool
    reason: str
    moved_back: tuple[str, ...] = ()  # shapes the proposal moves back within the cool-down ([Note: cool-down])

    @property
    def below_fresh(self) -> float:
        """How much of a fresh compile's objective the proposal gives up for fewer moves (a fraction)."""
        sense = OBJECTIVE_SENSE[self.objective]
        if not self.fresh_value:
            return 0.0
        return (1 - self.proposed_value / self.fresh_value) if sense == "max" else \
            (self.proposed_value / self.fresh_value - 1)


@dataclass(frozen=True)
class Replan:
    """What `replan` returns (see the module docstring). ``solution`` and ``plan`` are what to run next: the
    proposal when the decision acts, else the running placement re-routed; both predicted on corrected costs."""

    plan_dir: str
    sources: tuple[str, ...]
    observation: Observation
    classes: tuple[ClassPlan, ...]
    pools: tuple[PoolFactors, ...]
    factors: tuple[Factors, ...]
    decision: Decision
    changes: tuple[PoolChange, ...]
    routes: tuple[RouteChange, ...]
    workload_yaml: str
    forecast: str  # the forecast used and its replayed error, in words (`forecast_statement`)
    #: the changes of the last cool-down windows, this one's included when it acts ([Note: cool-down])
    history: tuple[PastChange, ...] = ()
    solution: Solution = field(repr=False, compare=False, default=None)
    instance: Instance = field(repr=False, compare=False, default=None)
    prepared: object = field(repr=False, compare=False, default=None)
    plan: object = field(repr=False, compare=False, default=None)  # the next `Plan`

    def summary(self) -> dict:
        """Everything but the heavy values, as plain data (``--json``, ``report/replan.json``)."""
        from dataclasses import asdict

        out = {k: v for k, v in asdict(self).items() if k not in ("solution", "instance", "prepared", "plan")}
        out["decision"]["below_fresh"] = self.decision.below_fresh
        out["prediction"] = True
        return out


def current_replicas(plan) -> tuple[tuple[str, int], ...]:
    """The running placement as `compiler.place.moves` counts it: replicas per shape. A decode-af or drafted
    option runs as two pools; its replicas are those of the pool whose role is the option's kind (else the
    fewer of the two)."""
    by_key: dict[str, list] = {}
    for p in plan.pools:
        by_key.setdefault(p.option, []).append(p)
    out: dict[str, int] = {}
    for key, pools in by_key.items():
        kind = key.split(":", 1)[0]
        n = next((p.replicas for p in pools if p.role == kind), min(p.replicas for p in pools))
        out[base_key(key)] = out.get(base_key(key), 0) + n
    return tuple(sorted(out.items()))


@dataclass(frozen=True)
class Measured:
    """Steps 1-3 of a replan (module docstring): the running plan, the window measured, the forecast classes, the
    workload planned for (and its YAML), the re-costed compile and the options at the measured efficiencies
    (``raw``) with the factors left to correct them."""

    plan: object
    observation: Observation
    classes: tuple[ClassPlan, ...]
    workload_yaml: str
    prepared: object
    pools: tuple[PoolFactors, ...]
    factors: tuple[Factors, ...]
    raw: Instance

    @property
    def corrected(self) -> Instance:
        return with_factors(self.raw, self.factors)

    @property
    def forecast_requests_per_s(self) -> float:
        return sum(c.forecast_requests_per_s for c in self.classes)


def measured(plan_dir: str | Path, inputs: CompileInputs, snaps: list[Snapshot], settings: Settings = Settings(),
             *, workload_dir: str | Path, progress=None) -> Measured:
    """Measure, forecast and re-cost (steps 1-3 of the module docstring); `workload_dir` receives
    ``workload.yaml``, the workload planned for."""
    from compiler.driver import prepare
    from compiler.plan.checks import load_plan
    from compiler.inputs import load_workload

    note = progress or (lambda _m: None)
    plan = load_plan(plan_dir)
    compiled = load_workload(inputs.workload)
    shapes = [ClassShape(c.name, c.input_len.mean, c.input_len.max, c.output_len.mean, c.output_len.max)
              for c in compiled.classes]
    shares = {c.name: c.share for c in compiled.classes}
    obs = observe(window(snaps, settings.window_s), plan, shapes, shares)
    if obs.requests_per_s <= 0:
        raise BadInput(f"--metrics: no requests were recognised in the last {settings.window_s:g} s of "
                       f"{snaps[-1].source}; give scrapes of engines that served traffic (vllm:request_prompt_tokens "
                       "histograms)")
    series = [observe(w, plan, shapes, shares) for w in windows(snaps, settings.window_s)]
    classes = _forecast(obs, series, settings.forecast)
    workload, text = planned_workload(compiled, classes)
    _check_context(inputs.model, workload, classes, snaps[-1].source, plan_dir)
    path = Path(workload_dir) / "workload.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    note(f"re-costing {inputs.model} for the measured workload ({', '.join(f'{c.name} {c.share:.0%}' for c in classes)})")
    with repeat_warnings_muted():
        prep = prepare(inputs.model, inputs.cluster, str(path), power_budget_w=inputs.power_budget_w,
                       slo_ttft_ms=inputs.slo_ttft_ms, slo_tpot_ms=inputs.slo_tpot_ms, precision=inputs.precision(),
                       cost_budget_per_hour=inputs.cost_budget_per_hour, deployable=inputs.deployable,
                       calibration=inputs.calibration)
    pools, factors = fit(obs, plan, list(prep.options), prep.instance.classes)
    options, factors = at_measured_efficiency(obs, plan, prep.options, prep.instance.classes, factors, recost_of(prep))
    raw = prep.instance.with_options(options)
    pools = with_corrected_predictions(pools, obs, corrected(options, factors, raw.classes), plan, raw.classes)
    return Measured(plan, obs, classes, text, prep, pools, factors, raw)


def replan(plan_dir: str | Path, inputs: CompileInputs, snaps: list[Snapshot], settings: Settings = Settings(),
           *, workload_dir: str | Path, progress=None) -> Replan:
    """See the module docstring. `workload_dir` receives ``workload.yaml``, the workload planned for (the new plan
    directory, or a scratch folder)."""
    note = progress or (lambda _m: None)
    m = measured(plan_dir, inputs, snaps, settings, workload_dir=workload_dir, progress=progress)
    plan, obs, classes, text, prep, pools, factors, raw = (m.plan, m.observation, m.classes, m.workload_yaml,
                                                           m.prepared, m.pools, m.factors, m.raw)
    note("re-solving from the running placement (MILP, HiGHS)")
    current = current_replicas(plan)
    now_s = obs.start_s + obs.seconds
    recent = recent_changes(read_history(plan_dir), now_s, settings)
    inst = with_factors(raw, factors)
    decision, proposed, stay = decide(raw, factors, inputs.objective, current, classes, settings, recent, now_s,
                                      busiest_utilisation(plan, inst.options, classes, settings))
    from compiler.emit.emit_plan import emit_plan

    draft = prep.draft.graph if prep.draft is not None else None
    emit = lambda sol: emit_plan(prep.graph, prep.cluster, prep.workload, prep.precision, inst, sol, [], [],  # noqa: E731
                                 draft_graph=draft)
    chosen = proposed if decision.act else stay
    nxt = emit(chosen)
    candidate = nxt if chosen is proposed else emit(proposed)
    changes = pool_changes(current, proposed)
    history = recent + (tuple(PastChange(now_s, c.shape, c.before, c.after) for c in changes) if decision.act else ())
    return Replan(str(plan_dir), tuple(s.source for s in snaps), obs, classes, pools, factors, decision,
                  changes, route_changes(plan, candidate), text, forecast_statement(settings, classes), history,
                  chosen, inst, prep, nxt)


def _check_context(model: str, workload, classes: tuple[ClassPlan, ...], source: str, plan_dir: str | Path) -> None:
    """`BadInput` naming the user's metrics and plan when the lengths measured there make a request longer than
    the plan's model holds: this plan's engines serve no such requests, so the metrics are most likely another
    deployment's. (Left to `prepare`, the error would name the scratch workload file, which the user never saw.)"""
    from compiler.driver import context_len

    limit = context_len(model)
    measured = {c.name: c for c in classes}
    for c in workload.classes if limit else ():
        longest = c.input_len.max + c.output_len.max
        if longest > limit:
            m = measured[c.name]
            raise BadInput(f"--metrics {source}: class {c.name} there averages {m.input_mean:.0f} prompt + "
                           f"{m.output_mean:.0f} output tokens; planned for, its longest request reaches {longest} "
                           f"tokens, beyond the context of {limit} of {model}, which plan {plan_dir} runs: are these "
                           f"another deployment's metrics? give the scrapes of the engines running {plan_dir}")


def with_factors(raw: Instance, factors: tuple[Factors, ...]) -> Instance:
    """`raw` (costed as modelled, at the measured memory efficiencies) with every option corrected by `factors`."""
    return raw.with_options(corrected(raw.options, factors, raw.classes))


def recost_of(prep) -> Recost:
    """`prep`'s options on one device type costed again as the compile costs them, with the type's memory
    efficiency divided by a number (at most 1.0; [Note: a TPOT factor carried as memory efficiency])."""
    from compiler.sensitivity import recosted

    def recost(device: str, divisor: float) -> list:
        return recosted(prep, {device}, lambda d: replace(d, mem_eff=min(1.0, d.mem_eff / divisor)),
                        [o for o in prep.options if device not in o.device_types])

    return recost


def _forecast(obs: Observation, series: list[Observation], how: str) -> tuple[ClassPlan, ...]:
    rates = {c.name: [o_c.requests_per_s for o in series for o_c in o.classes if o_c.name == c.name]
             for c in obs.classes}
    scored = {n: errors(r) for n, r in rates.items()}
    ahead = {n: (holt(r) if chosen_forecast(how, scored[n]) == "holt" else r[-1]) for n, r in rates.items()}
    total = sum(ahead.values())
    if total <= 0:  # every class forecast to vanish: plan for the mix just measured
        ahead = {c.name: c.requests_per_s for c in obs.classes}
        total = sum(ahead.values())
    out = []
    for c in obs.classes:
        e = scored[c.name]
        known = e.points > 0
        out.append(ClassPlan(c.name, c.requests_per_s, ahead[c.name], ahead[c.name] / total, c.share_se,
                             c.input_mean, c.output_mean, len(rates[c.name]), e.holt_mape if known else None,
                             e.last_value_mape if known else None, e.points))
    return tuple(out)


def planned_workload(compiled, classes: tuple[ClassPlan, ...]):
    """The compiled `Workload` with the measured shares and mean lengths (each longest length raised to its mean
    when the mean passed it) and, where it names an arrival rate, the forecast total; and its YAML text."""
    import yaml

    from compiler.inputs.workload import Workload

    by_name = {c.name: c for c in classes}
    out = []
    for c in compiled.classes:
        est = by_name[c.name]
        length = lambda given, mean: {"mean": round(max(mean, 1.0), 1),  # noqa: E731
                                      "max": max(given.max, math.ceil(round(max(mean, 1.0), 1)))}
        out.append(c.model_copy(update={"share": round(max(est.share, MIN_SHARE), 6),
                                        "input_len": type(c.input_len)(**length(c.input_len, est.input_mean)),
                                        "output_len": type(c.output_len)(**length(c.output_len, est.output_mean))}))
    update = {"classes": tuple(out), "name": f"{compiled.name} (replan)"}
    if compiled.arrival_rate_per_s != "maximise":
        update["arrival_rate_per_s"] = round(max(sum(c.forecast_requests_per_s for c in classes), 1e-6), 6)
    data = Workload.model_validate({**compiled.model_dump(), **update}).model_dump(mode="json", exclude_none=True)
    data.pop("trace", None)
    text = ("# The workload gimletc replan planned for: the compiled one with the measured mix and lengths "
            "(measurements)\n# and, where it named a rate, the forecast rate (a prediction).\n"
            + yaml.safe_dump(data, sort_keys=True))
    return Workload.model_validate(data), text


def sense_gain(objective: str, current: float | None, proposed: float) -> float | None:
    if current is None or current <= 0 or proposed <= 0:
        return None
    return proposed / current - 1 if OBJECTIVE_SENSE[objective] == "max" else current / proposed - 1


def _solve(inst: Instance, objective: str, moves: Moves | None, time_limit_s: float) -> Solution:
    from compiler.place.ilp import solve

    return solve(inst, objective, time_limit_s=time_limit_s, moves=moves, explain=False)


def value_of(inst: Instance, objective: str, replicas: tuple[tuple[str, int], ...], time_limit_s: float = 60.0
             ) -> float | None:
    """The objective of the placement with these replicas per shape, re-routed at best; None if it cannot meet
    the workload."""
    s = _solve(inst, objective, Moves(replicas, max_moves=0), time_limit_s)
    return s.objective.value if s.feasible else None


def shapes_of(sol: Solution) -> tuple[tuple[str, int], ...]:
    out: dict[str, int] = {}
    for key, n in sol.replicas:
        out[base_key(key)] = out.get(base_key(key), 0) + n
    return tuple(sorted(out.items()))


def moves_between(a: tuple[tuple[str, int], ...], b: tuple[tuple[str, int], ...]) -> int:
    """Replicas started or stopped between two placements (the larger of the two sums, as `compiler.place.moves`
    counts them)."""
    da, db = dict(a), dict(b)
    keys = set(da) | set(db)
    up = sum(max(db.get(k, 0) - da.get(k, 0), 0) for k in keys)
    down = sum(max(da.get(k, 0) - db.get(k, 0), 0) for k in keys)
    return max(up, down)


def decide(raw: Instance, factors: tuple[Factors, ...], objective: str, current: tuple[tuple[str, int], ...],
           classes: tuple[ClassPlan, ...], settings: Settings, recent: tuple[PastChange, ...] = (),
           now_s: float = 0.0, busiest: float = 0.0) -> tuple[Decision, Solution, Solution | None]:
    """The proposal, the running placement and a fresh compile on `raw` corrected by `factors`, and whether to
    move ([Note: hysteresis], [Note: cool-down]: `recent` the changes of the cool-down as of `now_s`, `busiest`
    the running plan's busiest pool's utilisation at the forecast rates as it routes them now); returns the
    `Decision`, the proposal and the running placement re-routed (None when it cannot meet the workload)."""
    from compiler.ir.placement import OBJECTIVE_QUANTITIES

    inst = with_factors(raw, factors)
    proposed = _solve(inst, objective, Moves(current, settings.max_moves, settings.slack), settings.time_limit_s)
    fresh = _solve(inst, objective, None, settings.time_limit_s)
    stay = _solve(inst, objective, Moves(current, max_moves=0), settings.time_limit_s)
    if not proposed.feasible:
        limit = f" within --max-moves {settings.max_moves}" if settings.max_moves is not None else ""
        raise Infeasible(f"no placement{limit} serves the forecast workload on the corrected costs"
                         + ("" if fresh.feasible else " (nor does a fresh compile: the fleet is too small for it)")
                         + ("; raise --max-moves" if settings.max_moves is not None and fresh.feasible else ""))
    after = shapes_of(proposed)
    moves = moves_between(current, after)
    current_value = stay.objective.value if stay.feasible else None
    gain = sense_gain(objective, current_value, proposed.objective.value)
    se = gain_se(gain_variants(raw, factors, classes, settings), objective, current, after, settings) \
        if moves and gain is not None else 0.0
    back = moved_back(recent, current, after)
    act, reason = judged(moves, current_value, gain, se, back, busiest, settings, now_s)
    decision = Decision(objective, OBJECTIVE_QUANTITIES[objective], current_value, proposed.objective.value,
                        fresh.objective.value if fresh.feasible else math.nan, moves,
                        moves_between(current, shapes_of(fresh)) if fresh.feasible else 0, settings.max_moves, gain,
                        se, settings.min_gain, act, reason, tuple(sorted({c.shape for c in back})))
    return decision, proposed, (stay if stay.feasible else None)


def judged(moves: int, current_value: float | None, gain: float | None, se: float, back: tuple[PastChange, ...],
           busiest: float, settings: Settings, now_s: float) -> tuple[bool, str]:
    """Whether to move from the running placement (valued `current_value`, None: it cannot serve the forecast) to
    a proposal `moves` replicas away whose predicted `gain` has standard error `se`, and why ([Note: hysteresis],
    [Note: cool-down]: `back` the recent changes it reverses as of `now_s`, `busiest` the running plan's busiest
    pool's utilisation at the forecast rates as it routes them now)."""
    short = busiest >= MAX_UTILISATION  # [Note: cool-down]: the running plan, as routed, cannot carry the forecast
    overload = (f"the running plan routed now would run a pool at {busiest:.0%} at the forecast rates (or a class's "
                "forecast up by its replayed error)")
    if not moves:
        return False, "the running placement is still the best reachable: no move"
    if current_value is None:
        return True, "the running placement cannot serve the forecast workload: moving is required"
    if gain is None:
        return False, "held: no gain to compare (a placement valued at zero)"
    if gain < settings.min_gain:
        return False, (f"held: the predicted gain {gain:+.1%} is below the threshold {settings.min_gain:.0%} "
                       "(--min-gain)")
    if back and not short and gain < settings.min_gain + settings.cooldown_gain:
        what = ", ".join(f"{c.shape} {c.before}->{c.after} {round((now_s - c.time_s) / settings.window_s)} window(s) "
                         "ago" for c in back)
        return False, (f"held: the proposal moves back a recent change ({what}; --cooldown {settings.cooldown_windows} "
                       f"windows) and its predicted gain {gain:+.1%} is below the threshold plus the cool-down margin "
                       f"({settings.min_gain:.0%} + {settings.cooldown_gain:.0%}, --cooldown-gain)")
    if gain <= GAIN_SIGMAS * se and not short:
        return False, (f"held: the predicted gain {gain:+.1%} is within {GAIN_SIGMAS:g} standard errors ({se:.1%}) of "
                       "the measurements' noise")
    # a move; within the noise only where short: staying is not the safe choice the noise rule assumes
    noisy = gain <= GAIN_SIGMAS * se
    reason = (f"move: the predicted gain {gain:+.1%} clears the threshold {settings.min_gain:.0%}"
              + (f"; it is within {GAIN_SIGMAS:g} standard errors ({se:.1%}) of the measurements' noise, but "
                 f"{overload}" if noisy else f" and {GAIN_SIGMAS:g} standard errors ({se:.1%})"))
    if back:
        reason += f"; it moves back a change of the last {settings.cooldown_windows} windows" + (
            "" if noisy else f", as {overload}" if short else
            f" and clears the cool-down margin ({settings.min_gain:.0%} + {settings.cooldown_gain:.0%})")
    return True, reason


def gain_variants(raw: Instance, factors: tuple[Factors, ...], classes: tuple[ClassPlan, ...], settings: Settings
                  ) -> list[tuple[Instance, Instance]]:
    """The measurements moved by one standard error each way, one at a time ([Note: hysteresis]): each measured
    device type's factors, each class's share, each class's forecast (`forecast_mixes`); pairs of instances."""
    variants: list[tuple[Instance, Instance]] = []
    for f in factors:  # each measured device type, its shapes with it
        if not f.shape and (f.ttft_samples or f.tpot_samples):
            variants.append(tuple(with_factors(raw, tuple(g.moved(sign) if g.device == f.device else g
                                                          for g in factors)) for sign in (1, -1)))
    inst = with_factors(raw, factors)
    for c in classes if len(classes) > 1 else ():
        if c.share_se <= 0:
            continue
        pair = []
        for sign in (1, -1):
            shares = {t.name: t.share for t in inst.classes}
            shares[c.name] = max(shares[c.name] + sign * c.share_se, MIN_SHARE)
            total = sum(shares.values())
            pair.append(replace(inst, classes=tuple(replace(t, share=shares[t.name] / total) for t in inst.classes)))
        variants.append(tuple(pair))
    return variants + _forecast_variants(inst, classes, settings)


def gain_se(variants: list[tuple[Instance, Instance]], objective: str, current, after, settings: Settings) -> float:
    """The gain's standard error ([Note: hysteresis]): the gain of `after` over `current` re-valued under each
    pair of `variants`, half their difference, added in quadrature."""
    var = 0.0
    for up, down in variants:
        g = [sense_gain(objective, value_of(i, objective, current, settings.time_limit_s),
                         value_of(i, objective, after, settings.time_limit_s) or 0.0) for i in (up, down)]
        if all(x is not None for x in g):
            var += ((g[0] - g[1]) / 2) ** 2
    return math.sqrt(var)


def _forecast_variants(inst: Instance, classes: tuple[ClassPlan, ...], settings: Settings
                       ) -> list[tuple[Instance, Instance]]:
    """`inst` with each pair of `forecast_mixes`."""
    return [tuple(replace(inst, classes=tuple(replace(t, share=mix.get(t.name, t.share)) for t in inst.classes))
                  for mix in pair) for pair in forecast_mixes(classes, settings)]


def busiest_utilisation(plan, options, classes: tuple[ClassPlan, ...], settings: Settings) -> float:
    """The busiest pool of the running `plan`, routed as it is now, at its classes' forecast rates or a class's
    forecast up by its replayed error (`checked_rates`), on `options` ([Note: cool-down])."""
    return max((u for rates in checked_rates(classes, settings)
                for u in routed_utilisation(plan, options, rates).values()), default=0.0)


def changed_shapes(current: tuple[tuple[str, int], ...], after: tuple[tuple[str, int], ...]
                   ) -> list[tuple[str, int, int]]:
    """Each shape whose replicas differ between two placements: (shape, before, after), by shape."""
    a, b = dict(current), dict(after)
    return [(k, a.get(k, 0), b.get(k, 0)) for k in sorted(set(a) | set(b)) if a.get(k, 0) != b.get(k, 0)]


def pool_changes(current: tuple[tuple[str, int], ...], sol: Solution) -> tuple[PoolChange, ...]:
    """Every shape whose replicas differ between the running placement and `sol`."""
    return tuple(PoolChange(shape, *shape.split(":")[:2], n, m) for shape, n, m in changed_shapes(current,
                                                                                                 shapes_of(sol)))
