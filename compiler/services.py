"""Many models, one fleet: ``gimletc compile --services FILE`` places every service of a platform on one fleet
under one power budget, in one MILP.

Before: a services file (`compiler.inputs.services`), a cluster file. After: a `Services` result: the joint
`Solution`, one plan per service (the single-model plan, emitted from that service's share of the placement)
and the baselines a platform team would otherwise use, each solved with the same cost model at the same power.

[Note: one placement of many services] Each service is prepared as a single-model compile prepares it (traced,
its pool options costed on the whole fleet), then the services' instances are joined: option keys and class
names are prefixed with the service's name (``chat/<key>``, ``chat/<class>``), so that a class is served only
by its own service's options, and `Instance.services` gives each service its classes, weight and floor. The
MILP (`compiler.place.ilp`) then has one ``lam[s]`` per service, shares of each service's classes within it,
``demand[s]``: lam[s] >= its floor (its arrival rate, else its ``min_rate_per_s``, else one request per 1000 s:
every service is served), and everything else shared: inventory, the power and cost budgets, links. The
throughput objective is the weighted sum of the services' requests/s; power and cost serve every floor at the
least power or dollars. Pruning compares options within a service only (an option is dropped only when another
of its own service's does its work), and no near-twin is pruned (``--exact`` always): the tolerance argument of
[Note: pruning tolerance] scales every flow down, which a floor forbids. Options of different services on the
same device type are separate replicas on separate devices; two models sharing one device is not modelled.
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable, Sequence

from compiler.cost.prepared import Prepared
from compiler.inputs.services import Service, ServicesFile
from compiler.ir.errors import BadInput, Infeasible
from compiler.ir.files import atomic_write_text
from compiler.ir.placement import Instance, ServiceGoal, Solution
from compiler.ir.pool_option import PoolOption

log = logging.getLogger(__name__)

#: The floor of a service that asks for none: one request per 1000 s, as a single-model compile's ``demand``.
NO_FLOOR = 1e-3
SEP = "/"


@dataclass(frozen=True)
class Part:
    """One service as placed: its entry in the services file, its prepared compile and its goal."""

    spec: Service
    prep: Prepared
    floor_per_s: float  # NO_FLOOR: none asked

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def goal(self) -> ServiceGoal:
        return ServiceGoal(self.name, tuple(f"{self.name}{SEP}{c.name}" for c in self.prep.instance.classes),
                           self.spec.weight, self.floor_per_s)

    @property
    def has_floor(self) -> bool:
        return self.floor_per_s > NO_FLOOR


def floor_of(spec: Service, prep: Prepared, where: str) -> float:
    """A service's floor: its workload's arrival rate, else its ``min_rate_per_s``, else `NO_FLOOR`."""
    rate = prep.workload.arrival_rate_per_s
    if rate != "maximise":
        if spec.min_rate_per_s is not None:
            raise BadInput(f"{where}: service {spec.name!r} gives min_rate_per_s and its workload an arrival rate "
                           f"({rate:g} req/s): give one (the arrival rate is served; min_rate_per_s is for a workload "
                           "that says maximise)")
        return float(rate)
    return spec.min_rate_per_s if spec.min_rate_per_s is not None else NO_FLOOR


def prepare_services(path: str, cluster_path: str, *, power_budget_w: float | None = None,
                     cost_budget_per_hour: float | None = None, calibration: str | None = None,
                     deployable: bool = False, progress: Callable[[str], None] | None = None,
                     timings=None) -> tuple[ServicesFile, list[Part]]:
    """Read the services file and prepare each service as a single-model compile would (trace, cost)."""
    from compiler.driver import prepare
    from compiler.inputs.services import load_services

    parsed = load_services(path)
    parts = []
    for s in parsed.services:
        if progress is not None:
            progress(f"service {s.name}: {s.model}")
        prep = prepare(s.model, cluster_path, s.workload, power_budget_w=power_budget_w,
                       cost_budget_per_hour=cost_budget_per_hour, precision=s.precision, calibration=calibration,
                       deployable=deployable, timings=timings, progress=progress)
        parts.append(Part(s, prep, floor_of(s, prep, path)))
    return parsed, parts


def _renamed_option(o: PoolOption, name: str) -> PoolOption:
    return replace(o, key=f"{name}{SEP}{o.key}", classes=tuple(replace(c, name=f"{name}{SEP}{c.name}")
                                                                for c in o.classes))


def joint(instances: Sequence[tuple[Instance, ServiceGoal]]) -> Instance:
    """One instance of several services ([Note: one placement of many services]): each service's options and
    classes under its name, the fleet-wide fields (inventory, budgets, links, prices) of the first, which every
    other must share (one cluster file)."""
    first = instances[0][0]
    fleet = ("inventory", "power_budget_w", "link_bw_bytes_per_s", "prices_per_hour", "cost_budget_per_hour",
             "designed", "cross_type_kv", "kv_pairs", "link_caps", "link_servers")
    options, classes, handoffs, transfers = [], [], [], []
    for inst, goal in instances:
        differ = [f for f in fleet if getattr(inst, f) != getattr(first, f)]
        if differ:
            raise BadInput(f"service {goal.name!r}: its fleet differs in {', '.join(differ)}; every service is "
                           "placed on one cluster (prepare them with the same cluster file and budgets)")
        p = f"{goal.name}{SEP}"
        options += [_renamed_option(o, goal.name) for o in inst.options]
        classes += [replace(c, name=p + c.name) for c in inst.classes]
        handoffs += [((p + c, a, b), s) for (c, a, b), s in inst.handoff_s]
        transfers += [((p + c, a, b), s) for (c, a, b), s in inst.transfer_s]
    goals = tuple(g for _i, g in instances)
    return replace(first, options=tuple(options), classes=tuple(classes), handoff_s=tuple(handoffs),
                   transfer_s=tuple(transfers), services=goals, arrival_rate_per_s=sum(g.floor_per_s for g in goals))


def _unprefixed(text: str, name: str) -> str:
    """`text` (an option key or class name of the joint instance) as service `name`'s own instance names it."""
    p = f"{name}{SEP}"
    return text.removeprefix(p).replace(f"|{p}", "|")


