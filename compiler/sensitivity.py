"""The plan's sensitivity to what the cost model assumes: each uncertain factor moved +-20%, re-costed, re-solved.

Before: a `Prepared` compile and its placement. After: a `Sensitivity` per (factor, direction), in a fixed
order; the plan lists them and the summary names those that change the chosen pools.

The moves are many (43 on the 70B mix of the mixed fleet) and each one re-costs a device type's options. Most are
then answered from bounds ([Note: what-if bounds] in `compiler.place.what_if`): a move that makes no option better
from the plan's own pools re-solved alone (a small MILP) against the plan's proven bound; the moves of device types
the plan does not use all at once, from one solve of their options side by side against the plan's value. The rest
build and solve the whole MILP again (`resolved`), from the small MILP's placement ([Note: what-if starts]): 20 of
the 43 on the 70B mix, each answer within `ANALYSIS_GAP` of the moved optimum either way (`tools/bench_sensitivity.py`
compares the two ways and, with ``--exact``, proven optima).

[Note: a forked analysis] Costing and solving run mostly in Python, which holds the GIL: threads share one core.
`Analysis` therefore forks a child process before the first placement solve, while the process runs one thread (a
fork copies no other thread, nor the locks it may hold, and HiGHS has not yet started its own). The baselines do
not depend on the plan, so the child solves them first, on the other core while this process solves the placement
(to the proof: `compiler.driver` solves them again here in the rare case that the plan stops short of its proof,
[Note: baselines]). Once the placement is known the child gets the plan (value, bound, replicas, pools, device
types used: JSON over a pipe, no pickle), and both processes take the moves, as `tasks` (one move, or the moves of
unused types together), one at a time from a shared counter while this process also writes plan.json: whichever is
free takes the next, so neither waits on a share that turned out slow (the child's baselines, one hard re-solve).
On the 70B mix the child's baselines take about 9 s, one after another (40 s while the vendor islands were
proven: [Note: today's baselines within the analysis gap] in `compiler.place.baselines`), and this process takes
the moves meanwhile. The child's baselines and `Sensitivity` rows come back as JSON. Every solve is deterministic on its own, so the rows are the same whichever
process solved them. A child that cannot start, dies or stays silent past its deadline costs only time: its
baselines and moves are then solved here. ``compile --no-sensitivity`` forks the child all the same, for the
baselines alone (`Analysis` with ``analyse`` False: no moves).
"""

from __future__ import annotations

import json
import logging
import math
import multiprocessing
import os
import sys
import threading
import time
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Callable, Sequence

from compiler.ir.placement import Sensitivity

if TYPE_CHECKING:
    from compiler.cost.prepared import Prepared
    from compiler.ir.placement import Baseline, Solution

log = logging.getLogger(__name__)

#: How far each uncertain factor moves, both ways.
SENSITIVITY_CHANGE = 0.2
#: Objectives that a move making no option better cannot improve ([Note: what-if bounds] in
#: `compiler.place.what_if`): every one but latency, which reads the TPOT at an option's cap.
MONOTONE_OBJECTIVES = ("throughput", "power", "tokens-per-watt", "cost", "tokens-per-dollar")
#: The relative gap at which the MILP of the plan's own pools under a move stops (`solve_restricted`): its value
#: is a placement the bound is held against, and a hundredth of a percent is below what the bound can tell.
RESTRICTED_GAP = 1e-4
SENSITIVITY_FIELDS = ("compute_eff", "mem_eff")
#: Seconds to wait for the child beyond the time this process took for its own share, at least.
CHILD_GRACE_S = 60.0


@dataclass(frozen=True)
class BaselineRequest:
    """What the child needs to solve the baselines before the plan is known ([Note: a forked analysis])."""

    time_limit_s: float
    exact: bool
    fleets: Callable[[Prepared], list]  # the iso-power and iso-cost fleets to solve (`compiler.driver.fleets_of`)


