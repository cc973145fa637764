"""The sensitivity analysis: moves that cannot change the plan, and the forked child that shares the moves."""

from __future__ import annotations

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
    use, made worse), solved anyway, leaves the objective within the re-solve's gap and the chosen pools as
    they were."""
    from compiler.sensitivity import PlanPoint, evaluate, moves, worsens

    prep, sol = planned
    point = PlanPoint.of(sol)
    skipped = [m for m in moves(prep) if not m.devices & point.used and worsens(m.name, m.change)]
    assert len(skipped) >= 2
    everything = PlanPoint(point.value, point.replicas, point.shapes, frozenset(prep.cluster.inventory()))
    for m in skipped:
        assert evaluate(prep, point, "throughput", m).objective_change == 0.0
        solved = evaluate(prep, everything, "throughput", m)  # "used" everywhere: nothing is skipped
        assert solved.objective_change <= 1e-9 and not solved.changes_pools, m


def _one_per_kind(solved: list, used: frozenset) -> list[int]:
    """Indices of the first of `solved` moving each factor on a device type the plan uses, and on one it does not."""
    first: dict[tuple[str, bool], int] = {}
    for i, m in enumerate(solved):
        first.setdefault((m.name, bool(m.devices & used)), i)
    return sorted(first.values())


@pytest.mark.parametrize("kinds", [True, pytest.param(False, marks=pytest.mark.slow)], ids=["one-per-kind", "others"])
def test_every_solved_move_is_within_the_analysis_gap_of_a_proven_optimum(planned, kinds):
    """[Note: presolve off for what-ifs]: each move the analysis solves (from the plan's placement, no presolve,
    stopped at `ANALYSIS_GAP`) reports an objective within that gap of the moved instance's optimum proven by an
    independent solve (presolve on, no start, to `OPTIMAL_GAP`). Two solves a move, some 30 moves on the whole mixed
    fleet: the default run checks one move per factor on a used and on an unused device type, the slow run the
    others (CI runs -m slow)."""
    from compiler.place.ilp import ANALYSIS_GAP, solve
    from compiler.sensitivity import PlanPoint, evaluate, moves, options_at, worsens

    prep, sol = planned
    point = PlanPoint.of(sol)
    solved = [m for m in moves(prep) if m.devices & point.used or not worsens(m.name, m.change)]
    assert len(solved) >= 4
    picked = _one_per_kind(solved, point.used)
    assert len(picked) >= 4
    for m in [m for i, m in enumerate(solved) if (i in picked) == kinds]:
        row = evaluate(prep, point, "throughput", m)
        proven = solve(prep.instance.with_options(options_at(prep, m)), "throughput", exact=True)
        assert proven.status == "optimal", m
        value = (1 + row.objective_change) * point.value
        assert proven.objective.value * (1 - ANALYSIS_GAP) - 1e-9 <= value <= proven.objective.value * (1 + 1e-6), m


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
    from compiler.cost.estimate import estimate
    from compiler.driver import block_graph, prepare
    from compiler.ir.precision import Precision
    from compiler.sensitivity import hypothesis, moves

    reading = hypothesis("launch_speed")
    graph = block_graph("llama-3.1-70b")
    dep = deployment("cerebras-cs3", 4, 1, 4, Precision.of("bf16"))
    fitted = estimate(graph, dep, input_len=1024, output_len=1024, batch=1)
    launch = estimate(graph, replace(dep, derate=replace(dep.derate, **dict(reading.fields))), input_len=1024,
                      output_len=1024, batch=1)
    assert launch.tpot_ms == pytest.approx(2.2222, rel=0.02)
    assert fitted.tpot_ms < 0.3 * launch.tpot_ms
    prep = prepare("llama-3.1-8b", "examples/clusters/cerebras.yaml", "examples/workloads/chat.yaml")
    assert "cerebras-cs3.launch_speed" in {m.label for m in moves(prep)}