def share_of(sol: Solution, inst: Instance, name: str) -> Solution:
    """Service `name`'s part of a joint solution, in its own instance's names: its replicas, flows and classes,
    its requests/s, the power it draws and provisions and its dollars per hour; the status, objective and solver
    figures are the joint solve's."""
    p = f"{name}{SEP}"
    mine = [o for o in sol.options if o.key.startswith(p)]
    by_key = {o.key: o for o in mine}
    back = {o.key: replace(o, key=_unprefixed(o.key, name), classes=tuple(replace(c, name=_unprefixed(c.name, name))
                                                                           for c in o.classes)) for o in mine}
    replicas = {k: n for k, n in sol.replicas if k in back}
    served = {(c, k): r for (c, k), r in sol.served if k in back}
    draw = provisioned = 0.0
    dollars: float | None = 0.0
    for key, n in replicas.items():
        o = by_key[key]
        draw += n * o.idle_w + sum(r / o.service(c).rate_per_s * (o.power_w - o.idle_w)
                                   for (c, k), r in served.items() if k == key)
        provisioned += n * o.provisioned_w
        price = inst.price_per_hour(o)
        dollars = None if price is None or dollars is None else dollars + n * price
    rates = [(c, r) for c, r in sol.class_requests_per_s if c.startswith(p)]
    return replace(
        sol, replicas=tuple(sorted((_unprefixed(k, name), n) for k, n in replicas.items())),
        flows=tuple(sorted(((_unprefixed(c, name), _unprefixed(k, name), t), r) for (c, k, t), r in sol.flows
                           if k in back)),
        served=tuple(sorted(((_unprefixed(c, name), _unprefixed(k, name)), r) for (c, k), r in served.items())),
        class_requests_per_s=tuple((_unprefixed(c, name), r) for c, r in rates),
        requests_per_s=round(sum(r for _c, r in rates), 9), power_w=draw, provisioned_w=round(provisioned, 6),
        cost_per_hour=None if dollars is None else round(dollars, 6),
        options=tuple(sorted(back.values(), key=lambda o: o.key)))