def baseline_of(fields: dict) -> Baseline:
    """A `Baseline` from its fields as JSON (`dataclasses.asdict`)."""
    from compiler.ir.placement import Baseline, Objective

    objective = Objective(**fields["objective"]) if fields["objective"] is not None else None
    return Baseline(**{**fields, "objective": objective, "devices": tuple(tuple(d) for d in fields["devices"]),
                       "paths": tuple((rate, tuple(ids)) for rate, ids in fields.get("paths", ()))})


@dataclass(frozen=True)
class PlanPoint:
    """What a move is compared with: the plan's objective value, replicas (the re-solves' start), chosen pool
    shapes, device types used, and the bound its solve proved (in the value's unit, widened for pruning)."""

    value: float
    replicas: tuple[tuple[str, int], ...]
    shapes: frozenset[str]
    used: frozenset[str]
    bound: float

    @staticmethod
    def of(sol: Solution) -> PlanPoint:
        return PlanPoint(sol.objective.value, sol.replicas, frozenset(pool_shapes(sol)),
                         frozenset(d for o, _n in sol.used() for d in o.device_types), sol.objective.bound)

    def to_json(self) -> dict:
        return {"value": self.value, "replicas": [list(r) for r in self.replicas], "shapes": sorted(self.shapes),
                "used": sorted(self.used), "bound": self.bound}

    @staticmethod
    def from_json(d: dict) -> PlanPoint:
        return PlanPoint(float(d["value"]), tuple((str(k), int(n)) for k, n in d["replicas"]),
                         frozenset(d["shapes"]), frozenset(d["used"]), float(d["bound"]))

    def start(self, objective: str) -> Solution:
        """The plan's placement as a solve's start (`compiler.place.ilp.solve`'s ``hint``)."""
        from compiler.ir.placement import Objective, Solution

        return Solution("optimal", Objective(objective, self.value, self.value), replicas=self.replicas)


@dataclass(frozen=True)
class Move:
    """One factor moved one way: ``<device>.<field>`` (an efficiency or overhead of one device id) or
    ``<family>.node_w`` (the assumed host share of a family's node power, on `devices`)."""

    label: str
    change: float
    devices: frozenset[str]

    @property
    def name(self) -> str:
        return self.label.rsplit(".", 1)[1]


def moves(prep: Prepared) -> list[Move]:
    """Each factor of a device that fewer than two of its own measurements pin down (`Derate.assumed`, counted
    per device id), and each factor at a bound of its fit (`Derate.uncertain`), +-`SENSITIVITY_CHANGE`; and each
    family's assumed node power (``node_w_label`` assumed) where the power budget counts it."""
    from backends.registry import device
    from cost_models.derates import HYPOTHESES, derate_for

    offered = [dev_id for dev_id in prep.cluster.inventory() if any(dev_id in o.device_types for o in prep.options)]
    uncertain = {dev_id: derate_for(device(dev_id).family, device_id=dev_id).uncertain(SENSITIVITY_FIELDS)
                 for dev_id in sorted(offered)}
    out = [Move(f"{dev_id}.{name}", sign * SENSITIVITY_CHANGE, frozenset({dev_id}))
           for dev_id, names in uncertain.items() for name in names for sign in (1, -1)]
    # another reading of a family's measurements: one move to the derate that reading gives
    out += [Move(f"{dev_id}.{h.name}", 0.0, frozenset({dev_id})) for dev_id in sorted(offered)
            for h in HYPOTHESES if h.family == device(dev_id).family]
    # Node powers matter only where a budget counts them: an assumed one moves like an assumed efficiency.
    if prep.cluster.power_basis != "chip" and prep.instance.power_budget_w is not None:
        powered: dict[str, set[str]] = {}
        for dev_id in offered:
            spec = device(dev_id)
            if spec.node_w_label == "assumed":
                powered.setdefault(spec.family, set()).add(dev_id)
        out += [Move(f"{family}.node_w", sign * SENSITIVITY_CHANGE, frozenset(devices))
                for family, devices in sorted(powered.items()) for sign in (1, -1)]
    return out


