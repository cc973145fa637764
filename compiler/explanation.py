"""Why each block went where: what ``gimletc explain DIR [BLOCK|POOL]`` prints and `Plan.explain` returns.

Reads the plan directory's ``plan.json`` and what it was compiled from (``report/inputs.json``, written by
compile; or given), re-costs the candidate pools through the driver (`compiler.driver.prepare`: the trace is
cached, so seconds) and, for each pool asked about:

- **candidates**: per device type (or attention+FFN pair) of the cluster, the best option of the pool's kind:
  the requests/s one replica serves of the pool's class mix within the classes' SLOs, its provisioned kW and
  requests/s per kW; the chosen option is marked (`candidates`);
- **binding constraints**: the budget, each device type's inventory, each class's SLO cap on the pool against
  the pool's utilisation, the KV links; a constraint binds when not even one more replica of the cheapest pool
  fits it (`bindings`);
- **what would change the choice**: the placement re-solved without the pool's kind on its device type (the
  objective and pools it would get instead), the runner-up's requests/s per kW against the chosen one's, and
  the assumed-efficiency moves of the plan's sensitivity analysis that add or drop this pool (`alternatives`).

For a block (``L3.attn``, ``decode/L3.attn``, ``embed``): the pools that run it, and its cost on each candidate
device: the roofline time of one step at the candidate's operating point (one mean prompt for prefill; the
candidate's batch over the mean decode context for decode), with what bounds it (`block_costs`).

Every number is a prediction of the cost model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from compiler.ir.errors import BadInput
from compiler.place.greedy import mix_rate

if TYPE_CHECKING:
    from compiler.compile_inputs import CompileInputs
    from compiler.driver import Prepared
    from compiler.plan.schema import Plan, Pool
    from compiler.ir.pool_option import PoolOption

#: Option kind of each pool role (`compiler.emit.emit_plan`).
KIND_OF_ROLE = {"colocated": "colocated", "prefill": "prefill", "decode": "decode", "decode-attention": "decode-af",
                "decode-ffn": "decode-af"}
#: A pool runs at its SLO cap when within this utilisation of it.
CAP_SLACK = 0.01
#: Seconds each "without this pool" re-solve may take (the best placement found by then is reported).
RESOLVE_LIMIT_S = 10.0


@dataclass(frozen=True)
class Candidate:
    """The best option of a pool's kind on one device type (or attention+FFN pair), for the pool's class mix."""

    devices: str
    option: str
    tp: int
    pp: int
    batch: int
    devices_per_replica: int
    requests_per_s: float  # one replica, for the pool's class mix, at its strictest class's cap (`mix_rate`)
    provisioned_w: float
    chosen: bool

    @property
    def requests_per_s_per_kw(self) -> float:
        return self.requests_per_s / (self.provisioned_w / 1e3) if self.provisioned_w else 0.0


@dataclass(frozen=True)
class Binding:
    family: str  # power, inventory, slo, link, demand
    detail: str
    binds: bool


@dataclass(frozen=True)
class BlockCost:
    devices: str
    option: str
    phase: str
    point: str
    shards: int
    time_s: float
    compute_s: float
    memory_s: float
    bound: str
    chosen: bool


@dataclass(frozen=True)
class PoolWhy:
    pool: str
    role: str
    device: str
    shape: str
    classes: list[str]
    utilisation: float
    candidates: list[Candidate]
    bindings: list[Binding]
    alternatives: list[str]
    block_costs: list[BlockCost] = field(default_factory=list)


@dataclass(frozen=True)
class Explanation:
    plan: str  # one line: model, cluster, workload, objective
    target: str | None
    pools: list[PoolWhy]
    bindings: list[Binding]  # the plan-wide constraints
    notes: list[str]


def explain(path: str | Path, target: str | None = None, *, inputs: CompileInputs | None = None,
            resolve: bool = True) -> Explanation:
    """Explain the plan in `path` (all pools, or one pool or block: `target`). `inputs` default to the plan's
    ``report/inputs.json``; `resolve` False skips the re-solves behind "what would change the choice"."""
    from compiler.compile_inputs import CompileInputs
    from compiler.plan.checks import load_plan

    plan = load_plan(path)
    inputs = inputs or CompileInputs.load(path)
    if inputs is None:
        raise BadInput(f"plan {path}: no report/inputs.json to re-cost it from (compiled with --no-report?); "
                       "pass --cluster and --workload (and the compile's flags)")
    prep = _prepare(inputs)
    pools, block = _targets(plan, target)
    notes = _drift(plan, prep)
    bindings = plan_bindings(plan, prep)
    out, resolved = [], {}
    for pool in pools:
        why = pool_why(plan, prep, pool, bindings, inputs if resolve else None, resolved)
        if block is not None:
            why = PoolWhy(**{**why.__dict__, "block_costs": block_costs(plan, prep, pool, block, why.candidates)})
        out.append(why)
    header = (f"{plan.model} on {plan.cluster} for {plan.workload}: objective {plan.solver.objective} = "
              f"{plan.solver.objective_value:.4g} ({plan.solver.status}); all numbers are predictions")
    return Explanation(header, target, out, bindings, notes)


def _prepare(inputs: CompileInputs) -> Prepared:
    from compiler.compile_inputs import repeat_warnings_muted
    from compiler.driver import prepare

    with repeat_warnings_muted():
        return prepare(inputs.model, inputs.cluster, inputs.workload, slo_ttft_ms=inputs.slo_ttft_ms,
                       slo_tpot_ms=inputs.slo_tpot_ms, precision=inputs.precision(), deployable=inputs.deployable,
                       **inputs.overrides())


def _targets(plan: Plan, target: str | None) -> tuple[list[Pool], str | None]:
    """The pools to explain and the block asked about (``phase/name`` or a bare name), if any."""
    if target is None:
        return list(plan.pools), None
    by_name = {p.name: p for p in plan.pools}
    if target in by_name:
        return [by_name[target]], None
    phase, _, name = target.rpartition("/")
    runs = [p for p in plan.pools if any(b == target or (not phase and b.split("/", 1)[-1] == name)
                                         for s in p.stages for b in s.blocks)]
    if not runs:
        blocks = sorted({b.split("/", 1)[-1] for p in plan.pools for s in p.stages for b in s.blocks})
        raise BadInput(f"explain {target!r}: no pool or block of that name; pools: "
                       f"{', '.join(by_name)}; blocks: {', '.join(blocks[:6])}{' ...' if len(blocks) > 6 else ''}")
    return runs, target


def _drift(plan: Plan, prep: Prepared) -> list[str]:
    keys = {o.key for o in prep.options}
    missing = sorted({p.option.split("|")[0] for p in plan.pools} - keys)
    if missing:
        return [f"the inputs cost differently now: {', '.join(missing)} is no longer a candidate (recompile to "
                "explain today's plan); the candidates below are today's"]
    return []


def _option(prep: Prepared, pool: Pool) -> PoolOption | None:
    key = pool.option.split("|")[0]
    return next((o for o in prep.options if o.key == key), None)


def candidates(plan: Plan, prep: Prepared, pool: Pool) -> list[Candidate]:
    """Per device type (pair), the option of the pool's kind serving its class mix with the most req/s per kW."""
    chosen = _option(prep, pool)
    kind = KIND_OF_ROLE.get(pool.role, pool.role)
    served = {c.name: c.requests_per_s for c in pool.predicted_classes}
    total = sum(served.values())
    mix = {c: r / total for c, r in served.items()} if total else {c.name: c.share for c in plan.classes}
    best: dict[str, tuple[float, PoolOption, float]] = {}
    for o in prep.options:
        if o.kind != kind:
            continue
        rate = mix_rate(prep.instance, o, mix)
        if rate <= 0:
            continue
        devices = "+".join(o.device_types)
        score = rate / o.provisioned_w
        if devices not in best or (score, o.key == getattr(chosen, "key", None)) > (best[devices][0], False):
            best[devices] = (score, o, rate)
    if chosen is not None:  # the chosen option always shows, even where another on its devices scores higher
        best["+".join(chosen.device_types)] = (0.0, chosen, mix_rate(prep.instance, chosen, mix))
    out = [Candidate("+".join(o.device_types), o.key, o.tp, o.pp, o.batch, o.devices_per_replica, rate,
                     o.provisioned_w, chosen is not None and o.key == chosen.key) for _s, o, rate in best.values()]
    return sorted(out, key=lambda c: (-c.requests_per_s_per_kw, c.devices))