def solve_joint(instances: Sequence[tuple[Instance, ServiceGoal]], objective: str, *, time_limit_s: float,
                explain: bool = True) -> tuple[Instance, Solution]:
    """The joint instance and its solution (exact pruning: [Note: one placement of many services])."""
    from compiler.place.ilp import solve

    inst = joint(instances)
    return inst, solve(inst, objective, time_limit_s=time_limit_s, exact=True, explain=explain)


@dataclass(frozen=True)
class ServiceBaseline:
    """What one way of serving every service without a joint placement reaches, with the same cost model."""

    name: str
    status: str  # optimal, feasible, infeasible, skipped
    objective: float | None = None  # in the joint objective's unit
    requests_per_s: tuple[tuple[str, float], ...] = ()  # per service
    provisioned_w: float | None = None
    note: str = ""


@dataclass
class Services:
    """What `compile_services` returns."""

    file: ServicesFile
    parts: list[Part]
    instance: Instance
    solution: Solution
    objective: str
    shares: dict[str, Solution]
    plans: dict = field(default_factory=dict)  # service -> `compiler.plan.schema.Plan`
    baselines: list[ServiceBaseline] = field(default_factory=list)


def compile_services(path: str, cluster_path: str, *, objective: str = "throughput",
                     power_budget_w: float | None = None, cost_budget_per_hour: float | None = None,
                     calibration: str | None = None, deployable: bool = False, time_limit_s: float = 60.0,
                     baselines: bool = True, progress: Callable[[str], None] | None = None,
                     timings=None) -> Services:
    """Prepare every service, place them together, emit each service's plan and solve the baselines."""
    from compiler.driver import Timings
    from compiler.emit.emit_plan import emit_plan
    from compiler.place.infeasible import explain

    timings = timings if timings is not None else Timings()
    note = progress or (lambda _m: None)
    parsed, parts = prepare_services(path, cluster_path, power_budget_w=power_budget_w,
                                     cost_budget_per_hour=cost_budget_per_hour, calibration=calibration,
                                     deployable=deployable, progress=progress, timings=timings)
    unfloored = [p.name for p in parts if not p.has_floor]
    if objective in ("power", "cost", "latency") and unfloored:
        raise BadInput(f"{path}: --objective {objective} serves every service at its rate; {', '.join(unfloored)} "
                       "has none: give its workload an arrival_rate_per_s, or the service a min_rate_per_s")
    posed = [(p.prep.instance, p.goal) for p in parts]
    note(f"solving one placement of {len(parts)} services ({sum(len(i.options) for i, _g in posed)} pool options; "
         "MILP, HiGHS)")
    with timings.step("place"):
        inst, sol = solve_joint(posed, objective, time_limit_s=time_limit_s)
    if not sol.feasible:
        raise Infeasible(explain(", ".join(p.name for p in parts), inst, sol))
    shares = {p.name: share_of(sol, inst, p.name) for p in parts}
    result = Services(parsed, parts, inst, sol, objective, shares)
    with timings.step("emit"):
        for p in parts:
            draft = p.prep.draft.graph if p.prep.draft is not None else None
            result.plans[p.name] = emit_plan(p.prep.graph, p.prep.cluster, p.prep.workload, p.prep.precision,
                                             p.prep.instance, shares[p.name], [], [], draft_graph=draft,
                                             served_model_name=p.name)
    if baselines:
        with timings.step("baselines"):
            result.baselines = service_baselines(parts, objective, time_limit_s=time_limit_s, note=note)
    return result


# --- baselines: what a platform team would do without one joint placement -----------------------------------------

