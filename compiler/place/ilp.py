"""Exact placement with CP-SAT: how many replicas of which pools serve the most requests.

Before: an `Instance` (`compiler.ir.placement`): costed `PoolOption`s, the
inventory, power budget, links between device types and the KV bytes a request
hands from prefill to decode. After: a `Solution`: replicas per option, KV flows
between pools, the objective with its unit, bound and status, and, when
infeasible, the named constraint families that make it so
(`compiler.place.infeasible`).

Variable families (all integers; one scaling helper, `_scaled`):
- ``n[o]``: replicas of pool option o; ``use[o]``: whether o has any.
- ``flow[p,t]``: requests per second (x RATE_SCALE) whose KV prefill option p
  hands to decode pools on device type t.
- ``lam``: requests per second served (x RATE_SCALE).

Constraints (each family behind an assumption literal so an infeasible
instance names its binding families):
- ``inventory[t]``: devices of type t used by all replicas <= inventory.
- ``power``: sum of replicas' provisioned power (device TDP) <= budget. A budget
  provisions for peak draw; the predicted mean draw is reported beside it.
- ``slo``: options whose own TTFT or TPOT breaks the SLO get no replicas; a KV
  flow p -> t is allowed only if p's TTFT plus the KV hand-off over the link
  meets the TTFT SLO.
- ``prefill_capacity[p]``: flows out of p <= n[p] x rate[p].
- ``decode_capacity[t]``: flows into t <= replicas of decode options on t x rates.
- ``link[t1,t2]``: KV bytes per second from type t1 to t2 <= link bandwidth.
- ``demand``: lam >= the arrival rate (or >= one request per 1000 s when maximising).
- ``served``: lam = colocated replicas x rates + all flows.

Objectives: ``throughput`` (max lam, then min power), ``power`` (min power
at the arrival rate), ``tokens-per-watt`` (max lam / power by Dinkelbach's
method), ``latency`` (min worst TPOT of used pools at the arrival rate).
Ties break on fewest devices, then option order, so the same inputs give the
same solution byte for byte.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Sequence

from compiler.ir.errors import BadInput, Infeasible
from compiler.ir.placement import FAMILIES, OBJECTIVES, Instance, Objective, Solution
from compiler.ir.pool_option import PoolOption

RATE_SCALE = 1000  # requests/s are modelled in milli-requests/s


def scaled(value: float, scale: float = RATE_SCALE) -> int:
    """The one place floats become integers: floor, so a scaled capacity never exceeds the real one."""
    return int(math.floor(value * scale + 1e-9))


class PlacementModel:
    """The CP-SAT model of one instance, built once and re-solved with different objectives.

    One method per variable family and constraint family, named as in the module docstring.
    """

    def __init__(self, inst: Instance, families: Sequence[str] = FAMILIES):
        from ortools.sat.python import cp_model

        self.cp = cp_model
        self.inst = inst
        self.m = cp_model.CpModel()
        self.opts = inst.options
        self.inv = dict(inst.inventory)
        self.prefill = [o for o in self.opts if o.kind == "prefill"]
        self.decode_types = sorted({o.kv_device for o in self.opts if o.receives_kv})
        self.lit = {f: self.m.new_bool_var(f"assume[{f}]") for f in FAMILIES}
        self._replicas()
        self._inventory()
        self._power()
        self._slo_own_latency()
        self._flows_with_slo_and_prefill_capacity()
        self._decode_capacity()
        self._link()
        self._served_and_demand()
        self._objective_terms()
        for f in FAMILIES:
            if f in families:
                self.m.add_assumption(self.lit[f])
            else:
                self.m.add(self.lit[f] == 0)

    def _replicas(self) -> None:
        """``n[o]``, ``use[o]``. Only the inventory bounds the domain: every other limit is a constraint."""
        self.n, self.use, self.ub = {}, {}, {}
        for o in self.opts:
            self.ub[o.key] = ub = max(min((self.inv.get(d, 0) // k for d, k in o.devices), default=0), 0)
            self.n[o.key] = self.m.new_int_var(0, ub, f"n[{o.key}]")
            self.use[o.key] = self.m.new_bool_var(f"use[{o.key}]")
            self.m.add(self.n[o.key] <= ub * self.use[o.key])
            self.m.add(self.n[o.key] >= self.use[o.key])
        self.max_rate = sum(scaled(o.rate_per_s) * self.ub[o.key] for o in self.opts) + 1

    def _inventory(self) -> None:
        """``inventory[t]``: devices of type t used by all replicas <= inventory."""
        for t in sorted(self.inv):
            self.m.add(sum(self.n[o.key] * o.uses(t) for o in self.opts if o.uses(t)) <= self.inv[t]
                       ).only_enforce_if(self.lit["inventory"])

    def _power(self) -> None:
        """``power``: provisioned watts (TDP) of all replicas <= budget; ``draw`` is the predicted mean."""
        self.power = sum(self.n[o.key] * scaled(o.provisioned_w, 1) for o in self.opts)
        self.draw = sum(self.n[o.key] * scaled(o.power_w, 1) for o in self.opts)
        if self.inst.power_budget_w is not None:
            self.m.add(self.power <= scaled(self.inst.power_budget_w, 1)).only_enforce_if(self.lit["power"])

    def _slo_own_latency(self) -> None:
        """``slo``: an option whose own TTFT or TPOT breaks the SLO gets no replicas."""
        for o in self.opts:
            if not o.slo_ok:
                self.m.add(self.n[o.key] == 0).only_enforce_if(self.lit["slo"])

    def _flows_with_slo_and_prefill_capacity(self) -> None:
        """``flow[p,t]``; ``slo`` on p's TTFT plus the hand-off to t; ``prefill_capacity[p]``: flows out of p <= its rate."""
        self.flow = {}
        for p in self.prefill:
            for t in self.decode_types:
                f = self.flow[(p.key, t)] = self.m.new_int_var(0, self.max_rate, f"flow[{p.key},{t}]")
                ttft = p.ttft_s + self.inst.handoff(p.kv_device, t)
                if self.inst.ttft_slo_s is not None and ttft > self.inst.ttft_slo_s:
                    self.m.add(f == 0).only_enforce_if(self.lit["slo"])
            self.m.add(sum(self.flow[(p.key, t)] for t in self.decode_types) <= self.n[p.key] * scaled(p.rate_per_s))

    def _decode_capacity(self) -> None:
        """``decode_capacity[t]``: flows into t <= replicas of decode options on t x their rates."""
        for t in self.decode_types:
            self.m.add(sum(self.flow[(p.key, t)] for p in self.prefill)
                       <= sum(self.n[o.key] * scaled(o.rate_per_s) for o in self.opts
                              if o.receives_kv and o.kv_device == t))

    def _link(self) -> None:
        """``link[t1,t2]``: KV bytes per second from type t1 to t2 <= the link's bandwidth."""
        inst = self.inst
        for t1 in sorted({p.kv_device for p in self.prefill}):
            for t2 in self.decode_types:
                bw = inst.link_bw(t1, t2) if t1 != t2 else math.inf
                if math.isfinite(bw) and inst.kv_bytes_per_request > 0:
                    cap = scaled(bw / inst.kv_bytes_per_request)
                    self.m.add(sum(self.flow[(p.key, t2)] for p in self.prefill if p.kv_device == t1) <= cap
                               ).only_enforce_if(self.lit["link"])

    def _served_and_demand(self) -> None:
        """``served``: lam = colocated replicas x rates + all flows; ``demand``: lam >= the arrival rate."""
        self.lam = self.m.new_int_var(0, self.max_rate, "lam")
        self.m.add(self.lam == sum(self.n[o.key] * scaled(o.rate_per_s) for o in self.opts if o.kind == "colocated")
                   + sum(self.flow.values()))
        need = scaled(self.inst.arrival_rate_per_s) if self.inst.arrival_rate_per_s else 1
        self.m.add(self.lam >= need).only_enforce_if(self.lit["demand"])

    def _objective_terms(self) -> None:
        """Expressions the objectives and tie-breaks use: devices, option order, worst TPOT of used options."""
        self.devices = sum(self.n[o.key] * o.devices_per_replica for o in self.opts)
        self.order = sum(self.n[o.key] * i for i, o in enumerate(self.opts))
        self.tpot_us = self.m.new_int_var(0, 10**12, "worst_tpot_us")
        for o in self.opts:
            if o.tpot_s is not None:
                self.m.add(self.tpot_us >= scaled(o.tpot_s, 1e6)).only_enforce_if(self.use[o.key])

    def solve(self, objective, sense: str, time_limit_s: float, workers: int, **params):
        """Optimise `objective` (None: any feasible point)."""
        if objective is None:
            self.m.clear_objective()
        elif sense == "max":
            self.m.maximize(objective)
        else:
            self.m.minimize(objective)
        solver = self.cp.CpSolver()
        solver.parameters.max_time_in_seconds = max(time_limit_s, 0.1)
        solver.parameters.num_workers = workers
        solver.parameters.random_seed = 0
        for key, value in params.items():
            setattr(solver.parameters, key, value)
        status = solver.solve(self.m)
        return solver, status

    def solve_hard(self, objective, sense: str, time_limit_s: float, workers: int):
        """The main objective, with a small portfolio in time slices.

        [Note: solver portfolio] Which CP-SAT setting proves these models fast
        varies by instance: the default search proved 8B/chat in 1.6 s but 70B/chat
        in 23 s, where linearization_level=2 took 0.3 s (and 15-19 s on others).
        Short slices of each, then the default for the rest of the time limit,
        find the optimum early in every case we measured. Only the proven
        optimal value passes to later stages, so the result does not depend on
        which slice proved it.
        """
        deadline = time.perf_counter() + time_limit_s
        for params, slice_s in (({}, 3.0), ({"linearization_level": 2}, 5.0)):
            left = deadline - time.perf_counter()
            if left <= slice_s:
                break
            solver, status = self.solve(objective, sense, slice_s, workers, **params)
            if status in (self.cp.OPTIMAL, self.cp.INFEASIBLE):
                return solver, status
        return self.solve(objective, sense, deadline - time.perf_counter(), workers)

    def fix(self, expr, value: int, sense: str) -> None:
        """Keep an earlier objective's optimum while a later one breaks ties."""
        self.m.add(expr >= value if sense == "max" else expr <= value)