def plan_bindings(plan: Plan, prep: Prepared) -> list[Binding]:
    """The plan-wide constraints and whether each binds (no room for one more replica of the cheapest pool)."""
    inst, out = prep.instance, []
    if plan.power_budget_w is not None:
        room = plan.power_budget_w - plan.predicted.provisioned_power_w
        least = min((o.provisioned_w for o in prep.options), default=math.inf)
        out.append(Binding("power", f"{plan.predicted.provisioned_power_w / 1e3:.1f} of "
                                    f"{plan.power_budget_w / 1e3:.1f} kW provisioned; the cheapest pool needs "
                                    f"{least / 1e3:.1f} kW", room < least))
    used: dict[str, int] = {}
    for p in plan.pools:
        used[p.device] = used.get(p.device, 0) + p.replicas * p.devices_per_replica
    for dev, n in sorted(plan.inventory.items()):
        smallest = min((k for o in prep.options for d, k in o.devices if d == dev), default=None)
        if smallest is None:
            continue
        out.append(Binding("inventory", f"{dev}: {used.get(dev, 0)} of {n} used", n - used.get(dev, 0) < smallest))
    kv: dict[tuple[str, str], float] = {}
    dev_of = {p.name: p.device for p in plan.pools}
    for t in plan.transfers:
        a, b = dev_of.get(t.src_pool), dev_of.get(t.dst_pool)
        if t.kind == "kv" and a and b:
            kv[(a, b)] = kv.get((a, b), 0.0) + t.predicted_bytes_per_s
    for (a, b), rate in sorted(kv.items()):
        bw, cap = inst.link_bw(a, b), inst.link_cap(a, b)
        if math.isfinite(bw):
            where = "its own fabric" if a == b else f"{a} -> {b}"
            out.append(Binding("link", f"{where}: {rate / 1e9:.2f} GB/s of KV, of {bw * cap / 1e9:.1f} GB/s it may "
                                       f"carry ({cap:.0%} of {bw / 1e9:.1f} GB/s, where a transfer's wait equals "
                                       "the transfer)", rate >= 0.99 * bw * cap))
    if inst.arrival_rate_per_s is not None:
        out.append(Binding("demand", f"serves the arrival rate, {inst.arrival_rate_per_s:g} req/s", True))
    return out


