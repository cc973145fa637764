"""Exact placement with CP-SAT: how many replicas of which pools serve the most requests, and which request
class goes where.

Before: an `Instance` (`compiler.ir.placement`): costed `PoolOption`s with a
latency curve per request class, the classes' shares and SLOs, the inventory,
power budget, links between device types and each class's KV hand-off. After:
a `Solution`: replicas per option, the requests/s of each class on each option
and the KV flows between pools, the objective with its unit, bound and status,
and, when infeasible, the named constraint families that make it so
(`compiler.place.infeasible`).

Variable families (integers; rates in milli-requests/s, dollars in milli-dollars per hour, one scaling
helper, `scaled`):
- ``n[o]``: replicas of pool option o; ``use[o]``: whether o has any.
- ``x[c,o]``: class c's requests/s served end to end by colocated option o.
- ``f[c,p,t]``: class c's requests/s prefilled by option p whose KV goes to decode pools on device type t.
- ``y[c,d]``: class c's requests/s decoded by decode (or decode-af) option d.
- ``lam``: all requests/s served.

Constraints (each family behind an assumption literal so an infeasible
instance names its binding families):
- ``inventory[t]``: devices of type t used by all replicas <= inventory.
- ``power``: sum of replicas' provisioned power (device TDP) <= budget. A budget
  provisions for peak draw; the predicted mean draw is reported beside it.
- ``cost``: sum of replicas' price (dollars per device-hour x devices) <= the cost
  budget, when the instance has one (every device type then needs a price).
- ``utilisation[o]``: the load of o (each class's requests/s over o's capacity for
  that class) <= n[o]; a replica never runs past its capacity.
- ``slo``: ``utilisation[o] <= cap[o,c] x n[o]`` for every class c routed to o,
  where cap is the utilisation at which c's percentile latency meets its SLO
  (`Instance.cap`, from o's latency curve; see [Note: class caps]); a class no
  option serves within its SLO gets none; a KV flow p -> t carries class c
  only if p's TTFT at its cap, the hand-off over the link and the wait for a
  decode slot meet c's TTFT SLO.
- ``decode_balance[c,t]``: what prefill options hand class c's KV to type t equals what decode options on t decode.
  Vendor islands (``Instance.cross_type_kv`` False) have no flow from p to a type other than p's own, and no
  flow goes from p to a type t that ``Instance.kv_pairs`` leaves out (``compile --deployable``).
- ``link[t1,t2]``: bytes per second from type t1 to t2 <= link bandwidth: KV hand-offs, and the hidden states
  and draft tokens of options that span two types.
- ``demand``: each class is served at least its share of lam, and lam >= the
  arrival rate (>= one request per 1000 s when maximising).

Objectives: ``throughput`` (max lam, then min power), ``power`` (min power
at the arrival rate), ``tokens-per-watt`` (max lam / power by Dinkelbach's
method), ``latency`` (min worst TPOT, at their caps, of the used options at the
arrival rate), ``cost`` (min dollars per hour at the arrival rate, then max lam),
``tokens-per-dollar`` (max lam / dollars per hour, Dinkelbach). Ties break on
fewest devices, then option order, so the same inputs give the same solution
byte for byte.

Fleet design ([Note: fleet design]) needs nothing of its own here: a device type
whose count the solver chooses arrives with the budget's bound as its inventory.
"""

from __future__ import annotations

import math
import time
from dataclasses import replace
from typing import Callable, Sequence, TypeVar

from compiler.ir.errors import BadInput, Infeasible
from compiler.ir.placement import (
    FAMILIES, OBJECTIVES, PRICED_OBJECTIVES, SLO_SHARE_ADMISSION, Instance, Objective, Solution,
)
from compiler.ir.pool_option import PoolOption
from compiler.place.greedy import greedy, mix_rate

T = TypeVar("T")
R = TypeVar("R")

RATE_SCALE = 1000  # requests/s are modelled in milli-requests/s
COST_SCALE = 1000  # dollars per hour are modelled in milli-dollars per hour
LOAD_SCALE = 10**9  # a replica's capacity in load units: fine enough that rounding a class's cost up costs < 0.1%
SHARE_SCALE = 1000  # class shares in thousandths


