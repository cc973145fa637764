"""Exact placement as a mixed-integer linear program: how many replicas of which pools serve the most requests,
and which request class goes where.

Before: an `Instance` (`compiler.ir.placement`): costed `PoolOption`s with a
latency curve per request class, the classes' shares and SLOs, the inventory,
power budget, links between device types and each class's KV hand-off. After:
a `Solution`: replicas per option, the requests/s of each class on each option
and the KV flows between pools, the objective with its unit, bound and status,
and, when infeasible, the named constraint families that make it so
(`binding_families`; `compiler.place.infeasible` words them).

Variables (in the quantities' own units: requests/s, watts, dollars per hour; `candidates` chooses and
prunes the options placed):
- ``n[o]`` (integer): replicas of pool option o.
- ``x[c,o]`` (continuous): class c's requests/s served end to end by colocated option o.
- ``f[c,p,t]`` (continuous): class c's requests/s prefilled by option p whose KV goes to decode pools on
  device type t.
- ``y[c,d]`` (continuous): class c's requests/s decoded by decode (or decode-af) option d.
- ``lam`` (continuous): all requests/s served. With several services (`Instance.services`, `compiler.services`):
  ``lam[s]`` per service, and lam is their sum weighted by each service's weight (an expression).
- ``use[o]`` (binary, latency objective only): whether o has any replica.

Constraint families (`compiler.ir.placement.FAMILIES`; a solve may leave families out, which is how
`binding_families` finds the ones that make an instance infeasible):
- ``inventory[t]``: devices of type t used by all replicas <= inventory.
- ``power``: sum of replicas' provisioned power (their devices' rated power on the
  budget's footing, [Note: power basis]) <= budget. A budget provisions for peak
  draw; the predicted mean draw, linear in each option's load ([Note: drawn
  power]), is reported beside it.
- ``cost``: sum of replicas' price (dollars per device-hour x devices) <= the cost
  budget, when the instance has one (every device type then needs a price).
- ``utilisation[o]`` (always; left out where the ``slo`` row implies it): the load of o (each class's
  requests/s over o's capacity for that class) <= n[o]; a replica never runs past its capacity.
- ``slo``: ``utilisation[o] <= cap[o,c] x n[o]`` for every class c routed to o,
  where cap is the utilisation at which c's percentile latency meets its SLO
  (`Instance.cap`, from o's latency curve; see [Note: class caps]); a class no
  option serves within its SLO gets none; a KV flow p -> t carries class c
  only if t is one of p's KV targets for c (`Instance.kv_targets`: p's TTFT at
  its cap, the hand-off to t and the wait for a decode slot meet c's TTFT SLO).
- ``decode_balance[c,t]`` (always): what prefill options hand class c's KV to type t equals what decode
  options on t decode. Vendor islands (``Instance.cross_type_kv`` False) have no flow from p to a type other
  than p's own, and no flow goes from p to a type t that ``Instance.kv_pairs`` leaves out (``compile
  --deployable``).
- ``link[t1,t2]``: bytes per second from type t1 to t2 <= link bandwidth times the link's cap ([Note:
  hand-offs] in `cost_models.comm`): KV hand-offs (t1 == t2: over t1's own fabric), and the hidden states and
  draft tokens of options that span two types.
- ``demand``: lam >= the arrival rate (>= one request per 1000 s when maximising); and, always, each class
  is served exactly its share of lam. With services: ``demand[s]``, lam[s] >= the service's floor, and each
  class its share of its service's lam[s].

Objectives: ``throughput`` (max lam, then min power), ``power`` (min power
at the arrival rate), ``tokens-per-watt`` (max lam / power by Dinkelbach's
method, `compiler.place.ratio`), ``latency`` (min worst TPOT, at their caps, of the used options at the
arrival rate), ``cost`` (min dollars per hour at the arrival rate, then max lam),
``tokens-per-dollar`` (max lam / dollars per hour, Dinkelbach). The second stage of each chooses among the
first's optima ([Note: deterministic tie-breaks]).

[Note: why a MILP solver] Replica counts are integers and everything else (requests/s routed, bytes/s on
links) is continuous: a mixed-integer LP, which HiGHS (through OR-Tools' MathOpt) solves by branch and bound
on the LP relaxation. CP-SAT, the solver before it (docs/decisions.md), needed the flows scaled to integers
(milli-requests/s, a replica's load in 10^9 units): on the README's first compile it ran 33 s for a placement
0.49% below the optimum (calling itself within 0.73%), and on the 70B mix about 30 s to stop 2% short, while
HiGHS proves both optima in 0.2 s and 4 s (a test pins the optima against brute force; `tools/bench_compile.py`
times it). The integer scaling also cost small replicas up to 1.3% of their capacity, so greedy could beat the
"optimal" plan; with continuous flows nothing is rounded.

Fleet design ([Note: fleet design]) needs nothing of its own here: a device type
whose count the solver chooses arrives with the budget's bound as its inventory.
"""

