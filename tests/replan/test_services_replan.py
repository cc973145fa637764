"""``gimletc replan`` of a services plan: each service's engines read by their model_name, replicas moved from a
service whose demand fell to one whose demand grew, on a fleet too small to grow one without shrinking the other.

The engines are `tools/simulate_scrapes.py`'s (the cost model's own predictions, Poisson-sampled), so what is
checked is the replan's reading and its moves: the fleet's inventory from the cluster file, the rates sent.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tests.conftest import REPO, assert_one_line_error, run_cli

COUNT = 4  # H100s: the small model's 500 req/s take 3, the 8B's 10 req/s one


def compiled(tmp, rates: dict[str, float], weight: float):
    """A services plan in `tmp`/plan: the small and the big model, each one chat class at `rates` (service ->
    req/s) with `weight`, on `COUNT` H100s."""
    for name, rate in rates.items():
        (tmp / f"{name}.yaml").write_text(yaml.safe_dump({
            "name": f"{name}-chat", "arrival_rate_per_s": rate, "slo": {"ttft_ms": 2000, "tpot_ms": 50},
            "classes": [{"name": "chat", "share": 1, "input_len": {"mean": 512, "max": 2048},
                         "output_len": {"mean": 256, "max": 1024}}]}))
    (tmp / "cluster.yaml").write_text(yaml.safe_dump({"name": "h100s", "power_budget_kw": 20, "devices": [
        {"device": "nvidia-h100-sxm", "count": COUNT}]}))
    (tmp / "services.yaml").write_text(yaml.safe_dump({"name": "shift", "services": [
        {"name": "small", "model": "llama-3.2-1b", "workload": "small.yaml", "weight": weight},
        {"name": "big", "model": "llama-3.1-8b", "workload": "big.yaml", "weight": weight}]}))
    plan = tmp / "plan"
    proc = run_cli("compile", "--services", str(tmp / "services.yaml"), "--cluster", str(tmp / "cluster.yaml"),
                   "--out", str(plan), "--no-onnx", "--json")
    assert proc.returncode == 0, proc.stderr
    return plan


@pytest.fixture(scope="module")
def running(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("services-replan")
    return tmp, compiled(tmp, {"small": 500, "big": 10}, weight=0)


def scrapes(tmp, plan, name: str, rates: dict[str, float]) -> list[str]:
    """``--metrics`` flags of the simulated engines of `plan`'s services at `rates` (service -> req/s of its one
    class), a folder of scrapes each."""
    folders = []
    for service, rate in rates.items():
        folder = tmp / f"{name}-{service}"
        done = subprocess.run([sys.executable, str(REPO / "tools" / "simulate_scrapes.py"), str(plan / service),
                               "--rates", f"chat={rate}", "--out", str(folder)], capture_output=True, text=True,
                              timeout=300)
        assert done.returncode == 0, done.stderr
        folders += ["--metrics", str(folder)]
    return folders


def devices(plan_dir) -> int:
    plan = json.loads((plan_dir / "plan.json").read_text())
    return sum(p["replicas"] * p["devices_per_replica"] for p in plan["pools"])


def test_replicas_move_to_the_service_whose_demand_grew(running):
    tmp, plan = running
    assert (devices(plan / "small"), devices(plan / "big")) == (3, 1)
    sent = {"small": 60.0, "big": 90.0}
    out = tmp / "next"
    proc = run_cli("replan", str(plan), *scrapes(tmp, plan, "shifted", sent), "--out", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "MOVE" in proc.stdout, proc.stdout
    after = {s: devices(out / s) for s in sent}
    assert after["big"] > 1 and after["small"] < 3 and sum(after.values()) <= COUNT, after
    report = json.loads((out / "replan.json").read_text())
    for c in report["services"]:  # measured within Poisson noise of what was sent, and served at least that
        assert c["measured_requests_per_s"] == pytest.approx(sent[c["name"]], rel=0.05)
        served = json.loads((out / c["name"] / "plan.json").read_text())["predicted"]["requests_per_s"]
        assert served >= c["forecast_requests_per_s"] * (1 - 1e-6)
    doc = json.loads((out / "services.json").read_text())
    assert {s["name"]: sum(s["devices"].values()) for s in doc["services"]} == after


def test_unchanged_demand_moves_nothing(running):
    tmp, plan = running
    proc = run_cli("replan", str(plan), *scrapes(tmp, plan, "same", {"small": 500.0, "big": 10.0}),
                   "--json")
    assert proc.returncode == 0, proc.stderr
    decision = json.loads(proc.stdout)["decision"]
    assert decision["moves"] == 0 and not decision["act"], decision


def test_scrapes_of_a_model_the_plan_does_not_serve_are_refused(running, tmp_path):
    _tmp, plan = running
    scrape = tmp_path / "other.prom"
    scrape.write_text('# TYPE vllm:request_success_total counter\n'
                      'vllm:request_success_total{model_name="other",finished_reason="stop"} 5 1000\n')
    assert_one_line_error(run_cli("replan", str(plan), "--metrics", str(scrape)), "model_name", "small", "big")


@pytest.fixture(scope="module")
def weighted(tmp_path_factory):
    """A services plan whose services count their throughput (weight 1 each), compiled for the big model's 60
    req/s (two H100s each), and a replan once its demand fell to 10 req/s: a device goes back to the small model."""
    tmp = tmp_path_factory.mktemp("services-cooldown")
    plan = compiled(tmp, {"small": 100, "big": 60}, weight=1)
    metrics = scrapes(tmp, plan, "fell", {"small": 100.0, "big": 10.0})
    proc = run_cli("replan", str(plan), *metrics, "--json")
    assert proc.returncode == 0, proc.stderr
    free = json.loads(proc.stdout)
    assert free["decision"]["act"] and free["decision"]["gain"] > 0.2, free["decision"]
    return plan, metrics, free


def test_a_services_replan_holds_a_move_back_within_the_cool_down_unless_it_clears_the_margin(weighted, tmp_path):
    """[Note: cool-down] across services: the replan gives one of the big model's two devices back to the small one.
    Recorded in the running plan's replan.json as added to the big model one window ago, that is a move back: with
    a cool-down margin the gain does not clear it holds and names the change; with one it clears it moves and says
    it moves a recent change back; recorded five windows ago (past the three-window cool-down) it moves as if
    nothing had been recorded. The history it writes names each changed shape with its service."""
    import shutil

    plan, metrics, free = weighted
    made = {c["shape"]: c for c in free["history"]}
    shrunk = next(c for c in made.values() if c["shape"].startswith("big/") and c["after"] < c["before"])
    assert any(c["shape"].startswith("small/") and c["after"] > c["before"] for c in made.values()), made
    now, gain = shrunk["time_s"], free["decision"]["gain"]

    def replan_with(recorded_ago: float, margin: float) -> dict:
        running = tmp_path / f"running-{recorded_ago:g}-{margin:g}"
        shutil.copytree(plan, running)
        (running / "replan.json").write_text(json.dumps({"history": [
            {"time_s": now - recorded_ago * 600.0, "shape": shrunk["shape"], "before": shrunk["after"],
             "after": shrunk["before"]}]}))
        proc = run_cli("replan", str(running), *metrics, "--json", "--cooldown-gain", f"{margin:g}")
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)["decision"]

    held = replan_with(1, gain - 0.10 + 0.05)  # min_gain 10% + a margin 5 points past the gain
    assert not held["act"] and "moves back a recent change" in held["reason"], held
    assert held["moved_back"] == [shrunk["shape"]] and shrunk["shape"] in held["reason"]
    moved = replan_with(1, gain - 0.10 - 0.05)
    assert moved["act"] and "moves back a change of the last 3 windows" in moved["reason"], moved
    old = replan_with(5, gain - 0.10 + 0.05)
    assert old["act"] and old["moved_back"] == [] and "moves back" not in old["reason"], old
