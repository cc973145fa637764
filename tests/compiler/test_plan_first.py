"""[Note: plan first]: plan.json is written once the placement is solved, before baselines and sensitivity."""

from __future__ import annotations

import json

from tests.conftest import REPO, run_cli

CLUSTER = REPO / "examples" / "tiny_split" / "cluster.yaml"
WORKLOAD = REPO / "examples" / "tiny_split" / "workload.yaml"


def test_the_placed_plan_comes_first_and_the_final_plan_only_adds_the_analyses():
    from compiler.driver import compile

    seen = []
    result = compile("llama-tiny", str(CLUSTER), str(WORKLOAD), on_placed=seen.append)
    (first,) = seen
    assert first.baselines == [] and first.sensitivity == []
    assert result.plan.baselines  # the analyses came after
    assert first.pools == result.plan.pools and first.predicted == result.plan.predicted


def test_status_records_when_plan_json_was_first_written(tmp_path):
    done = run_cli("compile", "llama-tiny", "--cluster", str(CLUSTER), "--workload", str(WORKLOAD), "--out",
                   str(tmp_path), "--no-report", "--no-onnx", "-q")
    assert done.returncode == 0, done.stderr
    marks = json.loads((tmp_path / "status.json").read_text())["marks_s"]
    assert 0 < marks["plan.json written"] <= marks["everything written"]


def test_an_assumed_node_power_moves_the_objective_the_way_the_budget_says(tmp_path):
    """MI300X's node power is assumed (no published platform power): where the power budget binds, 20% more node
    power buys fewer devices (throughput falls), 20% less buys more (it rises)."""
    from compiler.driver import prepare
    from compiler.sensitivity import sensitivity
    from compiler.place.ilp import solve

    cluster = tmp_path / "c.yaml"
    # 4.5 kW buys 3 of 8 at ~1.3 kW each; at +20% only 2, at -20% 4 (hand arithmetic on the node power)
    cluster.write_text("name: amd\npower_budget_kw: 4.5\ndevices:\n  - {device: amd-mi300x, count: 8}\n")
    prep = prepare("llama-tiny", str(cluster), str(WORKLOAD))
    sol = solve(prep.instance, "throughput")
    moves = {m.change: m.objective_change for m in sensitivity(prep, sol, "throughput") if m.factor == "amd.node_w"}
    assert set(moves) == {0.2, -0.2}
    assert moves[0.2] < 0 < moves[-0.2]