def service_baselines(parts: Sequence[Part], objective: str, *, time_limit_s: float,
                      note: Callable[[str], None] = lambda _m: None) -> list[ServiceBaseline]:
    """[Note: service baselines] Each solved with the same cost model, at the same power budget and inventory:

    - ``proportional-slices``: every service gets a slice of each device type's count (rounded down) and of the
      power budget, in proportion to the power it needs alone on the whole fleet to serve its floor plus an
      equal share of what the floors leave (a proportional global budget, as NVIDIA Dynamo's global planner
      clamps replicas: proportional to what each asks); each slice is then placed alone, exactly.
    - ``greedy-type``: in order of demand (floor, then weight), each service takes the one device type that
      serves its floor at the least power out of what is left; then, in order of weight, each grows on its type
      into what is left (llm-d's workload-variant autoscaler chooses one accelerator type per model so).
    - ``single-type:<t>``: every service on device type t alone, as many as the power budget buys (buying
      advice: the best of these is reported first).
    """
    note("baselines: proportional slices of the fleet, a greedy device type per service, each device type alone")
    out = [proportional_slices(parts, objective, time_limit_s=time_limit_s),
           greedy_types(parts, objective, time_limit_s=time_limit_s)]
    singles = single_types(parts, objective, time_limit_s=time_limit_s)
    return out + sorted(singles, key=lambda b: (b.objective is None, -(b.objective or 0.0)
                                                if _sense(objective) == "max" else (b.objective or 0.0), b.name))


def _sense(objective: str) -> str:
    from compiler.ir.placement import OBJECTIVE_SENSE

    return OBJECTIVE_SENSE[objective]


def _budget_w(inst: Instance) -> float:
    """The power the fleet may provision: its budget, else every device of it at its rated power."""
    if inst.power_budget_w is not None:
        return inst.power_budget_w
    per = {}
    for o in inst.options:
        if len(o.devices) == 1:
            (t, k), = o.devices
            per.setdefault(t, o.provisioned_w / k)
    return sum(per.get(t, 0.0) * n for t, n in inst.inventory)


def _baseline(name: str, objective: str, solved: Sequence[tuple[Part, Solution]], note: str = "") -> ServiceBaseline:
    """A baseline from each service's own solution (or an infeasible one, named)."""
    missing = [p.name for p, s in solved if not s.feasible]
    if missing:
        return ServiceBaseline(name, "infeasible", note=f"{', '.join(missing)}: no placement meets the floor "
                                                        f"{note and '(' + note + ')'}".rstrip())
    rates = tuple((p.name, s.requests_per_s) for p, s in solved)
    provisioned = sum(s.provisioned_w for _p, s in solved)
    if objective == "throughput":
        value = sum(p.spec.weight * s.requests_per_s for p, s in solved)
    elif objective == "power":
        value = provisioned
    elif objective == "cost":
        costs = [s.cost_per_hour for _p, s in solved]
        value = None if any(c is None for c in costs) else sum(costs)
    else:
        value = None
    status = "optimal" if all(s.status == "optimal" for _p, s in solved) else "feasible"
    return ServiceBaseline(name, status, value, rates, round(provisioned, 6), note)


def _alone(part: Part, inst: Instance, objective: str, time_limit_s: float) -> Solution:
    """`part` placed alone on `inst` (its own options on some fleet), holding its floor, as a joint placement of
    one service: the same MILP, weights and floors as the plan's."""
    _j, sol = solve_joint([(inst, part.goal)], objective, time_limit_s=time_limit_s, explain=False)
    return share_of(sol, _j, part.name) if sol.feasible else sol