def solve(inst: Instance, objective: str = "throughput", *, time_limit_s: float = 60.0, workers: int = 2,
          families: Sequence[str] = FAMILIES, tie_break: bool = True) -> Solution:
    """Solve `inst`. An infeasible instance returns status "infeasible" with the binding families.

    The first stage (the objective) runs on `workers` threads; the secondary
    stages that make the solution unique run single-threaded, so the result
    does not depend on thread timing.
    """
    from compiler.place.infeasible import binding_families

    if objective not in OBJECTIVES:
        raise BadInput(f"--objective {objective!r}: use one of {', '.join(OBJECTIVES)}")
    if objective in ("power", "latency") and inst.arrival_rate_per_s is None:
        raise BadInput(f"--objective {objective} needs a target: set arrival_rate_per_s in the workload file")
    start = time.perf_counter()
    full = inst
    if "slo" in families and objective != "latency":
        inst = replace(inst, options=prune(inst))
    model = PlacementModel(inst, families)
    deadline = start + time_limit_s
    cp = model.cp
    stages = _stages(model, objective, deadline, workers)
    if tie_break:
        stages = stages + [(model.devices, "min"), (model.order, "min")]
    proven, first = True, (0.0, 0.0)
    solver = None
    for i, (expr, sense) in enumerate(stages):
        run = model.solve_hard if i == 0 else model.solve
        solver, status = run(expr, sense, deadline - time.perf_counter(), workers)
        if status == cp.INFEASIBLE:
            return Solution("infeasible", Objective(objective, 0.0, 0.0), binding=binding_families(full, families),
                            wall_s=time.perf_counter() - start)
        if status not in (cp.OPTIMAL, cp.FEASIBLE):
            raise Infeasible(f"the solver found no placement within {time_limit_s:.0f} s; raise --time-limit")
        if i == 0:
            first = (solver.objective_value, solver.best_objective_bound)
            proven = status == cp.OPTIMAL
        if status != cp.OPTIMAL:
            break  # out of time: keep the best found so far
        model.fix(expr, round(solver.objective_value), sense)
        workers = 1  # later stages only break ties: keep them deterministic
    return _solution(model, solver, objective, proven, first, start)