from __future__ import annotations

import datetime
import logging
import math
import time
from typing import Sequence

from compiler.ir.errors import BadInput, Infeasible
from compiler.ir.placement import FAMILIES, OBJECTIVES, PRICED_OBJECTIVES, Instance, Objective, Solution
from compiler.place.candidates import PRUNE_TOLERANCE, candidates, candidates_within
from compiler.place.greedy import greedy
from compiler.place.moves import Moves, add_moves, kept
from compiler.place.native_output import solver_output_logged
from compiler.place.run import Run, solution_of
from compiler.place.ratio import dinkelbach

log = logging.getLogger(__name__)


RATIO_OBJECTIVES = ("tokens-per-watt", "tokens-per-dollar")

#: [Note: solver tolerances] HiGHS works in floating point: a placement it returns meets every constraint
#: within its feasibility tolerance (1e-7, absolute, on constraints scaled to O(1) here: requests/s over a
#: replica's rate, gigabytes/s on links), and a solve is ``optimal`` when its value is within `OPTIMAL_GAP`
#: (relative) of the bound it proved. Values that small are below every number the plan prints.
OPTIMAL_GAP = 1e-6
#: Caps are held a ten-millionth below their value, so a placement the solver returns within its tolerance still
#: runs every pool at or below the utilisation where its classes meet their SLOs.
CAP_MARGIN = 1 - 1e-7
#: The relative gap at which what-if solves stop (the sensitivity analysis, which moves efficiencies by 20%;
#: the report's frontier): the cost model's own uncertainty dwarfs 2%.
ANALYSIS_GAP = 0.02
#: [Note: a deterministic budget] Branch-and-bound nodes each stage of a solve may explore. A solve that stops
#: at this limit stops at the same incumbent on any machine (HiGHS is deterministic for the same model and
#: options), so the plan stays byte-identical; one stopped by the wall-clock limit (``--time-limit``) does not,
#: and says so (`Solution.status` ``feasible``, with its gap). Most example solves need a few hundred to 1,500
#: nodes; Llama-3.1-8B on the mixed fleet and mix workload (617 options, many one- and two-device replicas)
#: reaches the limit, after 45 s on two cores, 0.25% short of its bound.
NODE_LIMIT = 20_000
#: Nodes the tie-break stage may explore, and the relative gap at which it stops ([Note: deterministic
#: tie-breaks]): 0.1% of the power at the most requests/s is a few hundred watts of 200 kW.
TIE_BREAK_NODES = 2_000
TIE_BREAK_GAP = 1e-3
GB = 1e9  # link traffic is modelled in gigabytes/s, so that its rows are O(1) like the others