def _slo_bindings(prep: Prepared, pool: Pool) -> list[Binding]:
    o = _option(prep, pool)
    out = []
    for c in pool.predicted_classes:
        cls = next((k for k in prep.instance.classes if k.name == c.name), None)
        if o is None or cls is None or o.service(c.name) is None:
            continue
        cap = prep.instance.cap(o, cls)
        out.append(Binding("slo", f"class {c.name}: {pool.name} runs at {pool.predicted_utilisation:.1%}, the "
                                  f"highest utilisation at which {c.name} meets its SLO here is {cap:.1%}",
                           pool.predicted_utilisation >= cap - CAP_SLACK))
    return out


def pool_why(plan: Plan, prep: Prepared, pool: Pool, bindings: list[Binding], inputs: CompileInputs | None,
             resolved: dict[tuple, str] | None = None) -> PoolWhy:
    """One pool's candidates, constraints and alternatives; `resolved` memoises re-solves across pools that share
    a kind and device types (the two halves of a decode-af option, two shapes on one device type)."""
    cands = candidates(plan, prep, pool)
    own = [b for b in bindings if b.family != "inventory" or b.detail.startswith(f"{pool.device}:")]
    used_up = {b.detail.split(":")[0] for b in bindings if b.family == "inventory" and b.binds}
    alternatives = _runner_up(cands, used_up) + _sensitivity(plan, prep, pool)
    o = _option(prep, pool)
    if inputs is not None and o is not None:
        memo = resolved if resolved is not None else {}
        key = (o.kind, o.device_types)
        if key not in memo:
            memo[key] = _without(plan, prep, o, min(inputs.time_limit_s, RESOLVE_LIMIT_S))
        alternatives.insert(0, memo[key])
    shape = f"{pool.replicas} x {pool.devices_per_replica} devices, tp{pool.tp} pp{pool.pp}, batch {pool.batch}"
    return PoolWhy(pool.name, pool.role, pool.device, shape, [c.name for c in pool.predicted_classes],
                   pool.predicted_utilisation, cands, own + _slo_bindings(prep, pool), alternatives)