def evaluate(prep: Prepared, point: PlanPoint, objective: str, move: Move,
             progress: Callable[[str], None] | None = None, *, bounds: bool = True) -> Sensitivity:
    """`move` applied: its device's options costed again (or their node power moved) and the moved optimum
    answered within `ANALYSIS_GAP`: from bounds where they meet ([Note: what-if bounds] in
    `compiler.place.what_if`), else by the placement solved from the plan's (`resolved`). Pools are reported as
    changed only where the objective moves by more than that gap (within it, other pools are ties the solver's
    tolerance cannot tell from the plan's). `bounds` False: every move solved so, as before the bounds (the
    benchmark's baseline, `tools/bench_sensitivity.py`)."""
    if skipped(point, objective, move, bounds=bounds):
        return Sensitivity(move.label, move.change, 0.0)  # [Note: moves that cannot change the plan]
    if progress is not None:
        progress(f"sensitivity: {move.label} {move.change:+.0%}")
    options = options_at(prep, move)
    if unchanged(prep, options):  # the factor reaches no option (fp8 in a bf16 plan)
        return Sensitivity(move.label, move.change, 0.0)
    return answered(prep, point, objective, move, options) if bounds else \
        resolved(prep, point, objective, move, options)


def skipped(point: PlanPoint, objective: str, move: Move, *, bounds: bool = True) -> bool:
    """Whether `move` only makes device types the plan does not use worse ([Note: moves that cannot change the
    plan]); with `bounds`, only for the objectives that cannot gain from that (`MONOTONE_OBJECTIVES`)."""
    return not move.devices & point.used and worsens(move.name, move.change) and \
        (not bounds or objective in MONOTONE_OBJECTIVES)


def unchanged(prep: Prepared, options: list) -> bool:
    """Whether `options` (a move's) are the compile's own."""
    return sorted(options, key=lambda o: o.key) == sorted(prep.options, key=lambda o: o.key)


def answered(prep: Prepared, point: PlanPoint, objective: str, move: Move, options: list) -> Sensitivity:
    """`move`, whose options are `options`, answered from bounds where they meet ([Note: what-if bounds]): the
    plan's pools re-solved on their own (`solve_restricted`), against the plan's proven bound where no option got
    better; else `resolved`, from that placement."""
    from compiler.place.what_if import no_better_options

    restricted = solve_restricted(prep, point, objective, options)
    if restricted.feasible and objective in MONOTONE_OBJECTIVES and within(point.bound, restricted.objective.value) \
            and no_better_options(options, prep.options):
        return row(move, point, restricted, _apart(point.bound, restricted.objective.value))
    return resolved(prep, point, objective, move, options, also=restricted)


def resolved(prep: Prepared, point: PlanPoint, objective: str, move: Move, options: list,
             also: Solution | None = None) -> Sensitivity:
    """`move` (its options `options`) re-solved whole to `ANALYSIS_GAP`, from `also` (a placement of the moved
    instance found otherwise: the plan's pools re-solved alone, [Note: what-if starts]) where it is feasible, else
    from the plan's placement; `also` is reported instead where it is better."""
    from compiler.ir.placement import OBJECTIVE_SENSE
    from compiler.place.ilp import ANALYSIS_GAP, solve

    start = also if also is not None and also.feasible else point.start(objective)
    s = solve(prep.instance.with_options(sorted(options, key=lambda o: o.key)), objective, gap=ANALYSIS_GAP,
              hint=start)
    if also is not None and also.feasible and (not s.feasible or _better(also.objective.value, s.objective.value,
                                                                         OBJECTIVE_SENSE[objective])):
        return row(move, point, also, _apart(s.objective.bound, also.objective.value) if s.feasible else 0.0)
    return row(move, point, s, s.objective.gap if s.feasible else 0.0)


#: [Note: what-if starts] A move's re-solve starts from the best placement of the plan's own pools under the move
#: (`solve_restricted`), not from the plan's: where a move makes those pools slower the plan's replica counts,
#: completed by the solver, serve far less (h200 mem_eff -20% on the 70B mix: 81 req/s against 107), and the
#: search spends its sub-MIP heuristics finding what the small MILP found in a tenth of a second. Measured on the
#: 70B mix, the 20 moves that need a re-solve, each solved both ways in turn, CPU seconds over two rounds: 28.6
#: from the plan's placement, 24.3 from the small MILP's (the node powers' moves 2-3x faster, the rest alike); 15
#: of the 20 at the same objective change, the others within the analysis gap both stop at (amd.node_w +20%:
#: -4.1% against -2.9%, the proven optimum -2.9%).