def proportional_slices(parts: Sequence[Part], objective: str, *, time_limit_s: float) -> ServiceBaseline:
    """``proportional-slices`` ([Note: service baselines])."""
    base = parts[0].prep.instance
    budget = _budget_w(base)
    need = {}
    for p in parts:
        if not p.has_floor:
            need[p.name] = 0.0
            continue
        alone = _alone(p, replace(p.prep.instance, power_budget_w=base.power_budget_w), "power", time_limit_s)
        need[p.name] = alone.provisioned_w if alone.feasible else math.inf
    asked = sum(need.values())
    if not math.isfinite(asked):
        names = [n for n, w in need.items() if not math.isfinite(w)]
        return ServiceBaseline("proportional-slices", "infeasible",
                               note=f"{', '.join(names)}: its floor cannot be served even on the whole fleet")
    spare = max(budget - asked, 0.0)
    weights = {n: w + spare / len(parts) for n, w in need.items()}
    total = sum(weights.values()) or 1.0
    solved = []
    slices = []
    for p in parts:
        frac = weights[p.name] / total
        inv = tuple((t, int(math.floor(n * frac + 1e-9))) for t, n in p.prep.instance.inventory)
        sliced = replace(p.prep.instance, inventory=inv,
                         power_budget_w=None if base.power_budget_w is None else base.power_budget_w * frac,
                         cost_budget_per_hour=None if base.cost_budget_per_hour is None
                         else base.cost_budget_per_hour * frac)
        slices.append(f"{p.name} {frac:.0%}")
        solved.append((p, _alone(p, sliced, objective, time_limit_s)))
    return _baseline("proportional-slices", objective, solved, note="slices: " + ", ".join(slices))


def _on_type(inst: Instance, t: str) -> Instance:
    """`inst` with only the options whose devices are all of type `t`."""
    return inst.with_options([o for o in inst.options if o.device_types == (t,)])


def greedy_types(parts: Sequence[Part], objective: str, *, time_limit_s: float) -> ServiceBaseline:
    """``greedy-type`` ([Note: service baselines])."""
    base = parts[0].prep.instance
    left = dict(base.inventory)
    power_left = _budget_w(base)
    chosen: dict[str, tuple[str, Solution]] = {}
    for p in sorted(parts, key=lambda p: (-p.floor_per_s, -p.spec.weight, p.name)):
        best = None
        for t in sorted(t for t, n in left.items() if n > 0):
            fleet = replace(_on_type(p.prep.instance, t), inventory=((t, left[t]),),
                            power_budget_w=power_left if base.power_budget_w is not None else None)
            if not fleet.options:
                continue
            sol = _alone(p, fleet, "power", time_limit_s)
            if sol.feasible and (best is None or sol.provisioned_w < best[1].provisioned_w):
                best = (t, sol)
        if best is None:
            return ServiceBaseline("greedy-type", "infeasible",
                                   note=f"{p.name}: no one device type left serves its floor within its SLOs")
        t, sol = best
        chosen[p.name] = best
        left[t] -= sol.devices().get(t, 0)
        power_left -= sol.provisioned_w
    if objective == "throughput":  # then each grows on its type into what is left, most valuable first
        for p in sorted(parts, key=lambda p: (-p.spec.weight, p.name)):
            t, had = chosen[p.name]
            room = left[t] + had.devices().get(t, 0)
            fleet = replace(_on_type(p.prep.instance, t), inventory=((t, room),),
                            power_budget_w=power_left + had.provisioned_w if base.power_budget_w is not None else None)
            sol = _alone(p, fleet, objective, time_limit_s)
            if sol.feasible:
                chosen[p.name] = (t, sol)
                left[t] = room - sol.devices().get(t, 0)
                power_left += had.provisioned_w - sol.provisioned_w
    return _baseline("greedy-type", objective, [(p, chosen[p.name][1]) for p in parts],
                     note=", ".join(f"{p.name} on {chosen[p.name][0]}" for p in parts))


def single_types(parts: Sequence[Part], objective: str, *, time_limit_s: float) -> list[ServiceBaseline]:
    """``single-type:<t>`` for each device type ([Note: service baselines]): each service's iso-power fleet of t
    (`compiler.cost.instance.single_type_fleets`), placed together."""
    from compiler.cost.instance import single_type_fleets

    fleets: dict[str, list] = {}
    for p in parts:
        for name, fleet in single_type_fleets(p.prep.graph, p.prep.cluster, p.prep.workload, p.prep.precision):
            if name.startswith("iso-power:"):
                fleets.setdefault(name.removeprefix("iso-power:"), []).append((p, fleet))
    out = []
    for t, entries in sorted(fleets.items()):
        skipped = [f"{p.name}: {f}" for p, f in entries if isinstance(f, str)]
        if skipped:
            out.append(ServiceBaseline(f"single-type:{t}", "skipped", note="; ".join(skipped)))
            continue
        inst, sol = solve_joint([(f, p.goal) for p, f in entries], objective, time_limit_s=time_limit_s,
                                explain=False)
        if not sol.feasible:
            out.append(ServiceBaseline(f"single-type:{t}", "infeasible", note="no placement serves every floor"))
            continue
        out.append(_baseline(f"single-type:{t}", objective, [(p, share_of(sol, inst, p.name)) for p, _f in entries]))
    return out


