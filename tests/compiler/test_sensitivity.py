"""The sensitivity analysis: moves that cannot change the plan, answers from bounds against proven optima, and the
forked child that shares the moves."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.conftest import REPO

MIXED = str(REPO / "examples" / "clusters" / "mixed.yaml")
WORKLOAD = str(REPO / "examples" / "tiny_split" / "workload.yaml")


@pytest.fixture(scope="module")
def planned():
    from compiler.driver import prepare
    from compiler.place.ilp import solve

    prep = prepare("llama-tiny", MIXED, WORKLOAD)
    return prep, solve(prep.instance, "throughput")


def test_a_move_that_only_worsens_an_unused_type_is_what_a_re_solve_finds(planned):
    """[Note: moves that cannot change the plan]: every move the analysis skips (a device type the plan does not
    use, made worse), costed, makes no option better (`no_better_options`: no new option, and per class no more
    requests/s, no lower latency, no fewer watts); solved anyway, it leaves the objective within the re-solve's gap
    and the chosen pools as they were."""
    from compiler.place.what_if import no_better_options
    from compiler.sensitivity import PlanPoint, evaluate, moves, options_at, resolved, skipped

    prep, sol = planned
    point = PlanPoint.of(sol)
    skips = [m for m in moves(prep) if skipped(point, "throughput", m)]
    assert len(skips) >= 2
    assert not any(skipped(point, "latency", m) for m in skips)  # the TPOT at a lower cap may be lower
    for m in skips:
        options = options_at(prep, m)
        assert no_better_options(options, prep.options), m
        assert evaluate(prep, point, "throughput", m).objective_change == 0.0
        solved = resolved(prep, point, "throughput", m, options)  # re-solved whole from the plan's placement
        assert solved.objective_change <= 1e-9 and not solved.changes_pools, m


def _answer(prep, point, every, wanted) -> tuple[dict, set, dict]:
    """The rows of the `tasks` holding the moves `wanted` (indices), answered as `Analysis` answers them, one after
    another; the moves `resolved` re-solved whole; and each answered move's options, costed once."""
    import compiler.sensitivity as sensitivity

    whole, rows, costed = set(), {}, {}
    resolved, options_at = sensitivity.resolved, sensitivity.options_at

    def counting(prep_, point_, objective, move, options, also=None):
        whole.add(every.index(move))
        return resolved(prep_, point_, objective, move, options, also)

    def kept(prep_, move):
        costed[every.index(move)] = options_at(prep_, move)
        return costed[every.index(move)]

    sensitivity.resolved, sensitivity.options_at = counting, kept
    try:
        for task in sensitivity.tasks(point, "throughput", every):
            if set(task) & set(wanted):
                rows.update(sensitivity.evaluate_task(prep, point, "throughput", every, task))
    finally:
        sensitivity.resolved, sensitivity.options_at = resolved, options_at
    return rows, whole, costed


def _ways(point, every, rows, whole) -> dict[str, list[int]]:
    """The answered moves by how ([Note: what-if bounds]): ``union`` (a move of an unused type, bounded with the
    others), ``bound`` (worse everywhere: the plan's pools against its bound) and ``solve`` (re-solved whole); a
    factor that reaches no option (+0.0%, gap 0) is none of them."""
    out: dict[str, list[int]] = {"union": [], "bound": [], "solve": []}
    for i in sorted(rows):
        if i in whole:
            out["solve"].append(i)
        elif rows[i].solve_gap or rows[i].objective_change:
            out["union" if not every[i].devices & point.used else "bound"].append(i)
    return out


def _within_gap_of_proven(prep, point, every, rows, costed, checked) -> None:
    from compiler.place.ilp import ANALYSIS_GAP, solve

    for i in checked:
        proven = solve(prep.instance.with_options(costed[i]), "throughput", exact=True)
        assert proven.status == "optimal", every[i]
        value = (1 + rows[i].objective_change) * point.value
        assert proven.objective.value * (1 - ANALYSIS_GAP) - 1e-9 <= value <= proven.objective.value * (1 + 1e-6), \
            every[i]


