"""Exact placement with CP-SAT: how many replicas of which pools serve the most requests, and which request
class goes where.

Before: an `Instance` (`compiler.ir.placement`): costed `PoolOption`s with a
latency curve per request class, the classes' shares and SLOs, the inventory,
power budget, links between device types and each class's KV hand-off. After:
a `Solution`: replicas per option, the requests/s of each class on each option
and the KV flows between pools, the objective with its unit, bound and status,
and, when infeasible, the named constraint families that make it so
(`binding_families`; `compiler.place.infeasible` words them).

Variable families (integers; rates in milli-requests/s, dollars in milli-dollars per hour, one scaling
helper, `scaled` in `compiler.place.candidates`, which also chooses and prunes the options placed):
- ``n[o]``: replicas of pool option o; ``use[o]``: whether o has any.
- ``x[c,o]``: class c's requests/s served end to end by colocated option o.
- ``f[c,p,t]``: class c's requests/s prefilled by option p whose KV goes to decode pools on device type t.
- ``y[c,d]``: class c's requests/s decoded by decode (or decode-af) option d.
- ``lam``: all requests/s served.

Constraints (each family behind an assumption literal so an infeasible
instance names its binding families):
- ``inventory[t]``: devices of type t used by all replicas <= inventory.
- ``power``: sum of replicas' provisioned power (their devices' rated power on the
  budget's footing, [Note: power basis]) <= budget. A budget provisions for peak
  draw; the predicted mean draw, linear in each option's load ([Note: drawn
  power]), is reported beside it.
- ``cost``: sum of replicas' price (dollars per device-hour x devices) <= the cost
  budget, when the instance has one (every device type then needs a price).
- ``utilisation[o]``: the load of o (each class's requests/s over o's capacity for
  that class) <= n[o]; a replica never runs past its capacity.
- ``slo``: ``utilisation[o] <= cap[o,c] x n[o]`` for every class c routed to o,
  where cap is the utilisation at which c's percentile latency meets its SLO
  (`Instance.cap`, from o's latency curve; see [Note: class caps]); a class no
  option serves within its SLO gets none; a KV flow p -> t carries class c
  only if t is one of p's KV targets for c (`Instance.kv_targets`: p's TTFT at
  its cap, the hand-off to t and the wait for a decode slot meet c's TTFT SLO).
- ``decode_balance[c,t]``: what prefill options hand class c's KV to type t equals what decode options on t decode.
  Vendor islands (``Instance.cross_type_kv`` False) have no flow from p to a type other than p's own, and no
  flow goes from p to a type t that ``Instance.kv_pairs`` leaves out (``compile --deployable``).
- ``link[t1,t2]``: bytes per second from type t1 to t2 <= link bandwidth times the link's cap ([Note:
  hand-offs] in `cost_models.comm`): KV hand-offs (t1 == t2: over t1's own fabric), and the hidden states and
  draft tokens of options that span two types.
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
from typing import Callable, Sequence, TypeVar

from compiler.ir.errors import BadInput, Infeasible
from compiler.ir.placement import (
    FAMILIES, OBJECTIVES, PRICED_OBJECTIVES, Instance, Objective, Solution,
)
from compiler.place import portfolio
from compiler.place.candidates import COST_SCALE, LOAD_SCALE, RATE_SCALE, candidates, load_units, scaled
from compiler.place.greedy import greedy
from compiler.place.moves import Moves, add_moves, kept
from compiler.place.ratio import dinkelbach

T = TypeVar("T")
R = TypeVar("R")

SHARE_SCALE = 1000  # class shares in thousandths
RATIO_OBJECTIVES = ("tokens-per-watt", "tokens-per-dollar")
DRAW_SCALE = 10**6  # the predicted draw is modelled in microwatts (an error below 1 W at 1000 requests/s)


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
        self.moved, self.slack = None, 0.0  # replicas moved from a running plan, and the slack for fewer (`solve`)
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
        """``power``: provisioned watts (rated power on the budget's footing) of all replicas <= budget."""
        self.watts = {o.key: scaled(o.provisioned_w, 1) for o in self.opts}  # per replica
        self.power = sum(self.n[o.key] * self.watts[o.key] for o in self.opts)
        if self.inst.power_budget_w is not None:
            self.m.add(self.power <= scaled(self.inst.power_budget_w, 1)).only_enforce_if(self.lit["power"])

    @property
    def draw(self):
        """The predicted mean draw in microwatts ([Note: drawn power] in `cost_models.power`), linear: each
        option's idle draw x n[o], plus (full - idle) x its load (each class's requests/s over o's rate for it,
        the load `utilisation[o]` bounds by n[o])."""
        terms = [self.n[o.key] * scaled(o.idle_w, DRAW_SCALE) for o in self.opts]
        for o in self.opts:
            for c in self.inst.classes:
                if (c.name, o.key) in self.caps:
                    per_flow_w = (o.power_w - o.idle_w) / (RATE_SCALE * o.service(c.name).rate_per_s)
                    terms.append(self.flow(c.name, o.key) * scaled(per_flow_w, DRAW_SCALE))
        return sum(terms)

    def _cost(self) -> None:
        """``cost``: dollars per hour of all replicas <= the cost budget. ``cost`` is None when some option's
        devices have no price (`solve` refuses a cost budget or objective then)."""
        prices = [self.inst.price_per_hour(o) for o in self.opts]
        self.cost = self.prices = None
        if all(p is not None for p in prices):
            self.prices = {o.key: scaled(p, COST_SCALE) for o, p in zip(self.opts, prices)}  # per replica
            self.cost = sum(self.n[o.key] * self.prices[o.key] for o in self.opts)
        if self.inst.cost_budget_per_hour is not None and self.cost is not None:
            self.m.add(self.cost <= scaled(self.inst.cost_budget_per_hour, COST_SCALE)).only_enforce_if(
                self.lit["cost"])

    def _class_flows(self) -> None:
        """``x[c,o]``, ``f[c,p,t]``, ``y[c,d]``; a KV flow is refused (``slo``) when t is not among p's KV targets
        for c (`Instance.kv_targets`: p's TTFT at its cap, the hand-off to t and the wait for a decode slot
        miss c's TTFT SLO)."""
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
                    targets = self.inst.kv_targets(o, c)
                    for t in self.decode_types:
                        if t not in self.decoders[c.name]:
                            continue  # no decode option on t serves c: nothing could go there
                        if not self.inst.kv_may_go(o, t):
                            continue  # vendor islands, no connector, or a copy of o for other types
                        too_slow = t not in targets
                        if too_slow and self.slo_binds:
                            continue  # the slo family forbids it anyway
                        f = self.f[(c.name, o.key, t)] = self.m.new_int_var(0, self.max_rate, f"f[{c.name},{o.key},{t}]")
                        if too_slow:
                            self.m.add(f == 0).only_enforce_if(self.lit["slo"])

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
        stays beside them, mixing every class at the strictest cap: a fleet with
        room for one big replica (four wafers of 70B on eight) serves every class
        on it, where per-class replicas would need three.
        Caps within 1% of each other are not split; their classes share the
        strictest cap, since every class on a replica waits in the same queue.
        """
        for o in self.opts:
            terms = [(c.name, self.flow(c.name, o.key), o.service(c.name).rate_per_s, self.caps[(c.name, o.key)])
                     for c in self.inst.classes if (c.name, o.key) in self.caps]
            if not terms:
                continue
            load = sum(flow * load_units(rate) for _c, flow, rate, _cap in terms)
            self.m.add(load <= LOAD_SCALE * self.n[o.key])  # never above the replicas' capacity
            for c, flow, _rate, cap in terms:
                if cap <= 0:
                    self.m.add(flow == 0).only_enforce_if(self.lit["slo"])
            usable = [(c, flow, rate, cap) for c, flow, rate, cap in terms if cap > 0]
            if not usable:
                continue
            strictest = min(cap for _c, _flow, _rate, cap in usable)
            capped = sum(flow * load_units(rate, strictest) for _c, flow, rate, _cap in usable)
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
        """``link[t1,t2]``: bytes per second from type t1 to t2 <= the link's bandwidth times its cap (KB, rounded
        up; [Note: hand-offs] in `cost_models.comm`): the KV prefill options hand to decode pools on t2 (t1 == t2:
        over t1's own fabric), and half of what an option spanning two types moves between them, each way
        (attention/FFN hidden states, draft tokens: `PoolOption.link_bytes_per_token` per output token)."""
        inst = self.inst
        kv_kb = {c.name: math.ceil(c.kv_bytes / 1e3) for c in inst.classes}
        terms: dict[tuple[str, str], list] = {}
        for (c, p, t), v in self.f.items():
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
            bw = inst.link_bw(t1, t2) * inst.link_cap(t1, t2)
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
        """Optimise `objective` with the deterministic portfolio (`compiler.place.portfolio`), `budget`
        deterministic seconds for each of its searches; `params` are CP-SAT parameters."""
        self._objective(objective, sense)
        return portfolio.search(self.m, lambda **more: self._solver(time_limit_s, **params, **more), sense, budget)

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


def solve(inst: Instance, objective: str = "throughput", *, time_limit_s: float = 60.0,
          families: Sequence[str] = FAMILIES, tie_break: bool = True,
          tie_break_budget: float | None = None, explain: bool = True, gap: float = 0.0,
          ratio_hint: float = 0.0, hint: Solution | None = None, budget: float | None = None,
          moves: Moves | None = None) -> Solution:
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
    first-stage search (`PROVE_DETERMINISTIC_S`): what-if solves that stop at a gap afford less. `moves` re-solves
    from a running placement (`compiler.place.moves`): at most its ``max_moves``, then the fewest moves within its
    ``slack`` of that optimum (linear objectives; a ratio objective takes no slack).
    """
    if objective not in OBJECTIVES:
        raise BadInput(f"--objective {objective!r}: use one of {', '.join(OBJECTIVES)}")
    if objective in ("power", "latency", "cost") and inst.arrival_rate_per_s is None:
        raise BadInput(f"--objective {objective} needs a target: set arrival_rate_per_s in the workload file")
    _check_prices(inst, objective)
    start = time.perf_counter()
    full = inst
    placed = candidates(inst, prune_them="slo" in families and objective != "latency")
    if moves is not None:  # the running plan's options stay candidates, pruned or not ("stay put" is possible)
        placed += [o for o in kept(candidates(inst, prune_them=False), moves) if o.key not in {p.key for p in placed}]
    inst = inst.with_options(placed)
    model = PlacementModel(inst, families)
    model.moved = add_moves(model, moves) if moves is not None else None
    model.slack = moves.slack if moves is not None and objective not in RATIO_OBJECTIVES else 0.0
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


def feasible(inst: Instance, families: Sequence[str] = FAMILIES) -> bool:
    """Whether any placement of `inst` meets every constraint of `families`: one search with no objective (tenths
    of a second where an optimisation takes seconds; ``gimletc pareto`` bisects the fastest TPOT target with it)."""
    model = PlacementModel(inst.with_options(candidates(inst, prune_them="slo" in families)), families)
    _solver, status = model.solve(None, "max", FEASIBILITY_LIMIT_S)
    return status in (model.cp.OPTIMAL, model.cp.FEASIBLE)


def binding_families(inst: Instance, families: Sequence[str]) -> tuple[str, ...]:
    """A minimal infeasible set of constraint families, by a deletion filter (`compiler.place.infeasible` words
    them). CP-SAT's own assumption core is sufficient but neither minimal nor always reported once presolve
    proves infeasibility: drop each family in turn and keep it dropped if the rest is still infeasible."""
    binding = [f for f in FAMILIES if f in families]
    for f in list(binding):
        rest = [x for x in binding if x != f]
        if not feasible(inst, rest):
            binding = rest
    return tuple(binding)


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

def _solve_model(model: PlacementModel, objective: str, deadline: float, tie_break: bool, budget: float):
    """Run the lexicographic stages; None if infeasible, else (solver, proven, first-stage value and bound)."""
    cp = model.cp
    stages, solved = _stages(model, objective, deadline)
    if tie_break:
        stages = stages + [(model.devices, "min"), (model.order, "min")]
    if model.moved is not None:  # the fewest moves right after the objective ([Note] in `compiler.place.moves`)
        stages = stages[:1] + [(model.moved, "min")] + stages[1:]
    proven, first = True, (0.0, 0.0)
    solver = None
    for i, (expr, sense) in enumerate(stages):
        if i == 0:
            solver, status = solved[:2] if solved else _first_stage(model, expr, sense, deadline)
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
            first = solved[2] if solved else (solver.objective_value, solver.best_objective_bound)
            # a gap limit also reports OPTIMAL; a ratio's status is already its own proof
            proven = status == cp.OPTIMAL and (solved is not None or abs(first[0] - first[1]) < 1)
            if not proven:
                break  # out of time (or within the gap asked for): keep the best found so far
        value = solver.value(expr) * (1 + (model.slack if i == 0 else 0.0) * (-1 if sense == "max" else 1))
        model.fix(expr, math.floor(value) if sense == "max" else math.ceil(value), sense)
    if model.slack:  # the placement kept is within the slack of the first stage's optimum: report its own value
        first = (solver.value(stages[0][0]), first[1])
    return solver, proven, first


def _first_stage(model: PlacementModel, expr, sense: str, deadline: float):
    """The objective: the portfolio's best within `PROVE_DETERMINISTIC_S` (or the model's gap), searched again
    from it (to `FALLBACK_GAP`, within `FALLBACK_DETERMINISTIC_S`) when that is further than `FALLBACK_GAP` from
    its bound and the gap asked for is tighter; see [Note: solving to a gap]."""
    cp = model.cp
    solver, status = model.search(expr, sense, deadline - time.perf_counter(), model.budget)
    if status != cp.FEASIBLE or model.gap >= FALLBACK_GAP or deadline - time.perf_counter() <= 0 \
            or portfolio.relative_gap(solver) <= FALLBACK_GAP:
        return solver, status
    model.hint_from(solver)
    again = model.search(expr, sense, deadline - time.perf_counter(), FALLBACK_DETERMINISTIC_S,
                         relative_gap_limit=FALLBACK_GAP)
    return portfolio.best_of([(solver, status), again], sense)


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
#: The portfolio of searches each first stage runs: [Note: a deterministic portfolio] in
#: `compiler.place.portfolio`.
PROVE_DETERMINISTIC_S = 1.0
FALLBACK_GAP = 0.02
FALLBACK_DETERMINISTIC_S = 2.0


#: [Note: deterministic tie-breaks] Stages after the first only choose among
#: equally good placements (least power, fewest devices, option order). Each
#: runs single-threaded with a deterministic-time budget (CP-SAT's count of
#: work, not wall seconds), so the same inputs stop at the same incumbent on
#: any machine and the plan stays byte-identical even when a tie-break is
#: not proven optimal; the value it reached is fixed before the next stage.
TIE_BREAK_DETERMINISTIC_S = 0.5


def _stages(model: PlacementModel, objective: str, deadline: float) -> tuple[list[tuple], tuple | None]:
    """The lexicographic objectives: the user's first, then what makes its optimum cheapest; and the first
    stage already solved, where finding it solved it (Dinkelbach: `compiler.place.ratio`), else None."""
    if objective == "tokens-per-watt":
        return dinkelbach(model, deadline, model.power, model.watts, model.ratio_hint * RATE_SCALE)
    if objective == "tokens-per-dollar":
        return dinkelbach(model, deadline, model.cost, model.prices, model.ratio_hint)
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
        value = lam / RATE_SCALE / per if per else 0.0
        bound = max(value, first[1] / RATE_SCALE * (1.0 if objective == "tokens-per-watt" else COST_SCALE))
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
        requests_per_s=lam / RATE_SCALE, power_w=solver.value(model.draw) / DRAW_SCALE, provisioned_w=float(power),
        cost_per_hour=cost, wall_s=time.perf_counter() - start, variables=len(proto.variables), constraints=len(proto.constraints),
        options=tuple(model.opts))