def gain(objective: str, plan: float, base: ServiceBaseline, plan_provisioned_w: float | None = None) -> float | None:
    """The plan over a baseline in the objective's terms (1.25: 25% better), None where the baseline has none.
    Where every weight is 0 (serve each service at its rate, no more) both weighted throughputs are 0 and the
    tie-break decides: the power provisioned (`plan_provisioned_w` against the baseline's)."""
    if base.objective is None or base.status not in ("optimal", "feasible"):
        return None
    if _sense(objective) == "max":
        if plan <= 0 and base.objective <= 0 and plan_provisioned_w and base.provisioned_w:
            return base.provisioned_w / plan_provisioned_w
        return plan / base.objective if base.objective > 0 else None
    return base.objective / plan if plan > 0 else None


# --- what a services compile writes ----------------------------------------------------------------------------

def write_services(result: Services, out: Path, target: str = "engines", *, cluster: str,
                   power_budget_w: float | None = None, calibration: str | None = None, deployable: bool = False,
                   artifacts=None) -> list[str]:
    """Every file of a services compile; returns them relative to `out`. Each service's folder records the
    inputs it was compiled from (``report/inputs.json``; `cluster` and the budget flags given); with manifests,
    ``k8s/`` beside the folders routes requests by model across the services
    ([Note: routing by model across services] in `compiler.emit.k8s.model_routing`)."""
    from compiler.compile_inputs import INPUTS_FILE, REPORT_DIR, CompileInputs
    from compiler.emit.artifacts import Options, write_plan_dir

    artifacts = artifacts or Options()

    wrote, routed = [], []
    for part in result.parts:
        folder = out / part.name
        folder.mkdir(parents=True, exist_ok=True)
        # plan.json with what the reference runtime and deploy --local read (stage programs, shards, model/)
        written = write_plan_dir(result.plans[part.name], part.spec.model, folder, artifacts)
        wrote.append(f"{part.name}/plan.json")
        record = folder / REPORT_DIR / INPUTS_FILE  # what `explain` and `replan` re-cost the service from, alone
        record.parent.mkdir(exist_ok=True)
        atomic_write_text(record, CompileInputs.of(
            part.spec.model, cluster, part.spec.workload, power_budget_w=power_budget_w, objective=result.objective,
            dtype=part.spec.dtype, kv_dtype=part.spec.kv_dtype, calibration=calibration,
            deployable=deployable).to_json())
        wrote.append(f"{part.name}/{REPORT_DIR}/{INPUTS_FILE}")
        result.plans[part.name] = written
        if target != "none":  # the service's manifests, as compile writes a plan's
            from compiler.emit.k8s import manifests, write_manifests
            from compiler.emit.k8s.model_routing import ServiceManifests

            objects = in_namespace(manifests(written, part.prep.cluster, target=target, workload=part.prep.workload),
                                   part.name)
            wrote += [str(p.relative_to(out)) for p in write_manifests(objects, folder / "k8s")]
            routed.append(ServiceManifests(part.name, written, objects))
    if routed:  # routing by model across the services, beside their folders
        from compiler.emit.k8s import write_manifests
        from compiler.emit.k8s.model_routing import model_routing

        wrote += [str(p.relative_to(out)) for p in write_manifests(model_routing(target, routed), out / "k8s")]
    document = services_document(result)
    atomic_write_text(out / "services.json", json.dumps(document, indent=2, sort_keys=False) + "\n")
    atomic_write_text(out / "summary.md", summary(document))
    return wrote + ["services.json", "summary.md"]