def _stages(model: PlacementModel, objective: str, deadline: float, workers: int) -> list[tuple]:
    """The lexicographic objectives: the user's first, then what makes its optimum cheapest."""
    if objective == "tokens-per-watt":
        return _dinkelbach(model, deadline, workers)
    return {
        "throughput": [(model.lam, "max"), (model.power, "min")],
        "power": [(model.power, "min"), (model.lam, "max")],
        "latency": [(model.tpot_us, "min"), (model.power, "min")],
    }[objective]


def _solution(model: PlacementModel, solver, objective: str, proven: bool, first: tuple[float, float],
              start: float) -> Solution:
    replicas = {o.key: solver.value(model.n[o.key]) for o in model.opts}
    lam, power = solver.value(model.lam), solver.value(model.power)
    if objective == "tokens-per-watt":  # the linearised Dinkelbach value means nothing to a reader; report the ratio
        ratio = lam / RATE_SCALE / power if power else 0.0
        value = bound = ratio
    else:
        unit = {"throughput": RATE_SCALE, "power": 1.0, "latency": 1e3}[objective]
        value, bound = first[0] / unit, first[1] / unit
    proto = model.m.Proto()
    return Solution(
        status="optimal" if proven else "feasible", objective=Objective(objective, value, bound),
        replicas=tuple(sorted((k, n) for k, n in replicas.items() if n)),
        flows=tuple(sorted((k, solver.value(v) / RATE_SCALE) for k, v in model.flow.items() if solver.value(v))),
        requests_per_s=lam / RATE_SCALE, power_w=float(solver.value(model.draw)), provisioned_w=float(power),
        wall_s=time.perf_counter() - start, variables=len(proto.variables), constraints=len(proto.constraints))