def solve_restricted(prep: Prepared, point: PlanPoint, objective: str, options: list) -> Solution:
    """The best placement of the moved options that the plan's pools become (`compiler.place.what_if.restricted_to`):
    a small MILP, solved to `RESTRICTED_GAP` from the plan's placement."""
    from compiler.place.ilp import solve
    from compiler.place.what_if import restricted_to

    return solve(prep.instance.with_options(restricted_to(options, point.replicas)), objective,
                 gap=RESTRICTED_GAP, hint=point.start(objective), explain=False)


def evaluate_unused(prep: Prepared, point: PlanPoint, objective: str, moves: Sequence[Move],
                    progress: Callable[[str], None] | None = None) -> list[Sensitivity]:
    """`moves` of device types the plan does not use, answered together ([Note: what-if bounds]): the plan keeps
    its value under each, and one solve of every move's options side by side (`compiler.place.what_if.union_of`)
    bounds each move's optimum; where that bound is within `ANALYSIS_GAP` of the plan's value, none changes the
    plan. Otherwise (or for one move) each is answered alone (`answered`)."""
    from compiler.place.ilp import ANALYSIS_GAP, solve
    from compiler.place.what_if import union_of

    if progress is not None:
        progress(f"sensitivity: {len(moves)} moves of device types the plan does not use, bounded together")
    versions = [options_at(prep, m) for m in moves]
    rows = {i: Sensitivity(m.label, m.change, 0.0) for i, (m, v) in enumerate(zip(moves, versions))
            if unchanged(prep, v)}
    pending = [i for i in range(len(moves)) if i not in rows]
    if len(pending) > 1:
        union = solve(prep.instance.with_options(union_of(prep.options, [versions[i] for i in pending])), objective,
                      gap=ANALYSIS_GAP, hint=point.start(objective))
        if union.feasible and within(union.objective.bound, point.value):
            gap = _apart(union.objective.bound, point.value)
            rows.update({i: Sensitivity(moves[i].label, moves[i].change, 0.0, solve_gap=gap) for i in pending})
    for i in pending:
        if i not in rows:
            rows[i] = answered(prep, point, objective, moves[i], versions[i])
    return [rows[i] for i in range(len(moves))]


def tasks(point: PlanPoint, objective: str, every: Sequence[Move]) -> list[tuple[int, ...]]:
    """The moves of `every` (by index) as units of work: those of device types the plan does not use, that it does
    not skip, together (`evaluate_unused`); each other move alone (`evaluate`). The first is the child's ([Note: a
    forked analysis]), which may come to it only after the baselines: a skipped move where there is one (no work),
    else the first alone. The moves together come next, the largest unit, while both processes are busy."""
    unused = tuple(i for i, m in enumerate(every) if not m.devices & point.used and not skipped(point, objective, m))
    alone = [(i,) for i in range(len(every)) if i not in unused or len(unused) == 1]
    first = ([t for t in alone if skipped(point, objective, every[t[0]])] or alone)[:1]
    together = [unused] if len(unused) > 1 else []
    return first + together + [t for t in alone if t not in first]


def evaluate_task(prep: Prepared, point: PlanPoint, objective: str, every: Sequence[Move], task: tuple[int, ...],
                  progress: Callable[[str], None] | None = None) -> dict[int, Sensitivity]:
    """The rows of one of `tasks`, by move index."""
    if len(task) == 1:
        return {task[0]: evaluate(prep, point, objective, every[task[0]], progress)}
    return dict(zip(task, evaluate_unused(prep, point, objective, [every[i] for i in task], progress)))