def in_namespace(objects: dict[str, dict], namespace: str) -> dict[str, dict]:
    """A service's manifests in a namespace of its own, named after it: every service's objects carry the same
    names (a plan's router addresses its engines as ``gimletc-<pool>``), so one namespace per service keeps them
    apart, and the router's short DNS names resolve within it. ``kustomization.yaml`` sets the namespace of every
    object (``kubectl apply -k``), beside the Namespace object itself."""
    ns = {"apiVersion": "v1", "kind": "Namespace",
          "metadata": {"name": namespace, "labels": {"app.kubernetes.io/part-of": "gimletc-services"}}}
    out = {**objects, f"namespace-{namespace}.yaml": ns}
    kustomization = dict(out.pop("kustomization.yaml"))
    kustomization["namespace"] = namespace
    kustomization["resources"] = sorted(out)
    return {**dict(sorted(out.items())), "kustomization.yaml": kustomization}


def tight_shared(inst: Instance, sol: Solution) -> list[str]:
    """The shared limits the joint placement runs into: the power budget (less left than the smallest replica
    provisions) and each device type whose every device is used, in words."""
    out = []
    if inst.power_budget_w is not None and sol.options:
        smallest = min(o.provisioned_w for o in sol.options)
        if inst.power_budget_w - sol.provisioned_w < smallest:
            out.append("the power budget")
    used = sol.devices()
    out += [f"every {t}" for t, n in sorted(inst.inventory) if n and used.get(t, 0) >= n]
    return out


def binds_of(part: Part, share: Solution, tight: list[str]) -> str:
    """What holds a service where it is: its floor (it is served exactly what it must be), else the shared limits
    it runs into (the power budget; the device types it uses whose every device is used), else nothing: its
    weight gives more of it no value beyond what the fleet also gives the others."""
    if part.has_floor and share.requests_per_s <= part.floor_per_s * (1 + 1e-6):
        return f"its floor ({part.floor_per_s:g} req/s)" + ("" if part.spec.weight else "; weight 0: no more")
    mine = set(share.devices())
    limits = [t for t in tight if t == "the power budget" or t.removeprefix("every ") in mine]
    return ", ".join(limits) if limits else "nothing shared"


def services_document(result) -> dict:
    """``services.json``: deterministic (no wall-clock times), every figure a prediction."""
    sol, objective = result.solution, result.objective
    total_w = sol.provisioned_w or 1.0
    tight = tight_shared(result.instance, sol)
    services = []
    for part in result.parts:
        share, plan = result.shares[part.name], result.plans[part.name]
        iv = plan.predicted.intervals
        services.append({
            "name": part.name, "model": plan.model, "workload": plan.workload, "dtype": part.spec.dtype,
            "weight": part.spec.weight, "floor_requests_per_s": part.floor_per_s if part.has_floor else None,
            "predicted_requests_per_s": plan.predicted.requests_per_s,
            "predicted_requests_per_s_interval": iv.get("requests_per_s"),
            "predicted_output_tokens_per_s": plan.predicted.output_tokens_per_s,
            "predicted_output_tokens_per_s_interval": iv.get("output_tokens_per_s"),
            "predicted_power_w": round(share.power_w, 3), "provisioned_power_w": share.provisioned_w,
            "share_of_provisioned_power": round(share.provisioned_w / total_w, 6),
            "devices": share.devices(), "pools": [p.name for p in plan.pools],
            "worst_ttft_ms": plan.predicted.worst_ttft_ms, "worst_tpot_ms": plan.predicted.worst_tpot_ms,
            "binds": binds_of(part, share, tight),
            "plan": f"{part.name}/plan.json",
        })
    baselines = [{"name": b.name, "status": b.status, "objective_value": b.objective,
                  "requests_per_s": dict(b.requests_per_s), "provisioned_power_w": b.provisioned_w,
                  "plan_gain": gain(objective, sol.objective.value, b, sol.provisioned_w), "note": b.note} for b in result.baselines]
    inst = result.instance
    return {
        "name": result.file.name, "cluster": result.parts[0].prep.cluster.name, "objective": objective,
        "objective_quantity": "weighted requests_per_s" if objective == "throughput" else sol.objective.quantity,
        "power_budget_w": inst.power_budget_w, "inventory": dict(inst.inventory), "tight": tight,
        "solver": {"status": sol.status, "objective_value": sol.objective.value, "bound": sol.objective.bound,
                   "gap": sol.objective.gap, "variables": sol.variables, "constraints": sol.constraints,
                   "options": len(sol.options)},
        "predicted": {"output_tokens_per_s": round(sum(s["predicted_output_tokens_per_s"] for s in services), 6),
                      "power_w": round(sol.power_w, 3), "provisioned_power_w": sol.provisioned_w,
                      "devices": sol.devices()},
        "services": services, "baselines": baselines,
        "note": "every figure is a prediction of gimletc's cost model; each service's plan.json carries its "
                "intervals and assumptions. Services on one device type are separate replicas on separate devices.",
    }


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}x"