def _runner_up(cands: list[Candidate], used_up: set[str]) -> list[str]:
    """How the best other device type compares per kW; when it is better, why the plan still uses this one."""
    chosen = next((c for c in cands if c.chosen), None)
    others = [c for c in cands if not c.chosen]
    if chosen is None or not others or not chosen.requests_per_s_per_kw:
        return []
    best = others[0]
    ratio = best.requests_per_s_per_kw / chosen.requests_per_s_per_kw
    if ratio >= 1:
        why = (f"every {best.devices} is in use (its inventory binds)" if set(best.devices.split("+")) & used_up
               else "a budget, inventory or SLO elsewhere in the plan makes this pool worth it")
        return [f"{best.devices} serves {ratio:.2f}x the requests per kW of {chosen.devices} for this role "
                f"({best.option}), but {why}"]
    return [f"{best.devices}, the runner-up, serves {ratio:.2f}x the requests per kW of {chosen.devices} for this "
            f"role; it would need {1 / ratio - 1:.0%} more (e.g. that much higher efficiency on the resource bounding "
            "it) to match where power binds"]


def _sensitivity(plan: Plan, prep: Prepared, pool: Pool) -> list[str]:
    o = _option(prep, pool)
    if o is None:
        return []
    shape = f"{o.kind}:{'+'.join(o.device_types)}:tp{o.tp}:pp{o.pp}"
    out = []
    for m in plan.sensitivity:
        if shape in m.pools_removed:
            out.append(f"assumed {m.factor} {m.change:+.0%} drops this pool (objective {m.objective_change:+.1%})")
        elif m.pools_added and any(shape.split(":")[0] == a.split(":")[0] for a in m.pools_added):
            out.append(f"assumed {m.factor} {m.change:+.0%} adds {', '.join(m.pools_added)} beside it")
    return out


def _without(plan: Plan, prep: Prepared, o: PoolOption, time_limit_s: float) -> str:
    """Re-solve with `o`'s kind barred from its device type(s): what the objective and the pools become."""
    from compiler.place.ilp import solve

    what = f"without {o.kind} pools on {'+'.join(o.device_types)}"
    kept = [x for x in prep.options if not (x.kind == o.kind and x.device_types == o.device_types)]
    if not kept:
        return f"{what} nothing is left to place"
    sol = solve(prep.instance.with_options(kept), plan.solver.objective, time_limit_s=time_limit_s)
    if not sol.feasible:
        return f"{what}: no placement meets the constraints ({', '.join(sol.binding) or 'infeasible'} bind)"
    before = plan.solver.objective_value
    change = f" ({sol.objective.value / before - 1:+.1%})" if before else ""
    proven = "" if sol.status == "optimal" else f", the best found in {time_limit_s:g} s"
    devices: dict[str, dict[str, int]] = {}
    for x, n in sol.used():
        for d, k in x.devices:
            devices.setdefault(x.kind, {})[d] = devices.get(x.kind, {}).get(d, 0) + n * k
    pools = "; ".join(f"{kind}: " + ", ".join(f"{k} {d}" for d, k in sorted(by.items()))
                      for kind, by in sorted(devices.items()))
    return (f"{what}: objective {plan.solver.objective} {before:.4g} -> {sol.objective.value:.4g}{change}{proven} "
            f"({pools})")


