"""Exact placement with CP-SAT: how many replicas of which pools serve the most requests.

Before: costed `PoolOption`s (``compiler.pool_options``), the inventory, power
budget, links between device types and the KV bytes a request hands from
prefill to decode. After: a `Solution`: replicas per option, KV flows between
pools, the objective, bound, gap and status, and, when infeasible, the named
constraint families that make it so.

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
from dataclasses import dataclass, field, replace
from typing import Sequence

from compiler.ir.errors import BadInput, Infeasible
from compiler.pool_options import PoolOption

RATE_SCALE = 1000  # requests/s are modelled in milli-requests/s
FAMILIES = ("inventory", "power", "slo", "link", "demand")
OBJECTIVES = ("throughput", "tokens-per-watt", "power", "latency")


def _scaled(value: float, scale: float = RATE_SCALE) -> int:
    """The one place floats become integers: floor, so a scaled capacity never exceeds the real one."""
    return int(math.floor(value * scale + 1e-9))


@dataclass(frozen=True)
class Instance:
    """Everything the solver reads; pure data, so tests can build random instances."""

    options: tuple[PoolOption, ...]
    inventory: tuple[tuple[str, int], ...]
    power_budget_w: float | None
    kv_bytes_per_request: float
    link_bw_bytes_per_s: tuple[tuple[tuple[str, str], float], ...]  # per unordered pair of different types
    handoff_s: tuple[tuple[tuple[str, str], float], ...]  # KV hand-off time of one request, per (from, to)
    ttft_slo_s: float | None = None
    arrival_rate_per_s: float | None = None  # None: maximise

    def link_bw(self, a: str, b: str) -> float:
        table = dict(self.link_bw_bytes_per_s)
        return table.get((a, b), table.get((b, a), math.inf))

    def handoff(self, a: str, b: str) -> float:
        return dict(self.handoff_s).get((a, b), 0.0)


@dataclass
class Solution:
    status: str  # "optimal" | "feasible" | "infeasible"
    objective: str
    replicas: dict[str, int] = field(default_factory=dict)
    flows: dict[tuple[str, str], float] = field(default_factory=dict)  # (prefill option key, decode type) -> req/s
    requests_per_s: float = 0.0
    power_w: float = 0.0  # predicted mean draw
    provisioned_w: float = 0.0  # TDP reserved against the budget
    objective_value: float = 0.0  # requests/s (throughput), W (power), ms (latency), scaled ratio (tokens-per-watt)
    bound: float = 0.0
    gap: float = 0.0
    wall_s: float = 0.0
    variables: int = 0
    constraints: int = 0
    binding: tuple[str, ...] = ()

    def used(self, options: Sequence[PoolOption]) -> list[tuple[PoolOption, int]]:
        return [(o, self.replicas[o.key]) for o in options if self.replicas.get(o.key)]


class _Model:
    """The CP-SAT model of one instance, built once and re-solved with different objectives."""

    def __init__(self, inst: Instance, families: Sequence[str] = FAMILIES):
        from ortools.sat.python import cp_model

        self.cp = cp_model
        self.inst = inst
        m = self.m = cp_model.CpModel()
        opts = inst.options
        inv = dict(inst.inventory)
        self.lit = {f: m.new_bool_var(f"assume[{f}]") for f in FAMILIES}
        self.n, self.use, self.ub = {}, {}, {}
        for o in opts:  # n[o], use[o]
            # Only the inventory bounds the domain: every other limit is a constraint with an assumption literal.
            ub = min((inv.get(d, 0) // k for d, k in o.devices), default=0)
            self.ub[o.key] = ub = max(ub, 0)
            self.n[o.key] = m.new_int_var(0, ub, f"n[{o.key}]")
            self.use[o.key] = m.new_bool_var(f"use[{o.key}]")
            m.add(self.n[o.key] <= max(ub, 0) * self.use[o.key])
            m.add(self.n[o.key] >= self.use[o.key])
        types = sorted(inv)
        for t in types:  # inventory[t]
            m.add(sum(self.n[o.key] * o.uses(t) for o in opts if o.uses(t)) <= inv[t]).only_enforce_if(
                self.lit["inventory"])
        self.power = sum(self.n[o.key] * _scaled(o.provisioned_w, 1) for o in opts)  # provisioned W
        self.draw = sum(self.n[o.key] * _scaled(o.power_w, 1) for o in opts)  # predicted mean W
        if inst.power_budget_w is not None:  # power
            m.add(self.power <= _scaled(inst.power_budget_w, 1)).only_enforce_if(self.lit["power"])
        for o in opts:  # slo (own latency)
            if not o.slo_ok:
                m.add(self.n[o.key] == 0).only_enforce_if(self.lit["slo"])
        prefill = [o for o in opts if o.kind == "prefill"]
        decode_types = sorted({o.kv_device for o in opts if o.kind in ("decode", "decode-af")})
        max_rate = sum(_scaled(o.rate_per_s) * self.ub[o.key] for o in opts) + 1
        self.flow = {}
        for p in prefill:
            for t in decode_types:  # flow[p,t]
                f = m.new_int_var(0, max_rate, f"flow[{p.key},{t}]")
                self.flow[(p.key, t)] = f
                ttft = p.ttft_s + inst.handoff(p.kv_device, t)
                if inst.ttft_slo_s is not None and ttft > inst.ttft_slo_s:  # slo (TTFT including hand-off)
                    m.add(f == 0).only_enforce_if(self.lit["slo"])
            m.add(sum(self.flow[(p.key, t)] for t in decode_types)
                  <= self.n[p.key] * _scaled(p.rate_per_s))  # prefill_capacity[p]
        for t in decode_types:  # decode_capacity[t]
            m.add(sum(self.flow[(p.key, t)] for p in prefill)
                  <= sum(self.n[o.key] * _scaled(o.rate_per_s) for o in opts
                         if o.kind in ("decode", "decode-af") and o.kv_device == t))
        for t1 in sorted({p.kv_device for p in prefill}):  # link[t1,t2]
            for t2 in decode_types:
                bw = inst.link_bw(t1, t2) if t1 != t2 else math.inf
                if math.isfinite(bw) and inst.kv_bytes_per_request > 0:
                    cap = _scaled(bw / inst.kv_bytes_per_request)
                    m.add(sum(self.flow[(p.key, t2)] for p in prefill if p.kv_device == t1) <= cap).only_enforce_if(
                        self.lit["link"])
        self.lam = m.new_int_var(0, max_rate, "lam")
        m.add(self.lam == sum(self.n[o.key] * _scaled(o.rate_per_s) for o in opts if o.kind == "colocated")
              + sum(self.flow.values()))  # served
        need = _scaled(inst.arrival_rate_per_s) if inst.arrival_rate_per_s else 1
        m.add(self.lam >= need).only_enforce_if(self.lit["demand"])  # demand
        self.devices = sum(self.n[o.key] * sum(k for _, k in o.devices) for o in opts)
        self.order = sum(self.n[o.key] * i for i, o in enumerate(opts))
        self.tpot_us = m.new_int_var(0, 10**12, "worst_tpot_us")
        for o in opts:
            if o.tpot_s is not None:
                m.add(self.tpot_us >= _scaled(o.tpot_s, 1e6)).only_enforce_if(self.use[o.key])
        for f in FAMILIES:
            if f in families:
                m.add_assumption(self.lit[f])
            else:
                m.add(self.lit[f] == 0)

    def hint(self, replicas: dict[str, int]) -> None:
        self.m.clear_hints()
        for o in self.inst.options:
            self.m.add_hint(self.n[o.key], replicas.get(o.key, 0))

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
          hint: dict[str, int] | None = None, families: Sequence[str] = FAMILIES,
          tie_break: bool = True) -> Solution:
    """Solve `inst`. An infeasible instance returns status "infeasible" with the binding families.

    The first stage (the objective) runs on `workers` threads; the secondary
    stages that make the solution unique run single-threaded with no hint, so
    the result does not depend on thread timing.
    """
    if objective not in OBJECTIVES:
        raise BadInput(f"--objective {objective!r}: use one of {', '.join(OBJECTIVES)}")
    if objective in ("power", "latency") and inst.arrival_rate_per_s is None:
        raise BadInput(f"--objective {objective} needs a target: set arrival_rate_per_s in the workload file")
    start = time.perf_counter()
    full = inst
    if "slo" in families and objective != "latency":
        inst = replace(inst, options=prune(inst))
    model = _Model(inst, families)
    if hint:
        model.hint(hint)
    deadline = start + time_limit_s
    cp = model.cp
    stages = {
        "throughput": [(model.lam, "max"), (model.power, "min")],
        "power": [(model.power, "min"), (model.lam, "max")],
        "latency": [(model.tpot_us, "min"), (model.power, "min")],
        "tokens-per-watt": None,
    }[objective]
    if stages is None:
        stages = _dinkelbach(model, deadline, workers)
    if tie_break:
        stages = stages + [(model.devices, "min"), (model.order, "min")]
    status_name, first_obj, first_bound = "optimal", 0.0, 0.0
    solver = None
    for i, (expr, sense) in enumerate(stages):
        run = model.solve_hard if i == 0 else model.solve
        solver, status = run(expr, sense, deadline - time.perf_counter(), workers)
        if status == cp.INFEASIBLE:
            return _infeasible(full, families, objective, start)
        if status not in (cp.OPTIMAL, cp.FEASIBLE):
            raise Infeasible(f"the solver found no placement within {time_limit_s:.0f} s; raise --time-limit")
        if i == 0:
            unit = {"throughput": RATE_SCALE, "power": 1.0, "latency": 1e3}.get(objective, 1.0)
            first_obj, first_bound = solver.objective_value / unit, solver.best_objective_bound / unit
            if status != cp.OPTIMAL:
                status_name = "feasible"
        if status != cp.OPTIMAL:
            break  # out of time: keep the best found so far
        model.fix(expr, round(solver.objective_value), sense)
        workers = 1  # later stages only break ties: keep them deterministic
    proto = model.m.Proto()
    sol = Solution(
        status=status_name, objective=objective,
        replicas={o.key: solver.value(model.n[o.key]) for o in inst.options if solver.value(model.n[o.key])},
        flows={k: solver.value(v) / RATE_SCALE for k, v in model.flow.items() if solver.value(v)},
        requests_per_s=solver.value(model.lam) / RATE_SCALE,
        power_w=float(solver.value(model.draw)),
        provisioned_w=float(solver.value(model.power)),
        objective_value=first_obj, bound=first_bound,
        gap=abs(first_bound - first_obj) / max(abs(first_obj), 1e-9) if first_obj else 0.0,
        wall_s=time.perf_counter() - start, variables=len(proto.variables), constraints=len(proto.constraints),
    )
    return sol


def _dinkelbach(model: _Model, deadline: float, workers: int):
    """Max lam/power as a sequence of max lam - q*power solves (Dinkelbach, 1967); returns the final stage."""
    q = 0.0
    for _ in range(20):
        expr = model.lam * 10**6 - _scaled(q, 10**6) * model.power
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
    return [(model.lam * scale - _scaled(q, scale) * model.power, "max"), (model.lam, "max")]


def prune(inst: Instance) -> tuple[PoolOption, ...]:
    """Drop options no throughput, power or tokens-per-watt optimum needs.

    Options that break their own SLO can get no replicas. Options on the same
    devices (same kind, inventory use and provisioned power) are interchangeable
    except for their rate and, for prefill, which decode types their KV can
    reach within the TTFT SLO: an option is dropped when another in its group
    serves at least as many requests per second and reaches every decode type
    it reaches. (The latency objective keeps everything.)
    """
    decode_types = sorted({o.kv_device for o in inst.options if o.kind in ("decode", "decode-af")})

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


def _infeasible(inst: Instance, families: Sequence[str], objective: str, start: float) -> Solution:
    """Name the constraint families that make the instance infeasible.

    A deletion filter over the five families (CP-SAT's own assumption core is
    sufficient but neither minimal nor always reported once presolve proves
    infeasibility): drop each family in turn and keep it dropped if the rest is
    still infeasible. What is left is a minimal infeasible set of families.
    """
    binding = [f for f in FAMILIES if f in families]
    for f in list(binding):
        rest = [x for x in binding if x != f]
        if not _feasible(inst, rest):
            binding = rest
    return Solution(status="infeasible", objective=objective, binding=tuple(binding),
                    wall_s=time.perf_counter() - start)


def _feasible(inst: Instance, families: Sequence[str]) -> bool:
    model = _Model(inst, families)
    solver, status = model.solve(None, "max", 30.0, 1)
    return status in (model.cp.OPTIMAL, model.cp.FEASIBLE)


def greedy(inst: Instance) -> dict[str, int]:
    """A feasible placement by a simple rule: fill with the self-contained (colocated) pool that serves
    the most requests per watt, then the next, while inventory and power last."""
    inv = dict(inst.inventory)
    budget = inst.power_budget_w if inst.power_budget_w is not None else math.inf
    chosen: dict[str, int] = {}
    pools = sorted((o for o in inst.options if o.kind == "colocated" and o.slo_ok and o.provisioned_w > 0),
                   key=lambda o: (-o.rate_per_s / o.provisioned_w, o.key))
    for o in pools:
        k = min((inv[d] // n for d, n in o.devices), default=0)
        if math.isfinite(budget):
            k = min(k, int(budget // o.provisioned_w))
        if k <= 0:
            continue
        chosen[o.key] = k
        for d, n in o.devices:
            inv[d] -= k * n
        budget -= k * o.provisioned_w
    return chosen


def greedy_rate(inst: Instance, replicas: dict[str, int]) -> float:
    rate = {o.key: o.rate_per_s for o in inst.options}
    return sum(rate[k] * n for k, n in replicas.items())