def row(move: Move, point: PlanPoint, s: Solution, gap: float) -> Sensitivity:
    """`move`'s row from `s`, a placement of the moved instance (its value 0 where infeasible), `gap` from the
    bound on the moved optimum."""
    from compiler.place.ilp import ANALYSIS_GAP

    value = s.objective.value if s.feasible else 0.0
    moved_by = value / point.value - 1 if point.value else 0.0
    before = set(point.shapes)
    after = before if abs(moved_by) <= ANALYSIS_GAP else pool_shapes(s) if s.feasible else set()
    return Sensitivity(move.label, move.change, moved_by, tuple(sorted(after - before)),
                       tuple(sorted(before - after)), gap)


def within(bound: float, value: float) -> bool:
    """Whether `value` (a placement's) is within `ANALYSIS_GAP` of `bound` (on the optimum), as a solve stopped at
    that gap would be."""
    from compiler.place.ilp import ANALYSIS_GAP

    return _apart(bound, value) <= ANALYSIS_GAP


def _apart(bound: float, value: float) -> float:
    """The relative gap between `value` and `bound`, as `compiler.ir.placement.Objective.gap` reads it."""
    return abs(bound - value) / max(abs(value), 1e-9) if value else 0.0


def _better(a: float, b: float, sense: str) -> bool:
    return a > b if sense == "max" else a < b


def recosted(prep: Prepared, devices: set[str], adjust, others: list) -> list:
    """`prep`'s options on `devices` costed again as the compile costs them, each device spec passed through
    `adjust` first, against the `others` (the options left as they are); held to what public engines run when
    `prep` is (`compile --deployable`). The sensitivity moves and the replan's memory-efficiency correction
    (`compiler.replan.replan.recost_of`) re-cost through it."""
    from compiler.cost.pool_options import enumerate_options

    options, _ = enumerate_options(prep.graph, prep.cluster, prep.workload, prep.precision, only=devices,
                                   adjust=adjust, draft=prep.draft, rivals=others)
    if prep.deployable:
        from compiler.emit.serving import engines_run

        options = [o for o in options if engines_run(o)]
    return options


def options_at(prep: Prepared, move: Move) -> list:
    """The options with `move` applied: its device's costed again with the factor moved, or every option's node
    power on its devices moved."""
    if move.name == "node_w":
        from compiler.cost.costing import with_node_power

        cluster = prep.cluster
        return [with_node_power(o, set(move.devices), move.change, cluster)
                for o in prep.options]
    name = move.name
    reading = hypothesis(name)
    if reading is not None:
        adjust = lambda d: replace(d, **dict(reading.fields))  # noqa: E731
    else:
        adjust = lambda d: replace(d, **{name: moved(name, getattr(d, name), move.change)})  # noqa: E731
    others = [o for o in prep.options if not set(o.device_types) & move.devices]
    return others + recosted(prep, set(move.devices), adjust, others)


#: [Note: moves that cannot change the plan] A move that only makes the options of device types the plan does not
#: use worse (an efficiency down, an overhead or a node's watts up) leaves the plan feasible at its value, and
#: every other placement no better than before: the optimum and the chosen pools stand, so `evaluate` reports
#: the move (objective +0.0%, re-solve gap 0) without costing or solving it again. That trusts the costing to make
#: every option worse, which `compiler.place.what_if.no_better_options` checks where a move is costed (a test
#: checks it for the skipped moves of the mixed fleet; on the 70B mix the attention/FFN trim once offered a new
#: option under a slower used type, amd-mi355x compute_eff -20%, so the check is not a formality). The latency
#: objective reads the TPOT at an option's cap, which a slower device can lower: there nothing is skipped, and
#: such moves are bounded with the other moves of unused types (`evaluate_unused`).


def hypothesis(name: str):
    """The `cost_models.derates.Hypothesis` a move of `name` applies, or None (a factor moved by a share)."""
    from cost_models.derates import HYPOTHESES

    return next((h for h in HYPOTHESES if h.name == name), None)


def worsens(name: str, change: float) -> bool:
    """Whether moving factor `name` by `change` makes every option it reaches worse: an efficiency (``*_eff``)
    down, a time (``*_s``) or a node's watts (``node_w``) up. Any other factor: not known, so False."""
    if name.endswith("_eff"):
        return change < 0
    return change > 0 if name.endswith("_s") or name == "node_w" else False