class PlacementModel:
    """The MILP of one instance, built once and re-solved with different objectives.

    One method per variable family and constraint family, named as in the module docstring.
    """

    def __init__(self, inst: Instance, families: Sequence[str] = FAMILIES):
        from ortools.math_opt.python import mathopt

        self.mo = mathopt
        self.gap = OPTIMAL_GAP  # relative gap at which the first stage may stop (`solve`'s `gap`)
        self.node_limit = NODE_LIMIT  # branch-and-bound nodes of the first stage ([Note: a deterministic budget])
        self.ratio_hint = 0.0  # a guess of a ratio objective's optimum, in its reported unit (`solve`)
        self.moved, self.slack = None, 0.0  # replicas moved from a running plan, and the slack for fewer (`solve`)
        self.start: dict = {}  # where the first stage starts: a hint of replica counts (`solve`)
        self.presolve = True  # False for a what-if ([Note: presolve off for what-ifs])
        self.inst = inst
        self.families = frozenset(families)
        self.m = mathopt.Model(name="placement")
        self.opts = inst.options
        self.inv = dict(inst.inventory)
        self.decode_types = sorted({o.kv_device for o in self.opts if o.receives_kv})
        self.caps = {(c.name, o.key): inst.cap(o, c) for o in self.opts for c in inst.classes if o.service(c.name)}
        self.slo_binds = "slo" in families
        #: (class, option) pairs that may carry traffic: within the class's SLO, or any when ``slo`` is left out
        self.open = {k for k, cap in self.caps.items() if cap > 0 or not self.slo_binds}
        self.decoders = {c.name: {o.kv_device for o in self.opts if o.receives_kv and (c.name, o.key) in self.open}
                         for c in inst.classes}
        self._kv_devices = {o.key: o.kv_device for o in self.opts}
        self._replicas()
        self._inventory()
        self._power()
        self._cost()
        self._class_flows()
        self._utilisation_and_slo()
        self._decode_balance()
        self._link()
        self._served_and_demand()
        self._tpot = None  # the latency objective's worst TPOT, built when asked for (`tpot_ms`)

    def binds(self, family: str) -> bool:
        return family in self.families

    def _replicas(self) -> None:
        """``n[o]``. Only the inventory bounds the domain: every other limit is a constraint."""
        self.n, self.ub = {}, {}
        for o in self.opts:
            self.ub[o.key] = ub = max(min((self.inv.get(d, 0) // k for d, k in o.devices), default=0), 0)
            self.n[o.key] = self.m.add_integer_variable(lb=0, ub=ub, name=f"n[{o.key}]")

    def _inventory(self) -> None:
        """``inventory[t]``: devices of type t used by all replicas <= inventory."""
        if not self.binds("inventory"):
            return
        for t in sorted(self.inv):
            used = [self.n[o.key] * o.uses(t) for o in self.opts if o.uses(t)]
            if used:
                self.m.add_linear_constraint(self.mo.fast_sum(used) <= self.inv[t], name=f"inventory[{t}]")

    def _power(self) -> None:
        """``power``: provisioned watts (rated power on the budget's footing) of all replicas <= budget."""
        self.watts = {o.key: o.provisioned_w for o in self.opts}  # per replica
        self.power = self.mo.fast_sum(self.n[o.key] * self.watts[o.key] for o in self.opts)
        if self.inst.power_budget_w is not None and self.binds("power"):
            self.m.add_linear_constraint(self.power <= self.inst.power_budget_w, name="power")

    @property
    def draw(self):
        """The predicted mean draw in watts ([Note: drawn power] in `cost_models.power`), linear: each option's
        idle draw x n[o], plus (full - idle) x its load (each class's requests/s over o's rate for it, the load
        `utilisation[o]` bounds by n[o])."""
        terms = [self.n[o.key] * o.idle_w for o in self.opts]
        for o in self.opts:
            for c in self.inst.classes:
                if (c.name, o.key) in self.open:
                    per_request_w = (o.power_w - o.idle_w) / o.service(c.name).rate_per_s
                    terms.append(self.flow(c.name, o.key) * per_request_w)
        return self.mo.fast_sum(terms)

    def _cost(self) -> None:
        """``cost``: dollars per hour of all replicas <= the cost budget. ``cost`` is None when some option's
        devices have no price (`solve` refuses a cost budget or objective then)."""
        prices = [self.inst.price_per_hour(o) for o in self.opts]
        self.cost = self.prices = None
        if all(p is not None for p in prices):
            self.prices = {o.key: p for o, p in zip(self.opts, prices)}  # per replica
            self.cost = self.mo.fast_sum(self.n[o.key] * self.prices[o.key] for o in self.opts)
        if self.inst.cost_budget_per_hour is not None and self.cost is not None and self.binds("cost"):
            self.m.add_linear_constraint(self.cost <= self.inst.cost_budget_per_hour, name="cost")

    def _class_flows(self) -> None:
        """``x[c,o]``, ``f[c,p,t]``, ``y[c,d]`` for the pairs that may carry traffic; a KV flow exists only where t
        is among p's KV targets for c (`Instance.kv_targets`: p's TTFT at its cap, the hand-off to t and the wait
        for a decode slot meet c's TTFT SLO), or anywhere KV may go when ``slo`` is left out."""
        self.x, self.f, self.y = {}, {}, {}
        self._flows: dict[tuple[str, str], list] = {}
        for c in self.inst.classes:
            for o in self.opts:
                if (c.name, o.key) not in self.open:
                    continue
                if o.kind == "colocated":
                    v = self.x[(c.name, o.key)] = self.m.add_variable(lb=0.0, name=f"x[{c.name},{o.key}]")
                    self._flows[(c.name, o.key)] = [v]
                elif o.receives_kv:
                    v = self.y[(c.name, o.key)] = self.m.add_variable(lb=0.0, name=f"y[{c.name},{o.key}]")
                    self._flows[(c.name, o.key)] = [v]
                else:
                    targets = self.inst.kv_targets(o, c)
                    flows = self._flows[(c.name, o.key)] = []
                    for t in self.decode_types:
                        if t not in self.decoders[c.name] or not self.inst.kv_may_go(o, t):
                            continue  # no decode option on t serves c; or islands, no connector, a copy for others
                        if t in targets or not self.slo_binds:
                            v = self.f[(c.name, o.key, t)] = self.m.add_variable(lb=0.0, name=f"f[{c.name},{o.key},{t}]")
                            flows.append(v)

    def flow(self, cls: str, key: str):
        """Class `cls`'s requests/s through option `key` (its prefill flows summed over decode types)."""
        return self.mo.fast_sum(self._flows.get((cls, key), ()))

    def _utilisation_and_slo(self) -> None:
        """``utilisation[o]`` <= n[o]; ``slo``: each class's load counted against the strictest cap of the classes
        o serves, sum <= n[o]. Where that cap is below 1 the ``slo`` row implies the ``utilisation`` row, which is
        then left out (HiGHS's presolve keeps a dominated row, and the six examples solved 1.38x faster without).

        [Note: class caps] With one cap per class, o may run at most at the cap of
        the strictest class it serves: every class on a replica waits in the same
        queue. So every replica is held to the strictest cap of its classes, and
        `candidates` adds, for every option whose classes' caps differ, one option
        per class (`split_by_class`: the same replica serving that class alone, at
        its own cap). The option itself stays beside them, mixing every class at
        the strictest cap: a fleet with room for one big replica (four wafers of
        70B on eight) serves every class on it, where per-class replicas would
        need three. Caps within 1% of each other are not split; their classes
        share the strictest cap.
        """
        for o in self.opts:
            served = [(c.name, o.service(c.name).rate_per_s) for c in self.inst.classes
                      if (c.name, o.key) in self.open]
            if not served:
                continue
            strictest = min(self.caps[(c, o.key)] for c, _rate in served) * CAP_MARGIN if self.slo_binds else 1.0
            if strictest >= 1.0:  # else the slo row below implies it: a row the solver need not carry
                load = self.mo.fast_sum(self.flow(c, o.key) * (1.0 / rate) for c, rate in served)
                self.m.add_linear_constraint(load <= self.n[o.key], name=f"utilisation[{o.key}]")
            if not self.slo_binds:
                continue
            capped = self.mo.fast_sum(self.flow(c, o.key) * (1.0 / (rate * strictest)) for c, rate in served)
            self.m.add_linear_constraint(capped <= self.n[o.key], name=f"slo[{o.key}]")

    def _decode_balance(self) -> None:
        """``decode_balance[c,t]``: KV handed to type t for class c == class c decoded on type t."""
        handed: dict[tuple[str, str], list] = {}
        decoded: dict[tuple[str, str], list] = {}
        for (c, _p, t), v in self.f.items():
            handed.setdefault((c, t), []).append(v)
        for (c, key), v in self.y.items():
            decoded.setdefault((c, self._kv_devices[key]), []).append(v)
        for c, t in sorted(set(handed) | set(decoded)):
            self.m.add_linear_constraint(
                self.mo.fast_sum(handed.get((c, t), ())) - self.mo.fast_sum(decoded.get((c, t), ())) == 0,
                name=f"decode_balance[{c},{t}]")

    def _link(self) -> None:
        """``link[t1,t2]``: gigabytes per second from type t1 to t2 <= the link's bandwidth times its cap ([Note:
        hand-offs] in `cost_models.comm`): the KV prefill options hand to decode pools on t2 (t1 == t2: over t1's
        own fabric), and half of what an option spanning two types moves between them, each way (attention/FFN
        hidden states, draft tokens: `PoolOption.link_bytes_per_token` per output token)."""
        if not self.binds("link"):
            return
        inst = self.inst
        kv_gb = {c.name: c.kv_bytes / GB for c in inst.classes}
        terms: dict[tuple[str, str], list] = {}
        for (c, p, t), v in self.f.items():
            terms.setdefault((self._kv_devices[p], t), []).append(v * kv_gb[c])
        for o in self.opts:
            if not o.link_bytes_per_token or len(o.device_types) != 2:
                continue
            a, b = o.device_types
            for c in inst.classes:
                if (c.name, o.key) in self.open:
                    gb = c.output_len * o.link_bytes_per_token / 2 / GB
                    for pair in ((a, b), (b, a)):
                        terms.setdefault(pair, []).append(self.flow(c.name, o.key) * gb)
        for (t1, t2), flows in sorted(terms.items()):
            bw = inst.link_bw(t1, t2) * inst.link_cap(t1, t2)
            if math.isfinite(bw):
                self.m.add_linear_constraint(self.mo.fast_sum(flows) <= bw / GB, name=f"link[{t1},{t2}]")

    def _served_and_demand(self) -> None:
        """Each class exactly its share of lam (traffic arrives in the workload's mix: a class served beyond its
        share would be capacity, not requests); ``demand``: lam >= the arrival rate.

        With several services (`Instance.services`), each has its own ``lam[s]``, its classes their shares of it,
        ``demand[s]``: lam[s] >= its floor, and lam is the weighted sum of the lam[s] ([Note: one placement of
        many services] in `compiler.services`)."""
        entries: dict[str, list] = {c.name: [] for c in self.inst.classes}
        for (c, _k), v in self.x.items():
            entries[c].append(v)
        for (c, _p, _t), v in self.f.items():
            entries[c].append(v)
        self.class_rate = {c: self.mo.fast_sum(vs) for c, vs in entries.items()}
        goals = self.inst.services
        if not goals:
            self.lam = self.m.add_variable(lb=0.0, name="lam")
            for c in self.inst.classes:
                self.m.add_linear_constraint(self.class_rate[c.name] - c.share * self.lam == 0, name=f"share[{c.name}]")
            if self.binds("demand"):
                self.m.add_linear_constraint(self.lam >= (self.inst.arrival_rate_per_s or 1e-3), name="demand")
            return
        self.service_rate = {}
        share = {c.name: c.share for c in self.inst.classes}
        for s in goals:
            lam = self.service_rate[s.name] = self.m.add_variable(lb=0.0, name=f"lam[{s.name}]")
            for c in s.classes:
                self.m.add_linear_constraint(self.class_rate[c] - share[c] * lam == 0, name=f"share[{c}]")
            if self.binds("demand"):
                self.m.add_linear_constraint(lam >= s.floor_per_s, name=f"demand[{s.name}]")
        self.lam = self.mo.fast_sum(s.weight * self.service_rate[s.name] for s in goals)

    @property
    def tpot_ms(self):
        """The worst TPOT (ms, at the caps) of the used options: ``use[o]`` binaries, built when first asked for
        (only the latency objective reads them)."""
        if self._tpot is None:
            self._tpot = tpot = self.m.add_variable(lb=0.0, name="worst_tpot_ms")
            for o in self.opts:
                if o.kind == "prefill":
                    continue
                worst = max((o.service(c.name).at(self.caps[(c.name, o.key)])[4] for c in self.inst.classes
                             if self.caps.get((c.name, o.key), 0.0) > 0), default=None)
                if worst is None:
                    continue
                use = self.m.add_binary_variable(name=f"use[{o.key}]")
                self.m.add_linear_constraint(self.n[o.key] <= self.ub[o.key] * use)
                self.m.add_linear_constraint(tpot >= worst * 1e3 * use)
        return self._tpot

    def _highs_options(self):
        """HiGHS's own options: no restarts ([Note: no restarts]); presolve off for a what-if ([Note: presolve off
        for what-ifs])."""
        from ortools.math_opt.solvers import highs_pb2

        options = highs_pb2.HighsOptionsProto()
        options.bool_options["mip_allow_restart"] = False
        if not self.presolve:
            options.string_options["presolve"] = "off"
        return options

    def solve(self, objective, sense: str, time_limit_s: float, *, gap: float = OPTIMAL_GAP,
              node_limit: int | None = NODE_LIMIT, hint: dict | None = None) -> Run:
        """Optimise `objective` (None: any feasible point) within `time_limit_s` wall seconds, `node_limit`
        branch-and-bound nodes and a relative `gap`, starting from `hint` (values of some variables: a
        placement the solver completes; the previous stage's, or another solve's replica counts)."""
        mo = self.mo
        if objective is None:
            self.m.minimize(0.0)
        elif sense == "max":
            self.m.maximize(objective)
        else:
            self.m.minimize(objective)
        params = mo.SolveParameters(relative_gap_tolerance=max(gap, OPTIMAL_GAP), random_seed=0,
                                    time_limit=datetime.timedelta(seconds=max(time_limit_s, 0.1)),
                                    node_limit=node_limit, highs=self._highs_options())
        hints = [mo.SolutionHint(variable_values={v: float(round(x)) if v.integer else max(x, 0.0) if abs(x) > 1e-12
                                                  else 0.0 for v, x in hint.items()})] if hint else []
        with solver_output_logged():  # HiGHS prints a debugging line on some solves (`compiler.place.native_output`)
            try:
                result = mo.solve(self.m, mo.SolverType.HIGHS, params=params,
                                  model_params=mo.ModelSolveParameters(solution_hints=hints))
            except Exception:  # noqa: BLE001 (HiGHS 1.12 rejects a few hints with "kError [INTERNAL]")
                if not hints:
                    raise
                log.info("HiGHS refused the start placement; solving without it")
                result = mo.solve(self.m, mo.SolverType.HIGHS, params=params)
        reason = result.termination.reason
        if result.termination.limit == mo.Limit.TIME:
            log.warning("the placement solve stopped at the wall-clock limit (%.1f s), not at its node budget: the "
                        "plan may differ on a faster or idler machine; raise --time-limit", time_limit_s)
        if reason in (mo.TerminationReason.INFEASIBLE, mo.TerminationReason.INFEASIBLE_OR_UNBOUNDED):
            return Run("infeasible", None, math.nan, math.nan, result.termination.detail)
        if not result.has_primal_feasible_solution():  # out of time or nodes before any placement
            return Run("none", None, math.nan, math.nan, result.termination.detail)
        bounds = result.termination.objective_bounds
        value = result.objective_value()
        proven = reason == mo.TerminationReason.OPTIMAL and gap <= OPTIMAL_GAP
        return Run("optimal" if proven else "feasible", result.variable_values(), value,
                   value if proven else bounds.dual_bound)

    def replica_hint(self, replicas: dict[str, int]) -> dict:
        """A hint of replica counts by option key (those this model has)."""
        return {self.n[key]: count for key, count in sorted(replicas.items()) if key in self.n}

    def fix(self, run: Run, expr, sense: str, slack: float = 0.0) -> None:
        """Keep an earlier objective's optimum (less `slack`, a fraction) while a later one breaks ties; a
        billionth is given back so that the placement found stays feasible to the solver."""
        value = run(expr)
        give = abs(value) * slack + 1e-9 * max(1.0, abs(value))
        self.m.add_linear_constraint(expr >= value - give if sense == "max" else expr <= value + give)


#: [Note: no restarts] HiGHS restarts a MIP's root when its reductions fix enough integer columns (about a fifth):
#: it presolves again and redoes the root, cuts and sub-MIP heuristics included. The placements fix many replica
#: counts at the root (options the budget cannot afford), so the README's first compile restarted three times in
#: each of its two stages. Without restarts, each placement measured (min of 3, one process, 2026-12-07) found the
#: same replicas, value and bound: 70B chat 2.11 -> 1.15 s, 70B mix 1.63 -> 1.39 s, 8B chat 0.68 -> 0.47 s, 405B
#: mix 2.80 -> 1.52 s, Mixtral chat 1.50 -> 0.94 s and mix 72.6 -> 69.0 s, 405B chat 0.08 s both ways.
#: [Note: presolve off for what-ifs] A what-if solve (`solve` from another solution's placement, `hint`, to
#: `ANALYSIS_GAP` or looser: the sensitivity moves) runs without HiGHS's presolve. Its reductions fix a few
#: replica counts after the root's cuts, so HiGHS restarts the root twice and throws the cuts away, and the
#: root's sub-MIP heuristics spend most of the LP iterations looking for the placement the hint already gave
#: (aws-trn2.compute_eff +20% on 405B: 13,940 iterations, 10,660 of them heuristics, 1.5 s; without presolve
#: 0.5 s). Measured on the mixed fleet and mix workload, every move solved one after another in one process:
#: 70B's 40 moves 23.2 -> 14.1 s and 405B's 34 30.6 -> 19.2 s, 35 and 29 of them at the same objective change
#: and pools (the others differ within the 2% both stop at). Other solves keep presolve: without it the
#: report's frontier (2%, no start) took 405B 4.6 -> 5.2 s, and 48 example placements to `OPTIMAL_GAP`
#: (three models, four fleets, four workloads, two objectives) 0.94x in all but up to 1.45x on some.


def solve(inst: Instance, objective: str = "throughput", *, time_limit_s: float = 60.0,
          families: Sequence[str] = FAMILIES, explain: bool = True,
          gap: float = OPTIMAL_GAP, ratio_hint: float = 0.0, node_limit: int | None = None,
          hint: Solution | None = None, moves: Moves | None = None, exact: bool = False) -> Solution:
    """Solve `inst`. An infeasible instance returns status "infeasible" with the binding families (found by
    re-solving with families dropped; `explain` False skips that and leaves them empty).

    The first stage is the objective; the stages after it make the solution unique ([Note: deterministic
    tie-breaks]). `gap` > `OPTIMAL_GAP` stops the first stage at that relative gap (status ``feasible``, bound
    reported): what a sweep of many points affords. `ratio_hint` starts a ratio objective (tokens per watt or
    per dollar) from a guess of its value, e.g. a neighbouring point's. `node_limit` is the first stage's
    branch-and-bound budget (`NODE_LIMIT`). `hint` starts the search from another solution's replica counts
    (those of options this instance has), e.g. the plan's own when an efficiency moves; without one it starts
    from the greedy placement (`compiler.place.greedy`). `moves` re-solves from a running placement
    (`compiler.place.moves`): at most its ``max_moves``, then the fewest moves within its ``slack`` of that
    optimum (linear objectives; a ratio objective takes no slack).

    Objectives that maximise requests/s (or per watt or dollar) prune near-twins at `PRUNE_TOLERANCE` ([Note:
    pruning tolerance]): the status is then that of the solve over the options kept, and the bound reported is
    the unpruned model's (`Objective.pruning` says by how much it was widened). `exact` prunes only what is
    dominated outright, as every other objective, a replan and an instance the tolerance leaves infeasible do.
    """
    if objective not in OBJECTIVES:
        raise BadInput(f"--objective {objective!r}: use one of {', '.join(OBJECTIVES)}")
    if objective in ("power", "latency", "cost") and inst.arrival_rate_per_s is None:
        raise BadInput(f"--objective {objective} needs a target: set arrival_rate_per_s in the workload file")
    _check_prices(inst, objective)
    start = time.perf_counter()
    args = dict(objective=objective, families=families, gap=gap, ratio_hint=ratio_hint, node_limit=node_limit,
                hint=hint, start=start, deadline=start + time_limit_s)
    if not exact and moves is None and objective in TOLERANT_OBJECTIVES and "slo" in families:
        near = _solve(inst, tolerance=PRUNE_TOLERANCE, **args)
        if near is not None:
            return near
    sol = _solve(inst, moves=moves, **args)
    if sol is None:
        binding = binding_families(inst, families) if explain else ()
        return Solution("infeasible", Objective(objective, 0.0, 0.0), binding=binding,
                        wall_s=time.perf_counter() - start)
    return sol


#: Objectives whose optimum scales with every flow, so that pruning within a tolerance bounds what it costs
#: ([Note: pruning tolerance]).
TOLERANT_OBJECTIVES = ("throughput", "tokens-per-watt", "tokens-per-dollar")


def _solve(inst: Instance, *, objective: str, families: Sequence[str], gap: float, ratio_hint: float,
           node_limit: int | None, hint: Solution | None, start: float, deadline: float,
           moves: Moves | None = None, tolerance: float = 0.0) -> Solution | None:
    """`solve` over the candidates pruned at `tolerance`; None if infeasible."""
    placed, factor = candidates_within(inst, prune_them="slo" in families and objective != "latency",
                                       tolerance=tolerance)
    if moves is not None:  # the running plan's options stay candidates, pruned or not ("stay put" is possible)
        placed += [o for o in kept(candidates(inst, prune_them=False), moves) if o.key not in {p.key for p in placed}]
    model = PlacementModel(inst.with_options(placed), families)
    model.moved = add_moves(model, moves) if moves is not None else None
    model.slack = moves.slack if moves is not None and objective not in RATIO_OBJECTIVES else 0.0
    model.gap, model.ratio_hint = gap, ratio_hint
    model.node_limit = NODE_LIMIT if node_limit is None else node_limit
    model.start = model.replica_hint(dict(hint.replicas) if hint is not None else greedy(inst, objective))
    model.presolve = hint is None or gap < ANALYSIS_GAP  # [Note: presolve off for what-ifs]
    outcome = _solve_model(model, objective, deadline)
    if outcome is None:
        return None
    return solution_of(model, *outcome, objective, start, factor - 1.0)


def feasible(inst: Instance, families: Sequence[str] = FAMILIES) -> bool:
    """Whether any placement of `inst` meets every constraint of `families`: one solve with no objective
    (``gimletc pareto`` bisects the fastest TPOT target with it)."""
    model = PlacementModel(inst.with_options(candidates(inst, prune_them="slo" in families)), families)
    run = model.solve(None, "min", FEASIBILITY_LIMIT_S)
    return run.values is not None


def binding_families(inst: Instance, families: Sequence[str]) -> tuple[str, ...]:
    """A minimal infeasible set of constraint families, by a deletion filter (`compiler.place.infeasible` words
    them): drop each family in turn and keep it dropped if the rest is still infeasible."""
    binding = [f for f in FAMILIES if f in families]
    for f in list(binding):
        rest = [x for x in binding if x != f]
        if not feasible(inst, rest):
            binding = rest
    return tuple(binding)


#: Wall seconds a feasibility solve may take; one that runs out counts as infeasible (none has come close).
FEASIBILITY_LIMIT_S = 30.0


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


def _solve_model(model: PlacementModel, objective: str, deadline: float):
    """Run the lexicographic stages; None if infeasible, else (the last stage's run, proven, the first stage's
    value and bound)."""
    stages, solved = _stages(model, objective, deadline)
    if model.moved is not None:  # the fewest moves right after the objective ([Note] in `compiler.place.moves`)
        # with a slack, the objective again at those moves: the best of the placements that move least, not the
        # cheapest of those within the slack
        stages = stages[:1] + [(model.moved, "min")] + (stages[:1] if model.slack else []) + stages[1:]
    proven, first, run = True, (0.0, 0.0), None
    for i, (expr, sense) in enumerate(stages):
        if i == 0 and solved is not None:
            stage = solved[0]
        else:
            stage = model.solve(expr, sense, deadline - time.perf_counter(),
                                gap=model.gap if i == 0 else max(model.gap, TIE_BREAK_GAP),
                                node_limit=model.node_limit if i == 0 else TIE_BREAK_NODES,
                                hint=model.start if i == 0 else run.values)
        if i > 0 and stage.values is None:
            break  # no better tie-break within its budget: keep the previous stage's placement
        if stage.status == "infeasible":
            return None
        if stage.values is None:
            raise Infeasible(f"the solver found no placement within its limits ({stage.detail}); raise --time-limit")
        run = stage
        if i == 0:
            first = solved[1] if solved is not None else (stage.value, stage.bound)
            proven = stage.status == "optimal"
            if not proven:
                break  # out of budget (or within the gap asked for): keep the best found so far
        model.fix(run, expr, sense, model.slack if i == 0 else 0.0)
    if model.slack:  # the placement kept is within the slack of the first stage's optimum: report its own value
        first = (run(stages[0][0]) if solved is None else first[0], first[1])
    return run, proven, first


#: [Note: deterministic tie-breaks] The stage after the first only chooses among
#: equally good placements (the least power of the most requests/s; the most
#: requests/s of the least power or dollars; the least power of the best TPOT).
#: It keeps the value the first reached (less the solver's tolerance), starts
#: from the first's placement, and stops within `TIE_BREAK_GAP` or its own node
#: budget, `TIE_BREAK_NODES`: the same inputs stop at the same placement on any
#: machine. HiGHS is deterministic, so the plan is byte-identical without
#: further stages (CP-SAT's parallel search was not, and needed fewest devices,
#: then option order, to make its optimum unique).


def _stages(model: PlacementModel, objective: str, deadline: float) -> tuple[list[tuple], tuple | None]:
    """The lexicographic objectives: the user's first, then what makes its optimum cheapest; and the first
    stage already solved (its run and its (value, bound) in the reported unit), where finding it solved it
    (Dinkelbach: `compiler.place.ratio`), else None."""
    if objective == "tokens-per-watt":
        return dinkelbach(model, deadline, model.power, model.watts, model.ratio_hint)
    if objective == "tokens-per-dollar":
        return dinkelbach(model, deadline, model.cost, model.prices, model.ratio_hint)
    return {
        "throughput": lambda: [(model.lam, "max"), (model.power, "min")],
        "power": lambda: [(model.power, "min"), (model.lam, "max")],
        "latency": lambda: [(model.tpot_ms, "min"), (model.power, "min")],
        "cost": lambda: [(model.cost, "min"), (model.lam, "max")],
    }[objective](), None
