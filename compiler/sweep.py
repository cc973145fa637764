"""The interactivity frontier (``gimletc pareto``, and the frontier of compile's report): a placement per TPOT
target, for the heterogeneous plan and every baseline, from one `compiler.driver.prepare`.

The sweep re-reads the costed options' latency curves at each target (`Instance.with_slo`) and solves them again;
`fastest_tpot` bisects for the tightest target any placement meets. Every point is a prediction.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Callable, Collection

from compiler.cost.prepared import Prepared
from compiler.driver import Progress, Timings, fleets_of, prepare
from compiler.ir.errors import BadInput, Infeasible
from compiler.ir.precision import Precision

if TYPE_CHECKING:
    from compiler.ir.placement import Instance

log = logging.getLogger(__name__)


def _quiet(message: str) -> None:
    """Progress where no terminal shows it: a log line (``gimletc -v`` prints them)."""
    log.info("%s", message)


#: Slowest TPOT target `pareto` sweeps: 200 ms is 5 tokens/s per user, slower than anyone reads.
MAX_TPOT_S = 0.2
#: Relative gap at which each point of the sweep stops: a frontier of many solves affords 0.5% (each row's
#: status says ``feasible`` when a point stopped short of its proof).
SWEEP_GAP = 0.005
#: What `pareto` may maximise along the sweep.
PARETO_OBJECTIVES = ("tokens-per-watt", "tokens-per-dollar", "throughput")


@dataclass(frozen=True)
class Frontier:
    """What `pareto` returns: one row per (TPOT target, curve) with a placement, and where each device type
    (and each baseline) drops out of the sweep."""

    title: str
    objective: str
    rows: list[dict]
    dropouts: list[dict]
    targets_ms: list[float]


def pareto(model: str, cluster_path: str, workload_path: str, *, power_budget_w: float | None = None,
           precision: Precision = Precision.of("bf16"), points: int = 8, time_limit_s: float = 60.0,
           progress: Progress | None = None, timings: Timings | None = None, objective: str = "tokens-per-watt",
           cost_budget_per_hour: float | None = None, calibration: str | None = None) -> Frontier:
    """The interactivity frontier: tokens/s per user against throughput per MW (and per dollar), for the
    heterogeneous plan and every baseline of [Note: baselines].

    The TPOT targets run log-spaced from relaxed (the slowest TPOT any pool shows, capped at `MAX_TPOT_S`) to
    the fastest at which a placement exists (`fastest_tpot`). Options and the single-type fleets are
    costed once; each point re-reads their latency curves against its target (`Instance.with_slo`) and solves
    `objective` for the plan and each baseline. A baseline infeasible at one target is infeasible at every
    tighter one, so it drops out of the sweep there (recorded in ``dropouts``, with each device type that
    leaves the heterogeneous plan). All points are predictions. Raises `Infeasible` when any heterogeneous
    point fails, naming each failing target and what binds there.
    """
    if objective not in PARETO_OBJECTIVES:
        raise BadInput(f"--objective {objective!r}: the frontier maximises one of {', '.join(PARETO_OBJECTIVES)}")
    timings = timings if timings is not None else Timings()
    prep = prepare(model, cluster_path, workload_path, power_budget_w=power_budget_w, precision=precision,
                   progress=progress, timings=timings, cost_budget_per_hour=cost_budget_per_hour,
                   calibration=calibration)
    return frontier(prep, points=points, time_limit_s=time_limit_s, progress=progress, timings=timings,
                    objective=objective)


def frontier(prep: Prepared, *, points: int = 8, time_limit_s: float = 60.0, progress: Progress | None = None,
             timings: Timings | None = None, objective: str = "tokens-per-watt", fleets: list | None = None,
             gap: float | None = None, curves: Collection[str] | None = None,
             node_limit: int | None = None) -> Frontier:
    """`pareto`'s sweep of a prepared compile (`compile`'s own, for its report): `fleets` are the single-type
    fleets when already costed (`Compilation.fleets`), `gap` the relative gap of each solve (`SWEEP_GAP`),
    `curves` the baselines to sweep beside the plan (None: all of them), `node_limit` each solve's branch-and-bound
    budget (`compiler.place.ilp.solve`)."""
    note = progress or _quiet
    timings = timings if timings is not None else Timings()
    lo = fastest_tpot(prep.instance)
    slowest = max((s.curve[0][4] for o in prep.options if o.kind != "prefill" for s in o.classes), default=0.0)
    if lo is None:
        raise Infeasible(f"no point of the frontier is feasible: no placement on {prep.cluster.name} serves every "
                         f"class of {prep.workload.name} within its TTFT target at any TPOT; "
                         + _no_frontier_reason(prep, MAX_TPOT_S, time_limit_s))
    hi = max(min(slowest, MAX_TPOT_S), lo)
    targets = [hi * (lo / hi) ** (i / max(points - 1, 1)) for i in range(points)]  # relaxed first
    targets[-1] = lo if points > 1 else targets[-1]  # exactly the fastest, not a rounding below it
    if fleets is None:
        with timings.step("baselines"):
            note("costing each device type alone within the budget (once for the whole sweep)")
            fleets = fleets_of(prep, names=curves)
    with timings.step("sweep"):
        rows, dropouts, failed = _sweep(prep, fleets, targets, objective, time_limit_s, note,
                                        SWEEP_GAP if gap is None else gap, curves, node_limit)
    title = f"{prep.graph.model} on {prep.cluster.name}, workload {prep.workload.name}"
    if len(failed) == len(targets):
        raise Infeasible(f"no point of the frontier is feasible ({len(targets)} TPOT targets, {lo * 1e3:.1f} to "
                         f"{hi * 1e3:.1f} ms); at the loosest: {failed[0][1]}")
    if failed:
        raise Infeasible(f"{len(failed)} of {len(targets)} points of the frontier failed, so no frontier is "
                         "written: " + "; ".join(f"TPOT {t * 1e3:.2f} ms: {why}" for t, why in failed))
    return Frontier(title, objective, rows, dropouts, [t * 1e3 for t in targets])


def fastest_tpot(inst: Instance) -> float | None:
    """The smallest TPOT target (among the TPOTs the pools show at their lightest load) at which a placement
    exists. Every class needs a route (a colocated pool, or a prefill pool whose KV reaches a decode pool in
    time, each within the class's targets; [Note: class caps]) and the routes must fit the budgets and the
    inventory together: the first is a quick check, the second a feasibility search (`ilp.feasible`), both
    monotone in the target, so each bisects. None when no target has a placement."""
    from compiler.place.ilp import feasible

    def routed(i: Instance) -> bool:
        """Every class has a colocated option or a prefill option with a KV target, within its SLO."""
        return all(any(o.kind in ("colocated", "prefill") and i.cap(o, c) > 0 for o in i.options
                       if o.service(c.name) is not None) for c in i.classes)

    candidates = sorted({s.curve[0][4] for o in inst.options if o.kind != "prefill" for s in o.classes
                         if s.curve[0][4] > 0})
    first = _first_true(candidates, lambda t: routed(inst.with_slo(tpot_s=t)))
    placed = _first_true(candidates[first:], lambda t: feasible(inst.with_slo(tpot_s=t)))
    return candidates[first + placed] if placed < len(candidates) - first else None


def _first_true(values: list[float], test: Callable[[float], bool]) -> int:
    """The index of the first value that passes `test` (false, then true: monotone), or len(values) if none."""
    lo, hi = 0, len(values)
    while lo < hi:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if test(values[mid]) else (mid + 1, hi)
    return lo


def _sweep(prep: Prepared, fleets: list, targets: list[float], objective: str, time_limit_s: float,
           note: Progress, gap: float, curves: Collection[str] | None = None, node_limit: int | None = None
           ) -> tuple[list[dict], list[dict], list[tuple[float, str]]]:
    """Rows per (target, curve) with a placement, the dropouts, and the failed heterogeneous targets."""
    from compiler.emit.emit_plan import class_latencies
    from compiler.ir.placement import Baseline
    from compiler.place.baselines import colocated_only, greedy_baseline, islands, solved
    from compiler.place.concurrently import concurrently
    from compiler.place.ilp import solve
    from compiler.place.infeasible import explain

    rows: list[dict] = []
    dropouts: list[dict] = []
    failed: list[tuple[float, str]] = []
    gone: dict[str, float] = {}  # baseline -> the target at which it dropped out
    hint: dict[str, float] = {}  # curve -> its objective at the previous target: where Dinkelbach starts
    before: set[str] | None = None
    for i, target in enumerate(targets):
        note(f"TPOT target {target * 1e3:.1f} ms ({i + 1}/{len(targets)})")
        base = prep.instance.with_slo(tpot_s=target)  # the options' latency curves are read against the new target
        posed = [(n, (lambda f=f: f.with_slo(tpot_s=target)) if not isinstance(f, str) else f) for n, f in fleets]
        posed += [("vendor-islands", lambda: islands(base)), ("no-disaggregation", lambda: colocated_only(base))]
        posed = [(n, f) for n, f in posed if n not in gone and (curves is None or n in curves)]

        def one(entry, base=base):
            name, fleet = entry
            if name == "heterogeneous":
                return solve(base, objective, time_limit_s=time_limit_s, gap=gap, node_limit=node_limit,
                             ratio_hint=hint.get("heterogeneous", 0.0))
            return (Baseline(name, "skipped", note=fleet) if isinstance(fleet, str) else
                    solved(name, fleet(), objective, time_limit_s, explain=False, gap=gap, node_limit=node_limit,
                           ratio_hint=hint.get(name, 0.0)))

        sol, *solved_baselines = concurrently(one, [("heterogeneous", None), *posed])
        if not sol.feasible:
            failed.append((target, explain(prep.graph.model, base, sol)))
            continue
        hint["heterogeneous"] = sol.objective.value
        worst = max((lat.tpot_p_s for lat in class_latencies(base, sol).values() if lat.tpot_p_s), default=target)
        used = set(sol.devices())
        rows.append(_row("heterogeneous", target, sol.output_tokens_per_s(base.classes), sol.provisioned_w,
                         sol.power_w, sol.cost_per_hour, sol.status, sol.devices(), worst))
        for t in sorted((before or set()) - used):
            dropouts.append({"device": t, "tpot_target_ms": target * 1e3, "where": f"plan:{t}", "posed": True,
                             "why": f"the plan no longer uses {t}"})
        before = used
        greedy = [greedy_baseline(base, objective)] if "greedy" not in gone and (curves is None or "greedy" in curves) \
            else []
        for b in solved_baselines + greedy:
            if b.objective is not None:
                hint[b.name] = b.objective.value
            if not b.feasible or not b.output_tokens_per_s:
                gone[b.name] = target
                if b.status != "skipped" or i == 0:
                    why = b.note if b.status == "skipped" or b.name == "greedy" else \
                        f"no placement meets TPOT {target * 1e3:.2f} ms within the budget"
                    dropouts.append({"device": b.name.split(":", 1)[1] if ":" in b.name else "", "where": b.name,
                                     "tpot_target_ms": target * 1e3, "why": why, "posed": b.status != "skipped"})
                continue
            rows.append(_row(b.name, target, b.output_tokens_per_s, b.provisioned_w, b.power_w, b.cost_per_hour,
                             b.status, dict(b.devices), None))
    return rows, dropouts, failed


def _row(curve: str, target: float, out_tps: float, provisioned_w: float, power_w: float, cost: float | None,
         status: str, devices: dict[str, int], worst: float | None) -> dict:
    return {"curve": curve, "tpot_target_ms": target * 1e3, "tokens_per_s_per_user": 1.0 / target,
            "worst_tpot_ms": None if worst is None else worst * 1e3, "output_tokens_per_s": out_tps,
            "provisioned_power_w": provisioned_w, "power_w": power_w,
            "output_tokens_per_s_per_mw": out_tps / (provisioned_w / 1e6) if provisioned_w else 0.0,
            "cost_per_hour": cost, "output_tokens_per_dollar": out_tps * 3600 / cost if cost else None,
            "status": status, "devices": " ".join(f"{d}:{n}" for d, n in sorted(devices.items())), "prediction": True}


def _no_frontier_reason(prep: Prepared, target: float, time_limit_s: float) -> str:
    """What binds the heterogeneous placement at `target`."""
    from compiler.place.ilp import solve
    from compiler.place.infeasible import explain

    instance = prep.instance.with_slo(tpot_s=target)
    return explain(prep.graph.model, instance, solve(instance, "throughput", time_limit_s=time_limit_s))