def moved(name: str, value: float, change: float) -> float:
    """`value` of factor `name` moved by `change`; an efficiency stays a share (at most 1)."""
    out = value * (1 + change)
    return min(1.0, out) if name.endswith("_eff") else out


def pool_shapes(sol: Solution) -> set[str]:
    """The chosen pools as kind:devices:tp:pp (batch sizes and class splits aside)."""
    return {f"{o.kind}:{'+'.join(o.device_types)}:tp{o.tp}:pp{o.pp}" for o, _n in sol.used()}


def sensitivity(prep: Prepared, sol: Solution, objective: str, *,
                progress: Callable[[str], None] | None = None) -> list[Sensitivity]:
    """Every move of `moves`, answered here (two `tasks` at a time: HiGHS releases the GIL while it solves)."""
    analysis = Analysis(prep, objective, progress, fork=False)
    analysis.begin(sol)
    return analysis.finish()


class Analysis:
    """The sensitivity analysis of one compile, its moves shared with a forked child where one can run ([Note: a
    forked analysis]): construct it before the first placement solve, `begin` once the plan is known, `finish`
    for the rows, `close` always."""

    def __init__(self, prep: Prepared, objective: str, progress: Callable[[str], None] | None = None, *,
                 fork: bool = True, baselines: BaselineRequest | None = None, analyse: bool = True):
        self.prep, self.objective, self.progress = prep, objective, progress
        self.analyse = analyse  # False: no moves, only the child's baselines (``compile --no-sensitivity``)
        self.moves: list[Move] = []
        self.tasks: list[tuple[int, ...]] = []  # the moves by index, as units of work (`tasks`)
        self.point: PlanPoint | None = None
        self.child = _Child.start(prep, objective, baselines, analyse) if fork and _may_fork() else None
        self.solved_by_child = 0  # moves the child answered (`finish`)
        #: The baselines the child solved to the proof, or None: not asked for, or no child, or it sent none.
        self.baselines: list[Baseline] | None = None
        self._asked = baselines is not None and self.child is not None

    def begin(self, sol: Solution) -> None:
        """The plan is known: the child starts on the moves."""
        self.point = PlanPoint.of(sol)
        self.moves = moves(self.prep) if self.analyse else []
        self.tasks = tasks(self.point, self.objective, self.moves)
        if self.child is not None and not self.child.send({"point": self.point.to_json()}):
            self.child = None

    def finish(self) -> list[Sensitivity]:
        """Every move's row, in the order of `moves`."""
        from compiler.place.concurrently import concurrently

        assert self.point is not None, "begin() first"
        n = len(self.moves)
        started = time.perf_counter()
        one = lambda t: evaluate_task(self.prep, self.point, self.objective, self.moves, self.tasks[t],  # noqa: E731
                                      self.progress)
        rows: dict[int, Sensitivity] = {}
        if self.child is not None:
            while (t := _take(self.child.taken, len(self.tasks))) is not None:
                rows.update(one(t))
        if self._asked and self.child is not None:  # they come first through the pipe
            self.baselines = self.child.receive_baselines(max(CHILD_GRACE_S, 2 * (time.perf_counter() - started)))
            if self.baselines is None:  # gone or silent: its next message could still be these; stop listening
                self.close()
        if self.child is not None:
            got = self.child.receive(max(CHILD_GRACE_S, 2 * (time.perf_counter() - started))) or {}
            self.solved_by_child = len(got)
            rows.update(got)
        missing = [t for t, task in enumerate(self.tasks) if any(i not in rows for i in task)]
        if self.child is not None and missing:
            log.info("the sensitivity child left %d moves unanswered; solving them here",
                     sum(len(self.tasks[t]) for t in missing))
        for got in concurrently(one, missing):
            rows.update(got)
        return [rows[i] for i in range(n)]

    def close(self) -> None:
        if self.child is not None:
            self.child.stop()
            self.child = None


def _take(taken, n: int) -> int | None:
    """The next task (`tasks`) no process has taken (a counter shared across the fork), or None when all are
    taken."""
    with taken.get_lock():
        i = taken.value
        taken.value = i + 1
    return i if i < n else None


