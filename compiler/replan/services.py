"""``gimletc replan`` of a services plan (``compile --services``): read every service's engines, forecast each
service's demand, and move replicas between services when the mix of demand shifts.

Before: the running services plan (``DIR/services.json``, a plan folder per service, each with the inputs it
was compiled from) and scrapes of every service's engines. After: a `ServicesReplan`: per service what was
measured and forecast, the joint re-solve from the running placement, and whether to move.

[Note: replanning many services] Each engine's scrape goes to the service whose name its samples carry
(vLLM's ``model_name`` label: each service's engines serve its name; `compiler.replan.metrics.by_model`).
Each service is then measured, forecast and re-costed as a single plan is (`compiler.replan.replan.measured`:
its classes, the measured efficiencies of its pools). The joint instance (`compiler.services.joint`) holds each
service at its forecast rate (its floor), with the services' weights, and is re-solved from the running
placement (`compiler.place.moves`: at most ``max_moves`` replicas started or stopped, then the fewest within
``slack``): replicas a service no longer needs go to one whose demand grew. A move is made when the running
placement cannot serve every service's forecast, or when its predicted gain clears the rules a single plan's
replan judges by (`compiler.replan.replan.judged`: ``min_gain``, two standard errors, the cool-down; [Note:
hysteresis], [Note: forecast error], [Note: cool-down]), taken over every service: the gain's standard error adds
each service's measurements and forecasts moved one at a time (the others kept) in quadrature; the changes a
move would reverse are those the running services plan's ``replan.json`` records (shapes named
``service/shape``); the overload check runs each service's running plan at its forecast rates as it routes them.
Every rate planned for is a forecast and every objective value a prediction of the corrected cost model.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from compiler.compile_inputs import CompileInputs
from compiler.ir.errors import BadInput, Infeasible
from compiler.replan.history import PastChange, history_in, moved_back, recent_changes
from compiler.replan.metrics import Snapshot, by_model
from compiler.replan.replan import (Measured, Settings, busiest_utilisation, changed_shapes, current_replicas,
                                    gain_se, gain_variants, judged, measured, moves_between, sense_gain, shapes_of)


@dataclass(frozen=True)
class ServiceChange:
    """One service in a replan: its measured and forecast requests/s, and its devices before and after."""

    name: str
    measured_requests_per_s: float
    forecast_requests_per_s: float
    devices_before: dict
    devices_after: dict
    replicas_before: int
    replicas_after: int


@dataclass(frozen=True)
class ServicesDecision:
    objective: str
    current_value: float | None  # the running placement re-routed (None: it cannot serve every forecast)
    proposed_value: float
    moves: int
    gain: float | None
    gain_se: float
    min_gain: float
    act: bool
    reason: str
    moved_back: tuple[str, ...] = ()  # ``service/shape``s the proposal moves back within the cool-down


@dataclass
class ServicesReplan:
    root: str
    services: tuple[ServiceChange, ...]
    decision: ServicesDecision
    #: the changes of the last cool-down windows, this one's included when it acts ([Note: cool-down])
    history: tuple[PastChange, ...] = ()
    result: object = field(repr=False, default=None)  # the `compiler.services.Services` to run next

    def summary(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k != "result"}
        out["prediction"] = True
        return out


def _devices(plan) -> dict[str, int]:
    out: dict[str, int] = {}
    for p in plan.pools:
        out[p.device] = out.get(p.device, 0) + p.replicas * p.devices_per_replica
    return dict(sorted(out.items()))


def replan_services(root: str | Path, snaps: list[Snapshot], settings: Settings = Settings(), *,
                    workload_dir: str | Path, progress=None) -> ServicesReplan:
    """See the module docstring. `workload_dir`/<service> receives each service's planned ``workload.yaml``."""
    from compiler.emit.emit_plan import emit_plan
    from compiler.inputs.services import Service, ServicesFile
    from compiler.ir.placement import ServiceGoal
    from compiler.place.ilp import solve
    from compiler.place.moves import Moves
    from compiler.services import SEP, Part, Services, joint, share_of

    note = progress or (lambda _m: None)
    root = Path(root)
    doc = json.loads((root / "services.json").read_text(encoding="utf-8"))
    entries = {s["name"]: s for s in doc["services"]}
    scrapes = by_model(snaps, list(entries))
    found: dict[str, tuple[CompileInputs, Measured]] = {}
    for name in entries:
        inputs = CompileInputs.load(root / name)
        if inputs is None:
            raise BadInput(f"{root / name}: no report/inputs.json; recompile the services plan with gimletc compile "
                           "--services")
        if not scrapes[name]:
            raise BadInput(f"--metrics: no scrape names service {name!r} (model_name); give every service's engines")
        note(f"service {name}: measuring and re-costing")
        found[name] = (inputs, measured(root / name, inputs, scrapes[name], settings,
                                        workload_dir=Path(workload_dir) / name, progress=progress))
    objective = doc["objective"]
    goals = {name: ServiceGoal(name, tuple(f"{name}{SEP}{c.name}" for c in m.raw.classes),
                               entries[name]["weight"], m.forecast_requests_per_s) for name, (_i, m) in found.items()}
    inst = joint([(m.corrected, goals[name]) for name, (_i, m) in found.items()])
    current = tuple(sorted((f"{name}{SEP}{k}", n) for name, (_i, m) in found.items()
                           for k, n in current_replicas(m.plan)))
    note(f"re-solving {len(found)} services from the running placement (MILP, HiGHS)")
    proposed = solve(inst, objective, time_limit_s=settings.time_limit_s, explain=False,
                     moves=Moves(current, settings.max_moves, settings.slack))
    stay = solve(inst, objective, time_limit_s=settings.time_limit_s, explain=False, moves=Moves(current, 0))
    if not proposed.feasible:
        limit = f" within --max-moves {settings.max_moves}" if settings.max_moves is not None else ""
        raise Infeasible(f"no placement{limit} serves every service's forecast rate on the corrected costs ("
                         + ", ".join(f"{n} {g.floor_per_s:.3g} req/s" for n, g in goals.items()) + ")")
    after = shapes_of(proposed)
    moves = moves_between(current, after)
    current_value = stay.objective.value if stay.feasible else None
    gain = sense_gain(objective, current_value, proposed.objective.value)
    if moves and gain is not None:
        note("the gain's standard error: each service's measurements and forecasts moved in turn")
    se = gain_se(_variants(found, goals, settings), objective, current, after, settings) \
        if moves and gain is not None else 0.0
    now_s = max(m.observation.start_s + m.observation.seconds for _i, m in found.values())
    recent = recent_changes(history_in(root / "replan.json"), now_s, settings)
    back = moved_back(recent, current, after)
    busy = max(busiest_utilisation(m.plan, m.corrected.options, m.classes, settings) for _i, m in found.values())
    act, reason = judged(moves, current_value, gain, se, back, busy, settings, now_s)
    chosen = proposed if act or not stay.feasible else stay
    parts, plans, shares, changes = [], {}, {}, []
    for name, (inputs, m) in found.items():
        shares[name] = share_of(chosen, inst, name)
        prep = m.prepared
        draft = prep.draft.graph if prep.draft is not None else None
        plans[name] = emit_plan(prep.graph, prep.cluster, prep.workload, prep.precision, m.corrected, shares[name],
                                [], [], draft_graph=draft, served_model_name=name)
        spec = Service(name=name, model=inputs.model, workload=str(Path(workload_dir) / name / "workload.yaml"),
                       dtype=inputs.dtype, kv_dtype=inputs.kv_dtype, weight=entries[name]["weight"])
        parts.append(Part(spec, prep, m.forecast_requests_per_s))
        changes.append(ServiceChange(name, round(m.observation.requests_per_s, 6),
                                     round(m.forecast_requests_per_s, 6), _devices(m.plan), shares[name].devices(),
                                     sum(p.replicas for p in m.plan.pools), sum(n for _k, n in shares[name].replicas)))
    decision = ServicesDecision(objective, current_value, proposed.objective.value, moves, gain, se,
                                settings.min_gain, act, reason, tuple(sorted({c.shape for c in back})))
    result = Services(ServicesFile(name=doc["name"], services=tuple(p.spec for p in parts)), parts, inst, chosen,
                      objective, shares, plans)
    made = tuple(PastChange(now_s, shape, n, m) for shape, n, m in changed_shapes(current, after)) if act else ()
    return ServicesReplan(str(root), tuple(changes), decision, recent + made, result)


def _variants(found: dict, goals: dict, settings: Settings) -> list:
    """The joint instance with one service's measurements or forecast moved by a standard error each way, the
    other services as measured (`compiler.replan.replan.gain_variants`, service by service)."""
    from compiler.services import joint

    out = []
    for name, (_i, m) in found.items():
        for pair in gain_variants(m.raw, m.factors, m.classes, settings):
            out.append(tuple(joint([(v if n == name else other.corrected, goals[n])
                                    for n, (_j, other) in found.items()]) for v in pair))
    return out