def summary(doc: dict) -> str:
    """``summary.md`` of a services compile: the gain over the baselines a platform team would use, first."""
    from compiler.emit.report.figures import with_interval

    s = doc["solver"]
    by = {b["name"]: b for b in doc["baselines"]}
    lead = [f"{name}: {_pct(by[name]['plan_gain'])}" for name in ("proportional-slices", "greedy-type") if name in by]
    lines = [f"# {doc['name']}: {len(doc['services'])} services on {doc['cluster']}", ""]
    budget = f"{doc['power_budget_w'] / 1e3:,.1f} kW budget" if doc["power_budget_w"] else "no power budget"
    lines += [f"One placement of every service ({budget}, objective {doc['objective']}: "
              f"{doc['objective_quantity']}). Predicted; 80% intervals in brackets.", ""]
    if lead:
        lines += ["**The joint placement over what a platform team would otherwise do** (same cost model, same "
                  "fleet and power): " + ", ".join(lead) + ".", ""]
    lines += ["| service | model | weight | floor req/s | req/s | output tok/s | kW provisioned (share) | devices | "
              "binds |", "|---|---|---|---|---|---|---|---|---|"]
    for v in doc["services"]:
        devices = ", ".join(f"{n} {t}" for t, n in v["devices"].items())
        floor = "-" if v["floor_requests_per_s"] is None else f"{v['floor_requests_per_s']:g}"
        lines.append(f"| {v['name']} | {v['model']} | {v['weight']:g} | {floor} | "
                     f"{with_interval(v['predicted_requests_per_s'], v['predicted_requests_per_s_interval'], ',.2f')} | "
                     f"{with_interval(v['predicted_output_tokens_per_s'], v['predicted_output_tokens_per_s_interval'], ',.0f')} | "
                     f"{v['provisioned_power_w'] / 1e3:,.1f} ({v['share_of_provisioned_power']:.0%}) | {devices} | "
                     f"{v['binds']} |")
    p = doc["predicted"]
    lines += ["", f"All services: {p['output_tokens_per_s']:,.0f} output tokens/s, {p['power_w'] / 1e3:,.1f} kW "
              f"drawn, {p['provisioned_power_w'] / 1e3:,.1f} kW provisioned.", "",
              "| baseline | status | objective | plan gain | note |", "|---|---|---|---|---|"]
    for b in doc["baselines"]:
        value = "-" if b["objective_value"] is None else f"{b['objective_value']:,.2f}"
        lines.append(f"| {b['name']} | {b['status']} | {value} | {_pct(b['plan_gain'])} | {b['note']} |")
    lines += ["", "single-type baselines buy as many devices of one type as the budget pays for (buying advice, "
              "not the fleet owned).", "",
              f"Solver: MILP (HiGHS), {s['status']}, objective {s['objective_value']:,.4g}, bound {s['bound']:,.4g}, "
              f"gap {100 * s['gap']:.3f}%, {s['variables']} variables, {s['constraints']} constraints, "
              f"{s['options']} pool options.", "",
              "Each service's pools, classes and intervals: its folder's plan.json (`gimletc explain DIR/<service>`).",
              ""]
    return "\n".join(lines)