def _may_fork() -> bool:
    """Whether a child may be forked here: Linux, more than one core, and one thread in this process."""
    return sys.platform == "linux" and (os.cpu_count() or 1) > 1 and threading.active_count() == 1


class _Child:
    """The forked process and its two pipes."""

    def __init__(self, process, to_child, from_child, taken):
        self.process, self.to_child, self.from_child = process, to_child, from_child
        self.taken = taken  # the next move's index, shared with the child (`_take`)

    @staticmethod
    def start(prep: Prepared, objective: str, baselines: BaselineRequest | None, analyse: bool) -> _Child | None:
        ctx = multiprocessing.get_context("fork")
        inbox, to_child = ctx.Pipe(duplex=False)
        from_child, results = ctx.Pipe(duplex=False)
        taken = ctx.Value("i", 1)  # task 0 is the child's: it always has a share, however late it starts
        process = ctx.Process(target=_child_main, args=(prep, objective, baselines, inbox, results, taken, analyse),
                              daemon=True)
        try:
            process.start()
        except OSError as e:
            log.debug("no child process for the sensitivity analysis (%s)", e)
            return None
        inbox.close()
        results.close()
        return _Child(process, to_child, from_child, taken)

    def send(self, message: dict) -> bool:
        try:
            self.to_child.send_bytes(json.dumps(message).encode())
            return True
        except OSError:
            return False

    def _message(self, timeout_s: float):
        """The child's next message (JSON), or None if it sent none in time or is gone."""
        try:
            if not self.from_child.poll(timeout_s):
                return None
            return json.loads(self.from_child.recv_bytes())
        except (EOFError, OSError):
            return None

    def receive(self, timeout_s: float) -> dict[int, Sensitivity] | None:
        rows = self._message(timeout_s)
        if rows is None:
            return None
        return {int(i): Sensitivity(r["factor"], r["change"], r["objective_change"], tuple(r["pools_added"]),
                                    tuple(r["pools_removed"]), r["solve_gap"]) for i, r in rows.items()}

    def receive_baselines(self, timeout_s: float) -> list[Baseline] | None:
        """The child's baselines, or None if it sent none in time."""
        got = self._message(timeout_s)
        return None if got is None else [baseline_of(b) for b in got]

    def stop(self) -> None:
        for end in (self.to_child, self.from_child):
            end.close()
        if self.process.is_alive():
            self.process.kill()
        self.process.join()


def _child_main(prep: Prepared, objective: str, baselines: BaselineRequest | None, inbox, results, taken,
                analyse: bool) -> None:
    """The child: solve the baselines (if asked) and send them; wait for the plan, answer the tasks it takes
    (`_take`) one after another, send the rows, and leave without running the parent's exit handlers."""
    code = 0
    try:
        if baselines is not None:
            from compiler.place.baselines import baselines as solve_baselines

            found = solve_baselines(prep.instance, objective, time_limit_s=baselines.time_limit_s,
                                    fleets=baselines.fleets(prep), exact=baselines.exact, at_once=1)
            results.send_bytes(json.dumps([asdict(b) for b in found]).encode())
        message = json.loads(inbox.recv_bytes())
        point = PlanPoint.from_json(message["point"])
        every = moves(prep) if analyse else []
        work = tasks(point, objective, every)
        rows = evaluate_task(prep, point, objective, every, work[0]) if work else {}
        while (t := _take(taken, len(work))) is not None:
            rows.update(evaluate_task(prep, point, objective, every, work[t]))
        results.send_bytes(json.dumps({str(i): {
            "factor": r.factor, "change": r.change, "objective_change": r.objective_change,
            "pools_added": list(r.pools_added), "pools_removed": list(r.pools_removed),
            "solve_gap": r.solve_gap if math.isfinite(r.solve_gap) else 0.0} for i, r in rows.items()}).encode())
    except (EOFError, OSError, KeyboardInterrupt):  # the parent closed the pipe, or left
        code = 1
    except Exception:  # noqa: BLE001 (anything else: the parent solves these moves itself)
        log.debug("the sensitivity child failed", exc_info=True)
        code = 1
    finally:
        os._exit(code)