def _dinkelbach(model: PlacementModel, deadline: float, workers: int):
    """Max lam/power as a sequence of max lam - q*power solves (Dinkelbach, 1967); returns the final stage."""
    q = 0.0
    for _ in range(20):
        expr = model.lam * 10**6 - scaled(q, 10**6) * model.power
        solver, status = model.solve(expr, "max", deadline - time.perf_counter(), workers)
        if status not in (model.cp.OPTIMAL, model.cp.FEASIBLE):
            break
        lam, power = solver.value(model.lam), solver.value(model.power)
        if power <= 0 or lam <= 0:
            break
        new_q = lam / power
        if new_q <= q * (1 + 1e-9):
            break
        q = new_q
    scale = 10**6
    return [(model.lam * scale - scaled(q, scale) * model.power, "max"), (model.lam, "max")]


def prune(inst: Instance) -> tuple[PoolOption, ...]:
    """Drop options no throughput, power or tokens-per-watt optimum needs.

    Options that break their own SLO can get no replicas. Options on the same
    devices (same kind, inventory use and provisioned power) are interchangeable
    except for their rate and, for prefill, which decode types their KV can
    reach within the TTFT SLO: an option is dropped when another in its group
    serves at least as many requests per second and reaches every decode type
    it reaches. (The latency objective keeps everything.)
    """
    decode_types = sorted({o.kv_device for o in inst.options if o.receives_kv})

    def reach(o: PoolOption) -> frozenset:
        if o.kind != "prefill" or inst.ttft_slo_s is None:
            return frozenset(decode_types)
        return frozenset(t for t in decode_types if o.ttft_s + inst.handoff(o.kv_device, t) <= inst.ttft_slo_s)

    groups: dict[tuple, list[tuple[PoolOption, frozenset]]] = {}
    for o in inst.options:
        if o.slo_ok:
            groups.setdefault((o.kind, o.devices, o.kv_device, o.pp, o.provisioned_w), []).append((o, reach(o)))
    kept = []
    for members in groups.values():
        for o, r in members:
            beaten = any(r2 >= r and (o2.rate_per_s, o2.key) > (o.rate_per_s, o.key) for o2, r2 in members if o2 is not o)
            if not beaten:
                kept.append(o)
    return tuple(sorted(kept, key=lambda o: o.key))
