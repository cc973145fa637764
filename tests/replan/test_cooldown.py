"""The cool-down ([Note: cool-down] in `compiler.replan.replan`): a replan that would move back a change made in
the last ``cooldown_windows`` windows needs ``min_gain + cooldown_gain``; the changes are read from the running
plan's ``report/replan.json``. On the simulated day plan after the mix turned to documents, at 40% of what a
fresh compile of the night would serve (no pool of the day plan past its utilisation ceiling as routed).
"""

from __future__ import annotations

import json
import shutil

import pytest

from compiler.compile_inputs import CompileInputs
from compiler.replan.replan import Settings, replan
from tests.replan.conftest import CLUSTER, MODEL, WINDOW_S, night_workload, simulate


@pytest.fixture(scope="module")
def night(day, truth_options, tmp_path_factory):
    """(snapshots of the night, the replan without a cool-down: what it moves and its gain)."""
    from compiler.driver import compile

    plan_dir, compiled = day
    options, prep = truth_options
    tmp = tmp_path_factory.mktemp("cooldown")
    fresh = compile(MODEL, CLUSTER, night_workload(tmp), baselines=False, analyse=False)
    rates = {c.name: 0.4 * fresh.solution.requests_per_s * c.share for c in fresh.prepared.instance.classes}
    snaps = simulate(compiled.plan, options, prep, rates, seed=5)
    free = replan(plan_dir, CompileInputs.load(plan_dir), snaps, Settings(cooldown_windows=0), workload_dir=tmp)
    assert free.decision.act and free.decision.gain > 0.2, free.decision.reason
    return snaps, free


def _with_history(plan_dir, tmp_path, changes: list[dict]):
    """A copy of the running plan whose report/replan.json records `changes`."""
    copy = tmp_path / "running"
    shutil.copytree(plan_dir, copy)
    (copy / "report" / "replan.json").write_text(json.dumps({"history": changes}))
    return copy


def test_moving_back_a_recent_change_needs_the_margin(day, night, tmp_path):
    """The replan removes replicas of a shape. Recorded as added one window ago, that removal moves it back: with
    a margin the gain clears (10% + 10% < the gain) it still moves and says so; with one it does not clear
    (10% + the gain) it holds, naming the change; recorded five windows ago (past a 3-window cool-down), or
    with the cool-down off, it moves."""
    plan_dir, _compiled = day
    snaps, free = night
    gain = free.decision.gain
    down = next(c for c in free.changes if c.after < c.before)
    now = snaps[-1].time_s
    recent = [{"time_s": now - WINDOW_S, "shape": down.shape, "before": down.after, "after": down.before}]
    running = _with_history(plan_dir, tmp_path, recent)
    inputs = CompileInputs.load(plan_dir)

    def run(settings: Settings, folder: str):
        return replan(running, inputs, snaps, settings, workload_dir=tmp_path / folder)

    small = run(Settings(cooldown_windows=3, cooldown_gain=0.10), "small")
    assert small.decision.act and small.decision.moved_back == (down.shape,)
    assert "clears the cool-down margin" in small.decision.reason
    # the next plan carries the change it moved back and its own, for the replan after it
    assert {(c.shape, c.before, c.after) for c in small.history} >= {(down.shape, down.after, down.before),
                                                                       (down.shape, down.before, down.after)}
    big = run(Settings(cooldown_windows=3, cooldown_gain=gain), "big")
    assert not big.decision.act and big.decision.moved_back == (down.shape,)
    assert "moves back a recent change" in big.decision.reason and down.shape in big.decision.reason
    assert big.history == small.history[:1]  # held: only the recorded change, still recent
    old = [dict(recent[0], time_s=now - 5 * WINDOW_S)]
    running = _with_history(plan_dir, tmp_path / "old", old)
    assert run(Settings(cooldown_windows=3, cooldown_gain=gain), "old").decision.act
    assert run(Settings(cooldown_windows=0, cooldown_gain=gain), "off").decision.act
