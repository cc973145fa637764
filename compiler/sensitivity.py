"""The plan's sensitivity to what the cost model assumes: each uncertain factor moved +-20%, re-costed, re-solved.

Before: a `Prepared` compile and its placement. After: a `Sensitivity` per (factor, direction), in a fixed
order; the plan lists them and the summary names those that change the chosen pools.

The moves are many (42 on the 70B mix of the mixed fleet) and each one re-costs a device type's options and
builds and solves a MILP, mostly in Python, which holds the GIL: threads share one core. [Note: a forked
analysis] `Analysis` therefore forks a child process before the first placement solve, while the process
runs one thread (a fork copies no other thread, nor the locks it may hold, and HiGHS has not yet started its
own). The baselines do not depend on the plan, so the child solves them first, on the other core while
this process solves the placement (to the proof: `compiler.driver` solves them again here in the rare case
that the plan stops short of its proof, [Note: baselines]). Once the placement is known the child gets the
plan (value, replicas, pools, device types used: JSON over a pipe, no pickle), and both processes take the
moves one at a time from a shared counter while this process also writes plan.json: whichever is free takes the
next, so neither waits on a share that turned out slow (the child's baselines, one hard re-solve). The child's
baselines and `Sensitivity` rows come back as JSON. Every solve is deterministic on its own, so the rows are the same
whichever process solved them. A child that cannot start, dies or stays silent past its deadline costs only
time: its baselines and moves are then solved here. ``compile --no-sensitivity`` forks the child all the same, for
the baselines alone (`Analysis` with ``analyse`` False: no moves).
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

if TYPE_CHECKING:
    from compiler.cost.prepared import Prepared
    from compiler.ir.placement import Baseline, Sensitivity, Solution

log = logging.getLogger(__name__)

#: How far each uncertain factor moves, both ways.
SENSITIVITY_CHANGE = 0.2
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
    shapes and device types used."""

    value: float
    replicas: tuple[tuple[str, int], ...]
    shapes: frozenset[str]
    used: frozenset[str]

    @staticmethod
    def of(sol: Solution) -> PlanPoint:
        return PlanPoint(sol.objective.value, sol.replicas, frozenset(pool_shapes(sol)),
                         frozenset(d for o, _n in sol.used() for d in o.device_types))

    def to_json(self) -> dict:
        return {"value": self.value, "replicas": [list(r) for r in self.replicas], "shapes": sorted(self.shapes),
                "used": sorted(self.used)}

    @staticmethod
    def from_json(d: dict) -> PlanPoint:
        return PlanPoint(float(d["value"]), tuple((str(k), int(n)) for k, n in d["replicas"]),
                         frozenset(d["shapes"]), frozenset(d["used"]))


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
             progress: Callable[[str], None] | None = None) -> Sensitivity:
    """`move` applied: its device's options costed again (or their node power moved) and the placement solved
    from the plan's, to `ANALYSIS_GAP`. Pools are reported as changed only where the objective moves by more
    than that gap (within it, other pools are ties the solver's tolerance cannot tell from the plan's)."""
    from compiler.ir.placement import Objective, Sensitivity, Solution
    from compiler.place.ilp import ANALYSIS_GAP, solve

    if not move.devices & point.used and worsens(move.name, move.change):
        return Sensitivity(move.label, move.change, 0.0)  # [Note: moves that cannot change the plan]
    if progress is not None:
        progress(f"sensitivity: {move.label} {move.change:+.0%}")
    options = sorted(options_at(prep, move), key=lambda o: o.key)
    if options == sorted(prep.options, key=lambda o: o.key):  # the factor reaches no option (fp8 in a bf16 plan)
        return Sensitivity(move.label, move.change, 0.0)
    start = Solution("optimal", Objective(objective, point.value, point.value), replicas=point.replicas)
    s = solve(prep.instance.with_options(options), objective, gap=ANALYSIS_GAP, hint=start)
    value = s.objective.value if s.feasible else 0.0
    moved_by = value / point.value - 1 if point.value else 0.0
    before = set(point.shapes)
    after = before if abs(moved_by) <= ANALYSIS_GAP else pool_shapes(s) if s.feasible else set()
    return Sensitivity(move.label, move.change, moved_by, tuple(sorted(after - before)),
                       tuple(sorted(before - after)), s.objective.gap if s.feasible else 0.0)


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
        return [with_node_power(o, set(move.devices), move.change, cluster.power_basis, cluster.pue_factor)
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
#: the move (objective +0.0%, re-solve gap 0) without costing or solving it again.


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
    """Every move of `moves`, evaluated here (two solves at a time: HiGHS releases the GIL while it solves)."""
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
        self.point: PlanPoint | None = None
        self.child = _Child.start(prep, objective, baselines, analyse) if fork and _may_fork() else None
        self.solved_by_child = 0  # moves the child evaluated (`finish`)
        #: The baselines the child solved to the proof, or None: not asked for, or no child, or it sent none.
        self.baselines: list[Baseline] | None = None
        self._asked = baselines is not None and self.child is not None

    def begin(self, sol: Solution) -> None:
        """The plan is known: the child starts on the moves."""
        self.point = PlanPoint.of(sol)
        self.moves = moves(self.prep) if self.analyse else []
        if self.child is not None and not self.child.send({"point": self.point.to_json()}):
            self.child = None

    def finish(self) -> list[Sensitivity]:
        """Every move's row, in the order of `moves`."""
        from compiler.place.ilp import concurrently

        assert self.point is not None, "begin() first"
        n = len(self.moves)
        started = time.perf_counter()
        one = lambda i: evaluate(self.prep, self.point, self.objective, self.moves[i], self.progress)  # noqa: E731
        rows: dict[int, Sensitivity] = {}
        if self.child is not None:
            while (i := _take(self.child.taken, n)) is not None:
                rows[i] = one(i)
        if self._asked and self.child is not None:  # they come first through the pipe
            self.baselines = self.child.receive_baselines(max(CHILD_GRACE_S, 2 * (time.perf_counter() - started)))
            if self.baselines is None:  # gone or silent: its next message could still be these; stop listening
                self.close()
        if self.child is not None:
            got = self.child.receive(max(CHILD_GRACE_S, 2 * (time.perf_counter() - started))) or {}
            self.solved_by_child = len(got)
            rows.update(got)
        missing = [i for i in range(n) if i not in rows]
        if self.child is not None and missing:
            log.info("the sensitivity child left %d moves unanswered; solving them here", len(missing))
        rows.update(zip(missing, concurrently(one, missing)))
        return [rows[i] for i in range(n)]

    def close(self) -> None:
        if self.child is not None:
            self.child.stop()
            self.child = None


def _take(taken, n: int) -> int | None:
    """The next move no process has taken (a counter shared across the fork), or None when all are taken."""
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
        tasks, to_child = ctx.Pipe(duplex=False)
        from_child, results = ctx.Pipe(duplex=False)
        taken = ctx.Value("i", 1)  # move 0 is the child's: it always has a share, however late it starts
        process = ctx.Process(target=_child_main, args=(prep, objective, baselines, tasks, results, taken, analyse),
                              daemon=True)
        try:
            process.start()
        except OSError as e:
            log.debug("no child process for the sensitivity analysis (%s)", e)
            return None
        tasks.close()
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
        from compiler.ir.placement import Sensitivity

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


def _child_main(prep: Prepared, objective: str, baselines: BaselineRequest | None, tasks, results, taken,
                analyse: bool) -> None:
    """The child: solve the baselines (if asked) and send them; wait for the plan, evaluate the moves it takes
    (`_take`) one after another, send the rows, and leave without running the parent's exit handlers."""
    code = 0
    try:
        if baselines is not None:
            from compiler.place.baselines import baselines as solve_baselines

            found = solve_baselines(prep.instance, objective, time_limit_s=baselines.time_limit_s,
                                    fleets=baselines.fleets(prep), exact=baselines.exact, at_once=1)
            results.send_bytes(json.dumps([asdict(b) for b in found]).encode())
        message = json.loads(tasks.recv_bytes())
        point = PlanPoint.from_json(message["point"])
        every = moves(prep) if analyse else []
        rows = {0: evaluate(prep, point, objective, every[0])} if every else {}
        while (i := _take(taken, len(every))) is not None:
            rows[i] = evaluate(prep, point, objective, every[i])
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