def block_costs(plan: Plan, prep: Prepared, pool: Pool, block: str, cands: list[Candidate]) -> list[BlockCost]:
    """`block`'s step time on each candidate of `pool` (its blocks of each phase the pool runs)."""
    from compiler.cost.deployment import deployment
    from cost_models.roofline import block_time
    from cost_models.serving import memory_plan

    phase_asked, _, name = block.rpartition("/")
    out = []
    for phase in pool.phases:
        if phase_asked and phase != phase_asked:
            continue
        try:
            b = prep.graph.block(name, phase)
        except KeyError:
            continue
        for c in cands:
            o = next(x for x in prep.options if x.key == c.option)
            if o.kind == "decode-af":  # attention on the first device type, the rest on the second
                (dev, shards), pp = (o.devices[0] if b.role == "attn" else o.devices[-1]), 1
            else:
                dev, shards, pp = o.devices[0][0], o.tp, o.pp
            dep = deployment(prep.cluster.served(dev), shards * pp, shards, pp, prep.precision)
            point = ({"B": 1.0, "S": float(round(plan.mean_input_len))} if phase == "prefill" else
                     {"B": float(o.batch), "L": float(round(plan.mean_input_len + plan.mean_output_len / 2))})
            kv = prep.graph.kv_bytes_per_sequence(point.get("L", point.get("S")), prep.precision) * point["B"]
            mem = memory_plan(prep.graph, dep, kv / dep.group)
            t = block_time(b, point, dep.device, precision=dep.precision, derate=dep.derate, shards=dep.tp,
                           tiers=mem.weight_tiers, kv_tiers=mem.kv_tiers)
            out.append(BlockCost(dev, c.option, phase, " ".join(f"{k}={v:g}" for k, v in point.items()), dep.tp,
                                 t.time_s, t.compute_s, t.memory_s, t.bound, c.chosen))
    return out


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return [line(headers), *(line(r) for r in rows)]


def render_text(e: Explanation) -> str:
    """The explanation as plain text (what ``gimletc explain`` prints)."""
    lines = [e.plan, *(f"note: {n}" for n in e.notes)]
    lines += ["", "plan-wide constraints:"] + [f"  {'BINDS' if b.binds else 'slack'}  {b.family}: {b.detail}"
                                                for b in e.bindings]
    for p in e.pools:
        lines += ["", f"{p.pool} ({p.role} on {p.device}: {p.shape}) serves {', '.join(p.classes) or 'no class'} at "
                      f"{p.utilisation:.0%} utilisation",
                  "  candidates (best option of this kind per device type, for this pool's class mix):"]
        rows = [[("* " if c.chosen else "  ") + c.devices, f"tp{c.tp} pp{c.pp} b{c.batch}", str(c.devices_per_replica),
                 f"{c.requests_per_s:.3g}", f"{c.provisioned_w / 1e3:.2f}", f"{c.requests_per_s_per_kw:.3g}"]
                for c in p.candidates]
        lines += ["    " + r for r in _table(["device", "shape", "devices", "req/s per replica", "kW per replica",
                                              "req/s per kW"], rows)]
        if p.block_costs:
            lines.append("  the block's step on each candidate (roofline, per device):")
            rows = [[("* " if b.chosen else "  ") + b.devices, b.phase, b.point, str(b.shards),
                     f"{b.time_s * 1e6:.3g}", f"{b.compute_s * 1e6:.3g}", f"{b.memory_s * 1e6:.3g}", b.bound]
                    for b in p.block_costs]
            lines += ["    " + r for r in _table(["device", "phase", "point", "tp", "step us", "compute us",
                                                  "memory us", "bound"], rows)]
        lines.append("  constraints:")
        lines += [f"    {'BINDS' if b.binds else 'slack'}  {b.family}: {b.detail}" for b in p.bindings]
        if p.alternatives:
            lines.append("  what would change it:")
            lines += [f"    - {a}" for a in p.alternatives]
    return "\n".join(lines) + "\n"