def test_each_way_of_answering_a_move_is_within_the_analysis_gap_of_a_proven_optimum(planned):
    """[Note: what-if bounds], [Note: presolve off for what-ifs]: a subset of the moves on llama-tiny and the mixed
    fleet (those of device types the plan does not use, bounded together, and of the others the first moving each
    factor), answered as the analysis answers them, covers each way of answering, and each answer (from bounds, or
    re-solved from the plan's pools without presolve, stopped at `ANALYSIS_GAP`) lies within that gap below the
    moved instance's optimum proven by an independent solve (presolve on, no start, to `OPTIMAL_GAP`, no
    near-twin pruning): one move per factor and way here, every move in the slow test below."""
    from compiler.sensitivity import PlanPoint, moves, skipped

    prep, sol = planned
    point = PlanPoint.of(sol)
    every = moves(prep)
    first: dict[str, int] = {}
    unused = []
    for i, m in enumerate(every):
        if not skipped(point, "throughput", m):
            first.setdefault(m.name, i) if m.devices & point.used else unused.append(i)
    rows, whole, costed = _answer(prep, point, every, [*first.values(), *unused])
    ways = _ways(point, every, rows, whole)
    assert all(ways.values()), ways
    assert all(rows[i].objective_change == 0.0 and not rows[i].changes_pools for i in ways["union"])
    checked = {(way, every[i].name): i for way, picked in ways.items() for i in reversed(picked)}
    _within_gap_of_proven(prep, point, every, rows, costed, sorted(checked.values()))


@pytest.mark.slow  # every move, and a proven optimum for each (CI runs -m slow)
def test_every_answer_is_within_the_analysis_gap_of_a_proven_optimum_and_most_need_no_whole_re_solve(planned):
    """The whole analysis on llama-tiny and the mixed fleet: rows in the order of `moves`, fewer than half of the
    moves re-solved whole, and every answer within the analysis gap of the proven optimum (as above)."""
    from compiler.sensitivity import PlanPoint, moves

    prep, sol = planned
    point = PlanPoint.of(sol)
    every = moves(prep)
    rows, whole, costed = _answer(prep, point, every, range(len(every)))
    assert [(rows[i].factor, rows[i].change) for i in range(len(every))] == [(m.label, m.change) for m in every]
    assert len(whole) < len(every) / 2
    answered = sorted(i for way in _ways(point, every, rows, whole).values() for i in way)
    _within_gap_of_proven(prep, point, every, rows, costed, answered)


def test_a_move_no_option_gains_from_is_answered_from_the_plan_bound_and_its_pools(monkeypatch):
    """[Note: what-if bounds] worse everywhere, by hand: a move that makes every option slower (every option's rate
    scaled by a factor, its latencies as they were) is answered by the plan's pools re-solved alone, without a whole
    re-solve, where that placement is within the analysis gap of the plan's proven bound, and re-solved whole where
    it is not. On llama-tiny's three single-device pools only the replicas' rates bind, so the optimum scales by
    that factor."""
    import compiler.sensitivity as sensitivity
    from compiler.driver import prepare
    from compiler.ir.pool_option import ClassService
    from compiler.place.ilp import ANALYSIS_GAP, solve

    prep = prepare("llama-tiny", str(REPO / "examples" / "tiny_split" / "cluster.yaml"), WORKLOAD)
    point = sensitivity.PlanPoint.of(solve(prep.instance, "throughput", exact=True))
    whole = []
    resolved = sensitivity.resolved
    monkeypatch.setattr(sensitivity, "resolved", lambda *a, **k: whole.append(a[3]) or resolved(*a, **k))
    move = sensitivity.Move("nvidia-h100-sxm.compute_eff", -0.2, frozenset({"nvidia-h100-sxm"}))
    for by in (1.0, 0.99, 0.5):
        slower = [replace(o, classes=tuple(ClassService(c.name, c.rate_per_s * by, c.curve, c.parts)
                                           for c in o.classes)) for o in prep.options]
        row = sensitivity.answered(prep, point, "throughput", move, slower)
        assert row.objective_change == pytest.approx(by - 1, abs=1e-6), by
        assert row.solve_gap <= ANALYSIS_GAP
        assert len(whole) == (by < 1 - ANALYSIS_GAP), by  # re-solved whole only beyond the gap


def test_the_optimum_of_a_union_bounds_the_optimum_of_each_move_it_holds(planned):
    """[Note: what-if bounds] union: the options of two moves of device types the plan does not use, side by side,
    reach at least what each move reaches alone (each solved to its proof), and each move alone reaches the plan's
    value (its pools are untouched)."""
    from compiler.place.ilp import solve
    from compiler.place.what_if import union_of
    from compiler.sensitivity import PlanPoint, moves, options_at, unchanged, worsens

    prep, sol = planned
    point = PlanPoint.of(sol)
    picked = [m for m in moves(prep) if not m.devices & point.used and not worsens(m.name, m.change)]
    versions = [v for v in (options_at(prep, m) for m in picked[:4]) if not unchanged(prep, v)][:2]
    assert len(versions) == 2
    alone = [solve(prep.instance.with_options(v), "throughput", exact=True).objective.value for v in versions]
    both = solve(prep.instance.with_options(union_of(prep.options, versions)), "throughput", exact=True)
    assert both.status == "optimal"
    assert all(point.value * (1 - 1e-6) <= value <= both.objective.value * (1 + 1e-6) for value in alone)