def _integer_shares(shares: Sequence[float], total: int) -> list[int]:
    """Shares as integers summing to `total` (largest remainders); every positive share stays at least 1.

    >>> _integer_shares([0.6, 0.25, 0.15], 1000)
    [600, 250, 150]
    """
    raw = [s * total for s in shares]
    out = [max(1, math.floor(r)) if s > 0 else 0 for r, s in zip(raw, shares)]
    for i in sorted(range(len(raw)), key=lambda i: (out[i] - raw[i], i))[:max(0, total - sum(out))]:
        out[i] += 1
    return out


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
        self.gap = 0.0  # relative gap at which an objective stage may stop (`solve`'s `gap`)
        self.budget = PROVE_DETERMINISTIC_S  # deterministic seconds of each first-stage search (`solve`'s `budget`)
        self.ratio_hint = 0.0  # a guess of a ratio objective's optimum, in its reported unit (`solve`)
        self.inst = inst
        self.m = cp_model.CpModel()
        self.opts = inst.options
        self.inv = dict(inst.inventory)
        self.prefill = [o for o in self.opts if o.kind == "prefill"]
        self.decode_types = sorted({o.kv_device for o in self.opts if o.receives_kv})
        self.lit = {f: self.m.new_bool_var(f"assume[{f}]") for f in FAMILIES}
        self.caps = {(c.name, o.key): inst.cap(o, c) for o in self.opts for c in inst.classes if o.service(c.name)}
        self.slo_binds = "slo" in families
        self.decoders = {c.name: {o.kv_device for o in self.opts if o.receives_kv and (c.name, o.key) in self.caps
                                  and (self.caps[(c.name, o.key)] > 0 or not self.slo_binds)} for c in inst.classes}
        self._replicas()
        self._inventory()
        self._power()
        self._cost()
        self._class_flows()
        self._utilisation_and_slo()
        self._decode_balance()
        self._link()
        self._served_and_demand()
        self._objective_terms()
        for f in FAMILIES:  # fixed, not assumed: CP-SAT searches sequentially and presolves less under
            self.m.add(self.lit[f] == int(f in families))  # assumptions; `binding_families` re-solves instead

    def _replicas(self) -> None:
        """``n[o]``, ``use[o]``. Only the inventory bounds the domain: every other limit is a constraint."""
        self.n, self.use, self.ub = {}, {}, {}
        for o in self.opts:
            self.ub[o.key] = ub = max(min((self.inv.get(d, 0) // k for d, k in o.devices), default=0), 0)
            self.n[o.key] = self.m.new_int_var(0, ub, f"n[{o.key}]")
            self.use[o.key] = self.m.new_bool_var(f"use[{o.key}]")
            self.m.add(self.n[o.key] <= ub * self.use[o.key])
            self.m.add(self.n[o.key] >= self.use[o.key])
        self.max_rate = sum(scaled(s.rate_per_s) * self.ub[o.key] for o in self.opts for s in o.classes) + 1

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

    def _cost(self) -> None:
        """``cost``: dollars per hour of all replicas <= the cost budget. ``cost`` is None when some option's
        devices have no price (`solve` refuses a cost budget or objective then)."""
        prices = [self.inst.price_per_hour(o) for o in self.opts]
        self.cost = None
        if all(p is not None for p in prices):
            self.cost = sum(self.n[o.key] * scaled(p, COST_SCALE) for o, p in zip(self.opts, prices))
        if self.inst.cost_budget_per_hour is not None and self.cost is not None:
            self.m.add(self.cost <= scaled(self.inst.cost_budget_per_hour, COST_SCALE)).only_enforce_if(
                self.lit["cost"])

    def _class_flows(self) -> None:
        """``x[c,o]``, ``f[c,p,t]``, ``y[c,d]``; a KV flow is refused (``slo``) when p's TTFT at its cap, the
        hand-off to t and the wait for a decode slot miss c's TTFT SLO."""
        self.x, self.f, self.y = {}, {}, {}
        for c in self.inst.classes:
            for o in self.opts:
                if (c.name, o.key) not in self.caps:
                    continue
                if o.kind == "colocated":
                    self.x[(c.name, o.key)] = self.m.new_int_var(0, self.max_rate, f"x[{c.name},{o.key}]")
                elif o.receives_kv:
                    self.y[(c.name, o.key)] = self.m.new_int_var(0, self.max_rate, f"y[{c.name},{o.key}]")
                else:
                    for t in self.decode_types:
                        if t not in self.decoders[c.name]:
                            continue  # no decode option on t serves c: nothing could go there
                        if not self.inst.kv_reaches(o.kv_device, t):
                            continue  # vendor islands, or no connector: KV stays off t
                        too_slow = c.ttft_slo_s is not None and self._prefill_ttft(c, o) + self.inst.handoff(
                            c.name, o.kv_device, t) + SLO_SHARE_ADMISSION * c.ttft_slo_s > c.ttft_slo_s
                        if too_slow and self.slo_binds:
                            continue  # the slo family forbids it anyway
                        f = self.f[(c.name, o.key, t)] = self.m.new_int_var(0, self.max_rate, f"f[{c.name},{o.key},{t}]")
                        if too_slow:
                            self.m.add(f == 0).only_enforce_if(self.lit["slo"])

    def _prefill_ttft(self, c, o) -> float:
        """Class c's percentile TTFT on prefill option o when o runs at c's cap."""
        return o.service(c.name).at(self.caps[(c.name, o.key)])[2]

    def flow(self, cls: str, key: str):
        """Class `cls`'s requests/s through option `key` (its prefill flows summed over decode types)."""
        if (cls, key) in self.x:
            return self.x[(cls, key)]
        if (cls, key) in self.y:
            return self.y[(cls, key)]
        return sum(self.f.get((cls, key, t), 0) for t in self.decode_types)

    def _utilisation_and_slo(self) -> None:
        """``utilisation[o]`` <= n[o]; ``slo``: each class's load counted against its own cap, sum <= n[o].

        [Note: class caps] With one cap per class, o may run at most at the cap of
        the strictest class it serves. The linear form (each class's load over its
        cap, summed) is exact when the classes on o share a cap, and would let a mix
        run above the strictest one otherwise; so every replica is also held to the
        strictest cap (``capped`` below), and `candidates` adds, for every option
        whose classes' caps differ, one option per class (`split_by_class`: the
        same replica serving that class alone, at its own cap). The option itself
        stays where it mixes the workload best of its group: a fleet with room
        for one big replica (four wafers of 70B on eight) serves every class on
        it, at the strictest cap, where per-class replicas would need three.
        Caps within 1% of each other are not split; their classes share the
        strictest cap, since every class on a replica waits in the same queue.
        """
        for o in self.opts:
            terms = [(c.name, self.flow(c.name, o.key), o.service(c.name).rate_per_s, self.caps[(c.name, o.key)])
                     for c in self.inst.classes if (c.name, o.key) in self.caps]
            if not terms:
                continue
            load = sum(flow * math.ceil(LOAD_SCALE / (RATE_SCALE * rate)) for _c, flow, rate, _cap in terms)
            self.m.add(load <= LOAD_SCALE * self.n[o.key])  # never above the replicas' capacity
            for c, flow, _rate, cap in terms:
                if cap <= 0:
                    self.m.add(flow == 0).only_enforce_if(self.lit["slo"])
            usable = [(c, flow, rate, cap) for c, flow, rate, cap in terms if cap > 0]
            if not usable:
                continue
            strictest = min(cap for _c, _flow, _rate, cap in usable)
            capped = sum(flow * math.ceil(LOAD_SCALE / (RATE_SCALE * rate * strictest))
                         for _c, flow, rate, _cap in usable)
            self.m.add(capped <= LOAD_SCALE * self.n[o.key]).only_enforce_if(self.lit["slo"])


    def _decode_balance(self) -> None:
        """``decode_balance[c,t]``: KV handed to type t for class c == class c decoded on type t."""
        for c in self.inst.classes:
            for t in self.decode_types:
                handed = [v for (cc, _p, tt), v in self.f.items() if cc == c.name and tt == t]
                decoded = [v for (cc, key), v in self.y.items() if cc == c.name and self._kv_device(key) == t]
                if handed or decoded:
                    self.m.add(sum(handed) == sum(decoded))

    def _kv_device(self, key: str) -> str:
        return next(o.kv_device for o in self.opts if o.key == key)

    def _link(self) -> None:
        """``link[t1,t2]``: bytes per second from type t1 to t2 <= the link's bandwidth (KB, rounded up): the KV
        prefill options hand to decode pools on another type, and half of what an option spanning two types
        moves between them, each way (attention/FFN hidden states, draft tokens: `PoolOption.link_bytes_per_token`
        per output token)."""
        inst = self.inst
        kv_kb = {c.name: math.ceil(c.kv_bytes / 1e3) for c in inst.classes}
        terms: dict[tuple[str, str], list] = {}
        for (c, p, t), v in self.f.items():
            if self._kv_device(p) != t:
                terms.setdefault((self._kv_device(p), t), []).append(v * kv_kb[c])
        for o in self.opts:
            if not o.link_bytes_per_token or len(o.device_types) != 2:
                continue
            a, b = o.device_types
            for c in inst.classes:
                if (c.name, o.key) in self.caps:
                    kb = math.ceil(c.output_len * o.link_bytes_per_token / 2 / 1e3)
                    for pair in ((a, b), (b, a)):
                        terms.setdefault(pair, []).append(self.flow(c.name, o.key) * kb)
        for (t1, t2), flows in sorted(terms.items()):
            bw = inst.link_bw(t1, t2)
            if math.isfinite(bw):
                self.m.add(sum(flows) <= scaled(bw / 1e3)).only_enforce_if(self.lit["link"])

    def _served_and_demand(self) -> None:
        """``demand``: each class at least its share of lam; lam >= the arrival rate."""
        self.lam = self.m.new_int_var(0, self.max_rate, "lam")
        self.class_rate = {}
        shares = _integer_shares([c.share for c in self.inst.classes], SHARE_SCALE)
        for c, share in zip(self.inst.classes, shares):
            entry = [v for (cc, _k), v in self.x.items() if cc == c.name] + \
                    [v for (cc, _p, _t), v in self.f.items() if cc == c.name]
            self.class_rate[c.name] = served = sum(entry)
            self.m.add(SHARE_SCALE * served >= share * self.lam)
        need = scaled(self.inst.arrival_rate_per_s) if self.inst.arrival_rate_per_s else 1
        self.m.add(self.lam >= need).only_enforce_if(self.lit["demand"])

    def _objective_terms(self) -> None:
        """Expressions the objectives and tie-breaks use: devices, option order, worst TPOT (at the caps) of the
        used options."""
        self.devices = sum(self.n[o.key] * o.devices_per_replica for o in self.opts)
        self.order = sum(self.n[o.key] * i for i, o in enumerate(self.opts))
        self.tpot_us = self.m.new_int_var(0, 10**12, "worst_tpot_us")
        for o in self.opts:
            if o.kind == "prefill":
                continue
            for c in self.inst.classes:
                cap = self.caps.get((c.name, o.key), 0.0)
                if cap > 0:
                    tpot = o.service(c.name).at(cap)[4]
                    self.m.add(self.tpot_us >= scaled(tpot, 1e6)).only_enforce_if(self.use[o.key])

    def solve(self, objective, sense: str, time_limit_s: float, **params):
        """Optimise `objective` (None: any feasible point) with one single-threaded search; `params` are CP-SAT
        parameters (a deterministic-time budget, a search configuration)."""
        self._objective(objective, sense)
        return self._run(time_limit_s, **params)

    def search(self, objective, sense: str, time_limit_s: float, budget: float, **params):
        """Optimise `objective` with every `PORTFOLIO` configuration at once, one thread each, `budget`
        deterministic seconds each: a quick proof (`QUICK_PROOF_DETERMINISTIC_S`), else the first
        configuration's proof, else the best placement found carrying the tightest bound any search proved
        (see [Note: a deterministic portfolio])."""
        from concurrent.futures import FIRST_COMPLETED, ThreadPoolExecutor, wait

        self._objective(objective, sense)
        cp = self.cp
        configs = [{k: getattr(cp, v) if isinstance(v, str) else v for k, v in c.items()} for c in PORTFOLIO]
        solvers = [self._solver(time_limit_s, max_deterministic_time=budget, **params, **c) for c in configs]
        runs: dict[int, tuple] = {}

        def quick_rerun(i: int) -> tuple:  # what a still-running search reaches within the quick budget
            solver = self._solver(time_limit_s, max_deterministic_time=QUICK_PROOF_DETERMINISTIC_S, **params,
                                  **configs[i])
            return solver, solver.solve(self.m)

        with ThreadPoolExecutor(len(solvers)) as pool:  # CP-SAT releases the GIL while it searches
            pending = {pool.submit(s.solve, self.m): i for i, s in enumerate(solvers)}
            while pending:
                done, _running = wait(pending, return_when=FIRST_COMPLETED)
                for future in done:
                    i = pending.pop(future)
                    runs[i] = (solvers[i], future.result())
                decided = self._decided(runs, len(solvers), quick_rerun)
                if decided is not None:  # what a stopped search reports depends on when it stopped: not read
                    for s in solvers:
                        s.stop_search()
                    return decided
        return self.best_of([runs[i] for i in range(len(solvers))], sense)

    def _decided(self, runs: dict, configs: int, quick_rerun):
        """The search's answer once it no longer depends on the searches still running, else None: the earliest
        configuration that proves within `QUICK_PROOF_DETERMINISTIC_S`, else the first configuration's proof.
        A configuration still running when that needs its quick answer is re-run within the quick budget, which
        reaches exactly what its full run would have by then."""
        proven = lambda run: run[1] == self.cp.OPTIMAL  # noqa: E731 (or within the gap asked for)
        quick = lambda run: proven(run) and run[0].deterministic_time <= QUICK_PROOF_DETERMINISTIC_S  # noqa: E731
        known = [i for i in range(configs) if i in runs and quick(runs[i])]
        if not known and not (0 in runs and proven(runs[0])):
            return None
        for i in range(min(known, default=configs)):  # every earlier configuration's quick answer
            run = runs[i] if i in runs else quick_rerun(i)
            if quick(run):
                return run
        return runs[known[0]] if known else runs[0]

    def best_of(self, runs: list, sense: str):
        """Of finished searches of one objective, in order: an infeasibility proof, else the best placement (a
        proven one first; the earlier on a tie) carrying the tightest bound of them all, else the first."""
        cp = self.cp
        if any(status == cp.INFEASIBLE for _s, status in runs):
            return next(r for r in runs if r[1] == cp.INFEASIBLE)
        found = [(s, status) for s, status in runs if status in (cp.OPTIMAL, cp.FEASIBLE)]
        if not found:
            return runs[0]
        sign = 1 if sense == "max" else -1
        best = max(found, key=lambda r: (r[1] == cp.OPTIMAL and _gap(r[0]) == 0, sign * r[0].objective_value))
        bounds = [s.best_objective_bound for s, _status in runs]
        return _Best(best[0], min(bounds) if sense == "max" else max(bounds)), best[1]

    def _objective(self, objective, sense: str) -> None:
        if objective is None:
            self.m.clear_objective()
        elif sense == "max":
            self.m.maximize(objective)
        else:
            self.m.minimize(objective)

    def _run(self, time_limit_s: float, **params):
        solver = self._solver(time_limit_s, **params)
        return solver, solver.solve(self.m)

    def _solver(self, time_limit_s: float, **params):
        solver = self.cp.CpSolver()
        solver.parameters.max_time_in_seconds = max(time_limit_s, 0.1)
        solver.parameters.num_workers = 1
        solver.parameters.random_seed = 0
        if self.gap:
            solver.parameters.relative_gap_limit = self.gap
        for key, value in params.items():
            setattr(solver.parameters, key, value)
        return solver

    def hint_from(self, solver) -> None:
        """Start the next stage from `solver`'s placement (complete and feasible, so the hint is too)."""
        self.m.clear_hints()
        for i in range(len(self.m.Proto().variables)):
            var = self.m.get_int_var_from_proto_index(i)
            self.m.add_hint(var, solver.value(var))

    def fix(self, expr, value: int, sense: str) -> None:
        """Keep an earlier objective's optimum while a later one breaks ties."""
        self.m.add(expr >= value if sense == "max" else expr <= value)


class _Best:
    """A finished `CpSolver` (its placement and incumbent) with the tightest bound of a portfolio's searches."""

    def __init__(self, solver, bound: float) -> None:
        self._solver = solver
        self.best_objective_bound = bound

    def __getattr__(self, name: str):
        return getattr(self._solver, name)


def solve(inst: Instance, objective: str = "throughput", *, time_limit_s: float = 60.0,
          families: Sequence[str] = FAMILIES, tie_break: bool = True,
          tie_break_budget: float | None = None, explain: bool = True, gap: float = 0.0,
          ratio_hint: float = 0.0, hint: Solution | None = None, budget: float | None = None) -> Solution:
    """Solve `inst`. An infeasible instance returns status "infeasible" with the binding families (found by
    re-solving with families dropped; `explain` False skips that and leaves them empty).

    The first stage (the objective) runs a deterministic portfolio of searches
    ([Note: a deterministic portfolio]); the secondary stages that make the
    solution unique run single-threaded. `gap` > 0 stops the first stage at that relative gap
    (status ``feasible``, bound reported): what a sweep of many points affords.
    `ratio_hint` starts a ratio objective (tokens per watt or per dollar) from a
    guess of its value, e.g. a neighbouring point's. `hint` starts the search from another solution's replica
    counts (those of options this instance has), e.g. the plan's own when an efficiency moves; without one it
    starts from the greedy placement (`compiler.place.greedy`). `budget` is the deterministic seconds of each
    first-stage search (`PROVE_DETERMINISTIC_S`): what-if solves that stop at a gap afford less.
    """
    from compiler.place.infeasible import binding_families

    if objective not in OBJECTIVES:
        raise BadInput(f"--objective {objective!r}: use one of {', '.join(OBJECTIVES)}")
    if objective in ("power", "latency", "cost") and inst.arrival_rate_per_s is None:
        raise BadInput(f"--objective {objective} needs a target: set arrival_rate_per_s in the workload file")
    _check_prices(inst, objective)
    start = time.perf_counter()
    full = inst
    inst = inst.with_options(candidates(inst, prune_them="slo" in families and objective != "latency"))
    model = PlacementModel(inst, families)
    model.gap, model.ratio_hint = gap, ratio_hint
    model.budget = PROVE_DETERMINISTIC_S if budget is None else budget
    for key, count in hint.replicas if hint is not None else sorted(greedy(full, objective).items()):
        if key in model.n:
            model.m.add_hint(model.n[key], count)
    outcome = _solve_model(model, objective, start + time_limit_s, tie_break,
                           TIE_BREAK_DETERMINISTIC_S if tie_break_budget is None else tie_break_budget)
    if outcome is None:
        binding = binding_families(full, families) if explain else ()
        return Solution("infeasible", Objective(objective, 0.0, 0.0), binding=binding,
                        wall_s=time.perf_counter() - start)
    return _solution(model, *outcome, objective, start)


def feasible(inst: Instance) -> bool:
    """Whether any placement of `inst` meets every constraint: one search with no objective (tenths of a second
    where an optimisation takes seconds; ``gimletc pareto`` bisects the fastest TPOT target with it)."""
    model = PlacementModel(inst.with_options(candidates(inst)))
    _solver, status = model.solve(None, "max", FEASIBILITY_LIMIT_S)
    return status in (model.cp.OPTIMAL, model.cp.FEASIBLE)


#: Wall seconds a feasibility search may take; one that runs out counts as infeasible (none has come close).
FEASIBILITY_LIMIT_S = 30.0


#: Searches `concurrently` runs at once: two cores here, and each search's portfolio already has two threads.
SOLVES_AT_ONCE = 2


def concurrently(solve_one: Callable[[T], R], items: Sequence[T]) -> list[R]:
    """`solve_one` of each of `items`, `SOLVES_AT_ONCE` at a time, results in the order of `items`. Every search
    is deterministic on its own ([Note: a deterministic portfolio]), so running several at once changes only the
    wall time: a portfolio whose first configuration finishes early leaves a core to the next solve."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(SOLVES_AT_ONCE) as pool:
        return list(pool.map(solve_one, items))


def _check_prices(inst: Instance, objective: str) -> None:
    """A cost budget or a priced objective needs a price for every device type the options use."""
    why = (f"--objective {objective}" if objective in PRICED_OBJECTIVES else
           f"the cost budget (${inst.cost_budget_per_hour:g}/h)" if inst.cost_budget_per_hour is not None else None)
    if why is None:
        return
    priced = dict(inst.prices_per_hour)
    missing = sorted({d for o in inst.options for d, _k in o.devices if d not in priced})
    if missing:
        raise BadInput(f"{why} needs a price for every device type, and {', '.join(missing)} has none: set "
                       f"price_per_hour (dollars per device-hour) on its entry in the cluster file")

def _mixed_caps(inst: Instance) -> set[str]:
    """Options whose classes meet their SLOs at different utilisations (more than 1% apart)."""
    out = set()
    for o in inst.options:
        caps = [inst.cap(o, c) for c in inst.classes if o.service(c.name) is not None]
        if len(caps) > 1 and max(caps) - min(caps) > 0.01:
            out.add(o.key)
    return out


def candidates(inst: Instance, *, prune_them: bool = True) -> list[PoolOption]:
    """The options the model places ([Note: class caps]): each option whose classes meet their SLOs at different
    utilisations also as one option per class (`split_by_class`), pruned (`prune`); the option itself stays as
    a mixing replica, at its strictest class's cap, where it mixes the workload best of its group
    (`_best_mixers`): a fleet with room for one replica must be able to serve every class on it."""
    mixed = _mixed_caps(inst)
    split = inst.with_options(split_by_class(inst.options, mixed))
    if not prune_them:
        return [*split.options, *(o for o in inst.options if o.key in mixed)]
    return sorted([*prune(split), *_best_mixers(inst, mixed)], key=lambda o: o.key)


def _best_mixers(inst: Instance, keys: set[str]) -> list[PoolOption]:
    """Of the options named in `keys`, per group of interchangeable ones (as in `prune`), the one that serves the
    most of the workload's mix at the strictest cap of the classes it serves (none where it serves fewer than
    two classes within their SLOs: its per-class twins cover that)."""
    def rate(o: PoolOption) -> float:
        usable = {c.name: c.share for c in inst.classes if o.service(c.name) is not None and inst.cap(o, c) > 0}
        return mix_rate(inst, o, usable) if len(usable) > 1 else 0.0

    best: dict[tuple, tuple[float, PoolOption]] = {}
    for o in sorted((o for o in inst.options if o.key in keys), key=lambda o: o.key):
        r = rate(o)
        group = (o.kind, o.devices, o.kv_device, o.pp, o.provisioned_w)
        if r > 0 and (group not in best or r > best[group][0]):
            best[group] = (r, o)
    return [o for _r, o in best.values()]


def split_by_class(options: Sequence[PoolOption], keys: set[str]) -> list[PoolOption]:
    """`options` with each one named in `keys` replaced by one option per class it serves (``key|class``)."""
    out = []
    for o in options:
        if o.key in keys and len(o.classes) > 1:
            out += [replace(o, key=f"{o.key}|{s.name}", classes=(s,)) for s in o.classes]
        else:
            out.append(o)
    return sorted(out, key=lambda o: o.key)


def _solve_model(model: PlacementModel, objective: str, deadline: float, tie_break: bool, budget: float):
    """Run the lexicographic stages; None if infeasible, else (solver, proven, first-stage value and bound)."""
    cp = model.cp
    stages, solved = _stages(model, objective, deadline)
    if tie_break:
        stages = stages + [(model.devices, "min"), (model.order, "min")]
    proven, first = True, (0.0, 0.0)
    solver = None
    for i, (expr, sense) in enumerate(stages):
        if i == 0:
            solver, status = solved or _first_stage(model, expr, sense, deadline)
        else:  # [Note: deterministic tie-breaks]
            model.hint_from(solver)
            tie, status = model.solve(expr, sense, deadline - time.perf_counter(), max_deterministic_time=budget)
            if status not in (cp.OPTIMAL, cp.FEASIBLE):
                break  # no better tie-break within its budget: keep the previous stage's placement
            solver = tie
        if status == cp.INFEASIBLE:
            return None
        if status not in (cp.OPTIMAL, cp.FEASIBLE):
            raise Infeasible("the solver found no placement within the time limit; raise --time-limit")
        if i == 0:
            first = (solver.objective_value, solver.best_objective_bound)
            proven = status == cp.OPTIMAL and abs(first[0] - first[1]) < 1  # a gap limit also reports OPTIMAL
            if not proven:
                break  # out of time (or within the gap asked for): keep the best found so far
        model.fix(expr, round(solver.objective_value), sense)
    return solver, proven, first


def _first_stage(model: PlacementModel, expr, sense: str, deadline: float):
    """The objective: the portfolio's best within `PROVE_DETERMINISTIC_S` (or the model's gap), searched again
    from it (to `FALLBACK_GAP`, within `FALLBACK_DETERMINISTIC_S`) when that is further than `FALLBACK_GAP` from
    its bound and the gap asked for is tighter; see [Note: solving to a gap]."""
    cp = model.cp
    solver, status = model.search(expr, sense, deadline - time.perf_counter(), model.budget)
    if status != cp.FEASIBLE or model.gap >= FALLBACK_GAP or deadline - time.perf_counter() <= 0 \
            or _gap(solver) <= FALLBACK_GAP:
        return solver, status
    model.hint_from(solver)
    again = model.search(expr, sense, deadline - time.perf_counter(), FALLBACK_DETERMINISTIC_S,
                         relative_gap_limit=FALLBACK_GAP)
    return model.best_of([(solver, status), again], sense)


def _gap(solver) -> float:
    """The relative gap between `solver`'s incumbent and its bound."""
    value, bound = solver.objective_value, solver.best_objective_bound
    return abs(bound - value) / max(abs(bound), 1e-9)


#: [Note: solving to a gap] Most instances are proven optimal in well under a
#: second; a few (large mixes with few big pools, where integer replicas leave
#: the LP bound a percent or two above any placement) are not proven in
#: minutes. Stopping such a search at a wall-clock limit would make the plan
#: depend on the machine and the thread timing. So the first stage gets a
#: deterministic budget (CP-SAT's count of work, not wall seconds) to prove
#: the optimum (or reach the gap asked for); if it does not and its best is
#: further than `FALLBACK_GAP` from the bound, a second round starts from that
#: best and stops within `FALLBACK_GAP` or at its own budget; the plan reports
#: the gap ("feasible"). Baselines stop at the gap the plan reached, so a
#: comparison holds both sides to the same standard ([Note: baselines]).
#: The cost model's own uncertainty (the sensitivity analysis moves
#: efficiencies by 20%) dwarfs 2%.
#:
#: [Note: a deterministic portfolio] No single CP-SAT configuration suits every
#: instance here: the default search (LP at level 1) finds good placements of
#: the big 70B mixes but cannot prove a 405B mix (bound 45% above the best)
#: or find any placement of mixtral-8x7b on the mixed fleet within 5
#: deterministic seconds, while a full linearisation (level 2) with
#: pseudo-cost branching proves both in a tenth of a second and does worse on
#: the mixes. CP-SAT's own parallel portfolio is not repeatable, so `search`
#: runs each configuration of `PORTFOLIO` single-threaded (deterministic) on
#: its own thread, each with the same deterministic budget, and keeps the
#: best placement (the first configuration's on a tie) with the tightest
#: bound: the same inputs give the same plan on any machine, and two cores
#: search at once. A configuration that proves its answer (or reaches the gap
#: asked for) within `QUICK_PROOF_DETERMINISTIC_S` decides (the earliest such
#: in `PORTFOLIO`); failing that, the first configuration's proof decides; the
#: others are then stopped unread (what a stopped search reports depends on
#: when it stopped). Which configuration proves quickly is itself
#: deterministic: one still running when that matters is re-run within the
#: quick budget, which reaches what its full run would have by then. The 405B
#: mix is the case: the second configuration proves it in 0.03
#: deterministic seconds while the first spends its whole budget (1.7 s of
#: wall time) without a proof. Every search starts from the greedy placement
#: (or the plan's, in the sensitivity re-solves) as a hint.
PROVE_DETERMINISTIC_S = 1.0
QUICK_PROOF_DETERMINISTIC_S = 0.1
FALLBACK_GAP = 0.02
FALLBACK_DETERMINISTIC_S = 2.0
#: CP-SAT configurations `PlacementModel.search` runs side by side (names of `cp_model` constants as strings).
PORTFOLIO = ({}, {"linearization_level": 2, "search_branching": "PSEUDO_COST_SEARCH"})


#: [Note: deterministic tie-breaks] Stages after the first only choose among
#: equally good placements (least power, fewest devices, option order). Each
#: runs single-threaded with a deterministic-time budget (CP-SAT's count of
#: work, not wall seconds), so the same inputs stop at the same incumbent on
#: any machine and the plan stays byte-identical even when a tie-break is
#: not proven optimal; the value it reached is fixed before the next stage.
TIE_BREAK_DETERMINISTIC_S = 0.5


def _stages(model: PlacementModel, objective: str, deadline: float) -> tuple[list[tuple], tuple | None]:
    """The lexicographic objectives: the user's first, then what makes its optimum cheapest; and the first
    stage already solved, where finding it solved it (Dinkelbach), else None."""
    if objective == "tokens-per-watt":
        return _dinkelbach(model, deadline, model.power, model.ratio_hint * RATE_SCALE)
    if objective == "tokens-per-dollar":
        return _dinkelbach(model, deadline, model.cost, model.ratio_hint)
    return {
        "throughput": lambda: [(model.lam, "max"), (model.power, "min")],
        "power": lambda: [(model.power, "min"), (model.lam, "max")],
        "latency": lambda: [(model.tpot_us, "min"), (model.power, "min")],
        "cost": lambda: [(model.cost, "min"), (model.lam, "max")],
    }[objective](), None


def _solution(model: PlacementModel, solver, proven: bool, first: tuple[float, float], objective: str,
              start: float) -> Solution:
    replicas = {o.key: solver.value(model.n[o.key]) for o in model.opts}
    lam, power = solver.value(model.lam), solver.value(model.power)
    cost = solver.value(model.cost) / COST_SCALE if model.cost is not None else None
    if objective in ("tokens-per-watt", "tokens-per-dollar"):  # the linearised Dinkelbach value means nothing
        per = power if objective == "tokens-per-watt" else cost  # to a reader; report the ratio
        value = bound = lam / RATE_SCALE / per if per else 0.0
    else:
        unit = {"throughput": RATE_SCALE, "power": 1.0, "latency": 1e3, "cost": COST_SCALE}[objective]
        value, bound = first[0] / unit, first[1] / unit
    served = {}
    for o in model.opts:
        for c in model.inst.classes:
            if (c.name, o.key) in model.caps:
                rate = solver.value(model.flow(c.name, o.key))
                if rate:
                    served[(c.name, o.key)] = rate / RATE_SCALE
    proto = model.m.Proto()
    return Solution(
        status="optimal" if proven else "feasible", objective=Objective(objective, value, bound),
        replicas=tuple(sorted((k, n) for k, n in replicas.items() if n)),
        flows=tuple(sorted((k, solver.value(v) / RATE_SCALE) for k, v in model.f.items() if solver.value(v))),
        served=tuple(sorted(served.items())),
        class_requests_per_s=tuple((c.name, solver.value(model.class_rate[c.name]) / RATE_SCALE)
                                   for c in model.inst.classes),
        requests_per_s=lam / RATE_SCALE, power_w=float(solver.value(model.draw)), provisioned_w=float(power),
        cost_per_hour=cost, wall_s=time.perf_counter() - start, variables=len(proto.variables), constraints=len(proto.constraints),
        options=tuple(model.opts))


def _dinkelbach(model: PlacementModel, deadline: float, per, start: float = 0.0):
    """Max lam/`per` (provisioned power, or dollars per hour) as a sequence of max lam - q*per solves
    (Dinkelbach, 1967), from q = `start` (any guess: a ratio above the optimum costs one step). Returns the
    stages and the last solve: at q = the best ratio found its optimum has a ratio of at least q, so it is the
    ratio's optimum (to the model's gap) and needs no second solve."""
    scale = 10**6
    q, best, last = start, 0.0, None
    for _ in range(20):
        expr = model.lam * scale - scaled(q, scale) * per
        solver, status = model.search(expr, "max", deadline - time.perf_counter(), model.budget)
        if status not in (model.cp.OPTIMAL, model.cp.FEASIBLE):
            last = last or (expr, (solver, status))  # keep the last solve that found a placement
            break
        last = (expr, (solver, status))
        lam, denominator = solver.value(model.lam), solver.value(per)
        if denominator <= 0 or lam <= 0 or lam / denominator <= best * (1 + max(1e-9, model.gap)):
            break
        best = q = lam / denominator
    expr, solved = last
    return [(expr, "max"), (model.lam, "max")], solved


def prune(inst: Instance) -> tuple[PoolOption, ...]:
    """Keep, per group of interchangeable options, the best one for each class; drop the rest.

    Options on the same devices (same kind, inventory use and provisioned
    power) differ only in what each class gets from a replica: the requests/s
    it serves within the class's SLO (rate x cap) and, for prefill, which
    decode types its KV reaches within the TTFT SLO. Serving a class on the
    group's best option for it takes no more devices or watts than on any
    other, so only those are kept (ties: the wider reach, then the key). An
    option no class can use within its SLO is dropped, and so is a larger
    replica that m smaller ones of the same kind match on the same devices
    (`_scales`). (The latency objective keeps everything.)
    """
    decode_types = sorted({o.kv_device for o in inst.options if o.receives_kv})

    def value(o: PoolOption, c) -> tuple[float, int]:
        cap = inst.cap(o, c)
        if cap <= 0:
            return 0.0, 0
        rate = o.service(c.name).rate_per_s * cap
        if o.kind != "prefill":
            return rate, len(decode_types)
        if c.ttft_slo_s is None:
            reach = sum(inst.kv_reaches(o.kv_device, t) for t in decode_types)
            return (rate if reach else 0.0), reach
        ttft = o.service(c.name).at(cap)[2]
        reach = sum(ttft + inst.handoff(c.name, o.kv_device, t) + SLO_SHARE_ADMISSION * c.ttft_slo_s <= c.ttft_slo_s
                    for t in decode_types if inst.kv_reaches(o.kv_device, t))
        return (rate if reach else 0.0), reach

    values = {o.key: [value(o, c) for c in inst.classes] for o in inst.options}
    alive = [o for o in inst.options if any(v[0] > 0 for v in values[o.key])]
    alike: dict[tuple, list[PoolOption]] = {}  # `_scales` compares only options of one kind on the same types
    for o in alive:
        alike.setdefault((o.kind, o.device_types, o.kv_device), []).append(o)
    size = {o.key: o.devices_per_replica for o in alive}
    alive = [o for o in alive if not any(_scales(o2, o, values) for o2 in alike[(o.kind, o.device_types, o.kv_device)]
                                         if size[o.key] % size[o2.key] == 0 and size[o.key] >= 2 * size[o2.key])]
    groups: dict[tuple, list[PoolOption]] = {}
    for o in alive:
        groups.setdefault((o.kind, o.devices, o.kv_device, o.pp, o.provisioned_w), []).append(o)
    kept: set[str] = set()
    for members in groups.values():
        for i, c in enumerate(inst.classes):
            best = max(members, key=lambda o: (values[o.key][i][1] > 0, values[o.key][i][0], values[o.key][i][1],
                                               _neg_key(o.key)))
            if values[best.key][i][0] > 0:
                kept.add(best.key)
    return tuple(o for o in sorted(inst.options, key=lambda o: o.key) if o.key in kept)


def _scales(small: PoolOption, big: PoolOption, values: dict) -> bool:
    """Whether m replicas of `small` (same kind and device types, m times fewer devices each) do at least what
    one replica of `big` does for every class, on the same devices and watts: then `big` is never needed."""
    if small.kind != big.kind or small.device_types != big.device_types or small.kv_device != big.kv_device:
        return False
    m, rem = divmod(big.devices_per_replica, small.devices_per_replica)
    if m < 2 or rem or any(kb != m * ks for (_d, kb), (_d2, ks) in zip(big.devices, small.devices)):
        return False
    if m * small.provisioned_w > big.provisioned_w * (1 + 1e-9):
        return False
    return all(m * vs[0] >= vb[0] and vs[1] >= vb[1] for vs, vb in zip(values[small.key], values[big.key]))


def _neg_key(key: str) -> tuple[int, ...]:
    """Sorts keys in reverse, so that max() breaks ties towards the smallest key."""
    return tuple(-ord(ch) for ch in key)
