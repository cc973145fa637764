"""Lower bounds that show infeasibility before any solve (`compiler.place.bounds`): sound against exhaustive
enumeration, firing where arithmetic says they must, and fast end to end."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from compiler.ir.placement import ClassTarget, Instance
from compiler.ir.pool_option import ClassService, PoolOption
from compiler.place.bounds import infeasible_by_bounds, without_tpot
from tests.compiler.test_place import brute_force, random_instance
from tests.conftest import REPO, run_cli

FLAT = ((0.05, 0.5, 0.6, 0.03, 0.03), (0.95, 0.6, 0.7, 0.03, 0.04))  # meets TTFT 1 s, TPOT 50 ms up to 0.95


def _colocated(key: str, dev: str, per: int, watts: float, rate: float, curve=FLAT) -> PoolOption:
    return PoolOption(key, "colocated", ((dev, per),), watts * 0.6, watts, dev, per, 1, 8,
                      (ClassService("c", rate, curve),))


def _instance(options, inventory, budget=None, rate=None, ttft=1.0, tpot=0.05) -> Instance:
    return Instance(tuple(options), tuple(inventory), budget, (ClassTarget("c", 1.0, ttft, tpot, 1e6, 100.0),), (),
                    (), rate)


@pytest.mark.parametrize("seed", range(60))
def test_a_bound_fires_only_where_exhaustive_enumeration_finds_no_placement(seed):
    """Soundness: whenever a bound calls an instance infeasible, the best of every replica vector (brute force,
    independent of the bounds) serves nothing, or less than the arrival rate."""
    inst = random_instance(seed)
    for rate in (None, 0.5, 5.0, 50.0):
        case = replace(inst, arrival_rate_per_s=rate)
        if infeasible_by_bounds("m", case) is not None:
            best = brute_force(case)  # requests/s
            assert best < (1e-3 if rate is None else rate * (1 - 1e-6)), (seed, rate, best)


def test_power_bound_names_the_cheapest_pool_and_both_numbers():
    cheap = _colocated("colocated:a:1", "a", 1, 700.0, 10.0)
    big = _colocated("colocated:b:2", "b", 2, 2000.0, 30.0)
    msg = infeasible_by_bounds("m", _instance([cheap, big], [("a", 8), ("b", 8)], budget=500.0))
    assert msg is not None and "power budget 500 W < 700 W needed" in msg and "colocated:a:1" in msg
    assert infeasible_by_bounds("m", _instance([cheap, big], [("a", 8), ("b", 8)], budget=700.0)) is None


def test_power_bound_at_an_arrival_rate_is_the_fewest_watts_per_request():
    """a: 700 W for 10 req/s x 0.95 cap = 73.7 W per req/s; b: 2000 W for 30 x 0.95 = 70.2 W per req/s. 100 req/s
    need at least 7.02 kW, whatever the mix of replicas."""
    a = _colocated("colocated:a:1", "a", 1, 700.0, 10.0)
    b = _colocated("colocated:b:2", "b", 2, 2000.0, 30.0)
    inventory = [("a", 100), ("b", 100)]
    need_w = 100 * 2000.0 / (30 * 0.95)
    assert infeasible_by_bounds("m", _instance([a, b], inventory, budget=need_w * 1.01, rate=100.0)) is None
    msg = infeasible_by_bounds("m", _instance([a, b], inventory, budget=need_w * 0.97, rate=100.0))
    assert msg is not None and f"< {need_w / 1e3:.1f} kW needed to serve 100 req/s" in msg


def test_cost_bound_names_the_cheapest_route_in_dollars():
    """Priced at $2/h and $5/h per device: one replica costs at least $2/h; a $1.50/h budget buys nothing."""
    a = _colocated("colocated:a:1", "a", 1, 700.0, 10.0)
    b = _colocated("colocated:b:2", "b", 2, 2000.0, 30.0)
    inst = replace(_instance([a, b], [("a", 8), ("b", 8)]), prices_per_hour=(("a", 2.0), ("b", 5.0)))
    msg = infeasible_by_bounds("m", replace(inst, cost_budget_per_hour=1.5))
    assert msg is not None and "cost budget $1.50/h < $2.00/h needed" in msg and "colocated:a:1" in msg
    assert infeasible_by_bounds("m", replace(inst, cost_budget_per_hour=2.0)) is None


def test_demand_bound_counts_every_device_on_its_best_pool():
    """4 devices of a at 10 req/s x 0.95 each serve at most 38 req/s."""
    a = _colocated("colocated:a:1", "a", 1, 700.0, 10.0)
    assert infeasible_by_bounds("m", _instance([a], [("a", 4)], rate=37.0)) is None
    msg = infeasible_by_bounds("m", _instance([a], [("a", 4)], rate=40.0))
    assert msg is not None and "at most 38.00 req/s" in msg


def test_slo_bound_names_the_fastest_tpot_any_pool_reaches():
    a = _colocated("colocated:a:1", "a", 1, 700.0, 10.0)
    msg = infeasible_by_bounds("m", _instance([a], [("a", 4)], tpot=0.01))
    assert msg is not None and "TPOT SLO 10 ms < 30.0 ms" in msg
    assert infeasible_by_bounds("m", without_tpot(_instance([a], [("a", 4)], tpot=0.01))) is None


def test_inventory_bound_counts_prefill_and_decode_together():
    """Prefill needs 3 of a, decode 2 of a, no colocated pool: 5 devices for one route, the cluster has 4."""
    pre = PoolOption("prefill:a:3", "prefill", (("a", 3),), 1000, 2100, "a", 3, 1, 4,
                     (ClassService("c", 5.0, ((0.05, 0.2, 0.3, 0, 0), (0.95, 0.3, 0.4, 0, 0))),))
    dec = PoolOption("decode:a:2", "decode", (("a", 2),), 800, 1400, "a", 2, 1, 64,
                     (ClassService("c", 5.0, ((0.05, 0.0, 0.0, 0.02, 0.02), (0.95, 0.01, 0.02, 0.03, 0.04))),))
    msg = infeasible_by_bounds("m", _instance([pre, dec], [("a", 4)]))
    assert msg is not None and "inventory: class c needs at least 5 a" in msg
    assert infeasible_by_bounds("m", _instance([pre, dec], [("a", 5)])) is None


def test_infeasible_power_budget_is_reported_before_any_solve(tmp_path):
    """The issue's example: llama-3.1-8b at 200 W on the NVIDIA fleet, whose least pool is one H100: on the node
    footing (the default) 10.2 kW per DGX H100 / 8 GPUs = 1275 W, so 1.3 kW needed."""
    proc = run_cli("compile", "llama-3.1-8b", "--cluster", str(REPO / "examples" / "clusters" / "nvidia.yaml"),
                   "--workload", str(REPO / "examples" / "workloads" / "chat.yaml"), "--power-budget", "200W",
                   "--out", str(tmp_path))
    assert proc.returncode == 3, proc.stderr
    assert "power budget 200 W < 1.3 kW needed" in proc.stderr and "before any solve" in proc.stderr
    status = json.loads((tmp_path / "status.json").read_text())
    assert status["exit_code"] == 3 and "place" not in status["timings_s"]
    assert "cost" not in status["timings_s"]  # one H100 is already over the budget: no costing ([Note: power floor])


def test_a_budget_under_a_kilowatt_is_said_in_watts(tmp_path):
    """``--power-budget 10W`` was once reported as "power budget 0.0 kW < 1.0 kW"."""
    proc = run_cli("compile", "llama-3.1-8b", "--cluster", str(REPO / "examples" / "clusters" / "mixed.yaml"),
                   "--workload", str(REPO / "examples" / "workloads" / "chat.yaml"), "--power-budget", "10W",
                   "--out", str(tmp_path))
    assert proc.returncode == 3, proc.stderr
    assert "power budget 10 W < " in proc.stderr and "0.0 kW" not in proc.stderr, proc.stderr


def test_pareto_with_an_impossible_budget_stops_before_the_sweep(tmp_path):
    proc = run_cli("pareto", "llama-3.1-8b", "--cluster", str(REPO / "examples" / "clusters" / "nvidia.yaml"),
                   "--workload", str(REPO / "examples" / "workloads" / "chat.yaml"), "--power-budget", "200W",
                   "--out", str(tmp_path))
    assert proc.returncode == 3 and "power budget 200 W <" in proc.stderr, proc.stderr
    status = json.loads((tmp_path / "status.json").read_text())
    assert "sweep" not in status["timings_s"] and not (tmp_path / "pareto.csv").exists()