_FORKED = """
import json, sys
from compiler.driver import fleets_of, prepare
from compiler.place.baselines import baselines
from compiler.place.ilp import solve
from compiler.sensitivity import Analysis, BaselineRequest, sensitivity

prep = prepare("llama-tiny", sys.argv[1], sys.argv[2])
ask = BaselineRequest(time_limit_s=60.0, exact=False, fleets=fleets_of)
shared = Analysis(prep, "throughput", baselines=ask)  # before the first solve, one thread: the child starts here
lost = Analysis(prep, "throughput", baselines=ask)
bare = Analysis(prep, "throughput", baselines=ask, analyse=False)  # compile --no-sensitivity
lost.child.process.kill()  # before it could answer anything
sol = solve(prep.instance, "throughput")
here = sensitivity(prep, sol, "throughput")
base_here = baselines(prep.instance, "throughput", time_limit_s=60.0, fleets=fleets_of(prep))
out = {"forked": shared.child is not None and lost.child is not None and bare.child is not None}
try:
    shared.begin(sol)
    out["same"] = shared.finish() == here
    out["shared"] = shared.solved_by_child
    out["same_baselines"] = shared.baselines == base_here
    out["baselines"] = sorted({b.status for b in base_here})
    lost.begin(sol)
    out["same_after_loss"] = lost.finish() == here
    out["none_after_loss"] = lost.baselines is None
    bare.begin(sol)
    out["bare"] = [bare.finish() == [], bare.baselines == base_here]
finally:
    shared.close()
    lost.close()
    bare.close()
print(json.dumps(out))
"""


@pytest.mark.slow  # whole compiles, 25-35 s on 2 cores (CI runs -m slow)
def test_the_forked_child_returns_the_rows_this_process_would_and_its_loss_costs_only_time():
    """[Note: a forked analysis], in a fresh interpreter (one thread, as the CLI runs it): with a child, the rows
    and the baselines (JSON through a pipe) are those of the analysis and the baselines solved in-process, in
    the same order; a child killed before it answers leaves its moves to the parent, with the same rows, and
    no baselines (the compile then solves them itself); a child asked for no analysis (``compile
    --no-sensitivity``) takes no move and still returns the baselines."""
    import json
    import os
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _FORKED, MIXED, WORKLOAD], capture_output=True, text=True,
                          timeout=600, cwd=REPO, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert proc.returncode == 0, proc.stderr
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out == {"forked": True, "shared": out["shared"], "same": True, "same_after_loss": True,
                   "same_baselines": True, "baselines": out["baselines"], "none_after_loss": True,
                   "bare": [True, True]}
    assert out["shared"] >= 1
    assert "optimal" in out["baselines"]  # some baseline was solved, not only skipped


def test_cerebras_launch_speed_reading_meets_the_launch_row_and_is_a_move():
    """[Note: Cerebras per-user speed]: the other reading of Cerebras' published speeds (plain decoding at the
    August 2024 launch's speed) is a move of the sensitivity analysis wherever a CS-3 is offered, and the derate it
    applies predicts the launch row it comes from: CER-01, Llama-3.1-70B on four CS-3, 1,024 + 1,024 tokens, one
    user, 2.2222 ms per token (450 tokens/s; cost_models/data/measurements_cerebras.csv), where the fitted derate
    predicts about a quarter of that."""
    from dataclasses import replace

    from compiler.cost.deployment import deployment

    from compiler.inputs.served import served
    from compiler.cost.estimate import estimate
    from compiler.driver import block_graph, prepare
    from compiler.ir.precision import Precision
    from compiler.sensitivity import hypothesis, moves

    reading = hypothesis("launch_speed")
    graph = block_graph("llama-3.1-70b")
    dep = deployment(served("cerebras-cs3"), 4, 1, 4, Precision.of("bf16"))
    fitted = estimate(graph, dep, input_len=1024, output_len=1024, batch=1)
    launch = estimate(graph, replace(dep, derate=replace(dep.derate, **dict(reading.fields))), input_len=1024,
                      output_len=1024, batch=1)
    assert launch.tpot_ms == pytest.approx(2.2222, rel=0.02)
    assert fitted.tpot_ms < 0.3 * launch.tpot_ms
    prep = prepare("llama-3.1-8b", "examples/clusters/cerebras.yaml", "examples/workloads/chat.yaml")
    assert "cerebras-cs3.launch_speed" in {m.label for m in moves(prep)}
